// Normalization: batch norm (training statistics or running statistics, the running
// statistics updated in place through Ctx::WriteArg), group norm, RMS norm, and their
// gradients. Statistics accumulate in f32 for f16/bf16 (rule 10).
#include <cmath>
#include <limits>

#include "helpers.h"

namespace tpu::lowering {
namespace {

// Every dim of x but the channel dim 1.
std::vector<int64_t> NonChannel(const Value& x) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < x.type.rank(); ++i)
    if (i != 1) dims.push_back(i);
  return dims;
}

Value InvStd(Ctx& ctx, Value var, double eps) {
  return Bin(ctx, "divide", Const(ctx, 1, var), ctx.b.Unary("sqrt", Bin(ctx, "add", var, Const(ctx, eps, var))));
}

struct BatchNormArgs {
  Value x, weight, bias, running_mean, running_var;
  bool training;
  double momentum, eps;
  int running_mean_arg = -1, running_var_arg = -1;  // argument indices to write the new stats into
};

// The arguments every batch norm form shares, by name; the running stats and the mode vary.
BatchNormArgs Named(const Args& a, Value running_mean, Value running_var, bool training) {
  return {a.tensor("input"), a.optional_tensor("weight"), a.optional_tensor("bias"), running_mean, running_var,
          training, a.double_("momentum"), a.double_("eps")};
}

struct BatchNormResult {
  Value y, mean, invstd;            // mean / invstd in the accumulator type, [C]
  Value new_running_mean, new_running_var;  // in the running stats' types (training only)
};

// y = (x - mean) * invstd * weight + bias, with the batch's statistics (training) or the
// running ones; training also gives running = (1 - momentum) * running + momentum * batch,
// the variance unbiased.
BatchNormResult BatchNorm(Ctx& ctx, const BatchNormArgs& p) {
  ElemType acc = AccumulatorType(p.x.type.elem);
  Value x = ConvertTo(ctx, p.x, acc);
  std::vector<int64_t> dims = NonChannel(x);
  int64_t n = x.type.numel() / (x.type.rank() > 1 ? x.type.dims[1] : 1);
  BatchNormResult r;
  Value var;
  if (p.training) {
    Value sum = SumOver(ctx, x, dims);
    r.mean = Bin(ctx, "divide", sum, Const(ctx, static_cast<double>(n), sum));
    Value centered = Bin(ctx, "subtract", x, ctx.b.BroadcastInDim(r.mean, x.type.dims, {1}));
    Value sq = SumOver(ctx, Bin(ctx, "multiply", centered, centered), dims);
    var = Bin(ctx, "divide", sq, Const(ctx, static_cast<double>(n), sq));
    if (p.running_mean.valid()) {
      Value rm = ConvertTo(ctx, p.running_mean, acc);
      Value upd = Bin(ctx, "add", Bin(ctx, "multiply", Const(ctx, p.momentum, r.mean), r.mean),
                      Bin(ctx, "multiply", Const(ctx, 1 - p.momentum, rm), rm));
      r.new_running_mean = ConvertTo(ctx, upd, p.running_mean.type.elem);
    }
    if (p.running_var.valid()) {
      Value rv = ConvertTo(ctx, p.running_var, acc);
      Value unbiased = Bin(ctx, "multiply", var, Const(ctx, n > 1 ? static_cast<double>(n) / (n - 1) : NAN, var));
      Value upd = Bin(ctx, "add", Bin(ctx, "multiply", Const(ctx, p.momentum, unbiased), unbiased),
                      Bin(ctx, "multiply", Const(ctx, 1 - p.momentum, rv), rv));
      r.new_running_var = ConvertTo(ctx, upd, p.running_var.type.elem);
    }
  } else {
    if (!p.running_mean.valid() || !p.running_var.valid()) throw Unsupported("batch norm in eval mode without running stats");
    r.mean = ConvertTo(ctx, p.running_mean, acc);
    var = ConvertTo(ctx, p.running_var, acc);
  }
  r.invstd = InvStd(ctx, var, p.eps);
  // As the CPU kernel: y = x * alpha + beta, alpha = invstd * weight, beta = bias - mean * alpha.
  Value alpha = p.weight.valid() ? Bin(ctx, "multiply", r.invstd, ConvertTo(ctx, p.weight, acc)) : r.invstd;
  Value beta = ctx.b.Unary("negate", Bin(ctx, "multiply", r.mean, alpha));
  if (p.bias.valid()) beta = Bin(ctx, "add", ConvertTo(ctx, p.bias, acc), beta);
  r.y = Bin(ctx, "add", Bin(ctx, "multiply", x, ctx.b.BroadcastInDim(alpha, x.type.dims, {1})),
            ctx.b.BroadcastInDim(beta, x.type.dims, {1}));
  return r;
}

