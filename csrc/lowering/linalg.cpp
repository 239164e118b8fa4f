// Matrix products through dot_general. f16/bf16 accumulate in f32; f32 asks for the
// highest precision (TPUs otherwise multiply f32 in bf16 passes).
#include "lowering.h"

namespace tpu::lowering {
namespace {

// The product in the accumulator type (f32 for half types).
Value DotAcc(Ctx& ctx, Value x, Value y, std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc,
             std::vector<int64_t> rc) {
  ElemType out = ctx.out().elem;
  x = ConvertTo(ctx, x, out);
  y = ConvertTo(ctx, y, out);
  return ctx.b.DotGeneral(x, y, lb, rb, lc, rc, AccumulatorType(out));
}

Value Dot(Ctx& ctx, Value x, Value y, std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc,
          std::vector<int64_t> rc) {
  return ConvertTo(ctx, DotAcc(ctx, x, y, lb, rb, lc, rc), ctx.out().elem);
}

// mm(a, b) = a @ b for 2-D operands.
std::vector<Value> LowerMm(Ctx& ctx, const Args& a) { return {Dot(ctx, a.tensor(0), a.tensor(1), {}, {}, {1}, {0})}; }

// bmm(a, b): batched over dim 0.
std::vector<Value> LowerBmm(Ctx& ctx, const Args& a) { return {Dot(ctx, a.tensor(0), a.tensor(1), {0}, {0}, {2}, {1})}; }

std::vector<Value> LowerDot(Ctx& ctx, const Args& a) { return {Dot(ctx, a.tensor(0), a.tensor(1), {}, {}, {0}, {0})}; }

std::vector<Value> LowerMv(Ctx& ctx, const Args& a) { return {Dot(ctx, a.tensor(0), a.tensor(1), {}, {}, {1}, {0})}; }

// beta * self + alpha * product; self is ignored when beta == 0 (so NaN in self vanishes),
// as PyTorch specifies. Blended in the product's accumulator type, then rounded once.
Value Blend(Ctx& ctx, Value self, Value product, const Args& a, size_t beta_arg) {
  TensorType t{product.type.elem, ctx.out().dims};
  Value s = CastTo(ctx, self, t);
  Value beta = a.is_none(beta_arg) ? ctx.b.Constant(1, t) : CastTo(ctx, a.tensor(beta_arg), t);
  Value alpha = a.is_none(beta_arg + 1) ? ctx.b.Constant(1, t) : CastTo(ctx, a.tensor(beta_arg + 1), t);
  Value scaled = ctx.b.Binary("multiply", beta, s);
  Value zero = ctx.b.Constant(0, t);
  scaled = ctx.b.Select(ctx.b.Compare(Cmp::EQ, beta, zero), zero, scaled);
  return ConvertTo(ctx, ctx.b.Binary("add", scaled, ctx.b.Binary("multiply", alpha, product)), ctx.out().elem);
}

std::vector<Value> LowerAddmm(Ctx& ctx, const Args& a) {
  return {Blend(ctx, a.tensor(0), DotAcc(ctx, a.tensor(1), a.tensor(2), {}, {}, {1}, {0}), a, 3)};
}
std::vector<Value> LowerAddmv(Ctx& ctx, const Args& a) {
  return {Blend(ctx, a.tensor(0), DotAcc(ctx, a.tensor(1), a.tensor(2), {}, {}, {1}, {0}), a, 3)};
}
std::vector<Value> LowerBaddbmm(Ctx& ctx, const Args& a) {
  return {Blend(ctx, a.tensor(0), DotAcc(ctx, a.tensor(1), a.tensor(2), {0}, {0}, {2}, {1}), a, 3)};
}


// vdot(a, b) = sum(conj(a) * b) of 1-D operands (real types: dot).
std::vector<Value> LowerVdot(Ctx& ctx, const Args& a) {
  if (IsComplex(ctx.out().elem)) throw Unsupported("complex vdot");
  return {Dot(ctx, a.tensor(0), a.tensor(1), {}, {}, {0}, {0})};
}

// addbmm(self, b1, b2, beta, alpha) = beta * self + alpha * sum_i b1[i] @ b2[i]: one
// dot_general contracting the batch dim with the inner one.
std::vector<Value> LowerAddbmm(Ctx& ctx, const Args& a) {
  return {Blend(ctx, a.tensor(0), DotAcc(ctx, a.tensor(1), a.tensor(2), {}, {}, {0, 2}, {0, 1}), a, 3)};
}

// trace(self) = sum of the main diagonal of a matrix (integers accumulate in int64).
std::vector<Value> LowerTrace(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  const TensorType& t = ctx.out();
  ElemType acc = AccumulatorType(t.elem);
  TensorType it{ElemType::S64, x.type.dims};
  Value diag = ctx.b.Compare(Cmp::EQ, ctx.b.Iota(it, 0), ctx.b.Iota(it, 1));
  Value v = ctx.b.Select(diag, ConvertTo(ctx, x, acc), ctx.b.Constant(0, {acc, x.type.dims}));
  Value s = ctx.b.Reduce(v, ctx.b.Constant(0, {acc, {}}), {0, 1}, "add");
  return {ConvertTo(ctx, s, t.elem)};
}

}  // namespace

TPU_LOWERING("aten::addbmm", LowerAddbmm);
TPU_LOWERING("aten::addmm", LowerAddmm);
TPU_LOWERING("aten::addmv", LowerAddmv);
TPU_LOWERING("aten::baddbmm", LowerBaddbmm);
TPU_LOWERING("aten::bmm", LowerBmm);
TPU_LOWERING("aten::dot", LowerDot);
TPU_LOWERING("aten::mm", LowerMm);
TPU_LOWERING("aten::mv", LowerMv);
TPU_LOWERING("aten::trace", LowerTrace);
TPU_LOWERING("aten::vdot", LowerVdot);

}  // namespace tpu::lowering
