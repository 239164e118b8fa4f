// Neural-network ops: softmax family, activations, pointwise losses, layer norm, embedding
// gradient, reflection / replication padding, dropout, rrelu (nll_loss is in loss.cpp).
// Statistics accumulate in f32 for half types (rule 10).
#include <algorithm>

#include "helpers.h"

namespace tpu::lowering {
namespace {

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


// ---- activations: computed in the accumulator type; Scalars arrive as 0-d operands ----

// x in the accumulator type of the result, and a Scalar argument broadcast like it.
Value Acc(Ctx& ctx, Value v) { return ConvertTo(ctx, v, AccumulatorType(ctx.out().elem)); }
Value Arg(Ctx& ctx, const Args& a, size_t i, const Value& like) { return CastTo(ctx, a.tensor(i), like.type); }
Value Out(Ctx& ctx, Value v) { return ConvertTo(ctx, v, ctx.out().elem); }
Value Lt(Ctx& ctx, Value x, Value y) { return ctx.b.Compare(Cmp::LT, x, y); }
Value Le(Ctx& ctx, Value x, Value y) { return ctx.b.Compare(Cmp::LE, x, y); }
Value Gt(Ctx& ctx, Value x, Value y) { return ctx.b.Compare(Cmp::GT, x, y); }
Value Ge(Ctx& ctx, Value x, Value y) { return ctx.b.Compare(Cmp::GE, x, y); }

// elu(x, alpha, scale, input_scale) = x > 0 ? scale * x : alpha * scale * (exp(x * input_scale) - 1)
std::vector<Value> LowerElu(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0));
  Value alpha = Arg(ctx, a, 1, x), scale = Arg(ctx, a, 2, x), input_scale = Arg(ctx, a, 3, x);
  Value expm1 = ctx.b.Unary("exponential_minus_one", Bin(ctx, "multiply", x, input_scale));
  Value neg = Bin(ctx, "multiply", Bin(ctx, "multiply", alpha, scale), expm1);
  return {Out(ctx, ctx.b.Select(Le(ctx, x, Const(ctx, 0, x)), neg, Bin(ctx, "multiply", x, scale)))};
}

// elu_backward(g, alpha, scale, input_scale, is_result, self_or_result)
std::vector<Value> LowerEluBackward(Ctx& ctx, const Args& a) {
  Value g = Acc(ctx, a.tensor(0)), v = Acc(ctx, a.tensor(5));
  Value alpha = Arg(ctx, a, 1, v), scale = Arg(ctx, a, 2, v), input_scale = Arg(ctx, a, 3, v);
  Value negcoef = Bin(ctx, "multiply", alpha, scale);
  Value neg;
  if (a.bool_(4)) {  // v is the result: d/dx = input_scale * (y + negcoef)
    neg = Bin(ctx, "multiply", input_scale, Bin(ctx, "add", v, negcoef));
  } else {
    Value e = ctx.b.Unary("exponential", Bin(ctx, "multiply", v, input_scale));
    neg = Bin(ctx, "multiply", Bin(ctx, "multiply", input_scale, negcoef), e);
  }
  return {Out(ctx, Bin(ctx, "multiply", g, ctx.b.Select(Le(ctx, v, Const(ctx, 0, v)), neg, scale)))};
}

// hardsigmoid(x) = clamp(x + 3, 0, 6) / 6; hardswish(x) = x * hardsigmoid(x)
Value Relu6Over6(Ctx& ctx, Value x) {
  Value t = Bin(ctx, "add", x, Const(ctx, 3, x));
  t = Bin(ctx, "minimum", Bin(ctx, "maximum", t, Const(ctx, 0, x)), Const(ctx, 6, x));
  return Bin(ctx, "divide", t, Const(ctx, 6, x));
}
// XLA's CPU min/max drop NaN (fast min/max), so NaN inputs are put back explicitly.
Value KeepNan(Ctx& ctx, Value x, Value y) { return ctx.b.Select(IsNan(ctx, x), x, y); }

