// Matrix factorizations and the solvers built on them: triangular solves and Cholesky through
// StableHLO's own ops; LU with partial pivoting, Householder QR, symmetric eigenvalues
// (cyclic Jacobi) and SVD (one-sided Jacobi) as stablehlo.while loops over the columns, with
// masked elementwise updates so every batch element runs in lockstep. Matrices are the last
// two dims; half types compute in f32. Pivots and info follow LAPACK (1-based, int32).
// _linalg_det and _linalg_slogdet are kernels in csrc/aten: which matrix PyTorch factors
// depends on the input's memory layout.
#include <cmath>

#include "helpers.h"

namespace tpu::lowering {
namespace {

// ---- small matrix helpers ----

int64_t R(const Value& v) { return v.type.rank(); }
std::vector<int64_t> Batch(const Value& v) { return std::vector<int64_t>(v.type.dims.begin(), v.type.dims.end() - 2); }
std::vector<int64_t> WithBatch(const std::vector<int64_t>& batch, std::initializer_list<int64_t> tail) {
  std::vector<int64_t> d = batch;
  d.insert(d.end(), tail);
  return d;
}
TensorType S64(const std::vector<int64_t>& dims) { return {ElemType::S64, dims}; }
Value Scalar64(Ctx& ctx, int64_t v) { return ctx.b.ConstantInt(v, S64({})); }
Value Zeros(Ctx& ctx, const Value& like) { return ctx.b.Constant(0, like.type); }

// The compute type of a linalg result: f32 for half types.
ElemType Compute(ElemType e) { return AccumulatorType(e); }

Value RowIota(Ctx& ctx, const Value& a) { return ctx.b.Iota(S64(a.type.dims), R(a) - 2); }
Value ColIota(Ctx& ctx, const Value& a) { return ctx.b.Iota(S64(a.type.dims), R(a) - 1); }
// A scalar or per-batch s64 index broadcast to `dims` (batch dims leading).
Value Bcast(Ctx& ctx, Value idx, const std::vector<int64_t>& dims) {
  std::vector<int64_t> map(idx.type.rank());
  for (int64_t i = 0; i < idx.type.rank(); ++i) map[i] = i;
  return ctx.b.BroadcastInDim(idx, dims, map);
}
// Column j of a [.., m, n] (j a scalar or per-batch index): [.., m].
Value Column(Ctx& ctx, Value a, Value j) {
  Value hit = ctx.b.Compare(Cmp::EQ, ColIota(ctx, a), Bcast(ctx, j, a.type.dims));
  return ctx.b.Reduce(ctx.b.Select(hit, a, Zeros(ctx, a)), ctx.b.Constant(0, {a.type.elem, {}}), {R(a) - 1}, "add");
}
// Row i of a: [.., n].
Value Row(Ctx& ctx, Value a, Value i) {
  Value hit = ctx.b.Compare(Cmp::EQ, RowIota(ctx, a), Bcast(ctx, i, a.type.dims));
  return ctx.b.Reduce(ctx.b.Select(hit, a, Zeros(ctx, a)), ctx.b.Constant(0, {a.type.elem, {}}), {R(a) - 2}, "add");
}
// [.., m] as every column / [.., n] as every row of a [.., m, n] array.
Value AsColumns(Ctx& ctx, Value v, const std::vector<int64_t>& dims) {
  std::vector<int64_t> map(v.type.rank());
  for (int64_t i = 0; i < v.type.rank(); ++i) map[i] = i;
  return ctx.b.BroadcastInDim(v, dims, map);
}
Value AsRows(Ctx& ctx, Value v, const std::vector<int64_t>& dims) {
  std::vector<int64_t> map(v.type.rank());
  for (int64_t i = 0; i + 1 < v.type.rank(); ++i) map[i] = i;
  map.back() = static_cast<int64_t>(dims.size()) - 1;
  return ctx.b.BroadcastInDim(v, dims, map);
}
Value Outer(Ctx& ctx, Value u, Value v) {
  std::vector<int64_t> dims = u.type.dims;
  dims.push_back(v.type.dims.back());
  return Mul(ctx, AsColumns(ctx, u, dims), AsRows(ctx, v, dims));
}
Value SumLast(Ctx& ctx, Value v) {
  return ctx.b.Reduce(v, ctx.b.Constant(0, {v.type.elem, {}}), {R(v) - 1}, "add");
}
Value Swap(Ctx& ctx, Value a) {
  std::vector<int64_t> perm(R(a));
  for (int64_t i = 0; i < R(a); ++i) perm[i] = i;
  std::swap(perm[R(a) - 1], perm[R(a) - 2]);
  return ctx.b.Transpose(a, perm);
}
Value MatMul(Ctx& ctx, Value a, Value b) {
  std::vector<int64_t> batch;
  for (int64_t i = 0; i + 2 < R(a); ++i) batch.push_back(i);
  return ctx.b.DotGeneral(a, b, batch, batch, {R(a) - 1}, {R(b) - 2}, a.type.elem);
}
Value Identity(Ctx& ctx, const TensorType& t) {
  TensorType it = S64(t.dims);
  int64_t r = t.rank();
  return ctx.b.Convert(ctx.b.Compare(Cmp::EQ, ctx.b.Iota(it, r - 2), ctx.b.Iota(it, r - 1)), t.elem);
}
Value Diagonal(Ctx& ctx, Value a) {
  Value eq = ctx.b.Compare(Cmp::EQ, RowIota(ctx, a), ColIota(ctx, a));
  return ctx.b.Reduce(ctx.b.Select(eq, a, Zeros(ctx, a)), ctx.b.Constant(0, {a.type.elem, {}}), {R(a) - 1}, "add");
}
// Keeps the part of a with col - row >= k (upper) or <= k (lower).
Value Triangle(Ctx& ctx, Value a, bool upper, int64_t k) {
  Value diff = Sub(ctx, ColIota(ctx, a), RowIota(ctx, a));
  Value keep = ctx.b.Compare(upper ? Cmp::GE : Cmp::LE, diff, ctx.b.ConstantInt(k, diff.type));
  return ctx.b.Select(keep, a, Zeros(ctx, a));
}
Value SliceMat(Ctx& ctx, Value a, int64_t rows, int64_t cols) {
  std::vector<int64_t> start(R(a), 0), limit = a.type.dims, ones(R(a), 1);
  limit[R(a) - 2] = rows;
  limit[R(a) - 1] = cols;
  return ctx.b.Slice(a, start, limit, ones);
}
// Broadcasts the batch dims of a and b to each other's (matrix dims kept).
void BroadcastBatch(Ctx& ctx, Value& a, Value& b) {
  std::vector<int64_t> ba = Batch(a), bb = Batch(b), out;
  size_t n = std::max(ba.size(), bb.size());
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i + ba.size() >= n ? ba[i + ba.size() - n] : 1, y = i + bb.size() >= n ? bb[i + bb.size() - n] : 1;
    out.push_back(x == 1 ? y : x);
  }
  auto expand = [&](Value v) {
    std::vector<int64_t> d = out;
    d.push_back(v.type.dims[R(v) - 2]);
    d.push_back(v.type.dims[R(v) - 1]);
    return BroadcastTo(ctx, v, d);
  };
  a = expand(a);
  b = expand(b);
}

// op(a) x = b (left) or x op(a) = b, a triangular.
Value TriSolve(Ctx& ctx, Value a, Value b, bool left, bool lower, bool unit, bool transpose) {
  std::string attrs = std::string("left_side = ") + (left ? "true" : "false") + ", lower = " + (lower ? "true" : "false") +
                      ", unit_diagonal = " + (unit ? "true" : "false") + ", transpose_a = #stablehlo<transpose " +
                      (transpose ? "TRANSPOSE" : "NO_TRANSPOSE") + ">";
  return ctx.b.Op1("stablehlo.triangular_solve", {a, b}, b.type, attrs);
}

// ---- triangular solves and Cholesky ----

// linalg_solve_triangular(A, B, upper, left, unitriangular)
std::vector<Value> LowerSolveTriangular(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  ElemType e = Compute(t.elem);
  Value A = ConvertTo(ctx, a.tensor(0), e), B = ConvertTo(ctx, a.tensor(1), e);
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  BroadcastBatch(ctx, A, B);
  Value x = TriSolve(ctx, A, B, a.bool_or(3, true), !a.bool_(2), a.bool_or(4, false), false);
  return {ConvertTo(ctx, x, t.elem)};
}

// triangular_solve(b, A, upper, transpose, unitriangular) -> (solution, A)
std::vector<Value> LowerTriangularSolve(Ctx& ctx, const Args& a) {
  ElemType e = Compute(ctx.out(0).elem);
  Value B = ConvertTo(ctx, a.tensor(0), e), A = ConvertTo(ctx, a.tensor(1), e);
  Value A0 = A;
  if (ctx.out(0).numel() == 0) return {ctx.b.Constant(0, ctx.out(0)), CastTo(ctx, A0, ctx.out(1))};
  BroadcastBatch(ctx, A, B);
  Value x = TriSolve(ctx, A, B, true, !a.bool_or(2, true), a.bool_or(4, false), a.bool_or(3, false));
  return {ConvertTo(ctx, x, ctx.out(0).elem), CastTo(ctx, A, ctx.out(1))};
}

// The lower Cholesky factor (upper triangle zeroed), NaN where A is not positive definite.
Value CholeskyLower(Ctx& ctx, Value A) {
  Value l = ctx.b.Op1("stablehlo.cholesky", {A}, A.type, "lower = true");
  return Triangle(ctx, l, false, 0);
}

// LAPACK's info for Cholesky: 1 + the first diagonal entry that is not positive (NaN from
// XLA), 0 on success.
Value CholeskyInfo(Ctx& ctx, Value l, const TensorType& info_t) {
  Value d = Diagonal(ctx, l);
  Value bad = Or(ctx, IsNan(ctx, d), ctx.b.Compare(Cmp::LE, d, Zeros(ctx, d)));
  int64_t n = d.type.dims.back();
  Value idx = ctx.b.Iota(S64(d.type.dims), R(d) - 1);
  Value first = ctx.b.Reduce(ctx.b.Select(bad, idx, ctx.b.ConstantInt(n, idx.type)), Scalar64(ctx, n), {R(d) - 1}, "minimum");
  Value info = ctx.b.Select(ctx.b.Compare(Cmp::EQ, first, ctx.b.ConstantInt(n, first.type)), ctx.b.ConstantInt(0, first.type),
                            Add(ctx, first, ctx.b.ConstantInt(1, first.type)));
  return ConvertTo(ctx, ctx.b.Reshape(info, info_t.dims), info_t.elem);
}

// linalg_cholesky_ex(A, upper, check_errors) -> (L, info)
std::vector<Value> LowerCholeskyEx(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out(0);
  if (t.numel() == 0) return {ctx.b.Constant(0, t), ctx.b.Constant(0, ctx.out(1))};
  Value l = CholeskyLower(ctx, ConvertTo(ctx, a.tensor(0), Compute(t.elem)));
  Value info = CholeskyInfo(ctx, l, ctx.out(1));
  if (a.bool_or(1, false)) l = Swap(ctx, l);
  return {ConvertTo(ctx, l, t.elem), info};
}

// cholesky(A, upper)
std::vector<Value> LowerCholesky(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  Value l = CholeskyLower(ctx, ConvertTo(ctx, a.tensor(0), Compute(t.elem)));
  TensorType info_t{ElemType::S32, Batch(l)};
  ctx.AddCheck(AnyTrue(ctx, ctx.b.Compare(Cmp::NE, CholeskyInfo(ctx, l, info_t), ctx.b.ConstantInt(0, info_t))),
               "cholesky: The factorization could not be completed because the input is not positive-definite");
  if (a.bool_or(1, false)) l = Swap(ctx, l);
  return {ConvertTo(ctx, l, t.elem)};
}

// The lower factor of a Cholesky result given as L or U.
Value AsLower(Ctx& ctx, Value f, bool upper) { return upper ? Swap(ctx, f) : f; }

// cholesky_inverse(L, upper) = (L L^T)^-1 = L^-T L^-1
std::vector<Value> LowerCholeskyInverse(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  Value l = AsLower(ctx, ConvertTo(ctx, a.tensor(0), Compute(t.elem)), a.bool_or(1, false));
  Value linv = TriSolve(ctx, l, Identity(ctx, l.type), true, true, false, false);
  return {ConvertTo(ctx, MatMul(ctx, Swap(ctx, linv), linv), t.elem)};
}

// _cholesky_solve_helper(B, L, upper): L L^T X = B
std::vector<Value> LowerCholeskySolve(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  ElemType e = Compute(t.elem);
  Value B = ConvertTo(ctx, a.tensor(0), e), L = AsLower(ctx, ConvertTo(ctx, a.tensor(1), e), a.bool_(2));
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  BroadcastBatch(ctx, L, B);
  Value y = TriSolve(ctx, L, B, true, true, false, false);
  return {ConvertTo(ctx, TriSolve(ctx, L, y, true, true, false, true), t.elem)};
}

// ---- LU with partial pivoting ----

struct Lu {
  Value lu;      // L below the diagonal (unit diagonal implied), U on and above
  Value perm;    // [.., m] s64: row j of P^T A is row perm[j] of A
  Value pivots;  // [.., k] s32, LAPACK's 1-based row swaps
  Value info;    // [..] s32: 1 + the first zero pivot, 0 if none
};

// Right-looking LU: at step i pick the largest |A[r, i]| (r >= i), swap it into row i,
// store the multipliers below the pivot and update the trailing block. A zero pivot skips
// the elimination and sets info, as LAPACK's getrf does.
Lu LuFactor(Ctx& ctx, Value A, bool pivot) {
  int64_t m = A.type.dims[R(A) - 2], n = A.type.dims[R(A) - 1], k = std::min(m, n);
  std::vector<int64_t> batch = Batch(A);
  Value perm0 = ctx.b.Iota(S64(WithBatch(batch, {m})), static_cast<int64_t>(batch.size()));
  Value piv0 = ctx.b.ConstantInt(0, {ElemType::S32, WithBatch(batch, {k})});
  Value info0 = ctx.b.ConstantInt(0, {ElemType::S32, batch});
  auto out = ForLoop(ctx, k, {A, perm0, piv0, info0}, [&](Value i, const std::vector<Value>& v) {
    Value a = v[0], perm = v[1], piv = v[2], info = v[3];
    Value rows = RowIota(ctx, a), cols = ColIota(ctx, a);
    Value col = Column(ctx, a, i);  // [.., m]
    Value ridx = ctx.b.Iota(S64(col.type.dims), R(col) - 1);
    Value ib = Bcast(ctx, i, col.type.dims);
    Value p;
    if (pivot) {
      Value mag = ctx.b.Select(ctx.b.Compare(Cmp::GE, ridx, ib), ctx.b.Unary("abs", col), ctx.b.Constant(-1, col.type));
      Value best = ctx.b.Reduce(mag, ctx.b.Constant(-2, {col.type.elem, {}}), {R(col) - 1}, "maximum");
      Value is_best = ctx.b.Compare(Cmp::EQ, mag, AsColumns(ctx, best, col.type.dims));
      p = ctx.b.Reduce(ctx.b.Select(is_best, ridx, ctx.b.ConstantInt(m, ridx.type)), Scalar64(ctx, m), {R(col) - 1}, "minimum");
      p = ctx.b.Select(ctx.b.Compare(Cmp::GE, p, ctx.b.ConstantInt(m, p.type)), Bcast(ctx, i, p.type.dims), p);  // all NaN
    } else {
      p = Bcast(ctx, i, batch);
    }
    // swap rows i and p of a and of perm
    Value row_i = Row(ctx, a, i), row_p = Row(ctx, a, p);
    Value at_i = ctx.b.Compare(Cmp::EQ, rows, Bcast(ctx, i, a.type.dims));
    Value at_p = ctx.b.Compare(Cmp::EQ, rows, AsColumns(ctx, AsColumns(ctx, p, col.type.dims), a.type.dims));
    a = ctx.b.Select(at_i, AsRows(ctx, row_p, a.type.dims), ctx.b.Select(at_p, AsRows(ctx, row_i, a.type.dims), a));
    Value perm_i = SumLast(ctx, ctx.b.Select(ctx.b.Compare(Cmp::EQ, ridx, ib), perm, ctx.b.ConstantInt(0, perm.type)));
    Value perm_p = SumLast(ctx, ctx.b.Select(ctx.b.Compare(Cmp::EQ, ridx, AsColumns(ctx, p, ridx.type.dims)), perm,
                                             ctx.b.ConstantInt(0, perm.type)));
    Value pi = ctx.b.Compare(Cmp::EQ, ridx, ib), pp = ctx.b.Compare(Cmp::EQ, ridx, AsColumns(ctx, p, ridx.type.dims));
    perm = ctx.b.Select(pi, AsColumns(ctx, perm_p, perm.type.dims), ctx.b.Select(pp, AsColumns(ctx, perm_i, perm.type.dims), perm));
    Value kidx = ctx.b.Iota(S64(piv.type.dims), R(piv) - 1);
    Value p1 = ConvertTo(ctx, Add(ctx, p, ctx.b.ConstantInt(1, p.type)), ElemType::S32);
    piv = ctx.b.Select(ctx.b.Compare(Cmp::EQ, kidx, Bcast(ctx, i, kidx.type.dims)), AsColumns(ctx, p1, piv.type.dims), piv);
    // eliminate below the pivot
    Value urow = Row(ctx, a, i);
    Value d = SumLast(ctx, ctx.b.Select(ctx.b.Compare(Cmp::EQ, ctx.b.Iota(S64(urow.type.dims), R(urow) - 1),
                                                      Bcast(ctx, i, urow.type.dims)),
                                        urow, Zeros(ctx, urow)));  // [..]
    Value zero = ctx.b.Compare(Cmp::EQ, d, Zeros(ctx, d));
    Value i32 = ConvertTo(ctx, Add(ctx, i, Scalar64(ctx, 1)), ElemType::S32);
    info = ctx.b.Select(And(ctx, zero, ctx.b.Compare(Cmp::EQ, info, ctx.b.ConstantInt(0, info.type))),
                        Bcast(ctx, i32, info.type.dims), info);
    Value safe_d = ctx.b.Select(zero, ctx.b.Constant(1, d.type), d);
    Value below = And(ctx, ctx.b.Compare(Cmp::GT, ridx, ib), Not(ctx, AsColumns(ctx, zero, ridx.type.dims)));
    Value l = ctx.b.Select(below, Div(ctx, Column(ctx, a, i), AsColumns(ctx, safe_d, col.type.dims)), Zeros(ctx, col));
    Value update = ctx.b.Select(ctx.b.Compare(Cmp::GT, cols, Bcast(ctx, i, a.type.dims)), Outer(ctx, l, urow), Zeros(ctx, a));
    a = Sub(ctx, a, update);
    Value store = And(ctx, ctx.b.Compare(Cmp::EQ, cols, Bcast(ctx, i, a.type.dims)), AsColumns(ctx, below, a.type.dims));
    a = ctx.b.Select(store, AsColumns(ctx, l, a.type.dims), a);
    return std::vector<Value>{a, perm, piv, info};
  });
  return {out[0], out[1], out[2], out[3]};
}

// The row permutation (perm[j] = the original row now at j) that LAPACK pivots describe.
Value PermFromPivots(Ctx& ctx, Value pivots, int64_t m) {
  int64_t k = pivots.type.dims.back();
  std::vector<int64_t> batch(pivots.type.dims.begin(), pivots.type.dims.end() - 1);
  Value perm0 = ctx.b.Iota(S64(WithBatch(batch, {m})), static_cast<int64_t>(batch.size()));
  Value piv = ConvertTo(ctx, pivots, ElemType::S64);
  return ForLoop(ctx, k, {perm0}, [&](Value i, const std::vector<Value>& v) {
    Value perm = v[0];
    Value kidx = ctx.b.Iota(S64(piv.type.dims), R(piv) - 1);
    Value p = Sub(ctx, SumLast(ctx, ctx.b.Select(ctx.b.Compare(Cmp::EQ, kidx, Bcast(ctx, i, kidx.type.dims)), piv,
                                                  ctx.b.ConstantInt(0, piv.type))),
                  ctx.b.ConstantInt(1, S64(batch)));
    Value ridx = ctx.b.Iota(S64(perm.type.dims), R(perm) - 1);
    Value pi = ctx.b.Compare(Cmp::EQ, ridx, Bcast(ctx, i, ridx.type.dims));
    Value pp = ctx.b.Compare(Cmp::EQ, ridx, AsColumns(ctx, p, ridx.type.dims));
    Value perm_i = SumLast(ctx, ctx.b.Select(pi, perm, ctx.b.ConstantInt(0, perm.type)));
    Value perm_p = SumLast(ctx, ctx.b.Select(pp, perm, ctx.b.ConstantInt(0, perm.type)));
    return std::vector<Value>{ctx.b.Select(pi, AsColumns(ctx, perm_p, perm.type.dims),
                                           ctx.b.Select(pp, AsColumns(ctx, perm_i, perm.type.dims), perm))};
  })[0];
}

// Rows of b [.., n, c] picked by perm [.., n]: result[j] = b[perm[j]].
Value PermuteRows(Ctx& ctx, Value b, Value perm) {
  std::vector<int64_t> map(R(perm));
  for (int64_t i = 0; i < R(perm); ++i) map[i] = i;
  Value full = ctx.b.BroadcastInDim(perm, b.type.dims, map);
  return GatherPoints(ctx, b, CoordsAlongDim(ctx, full, R(b) - 2, R(b)));
}

Value InversePerm(Ctx& ctx, Value perm) {
  Value idx = ctx.b.Iota(perm.type, R(perm) - 1);
  return SortAlong(ctx, {perm, idx}, R(perm) - 1, false)[1];
}

// Solves A X = B (or A^T X = B) from A's LU factors; a and b have matching batch dims.
Value LuSolveLeft(Ctx& ctx, Value lu, Value perm, Value b, bool transpose) {
  if (!transpose) {
    Value y = TriSolve(ctx, lu, PermuteRows(ctx, b, perm), true, true, true, false);
    return TriSolve(ctx, lu, y, true, false, false, false);
  }
  Value w = TriSolve(ctx, lu, b, true, false, false, true);
  Value v = TriSolve(ctx, lu, w, true, true, true, true);
  return PermuteRows(ctx, v, InversePerm(ctx, perm));
}

// The vector case of linalg.solve: B has one dim fewer than A.
bool VectorRhs(const Value& A, const Value& B) { return B.type.rank() == A.type.rank() - 1; }

// linalg_lu_factor_ex(A, pivot, check_errors) -> (LU, pivots, info)
std::vector<Value> LowerLuFactorEx(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out(0);
  if (t.numel() == 0) return {ctx.b.Constant(0, t), ctx.b.Constant(0, ctx.out(1)), ctx.b.Constant(0, ctx.out(2))};
  Lu f = LuFactor(ctx, ConvertTo(ctx, a.tensor(0), Compute(t.elem)), a.bool_or(1, true));
  return {ConvertTo(ctx, f.lu, t.elem), f.pivots, f.info};
}

// The P, L, U of an LU factorization (P A... as lu_unpack: A = P L U).
std::vector<Value> Unpack(Ctx& ctx, Value lu, Value perm, const std::vector<TensorType>& outs) {
  int64_t m = lu.type.dims[R(lu) - 2], n = lu.type.dims[R(lu) - 1], k = std::min(m, n);
  std::vector<Value> r;
  if (outs[0].numel() == 0) {
    r.push_back(ctx.b.Constant(0, outs[0]));
  } else {
    // P[r, c] = (perm[c] == r)
    std::vector<int64_t> pd = outs[0].dims;
    Value pc = AsRows(ctx, perm, pd);
    Value rowi = ctx.b.Iota(S64(pd), static_cast<int64_t>(pd.size()) - 2);
    r.push_back(ConvertTo(ctx, ctx.b.Compare(Cmp::EQ, pc, rowi), outs[0].elem));
  }
  if (outs[1].numel() == 0) {
    r.push_back(ctx.b.Constant(0, outs[1]));
    r.push_back(ctx.b.Constant(0, outs[2]));
    return r;
  }
  Value L = SliceMat(ctx, lu, m, k);
  L = Add(ctx, Triangle(ctx, L, false, -1), Identity(ctx, L.type));
  Value U = Triangle(ctx, SliceMat(ctx, lu, k, n), true, 0);
  r.push_back(ConvertTo(ctx, L, outs[1].elem));
  r.push_back(ConvertTo(ctx, U, outs[2].elem));
  return r;
}

// lu_unpack(LU, pivots, unpack_data, unpack_pivots) -> (P, L, U)
std::vector<Value> LowerLuUnpack(Ctx& ctx, const Args& a) {
  Value lu = a.tensor(0);
  if (lu.type.numel() == 0) return {ctx.b.Constant(0, ctx.out(0)), ctx.b.Constant(0, ctx.out(1)), ctx.b.Constant(0, ctx.out(2))};
  int64_t m = lu.type.dims[R(lu) - 2];
  Value perm = PermFromPivots(ctx, a.tensor(1), m);
  return Unpack(ctx, lu, perm, {ctx.out(0), ctx.out(1), ctx.out(2)});
}

// linalg_lu(A, pivot) -> (P, L, U)
std::vector<Value> LowerLu(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out(1);
  if (t.numel() == 0) return {ctx.b.Constant(0, ctx.out(0)), ctx.b.Constant(0, ctx.out(1)), ctx.b.Constant(0, ctx.out(2))};
  Lu f = LuFactor(ctx, ConvertTo(ctx, a.tensor(0), Compute(t.elem)), a.bool_or(1, true));
  return Unpack(ctx, f.lu, f.perm, {ctx.out(0), ctx.out(1), ctx.out(2)});
}

// Solves with LU factors: left/right and adjoint (real: transpose) variants.
Value LuSolve(Ctx& ctx, Value lu, Value perm, Value b, bool left, bool adjoint) {
  if (left) return LuSolveLeft(ctx, lu, perm, b, adjoint);
  // X A = B  <=>  A^T X^T = B^T;  X A^T = B  <=>  A X^T = B^T
  return Swap(ctx, LuSolveLeft(ctx, lu, perm, Swap(ctx, b), !adjoint));
}

// linalg_lu_solve(LU, pivots, B, left, adjoint)
std::vector<Value> LowerLuSolve(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  ElemType e = Compute(t.elem);
  Value lu = ConvertTo(ctx, a.tensor(0), e), b = ConvertTo(ctx, a.tensor(2), e);
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  Value piv = a.tensor(1);
  // broadcast LU (and its pivots) with B's batch dims
  Value lu_b = lu, b_b = b;
  BroadcastBatch(ctx, lu_b, b_b);
  std::vector<int64_t> pdims = Batch(lu_b);
  pdims.push_back(piv.type.dims.back());
  Value perm = PermFromPivots(ctx, BroadcastTo(ctx, piv, pdims), lu.type.dims[R(lu) - 2]);
  return {ConvertTo(ctx, LuSolve(ctx, lu_b, perm, b_b, a.bool_or(3, true), a.bool_or(4, false)), t.elem)};
}

// _linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info)
std::vector<Value> LowerSolveEx(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out(0);
  ElemType e = Compute(t.elem);
  Value A = ConvertTo(ctx, a.tensor(0), e), B = ConvertTo(ctx, a.tensor(1), e);
  bool left = a.bool_or(2, true);
  if (ctx.out(1).numel() == 0)
    return {ctx.b.Constant(0, t), ctx.b.Constant(0, ctx.out(1)), ctx.b.Constant(0, ctx.out(2)), ctx.b.Constant(0, ctx.out(3))};
  Lu f = LuFactor(ctx, A, true);
  bool vec = VectorRhs(A, B) && t.rank() == B.type.rank() && t.rank() == A.type.rank() - 1;
  if (vec) {
    std::vector<int64_t> d = B.type.dims;
    d.push_back(1);
    B = ctx.b.Reshape(B, d);
    if (!left) B = Swap(ctx, B);
  }
  Value lu = f.lu, perm = f.perm;
  Value lu_b = lu, b_b = B;
  BroadcastBatch(ctx, lu_b, b_b);
  if (Batch(lu_b) != Batch(lu)) {
    std::vector<int64_t> pd = Batch(lu_b);
    pd.push_back(perm.type.dims.back());
    perm = BroadcastTo(ctx, perm, pd);
  }
  Value x = t.numel() == 0 ? ctx.b.Constant(0, {e, t.dims}) : LuSolve(ctx, lu_b, perm, b_b, left, false);
  x = ctx.b.Reshape(x, t.dims);
  return {ConvertTo(ctx, x, t.elem), ConvertTo(ctx, f.lu, ctx.out(1).elem), f.pivots, f.info};
}

// linalg_inv_ex(A, check_errors) -> (inverse, info)
std::vector<Value> LowerInvEx(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out(0);
  if (t.numel() == 0) return {ctx.b.Constant(0, t), ctx.b.Constant(0, ctx.out(1))};
  Value A = ConvertTo(ctx, a.tensor(0), Compute(t.elem));
  Lu f = LuFactor(ctx, A, true);
  Value x = LuSolveLeft(ctx, f.lu, f.perm, Identity(ctx, A.type), false);
  return {ConvertTo(ctx, x, t.elem), f.info};
}


// ---- Householder QR ----

// Sets entry j of a [.., k] vector to `value` [..].
Value SetAt(Ctx& ctx, Value vec, Value j, Value value) {
  Value idx = ctx.b.Iota(S64(vec.type.dims), R(vec) - 1);
  return ctx.b.Select(ctx.b.Compare(Cmp::EQ, idx, Bcast(ctx, j, vec.type.dims)), AsColumns(ctx, value, vec.type.dims), vec);
}
Value GetAt(Ctx& ctx, Value vec, Value j) {
  Value idx = ctx.b.Iota(S64(vec.type.dims), R(vec) - 1);
  return SumLast(ctx, ctx.b.Select(ctx.b.Compare(Cmp::EQ, idx, Bcast(ctx, j, vec.type.dims)), vec, Zeros(ctx, vec)));
}

// The Householder vector of column j of v (1 at j, v's entries below, 0 above): [.., m].
Value ReflectorAt(Ctx& ctx, Value v, Value j) {
  Value col = Column(ctx, v, j);
  Value ridx = ctx.b.Iota(S64(col.type.dims), R(col) - 1), jb = Bcast(ctx, j, col.type.dims);
  return ctx.b.Select(ctx.b.Compare(Cmp::EQ, ridx, jb), ctx.b.Constant(1, col.type),
                      ctx.b.Select(ctx.b.Compare(Cmp::GT, ridx, jb), col, Zeros(ctx, col)));
}

// (I - tau v v^T) c from the left, or c (I - tau v v^T) from the right.
Value ApplyReflector(Ctx& ctx, Value c, Value v, Value tau, bool left) {
  if (left) {
    Value w = ctx.b.Reduce(Mul(ctx, AsColumns(ctx, v, c.type.dims), c), ctx.b.Constant(0, {c.type.elem, {}}), {R(c) - 2}, "add");
    return Sub(ctx, c, Mul(ctx, AsColumns(ctx, AsColumns(ctx, tau, v.type.dims), c.type.dims), Outer(ctx, v, w)));
  }
  Value w = SumLast(ctx, Mul(ctx, AsRows(ctx, v, c.type.dims), c));  // c v: [.., rows]
  return Sub(ctx, c, Mul(ctx, AsColumns(ctx, AsColumns(ctx, tau, w.type.dims), c.type.dims), Outer(ctx, w, v)));
}

// geqrf as LAPACK: R on and above the diagonal, the reflectors below it, and tau. For column j:
// beta = -sign(alpha) * ||(alpha, x)||, tau = (beta - alpha) / beta, v = x / (alpha - beta);
// a zero x leaves the column alone (tau = 0).
std::pair<Value, Value> Geqrf(Ctx& ctx, Value A) {
  int64_t m = A.type.dims[R(A) - 2], n = A.type.dims[R(A) - 1], k = std::min(m, n);
  Value tau0 = ctx.b.Constant(0, {A.type.elem, WithBatch(Batch(A), {k})});
  auto out = ForLoop(ctx, k, {A, tau0}, [&](Value j, const std::vector<Value>& st) {
    Value a = st[0], taus = st[1];
    Value col = Column(ctx, a, j);
    Value ridx = ctx.b.Iota(S64(col.type.dims), R(col) - 1), jb = Bcast(ctx, j, col.type.dims);
    Value at_j = ctx.b.Compare(Cmp::EQ, ridx, jb), below = ctx.b.Compare(Cmp::GT, ridx, jb);
    Value alpha = SumLast(ctx, ctx.b.Select(at_j, col, Zeros(ctx, col)));
    Value x = ctx.b.Select(below, col, Zeros(ctx, col));
    Value xnorm2 = SumLast(ctx, Mul(ctx, x, x));
    Value norm = ctx.b.Unary("sqrt", Add(ctx, Mul(ctx, alpha, alpha), xnorm2));
    Value beta = ctx.b.Select(ctx.b.Compare(Cmp::GE, alpha, Zeros(ctx, alpha)), ctx.b.Unary("negate", norm), norm);
    Value trivial = ctx.b.Compare(Cmp::EQ, xnorm2, Zeros(ctx, xnorm2));
    Value one = ctx.b.Constant(1, alpha.type);
    Value safe_beta = ctx.b.Select(trivial, one, beta);
    Value tau = ctx.b.Select(trivial, Zeros(ctx, alpha), Div(ctx, Sub(ctx, beta, alpha), safe_beta));
    Value scale = ctx.b.Select(trivial, Zeros(ctx, alpha), Div(ctx, one, Sub(ctx, alpha, safe_beta)));
    Value v = ctx.b.Select(at_j, ctx.b.Constant(1, col.type), Mul(ctx, x, AsColumns(ctx, scale, x.type.dims)));
    Value updated = ApplyReflector(ctx, a, v, tau, true);
    Value cols = ColIota(ctx, a);
    a = ctx.b.Select(ctx.b.Compare(Cmp::GT, cols, Bcast(ctx, j, a.type.dims)), updated, a);
    Value newcol = ctx.b.Select(at_j, AsColumns(ctx, ctx.b.Select(trivial, alpha, beta), col.type.dims),
                                ctx.b.Select(below, v, col));
    a = ctx.b.Select(ctx.b.Compare(Cmp::EQ, cols, Bcast(ctx, j, a.type.dims)), AsColumns(ctx, newcol, a.type.dims), a);
    return std::vector<Value>{a, SetAt(ctx, taus, j, tau)};
  });
  return {out[0], out[1]};
}

// Q = H_0 H_1 ... H_{k-1} applied to c (left: Q c or Q^T c; right: c Q or c Q^T).
Value ApplyQ(Ctx& ctx, Value v, Value tau, Value c, bool left, bool transpose) {
  int64_t k = tau.type.dims.back();
  bool forward = left == transpose;  // H_0 first
  return ForLoop(ctx, k, {c}, [&](Value i, const std::vector<Value>& st) {
    Value j = forward ? i : Sub(ctx, Scalar64(ctx, k - 1), i);
    return std::vector<Value>{ApplyReflector(ctx, st[0], ReflectorAt(ctx, v, j), GetAt(ctx, tau, j), left)};
  })[0];
}

// geqrf(A) -> (a, tau)
std::vector<Value> LowerGeqrf(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out(0);
  if (t.numel() == 0) return {ctx.b.Constant(0, t), ctx.b.Constant(0, ctx.out(1))};
  auto [qr, tau] = Geqrf(ctx, ConvertTo(ctx, a.tensor(0), Compute(t.elem)));
  return {ConvertTo(ctx, qr, t.elem), ConvertTo(ctx, tau, ctx.out(1).elem)};
}

// The first `cols` columns of the m x m identity, batched like v.
Value IdentityColumns(Ctx& ctx, Value v, int64_t cols) {
  int64_t m = v.type.dims[R(v) - 2];
  return Identity(ctx, {v.type.elem, WithBatch(Batch(v), {m, cols})});
}

// linalg_householder_product(V, tau) = (H_0 ... H_{k-1})[:, :n]
std::vector<Value> LowerHouseholderProduct(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  ElemType e = Compute(t.elem);
  Value v = ConvertTo(ctx, a.tensor(0), e), tau = ConvertTo(ctx, a.tensor(1), e);
  return {ConvertTo(ctx, ApplyQ(ctx, v, tau, IdentityColumns(ctx, v, t.dims.back()), true, false), t.elem)};
}

// ormqr(A, tau, C, left, transpose): Q (or Q^T) times C from the left or the right.
std::vector<Value> LowerOrmqr(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  ElemType e = Compute(t.elem);
  Value v = ConvertTo(ctx, a.tensor(0), e), tau = ConvertTo(ctx, a.tensor(1), e), c = ConvertTo(ctx, a.tensor(2), e);
  return {ConvertTo(ctx, ApplyQ(ctx, v, tau, c, a.bool_or(3, true), a.bool_or(4, false)), t.elem)};
}

// linalg_qr(A, mode) -> (Q, R): reduced (Q m x k), complete (Q m x m) or r (Q empty).
std::vector<Value> LowerQr(Ctx& ctx, const Args& a) {
  const TensorType& tq = ctx.out(0);
  const TensorType& tr = ctx.out(1);
  ElemType e = Compute(tr.elem);
  Value A = ConvertTo(ctx, a.tensor(0), e);
  int64_t m = A.type.dims[R(A) - 2], n = A.type.dims[R(A) - 1], k = std::min(m, n);
  if (A.type.numel() == 0) {
    Value q = tq.numel() ? Identity(ctx, {e, tq.dims}) : ctx.b.Constant(0, {e, tq.dims});
    return {ConvertTo(ctx, q, tq.elem), ctx.b.Constant(0, tr)};
  }
  auto [qr, tau] = Geqrf(ctx, A);
  Value r = Triangle(ctx, SliceMat(ctx, qr, tr.dims[tr.rank() - 2], n), true, 0);
  Value q = tq.numel() == 0 ? ctx.b.Constant(0, {e, tq.dims})
                            : ApplyQ(ctx, SliceMat(ctx, qr, m, k), tau, IdentityColumns(ctx, qr, tq.dims.back()), true, false);
  return {ConvertTo(ctx, q, tq.elem), ConvertTo(ctx, r, tr.elem)};
}


// ---- Jacobi eigenvalues and singular values ----

// Runs `sweep` (one pass over all pairs p < q) until `converged` holds for every batch element
// or `max_sweeps` passes ran.
std::vector<Value> Sweeps(Ctx& ctx, const std::vector<Value>& init, int64_t max_sweeps,
                          const std::function<Value(const std::vector<Value>&)>& converged,
                          const std::function<std::vector<Value>(const std::vector<Value>&)>& sweep) {
  std::vector<Value> state = {Scalar64(ctx, 0)};
  state.insert(state.end(), init.begin(), init.end());
  auto out = While(
      ctx, state,
      [&](const std::vector<Value>& v) {
        std::vector<Value> rest(v.begin() + 1, v.end());
        return And(ctx, ctx.b.Compare(Cmp::LT, v[0], Scalar64(ctx, max_sweeps)), Not(ctx, converged(rest)));
      },
      [&](const std::vector<Value>& v) {
        std::vector<Value> rest(v.begin() + 1, v.end());
        std::vector<Value> next = sweep(rest);
        next.insert(next.begin(), Add(ctx, v[0], Scalar64(ctx, 1)));
        return next;
      });
  return std::vector<Value>(out.begin() + 1, out.end());
}

// Loops over all pairs (p, q) of [0, n) with p < q: body(p, q, state).
std::vector<Value> PairLoop(Ctx& ctx, int64_t n, const std::vector<Value>& init,
                            const std::function<std::vector<Value>(Value, Value, const std::vector<Value>&)>& body) {
  return ForLoop(ctx, n * n, init, [&](Value t, const std::vector<Value>& st) {
    Value p = ctx.b.Binary("divide", t, Scalar64(ctx, n)), q = ctx.b.Binary("remainder", t, Scalar64(ctx, n));
    std::vector<Value> next = body(p, q, st);
    Value active = ctx.b.Compare(Cmp::LT, p, q);
    for (size_t i = 0; i < next.size(); ++i) next[i] = ctx.b.Select(BroadcastTo(ctx, active, next[i].type.dims), next[i], st[i]);
    return next;
  });
}

// Rotates columns p and q of m: (col_p, col_q) <- (c col_p - s col_q, s col_p + c col_q).
Value RotateColumns(Ctx& ctx, Value m, Value p, Value q, Value c, Value s) {
  Value cp = Column(ctx, m, p), cq = Column(ctx, m, q);
  Value cb = AsColumns(ctx, c, cp.type.dims), sb = AsColumns(ctx, s, cp.type.dims);
  Value np = Sub(ctx, Mul(ctx, cb, cp), Mul(ctx, sb, cq)), nq = Add(ctx, Mul(ctx, sb, cp), Mul(ctx, cb, cq));
  Value cols = ColIota(ctx, m);
  m = ctx.b.Select(ctx.b.Compare(Cmp::EQ, cols, Bcast(ctx, p, m.type.dims)), AsColumns(ctx, np, m.type.dims), m);
  return ctx.b.Select(ctx.b.Compare(Cmp::EQ, cols, Bcast(ctx, q, m.type.dims)), AsColumns(ctx, nq, m.type.dims), m);
}

// The Jacobi rotation (c, s) that zeroes the off-diagonal entry of [[app, apq], [apq, aqq]].
std::pair<Value, Value> JacobiRotation(Ctx& ctx, Value app, Value aqq, Value apq) {
  Value zero = Zeros(ctx, apq), one = ctx.b.Constant(1, apq.type);
  Value skip = ctx.b.Compare(Cmp::EQ, apq, zero);
  Value theta = Div(ctx, Sub(ctx, aqq, app), Mul(ctx, ctx.b.Constant(2, apq.type), ctx.b.Select(skip, one, apq)));
  Value sign = ctx.b.Select(ctx.b.Compare(Cmp::GE, theta, zero), one, ctx.b.Unary("negate", one));
  Value at = ctx.b.Unary("abs", theta);
  // for huge theta, t ~ 1 / (2 theta) (theta^2 would overflow)
  Value t = Div(ctx, sign, Add(ctx, at, ctx.b.Unary("sqrt", Add(ctx, Mul(ctx, theta, theta), one))));
  t = ctx.b.Select(ctx.b.Compare(Cmp::GT, at, ctx.b.Constant(1e18, at.type)), Div(ctx, ctx.b.Constant(0.5, at.type), theta), t);
  t = ctx.b.Select(skip, zero, t);
  Value c = ctx.b.Unary("rsqrt", Add(ctx, Mul(ctx, t, t), one));
  return {c, Mul(ctx, t, c)};
}

Value Entry(Ctx& ctx, Value m, Value i, Value j) { return GetAt(ctx, Row(ctx, m, i), j); }

Value SumSquares(Ctx& ctx, Value m) {
  return ctx.b.Reduce(Mul(ctx, m, m), ctx.b.Constant(0, {m.type.elem, {}}), {R(m) - 2, R(m) - 1}, "add");
}

double Eps(ElemType e) { return e == ElemType::F64 ? 2.2e-16 : 1.2e-7; }

// Eigen-decomposition of symmetric a by cyclic Jacobi rotations: (eigenvalues unsorted, V).
std::pair<Value, Value> JacobiEigh(Ctx& ctx, Value a) {
  int64_t n = a.type.dims.back();
  Value v0 = Identity(ctx, a.type);
  Value eq = ctx.b.Compare(Cmp::EQ, RowIota(ctx, a), ColIota(ctx, a));
  double eps = Eps(a.type.elem);
  auto out = Sweeps(
      ctx, {a, v0}, 40,
      [&](const std::vector<Value>& st) {
        Value off = SumSquares(ctx, ctx.b.Select(eq, Zeros(ctx, st[0]), st[0]));
        Value total = SumSquares(ctx, st[0]);
        Value ok = ctx.b.Compare(Cmp::LE, off, Mul(ctx, total, ctx.b.Constant(eps * eps, total.type)));
        return Not(ctx, AnyTrue(ctx, Not(ctx, ok)));
      },
      [&](const std::vector<Value>& st) {
        return PairLoop(ctx, n, st, [&](Value p, Value q, const std::vector<Value>& s2) {
          Value m = s2[0], v = s2[1];
          auto [c, s] = JacobiRotation(ctx, Entry(ctx, m, p, p), Entry(ctx, m, q, q), Entry(ctx, m, p, q));
          m = Swap(ctx, RotateColumns(ctx, Swap(ctx, RotateColumns(ctx, m, p, q, c, s)), p, q, c, s));
          return std::vector<Value>{m, RotateColumns(ctx, v, p, q, c, s)};
        });
      });
  return {Diagonal(ctx, out[0]), out[1]};
}

// Columns of m reordered: result[:, j] = m[:, order[j]].
Value PermuteColumns(Ctx& ctx, Value m, Value order) { return Swap(ctx, PermuteRows(ctx, Swap(ctx, m), order)); }

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues ascending, eigenvectors as columns)
std::vector<Value> LowerEigh(Ctx& ctx, const Args& a) {
  const TensorType& tv = ctx.out(0);
  const TensorType& tw = ctx.out(1);
  ElemType e = Compute(tv.elem);
  Value A = ConvertTo(ctx, a.tensor(0), e);
  if (A.type.numel() == 0) return {ctx.b.Constant(0, tv), ctx.b.Constant(0, tw)};
  bool upper = a.str_or(1, "L") == "U";
  Value tri = Triangle(ctx, A, upper, 0), strict = Triangle(ctx, A, upper, upper ? 1 : -1);
  Value sym = Add(ctx, tri, Swap(ctx, strict));
  auto [w, v] = JacobiEigh(ctx, sym);
  Value idx = ctx.b.Iota(S64(w.type.dims), R(w) - 1);
  auto sorted = SortAlong(ctx, {w, idx}, R(w) - 1, false);
  Value vecs = tw.numel() == 0 ? ctx.b.Constant(0, {e, tw.dims}) : PermuteColumns(ctx, v, sorted[1]);
  return {ConvertTo(ctx, sorted[0], tv.elem), ConvertTo(ctx, vecs, tw.elem)};
}

