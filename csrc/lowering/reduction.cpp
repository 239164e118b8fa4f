// Reductions: one ReduceWith rule shared by sum, prod, amax, amin, any, all; arg-reductions
// find the first index that attains the extreme. f16/bf16 accumulate in f32.
#include <cmath>
#include <numeric>

#include "lowering.h"

namespace tpu::lowering {
namespace {

// The dims to reduce: `dims` normalised, all dims when empty or None (PyTorch's rule).
std::vector<int64_t> ReduceDims(const Args& a, size_t arg, int64_t rank) {
  if (a.is_none(arg) || a.ints(arg).empty()) {
    std::vector<int64_t> all(rank);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  return WrapDims(a.ints(arg), rank);
}

std::vector<int64_t> AllDims(int64_t rank) {
  std::vector<int64_t> all(rank);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

Value ReduceWith(Ctx& ctx, Value x, const std::vector<int64_t>& dims, const char* op, Value init) {
  return ctx.b.Reduce(x, init, dims, op);
}

// sum / prod in the accumulator type, then the output type and shape (keepdim included).
template <bool kProd>
Value SumOrProd(Ctx& ctx, Value x, const std::vector<int64_t>& dims) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  if (acc == ElemType::Pred) acc = ElemType::S64;
  x = ConvertTo(ctx, x, acc);
  Value init = ctx.b.Constant(kProd ? 1 : 0, {acc, {}});
  Value r = ReduceWith(ctx, x, dims, kProd ? "multiply" : "add", init);
  return ctx.b.Reshape(ConvertTo(ctx, r, ctx.out().elem), ctx.out().dims);
}

std::vector<Value> LowerSumDim(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {SumOrProd<false>(ctx, x, ReduceDims(a, 1, x.type.rank()))};
}
std::vector<Value> LowerSumAll(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {SumOrProd<false>(ctx, x, AllDims(x.type.rank()))};
}
std::vector<Value> LowerProdAll(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {SumOrProd<true>(ctx, x, AllDims(x.type.rank()))};
}
std::vector<Value> LowerProdDim(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {SumOrProd<true>(ctx, x, {WrapDim(a.int_(1), x.type.rank())})};
}

Value Mean(Ctx& ctx, Value x, const std::vector<int64_t>& dims) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  int64_t count = 1;
  for (int64_t d : dims) count *= x.type.dims[d];
  Value s = ctx.b.Reduce(ConvertTo(ctx, x, acc), ctx.b.Constant(0, {acc, {}}), dims, "add");
  s = ctx.b.Binary("divide", s, ctx.b.Constant(static_cast<double>(count), s.type));
  return ctx.b.Reshape(ConvertTo(ctx, s, ctx.out().elem), ctx.out().dims);
}

std::vector<Value> LowerMeanDim(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {Mean(ctx, x, ReduceDims(a, 1, x.type.rank()))};
}
std::vector<Value> LowerMeanAll(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {Mean(ctx, x, AllDims(x.type.rank()))};
}

// max/min over dims; NaN wins, as in PyTorch. XLA's CPU backend compiles maximum/minimum
// without NaN propagation by default (xla_cpu_enable_fast_min_max), so NaN is put back.
template <bool kMax>
Value Extremum(Ctx& ctx, Value x, const std::vector<int64_t>& dims) {
  ElemType e = x.type.elem;
  Value init = ctx.b.Extreme(!kMax, {e, {}});
  const char* op = e == ElemType::Pred ? (kMax ? "or" : "and") : (kMax ? "maximum" : "minimum");
  Value r = ctx.b.Reduce(x, init, dims, op);
  if (!IsFloat(e)) return r;
  Value any_nan = ctx.b.Reduce(ctx.b.Compare(Cmp::NE, x, x), ctx.b.Constant(0, {ElemType::Pred, {}}), dims, "or");
  return ctx.b.Select(any_nan, ctx.b.Constant(NAN, r.type), r);
}

template <bool kMax>
std::vector<Value> LowerAmax(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {ctx.b.Reshape(Extremum<kMax>(ctx, x, ReduceDims(a, 1, x.type.rank())), ctx.out().dims)};
}

template <bool kMax>
std::vector<Value> LowerMaxAll(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {ctx.b.Reshape(Extremum<kMax>(ctx, x, AllDims(x.type.rank())), ctx.out().dims)};
}

// Index of the first element equal to the extreme along `dim` (NaN counts as the extreme).
template <bool kMax>
std::pair<Value, Value> ArgExtremum(Ctx& ctx, Value x, int64_t dim) {
  Value m = Extremum<kMax>(ctx, x, {dim});
  std::vector<int64_t> mapping;
  for (int64_t i = 0; i < x.type.rank(); ++i)
    if (i != dim) mapping.push_back(i);
  Value mb = ctx.b.BroadcastInDim(m, x.type.dims, mapping);
  Value hit = ctx.b.Compare(Cmp::EQ, x, mb);
  if (IsFloat(x.type.elem)) {
    Value both_nan = ctx.b.Op1("stablehlo.and", {ctx.b.Compare(Cmp::NE, x, x), ctx.b.Compare(Cmp::NE, mb, mb)}, hit.type);
    hit = ctx.b.Op1("stablehlo.or", {hit, both_nan}, hit.type);
  }
  TensorType idx_type{ElemType::S64, x.type.dims};
  Value idx = ctx.b.Select(hit, ctx.b.Iota(idx_type, dim), ctx.b.Extreme(true, idx_type));
  Value first = ctx.b.Reduce(idx, ctx.b.Extreme(true, {ElemType::S64, {}}), {dim}, "minimum");
  return {m, first};
}

// max.dim / min.dim -> (values, indices)
template <bool kMax>
std::vector<Value> LowerMaxDim(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.rank() == 0) return {x, ctx.b.ConstantInt(0, ctx.out(1))};
  auto [m, idx] = ArgExtremum<kMax>(ctx, x, WrapDim(a.int_(1), x.type.rank()));
  return {ctx.b.Reshape(m, ctx.out(0).dims), ctx.b.Reshape(idx, ctx.out(1).dims)};
}

// argmax(self, dim?, keepdim): dim None flattens.
template <bool kMax>
std::vector<Value> LowerArgmax(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t dim;
  if (a.is_none(1)) {
    x = ctx.b.Reshape(x, {x.type.numel()});
    dim = 0;
  } else {
    if (x.type.rank() == 0) return {ctx.b.ConstantInt(0, ctx.out())};
    dim = WrapDim(a.int_(1), x.type.rank());
  }
  return {ctx.b.Reshape(ArgExtremum<kMax>(ctx, x, dim).second, ctx.out().dims)};
}

// any/all: reduce the operand as bool.
template <bool kAny>
Value AnyAll(Ctx& ctx, Value x, const std::vector<int64_t>& dims) {
  Value p = ctx.b.Compare(Cmp::NE, x, ctx.b.Constant(0, x.type));
  Value r = ctx.b.Reduce(p, ctx.b.Constant(kAny ? 0 : 1, {ElemType::Pred, {}}), dims, kAny ? "or" : "and");
  return ctx.b.Reshape(ConvertTo(ctx, r, ctx.out().elem), ctx.out().dims);
}

template <bool kAny>
std::vector<Value> LowerAnyAll(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {AnyAll<kAny>(ctx, x, AllDims(x.type.rank()))};
}
template <bool kAny>
std::vector<Value> LowerAnyAllDim(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {AnyAll<kAny>(ctx, x, {WrapDim(a.int_(1), x.type.rank())})};
}
template <bool kAny>
std::vector<Value> LowerAnyAllDims(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {AnyAll<kAny>(ctx, x, ReduceDims(a, 1, x.type.rank()))};
}

// var/std with Bessel-style correction: sum((x - mean)^2) / max(N - correction, 0). The
// correction is a Scalar, so it arrives as a run-time 0-d operand (default 1).
template <bool kStd>
std::vector<Value> LowerVar(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  std::vector<int64_t> dims = ReduceDims(a, 1, x.type.rank());
  ElemType acc = AccumulatorType(ctx.out().elem);
  x = ConvertTo(ctx, x, acc);
  int64_t n = 1;
  for (int64_t d : dims) n *= x.type.dims[d];
  Value zero = ctx.b.Constant(0, {acc, {}});
  Value sum = ctx.b.Reduce(x, zero, dims, "add");
  Value mean_r = ctx.b.Binary("divide", sum, ctx.b.Constant(static_cast<double>(n), sum.type));
  std::vector<int64_t> mapping;
  for (int64_t i = 0; i < x.type.rank(); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == i;
    if (!reduced) mapping.push_back(i);
  }
  Value centered = ctx.b.Binary("subtract", x, ctx.b.BroadcastInDim(mean_r, x.type.dims, mapping));
  Value sq = ctx.b.Reduce(ctx.b.Binary("multiply", centered, centered), zero, dims, "add");
  Value correction = a.is_none(2) ? ctx.b.Constant(1, sq.type) : CastTo(ctx, a.tensor(2), sq.type);
  Value denom = ctx.b.Binary("subtract", ctx.b.Constant(static_cast<double>(n), sq.type), correction);
  denom = ctx.b.Binary("maximum", denom, ctx.b.Constant(0, sq.type));
  Value v = ctx.b.Binary("divide", sq, denom);
  if (kStd) v = ctx.b.Unary("sqrt", v);
  return {ctx.b.Reshape(ConvertTo(ctx, v, ctx.out().elem), ctx.out().dims)};
}

// linalg_vector_norm(x, ord, dim?, keepdim, dtype?). ord is a Scalar, hence a run-time
// operand: every family is reduced and ord picks one. inf: max|x|; -inf: min|x|; 0: the
// count of nonzeros; otherwise (sum |x|^ord)^(1/ord), with ord 1 and 2 as sum|x| and sqrt(sum x^2).
std::vector<Value> LowerVectorNorm(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value x = ctx.b.Unary("abs", ConvertTo(ctx, a.tensor(0), acc));
  std::vector<int64_t> dims = ReduceDims(a, 2, x.type.rank());
  Value p = ConvertTo(ctx, a.tensor(1), acc);
  Value zero = ctx.b.Constant(0, {acc, {}});
  Value sum_abs = ctx.b.Reduce(x, zero, dims, "add");
  TensorType r = sum_abs.type;
  auto is = [&](double v) { return ctx.b.Compare(Cmp::EQ, BroadcastTo(ctx, p, r.dims), ctx.b.Constant(v, r)); };
  Value pb = BroadcastTo(ctx, p, x.type.dims);
  Value general = ctx.b.Binary("power", ctx.b.Reduce(ctx.b.Binary("power", x, pb), zero, dims, "add"),
                               ctx.b.Binary("divide", ctx.b.Constant(1, r), BroadcastTo(ctx, p, r.dims)));
  Value two = ctx.b.Unary("sqrt", ctx.b.Reduce(ctx.b.Binary("multiply", x, x), zero, dims, "add"));
  Value is_nonzero = ConvertTo(ctx, ctx.b.Compare(Cmp::NE, x, ctx.b.Constant(0, x.type)), acc);
  Value nonzero = ctx.b.Reduce(is_nonzero, zero, dims, "add");
  Value v = ctx.b.Select(is(2), two, ctx.b.Select(is(1), sum_abs, general));
  v = ctx.b.Select(is(0), nonzero, v);
  v = ctx.b.Select(is(INFINITY), Extremum<true>(ctx, x, dims), v);
  v = ctx.b.Select(is(-INFINITY), Extremum<false>(ctx, x, dims), v);
  return {ctx.b.Reshape(ConvertTo(ctx, v, ctx.out().elem), ctx.out().dims)};
}

}  // namespace

