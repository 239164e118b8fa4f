// The helper vocabulary of the lowering families (lowering.h holds the ones every rule uses):
// elementwise shorthands, constants of host-computed tables, reductions that broadcast back,
// gathers, scatters, scans and loops.
#pragma once

#include <functional>

#include "lowering.h"

namespace tpu::lowering {

// Elementwise shorthands in the operands' type.
Value Add(Ctx& ctx, Value x, Value y);
Value Sub(Ctx& ctx, Value x, Value y);
Value Mul(Ctx& ctx, Value x, Value y);
Value Div(Ctx& ctx, Value x, Value y);
Value And(Ctx& ctx, Value x, Value y);
Value Or(Ctx& ctx, Value x, Value y);
Value Not(Ctx& ctx, Value x);
Value Bin(Ctx& ctx, const char* op, Value x, Value y);
Value IsNan(Ctx& ctx, Value x);          // false for non-float types
Value Const(Ctx& ctx, double v, const Value& like);  // a splat of v shaped like `like`
Value ConstI(Ctx& ctx, int64_t v, const Value& like);
// An f32 value rounded to the nearest f16 value (ties to even, overflow to inf), kept in f32:
// what one f16 operation's result is. Arithmetic meant to round like f16 on every host runs in
// f32 through this, not in native f16, which a compiler may contract (a*b+c in one rounding).
Value RoundToF16(Ctx& ctx, Value x);

// StableHLO/CHLO op `op` over operands of one type, in that type.
Value Apply(Ctx& ctx, const char* op, Value x);
Value Apply(Ctx& ctx, const char* op, Value x, Value y);
// Opmath: half types compute in f32, as PyTorch's CPU kernels do, then round once.
TensorType OpmathType(const TensorType& out);
// Argument `arg` converted and broadcast to the computation type of output `out`.
Value OpmathOperand(Ctx& ctx, const Args& a, size_t arg, size_t out = 0);
// `v` rounded to output `out`'s element type.
std::vector<Value> OpmathResult(Ctx& ctx, Value v, size_t out = 0);

// log(exp(a) + exp(b)) without overflow; NaN propagates, -inf is neutral.
Value LogAddExp(Ctx& ctx, Value a, Value b);

// Dims of `rank` other than the ones in `dims`, in order.
std::vector<int64_t> KeptDims(int64_t rank, const std::vector<int64_t>& dims);
// `v` (reduced over `dims`) broadcast back to `dims_full`.
Value Unreduce(Ctx& ctx, Value v, const std::vector<int64_t>& dims_full, const std::vector<int64_t>& reduced);

// A scalar i1: true when any element of `pred` is true.
Value AnyTrue(Ctx& ctx, Value pred);
// A scalar i1: true when an index is outside [-size, size) (allow_negative) or [0, size).
Value IndexOutOfRange(Ctx& ctx, Value index, int64_t size, bool allow_negative);
// Adds `size` to negative indices; the result is s64.
Value WrapIndex(Ctx& ctx, Value index, int64_t size);

// Inclusive scan along `dim` of same-shaped arrays with an associative `combine(earlier, later)`;
// `identity` holds one neutral scalar per array (combine(identity, x) == x). log2(n) steps of
// shifted elementwise combines (Hillis-Steele), so it stays O(n log n) on every backend.
// `reverse` scans from the end.
using Combine = std::function<std::vector<Value>(const std::vector<Value>& earlier, const std::vector<Value>& later)>;
std::vector<Value> Scan(Ctx& ctx, std::vector<Value> xs, int64_t dim, const std::vector<Value>& identity,
                        const Combine& combine, bool reverse = false);
// Exclusive running count of true elements of a pred array along dim 0 of a 1-D array, as s64.
Value ExclusiveCount(Ctx& ctx, Value pred);

// stablehlo.while: carries `init` through `body` while `cond` (a scalar i1 of the carried
// values) holds. Values from outside may be used inside both regions.
std::vector<Value> While(Ctx& ctx, const std::vector<Value>& init,
                         const std::function<Value(const std::vector<Value>&)>& cond,
                         const std::function<std::vector<Value>(const std::vector<Value>&)>& body);
// A counted loop: body(i, values) for i in [0, n) with i an s64 scalar.
std::vector<Value> ForLoop(Ctx& ctx, int64_t n, const std::vector<Value>& init,
                           const std::function<std::vector<Value>(Value i, const std::vector<Value>&)>& body);

// Sorts `operands` (same shape) along `dim`, keyed by the first one, stably; NaN sorts last
// when ascending and first when descending, as in PyTorch.
std::vector<Value> SortAlong(Ctx& ctx, const std::vector<Value>& operands, int64_t dim, bool descending);

// Point gather: result[p] = x[coords(p)], `coords` an s64 array of shape P + [rank(x)].
Value GatherPoints(Ctx& ctx, Value x, Value coords);
// Point scatter into x: x[coords(p)] = combine(x[coords(p)], updates[p]); `combine` is ""
// (overwrite) or a StableHLO binary op name ("add", "multiply", "maximum", ...). Updates at
// out-of-range coordinates are dropped.
Value ScatterPoints(Ctx& ctx, Value x, Value coords, Value updates, const std::string& combine);
// The same scatter with the combiner region `combine(old, update)` given as a builder function.
using Combiner = std::function<Value(Value old, Value update)>;
Value ScatterPointsWith(Ctx& ctx, Value x, Value coords, Value updates, const Combiner& combine);
// Slice scatter into x along `dim`: x.select(dim, index[i]) = combine(that slice,
// updates.select(dim, i)) for a 1-D integer `index` of n entries and `updates` of x's dims with
// n at `dim`. One window per index: TPUs scatter whole slices far faster than one point per
// element (libtpu's cost model: a decode step's index_copy_ into a 2 MB static KV cache moved
// 25 MB as points, 1.6 MB as one slice).
Value ScatterSlices(Ctx& ctx, Value x, int64_t dim, Value index, Value updates, const std::string& combine);
// Coordinates for points of `shape` where coordinate `dim` is `index` and the others are the
// point's own: shape + [rank].
Value CoordsAlongDim(Ctx& ctx, Value index, int64_t dim, int64_t rank);

// ---- nn families (pool, norm, upsample, attention, nn, embedding, grid_sampler, fold, amp)

// Dense 1-D constants of host-computed tables (indices, weights).
Value ConstI64(Ctx& ctx, const std::vector<int64_t>& v);
Value ConstF32(Ctx& ctx, const std::vector<float>& v);
Value ConstFloats(Ctx& ctx, const std::vector<double>& v, ElemType elem);  // f16/bf16/f32/f64
Value ConstPred(Ctx& ctx, const std::vector<bool>& v);
// A 1-D table `v` broadcast along dim `dim` of `dims`.
Value Along(Ctx& ctx, Value v, const std::vector<int64_t>& dims, int64_t dim);

std::vector<int64_t> Iota(int64_t n, int64_t from = 0);
Value SumOver(Ctx& ctx, Value x, const std::vector<int64_t>& dims);

// Sums `v` down to the shape `to` it was broadcast from (NumPy rules, trailing dims aligned).
Value SumToShape(Ctx& ctx, Value v, const std::vector<int64_t>& to);

// x gathered along `dim` at the 1-D s64 indices `idx` (which must be in range).
Value Take(Ctx& ctx, Value x, int64_t dim, Value idx);
// x at the static positions `pos` along `dim`: a strided slice when they step evenly, else a gather.
Value Pick(Ctx& ctx, Value x, int64_t dim, const std::vector<int64_t>& pos);
// The transpose of Pick: g added into zeros of length `size` along `dim` at `pos`.
Value PickTranspose(Ctx& ctx, Value g, int64_t dim, const std::vector<int64_t>& pos, int64_t size);
// The transpose of Take: g (x-shaped except `size` -> idx's length at `dim`) added into zeros
// of length `size` along `dim` at `idx`.
Value ScatterAddAlong(Ctx& ctx, Value g, int64_t dim, Value idx, int64_t size);
// Flat scatter-add: zeros[n] with updates[i] added at idx[i] (both 1-D).
Value ScatterAddFlat(Ctx& ctx, Value updates, Value idx, int64_t n);

// Uniform f32 draws in [0, 1) of `dims` from a Philox state (tensor<2xui64>), as random.cpp draws.
Value Uniform01(Ctx& ctx, Value state, const std::vector<int64_t>& dims);

// Reduction modes of the loss functions (at::Reduction).
enum Reduction { kNone = 0, kMean = 1, kSum = 2 };
Value Reduce(Ctx& ctx, Value loss, int64_t reduction);

// ---- matrices: the last two dims of an array (linalg_factor.cpp, linalg_spectral.cpp)
namespace matrix {

int64_t R(const Value& v);
std::vector<int64_t> Batch(const Value& v);
std::vector<int64_t> WithBatch(const std::vector<int64_t>& batch, std::initializer_list<int64_t> tail);
TensorType S64(const std::vector<int64_t>& dims);
Value Scalar64(Ctx& ctx, int64_t v);
Value Zeros(Ctx& ctx, const Value& like);
// The compute type of a linalg result: f32 for half types.
ElemType Compute(ElemType e);
Value RowIota(Ctx& ctx, const Value& a);
Value ColIota(Ctx& ctx, const Value& a);
// A scalar or per-batch s64 index broadcast to `dims` (batch dims leading).
Value Bcast(Ctx& ctx, Value idx, const std::vector<int64_t>& dims);
// Column j of a [.., m, n] (j a scalar or per-batch index): [.., m].
Value Column(Ctx& ctx, Value a, Value j);
// Row i of a: [.., n].
Value Row(Ctx& ctx, Value a, Value i);
// [.., m] as every column / [.., n] as every row of a [.., m, n] array.
Value AsColumns(Ctx& ctx, Value v, const std::vector<int64_t>& dims);
Value AsRows(Ctx& ctx, Value v, const std::vector<int64_t>& dims);
Value Outer(Ctx& ctx, Value u, Value v);
Value SumLast(Ctx& ctx, Value v);
Value Swap(Ctx& ctx, Value a);
// Batched a @ b at full f32 precision: the inner products of linalg algorithms, which the float32
// matmul setting (about matmul ops) does not reach.
Value MatMul(Ctx& ctx, Value a, Value b);
Value Identity(Ctx& ctx, const TensorType& t);
Value Diagonal(Ctx& ctx, Value a);
// Keeps the part of a with col - row >= k (upper) or <= k (lower).
Value Triangle(Ctx& ctx, Value a, bool upper, int64_t k);
Value SliceMat(Ctx& ctx, Value a, int64_t rows, int64_t cols);
// Broadcasts the batch dims of a and b to each other's (matrix dims kept).
void BroadcastBatch(Ctx& ctx, Value& a, Value& b);
// op(a) x = b (left) or x op(a) = b, a triangular.
Value TriSolve(Ctx& ctx, Value a, Value b, bool left, bool lower, bool unit, bool transpose);

// Sets entry j of a [.., k] vector to `value` [..].
Value SetAt(Ctx& ctx, Value vec, Value j, Value value);
Value GetAt(Ctx& ctx, Value vec, Value j);
// Rows of b [.., n, c] picked by perm [.., n]: result[j] = b[perm[j]].
Value PermuteRows(Ctx& ctx, Value b, Value perm);

}  // namespace matrix

}  // namespace tpu::lowering
