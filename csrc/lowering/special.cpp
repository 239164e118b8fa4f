// torch.special functions beyond the CHLO ones: orthogonal polynomials by their three-term
// recurrences (with PyTorch's special cases), the scaled complementary error function and the
// normal distribution's log-CDF and quantile, the regularized incomplete gamma functions and
// the gamma family (digamma, polygamma, zeta, mvlgamma). Bessel and Airy functions are in
// bessel.cpp. Half types compute in f32.
#include <cmath>

#include "special.h"

namespace tpu::lowering {
namespace {
using namespace special;

// ---- orthogonal polynomials P_n(x), n a tensor (truncated to an integer) ----

// One polynomial family: the first two members and the step P_{k+1} = step(k, x, P_{k-1}, P_k).
struct Family {
  std::function<Value(Ctx&, Value x)> p0, p1;
  std::function<Value(Ctx&, Value k, Value x, Value p, Value q)> step;
};

// P_n(x) by the recurrence, elementwise n (at most max(n) steps; negative n gives 0).
Value Recurrence(Ctx& ctx, Value x, Value n, const Family& f) {
  TensorType s64{ElemType::S64, {}};
  Value max_n = ctx.b.Reduce(n, ctx.b.ConstantInt(0, s64), [&] {
    std::vector<int64_t> all(n.type.rank());
    for (int64_t i = 0; i < n.type.rank(); ++i) all[i] = i;
    return all;
  }(), "maximum");
  Value p = f.p0(ctx, x), q = f.p1(ctx, x);
  std::vector<Value> init = {ctx.b.ConstantInt(1, s64), p, q};
  auto out = While(
      ctx, init, [&](const std::vector<Value>& v) { return Lt(ctx, v[0], max_n); },
      [&](const std::vector<Value>& v) {
        Value k = v[0];
        Value kf = BroadcastTo(ctx, ctx.b.Convert(k, x.type.elem), x.type.dims);
        Value r = f.step(ctx, kf, x, v[1], v[2]);
        Value go = Lt(ctx, BroadcastTo(ctx, k, n.type.dims), n);  // P_{k+1} is still needed
        return std::vector<Value>{Add(ctx, k, ctx.b.ConstantInt(1, s64)), Sel(ctx, go, v[2], v[1]), Sel(ctx, go, r, v[2])};
      });
  Value zero = C(ctx, 0, x);
  Value r = Sel(ctx, Eq(ctx, n, ConstI(ctx, 0, n)), p, out[2]);
  return Sel(ctx, Lt(ctx, n, ConstI(ctx, 0, n)), zero, r);
}

Value Two(Ctx& ctx, Value x) { return Add(ctx, x, x); }
Value NF(Ctx& ctx, Value n, const Value& like) { return ctx.b.Convert(n, like.type.elem); }
Value Even(Ctx& ctx, Value n) { return Eq(ctx, ctx.b.Binary("remainder", n, ConstI(ctx, 2, n)), ConstI(ctx, 0, n)); }
Value Acos(Ctx& ctx, Value x) { return ctx.b.Op1("chlo.acos", {x}, x.type); }

Family Chebyshev(std::function<Value(Ctx&, Value)> p1) {
  return {[](Ctx& ctx, Value x) { return C(ctx, 1, x); }, p1,
          [](Ctx& ctx, Value, Value x, Value p, Value q) { return Sub(ctx, Mul(ctx, Two(ctx, x), q), p); }};
}

// The operands of a polynomial op in the compute type: x and n truncated to s64.
std::pair<Value, Value> PolyOperands(Ctx& ctx, const Args& a) {
  TensorType t = Compute(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t);
  Value n = CastTo(ctx, a.tensor(1), t);
  if (IsFloat(n.type.elem)) n = Mul(ctx, Un(ctx, "sign", n), Un(ctx, "floor", Abs(ctx, n)));
  return {x, ctx.b.Convert(n, ElemType::S64)};
}

// Chebyshev T: |x| == 1 gives +-1; for n > 6 inside (-1, 1), cos(n acos x).
Value ChebyshevT(Ctx& ctx, Value x, Value n) {
  Value r = Recurrence(ctx, x, n, Chebyshev([](Ctx&, Value x) { return x; }));
  Value nf = NF(ctx, n, x), one = C(ctx, 1, x);
  Value inside = And(ctx, ctx.b.Compare(Cmp::GT, n, ConstI(ctx, 6, n)), Lt(ctx, Abs(ctx, x), one));
  r = Sel(ctx, inside, Un(ctx, "cosine", Mul(ctx, nf, Acos(ctx, x))), r);
  Value edge = Sel(ctx, Or(ctx, ctx.b.Compare(Cmp::GT, x, C(ctx, 0, x)), Even(ctx, n)), one, C(ctx, -1, x));
  r = Sel(ctx, Eq(ctx, Abs(ctx, x), one), edge, r);
  return Sel(ctx, Lt(ctx, n, ConstI(ctx, 0, n)), C(ctx, 0, x), r);
}

// Chebyshev U: |x| == 1 gives +-(n+1); for n > 8 inside, sin((n+1) t) / sin t with t = acos x.
Value ChebyshevU(Ctx& ctx, Value x, Value n) {
  Value r = Recurrence(ctx, x, n, Chebyshev([](Ctx& c, Value x) { return Two(c, x); }));
  Value nf = NF(ctx, n, x), one = C(ctx, 1, x), n1 = Add(ctx, nf, one);
  Value t = Acos(ctx, x), st = Un(ctx, "sine", t);
  Value trig = Sel(ctx, ctx.b.Compare(Cmp::NE, st, C(ctx, 0, x)), Div(ctx, Un(ctx, "sine", Mul(ctx, n1, t)), st),
                   Div(ctx, Mul(ctx, n1, Un(ctx, "cosine", Mul(ctx, n1, t))), x));
  Value inside = And(ctx, ctx.b.Compare(Cmp::GT, n, ConstI(ctx, 8, n)), Lt(ctx, Abs(ctx, x), one));
  r = Sel(ctx, inside, trig, r);
  Value edge = Sel(ctx, Or(ctx, ctx.b.Compare(Cmp::GT, x, C(ctx, 0, x)), Even(ctx, n)), n1, Un(ctx, "negate", n1));
  r = Sel(ctx, Eq(ctx, Abs(ctx, x), one), edge, r);
  return Sel(ctx, Lt(ctx, n, ConstI(ctx, 0, n)), C(ctx, 0, x), r);
}

// Chebyshev V (third kind): V_1 = 2x - 1; x == 1 gives 1, x == -1 gives +-(2n+1); for n > 8
// inside, cos((n + 1/2) t) / cos(t / 2).
Value ChebyshevV(Ctx& ctx, Value x, Value n) {
  Value r = Recurrence(ctx, x, n, Chebyshev([](Ctx& c, Value x) { return Sub(c, Two(c, x), C(c, 1, x)); }));
  Value nf = NF(ctx, n, x), one = C(ctx, 1, x), n21 = Add(ctx, Two(ctx, nf), one);
  Value t = Acos(ctx, x), half = Mul(ctx, t, C(ctx, 0.5, x));
  Value odd_edge = Sel(ctx, Even(ctx, n), n21, Un(ctx, "negate", n21));
  Value trig = Sel(ctx, ctx.b.Compare(Cmp::NE, Un(ctx, "sine", half), one),
                   Div(ctx, Un(ctx, "cosine", Mul(ctx, Add(ctx, nf, C(ctx, 0.5, x)), t)), Un(ctx, "cosine", half)), odd_edge);
  Value inside = And(ctx, ctx.b.Compare(Cmp::GT, n, ConstI(ctx, 8, n)), Lt(ctx, Abs(ctx, x), one));
  r = Sel(ctx, inside, trig, r);
  Value edge = Sel(ctx, ctx.b.Compare(Cmp::GT, x, C(ctx, 0, x)), one, odd_edge);
  r = Sel(ctx, Eq(ctx, Abs(ctx, x), one), edge, r);
  return Sel(ctx, Lt(ctx, n, ConstI(ctx, 0, n)), C(ctx, 0, x), r);
}

// Chebyshev W (fourth kind): W_1 = 2x + 1; x == 1 gives 2n+1, x == -1 gives +-1; for n > 8
// inside, sin((n + 1/2) t) / sin(t / 2).
Value ChebyshevW(Ctx& ctx, Value x, Value n) {
  Value r = Recurrence(ctx, x, n, Chebyshev([](Ctx& c, Value x) { return Add(c, Two(c, x), C(c, 1, x)); }));
  Value nf = NF(ctx, n, x), one = C(ctx, 1, x), n21 = Add(ctx, Two(ctx, nf), one);
  Value t = Acos(ctx, x), half = Mul(ctx, t, C(ctx, 0.5, x));
  Value pos_edge = Sel(ctx, ctx.b.Compare(Cmp::GT, x, C(ctx, 0, x)), n21, Sel(ctx, Even(ctx, n), one, C(ctx, -1, x)));
  Value trig = Sel(ctx, ctx.b.Compare(Cmp::NE, Un(ctx, "cosine", half), one),
                   Div(ctx, Un(ctx, "sine", Mul(ctx, Add(ctx, nf, C(ctx, 0.5, x)), t)), Un(ctx, "sine", half)), pos_edge);
  Value inside = And(ctx, ctx.b.Compare(Cmp::GT, n, ConstI(ctx, 8, n)), Lt(ctx, Abs(ctx, x), one));
  r = Sel(ctx, inside, trig, r);
  r = Sel(ctx, Eq(ctx, Abs(ctx, x), one), pos_edge, r);
  return Sel(ctx, Lt(ctx, n, ConstI(ctx, 0, n)), C(ctx, 0, x), r);
}

template <int kKind>
std::vector<Value> LowerChebyshev(Ctx& ctx, const Args& a) {
  auto [x, n] = PolyOperands(ctx, a);
  switch (kKind) {
    case 0: return Done(ctx, ChebyshevT(ctx, x, n));
    case 1: return Done(ctx, ChebyshevU(ctx, x, n));
    case 2: return Done(ctx, ChebyshevV(ctx, x, n));
    default: return Done(ctx, ChebyshevW(ctx, x, n));
  }
}

// Shifted Chebyshev polynomials: the kind's polynomial at 2x - 1.
template <int kKind>
std::vector<Value> LowerShiftedChebyshev(Ctx& ctx, const Args& a) {
  auto [x, n] = PolyOperands(ctx, a);
  Value y = Sub(ctx, Two(ctx, x), C(ctx, 1, x));
  switch (kKind) {
    case 0: return Done(ctx, ChebyshevT(ctx, y, n));
    case 1: return Done(ctx, ChebyshevU(ctx, y, n));
    case 2: return Done(ctx, ChebyshevV(ctx, y, n));
    default: return Done(ctx, ChebyshevW(ctx, y, n));
  }
}

// Hermite H (physicists'): H_{k+1} = 2x H_k - 2k H_{k-1}.
std::vector<Value> LowerHermiteH(Ctx& ctx, const Args& a) {
  auto [x, n] = PolyOperands(ctx, a);
  Family f{[](Ctx& c, Value x) { return C(c, 1, x); }, [](Ctx& c, Value x) { return Two(c, x); },
           [](Ctx& c, Value k, Value x, Value p, Value q) { return Sub(c, Mul(c, Two(c, x), q), Mul(c, Two(c, k), p)); }};
  return Done(ctx, Recurrence(ctx, x, n, f));
}

// Hermite He (probabilists'): He_{k+1} = x He_k - k He_{k-1}.
std::vector<Value> LowerHermiteHe(Ctx& ctx, const Args& a) {
  auto [x, n] = PolyOperands(ctx, a);
  Family f{[](Ctx& c, Value x) { return C(c, 1, x); }, [](Ctx&, Value x) { return x; },
           [](Ctx& c, Value k, Value x, Value p, Value q) { return Sub(c, Mul(c, x, q), Mul(c, k, p)); }};
  return Done(ctx, Recurrence(ctx, x, n, f));
}

// Laguerre: L_{k+1} = ((2k + 1 - x) L_k - k L_{k-1}) / (k + 1); L_n(0) = 1.
std::vector<Value> LowerLaguerre(Ctx& ctx, const Args& a) {
  auto [x, n] = PolyOperands(ctx, a);
  Family f{[](Ctx& c, Value x) { return C(c, 1, x); }, [](Ctx& c, Value x) { return Sub(c, C(c, 1, x), x); },
           [](Ctx& c, Value k, Value x, Value p, Value q) {
             Value lead = Add(c, Two(c, k), Sub(c, C(c, 1, x), x));
             return Div(c, Sub(c, Mul(c, lead, q), Mul(c, k, p)), Add(c, k, C(c, 1, x)));
           }};
  Value r = Recurrence(ctx, x, n, f);
  r = Sel(ctx, And(ctx, Eq(ctx, Abs(ctx, x), C(ctx, 0, x)), Not(ctx, Lt(ctx, n, ConstI(ctx, 0, n)))), C(ctx, 1, x), r);
  return Done(ctx, r);
}

// Legendre: P_{k+1} = ((2k + 1) x P_k - k P_{k-1}) / (k + 1); |x| == 1 gives 1 or (-1)^n.
std::vector<Value> LowerLegendre(Ctx& ctx, const Args& a) {
  auto [x, n] = PolyOperands(ctx, a);
  Family f{[](Ctx& c, Value x) { return C(c, 1, x); }, [](Ctx&, Value x) { return x; },
           [](Ctx& c, Value k, Value x, Value p, Value q) {
             Value lead = Add(c, Two(c, k), C(c, 1, x));
             return Div(c, Sub(c, Mul(c, Mul(c, lead, x), q), Mul(c, k, p)), Add(c, k, C(c, 1, x)));
           }};
  Value r = Recurrence(ctx, x, n, f);
  Value one = C(ctx, 1, x);
  Value edge = Sel(ctx, Or(ctx, ctx.b.Compare(Cmp::GT, x, C(ctx, 0, x)), Even(ctx, n)), one, C(ctx, -1, x));
  r = Sel(ctx, And(ctx, Eq(ctx, Abs(ctx, x), one), Not(ctx, Lt(ctx, n, ConstI(ctx, 0, n)))), edge, r);
  return Done(ctx, r);
}

// ---- error function relatives ----

// erfcx(x) = e^(x^2) erfc(x): directly below 2; above, the continued fraction
// erfc(x) e^(x^2) = (1/sqrt(pi)) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))); for x < 0,
// 2 e^(x^2) - erfcx(-x).
Value Erfcx(Ctx& ctx, Value x) {
  Value ax = Abs(ctx, x);
  Value direct = Mul(ctx, Un(ctx, "exponential", Mul(ctx, ax, ax)), ctx.b.Op1("chlo.erfc", {ax}, ax.type));
  Value z = Sel(ctx, Lt(ctx, ax, C(ctx, 2, x)), C(ctx, 2, x), ax);
  Value frac = z;  // evaluated from the tail
  for (int k = 60; k >= 1; --k) frac = Add(ctx, z, Div(ctx, C(ctx, k / 2.0, x), frac));
  Value cf = Div(ctx, C(ctx, 1 / std::sqrt(M_PI), x), frac);
  Value pos = Sel(ctx, Lt(ctx, ax, C(ctx, 2, x)), direct, cf);
  Value neg = Sub(ctx, Mul(ctx, C(ctx, 2, x), Un(ctx, "exponential", Mul(ctx, x, x))), pos);
  return Sel(ctx, Lt(ctx, x, C(ctx, 0, x)), neg, pos);
}

std::vector<Value> LowerErfcx(Ctx& ctx, const Args& a) {
  return Done(ctx, Erfcx(ctx, CastTo(ctx, a.tensor(0), Compute(ctx.out()))));
}

// log_ndtr(x) = log(Phi(x)) = log(erfc(-x / sqrt 2) / 2): through erfcx below -1 (so the
// tail keeps its precision), log1p(-erfc(x / sqrt 2) / 2) above.
std::vector<Value> LowerLogNdtr(Ctx& ctx, const Args& a) {
  Value x = CastTo(ctx, a.tensor(0), Compute(ctx.out()));
  Value t = Mul(ctx, x, C(ctx, M_SQRT1_2, x));
  Value lower = Sub(ctx, Un(ctx, "log", Mul(ctx, Erfcx(ctx, Un(ctx, "negate", t)), C(ctx, 0.5, x))), Mul(ctx, t, t));
  Value upper = Un(ctx, "log_plus_one", Mul(ctx, C(ctx, -0.5, x), ctx.b.Op1("chlo.erfc", {t}, t.type)));
  return Done(ctx, Sel(ctx, Lt(ctx, x, C(ctx, -1, x)), lower, upper));
}

// ndtri(p) = sqrt(2) erfinv(2p - 1) refined by Newton steps on log(Phi) (so tiny p keep
// their relative precision); 0 and 1 give -inf and inf, outside [0, 1] NaN.
std::vector<Value> LowerNdtri(Ctx& ctx, const Args& a) {
  Value p = CastTo(ctx, a.tensor(0), Compute(ctx.out()));
  Value y = Mul(ctx, C(ctx, M_SQRT2, p), ctx.b.Op1("chlo.erf_inv", {Sub(ctx, Two(ctx, p), C(ctx, 1, p))}, p.type));
  // a tail start where 2p - 1 rounds to -1: the asymptotic -sqrt(-2 log p)
  Value tail = Un(ctx, "negate", Un(ctx, "sqrt", Mul(ctx, C(ctx, -2, p), Un(ctx, "log", p))));
  Value finite = Lt(ctx, Abs(ctx, y), C(ctx, 1e30, p));
  y = Sel(ctx, finite, y, tail);
  Value logp = Un(ctx, "log", p), log1mp = Un(ctx, "log_plus_one", Un(ctx, "negate", p));
  for (int i = 0; i < 3; ++i) {
    // Newton on the smaller tail: f = log Phi(y) - log p (p < 1/2) or log Phi(-y) - log(1 - p)
    Value lower = Lt(ctx, p, C(ctx, 0.5, p));
    Value s = Sel(ctx, lower, y, Un(ctx, "negate", y));
    Value st = Mul(ctx, s, C(ctx, M_SQRT1_2, p));
    Value ex = Erfcx(ctx, Un(ctx, "negate", st));                      // Phi(s) = ex e^{-st^2} / 2
    Value log_phi = Sub(ctx, Un(ctx, "log", Mul(ctx, ex, C(ctx, 0.5, p))), Mul(ctx, st, st));
    Value target = Sel(ctx, lower, logp, log1mp);
    Value slope = Div(ctx, C(ctx, std::sqrt(2 / M_PI), p), ex);        // d/ds log Phi(s) = phi / Phi
    Value step = Div(ctx, Sub(ctx, log_phi, target), slope);
    y = Sel(ctx, lower, Sub(ctx, y, step), Add(ctx, y, step));
  }
  y = Sel(ctx, Eq(ctx, p, C(ctx, 0, p)), C(ctx, -INFINITY, p), y);
  y = Sel(ctx, Eq(ctx, p, C(ctx, 1, p)), C(ctx, INFINITY, p), y);
  y = Sel(ctx, Or(ctx, Lt(ctx, p, C(ctx, 0, p)), ctx.b.Compare(Cmp::GT, p, C(ctx, 1, p))), C(ctx, NAN, p), y);
  return Done(ctx, Sel(ctx, IsNan(ctx, p), p, y));
}

// ---- regularized incomplete gamma ----

// P(a, x) by its series below x < a + 1 and Q(a, x) by Legendre's continued fraction (modified
// Lentz) above, each for 200 terms: (P, Q) with P + Q = 1.
std::pair<Value, Value> IncompleteGamma(Ctx& ctx, Value a, Value x) {
  Value one = C(ctx, 1, x), tiny = C(ctx, 1e-30, x);
  Value lg = ctx.b.Op1("chlo.lgamma", {a}, a.type);
  Value logpref = Sub(ctx, Sub(ctx, Mul(ctx, a, Un(ctx, "log", x)), x), lg);  // log(x^a e^-x / Gamma(a))
  // series: P = x^a e^-x / Gamma(a + 1) sum x^n / ((a+1)...(a+n))
  Value use_series = Lt(ctx, x, Add(ctx, a, one));
  Value xs = Sel(ctx, use_series, x, C(ctx, 0, x));
  auto series = ForLoop(ctx, 200, {one, one, a}, [&](Value, const std::vector<Value>& s) {
    Value ap = Add(ctx, s[2], one);
    Value term = Div(ctx, Mul(ctx, s[1], xs), ap);
    return std::vector<Value>{Add(ctx, s[0], term), term, ap};
  });
  Value p_series = Mul(ctx, Div(ctx, series[0], a), Un(ctx, "exponential", logpref));
  // continued fraction for Q
  Value xc = Sel(ctx, use_series, Add(ctx, a, one), x);
  Value b0 = Add(ctx, Sub(ctx, xc, a), one);
  Value c0 = Div(ctx, one, tiny), d0 = Div(ctx, one, Sel(ctx, Lt(ctx, Abs(ctx, b0), tiny), tiny, b0));
  auto cf = ForLoop(ctx, 200, {b0, c0, d0, d0}, [&](Value i, const std::vector<Value>& s) {
    Value fi = BroadcastTo(ctx, ctx.b.Convert(Add(ctx, i, ctx.b.ConstantInt(1, i.type)), x.type.elem), x.type.dims);
    Value an = Mul(ctx, Un(ctx, "negate", fi), Sub(ctx, fi, a));
    Value b = Add(ctx, s[0], C(ctx, 2, x));
    Value d = Add(ctx, Mul(ctx, an, s[2]), b);
    d = Sel(ctx, Lt(ctx, Abs(ctx, d), tiny), tiny, d);
    Value c = Add(ctx, b, Div(ctx, an, s[1]));
    c = Sel(ctx, Lt(ctx, Abs(ctx, c), tiny), tiny, c);
    d = Div(ctx, one, d);
    return std::vector<Value>{b, c, d, Mul(ctx, s[3], Mul(ctx, d, c))};
  });
  Value xlog = Sub(ctx, Sub(ctx, Mul(ctx, a, Un(ctx, "log", xc)), xc), lg);
  Value q_cf = Mul(ctx, Un(ctx, "exponential", xlog), cf[3]);
  Value p = Sel(ctx, use_series, p_series, Sub(ctx, one, q_cf));
  Value q = Sel(ctx, use_series, Sub(ctx, one, p_series), q_cf);
  return {p, q};
}

// igamma(a, x) = P(a, x), igammac(a, x) = Q(a, x), with PyTorch's edge values: NaN for a < 0
// or x < 0; x == 0 gives P = 0; a == 0 gives P = 1 (x > 0); infinite x gives P = 1.
template <bool kUpper>
std::vector<Value> LowerIgamma(Ctx& ctx, const Args& a_args) {
  TensorType t = Compute(ctx.out());
  Value a = CastTo(ctx, a_args.tensor(0), t), x = CastTo(ctx, a_args.tensor(1), t);
  Value zero = C(ctx, 0, x), one = C(ctx, 1, x);
  Value safe_a = Sel(ctx, ctx.b.Compare(Cmp::GT, a, zero), a, one);
  Value safe_x = Sel(ctx, ctx.b.Compare(Cmp::GT, x, zero), x, one);
  auto [p, q] = IncompleteGamma(ctx, safe_a, Sel(ctx, Lt(ctx, x, C(ctx, INFINITY, x)), safe_x, one));
  Value r = kUpper ? q : p;
  Value at0 = kUpper ? one : zero, full = kUpper ? zero : one;
  r = Sel(ctx, Eq(ctx, x, zero), at0, r);
  r = Sel(ctx, Eq(ctx, x, C(ctx, INFINITY, x)), full, r);
  r = Sel(ctx, And(ctx, Eq(ctx, a, zero), ctx.b.Compare(Cmp::GT, x, zero)), full, r);
  r = Sel(ctx, Or(ctx, Lt(ctx, a, zero), Lt(ctx, x, zero)), C(ctx, NAN, x), r);
  return Done(ctx, Sel(ctx, Or(ctx, IsNan(ctx, a), IsNan(ctx, x)), Add(ctx, a, x), r));
}

// ---- gamma family ----

// digamma with PyTorch's poles: +-0 gives -+inf (copysign(inf, -x)), other non-positive
// integers NaN (CHLO gives NaN at 0).
Value Digamma(Ctx& ctx, Value x) {
  Value r = Apply(ctx, "chlo.digamma", x);
  Value inf = Div(ctx, Const(ctx, -1, x), x);  // -1 / +-0 = -+inf, IEEE's copysign(inf, -x)
  return ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), inf, r);
}