// The (y, save_mean, save_invstd) results; training writes the new running stats.
std::vector<Value> BatchNormResults(Ctx& ctx, const BatchNormArgs& p, BatchNormResult* result = nullptr) {
  BatchNormResult r = BatchNorm(ctx, p);
  if (result) *result = r;
  if (r.new_running_mean.valid() && p.running_mean_arg >= 0) ctx.WriteArg(p.running_mean_arg, r.new_running_mean);
  if (r.new_running_var.valid() && p.running_var_arg >= 0) ctx.WriteArg(p.running_var_arg, r.new_running_var);
  auto stat = [&](Value v, size_t i) {
    if (ctx.out(i).numel() != v.type.numel()) return ctx.b.Constant(0, ctx.out(i));  // eval: empty
    return ctx.b.Reshape(ConvertTo(ctx, v, ctx.out(i).elem), ctx.out(i).dims);
  };
  return {ConvertTo(ctx, r.y, ctx.out(0).elem), stat(r.mean, 1), stat(r.invstd, 2)};
}

// native_batch_norm / _native_batch_norm_legit(x, weight?, bias?, running_mean?, running_var?,
// training, momentum, eps) -> (y, save_mean, save_invstd)
std::vector<Value> LowerNativeBatchNorm(Ctx& ctx, const Args& a) {
  BatchNormArgs p = Named(a, a.optional_tensor("running_mean"), a.optional_tensor("running_var"), a.bool_("training"));
  p.running_mean_arg = static_cast<int>(a.index("running_mean"));
  p.running_var_arg = static_cast<int>(a.index("running_var"));
  return BatchNormResults(ctx, p);
}

// _native_batch_norm_legit.no_stats(x, weight?, bias?, training, momentum, eps)
std::vector<Value> LowerBatchNormNoStats(Ctx& ctx, const Args& a) {
  BatchNormArgs p = Named(a, {}, {}, true);
  return BatchNormResults(ctx, p);
}

// _native_batch_norm_legit_no_training(x, weight?, bias?, running_mean, running_var, momentum, eps)
std::vector<Value> LowerBatchNormNoTraining(Ctx& ctx, const Args& a) {
  BatchNormArgs p = Named(a, a.tensor("running_mean"), a.tensor("running_var"), false);
  return BatchNormResults(ctx, p);
}

// _batch_norm_with_update(x, weight?, bias?, running_mean!, running_var!, momentum, eps)
//   -> (y, save_mean, save_invstd, reserve); _batch_norm_no_update takes the same arguments,
//   normalises with the running stats and writes nothing.
template <bool kUpdate>
std::vector<Value> LowerBatchNormWithUpdate(Ctx& ctx, const Args& a) {
  BatchNormArgs p = Named(a, a.optional_tensor("running_mean"), a.optional_tensor("running_var"), kUpdate);
  p.running_mean_arg = static_cast<int>(a.index("running_mean"));
  p.running_var_arg = static_cast<int>(a.index("running_var"));
  std::vector<Value> out = BatchNormResults(ctx, p);
  out.push_back(ctx.b.Constant(0, ctx.out(3)));  // reserve: empty (no cudnn workspace)
  return out;
}

// _native_batch_norm_legit_functional(x, weight?, bias?, running_mean, running_var, training,
// momentum, eps) -> (y, save_mean, save_invstd, new_running_mean, new_running_var): the form
// functionalized graphs use.
std::vector<Value> LowerBatchNormFunctional(Ctx& ctx, const Args& a) {
  BatchNormArgs p = Named(a, a.tensor("running_mean"), a.tensor("running_var"), a.bool_("training"));
  BatchNormResult r;
  std::vector<Value> out = BatchNormResults(ctx, p, &r);
  out.push_back(r.new_running_mean.valid() ? r.new_running_mean : p.running_mean);
  out.push_back(r.new_running_var.valid() ? r.new_running_var : p.running_var);
  return out;
}

