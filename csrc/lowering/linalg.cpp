// Matrix products through dot_general. f16/bf16 accumulate in f32; f32 multiplies at PyTorch's
// float32 matmul precision (ctx.precision: HIGHEST unless torch.set_float32_matmul_precision says).
#include <cmath>

#include "helpers.h"

namespace tpu::lowering {
namespace {

// The product in the accumulator type (f32 for half types).
Value DotAcc(Ctx& ctx, Value x, Value y, std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc,
             std::vector<int64_t> rc) {
  ElemType out = ctx.out().elem;
  x = ConvertTo(ctx, x, out);
  y = ConvertTo(ctx, y, out);
  return ctx.b.DotGeneral(x, y, lb, rb, lc, rc, AccumulatorType(out), ctx.precision);
}

Value Dot(Ctx& ctx, Value x, Value y, std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc,
          std::vector<int64_t> rc) {
  return ConvertTo(ctx, DotAcc(ctx, x, y, lb, rb, lc, rc), ctx.out().elem);
}

// Matrix products do not promote: operands of two dtypes raise, with the CPU's words.
const char* ScalarTypeName(ElemType t) {
  switch (t) {
    case ElemType::F16: return "Half";
    case ElemType::BF16: return "BFloat16";
    case ElemType::F32: return "Float";
    case ElemType::F64: return "Double";
    case ElemType::S64: return "Long";
    case ElemType::S32: return "Int";
    case ElemType::C64: return "ComplexFloat";
    case ElemType::C128: return "ComplexDouble";
    default: return "another dtype";
  }
}
const char* CppTypeName(ElemType t) {  // as caffe2::TypeMeta prints
  switch (t) {
    case ElemType::F16: return "c10::Half";
    case ElemType::BF16: return "c10::BFloat16";
    case ElemType::F32: return "float";
    case ElemType::F64: return "double";
    case ElemType::S64: return "long int";
    case ElemType::S32: return "int";
    case ElemType::C64: return "c10::complex<float>";
    case ElemType::C128: return "c10::complex<double>";
    default: return "another dtype";
  }
}

// mm(a, b) = a @ b for 2-D operands.
std::vector<Value> LowerMm(Ctx& ctx, const Args& a) {
  ElemType x = a.tensor(0).type.elem, y = a.tensor(1).type.elem;
  if (x != y)
    throw std::runtime_error(std::string("expected m1 and m2 to have the same dtype, but got: ") + CppTypeName(x) +
                             " != " + CppTypeName(y));
  return {Dot(ctx, a.tensor(0), a.tensor(1), {}, {}, {1}, {0})};
}

// bmm(a, b): batched over dim 0.
std::vector<Value> LowerBmm(Ctx& ctx, const Args& a) { return {Dot(ctx, a.tensor(0), a.tensor(1), {0}, {0}, {2}, {1})}; }

std::vector<Value> LowerDot(Ctx& ctx, const Args& a) {
  ElemType x = a.tensor(0).type.elem, y = a.tensor(1).type.elem;
  if (x != y)
    throw std::runtime_error(std::string("dot : expected both vectors to have same dtype, but found ") +
                             ScalarTypeName(x) + " and " + ScalarTypeName(y));
  return {Dot(ctx, a.tensor(0), a.tensor(1), {}, {}, {0}, {0})};
}

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
  ElemType x = a.tensor(1).type.elem, y = a.tensor(2).type.elem, self = a.tensor(0).type.elem;
  if (x != y || self != x)
    throw std::runtime_error(std::string("self and mat2 must have the same dtype, but got ") +
                             ScalarTypeName(x != y ? x : self) + " and " + ScalarTypeName(x != y ? y : x));
  return {Blend(ctx, a.tensor(0), DotAcc(ctx, a.tensor(1), a.tensor(2), {}, {}, {1}, {0}), a, 3)};
}
std::vector<Value> LowerAddmv(Ctx& ctx, const Args& a) {
  return {Blend(ctx, a.tensor(0), DotAcc(ctx, a.tensor(1), a.tensor(2), {}, {}, {1}, {0}), a, 3)};
}
std::vector<Value> LowerBaddbmm(Ctx& ctx, const Args& a) {
  return {Blend(ctx, a.tensor(0), DotAcc(ctx, a.tensor(1), a.tensor(2), {0}, {0}, {2}, {1}), a, 3)};
}


// addr(self, v1, v2, beta, alpha) = beta * self + alpha * outer(v1, v2); self is ignored when
// beta == 0. Half types round every step with beta and alpha in the tensor type, as PyTorch's
// CPU kernel (no opmath there).
std::vector<Value> LowerAddr(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value s = CastTo(ctx, a.tensor(0), t);
  std::vector<int64_t> d = t.dims;
  Value v1 = ctx.b.BroadcastInDim(ConvertTo(ctx, a.tensor(1), t.elem), d, {0});
  Value v2 = ctx.b.BroadcastInDim(ConvertTo(ctx, a.tensor(2), t.elem), d, {1});
  Value beta = a.is_none(3) ? ctx.b.Constant(1, t) : CastTo(ctx, a.tensor(3), t);
  Value alpha = a.is_none(4) ? ctx.b.Constant(1, t) : CastTo(ctx, a.tensor(4), t);
  if (t.elem == ElemType::Pred) {
    Value prod = ctx.b.Binary("and", ctx.b.Binary("and", alpha, v1), v2);
    return {ctx.b.Select(beta, ctx.b.Binary("or", s, prod), prod)};
  }
  ElemType acc = AccumulatorType(t.elem);
  auto step = [&](Value x) { return ConvertTo(ctx, ConvertTo(ctx, x, t.elem), acc); };  // round to t
  auto up = [&](Value x) { return ConvertTo(ctx, x, acc); };
  Value prod = step(ctx.b.Binary("multiply", step(ctx.b.Binary("multiply", up(alpha), up(v1))), up(v2)));
  Value scaled = step(ctx.b.Binary("multiply", up(beta), up(s)));
  Value zero = ctx.b.Constant(0, scaled.type);
  scaled = ctx.b.Select(ctx.b.Compare(Cmp::EQ, up(beta), zero), zero, scaled);
  return {ConvertTo(ctx, ctx.b.Binary("add", scaled, prod), t.elem)};
}

// vdot(a, b) = sum(conj(a) * b) of 1-D operands (real types: dot).
std::vector<Value> LowerVdot(Ctx& ctx, const Args& a) {
  if (IsComplex(ctx.out().elem)) throw Unsupported("complex vdot");
  return {Dot(ctx, a.tensor(0), a.tensor(1), {}, {}, {0}, {0})};
}

// addbmm(self, b1, b2, beta, alpha) = beta * self + alpha * sum_i b1[i] @ b2[i], accumulated
// batch by batch and rounded to the result type after each, as PyTorch's CPU kernel adds one
// addmm per batch (up to 64 batches; beyond, one contraction over batch and inner dims).
std::vector<Value> LowerAddbmm(Ctx& ctx, const Args& a) {
  Value b1 = a.tensor(1), b2 = a.tensor(2);
  int64_t n = b1.type.dims[0];
  if (n == 0 || n > 64) return {Blend(ctx, a.tensor(0), DotAcc(ctx, b1, b2, {}, {}, {0, 2}, {0, 1}), a, 3)};
  const TensorType& t = ctx.out();
  auto batch = [&](Value v, int64_t i) {
    std::vector<int64_t> start = {i, 0, 0}, limit = v.type.dims, ones = {1, 1, 1};
    limit[0] = i + 1;
    return ctx.b.Reshape(ctx.b.Slice(v, start, limit, ones), {v.type.dims[1], v.type.dims[2]});
  };
  Value r = Blend(ctx, a.tensor(0), DotAcc(ctx, batch(b1, 0), batch(b2, 0), {}, {}, {1}, {0}), a, 3);
  std::vector<Arg> args(5);  // the later batches: beta = 1, the same alpha
  args[3].kind = Arg::Kind::None;
  args[4] = a.raw(4);
  for (int64_t i = 1; i < n; ++i) r = Blend(ctx, r, DotAcc(ctx, batch(b1, i), batch(b2, i), {}, {}, {1}, {0}), Args(args), 3);
  return {CastTo(ctx, r, t)};
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


// ---- pairwise distances ----

// x [.., P, M] and y [.., R, M] as [.., P, R, M] operands (batch dims already broadcast).
std::pair<Value, Value> PairGrid(Ctx& ctx, Value x, Value y) {
  int64_t r = x.type.rank();
  std::vector<int64_t> dims(x.type.dims.begin(), x.type.dims.end() - 1);
  dims.push_back(y.type.dims[r - 2]);
  dims.push_back(x.type.dims[r - 1]);
  std::vector<int64_t> xm, ym;
  for (int64_t i = 0; i < r - 2; ++i) {
    xm.push_back(i);
    ym.push_back(i);
  }
  xm.push_back(r - 2);
  xm.push_back(r);
  ym.push_back(r - 1);
  ym.push_back(r);
  return {ctx.b.BroadcastInDim(x, dims, xm), ctx.b.BroadcastInDim(y, dims, ym)};
}

// The p-norm over the last dim of diff: p = 0 counts nonzeros, inf takes the largest |d|.
Value PNormLast(Ctx& ctx, Value diff, double p) {
  int64_t last = diff.type.rank() - 1;
  Value zero = ctx.b.Constant(0, {diff.type.elem, {}});
  Value ad = ctx.b.Unary("abs", diff);
  if (p == 0) return ctx.b.Reduce(ctx.b.Convert(ctx.b.Compare(Cmp::NE, diff, Const(ctx, 0, diff)), diff.type.elem), zero, {last}, "add");
  if (std::isinf(p)) return ctx.b.Reduce(ad, zero, {last}, "maximum");
  if (p == 1) return ctx.b.Reduce(ad, zero, {last}, "add");
  if (p == 2) return ctx.b.Unary("sqrt", ctx.b.Reduce(Mul(ctx, diff, diff), zero, {last}, "add"));
  Value s = ctx.b.Reduce(ctx.b.Binary("power", ad, Const(ctx, p, ad)), zero, {last}, "add");
  return ctx.b.Binary("power", s, Const(ctx, 1 / p, s));
}

// x and y broadcast to the output's batch dims.
std::pair<Value, Value> CdistOperands(Ctx& ctx, Value x, Value y, const std::vector<int64_t>& out_dims, ElemType e) {
  std::vector<int64_t> bx(out_dims.begin(), out_dims.end() - 2), by = bx;
  bx.push_back(x.type.dims[x.type.rank() - 2]);
  bx.push_back(x.type.dims.back());
  by.push_back(y.type.dims[y.type.rank() - 2]);
  by.push_back(y.type.dims.back());
  return {BroadcastTo(ctx, ConvertTo(ctx, x, e), bx), BroadcastTo(ctx, ConvertTo(ctx, y, e), by)};
}

// _cdist_forward(x1, x2, p, compute_mode): p = 2 through a matrix product (as PyTorch:
// sqrt(max(|x|^2 + |y|^2 - 2 x.y, 1e-30))) when compute_mode asks for it, or by default with
// more than 25 rows on a side; otherwise the p-norm of the differences.
std::vector<Value> LowerCdist(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  ElemType e = AccumulatorType(t.elem);
  auto [x, y] = CdistOperands(ctx, a.tensor(0), a.tensor(1), t.dims, e);
  double p = a.double_(2);
  int64_t mode = a.int_or(3, 0), r = x.type.rank();
  int64_t rows_x = x.type.dims[r - 2], rows_y = y.type.dims[r - 2];
  bool mm = p == 2 && (mode == 1 || (mode == 0 && (rows_x > 25 || rows_y > 25)));
  if (x.type.dims.back() == 0) return {ctx.b.Constant(0, t)};
  if (mm) {
    std::vector<int64_t> batch;
    for (int64_t i = 0; i < r - 2; ++i) batch.push_back(i);
    Value xn = ctx.b.Reduce(Mul(ctx, x, x), ctx.b.Constant(0, {e, {}}), {r - 1}, "add");  // [.., P]
    Value yn = ctx.b.Reduce(Mul(ctx, y, y), ctx.b.Constant(0, {e, {}}), {r - 1}, "add");
    // At full f32 whatever the matmul setting: |x|^2 + |y|^2 - 2xy cancels near equal points.
    Value xy = ctx.b.DotGeneral(x, y, batch, batch, {r - 1}, {r - 1}, e);  // [.., P, R]
    std::vector<int64_t> xm = batch, ym = batch;
    xm.push_back(r - 2);
    ym.push_back(r - 1);
    Value sq = Add(ctx, Add(ctx, Mul(ctx, xy, Const(ctx, -2, xy)), ctx.b.BroadcastInDim(xn, xy.type.dims, xm)),
                   ctx.b.BroadcastInDim(yn, xy.type.dims, ym));
    sq = ctx.b.Binary("maximum", sq, Const(ctx, 1e-30, sq));
    return {ConvertTo(ctx, ctx.b.Unary("sqrt", sq), t.elem)};
  }
  auto [gx, gy] = PairGrid(ctx, x, y);
  return {ConvertTo(ctx, PNormLast(ctx, Sub(ctx, gx, gy), p), t.elem)};
}

// d dist / d x for every pair: the per-coordinate factor that multiplies the incoming grad.
Value DistGradFactor(Ctx& ctx, Value diff, Value dist, double p) {
  Value zero = Const(ctx, 0, diff), sign = ctx.b.Unary("sign", diff);
  if (p == 0) return zero;
  if (p == 1) return sign;
  Value ad = ctx.b.Unary("abs", diff);
  Value safe = ctx.b.Select(ctx.b.Compare(Cmp::EQ, dist, zero), Const(ctx, 1, dist), dist);
  Value f;
  if (std::isinf(p)) {
    f = ctx.b.Select(ctx.b.Compare(Cmp::EQ, ad, dist), sign, zero);
  } else if (p == 2) {
    f = Div(ctx, diff, safe);
  } else {
    f = Div(ctx, Mul(ctx, sign, ctx.b.Binary("power", ad, Const(ctx, p - 1, ad))), ctx.b.Binary("power", safe, Const(ctx, p - 1, safe)));
    if (p < 1) f = ctx.b.Select(ctx.b.Compare(Cmp::EQ, diff, zero), zero, f);
  }
  return ctx.b.Select(ctx.b.Compare(Cmp::EQ, dist, zero), zero, f);
}

// _cdist_backward(grad, x1, x2, p, cdist) -> grad of x1: sum_j grad_ij d dist_ij / d x1_i.
std::vector<Value> LowerCdistBackward(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  ElemType e = AccumulatorType(t.elem);
  Value g = ConvertTo(ctx, a.tensor(0), e), dist = ConvertTo(ctx, a.tensor(4), e);
  auto [x, y] = CdistOperands(ctx, a.tensor(1), a.tensor(2), g.type.dims, e);
  auto [gx, gy] = PairGrid(ctx, x, y);
  int64_t r = gx.type.rank();
  std::vector<int64_t> map(r - 1);
  for (int64_t i = 0; i < r - 1; ++i) map[i] = i;
  Value f = DistGradFactor(ctx, Sub(ctx, gx, gy), ctx.b.BroadcastInDim(dist, gx.type.dims, map), a.double_(3));
  Value contrib = Mul(ctx, f, ctx.b.BroadcastInDim(g, gx.type.dims, map));
  Value sum = ctx.b.Reduce(contrib, ctx.b.Constant(0, {e, {}}), {r - 2}, "add");
  return {ConvertTo(ctx, ctx.b.Reshape(sum, t.dims), t.elem)};
}

// The strict upper triangle of an n x n matrix in row-major order (pdist's layout).
Value UpperTriangle(Ctx& ctx, Value m) {
  int64_t n = m.type.dims[0];
  std::vector<Value> parts;
  for (int64_t i = 0; i + 1 < n; ++i) parts.push_back(ctx.b.Reshape(ctx.b.Slice(m, {i, i + 1}, {i + 1, n}, {1, 1}), {n - 1 - i}));
  if (parts.empty()) return ctx.b.Constant(0, {m.type.elem, {0}});
  return ctx.b.Concatenate(parts, 0);
}

// _pdist_forward(self, p): distances between rows i < j, row-major.
std::vector<Value> LowerPdist(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  ElemType e = AccumulatorType(t.elem);
  Value x = ConvertTo(ctx, a.tensor(0), e);
  auto [gx, gy] = PairGrid(ctx, x, x);
  return {ConvertTo(ctx, UpperTriangle(ctx, PNormLast(ctx, Sub(ctx, gx, gy), a.double_(1))), t.elem)};
}

// _pdist_backward(grad, self, p, pdist): the condensed grad spread to a symmetric matrix,
// then as cdist's backward.
std::vector<Value> LowerPdistBackward(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  ElemType e = AccumulatorType(t.elem);
  Value x = ConvertTo(ctx, a.tensor(1), e);
  int64_t n = x.type.dims[0];
  if (t.numel() == 0 || n < 2) return {ctx.b.Constant(0, t)};
  Value g = ConvertTo(ctx, a.tensor(0), e), d = ConvertTo(ctx, a.tensor(3), e);
  auto square = [&](Value v) {  // condensed [n(n-1)/2] -> upper triangle n x n
    std::vector<Value> rows;
    int64_t k = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t len = n - 1 - i;
      Value row = len ? ctx.b.Slice(v, {k}, {k + len}, {1}) : ctx.b.Constant(0, {e, {0}});
      rows.push_back(ctx.b.Reshape(ctx.b.Pad(row, ctx.b.Constant(0, {e, {}}), {i + 1}, {0}, {0}), {1, n}));
      k += len;
    }
    Value u = ctx.b.Concatenate(rows, 0);
    return Add(ctx, u, ctx.b.Transpose(u, {1, 0}));
  };
  Value G = square(g), D = square(d);
  auto [gx, gy] = PairGrid(ctx, x, x);
  Value f = DistGradFactor(ctx, Sub(ctx, gx, gy), ctx.b.BroadcastInDim(D, gx.type.dims, {0, 1}), a.double_(2));
  Value contrib = Mul(ctx, f, ctx.b.BroadcastInDim(G, gx.type.dims, {0, 1}));
  return {ConvertTo(ctx, ctx.b.Reduce(contrib, ctx.b.Constant(0, {e, {}}), {1}, "add"), t.elem)};
}

}  // namespace

TPU_LOWERING("aten::_cdist_backward", LowerCdistBackward);
TPU_LOWERING("aten::_cdist_forward", LowerCdist);
TPU_LOWERING("aten::_pdist_backward", LowerPdistBackward);
TPU_LOWERING("aten::_pdist_forward", LowerPdist);
TPU_LOWERING("aten::addbmm", LowerAddbmm);
TPU_LOWERING("aten::addmm", LowerAddmm);
TPU_LOWERING("aten::addmv", LowerAddmv);
TPU_LOWERING("aten::addr", LowerAddr);
TPU_LOWERING("aten::baddbmm", LowerBaddbmm);
TPU_LOWERING("aten::bmm", LowerBmm);
TPU_LOWERING("aten::dot", LowerDot);
TPU_LOWERING("aten::mm", LowerMm);
TPU_LOWERING("aten::mv", LowerMv);
TPU_LOWERING("aten::trace", LowerTrace);
TPU_LOWERING("aten::vdot", LowerVdot);

}  // namespace tpu::lowering
