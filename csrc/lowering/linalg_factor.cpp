// Matrix factorizations and the solvers built on them: triangular solves and Cholesky through
// StableHLO's own ops; LU with partial pivoting as stablehlo.while loops
// over the columns, with masked elementwise updates so every batch element runs in lockstep
// (QR, eigenvalues, SVD and the matrix exponential are in linalg_orthogonal.cpp). Matrices are the last
// two dims; half types compute in f32. Pivots and info follow LAPACK (1-based, int32).
// _linalg_det and _linalg_slogdet are kernels in csrc/aten: which matrix PyTorch factors
// depends on the input's memory layout.
#include <cmath>

#include "helpers.h"

namespace tpu::lowering {
namespace {

using namespace matrix;

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


}  // namespace

TPU_LOWERING("aten::_cholesky_solve_helper", LowerCholeskySolve);
TPU_LOWERING("aten::_linalg_solve_ex", LowerSolveEx);
TPU_LOWERING("aten::cholesky", LowerCholesky);
TPU_LOWERING("aten::cholesky_inverse", LowerCholeskyInverse);
TPU_LOWERING("aten::linalg_cholesky_ex", LowerCholeskyEx);
TPU_LOWERING("aten::linalg_inv_ex", LowerInvEx);
TPU_LOWERING("aten::linalg_lu", LowerLu);
TPU_LOWERING("aten::linalg_lu_factor_ex", LowerLuFactorEx);
TPU_LOWERING("aten::linalg_lu_solve", LowerLuSolve);
TPU_LOWERING("aten::linalg_solve_triangular", LowerSolveTriangular);
TPU_LOWERING("aten::lu_unpack", LowerLuUnpack);
TPU_LOWERING("aten::triangular_solve", LowerTriangularSolve);

}  // namespace tpu::lowering