// Gradients of batch norm. Training: gx = w * invstd * (g - mean(g) - xhat * mean(g * xhat));
// eval: gx = w * invstd * g. gw = sum(g * xhat), gb = sum(g).
std::vector<Value> BatchNormBackward(Ctx& ctx, const Args& a, bool training) {
  ElemType acc = AccumulatorType(a.tensor(1).type.elem);
  Value g = ConvertTo(ctx, a.tensor(0), acc), x = ConvertTo(ctx, a.tensor(1), acc);
  Value weight = a.optional_tensor(2);
  std::vector<int64_t> dims = NonChannel(x);
  int64_t n = x.type.numel() / (x.type.rank() > 1 ? x.type.dims[1] : 1);
  Value mean, invstd;
  if (training) {
    mean = ConvertTo(ctx, a.tensor(5), acc);
    invstd = ConvertTo(ctx, a.tensor(6), acc);
  } else {
    mean = ConvertTo(ctx, a.tensor(3), acc);
    invstd = InvStd(ctx, ConvertTo(ctx, a.tensor(4), acc), a.double_(8));
  }
  Value centered = Bin(ctx, "subtract", x, ctx.b.BroadcastInDim(mean, x.type.dims, {1}));
  Value sum_g = SumOver(ctx, g, dims);
  Value dot = SumOver(ctx, Bin(ctx, "multiply", g, centered), dims);
  Value scale = weight.valid() ? Bin(ctx, "multiply", invstd, ConvertTo(ctx, weight, acc)) : invstd;
  Value gx;
  if (training) {
    Value inv_n = Const(ctx, 1.0 / static_cast<double>(n), sum_g);
    Value mean_g = ctx.b.BroadcastInDim(Bin(ctx, "multiply", sum_g, inv_n), x.type.dims, {1});
    Value proj = Bin(ctx, "multiply", Bin(ctx, "multiply", dot, inv_n), Bin(ctx, "multiply", invstd, invstd));
    Value along_proj = Bin(ctx, "multiply", centered, ctx.b.BroadcastInDim(proj, x.type.dims, {1}));
    Value inner = Bin(ctx, "subtract", Bin(ctx, "subtract", g, along_proj), mean_g);
    gx = Bin(ctx, "multiply", inner, ctx.b.BroadcastInDim(scale, x.type.dims, {1}));
  } else {
    gx = Bin(ctx, "multiply", g, ctx.b.BroadcastInDim(scale, x.type.dims, {1}));
  }
  return {ConvertTo(ctx, gx, ctx.out(0).elem), ConvertTo(ctx, Bin(ctx, "multiply", dot, invstd), ctx.out(1).elem),
          ConvertTo(ctx, sum_g, ctx.out(2).elem)};
}

// native_batch_norm_backward(g, x, weight?, running_mean?, running_var?, save_mean?, save_invstd?,
// train, eps, output_mask)
std::vector<Value> LowerNativeBatchNormBackward(Ctx& ctx, const Args& a) { return BatchNormBackward(ctx, a, a.bool_(7)); }

// batch_norm_backward(g, x, weight, running_mean?, running_var?, save_mean?, save_var?, update,
// eps, output_mask, reserve): the gradient of _batch_norm_with_update / _no_update.
std::vector<Value> LowerBatchNormBackwardUpdate(Ctx& ctx, const Args& a) { return BatchNormBackward(ctx, a, a.bool_(7)); }

// x as [N, G, C/G, HxW] for group norm.
Value Grouped(Ctx& ctx, Value x, int64_t n, int64_t c, int64_t hw, int64_t groups) {
  return ctx.b.Reshape(x, {n, groups, c / groups, hw});
}

// native_group_norm(x, weight?, bias?, N, C, HxW, group, eps) -> (y, mean [N, G], rstd [N, G])
std::vector<Value> LowerGroupNorm(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out(0).elem);
  int64_t n = a.int_("N"), c = a.int_("C"), hw = a.int_("HxW"), groups = a.int_("group");
  Value x = Grouped(ctx, ConvertTo(ctx, a.tensor("input"), acc), n, c, hw, groups);
  double count = static_cast<double>((c / groups) * hw);
  Value mean = Bin(ctx, "divide", SumOver(ctx, x, {2, 3}), ctx.b.Constant(count, {acc, {n, groups}}));
  Value centered = Bin(ctx, "subtract", x, Unreduce(ctx, mean, x.type.dims, {2, 3}));
  Value sq = SumOver(ctx, Bin(ctx, "multiply", centered, centered), {2, 3});
  Value var = Bin(ctx, "divide", sq, Const(ctx, count, sq));
  Value rstd = InvStd(ctx, var, a.double_("eps"));
  Value y = Bin(ctx, "multiply", centered, Unreduce(ctx, rstd, x.type.dims, {2, 3}));
  auto channel = [&](Value v) {
    return ctx.b.BroadcastInDim(ctx.b.Reshape(ConvertTo(ctx, v, acc), {groups, c / groups}), x.type.dims, {1, 2});
  };
  if (!a.is_none("weight")) y = Bin(ctx, "multiply", y, channel(a.tensor("weight")));
  if (!a.is_none("bias")) y = Bin(ctx, "add", y, channel(a.tensor("bias")));
  return {ConvertTo(ctx, ctx.b.Reshape(y, ctx.out(0).dims), ctx.out(0).elem),
          ConvertTo(ctx, ctx.b.Reshape(mean, ctx.out(1).dims), ctx.out(1).elem),
          ConvertTo(ctx, ctx.b.Reshape(rstd, ctx.out(2).dims), ctx.out(2).elem)};
}