std::vector<Value> LowerDigamma(Ctx& ctx, const Args& a) { return OpmathResult(ctx, Digamma(ctx, OpmathOperand(ctx, a, 0))); }

// True where x is a non-positive integer (the poles of the polygamma functions).
Value AtPole(Ctx& ctx, Value x) {
  return And(ctx, ctx.b.Compare(Cmp::LE, x, Const(ctx, 0, x)), ctx.b.Compare(Cmp::EQ, x, Apply(ctx, "stablehlo.floor", x)));
}

// Hurwitz zeta; CHLO's loses accuracy for q well below 0, so negative q is first shifted up by
// 16: zeta(s, q) = sum_{i<16} (q + i)^-s + zeta(s, q + 16).
Value Zeta(Ctx& ctx, Value s, Value q) {
  Value direct = ctx.b.Op1("chlo.zeta", {s, q}, q.type);
  Value sum = ctx.b.Op1("chlo.zeta", {s, Add(ctx, q, Const(ctx, 16, q))}, q.type);
  Value neg_s = Apply(ctx, "stablehlo.negate", s);
  for (int i = 0; i < 16; ++i) sum = Add(ctx, sum, Apply(ctx, "stablehlo.power", Add(ctx, q, Const(ctx, i, q)), neg_s));
  return ctx.b.Select(ctx.b.Compare(Cmp::LT, q, Const(ctx, 0, q)), sum, direct);
}