// Orthonormal columns spanning a's leading columns (a has orthonormal or zero columns, zeros
// last), completed to `cols` columns, with each column's sign kept: Householder QR.
Value Orthonormalize(Ctx& ctx, Value a, int64_t cols) {
  int64_t m = a.type.dims[R(a) - 2], n = a.type.dims[R(a) - 1], k = std::min(m, n);
  auto [qr, tau] = Geqrf(ctx, a);
  Value q = ApplyQ(ctx, SliceMat(ctx, qr, m, k), tau, IdentityColumns(ctx, qr, cols), true, false);
  // the sign of R's diagonal: column j of Q times sign(R_jj) is a's column j
  Value d = Diagonal(ctx, SliceMat(ctx, qr, k, k));
  Value sgn = ctx.b.Select(ctx.b.Compare(Cmp::LT, d, Zeros(ctx, d)), ctx.b.Constant(-1, d.type), ctx.b.Constant(1, d.type));
  if (cols > k) {
    std::vector<int64_t> low(R(sgn), 0), high(R(sgn), 0), interior(R(sgn), 0);
    high.back() = cols - k;
    sgn = ctx.b.Pad(sgn, ctx.b.Constant(1, {sgn.type.elem, {}}), low, high, interior);
  } else if (cols < k) {
    std::vector<int64_t> start(R(sgn), 0), limit = sgn.type.dims, ones(R(sgn), 1);
    limit.back() = cols;
    sgn = ctx.b.Slice(sgn, start, limit, ones);
  }
  return Mul(ctx, q, AsRows(ctx, sgn, q.type.dims));
}