// native_group_norm_backward(g, x, mean, rstd, weight?, N, C, HxW, group, output_mask):
// gx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) per group, gw = g * weight.
std::vector<Value> LowerGroupNormBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out(0).elem);
  int64_t n = a.int_("N"), c = a.int_("C"), hw = a.int_("HxW"), groups = a.int_("group");
  Value g = Grouped(ctx, ConvertTo(ctx, a.tensor("grad_out"), acc), n, c, hw, groups);
  Value x = Grouped(ctx, ConvertTo(ctx, a.tensor("input"), acc), n, c, hw, groups);
  const auto& dims = x.type.dims;
  Value mean = Unreduce(ctx, ctx.b.Reshape(ConvertTo(ctx, a.tensor(2), acc), {n, groups}), dims, {2, 3});
  Value rstd = Unreduce(ctx, ctx.b.Reshape(ConvertTo(ctx, a.tensor(3), acc), {n, groups}), dims, {2, 3});
  Value xhat = Bin(ctx, "multiply", Bin(ctx, "subtract", x, mean), rstd);
  Value gw = g;
  if (!a.is_none(4)) {
    Value w = ctx.b.Reshape(ConvertTo(ctx, a.tensor(4), acc), {groups, c / groups});
    gw = Bin(ctx, "multiply", g, ctx.b.BroadcastInDim(w, dims, {1, 2}));
  }
  double count = static_cast<double>((c / groups) * hw);
  auto group_mean = [&](Value v) {
    Value s = SumOver(ctx, v, {2, 3});
    return Unreduce(ctx, Bin(ctx, "divide", s, Const(ctx, count, s)), dims, {2, 3});
  };
  Value proj = Bin(ctx, "multiply", xhat, group_mean(Bin(ctx, "multiply", gw, xhat)));
  Value inner = Bin(ctx, "subtract", Bin(ctx, "subtract", gw, group_mean(gw)), proj);
  Value gx = Bin(ctx, "multiply", rstd, inner);
  Value dweight = ctx.b.Reshape(SumOver(ctx, Bin(ctx, "multiply", g, xhat), {0, 3}), {c});
  Value dbias = ctx.b.Reshape(SumOver(ctx, g, {0, 3}), {c});
  return {ConvertTo(ctx, ctx.b.Reshape(gx, ctx.out(0).dims), ctx.out(0).elem), ConvertTo(ctx, dweight, ctx.out(1).elem),
          ConvertTo(ctx, dbias, ctx.out(2).elem)};
}

// The trailing `k` dims of x, which RMS norm normalises over.
std::vector<int64_t> Trailing(const Value& x, size_t k) {
  std::vector<int64_t> dims;
  for (int64_t i = x.type.rank() - static_cast<int64_t>(k); i < x.type.rank(); ++i) dims.push_back(i);
  return dims;
}

Value TrailingBroadcast(Ctx& ctx, Value w, const Value& x) {
  std::vector<int64_t> mapping = Trailing(x, static_cast<size_t>(w.type.rank()));
  return ctx.b.BroadcastInDim(w, x.type.dims, mapping);
}