// polygamma(n, x) = (-1)^(n+1) n! zeta(n+1, x): digamma for n == 0. At the poles PyTorch
// gives (-1)^(n+1) inf, except trigamma (n == 1), whose reflection formula gives
// pi^2 / sin^2(pi x) at negative integers and inf at 0.
Value Polygamma(Ctx& ctx, int64_t n, Value x) {
  if (n == 0) return Digamma(ctx, x);
  double factorial = 1;
  for (int64_t i = 2; i <= n; ++i) factorial *= static_cast<double>(i);
  Value r = Mul(ctx, Const(ctx, (n % 2 ? 1 : -1) * factorial, x), Zeta(ctx, Const(ctx, n + 1.0, x), x));
  Value pole = Const(ctx, n % 2 ? INFINITY : -INFINITY, x);
  if (n == 1) {
    Value s = Apply(ctx, "stablehlo.sine", Mul(ctx, Const(ctx, M_PI, x), x));
    Value reflected = Div(ctx, Const(ctx, M_PI * M_PI, x), Mul(ctx, s, s));
    pole = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), pole, reflected);
  }
  return ctx.b.Select(AtPole(ctx, x), pole, r);
}

std::vector<Value> LowerPolygamma(Ctx& ctx, const Args& a) {
  return OpmathResult(ctx, Polygamma(ctx, a.int_(0), CastTo(ctx, a.tensor(1), OpmathType(ctx.out()))));
}
// polygamma_(self, n): the in-place form takes its arguments the other way round.
std::vector<Value> LowerPolygammaInplace(Ctx& ctx, const Args& a) {
  return OpmathResult(ctx, Polygamma(ctx, a.int_(1), CastTo(ctx, a.tensor(0), OpmathType(ctx.out()))));
}