std::vector<Value> LowerHardsigmoid(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0));
  return {Out(ctx, KeepNan(ctx, x, Relu6Over6(ctx, x)))};
}
std::vector<Value> LowerHardswish(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0));
  return {Out(ctx, KeepNan(ctx, x, Bin(ctx, "multiply", x, Relu6Over6(ctx, x))))};
}
// hardsigmoid_backward(g, x) = -3 < x < 3 ? g / 6 : 0
std::vector<Value> LowerHardsigmoidBackward(Ctx& ctx, const Args& a) {
  Value g = Acc(ctx, a.tensor(0)), x = Acc(ctx, a.tensor(1));
  Value inside = And(ctx, Gt(ctx, x, Const(ctx, -3, x)), Lt(ctx, x, Const(ctx, 3, x)));
  return {Out(ctx, ctx.b.Select(inside, Bin(ctx, "divide", g, Const(ctx, 6, g)), Const(ctx, 0, g)))};
}
// hardswish_backward(g, x) = x <= -3 ? 0 : x < 3 ? g * (x / 3 + 0.5) : g
std::vector<Value> LowerHardswishBackward(Ctx& ctx, const Args& a) {
  Value g = Acc(ctx, a.tensor(0)), x = Acc(ctx, a.tensor(1));
  Value mid = Bin(ctx, "multiply", g, Bin(ctx, "add", Bin(ctx, "divide", x, Const(ctx, 3, x)), Const(ctx, 0.5, x)));
  Value r = ctx.b.Select(Lt(ctx, x, Const(ctx, 3, x)), mid, g);
  return {Out(ctx, ctx.b.Select(Le(ctx, x, Const(ctx, -3, x)), Const(ctx, 0, g), r))};
}

// softplus(x, beta, threshold) = x * beta > threshold ? x : log1p(exp(x * beta)) / beta
std::vector<Value> LowerSoftplus(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0));
  Value beta = Arg(ctx, a, 1, x), threshold = Arg(ctx, a, 2, x);
  Value xb = Bin(ctx, "multiply", x, beta);
  Value soft = Bin(ctx, "divide", ctx.b.Unary("log_plus_one", ctx.b.Unary("exponential", xb)), beta);
  return {Out(ctx, ctx.b.Select(Gt(ctx, xb, threshold), x, soft))};
}
// softplus_backward(g, x, beta, threshold) = x * beta > threshold ? g : g * z / (z + 1), z = exp(x * beta)
std::vector<Value> LowerSoftplusBackward(Ctx& ctx, const Args& a) {
  Value g = Acc(ctx, a.tensor(0)), x = Acc(ctx, a.tensor(1));
  Value beta = Arg(ctx, a, 2, x), threshold = Arg(ctx, a, 3, x);
  Value xb = Bin(ctx, "multiply", x, beta);
  Value z = ctx.b.Unary("exponential", xb);
  Value soft = Bin(ctx, "divide", Bin(ctx, "multiply", g, z), Bin(ctx, "add", z, Const(ctx, 1, z)));
  return {Out(ctx, ctx.b.Select(Gt(ctx, xb, threshold), g, soft))};
}

// mish(x) = x * tanh(log1p(exp(x)))
std::vector<Value> LowerMish(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0));
  Value sp = ctx.b.Unary("log_plus_one", ctx.b.Unary("exponential", x));
  return {Out(ctx, Bin(ctx, "multiply", x, ctx.b.Unary("tanh", sp)))};
}

// log_sigmoid_forward(x) -> (min(x, 0) - log1p(exp(-|x|)), buffer = exp(-|x|))
std::vector<Value> LowerLogSigmoid(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0));
  Value z = ctx.b.Unary("exponential", ctx.b.Unary("negate", ctx.b.Unary("abs", x)));
  Value y = Bin(ctx, "subtract", KeepNan(ctx, x, Bin(ctx, "minimum", x, Const(ctx, 0, x))), ctx.b.Unary("log_plus_one", z));
  Value buffer = ctx.out(1).numel() == z.type.numel() ? ConvertTo(ctx, ctx.b.Reshape(z, ctx.out(1).dims), ctx.out(1).elem)
                                                      : ctx.b.Constant(0, ctx.out(1));
  return {Out(ctx, y), buffer};
}
// log_sigmoid_backward(g, x, buffer) = g * ((x < 0) - sign * z / (1 + z)), sign = x < 0 ? 1 : -1
std::vector<Value> LowerLogSigmoidBackward(Ctx& ctx, const Args& a) {
  Value g = Acc(ctx, a.tensor(0)), x = Acc(ctx, a.tensor(1));
  Value neg = Lt(ctx, x, Const(ctx, 0, x));
  Value z = ctx.b.Unary("exponential", ctx.b.Unary("negate", ctx.b.Unary("abs", x)));
  Value frac = Bin(ctx, "divide", z, Bin(ctx, "add", z, Const(ctx, 1, z)));
  Value d = ctx.b.Select(neg, Bin(ctx, "subtract", Const(ctx, 1, x), frac), frac);
  return {Out(ctx, Bin(ctx, "multiply", g, d))};
}

