// Helpers shared by the nn families (pool.cpp, norm.cpp, upsample.cpp, attention.cpp,
// nn.cpp): host-computed index tables as constants, gathers and scatter-adds along one dim,
// reductions that broadcast back.
#pragma once

#include <vector>

#include "lowering.h"

namespace tpu::lowering::nn {

Value Bin(Ctx& ctx, const char* op, Value x, Value y);
Value Scalar(Ctx& ctx, double v, const Value& like);  // a splat of v shaped like `like`

// Dense 1-D constants of host-computed tables (indices, weights).
Value ConstI64(Ctx& ctx, const std::vector<int64_t>& v);
Value ConstF32(Ctx& ctx, const std::vector<float>& v);
Value ConstFloats(Ctx& ctx, const std::vector<double>& v, ElemType elem);  // f16/bf16/f32/f64
Value ConstPred(Ctx& ctx, const std::vector<bool>& v);
// A 1-D table `v` broadcast along dim `dim` of `dims`.
Value Along(Ctx& ctx, Value v, const std::vector<int64_t>& dims, int64_t dim);

std::vector<int64_t> Iota(int64_t n, int64_t from = 0);
Value SumOver(Ctx& ctx, Value x, const std::vector<int64_t>& dims);
// Broadcasts `r` (x reduced over `reduced`) back to `full`.
Value Unreduce(Ctx& ctx, Value r, const std::vector<int64_t>& full, const std::vector<int64_t>& reduced);

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

// IEEE tests used for PyTorch's NaN rules.
Value IsNan(Ctx& ctx, Value x);

// Reduction modes of the loss functions (at::Reduction).
enum Reduction { kNone = 0, kMean = 1, kSum = 2 };
Value Reduce(Ctx& ctx, Value loss, int64_t reduction);

}  // namespace tpu::lowering::nn
