// Orthogonal decompositions: Householder QR, symmetric eigenvalues (cyclic Jacobi), SVD
// (one-sided Jacobi), and the matrix exponential, as stablehlo.while loops with masked
// elementwise updates so every batch element runs in lockstep. Matrices are the last two dims; half types compute in f32.
#include <cmath>

#include "helpers.h"

namespace tpu::lowering {
namespace {

using namespace matrix;

// ---- Householder QR ----

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

TPU_LOWERING("aten::_linalg_eigh", LowerEigh);
TPU_LOWERING("aten::_linalg_svd", LowerSvd);
TPU_LOWERING("aten::geqrf", LowerGeqrf);
TPU_LOWERING("aten::linalg_householder_product", LowerHouseholderProduct);
TPU_LOWERING("aten::linalg_matrix_exp", LowerMatrixExp);
TPU_LOWERING("aten::linalg_qr", LowerQr);
TPU_LOWERING("aten::ormqr", LowerOrmqr);

}  // namespace tpu::lowering