// x split in halves along dim: (a, b).
std::pair<Value, Value> Halves(Ctx& ctx, Value x, int64_t dim) {
  int64_t r = x.type.rank(), h = x.type.dims[dim] / 2;
  std::vector<int64_t> start(r, 0), limit = x.type.dims, strides(r, 1);
  limit[dim] = h;
  Value first = ctx.b.Slice(x, start, limit, strides);
  start[dim] = h;
  limit[dim] = 2 * h;
  return {first, ctx.b.Slice(x, start, limit, strides)};
}

// glu(x, dim) = a * sigmoid(b)
std::vector<Value> LowerGlu(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0));
  auto [first, second] = Halves(ctx, x, WrapDim(a.int_(1), x.type.rank()));
  return {Out(ctx, Bin(ctx, "multiply", first, ctx.b.Unary("logistic", second)))};
}
// glu_backward(g, x, dim) = cat(g * sigmoid(b), g * a * sigmoid(b) * (1 - sigmoid(b)))
std::vector<Value> LowerGluBackward(Ctx& ctx, const Args& a) {
  Value g = Acc(ctx, a.tensor(0)), x = Acc(ctx, a.tensor(1));
  int64_t dim = WrapDim(a.int_(2), x.type.rank());
  auto [first, second] = Halves(ctx, x, dim);
  Value s = ctx.b.Unary("logistic", second);
  Value ga = Bin(ctx, "multiply", g, s);
  Value gb = Bin(ctx, "multiply", Bin(ctx, "multiply", ga, first), Bin(ctx, "subtract", Const(ctx, 1, s), s));
  return {Out(ctx, ctx.b.Concatenate({ga, gb}, dim))};
}

// _prelu_kernel(x, weight) = x > 0 ? x : weight * x (weight broadcasts against x)
std::vector<Value> LowerPrelu(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0));
  Value w = CastTo(ctx, a.tensor(1), x.type);
  return {Out(ctx, ctx.b.Select(Gt(ctx, x, Const(ctx, 0, x)), x, Bin(ctx, "multiply", w, x)))};
}

// _prelu_kernel_backward(g, x, weight) -> (x > 0 ? g : weight * g, sum of (x > 0 ? 0 : x * g))
std::vector<Value> LowerPreluBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out(0).elem);
  Value g = ConvertTo(ctx, a.tensor(0), acc), x = ConvertTo(ctx, a.tensor(1), acc);
  TensorType full{acc, g.type.dims};
  x = CastTo(ctx, x, full);
  Value w = CastTo(ctx, a.tensor(2), full);
  Value pos = Gt(ctx, x, Const(ctx, 0, x));
  Value gx = ctx.b.Select(pos, g, Bin(ctx, "multiply", w, g));
  Value gw = ctx.b.Select(pos, Const(ctx, 0, g), Bin(ctx, "multiply", x, g));
  return {ConvertTo(ctx, SumToShape(ctx, gx, ctx.out(0).dims), ctx.out(0).elem),
          ConvertTo(ctx, SumToShape(ctx, gw, ctx.out(1).dims), ctx.out(1).elem)};
}