// _fused_rms_norm(x, normalized_shape, weight?, eps?) -> (y, rstd):
// rstd = 1 / sqrt(mean(x^2) + eps), eps defaulting to the f32 (f64) machine epsilon; y = x * rstd * w.
std::vector<Value> LowerRmsNorm(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out(0).elem);
  Value x = ConvertTo(ctx, a.tensor(0), acc);
  std::vector<int64_t> dims = Trailing(x, a.ints(1).size());
  int64_t count = 1;
  for (int64_t d : dims) count *= x.type.dims[d];
  double eps = a.is_none(3) ? (acc == ElemType::F64 ? std::numeric_limits<double>::epsilon()
                                                    : static_cast<double>(std::numeric_limits<float>::epsilon()))
                            : a.double_(3);
  Value ms = SumOver(ctx, Bin(ctx, "multiply", x, x), dims);
  ms = Bin(ctx, "divide", ms, Const(ctx, static_cast<double>(count), ms));
  Value rstd = ctx.b.Unary("rsqrt", Bin(ctx, "add", ms, Const(ctx, eps, ms)));
  Value y = Bin(ctx, "multiply", x, Unreduce(ctx, rstd, x.type.dims, dims));
  if (!a.is_none(2)) y = Bin(ctx, "multiply", y, TrailingBroadcast(ctx, ConvertTo(ctx, a.tensor(2), acc), x));
  return {ConvertTo(ctx, y, ctx.out(0).elem), ConvertTo(ctx, ctx.b.Reshape(rstd, ctx.out(1).dims), ctx.out(1).elem)};
}

// _fused_rms_norm_backward(g, x, normalized_shape, rstd, weight?, output_mask) -> (gx, gweight):
// gx = rstd * (gw - xhat * mean(gw * xhat)), gw = g * weight, xhat = x * rstd.
std::vector<Value> LowerRmsNormBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out(0).elem);
  Value g = ConvertTo(ctx, a.tensor(0), acc), x = ConvertTo(ctx, a.tensor(1), acc);
  std::vector<int64_t> dims = Trailing(x, a.ints(2).size()), outer;
  for (int64_t i = 0; i < x.type.rank() - static_cast<int64_t>(dims.size()); ++i) outer.push_back(i);
  int64_t count = 1;
  for (int64_t d : dims) count *= x.type.dims[d];
  std::vector<int64_t> outer_shape(x.type.dims.begin(), x.type.dims.end() - dims.size());
  Value rstd = Unreduce(ctx, ctx.b.Reshape(ConvertTo(ctx, a.tensor(3), acc), outer_shape), x.type.dims, dims);
  Value xhat = Bin(ctx, "multiply", x, rstd);
  Value gw = a.is_none(4) ? g : Bin(ctx, "multiply", g, TrailingBroadcast(ctx, ConvertTo(ctx, a.tensor(4), acc), x));
  Value m = SumOver(ctx, Bin(ctx, "multiply", gw, xhat), dims);
  m = Unreduce(ctx, Bin(ctx, "divide", m, Const(ctx, static_cast<double>(count), m)), x.type.dims, dims);
  Value gx = Bin(ctx, "multiply", rstd, Bin(ctx, "subtract", gw, Bin(ctx, "multiply", xhat, m)));
  if (a.is_none(4)) return {ConvertTo(ctx, gx, ctx.out(0).elem), ctx.b.Constant(0, ctx.out(1))};  // no weight
  Value dweight = ctx.b.Reshape(SumOver(ctx, Bin(ctx, "multiply", g, xhat), outer), ctx.out(1).dims);
  return {ConvertTo(ctx, gx, ctx.out(0).elem), ConvertTo(ctx, dweight, ctx.out(1).elem)};
}

}  // namespace

TPU_LOWERING("aten::_batch_norm_no_update", LowerBatchNormWithUpdate<false>);
TPU_LOWERING("aten::_batch_norm_with_update", LowerBatchNormWithUpdate<true>);
TPU_LOWERING("aten::_fused_rms_norm", LowerRmsNorm);
TPU_LOWERING("aten::_fused_rms_norm_backward", LowerRmsNormBackward);
TPU_LOWERING("aten::_native_batch_norm_legit", LowerNativeBatchNorm);
TPU_LOWERING("aten::_native_batch_norm_legit.no_stats", LowerBatchNormNoStats);
TPU_LOWERING("aten::_native_batch_norm_legit_functional", LowerBatchNormFunctional);
TPU_LOWERING("aten::_native_batch_norm_legit_no_training", LowerBatchNormNoTraining);
TPU_LOWERING("aten::batch_norm_backward", LowerBatchNormBackwardUpdate);
TPU_LOWERING("aten::native_batch_norm", LowerNativeBatchNorm);
TPU_LOWERING("aten::native_batch_norm_backward", LowerNativeBatchNormBackward);
TPU_LOWERING("aten::native_group_norm", LowerGroupNorm);
TPU_LOWERING("aten::native_group_norm_backward", LowerGroupNormBackward);

}  // namespace tpu::lowering
