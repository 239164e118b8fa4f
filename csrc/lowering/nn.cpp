// Neural-network ops: softmax family, losses, layer norm. Statistics accumulate in f32
// for half types (rule 10).
#include <algorithm>

#include "lowering.h"

namespace tpu::lowering {
namespace {

Value Bin(Ctx& ctx, const char* op, Value x, Value y) { return ctx.b.Binary(op, x, y); }

// Broadcasts a value reduced over `dims` back to `dims_full`.
Value Unreduce(Ctx& ctx, Value r, const std::vector<int64_t>& full, const std::vector<int64_t>& reduced) {
  std::vector<int64_t> mapping;
  for (int64_t i = 0; i < static_cast<int64_t>(full.size()); ++i) {
    bool gone = false;
    for (int64_t d : reduced) gone |= d == i;
    if (!gone) mapping.push_back(i);
  }
  return ctx.b.BroadcastInDim(r, full, mapping);
}

Value SumOver(Ctx& ctx, Value x, const std::vector<int64_t>& dims) {
  return ctx.b.Reduce(x, ctx.b.Constant(0, {x.type.elem, {}}), dims, "add");
}

// Softmax pieces on the accumulator type: shifted = x - max, sum of exp(shifted).
struct Shifted {
  Value shifted, sum_exp;
};
Shifted ShiftedExp(Ctx& ctx, Value x, int64_t dim) {
  Value m = ctx.b.Reduce(x, ctx.b.Extreme(false, {x.type.elem, {}}), {dim}, "maximum");
  Value shifted = Bin(ctx, "subtract", x, Unreduce(ctx, m, x.type.dims, {dim}));
  Value e = ctx.b.Unary("exponential", shifted);
  return {shifted, SumOver(ctx, e, {dim})};
}

// _softmax(x, dim, half_to_float) = exp(x - max) / sum(exp(x - max))
std::vector<Value> LowerSoftmax(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.rank() == 0) return {ctx.b.Constant(1, ctx.out())};
  int64_t dim = WrapDim(a.int_(1), x.type.rank());
  x = ConvertTo(ctx, x, AccumulatorType(ctx.out().elem));
  Shifted s = ShiftedExp(ctx, x, dim);
  Value y = Bin(ctx, "divide", ctx.b.Unary("exponential", s.shifted), Unreduce(ctx, s.sum_exp, x.type.dims, {dim}));
  return {ConvertTo(ctx, y, ctx.out().elem)};
}

// _log_softmax(x, dim) = x - max - log(sum(exp(x - max)))
std::vector<Value> LowerLogSoftmax(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.rank() == 0) return {ctx.b.Constant(0, ctx.out())};
  int64_t dim = WrapDim(a.int_(1), x.type.rank());
  x = ConvertTo(ctx, x, AccumulatorType(ctx.out().elem));
  Shifted s = ShiftedExp(ctx, x, dim);
  Value y = Bin(ctx, "subtract", s.shifted, Unreduce(ctx, ctx.b.Unary("log", s.sum_exp), x.type.dims, {dim}));
  return {ConvertTo(ctx, y, ctx.out().elem)};
}

// grad_in = y * (g - sum(g * y))
std::vector<Value> LowerSoftmaxBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value g = ConvertTo(ctx, a.tensor(0), acc), y = ConvertTo(ctx, a.tensor(1), acc);
  if (g.type.rank() == 0) return {ctx.b.Constant(0, ctx.out())};
  int64_t dim = WrapDim(a.int_(2), g.type.rank());
  Value dot = Unreduce(ctx, SumOver(ctx, Bin(ctx, "multiply", g, y), {dim}), g.type.dims, {dim});
  return {ConvertTo(ctx, Bin(ctx, "multiply", y, Bin(ctx, "subtract", g, dot)), ctx.out().elem)};
}

// grad_in = g - exp(y) * sum(g)
std::vector<Value> LowerLogSoftmaxBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value g = ConvertTo(ctx, a.tensor(0), acc), y = ConvertTo(ctx, a.tensor(1), acc);
  if (g.type.rank() == 0) return {ctx.b.Constant(0, ctx.out())};
  int64_t dim = WrapDim(a.int_(2), g.type.rank());
  Value total = Unreduce(ctx, SumOver(ctx, g, {dim}), g.type.dims, {dim});
  return {ConvertTo(ctx, Bin(ctx, "subtract", g, Bin(ctx, "multiply", ctx.b.Unary("exponential", y), total)),
                    ctx.out().elem)};
}

enum Reduction { kNone = 0, kMean = 1, kSum = 2 };