// hardshrink(x, l) = -l <= x <= l ? 0 : x
std::vector<Value> LowerHardshrink(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0)), l = Arg(ctx, a, 1, x);
  Value inside = And(ctx, Ge(ctx, x, ctx.b.Unary("negate", l)), Le(ctx, x, l));
  return {Out(ctx, ctx.b.Select(inside, Const(ctx, 0, x), x))};
}
// hardshrink_backward / softshrink_backward(g, x, l) = -l <= x <= l ? 0 : g
std::vector<Value> LowerShrinkBackward(Ctx& ctx, const Args& a) {
  Value g = Acc(ctx, a.tensor(0)), x = Acc(ctx, a.tensor(1)), l = Arg(ctx, a, 2, x);
  Value inside = And(ctx, Ge(ctx, x, ctx.b.Unary("negate", l)), Le(ctx, x, l));
  return {Out(ctx, ctx.b.Select(inside, Const(ctx, 0, g), g))};
}
// softshrink(x, l) = x > l ? x - l : x < -l ? x + l : x * 0
std::vector<Value> LowerSoftshrink(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0)), l = Arg(ctx, a, 1, x);
  Value zero = Bin(ctx, "multiply", x, Const(ctx, 0, x));  // NaN stays NaN
  Value r = ctx.b.Select(Lt(ctx, x, ctx.b.Unary("negate", l)), Bin(ctx, "add", x, l), zero);
  return {Out(ctx, ctx.b.Select(Gt(ctx, x, l), Bin(ctx, "subtract", x, l), r))};
}

// ---- losses: pointwise in the accumulator type, then reduced (none / mean / sum) ----

// The broadcast of x and t (PyTorch warns on mismatched shapes but allows them).
TensorType LossType(Ctx& ctx, const Value& x, const Value& t) {
  std::vector<int64_t> dims(std::max(x.type.rank(), t.type.rank()), 1);
  for (const Value* v : {&x, &t})
    for (int64_t i = 0; i < v->type.rank(); ++i) {
      int64_t& d = dims[dims.size() - v->type.rank() + i];
      d = std::max(d, v->type.dims[i]);
    }
  return {AccumulatorType(ctx.out().elem), dims};
}

// The per-element scale of a loss gradient: g (reduction none) or g / numel (mean) or g (sum).
Value LossGrad(Ctx& ctx, Value g, int64_t reduction, const TensorType& full) {
  Value gb = CastTo(ctx, g, full);
  if (reduction == kMean) gb = Bin(ctx, "divide", gb, ctx.b.Constant(static_cast<double>(full.numel()), full));
  return gb;
}

// binary_cross_entropy(x, t, weight?, reduction) = -w * (t * max(log x, -100) + (1 - t) * max(log(1 - x), -100))
std::vector<Value> LowerBinaryCrossEntropy(Ctx& ctx, const Args& a) {
  TensorType full = LossType(ctx, a.tensor(0), a.tensor(1));
  Value x = CastTo(ctx, a.tensor(0), full), t = CastTo(ctx, a.tensor(1), full);
  Value floor = ctx.b.Constant(-100, full);
  Value log_x = Bin(ctx, "maximum", ctx.b.Unary("log", x), floor);
  Value log_1mx = Bin(ctx, "maximum", ctx.b.Unary("log_plus_one", ctx.b.Unary("negate", x)), floor);
  Value t_minus_1 = Bin(ctx, "subtract", t, ctx.b.Constant(1, full));
  Value loss = Bin(ctx, "subtract", Bin(ctx, "multiply", t_minus_1, log_1mx), Bin(ctx, "multiply", t, log_x));
  loss = KeepNan(ctx, x, loss);
  if (!a.is_none(2)) loss = Bin(ctx, "multiply", loss, CastTo(ctx, a.tensor(2), full));
  return {Out(ctx, Reduce(ctx, loss, a.int_(3)))};
}
// binary_cross_entropy_backward(g, x, t, weight?, reduction) = g * w * (x - t) / max((1 - x) * x, 1e-12)
std::vector<Value> LowerBinaryCrossEntropyBackward(Ctx& ctx, const Args& a) {
  TensorType full{AccumulatorType(ctx.out().elem), ctx.out().dims};
  Value x = CastTo(ctx, a.tensor(1), full), t = CastTo(ctx, a.tensor(2), full);
  Value one_minus_x = Bin(ctx, "subtract", ctx.b.Constant(1, full), x);
  Value denom = Bin(ctx, "maximum", Bin(ctx, "multiply", one_minus_x, x), ctx.b.Constant(1e-12, full));
  Value g = LossGrad(ctx, a.tensor(0), a.int_(4), full);
  Value r = Bin(ctx, "divide", Bin(ctx, "multiply", g, Bin(ctx, "subtract", x, t)), denom);
  if (!a.is_none(3)) r = Bin(ctx, "multiply", r, CastTo(ctx, a.tensor(3), full));
  return {Out(ctx, r)};
}

