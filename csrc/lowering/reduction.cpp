// Reductions: one ReduceWith rule shared by sum, prod, amax, amin, any, all; arg-reductions
// find the first index that attains the extreme. f16/bf16 accumulate in f32.
#include <cmath>
#include <numeric>

#include "helpers.h"

namespace tpu::lowering {
namespace {

// The dims to reduce: `dims` normalised, all dims when empty or None (PyTorch's rule).
std::vector<int64_t> ReduceDims(const Args& a, size_t arg, int64_t rank) {
  if (rank == 0) return {};  // a 0-d tensor reduces over dim 0 or -1 to itself
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

// A single reduction dim; none for a 0-d tensor.
std::vector<int64_t> OneDim(int64_t dim, int64_t rank) {
  if (rank == 0) return {};
  return {WrapDim(dim, rank)};
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
  return {SumOrProd<true>(ctx, x, OneDim(a.int_(1), x.type.rank()))};
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

// max()/min() of nothing have no value: the CPU raises (shapes are static, so it is known here).
template <bool kMax>
std::vector<Value> LowerMaxAll(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.numel() == 0) {
    throw std::runtime_error(std::string(kMax ? "max" : "min") +
                             "(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                             "reduction dim with the 'dim' argument.");
  }
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
  int64_t dim = WrapDim(a.int_(1), x.type.rank());
  if (x.type.dims[dim] == 0) {  // IndexError on the CPU
    throw std::out_of_range(std::string(kMax ? "max" : "min") + "(): Expected reduction dim " + std::to_string(dim) +
                            " to have non-zero size.");
  }
  auto [m, idx] = ArgExtremum<kMax>(ctx, x, dim);
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
  return {AnyAll<kAny>(ctx, x, OneDim(a.int_(1), x.type.rank()))};
}
template <bool kAny>
std::vector<Value> LowerAnyAllDims(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {AnyAll<kAny>(ctx, x, ReduceDims(a, 1, x.type.rank()))};
}

// var/std with Bessel-style correction: sum((x - mean)^2) / max(N - correction, 0). The
// correction is a Scalar, so it arrives as a run-time 0-d operand (default 1). Returns
// (var or std, mean) in the accumulator type, reduced (not reshaped).
std::pair<Value, Value> VarMean(Ctx& ctx, const Args& a, bool take_sqrt, ElemType out_elem) {
  Value x = a.tensor(0);
  std::vector<int64_t> dims = ReduceDims(a, 1, x.type.rank());
  ElemType acc = AccumulatorType(out_elem);
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
  if (take_sqrt) v = ctx.b.Unary("sqrt", v);
  return {v, mean_r};
}

template <bool kStd>
std::vector<Value> LowerVar(Ctx& ctx, const Args& a) {
  Value v = VarMean(ctx, a, kStd, ctx.out().elem).first;
  return {ctx.b.Reshape(ConvertTo(ctx, v, ctx.out().elem), ctx.out().dims)};
}

// var_mean / std_mean (self, dim, correction, keepdim) -> (var or std, mean)
template <bool kStd>
std::vector<Value> LowerVarMean(Ctx& ctx, const Args& a) {
  auto [v, m] = VarMean(ctx, a, kStd, ctx.out(0).elem);
  return {ctx.b.Reshape(ConvertTo(ctx, v, ctx.out(0).elem), ctx.out(0).dims),
          ctx.b.Reshape(ConvertTo(ctx, m, ctx.out(1).elem), ctx.out(1).dims)};
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


// aminmax(self, dim?, keepdim) -> (min, max)
std::vector<Value> LowerAminmax(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  std::vector<int64_t> dims = a.is_none(1) ? AllDims(x.type.rank()) : OneDim(a.int_(1), x.type.rank());
  return {ctx.b.Reshape(Extremum<false>(ctx, x, dims), ctx.out(0).dims),
          ctx.b.Reshape(Extremum<true>(ctx, x, dims), ctx.out(1).dims)};
}

// nansum(self, dim?, keepdim, dtype?): NaN counts as zero.
std::vector<Value> LowerNansum(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (IsFloat(x.type.elem)) x = ctx.b.Select(ctx.b.Compare(Cmp::NE, x, x), ctx.b.Constant(0, x.type), x);
  return {SumOrProd<false>(ctx, x, ReduceDims(a, 1, x.type.rank()))};
}

// count_nonzero.dim_IntList(self, dim): the number of nonzero elements (all dims when empty).
std::vector<Value> LowerCountNonzero(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  Value nz = ctx.b.Convert(ctx.b.Compare(Cmp::NE, x, ctx.b.Constant(0, x.type)), ElemType::S64);
  Value r = ctx.b.Reduce(nz, ctx.b.ConstantInt(0, {ElemType::S64, {}}), ReduceDims(a, 1, x.type.rank()), "add");
  return {ctx.b.Reshape(ConvertTo(ctx, r, ctx.out().elem), ctx.out().dims)};
}

// norm.ScalarOpt_dim(self, p?, dim, keepdim[, dtype]): linalg_vector_norm with p None as 2.
std::vector<Value> LowerNormDim(Ctx& ctx, const Args& a) {
  std::vector<Arg> args(4);
  for (size_t i = 0; i < 4 && i < a.size(); ++i) args[i] = a.raw(i);
  if (a.is_none(1)) {
    args[1].kind = Arg::Kind::Tensor;
    args[1].value = ctx.b.Constant(2, {AccumulatorType(ctx.out().elem), {}});
  }
  return LowerVectorNorm(ctx, Args(args));
}

// renorm(self, p, dim, maxnorm): each slice along dim whose p-norm (over the other dims)
// exceeds maxnorm is scaled to maxnorm / (norm + 1e-7).
std::vector<Value> LowerRenorm(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  ElemType acc = AccumulatorType(t.elem);
  Value x = ConvertTo(ctx, a.tensor(0), acc);
  int64_t dim = WrapDim(a.int_(2), x.type.rank());
  std::vector<int64_t> others;
  for (int64_t d = 0; d < x.type.rank(); ++d)
    if (d != dim) others.push_back(d);
  Value norm;
  if (others.empty()) {  // 1-D: each slice is one element
    norm = ctx.b.Unary("abs", x);
  } else {
    std::vector<Arg> args(3);
    args[0].kind = Arg::Kind::Tensor;
    args[0].value = x;
    args[1] = a.raw(1);
    args[2].kind = Arg::Kind::IntList;
    args[2].ints = others;
    Ctx sub{ctx.b, {{acc, {x.type.dims[dim]}}}, acc};
    norm = LowerVectorNorm(sub, Args(args))[0];
  }
  Value maxnorm = CastTo(ctx, a.tensor(3), norm.type);
  Value scale = ctx.b.Binary("divide", maxnorm, ctx.b.Binary("add", norm, ctx.b.Constant(1e-7, norm.type)));
  scale = ctx.b.Select(ctx.b.Compare(Cmp::GT, norm, maxnorm), scale, ctx.b.Constant(1, norm.type));
  Value s = x.type.rank() == 0 ? scale : ctx.b.BroadcastInDim(scale, x.type.dims, {dim});
  return {ConvertTo(ctx, ctx.b.Binary("multiply", x, s), t.elem)};
}

// hash_tensor(self, dim, keepdim, mode 0): the XOR of every element's 64-bit pattern, floats
// as float64 and integers as int64.
std::vector<Value> LowerHashTensor(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (a.int_or(3, 0) != 0) throw Unsupported("hash_tensor mode");
  Value wide = ConvertTo(ctx, x, IsFloat(x.type.elem) ? ElemType::F64 : ElemType::S64);
  Value bits = ctx.b.BitcastConvert(wide, {ElemType::U64, x.type.dims});
  Value r = ctx.b.Reduce(bits, ctx.b.ConstantInt(0, {ElemType::U64, {}}), ReduceDims(a, 1, x.type.rank()), "xor");
  return {ctx.b.Reshape(r, ctx.out().dims)};
}

// histc(self, bins, min, max): counts of self in `bins` equal-width bins over [min, max]
// (the data's min and max when both are 0); values outside are ignored, max falls in the
// last bin. The bin is trunc((x - min) * bins / (max - min)), as PyTorch's CPU kernel.
std::vector<Value> LowerHistc(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  int64_t bins = a.int_(1);
  Value x = ctx.b.Reshape(a.tensor(0), {a.tensor(0).type.numel()});
  ElemType e = x.type.elem;
  TensorType s{e, {}};
  Value lo = CastTo(ctx, a.tensor(2), s), hi = CastTo(ctx, a.tensor(3), s);
  if (x.type.numel() > 0) {
    Value data_lo = Extremum<false>(ctx, x, {0}), data_hi = Extremum<true>(ctx, x, {0});
    Value use_data = ctx.b.Binary("and", ctx.b.Compare(Cmp::EQ, lo, ctx.b.Constant(0, s)), ctx.b.Compare(Cmp::EQ, hi, ctx.b.Constant(0, s)));
    lo = ctx.b.Select(use_data, data_lo, lo);
    hi = ctx.b.Select(use_data, data_hi, hi);
  }
  ctx.AddCheck(ctx.b.Compare(Cmp::GT, lo, hi), "histc: max must be larger than min", Ctx::ErrorKind::Runtime);
  if (IsFloat(e)) {  // the CPU refuses an infinite or NaN range (given, or taken from the data)
    Value finite = ctx.b.Binary("and", ctx.b.Op1("stablehlo.is_finite", {lo}, {ElemType::Pred, {}}),
                                 ctx.b.Op1("stablehlo.is_finite", {hi}, {ElemType::Pred, {}}));
    ctx.AddCheck(ctx.b.Unary("not", finite), "torch.histc: range of [min, max] is not finite", Ctx::ErrorKind::Runtime);
  }
  Value same = ctx.b.Compare(Cmp::EQ, lo, hi);
  lo = ctx.b.Select(same, ctx.b.Binary("subtract", lo, ctx.b.Constant(1, s)), lo);
  hi = ctx.b.Select(same, ctx.b.Binary("add", hi, ctx.b.Constant(1, s)), hi);
  if (x.type.numel() == 0) return {ctx.b.Constant(0, t)};
  TensorType xt = x.type;
  Value lob = BroadcastTo(ctx, lo, xt.dims), hib = BroadcastTo(ctx, hi, xt.dims);
  Value pos = ctx.b.Binary("divide", ctx.b.Binary("multiply", ctx.b.Binary("subtract", x, lob), ctx.b.Constant(static_cast<double>(bins), xt)),
                           ctx.b.Binary("subtract", hib, lob));
  Value bin = ctx.b.Convert(pos, ElemType::S64);
  TensorType it{ElemType::S64, xt.dims};
  bin = ctx.b.Select(ctx.b.Compare(Cmp::EQ, bin, ctx.b.ConstantInt(bins, it)), ctx.b.ConstantInt(bins - 1, it), bin);
  Value inside = ctx.b.Binary("and", ctx.b.Compare(Cmp::GE, x, lob), ctx.b.Compare(Cmp::LE, x, hib));
  bin = ctx.b.Select(inside, bin, ctx.b.ConstantInt(bins, it));  // dropped by the scatter
  Value counts = ScatterPoints(ctx, ctx.b.Constant(0, t), ctx.b.Reshape(bin, {xt.dims[0], 1}), ctx.b.Constant(1, {t.elem, xt.dims}), "add");
  return {counts};
}

}  // namespace

TPU_LOWERING("aten::all", LowerAnyAll<false>);
TPU_LOWERING("aten::all.dim", LowerAnyAllDim<false>);
TPU_LOWERING("aten::all.dims", LowerAnyAllDims<false>);
TPU_LOWERING("aten::amax", LowerAmax<true>);
TPU_LOWERING("aten::amin", LowerAmax<false>);
TPU_LOWERING("aten::aminmax", LowerAminmax);
TPU_LOWERING("aten::any", LowerAnyAll<true>);
TPU_LOWERING("aten::any.dim", LowerAnyAllDim<true>);
TPU_LOWERING("aten::any.dims", LowerAnyAllDims<true>);
TPU_LOWERING("aten::argmax", LowerArgmax<true>);
TPU_LOWERING("aten::argmin", LowerArgmax<false>);
TPU_LOWERING("aten::count_nonzero.dim_IntList", LowerCountNonzero);
TPU_LOWERING("aten::hash_tensor", LowerHashTensor);
TPU_LOWERING("aten::histc", LowerHistc);
TPU_LOWERING("aten::linalg_vector_norm", LowerVectorNorm);
TPU_LOWERING("aten::max", LowerMaxAll<true>);
TPU_LOWERING("aten::max.dim", LowerMaxDim<true>);
TPU_LOWERING("aten::mean", LowerMeanAll);
TPU_LOWERING("aten::mean.dim", LowerMeanDim);
TPU_LOWERING("aten::min", LowerMaxAll<false>);
TPU_LOWERING("aten::min.dim", LowerMaxDim<false>);
TPU_LOWERING("aten::nansum", LowerNansum);
TPU_LOWERING("aten::norm.ScalarOpt_dim", LowerNormDim);
TPU_LOWERING("aten::norm.ScalarOpt_dim_dtype", LowerNormDim);
TPU_LOWERING("aten::prod", LowerProdAll);
TPU_LOWERING("aten::prod.dim_int", LowerProdDim);
TPU_LOWERING("aten::renorm", LowerRenorm);
TPU_LOWERING("aten::std.correction", LowerVar<true>);
TPU_LOWERING("aten::std_mean.correction", LowerVarMean<true>);
TPU_LOWERING("aten::sum", LowerSumAll);
TPU_LOWERING("aten::sum.dim_IntList", LowerSumDim);
TPU_LOWERING("aten::var.correction", LowerVar<false>);
TPU_LOWERING("aten::var_mean.correction", LowerVarMean<false>);

}  // namespace tpu::lowering