// Shared by nll_loss forward and backward: a [N, C] one-hot of the targets and the
// per-sample weights (0 where target == ignore_index).
struct NllPieces {
  Value onehot;   // pred [N, C]
  Value weights;  // acc [N]
};
NllPieces Nll(Ctx& ctx, Value target, Value weight, int64_t ignore_index, int64_t n, int64_t c, ElemType acc) {
  target = ctx.b.Reshape(ConvertTo(ctx, target, ElemType::S64), {n});
  TensorType nc{ElemType::S64, {n, c}};
  Value onehot = ctx.b.Compare(Cmp::EQ, ctx.b.Iota(nc, 1), ctx.b.BroadcastInDim(target, {n, c}, {0}));
  Value w;
  if (weight.valid()) {
    Value wb = ctx.b.BroadcastInDim(ConvertTo(ctx, weight, acc), {n, c}, {1});
    w = SumOver(ctx, ctx.b.Select(onehot, wb, ctx.b.Constant(0, {acc, {n, c}})), {1});
  } else {
    w = ctx.b.Constant(1, {acc, {n}});
  }
  Value valid = ctx.b.Compare(Cmp::NE, target, ctx.b.ConstantInt(ignore_index, {ElemType::S64, {n}}));
  w = ctx.b.Select(valid, w, ctx.b.Constant(0, {acc, {n}}));
  return {onehot, w};
}

// The class dim of an nll input: 0 for [C], else 1 ([N, C] or nll_loss2d's [N, C, H, W]).
int64_t ClassDim(const Value& x) { return x.type.rank() == 1 ? 0 : 1; }

// The permutation that moves the class dim last: [N, C, H, W] -> [N, H, W, C].
std::vector<int64_t> ClassesLast(int64_t rank) {
  std::vector<int64_t> perm = {0};
  for (int64_t i = 2; i < rank; ++i) perm.push_back(i);
  if (rank > 1) perm.push_back(1);
  return perm;
}

// x as [samples, classes]: every position of a spatial input is one sample.
Value AsSamples(Ctx& ctx, Value x) {
  if (x.type.rank() > 2) x = ctx.b.Transpose(x, ClassesLast(x.type.rank()));
  int64_t c = x.type.dims.back();
  return ctx.b.Reshape(x, {x.type.numel() / c, c});
}

// nll_loss_forward / nll_loss2d_forward(x, target, weight?, reduction, ignore_index)
//   -> (output, total_weight)
std::vector<Value> LowerNllLoss(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value x = AsSamples(ctx, ConvertTo(ctx, a.tensor(0), acc));
  int64_t n = x.type.dims[0], c = x.type.dims[1];
  NllPieces p = Nll(ctx, a.tensor(1), a.optional_tensor(2), a.int_(4), n, c, acc);
  Value picked = SumOver(ctx, ctx.b.Select(p.onehot, x, ctx.b.Constant(0, x.type)), {1});
  Value loss = ctx.b.Unary("negate", Bin(ctx, "multiply", picked, p.weights));
  Value total = SumOver(ctx, p.weights, {0});
  int64_t reduction = a.int_(3);
  Value out;
  if (reduction == kNone) out = loss;
  else if (reduction == kSum) out = SumOver(ctx, loss, {0});
  else out = Bin(ctx, "divide", SumOver(ctx, loss, {0}), total);
  return {ctx.b.Reshape(ConvertTo(ctx, out, ctx.out(0).elem), ctx.out(0).dims),
          ctx.b.Reshape(ConvertTo(ctx, total, ctx.out(1).elem), ctx.out(1).dims)};
}

// nll_loss_backward / nll_loss2d_backward(g, x, target, weight?, reduction, ignore_index, total_weight)
std::vector<Value> LowerNllLossBackward(Ctx& ctx, const Args& a) {
  Value x = a.tensor(1);
  ElemType acc = AccumulatorType(ctx.out().elem);
  int64_t c = x.type.dims[ClassDim(x)], n = x.type.numel() / c;
  NllPieces p = Nll(ctx, a.tensor(2), a.optional_tensor(3), a.int_(5), n, c, acc);
  Value g = ConvertTo(ctx, a.tensor(0), acc);
  int64_t reduction = a.int_(4);
  Value per_sample;
  if (reduction == kNone) {
    per_sample = ctx.b.Reshape(g, {n});
  } else {
    Value scalar = ctx.b.Reshape(g, {});
    if (reduction == kMean) scalar = Bin(ctx, "divide", scalar, ctx.b.Reshape(ConvertTo(ctx, a.tensor(6), acc), {}));
    per_sample = ctx.b.BroadcastInDim(scalar, {n}, {});
  }
  Value coef = ctx.b.Unary("negate", Bin(ctx, "multiply", per_sample, p.weights));
  Value grad = ctx.b.Select(p.onehot, ctx.b.BroadcastInDim(coef, {n, c}, {0}), ctx.b.Constant(0, {acc, {n, c}}));
  grad = ConvertTo(ctx, grad, ctx.out().elem);
  if (x.type.rank() <= 2) return {ctx.b.Reshape(grad, ctx.out().dims)};
  // Back from [samples, C] to [N, H, W, C], then to [N, C, H, W].
  std::vector<int64_t> perm = ClassesLast(x.type.rank()), last_dims, inverse(perm.size());
  for (int64_t d : perm) last_dims.push_back(x.type.dims[d]);
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return {ctx.b.Transpose(ctx.b.Reshape(grad, last_dims), inverse)};
}