// binary_cross_entropy_with_logits(x, t, weight?, pos_weight?, reduction)
//   = w * ((1 - t) * x - log_weight * log_sigmoid(x)), log_weight = (pos_weight - 1) * t + 1
std::vector<Value> LowerBceWithLogits(Ctx& ctx, const Args& a) {
  TensorType full = LossType(ctx, a.tensor(0), a.tensor(1));
  Value x = CastTo(ctx, a.tensor(0), full), t = CastTo(ctx, a.tensor(1), full);
  Value one = ctx.b.Constant(1, full);
  Value z = ctx.b.Unary("exponential", ctx.b.Unary("negate", ctx.b.Unary("abs", x)));
  Value min0 = KeepNan(ctx, x, Bin(ctx, "minimum", x, ctx.b.Constant(0, full)));
  Value log_sig = Bin(ctx, "subtract", min0, ctx.b.Unary("log_plus_one", z));
  if (!a.is_none(3)) {
    Value log_weight = Bin(ctx, "add", Bin(ctx, "multiply", Bin(ctx, "subtract", CastTo(ctx, a.tensor(3), full), one), t), one);
    log_sig = Bin(ctx, "multiply", log_sig, log_weight);
  }
  Value loss = Bin(ctx, "subtract", Bin(ctx, "multiply", Bin(ctx, "subtract", one, t), x), log_sig);
  if (!a.is_none(2)) loss = Bin(ctx, "multiply", loss, CastTo(ctx, a.tensor(2), full));
  return {Out(ctx, Reduce(ctx, loss, a.int_(4)))};
}

// smooth_l1_loss(x, t, reduction, beta) = |d| < beta ? 0.5 d^2 / beta : |d| - 0.5 beta;
// huber_loss(x, t, reduction, delta) = |d| < delta ? 0.5 d^2 : delta (|d| - 0.5 delta).
template <bool kHuber>
std::vector<Value> LowerSmoothL1(Ctx& ctx, const Args& a) {
  TensorType full = LossType(ctx, a.tensor(0), a.tensor(1));
  Value d = Bin(ctx, "subtract", CastTo(ctx, a.tensor(0), full), CastTo(ctx, a.tensor(1), full));
  Value z = ctx.b.Unary("abs", d);
  double beta = a.double_(3);
  Value loss;
  if (!kHuber && beta == 0) {
    loss = z;
  } else {
    Value b = ctx.b.Constant(beta, full), half = ctx.b.Constant(0.5, full);
    Value quad = Bin(ctx, "multiply", Bin(ctx, "multiply", half, d), d);
    Value lin = Bin(ctx, "subtract", z, Bin(ctx, "multiply", half, b));
    if (kHuber) lin = Bin(ctx, "multiply", b, lin);
    else quad = Bin(ctx, "divide", quad, b);
    loss = ctx.b.Select(Lt(ctx, z, b), quad, lin);
  }
  return {Out(ctx, Reduce(ctx, loss, a.int_(2)))};
}
// smooth_l1_loss_backward(g, x, t, reduction, beta) = g * (d <= -beta ? -1 : d >= beta ? 1 : d / beta)
// huber_loss_backward(g, x, t, reduction, delta) = g * (d < -delta ? -delta : d > delta ? delta : d)
template <bool kHuber>
std::vector<Value> LowerSmoothL1Backward(Ctx& ctx, const Args& a) {
  TensorType full{AccumulatorType(ctx.out().elem), ctx.out().dims};
  Value d = Bin(ctx, "subtract", CastTo(ctx, a.tensor(1), full), CastTo(ctx, a.tensor(2), full));
  Value g = LossGrad(ctx, a.tensor(0), a.int_(3), full);
  double beta = a.double_(4);
  Value b = ctx.b.Constant(beta, full), nb = ctx.b.Constant(-beta, full);
  Value r;
  if (kHuber) {
    r = ctx.b.Select(Lt(ctx, d, nb), nb, ctx.b.Select(Gt(ctx, d, b), b, d));
  } else {
    Value one = ctx.b.Constant(1, full);
    Value mid = beta == 0 ? ctx.b.Constant(0, full) : Bin(ctx, "divide", d, b);
    r = ctx.b.Select(Le(ctx, d, nb), ctx.b.Unary("negate", one), ctx.b.Select(Ge(ctx, d, b), one, mid));
  }
  return {Out(ctx, Bin(ctx, "multiply", r, g))};
}

