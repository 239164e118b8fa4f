// Mixed-precision training (torch.amp.GradScaler): unscaling gradients while flagging
// non-finite values, and growing or backing off the loss scale. Both write into arguments
// besides their results (found_inf, growth_tracker) through Ctx::WriteArg.
#include "helpers.h"

namespace tpu::lowering {
namespace {

// _amp_foreach_non_finite_check_and_unscale_(grads[]!, found_inf!, inv_scale):
// grads *= inv_scale; found_inf = 1 if any gradient holds an inf or NaN.
std::vector<Value> LowerNonFiniteCheckAndUnscale(Ctx& ctx, const Args& a) {
  const std::vector<Value>& grads = a.tensors(0);
  Value found = a.tensor(1);
  Value any = ctx.b.Constant(0, {ElemType::Pred, {}});
  std::vector<Value> out;
  for (const Value& g : grads) {
    ElemType acc = AccumulatorType(g.type.elem);
    Value ga = ConvertTo(ctx, g, acc);
    Value finite = ctx.b.Op1("stablehlo.is_finite", {ga}, {ElemType::Pred, ga.type.dims});
    Value all = ctx.b.Reduce(finite, ctx.b.Constant(1, {ElemType::Pred, {}}), Iota(ga.type.rank()), "and");
    any = ctx.b.Binary("or", any, ctx.b.Unary("not", all));
    Value inv = CastTo(ctx, ctx.b.Reshape(a.tensor(2), {}), ga.type);
    out.push_back(ConvertTo(ctx, Bin(ctx, "multiply", ga, inv), g.type.elem));
  }
  ctx.WriteArg(1, ctx.b.Select(BroadcastTo(ctx, any, found.type.dims), ctx.b.Constant(1, found.type), found));
  return out;
}

// _amp_update_scale_(scale!, growth_tracker!, found_inf, growth_factor, backoff_factor, interval):
// after an overflow the scale backs off and the tracker resets; otherwise the tracker counts
// up, and every `interval` steps the scale grows (if the grown scale stays finite).
std::vector<Value> LowerAmpUpdateScale(Ctx& ctx, const Args& a) {
  Value scale = a.tensor(0), tracker = a.tensor(1);
  Value found = ctx.b.Compare(Cmp::NE, ctx.b.Reshape(a.tensor(2), {}), ctx.b.Constant(0, {a.tensor(2).type.elem, {}}));
  Value s = ctx.b.Reshape(scale, {}), t = ctx.b.Reshape(tracker, {});
  Value backed_off = Bin(ctx, "multiply", s, Const(ctx, a.double_(4), s));
  Value successful = Bin(ctx, "add", t, ctx.b.ConstantInt(1, t.type));
  Value due = ctx.b.Compare(Cmp::EQ, successful, ctx.b.ConstantInt(a.int_(5), t.type));
  Value grown = Bin(ctx, "multiply", s, Const(ctx, a.double_(3), s));
  Value grown_ok = ctx.b.Op1("stablehlo.is_finite", {grown}, {ElemType::Pred, {}});
  Value new_scale = ctx.b.Select(found, backed_off, ctx.b.Select(ctx.b.Binary("and", due, grown_ok), grown, s));
  Value zero = ctx.b.ConstantInt(0, t.type);
  Value new_tracker = ctx.b.Select(found, zero, ctx.b.Select(due, zero, successful));
  ctx.WriteArg(1, ctx.b.Reshape(new_tracker, tracker.type.dims));
  return {ctx.b.Reshape(new_scale, scale.type.dims)};
}

}  // namespace

TPU_LOWERING("aten::_amp_foreach_non_finite_check_and_unscale_", LowerNonFiniteCheckAndUnscale);
TPU_LOWERING("aten::_amp_update_scale_", LowerAmpUpdateScale);

}  // namespace tpu::lowering