// One-sided Jacobi SVD of a (m >= n): (U m x n with orthonormal columns, S descending, V n x n).
std::tuple<Value, Value, Value> JacobiSvd(Ctx& ctx, Value a) {
  int64_t n = a.type.dims.back();
  double eps = Eps(a.type.elem);
  Value v0 = Identity(ctx, {a.type.elem, WithBatch(Batch(a), {n, n})});
  auto gram = [&](Value u, Value p, Value q) {
    Value up = Column(ctx, u, p), uq = Column(ctx, u, q);
    return std::make_tuple(SumLast(ctx, Mul(ctx, up, up)), SumLast(ctx, Mul(ctx, uq, uq)), SumLast(ctx, Mul(ctx, up, uq)));
  };
  auto out = Sweeps(
      ctx, {a, v0}, 40,
      [&](const std::vector<Value>& st) {
        // converged when every column pair is orthogonal to working precision
        Value u = st[0];
        std::vector<int64_t> batch_dims = Batch(u);
        Value g = ctx.b.DotGeneral(u, u, [&] {
          std::vector<int64_t> b;
          for (int64_t i = 0; i + 2 < R(u); ++i) b.push_back(i);
          return b;
        }(), [&] {
          std::vector<int64_t> b;
          for (int64_t i = 0; i + 2 < R(u); ++i) b.push_back(i);
          return b;
        }(), {R(u) - 2}, {R(u) - 2}, u.type.elem);  // U^T U: [.., n, n]
        Value diag = Diagonal(ctx, g);
        Value norms = Mul(ctx, AsColumns(ctx, diag, g.type.dims), AsRows(ctx, diag, g.type.dims));
        Value eq = ctx.b.Compare(Cmp::EQ, RowIota(ctx, g), ColIota(ctx, g));
        Value bad = And(ctx, Not(ctx, eq), ctx.b.Compare(Cmp::GT, Mul(ctx, g, g), Mul(ctx, norms, ctx.b.Constant(eps * eps, g.type))));
        return Not(ctx, AnyTrue(ctx, bad));
      },
      [&](const std::vector<Value>& st) {
        return PairLoop(ctx, n, st, [&](Value p, Value q, const std::vector<Value>& s2) {
          Value u = s2[0], v = s2[1];
          auto [alpha, beta, gamma] = gram(u, p, q);
          auto [c, s] = JacobiRotation(ctx, alpha, beta, gamma);
          return std::vector<Value>{RotateColumns(ctx, u, p, q, c, s), RotateColumns(ctx, v, p, q, c, s)};
        });
      });
  Value u = out[0], v = out[1];
  Value sigma = ctx.b.Unary("sqrt", ctx.b.Reduce(Mul(ctx, u, u), ctx.b.Constant(0, {u.type.elem, {}}), {R(u) - 2}, "add"));
  Value idx = ctx.b.Iota(S64(sigma.type.dims), R(sigma) - 1);
  auto sorted = SortAlong(ctx, {sigma, idx}, R(sigma) - 1, true);
  Value s = sorted[0];
  u = PermuteColumns(ctx, u, sorted[1]);
  v = PermuteColumns(ctx, v, sorted[1]);
  Value positive = ctx.b.Compare(Cmp::GT, s, Zeros(ctx, s));
  Value safe = ctx.b.Select(positive, s, ctx.b.Constant(1, s.type));
  u = ctx.b.Select(AsRows(ctx, positive, u.type.dims), Div(ctx, u, AsRows(ctx, safe, u.type.dims)), Zeros(ctx, u));
  return {u, s, v};
}