// mse_loss(x, t, reduction) = reduce((x - t)^2)
std::vector<Value> LowerMseLoss(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0), t = a.tensor(1);
  ElemType acc = AccumulatorType(ctx.out().elem);
  // The broadcast shape of x and t (trailing dims aligned; PyTorch warns but allows it).
  std::vector<int64_t> dims(std::max(x.type.rank(), t.type.rank()), 1);
  for (const Value* v : {&x, &t})
    for (int64_t i = 0; i < v->type.rank(); ++i)
      dims[dims.size() - v->type.rank() + i] = std::max(dims[dims.size() - v->type.rank() + i], v->type.dims[i]);
  TensorType full{acc, dims};
  Value d = Bin(ctx, "subtract", CastTo(ctx, x, full), CastTo(ctx, t, full));
  Value sq = Bin(ctx, "multiply", d, d);
  int64_t reduction = a.int_(2);
  if (reduction == kNone) return {ConvertTo(ctx, sq, ctx.out().elem)};
  std::vector<int64_t> all;
  for (int64_t i = 0; i < full.rank(); ++i) all.push_back(i);
  Value s = SumOver(ctx, sq, all);
  if (reduction == kMean) s = Bin(ctx, "divide", s, ctx.b.Constant(static_cast<double>(full.numel()), s.type));
  return {ConvertTo(ctx, s, ctx.out().elem)};
}

// d/dx mse = 2 (x - t) g, divided by numel for mean.
std::vector<Value> LowerMseLossBackward(Ctx& ctx, const Args& a) {
  TensorType t = {AccumulatorType(ctx.out().elem), ctx.out().dims};
  Value g = CastTo(ctx, a.tensor(0), t), x = CastTo(ctx, a.tensor(1), t), y = CastTo(ctx, a.tensor(2), t);
  double scale = a.int_(3) == kMean ? 2.0 / static_cast<double>(t.numel()) : 2.0;
  Value r = Bin(ctx, "multiply", Bin(ctx, "multiply", Bin(ctx, "subtract", x, y), g), ctx.b.Constant(scale, t));
  return {ConvertTo(ctx, r, ctx.out().elem)};
}

// native_layer_norm(x, normalized_shape, weight?, bias?, eps) -> (y, mean, rstd)
std::vector<Value> LowerLayerNorm(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t k = static_cast<int64_t>(a.ints(1).size()), r = x.type.rank();
  ElemType acc = AccumulatorType(ctx.out().elem);
  x = ConvertTo(ctx, x, acc);
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (int64_t i = r - k; i < r; ++i) {
    dims.push_back(i);
    count *= x.type.dims[i];
  }
  Value sum = SumOver(ctx, x, dims);
  Value mean = Bin(ctx, "divide", sum, ctx.b.Constant(static_cast<double>(count), sum.type));
  Value centered = Bin(ctx, "subtract", x, Unreduce(ctx, mean, x.type.dims, dims));
  Value var = SumOver(ctx, Bin(ctx, "multiply", centered, centered), dims);
  var = Bin(ctx, "divide", var, ctx.b.Constant(static_cast<double>(count), var.type));
  Value rstd = ctx.b.Unary("rsqrt", Bin(ctx, "add", var, ctx.b.Constant(a.double_(4), var.type)));
  Value y = Bin(ctx, "multiply", centered, Unreduce(ctx, rstd, x.type.dims, dims));
  std::vector<int64_t> mapping;
  for (int64_t i = r - k; i < r; ++i) mapping.push_back(i);
  if (!a.is_none(2)) y = Bin(ctx, "multiply", y, ctx.b.BroadcastInDim(ConvertTo(ctx, a.tensor(2), acc), x.type.dims, mapping));
  if (!a.is_none(3)) y = Bin(ctx, "add", y, ctx.b.BroadcastInDim(ConvertTo(ctx, a.tensor(3), acc), x.type.dims, mapping));
  return {ConvertTo(ctx, y, ctx.out(0).elem), ctx.b.Reshape(ConvertTo(ctx, mean, ctx.out(1).elem), ctx.out(1).dims),
          ctx.b.Reshape(ConvertTo(ctx, rstd, ctx.out(2).elem), ctx.out(2).dims)};
}