// ---- embedding, padding, dropout ----

// embedding_dense_backward(g, indices, num_weights, padding_idx, scale_grad_by_freq):
// row g[i] is added to grad_weight[indices[i]], except where indices[i] == padding_idx; with
// scale_grad_by_freq each row is divided by how often its index occurs.
std::vector<Value> LowerEmbeddingDenseBackward(Ctx& ctx, const Args& a) {
  Value g = a.tensor(0), idx = ConvertTo(ctx, a.tensor(1), ElemType::S64);
  int64_t num = a.int_(2), pad = a.int_(3), n = idx.type.numel();
  int64_t d = ctx.out().dims.back();
  ElemType acc = AccumulatorType(ctx.out().elem);
  g = ctx.b.Reshape(ConvertTo(ctx, g, acc), {n, d});
  idx = ctx.b.Reshape(idx, {n});
  TensorType idx_t{ElemType::S64, {n}};
  Value bad = ctx.b.Binary("or", Lt(ctx, idx, ctx.b.ConstantInt(0, idx_t)), Ge(ctx, idx, ctx.b.ConstantInt(num, idx_t)));
  ctx.AddCheck(ctx.b.Reduce(bad, ctx.b.Constant(0, {ElemType::Pred, {}}), {0}, "or"), "index out of range in self");
  Value keep = ctx.b.Compare(Cmp::NE, idx, ctx.b.ConstantInt(pad, idx_t));
  Value scale = ConvertTo(ctx, keep, acc);
  if (a.bool_(4)) {
    Value counts = ScatterAddFlat(ctx, ctx.b.Constant(1, {acc, {n}}), idx, num);
    scale = Bin(ctx, "divide", scale, ctx.b.Gather1D(counts, idx));
  }
  g = Bin(ctx, "multiply", g, ctx.b.BroadcastInDim(scale, {n, d}, {0}));
  return {Out(ctx, ScatterAddAlong(ctx, g, 0, idx, num))};
}

// The source position of each output position of a padded dim: reflected or clamped.
std::vector<int64_t> PadSource(int64_t in, int64_t out, int64_t low, bool reflect) {
  std::vector<int64_t> src;
  for (int64_t o = 0; o < out; ++o) {
    int64_t i = o - low;
    if (reflect) {
      if (i < 0) i = -i;
      if (i >= in) i = 2 * (in - 1) - i;
    } else {
      i = std::min(std::max<int64_t>(i, 0), in - 1);
    }
    src.push_back(i);
  }
  return src;
}

// reflection_pad{1,2,3}d / replication_pad{1,2,3}d(x, padding): padding lists (low, high) pairs
// from the last dim backwards.
template <bool kReflect>
std::vector<Value> LowerPad(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  const auto& pad = a.ints(1);
  int64_t r = x.type.rank();
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    int64_t dim = r - 1 - static_cast<int64_t>(k);
    x = Pick(ctx, x, dim, PadSource(x.type.dims[dim], ctx.out().dims[dim], pad[2 * k], kReflect));
  }
  return {x};
}

// reflection_pad*_backward / replication_pad*_backward(g, x, padding): the scatter-add transpose.
template <bool kReflect>
std::vector<Value> LowerPadBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value g = ConvertTo(ctx, a.tensor(0), acc);
  const auto& pad = a.ints(2);
  int64_t r = g.type.rank();
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    int64_t dim = r - 1 - static_cast<int64_t>(k), in = ctx.out().dims[dim];
    g = PickTranspose(ctx, g, dim, PadSource(in, g.type.dims[dim], pad[2 * k], kReflect), in);
  }
  return {Out(ctx, g)};
}