// _linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S, Vh)
std::vector<Value> LowerSvd(Ctx& ctx, const Args& a) {
  const TensorType &tu = ctx.out(0), &ts = ctx.out(1), &tvh = ctx.out(2);
  ElemType e = Compute(ts.elem);
  Value A = ConvertTo(ctx, a.tensor(0), e);
  int64_t m = A.type.dims[R(A) - 2], n = A.type.dims[R(A) - 1];
  auto empty = [&](const TensorType& t) { return ctx.b.Constant(0, t); };
  if (A.type.numel() == 0) {
    Value u = tu.numel() ? ConvertTo(ctx, Identity(ctx, {e, tu.dims}), tu.elem) : empty(tu);
    Value vh = tvh.numel() ? ConvertTo(ctx, Identity(ctx, {e, tvh.dims}), tvh.elem) : empty(tvh);
    return {u, empty(ts), vh};
  }
  bool wide = m < n;
  Value work = wide ? Swap(ctx, A) : A;  // tall: rows >= cols
  auto [u, s, v] = JacobiSvd(ctx, work);
  std::vector<Value> r(3);
  r[1] = ConvertTo(ctx, s, ts.elem);
  if (tu.numel() == 0 && tvh.numel() == 0) {
    r[0] = empty(tu);
    r[2] = empty(tvh);
    return r;
  }
  // A = U S V^T for the tall matrix; for a wide A, A^T = U S V^T, so A = V S U^T.
  Value left = wide ? v : u, right = wide ? u : v;
  Value U = Orthonormalize(ctx, left, tu.dims.back());
  Value Vh = Swap(ctx, Orthonormalize(ctx, right, tvh.dims[tvh.rank() - 2]));
  r[0] = ConvertTo(ctx, U, tu.elem);
  r[2] = ConvertTo(ctx, Vh, tvh.elem);
  return r;
}