// zeta(x, q): the Hurwitz zeta function with PyTorch's (Cephes') domain: inf at x == 1, NaN
// for x < 1, inf at non-positive integer q, NaN for negative q with non-integer x.
std::vector<Value> LowerZeta(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), q = CastTo(ctx, a.tensor(1), t);
  Value r = Zeta(ctx, x, q);
  Value nan = Const(ctx, NAN, x), inf = Const(ctx, INFINITY, x);
  Value q_neg_frac = And(ctx, ctx.b.Compare(Cmp::LT, q, Const(ctx, 0, q)), ctx.b.Compare(Cmp::NE, x, Apply(ctx, "stablehlo.floor", x)));
  r = ctx.b.Select(q_neg_frac, nan, r);
  r = ctx.b.Select(AtPole(ctx, q), inf, r);
  r = ctx.b.Select(ctx.b.Compare(Cmp::LT, x, Const(ctx, 1, x)), nan, r);
  r = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 1, x)), inf, r);
  return OpmathResult(ctx, ctx.b.Select(Or(ctx, IsNan(ctx, x), IsNan(ctx, q)), Add(ctx, x, q), r));
}

// mvlgamma(x, p) = sum_{i<p} lgamma(x - i/2) + p(p-1)/4 log(pi); every x must exceed (p-1)/2.
std::vector<Value> LowerMvlgamma(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  int64_t p = a.int_(1);
  ctx.AddCheck(AnyTrue(ctx, Not(ctx, ctx.b.Compare(Cmp::GT, x, Const(ctx, (p - 1) / 2.0, x)))),
               "mvlgamma: All elements must be greater than (p-1)/2");
  Value r = Const(ctx, p * (p - 1) / 4.0 * std::log(M_PI), x);
  for (int64_t i = 0; i < p; ++i) r = Add(ctx, r, Apply(ctx, "chlo.lgamma", Sub(ctx, x, Const(ctx, i / 2.0, x))));
  return OpmathResult(ctx, r);
}

}  // namespace