// native_dropout(x, p, train?) -> (x * mask / (1 - p), mask), mask ~ Bernoulli(1 - p) drawn
// from the device generator (the kernel's implicit trailing Philox-state argument).
std::vector<Value> LowerNativeDropout(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  TensorType mask_t = ctx.out(1);
  if (!a.is_none(2) && !a.bool_(2)) return {x, ctx.b.Constant(1, mask_t)};
  if (a.is_none(3)) throw Unsupported("native_dropout without a generator state");
  double keep = 1.0 - a.double_(1);
  Value u = Uniform01(ctx, a.tensor(3), x.type.dims);
  Value mask = Lt(ctx, u, ctx.b.Constant(keep, u.type));
  Value xa = Acc(ctx, x);
  Value y = Bin(ctx, "multiply", ctx.b.Select(mask, xa, Const(ctx, 0, xa)), Const(ctx, keep == 0 ? 0 : 1 / keep, xa));
  return {Out(ctx, y), ConvertTo(ctx, mask, mask_t.elem)};
}

// native_dropout_backward(g, mask, scale) = g * mask * scale
std::vector<Value> LowerNativeDropoutBackward(Ctx& ctx, const Args& a) {
  Value g = Acc(ctx, a.tensor(0));
  Value m = ctx.b.Compare(Cmp::NE, a.tensor(1), ctx.b.Constant(0, a.tensor(1).type));
  Value y = ctx.b.Select(m, Bin(ctx, "multiply", g, Const(ctx, a.double_(2), g)), Const(ctx, 0, g));
  return {Out(ctx, y)};
}

// rrelu in training scales each x <= 0 by a slope drawn uniformly from [lower, upper) by the
// device generator (1 for x > 0): {y, slopes}; in evaluation the slope is (lower + upper) / 2
// and the slopes are invalid (noise is left alone).
std::pair<Value, Value> Rrelu(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0));
  Value lower = CastTo(ctx, a.tensor(2), x.type), upper = CastTo(ctx, a.tensor(3), x.type);
  Value nonpositive = ctx.b.Compare(Cmp::LE, x, Const(ctx, 0, x));
  if (!a.bool_(4)) {
    Value slope = Bin(ctx, "multiply", Bin(ctx, "add", lower, upper), Const(ctx, 0.5, x));
    return {Out(ctx, ctx.b.Select(nonpositive, Bin(ctx, "multiply", x, slope), x)), Value{}};
  }
  if (a.is_none(5)) throw Unsupported("rrelu_with_noise without a generator state");
  Value u = ConvertTo(ctx, Uniform01(ctx, a.tensor(5), x.type.dims), x.type.elem);
  Value slope = Bin(ctx, "add", lower, Bin(ctx, "multiply", u, Bin(ctx, "subtract", upper, lower)));
  Value noise = ctx.b.Select(nonpositive, slope, Const(ctx, 1, x));
  return {Out(ctx, Bin(ctx, "multiply", x, noise)), ConvertTo(ctx, noise, a.tensor(1).type.elem)};
}

// rrelu_with_noise(x, noise!, lower, upper, training, generator): the slopes overwrite `noise`,
// which the backward multiplies by.
std::vector<Value> LowerRreluWithNoise(Ctx& ctx, const Args& a) {
  auto [y, noise] = Rrelu(ctx, a);
  if (noise.valid()) ctx.WriteArg(1, noise);
  return {y};
}

// rrelu_with_noise_functional(x, noise, lower, upper, training, generator) -> (y, noise_out),
// the form torch.compile graphs hold.
std::vector<Value> LowerRreluWithNoiseFunctional(Ctx& ctx, const Args& a) {
  auto [y, noise] = Rrelu(ctx, a);
  return {y, noise.valid() ? noise : a.tensor(1)};
}

}  // namespace