// ---- matrix exponential ----

// linalg_matrix_exp(A): scaling and squaring: A / 2^s has 1-norm <= 2 (s per matrix), its
// Taylor series to degree 24 (Horner; the truncation error is below 1e-17), then s squarings
// (each doubles the relative error, so few of them).
std::vector<Value> LowerMatrixExp(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  ElemType e = Compute(t.elem);
  Value A = ConvertTo(ctx, a.tensor(0), e);
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  Value col_sums = ctx.b.Reduce(ctx.b.Unary("abs", A), ctx.b.Constant(0, {e, {}}), {R(A) - 2}, "add");
  Value norm = ctx.b.Reduce(col_sums, ctx.b.Constant(0, {e, {}}), {R(col_sums) - 1}, "maximum");  // [..]
  Value lg = ctx.b.Unary("ceil", Div(ctx, ctx.b.Unary("log", Mul(ctx, norm, ctx.b.Constant(0.5, norm.type))), ctx.b.Constant(M_LN2, norm.type)));
  Value sf = ctx.b.Select(ctx.b.Compare(Cmp::GT, lg, Zeros(ctx, lg)), lg, Zeros(ctx, lg));
  sf = ctx.b.Select(ctx.b.Compare(Cmp::GT, sf, ctx.b.Constant(64, sf.type)), ctx.b.Constant(64, sf.type), sf);  // inf/NaN norms
  sf = ctx.b.Select(IsNan(ctx, sf), Zeros(ctx, sf), sf);
  Value steps = ctx.b.Convert(sf, ElemType::S64);
  Value scale = ctx.b.Unary("exponential", Mul(ctx, sf, ctx.b.Constant(-M_LN2, sf.type)));  // 2^-s
  Value X = Mul(ctx, A, Bcast(ctx, scale, A.type.dims));
  Value I = Identity(ctx, A.type);
  Value T = I;
  for (int k = 24; k >= 1; --k) T = Add(ctx, I, Mul(ctx, MatMul(ctx, X, T), ctx.b.Constant(1.0 / k, A.type)));
  Value max_steps = ctx.b.Reduce(steps, Scalar64(ctx, 0), [&] {
    std::vector<int64_t> all(R(steps));
    for (int64_t i = 0; i < R(steps); ++i) all[i] = i;
    return all;
  }(), "maximum");
  auto out = While(
      ctx, {Scalar64(ctx, 0), T}, [&](const std::vector<Value>& v) { return ctx.b.Compare(Cmp::LT, v[0], max_steps); },
      [&](const std::vector<Value>& v) {
        Value go = ctx.b.Compare(Cmp::LT, Bcast(ctx, v[0], steps.type.dims), steps);
        Value sq = MatMul(ctx, v[1], v[1]);
        return std::vector<Value>{Add(ctx, v[0], Scalar64(ctx, 1)), ctx.b.Select(Bcast(ctx, go, v[1].type.dims), sq, v[1])};
      });
  return {ConvertTo(ctx, out[1], t.elem)};
}

}  // namespace