TPU_LOWERING("aten::digamma", LowerDigamma);
TPU_LOWERING("aten::igamma", LowerIgamma<false>);
TPU_LOWERING("aten::igammac", LowerIgamma<true>);
TPU_LOWERING("aten::mvlgamma", LowerMvlgamma);
TPU_LOWERING("aten::polygamma", LowerPolygamma);
TPU_LOWERING("aten::polygamma_", LowerPolygammaInplace);
TPU_LOWERING("aten::special_chebyshev_polynomial_t", LowerChebyshev<0>);
TPU_LOWERING("aten::special_chebyshev_polynomial_u", LowerChebyshev<1>);
TPU_LOWERING("aten::special_chebyshev_polynomial_v", LowerChebyshev<2>);
TPU_LOWERING("aten::special_chebyshev_polynomial_w", LowerChebyshev<3>);
TPU_LOWERING("aten::special_erfcx", LowerErfcx);
TPU_LOWERING("aten::special_hermite_polynomial_h", LowerHermiteH);
TPU_LOWERING("aten::special_hermite_polynomial_he", LowerHermiteHe);
TPU_LOWERING("aten::special_laguerre_polynomial_l", LowerLaguerre);
TPU_LOWERING("aten::special_legendre_polynomial_p", LowerLegendre);
TPU_LOWERING("aten::special_log_ndtr", LowerLogNdtr);
TPU_LOWERING("aten::special_ndtri", LowerNdtri);
TPU_LOWERING("aten::special_shifted_chebyshev_polynomial_t", LowerShiftedChebyshev<0>);
TPU_LOWERING("aten::special_shifted_chebyshev_polynomial_u", LowerShiftedChebyshev<1>);
TPU_LOWERING("aten::special_shifted_chebyshev_polynomial_v", LowerShiftedChebyshev<2>);
TPU_LOWERING("aten::special_shifted_chebyshev_polynomial_w", LowerShiftedChebyshev<3>);
TPU_LOWERING("aten::special_zeta", LowerZeta);

}  // namespace tpu::lowering