TPU_LOWERING("aten::all", LowerAnyAll<false>);
TPU_LOWERING("aten::all.dim", LowerAnyAllDim<false>);
TPU_LOWERING("aten::all.dims", LowerAnyAllDims<false>);
TPU_LOWERING("aten::amax", LowerAmax<true>);
TPU_LOWERING("aten::amin", LowerAmax<false>);
TPU_LOWERING("aten::any", LowerAnyAll<true>);
TPU_LOWERING("aten::any.dim", LowerAnyAllDim<true>);
TPU_LOWERING("aten::any.dims", LowerAnyAllDims<true>);
TPU_LOWERING("aten::argmax", LowerArgmax<true>);
TPU_LOWERING("aten::argmin", LowerArgmax<false>);
TPU_LOWERING("aten::max", LowerMaxAll<true>);
TPU_LOWERING("aten::max.dim", LowerMaxDim<true>);
TPU_LOWERING("aten::linalg_vector_norm", LowerVectorNorm);
TPU_LOWERING("aten::mean", LowerMeanAll);
TPU_LOWERING("aten::mean.dim", LowerMeanDim);
TPU_LOWERING("aten::min", LowerMaxAll<false>);
TPU_LOWERING("aten::min.dim", LowerMaxDim<false>);
TPU_LOWERING("aten::prod", LowerProdAll);
TPU_LOWERING("aten::prod.dim_int", LowerProdDim);
TPU_LOWERING("aten::std.correction", LowerVar<true>);
TPU_LOWERING("aten::sum", LowerSumAll);
TPU_LOWERING("aten::sum.dim_IntList", LowerSumDim);
TPU_LOWERING("aten::var.correction", LowerVar<false>);

}  // namespace tpu::lowering
