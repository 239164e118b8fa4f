// Bessel and Airy functions of torch.special: J0/J1 by trapezoidal quadrature of their
// integral representations (spectrally accurate for these smooth integrands), K0/K1 (and the
// scaled forms) likewise, Y0/Y1 and Ai by a power series near 0, Gauss-Legendre quadrature in
// the middle and Hankel's expansion far out, i0/i0e/i1 from their exponentially scaled forms.
// Half types compute in f32.
#include <cmath>
#include <functional>

#include "special.h"

namespace tpu::lowering {
namespace {
using namespace special;

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

// ---- modified Bessel functions of the first kind ----

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

}  // namespace

TPU_LOWERING("aten::i0", LowerI0);
TPU_LOWERING("aten::special_airy_ai", LowerAiryAi);
TPU_LOWERING("aten::special_bessel_j0", LowerBesselJ<0>);
TPU_LOWERING("aten::special_bessel_j1", LowerBesselJ<1>);
TPU_LOWERING("aten::special_bessel_y0", LowerBesselY<0>);
TPU_LOWERING("aten::special_bessel_y1", LowerBesselY<1>);
TPU_LOWERING("aten::special_i0e", LowerI0e);
TPU_LOWERING("aten::special_i1", LowerI1);
TPU_LOWERING("aten::special_modified_bessel_i0", LowerI0);
TPU_LOWERING("aten::special_modified_bessel_i1", LowerI1);
TPU_LOWERING("aten::special_modified_bessel_k0", (LowerBesselK<0, false>));
TPU_LOWERING("aten::special_modified_bessel_k1", (LowerBesselK<1, false>));
TPU_LOWERING("aten::special_scaled_modified_bessel_k0", (LowerBesselK<0, true>));
TPU_LOWERING("aten::special_scaled_modified_bessel_k1", (LowerBesselK<1, true>));
TPU_LOWERING("aten::special_spherical_bessel_j0", LowerSphericalJ0);

}  // namespace tpu::lowering