TPU_LOWERING("aten::_cholesky_solve_helper", LowerCholeskySolve);
TPU_LOWERING("aten::_linalg_eigh", LowerEigh);
TPU_LOWERING("aten::_linalg_solve_ex", LowerSolveEx);
TPU_LOWERING("aten::_linalg_svd", LowerSvd);
TPU_LOWERING("aten::cholesky", LowerCholesky);
TPU_LOWERING("aten::cholesky_inverse", LowerCholeskyInverse);
TPU_LOWERING("aten::geqrf", LowerGeqrf);
TPU_LOWERING("aten::linalg_cholesky_ex", LowerCholeskyEx);
TPU_LOWERING("aten::linalg_householder_product", LowerHouseholderProduct);
TPU_LOWERING("aten::linalg_inv_ex", LowerInvEx);
TPU_LOWERING("aten::linalg_lu", LowerLu);
TPU_LOWERING("aten::linalg_lu_factor_ex", LowerLuFactorEx);
TPU_LOWERING("aten::linalg_lu_solve", LowerLuSolve);
TPU_LOWERING("aten::linalg_matrix_exp", LowerMatrixExp);
TPU_LOWERING("aten::linalg_qr", LowerQr);
TPU_LOWERING("aten::linalg_solve_triangular", LowerSolveTriangular);
TPU_LOWERING("aten::lu_unpack", LowerLuUnpack);
TPU_LOWERING("aten::ormqr", LowerOrmqr);
TPU_LOWERING("aten::triangular_solve", LowerTriangularSolve);

}  // namespace tpu::lowering