TPU_LOWERING("aten::_log_softmax", LowerLogSoftmax);
TPU_LOWERING("aten::_log_softmax_backward_data", LowerLogSoftmaxBackward);
TPU_LOWERING("aten::_prelu_kernel", LowerPrelu);
TPU_LOWERING("aten::_prelu_kernel_backward", LowerPreluBackward);
TPU_LOWERING("aten::_softmax", LowerSoftmax);
TPU_LOWERING("aten::_softmax_backward_data", LowerSoftmaxBackward);
TPU_LOWERING("aten::binary_cross_entropy", LowerBinaryCrossEntropy);
TPU_LOWERING("aten::binary_cross_entropy_backward", LowerBinaryCrossEntropyBackward);
TPU_LOWERING("aten::binary_cross_entropy_with_logits", LowerBceWithLogits);
TPU_LOWERING("aten::elu", LowerElu);
TPU_LOWERING("aten::elu_backward", LowerEluBackward);
TPU_LOWERING("aten::embedding_dense_backward", LowerEmbeddingDenseBackward);
TPU_LOWERING("aten::glu", LowerGlu);
TPU_LOWERING("aten::glu_backward", LowerGluBackward);
TPU_LOWERING("aten::hardshrink", LowerHardshrink);
TPU_LOWERING("aten::hardshrink_backward", LowerShrinkBackward);
TPU_LOWERING("aten::hardsigmoid", LowerHardsigmoid);
TPU_LOWERING("aten::hardsigmoid_backward", LowerHardsigmoidBackward);
TPU_LOWERING("aten::hardswish", LowerHardswish);
TPU_LOWERING("aten::hardswish_backward", LowerHardswishBackward);
TPU_LOWERING("aten::huber_loss", LowerSmoothL1<true>);
TPU_LOWERING("aten::huber_loss_backward", LowerSmoothL1Backward<true>);
TPU_LOWERING("aten::log_sigmoid_backward", LowerLogSigmoidBackward);
TPU_LOWERING("aten::log_sigmoid_forward", LowerLogSigmoid);
TPU_LOWERING("aten::mish", LowerMish);
TPU_LOWERING("aten::mse_loss", LowerMseLoss);
TPU_LOWERING("aten::mse_loss_backward", LowerMseLossBackward);
TPU_LOWERING("aten::native_dropout", LowerNativeDropout);
TPU_LOWERING("aten::native_dropout_backward", LowerNativeDropoutBackward);
TPU_LOWERING("aten::native_layer_norm", LowerLayerNorm);
TPU_LOWERING("aten::native_layer_norm_backward", LowerLayerNormBackward);
TPU_LOWERING("aten::reflection_pad1d", LowerPad<true>);
TPU_LOWERING("aten::reflection_pad1d_backward", LowerPadBackward<true>);
TPU_LOWERING("aten::reflection_pad2d", LowerPad<true>);
TPU_LOWERING("aten::reflection_pad2d_backward", LowerPadBackward<true>);
TPU_LOWERING("aten::reflection_pad3d", LowerPad<true>);
TPU_LOWERING("aten::reflection_pad3d_backward", LowerPadBackward<true>);
TPU_LOWERING("aten::replication_pad1d", LowerPad<false>);
TPU_LOWERING("aten::replication_pad1d_backward", LowerPadBackward<false>);
TPU_LOWERING("aten::replication_pad2d", LowerPad<false>);
TPU_LOWERING("aten::replication_pad2d_backward", LowerPadBackward<false>);
TPU_LOWERING("aten::replication_pad3d", LowerPad<false>);
TPU_LOWERING("aten::replication_pad3d_backward", LowerPadBackward<false>);
TPU_LOWERING("aten::rrelu_with_noise", LowerRreluWithNoise);
TPU_LOWERING("aten::rrelu_with_noise_functional", LowerRreluWithNoiseFunctional);
TPU_LOWERING("aten::smooth_l1_loss", LowerSmoothL1<false>);
TPU_LOWERING("aten::smooth_l1_loss_backward", LowerSmoothL1Backward<false>);
TPU_LOWERING("aten::softplus", LowerSoftplus);
TPU_LOWERING("aten::softplus_backward", LowerSoftplusBackward);
TPU_LOWERING("aten::softshrink", LowerSoftshrink);
TPU_LOWERING("aten::softshrink_backward", LowerShrinkBackward);

}  // namespace tpu::lowering