// native_layer_norm_backward(g, x, normalized_shape, mean, rstd, weight?, bias?, mask)
std::vector<Value> LowerLayerNormBackward(Ctx& ctx, const Args& a) {
  Value x = a.tensor(1);
  ElemType out_elem = x.type.elem;
  int64_t k = static_cast<int64_t>(a.ints(2).size()), r = x.type.rank();
  ElemType acc = AccumulatorType(out_elem);
  x = ConvertTo(ctx, x, acc);
  Value g = ConvertTo(ctx, a.tensor(0), acc);
  std::vector<int64_t> norm_dims, outer_dims, mapping;
  int64_t count = 1;
  for (int64_t i = 0; i < r; ++i) {
    if (i >= r - k) {
      norm_dims.push_back(i);
      mapping.push_back(i);
      count *= x.type.dims[i];
    } else {
      outer_dims.push_back(i);
    }
  }
  std::vector<int64_t> outer_shape(x.type.dims.begin(), x.type.dims.end() - k);
  Value mean = Unreduce(ctx, ctx.b.Reshape(ConvertTo(ctx, a.tensor(3), acc), outer_shape), x.type.dims, norm_dims);
  Value rstd = Unreduce(ctx, ctx.b.Reshape(ConvertTo(ctx, a.tensor(4), acc), outer_shape), x.type.dims, norm_dims);
  Value xhat = Bin(ctx, "multiply", Bin(ctx, "subtract", x, mean), rstd);
  Value gw = g;
  Value weight = a.optional_tensor(5);
  if (weight.valid()) gw = Bin(ctx, "multiply", g, ctx.b.BroadcastInDim(ConvertTo(ctx, weight, acc), x.type.dims, mapping));
  Value sum_g = Unreduce(ctx, SumOver(ctx, gw, norm_dims), x.type.dims, norm_dims);
  Value sum_gx = Unreduce(ctx, SumOver(ctx, Bin(ctx, "multiply", gw, xhat), norm_dims), x.type.dims, norm_dims);
  Value n = ctx.b.Constant(static_cast<double>(count), x.type);
  Value inner = Bin(ctx, "subtract", Bin(ctx, "subtract", Bin(ctx, "multiply", n, gw), sum_g), Bin(ctx, "multiply", xhat, sum_gx));
  Value dx = Bin(ctx, "multiply", Bin(ctx, "divide", rstd, n), inner);
  std::vector<Value> out = {ConvertTo(ctx, dx, out_elem)};
  std::vector<int64_t> wshape(x.type.dims.end() - k, x.type.dims.end());
  Value dw = ctx.b.Reshape(SumOver(ctx, Bin(ctx, "multiply", g, xhat), outer_dims), wshape);
  Value db = ctx.b.Reshape(SumOver(ctx, g, outer_dims), wshape);
  out.push_back(ConvertTo(ctx, dw, weight.valid() ? weight.type.elem : out_elem));
  Value bias = a.optional_tensor(6);
  out.push_back(ConvertTo(ctx, db, bias.valid() ? bias.type.elem : out_elem));
  return out;
}

}  // namespace

TPU_LOWERING("aten::_log_softmax", LowerLogSoftmax);
TPU_LOWERING("aten::_log_softmax_backward_data", LowerLogSoftmaxBackward);
TPU_LOWERING("aten::_softmax", LowerSoftmax);
TPU_LOWERING("aten::_softmax_backward_data", LowerSoftmaxBackward);
TPU_LOWERING("aten::mse_loss", LowerMseLoss);
TPU_LOWERING("aten::mse_loss_backward", LowerMseLossBackward);
TPU_LOWERING("aten::native_layer_norm", LowerLayerNorm);
TPU_LOWERING("aten::native_layer_norm_backward", LowerLayerNormBackward);
TPU_LOWERING("aten::nll_loss2d_backward", LowerNllLossBackward);
TPU_LOWERING("aten::nll_loss2d_forward", LowerNllLoss);
TPU_LOWERING("aten::nll_loss_backward", LowerNllLossBackward);
TPU_LOWERING("aten::nll_loss_forward", LowerNllLoss);

}  // namespace tpu::lowering
