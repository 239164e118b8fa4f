// Helpers shared by the sort, cumulative, indexing and reduction rules (lowering.h holds the
// ones every rule uses).
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
Value IsNan(Ctx& ctx, Value x);          // false for non-float types
Value Const(Ctx& ctx, double v, const Value& like);
Value ConstI(Ctx& ctx, int64_t v, const Value& like);

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
// Coordinates for points of `shape` where coordinate `dim` is `index` and the others are the
// point's own: shape + [rank].
Value CoordsAlongDim(Ctx& ctx, Value index, int64_t dim, int64_t rank);

}  // namespace tpu::lowering
