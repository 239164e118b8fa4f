// torch.special functions beyond the CHLO ones: orthogonal polynomials by their three-term
// recurrences (with PyTorch's special cases), Bessel functions by trapezoidal quadrature of
// their integral representations (spectrally accurate for these smooth integrands), the
// scaled complementary error function and the normal distribution's log-CDF and quantile,
// and the regularized incomplete gamma functions. Half types compute in f32.
#include <cmath>

#include "helpers.h"

namespace tpu::lowering {
namespace {

TensorType Compute(const TensorType& out) { return {AccumulatorType(out.elem), out.dims}; }
Value Un(Ctx& ctx, const char* op, Value x) { return ctx.b.Unary(op, x); }
Value Lt(Ctx& ctx, Value x, Value y) { return ctx.b.Compare(Cmp::LT, x, y); }
Value Eq(Ctx& ctx, Value x, Value y) { return ctx.b.Compare(Cmp::EQ, x, y); }
Value Sel(Ctx& ctx, Value p, Value a, Value b) { return ctx.b.Select(p, a, b); }
Value C(Ctx& ctx, double v, const Value& like) { return ctx.b.Constant(v, like.type); }

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
Value Abs(Ctx& ctx, Value x) { return Un(ctx, "abs", x); }
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

std::vector<Value> Done(Ctx& ctx, Value r) { return {ConvertTo(ctx, r, ctx.out().elem)}; }

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

// ---- Bessel functions ----

// spherical j0(x) = sin(x) / x (1 at 0, 0 at +-inf).
std::vector<Value> LowerSphericalJ0(Ctx& ctx, const Args& a) {
  Value x = CastTo(ctx, a.tensor(0), Compute(ctx.out()));
  Value r = Div(ctx, Un(ctx, "sine", x), x);
  r = Sel(ctx, Eq(ctx, x, C(ctx, 0, x)), C(ctx, 1, x), r);
  r = Sel(ctx, Eq(ctx, Abs(ctx, x), C(ctx, INFINITY, x)), C(ctx, 0, x), r);
  return Done(ctx, r);
}

// Accumulates sum_{k<count} term(t_k) with t_k = k h (h a scalar constant).
Value Quadrature(Ctx& ctx, Value like, int64_t count, const std::function<Value(Value t)>& term) {
  Value zero = C(ctx, 0, like);
  return ForLoop(ctx, count, {zero}, [&](Value k, const std::vector<Value>& s) {
    Value t = BroadcastTo(ctx, ctx.b.Convert(k, like.type.elem), like.type.dims);
    return std::vector<Value>{Add(ctx, s[0], term(t))};
  })[0];
}

// K_nu(x) e^(x scaled) = int_0^inf e^(-x (cosh t - scaled)) cosh(nu t) dt for x > 0 by the
// trapezoidal rule: 640 steps of h = min(1/8, 1/(2 sqrt x)) (the integrand's width near 0 is
// 1/sqrt x), which reach t = 80 for small x. NaN below 0, inf at 0.
Value BesselK(Ctx& ctx, Value x, int nu, bool scaled) {
  Value pos = Sel(ctx, ctx.b.Compare(Cmp::GT, x, C(ctx, 0, x)), x, C(ctx, 1, x));
  Value h = Un(ctx, "rsqrt", Mul(ctx, pos, C(ctx, 4, x)));
  h = Sel(ctx, Lt(ctx, h, C(ctx, 0.125, x)), h, C(ctx, 0.125, x));
  Value sum = Quadrature(ctx, x, 640, [&](Value k) {
    Value t = Mul(ctx, k, h);
    Value ch = ctx.b.Op1("chlo.cosh", {t}, t.type);
    Value sh = ctx.b.Op1("chlo.sinh", {Mul(ctx, t, C(ctx, 0.5, x))}, t.type);
    Value ch_m1 = Mul(ctx, C(ctx, 2, x), Mul(ctx, sh, sh));  // cosh t - 1 without cancellation
    Value e = Un(ctx, "exponential", Mul(ctx, Un(ctx, "negate", pos), scaled ? ch_m1 : ch));
    Value w = Sel(ctx, Eq(ctx, k, C(ctx, 0, x)), C(ctx, 0.5, x), C(ctx, 1, x));
    return Mul(ctx, Mul(ctx, e, w), nu ? ch : C(ctx, 1, x));
  });
  Value r = Mul(ctx, sum, h);
  r = Sel(ctx, Eq(ctx, x, C(ctx, 0, x)), C(ctx, INFINITY, x), r);
  return Sel(ctx, Lt(ctx, x, C(ctx, 0, x)), C(ctx, NAN, x), r);
}

template <int kNu, bool kScaled>
std::vector<Value> LowerBesselK(Ctx& ctx, const Args& a) {
  return Done(ctx, BesselK(ctx, CastTo(ctx, a.tensor(0), Compute(ctx.out())), kNu, kScaled));
}

// J_nu(x) = (1/2pi) int_0^2pi cos(nu t - x sin t) dt: the trapezoidal rule on a whole period
// (128 points) is exact to rounding for |x| < 60; beyond, Hankel's asymptotic expansion.
Value BesselJ(Ctx& ctx, Value x, int nu) {
  const int points = 128;
  const double h = 2 * M_PI / points;
  Value small = Sel(ctx, Lt(ctx, Abs(ctx, x), C(ctx, 60, x)), x, C(ctx, 0, x));
  Value sum = Quadrature(ctx, x, points, [&](Value k) {
    Value t = Mul(ctx, k, C(ctx, h, x));
    Value arg = Sub(ctx, Mul(ctx, C(ctx, nu, x), t), Mul(ctx, small, Un(ctx, "sine", t)));
    return Un(ctx, "cosine", arg);
  });
  Value quad = Div(ctx, sum, C(ctx, points, x));
  // Hankel: J ~ sqrt(2 / (pi z)) (P cos w - Q sin w), w = z - (nu/2 + 1/4) pi, leading terms.
  Value z = Sel(ctx, Lt(ctx, Abs(ctx, x), C(ctx, 60, x)), C(ctx, 60, x), Abs(ctx, x));
  double mu = 4.0 * nu * nu;
  Value z8 = Mul(ctx, C(ctx, 8, x), z);
  Value inv2 = Div(ctx, C(ctx, 1, x), Mul(ctx, z8, z8));
  Value p = Sub(ctx, C(ctx, 1, x), Mul(ctx, C(ctx, (mu - 1) * (mu - 9) / 2.0, x), inv2));
  Value q = Div(ctx, Sub(ctx, C(ctx, mu - 1, x), Mul(ctx, C(ctx, (mu - 1) * (mu - 9) * (mu - 25) / 6.0, x), inv2)), z8);
  Value w = Sub(ctx, z, C(ctx, (nu / 2.0 + 0.25) * M_PI, x));
  Value asym = Mul(ctx, Un(ctx, "sqrt", Div(ctx, C(ctx, 2 / M_PI, x), z)),
                   Sub(ctx, Mul(ctx, p, Un(ctx, "cosine", w)), Mul(ctx, q, Un(ctx, "sine", w))));
  if (nu % 2) asym = Mul(ctx, asym, Un(ctx, "sign", x));  // J_1 is odd
  return Sel(ctx, Lt(ctx, Abs(ctx, x), C(ctx, 60, x)), quad, asym);
}

template <int kNu>
std::vector<Value> LowerBesselJ(Ctx& ctx, const Args& a) {
  return Done(ctx, BesselJ(ctx, CastTo(ctx, a.tensor(0), Compute(ctx.out())), kNu));
}

// ---- Bessel functions of the second kind and the Airy function ----
// Each has three regimes: a power series near 0, integral representations by Gauss-Legendre
// quadrature in the middle (the integrands are analytic on the closed interval, so the rule
// converges geometrically where the trapezoidal rule would stall at the endpoints), and
// Hankel's asymptotic expansion far out.

// Gauss-Legendre nodes and weights on [-1, 1]: Newton's method on P_n from Chebyshev guesses.
void GaussLegendre(int n, std::vector<double>& nodes, std::vector<double>& weights) {
  nodes.assign(n, 0);
  weights.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    double z = std::cos(M_PI * (i + 0.75) / (n + 0.5)), dp = 1;
    for (int it = 0; it < 100; ++it) {
      double p0 = 1, p1 = z;
      for (int k = 2; k <= n; ++k) {
        double p2 = ((2 * k - 1) * z * p1 - (k - 1) * p0) / k;
        p0 = p1;
        p1 = p2;
      }
      dp = n * (z * p1 - p0) / (z * z - 1);
      double step = p1 / dp;
      z -= step;
      if (std::abs(step) < 1e-16) break;
    }
    nodes[i] = z;
    weights[i] = 2 / ((1 - z * z) * dp * dp);
  }
}

// int_0^end f(t) dt by n-point Gauss-Legendre; `end` is elementwise.
Value Integral(Ctx& ctx, Value end, int n, const std::function<Value(Value t)>& f) {
  std::vector<double> nodes, weights;
  GaussLegendre(n, nodes, weights);
  Value half = Mul(ctx, end, C(ctx, 0.5, end)), sum;
  for (int i = 0; i < n; ++i) {
    Value term = Mul(ctx, C(ctx, weights[i], end), f(Mul(ctx, half, C(ctx, 1 + nodes[i], end))));
    sum = sum.valid() ? Add(ctx, sum, term) : term;
  }
  return Mul(ctx, sum, half);
}

// Hankel's expansion for z >= 25: sqrt(2 / (pi z)) (P cos w - Q sin w) for J_nu and
// (P sin w + Q cos w) for Y_nu, w = z - (nu / 2 + 1/4) pi, with the coefficients
// a_k = prod_{j<=k} (4 nu^2 - (2j - 1)^2) / (k! 8^k) to k = 7 (below 1e-8 there). The phase
// goes through cos z and sin z so no rounding of z - w enters.
Value Hankel(Ctx& ctx, Value z, double nu, bool y) {
  double mu = 4 * nu * nu, a = 1;
  Value inv = Div(ctx, C(ctx, 1, z), z), power = C(ctx, 1, z), p = C(ctx, 0, z), q = C(ctx, 0, z);
  for (int k = 0; k <= 7; ++k) {
    if (k > 0) a *= (mu - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k);
    Value term = Mul(ctx, C(ctx, (k / 2) % 2 ? -a : a, z), power);
    (k % 2 ? q : p) = Add(ctx, k % 2 ? q : p, term);
    power = Mul(ctx, power, inv);
  }
  double phase = (nu / 2 + 0.25) * M_PI;
  Value cz = Un(ctx, "cosine", z), sz = Un(ctx, "sine", z);
  Value cw = Add(ctx, Mul(ctx, cz, C(ctx, std::cos(phase), z)), Mul(ctx, sz, C(ctx, std::sin(phase), z)));
  Value sw = Sub(ctx, Mul(ctx, sz, C(ctx, std::cos(phase), z)), Mul(ctx, cz, C(ctx, std::sin(phase), z)));
  Value r = y ? Add(ctx, Mul(ctx, p, sw), Mul(ctx, q, cw)) : Sub(ctx, Mul(ctx, p, cw), Mul(ctx, q, sw));
  return Mul(ctx, Un(ctx, "sqrt", Div(ctx, C(ctx, 2 / M_PI, z), z)), r);
}

// sum_k c_k q^k by Horner's rule.
Value Series(Ctx& ctx, Value q, const std::vector<double>& c) {
  Value r = C(ctx, c.back(), q);
  for (size_t k = c.size() - 1; k-- > 0;) r = Add(ctx, Mul(ctx, r, q), C(ctx, c[k], q));
  return r;
}

// Y_n(x) for x < 2 (A&S 9.1.11 with q = x^2 / 4, psi(k + 1) = H_k - gamma):
// Y0 = (2/pi)(ln(x/2) + gamma) J0 - (2/pi) sum H_k (-q)^k / k!^2,
// Y1 = -2/(pi x) + (2/pi) ln(x/2) J1 - (x/2pi) sum (psi(k+1) + psi(k+2)) (-q)^k / (k! (k+1)!).
Value BesselYSeries(Ctx& ctx, Value x, int nu) {
  const double gamma = 0.57721566490153286061;
  std::vector<double> j, y;
  double fact = 1, harmonic = 0;  // k! and H_k
  for (int k = 0; k < 16; ++k) {
    if (k > 0) fact *= k, harmonic += 1.0 / k;
    double sign = k % 2 ? -1 : 1, denom = nu ? fact * fact * (k + 1) : fact * fact;
    j.push_back(sign / denom);
    y.push_back(nu ? sign * (2 * harmonic + 1.0 / (k + 1) - 2 * gamma) / denom : sign * harmonic / denom);
  }
  Value q = Mul(ctx, Mul(ctx, x, x), C(ctx, 0.25, x));
  Value log_half = Un(ctx, "log", Mul(ctx, x, C(ctx, 0.5, x)));
  Value jn = Series(ctx, q, j), sy = Series(ctx, q, y);
  if (nu == 0)
    return Mul(ctx, C(ctx, 2 / M_PI, x), Sub(ctx, Mul(ctx, Add(ctx, log_half, C(ctx, gamma, x)), jn), sy));
  jn = Mul(ctx, jn, Mul(ctx, x, C(ctx, 0.5, x)));
  Value r = Sub(ctx, Mul(ctx, C(ctx, 2 / M_PI, x), Mul(ctx, log_half, jn)), Mul(ctx, Mul(ctx, x, C(ctx, 0.5 / M_PI, x)), sy));
  return Sub(ctx, r, Div(ctx, C(ctx, 2 / M_PI, x), x));
}

// Y_nu(x) = (1/pi) int_0^pi sin(x sin t - nu t) dt - (2/pi) int_0^inf (nu ? sinh t : 1) e^(-x sinh t) dt
// (DLMF 10.9.7), the second integral cut where x sinh t = 24.
Value BesselYIntegral(Ctx& ctx, Value x, int nu) {
  Value first = Integral(ctx, C(ctx, M_PI, x), 64, [&](Value t) {
    return Un(ctx, "sine", Sub(ctx, Mul(ctx, x, Un(ctx, "sine", t)), Mul(ctx, C(ctx, nu, x), t)));
  });
  Value end = ctx.b.Op1("chlo.asinh", {Div(ctx, C(ctx, 24, x), x)}, x.type);
  Value second = Integral(ctx, end, 40, [&](Value t) {
    Value sh = ctx.b.Op1("chlo.sinh", {t}, t.type);
    Value e = Un(ctx, "exponential", Un(ctx, "negate", Mul(ctx, x, sh)));
    return nu ? Mul(ctx, sh, e) : e;
  });
  return Sub(ctx, Mul(ctx, first, C(ctx, 1 / M_PI, x)), Mul(ctx, second, C(ctx, 2 / M_PI, x)));
}

// Picks by regime: `low` below a, `mid` in [a, b), `high` from b; each computed on an
// argument clamped into its own range so no regime sees values it cannot handle.
Value Regimes(Ctx& ctx, Value x, double a, double b, const std::function<Value(Value)>& low,
              const std::function<Value(Value)>& mid, const std::function<Value(Value)>& high) {
  Value below = Lt(ctx, x, C(ctx, a, x)), above = ctx.b.Compare(Cmp::GE, x, C(ctx, b, x));
  Value lo = low(Sel(ctx, below, x, C(ctx, a / 2, x)));
  Value md = mid(Sel(ctx, Or(ctx, below, above), C(ctx, a, x), x));
  Value hi = high(Sel(ctx, above, x, C(ctx, b, x)));
  return Sel(ctx, below, lo, Sel(ctx, above, hi, md));
}

// bessel_y0 / bessel_y1: -inf at 0.
template <int kNu>
std::vector<Value> LowerBesselY(Ctx& ctx, const Args& a) {
  Value x = CastTo(ctx, a.tensor(0), Compute(ctx.out()));
  Value pos = Sel(ctx, ctx.b.Compare(Cmp::GT, x, C(ctx, 0, x)), x, C(ctx, 1, x));
  Value r = Regimes(
      ctx, pos, 2, 25, [&](Value v) { return BesselYSeries(ctx, v, kNu); },
      [&](Value v) { return BesselYIntegral(ctx, v, kNu); }, [&](Value v) { return Hankel(ctx, v, kNu, true); });
  r = Sel(ctx, Eq(ctx, x, C(ctx, 0, x)), C(ctx, -INFINITY, x), r);
  // NaN below 0 and at +inf (the CPU's value there too).
  Value nan = Or(ctx, Lt(ctx, x, C(ctx, 0, x)), Eq(ctx, x, C(ctx, INFINITY, x)));
  return Done(ctx, Sel(ctx, Or(ctx, nan, IsNan(ctx, x)), C(ctx, NAN, x), r));
}

// Ai(x) near 0: Ai(0) f(x) + Ai'(0) g(x), f = sum 3^k (1/3)_k x^3k / (3k)!, g = sum 3^k (2/3)_k x^(3k+1) / (3k+1)!.
Value AiryAiSeries(Ctx& ctx, Value x) {
  std::vector<double> f, g;
  double fk = 1, gk = 1;
  for (int k = 0; k < 14; ++k) {
    f.push_back(fk);
    g.push_back(gk);
    fk /= (3.0 * k + 2) * (3.0 * k + 3);
    gk /= (3.0 * k + 3) * (3.0 * k + 4);
  }
  Value x3 = Mul(ctx, Mul(ctx, x, x), x);
  Value r = Mul(ctx, C(ctx, 0.35502805388781723926, x), Series(ctx, x3, f));
  return Sub(ctx, r, Mul(ctx, C(ctx, 0.25881940379280679840, x), Mul(ctx, x, Series(ctx, x3, g))));
}

// Ai(x), x > 0: (1/pi) sqrt(x/3) K_1/3(zeta), zeta = (2/3) x^(3/2), with
// K_1/3(zeta) = e^-zeta int_0^inf e^(-zeta (cosh t - 1)) cosh(t/3) dt (DLMF 9.6.1, 10.32.9).
Value AiryAiPositive(Ctx& ctx, Value x) {
  Value zeta = Mul(ctx, C(ctx, 2.0 / 3, x), Mul(ctx, x, Un(ctx, "sqrt", x)));
  Value end = ctx.b.Op1("chlo.acosh", {Add(ctx, C(ctx, 1, x), Div(ctx, C(ctx, 24, x), zeta))}, x.type);
  Value k = Integral(ctx, end, 40, [&](Value t) {
    Value half = ctx.b.Op1("chlo.sinh", {Mul(ctx, t, C(ctx, 0.5, x))}, t.type);
    Value cosh_m1 = Mul(ctx, C(ctx, 2, x), Mul(ctx, half, half));  // without cancellation
    return Mul(ctx, Un(ctx, "exponential", Un(ctx, "negate", Mul(ctx, zeta, cosh_m1))),
               ctx.b.Op1("chlo.cosh", {Mul(ctx, t, C(ctx, 1.0 / 3, x))}, t.type));
  });
  Value scale = Mul(ctx, Un(ctx, "sqrt", Mul(ctx, x, C(ctx, 1.0 / 3, x))), C(ctx, 1 / M_PI, x));
  return Mul(ctx, Mul(ctx, scale, Un(ctx, "exponential", Un(ctx, "negate", zeta))), k);
}

// Ai(-z), z > 0: (sqrt z / 3)(J_1/3(zeta) + J_-1/3(zeta)) (DLMF 9.6.6), by DLMF 10.9.6:
// J_1/3 + J_-1/3 = (2/pi) int_0^pi cos(t/3) cos(zeta sin t) dt + (sqrt3/pi) int_0^inf e^(-zeta sinh t) sinh(t/3) dt;
// Hankel's expansion of both for zeta >= 25.
Value AiryAiNegative(Ctx& ctx, Value z) {
  Value zeta = Mul(ctx, C(ctx, 2.0 / 3, z), Mul(ctx, z, Un(ctx, "sqrt", z)));
  Value far = ctx.b.Compare(Cmp::GE, zeta, C(ctx, 25, z));
  Value zi = Sel(ctx, far, C(ctx, 1, z), zeta), zh = Sel(ctx, far, zeta, C(ctx, 25, z));
  Value first = Integral(ctx, C(ctx, M_PI, z), 64, [&](Value t) {
    return Mul(ctx, Un(ctx, "cosine", Mul(ctx, t, C(ctx, 1.0 / 3, z))), Un(ctx, "cosine", Mul(ctx, zi, Un(ctx, "sine", t))));
  });
  Value end = ctx.b.Op1("chlo.asinh", {Div(ctx, C(ctx, 24, z), zi)}, z.type);
  Value second = Integral(ctx, end, 40, [&](Value t) {
    Value e = Un(ctx, "exponential", Un(ctx, "negate", Mul(ctx, zi, ctx.b.Op1("chlo.sinh", {t}, t.type))));
    return Mul(ctx, e, ctx.b.Op1("chlo.sinh", {Mul(ctx, t, C(ctx, 1.0 / 3, z))}, t.type));
  });
  Value sum = Add(ctx, Mul(ctx, first, C(ctx, 2 / M_PI, z)), Mul(ctx, second, C(ctx, std::sqrt(3.0) / M_PI, z)));
  sum = Sel(ctx, far, Add(ctx, Hankel(ctx, zh, 1.0 / 3, false), Hankel(ctx, zh, -1.0 / 3, false)), sum);
  return Mul(ctx, Mul(ctx, Un(ctx, "sqrt", z), C(ctx, 1.0 / 3, z)), sum);
}

// special_airy_ai: series on [-2, 1], the integrals outside; NaN at +-inf, as on the CPU.
std::vector<Value> LowerAiryAi(Ctx& ctx, const Args& a) {
  Value x = CastTo(ctx, a.tensor(0), Compute(ctx.out()));
  Value r = Regimes(
      ctx, x, -2, 1, [&](Value v) { return AiryAiNegative(ctx, Un(ctx, "negate", v)); },
      [&](Value v) { return AiryAiSeries(ctx, v); }, [&](Value v) { return AiryAiPositive(ctx, v); });
  Value inf = Eq(ctx, Abs(ctx, x), C(ctx, INFINITY, x));  // NaN there, as on the CPU
  return Done(ctx, Sel(ctx, Or(ctx, inf, IsNan(ctx, x)), C(ctx, NAN, x), r));
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

// ---- gamma family and modified Bessel functions of the first kind ----

// i0e(x) = e^-|x| I0(x), which CHLO lacks: the power series sum (x^2/4)^k / k!^2 below
// |x| = 15, the asymptotic series e^x / sqrt(2 pi x) sum ((2k-1)!!)^2 / (k! (8x)^k) above.
Value I0e(Ctx& ctx, Value x) {
  Value ax = Apply(ctx, "stablehlo.abs", x);
  Value q = Mul(ctx, Mul(ctx, ax, ax), Const(ctx, 0.25, x));
  Value series = Const(ctx, 1, x);  // Horner: 1 + q/1 (1 + q/4 (1 + q/9 (...)))
  for (int k = 48; k >= 1; --k)
    series = Add(ctx, Const(ctx, 1, x), Mul(ctx, series, Mul(ctx, q, Const(ctx, 1.0 / (static_cast<double>(k) * k), x))));
  Value small = Mul(ctx, series, Apply(ctx, "stablehlo.exponential", Apply(ctx, "stablehlo.negate", ax)));
  Value big_x = ctx.b.Select(ctx.b.Compare(Cmp::GT, ax, Const(ctx, 15, x)), ax, Const(ctx, 15, x));
  Value inv8x = Div(ctx, Const(ctx, 0.125, x), big_x);
  Value asym = Const(ctx, 1, x);
  for (int k = 12; k >= 1; --k)
    asym = Add(ctx, Const(ctx, 1, x), Mul(ctx, asym, Mul(ctx, inv8x, Const(ctx, (2.0 * k - 1) * (2.0 * k - 1) / k, x))));
  asym = Div(ctx, asym, Apply(ctx, "stablehlo.sqrt", Mul(ctx, Const(ctx, 2 * M_PI, x), big_x)));
  return ctx.b.Select(ctx.b.Compare(Cmp::GT, ax, Const(ctx, 15, x)), asym, small);
}

std::vector<Value> LowerI0e(Ctx& ctx, const Args& a) { return OpmathResult(ctx, I0e(ctx, OpmathOperand(ctx, a, 0))); }

// Modified Bessel functions from their exponentially scaled forms: i0 = i0e * e^|x|.
std::vector<Value> LowerI0(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  return OpmathResult(ctx, Mul(ctx, I0e(ctx, x), Apply(ctx, "stablehlo.exponential", Apply(ctx, "stablehlo.abs", x))));
}
std::vector<Value> LowerI1(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  return OpmathResult(ctx, Mul(ctx, Apply(ctx, "chlo.bessel_i1e", x), Apply(ctx, "stablehlo.exponential", Apply(ctx, "stablehlo.abs", x))));
}

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
TPU_LOWERING("aten::i0", LowerI0);
TPU_LOWERING("aten::igamma", LowerIgamma<false>);
TPU_LOWERING("aten::igammac", LowerIgamma<true>);
TPU_LOWERING("aten::mvlgamma", LowerMvlgamma);
TPU_LOWERING("aten::polygamma", LowerPolygamma);
TPU_LOWERING("aten::polygamma_", LowerPolygammaInplace);
TPU_LOWERING("aten::special_airy_ai", LowerAiryAi);
TPU_LOWERING("aten::special_bessel_j0", LowerBesselJ<0>);
TPU_LOWERING("aten::special_bessel_j1", LowerBesselJ<1>);
TPU_LOWERING("aten::special_bessel_y0", LowerBesselY<0>);
TPU_LOWERING("aten::special_bessel_y1", LowerBesselY<1>);
TPU_LOWERING("aten::special_chebyshev_polynomial_t", LowerChebyshev<0>);
TPU_LOWERING("aten::special_chebyshev_polynomial_u", LowerChebyshev<1>);
TPU_LOWERING("aten::special_chebyshev_polynomial_v", LowerChebyshev<2>);
TPU_LOWERING("aten::special_chebyshev_polynomial_w", LowerChebyshev<3>);
TPU_LOWERING("aten::special_erfcx", LowerErfcx);
TPU_LOWERING("aten::special_hermite_polynomial_h", LowerHermiteH);
TPU_LOWERING("aten::special_hermite_polynomial_he", LowerHermiteHe);
TPU_LOWERING("aten::special_i0e", LowerI0e);
TPU_LOWERING("aten::special_i1", LowerI1);
TPU_LOWERING("aten::special_laguerre_polynomial_l", LowerLaguerre);
TPU_LOWERING("aten::special_legendre_polynomial_p", LowerLegendre);
TPU_LOWERING("aten::special_log_ndtr", LowerLogNdtr);
TPU_LOWERING("aten::special_modified_bessel_i0", LowerI0);
TPU_LOWERING("aten::special_modified_bessel_i1", LowerI1);
TPU_LOWERING("aten::special_modified_bessel_k0", (LowerBesselK<0, false>));
TPU_LOWERING("aten::special_modified_bessel_k1", (LowerBesselK<1, false>));
TPU_LOWERING("aten::special_ndtri", LowerNdtri);
TPU_LOWERING("aten::special_scaled_modified_bessel_k0", (LowerBesselK<0, true>));
TPU_LOWERING("aten::special_scaled_modified_bessel_k1", (LowerBesselK<1, true>));
TPU_LOWERING("aten::special_shifted_chebyshev_polynomial_t", LowerShiftedChebyshev<0>);
TPU_LOWERING("aten::special_shifted_chebyshev_polynomial_u", LowerShiftedChebyshev<1>);
TPU_LOWERING("aten::special_shifted_chebyshev_polynomial_v", LowerShiftedChebyshev<2>);
TPU_LOWERING("aten::special_shifted_chebyshev_polynomial_w", LowerShiftedChebyshev<3>);
TPU_LOWERING("aten::special_spherical_bessel_j0", LowerSphericalJ0);
TPU_LOWERING("aten::special_zeta", LowerZeta);

}  // namespace tpu::lowering
