// Elementwise ops: one generic rule per family (unary, binary arithmetic, compare, logical),
// parameterised by the StableHLO op. Operands are converted to the computation type and
// broadcast to the output shape first (rule 6).
#include <cmath>
#include <limits>

#include "elementwise.h"
#include "helpers.h"

namespace tpu::lowering {
namespace {

using namespace ops;


// ---- unary: out = op(x) ----
template <const char* Op>
std::vector<Value> LowerUnary(Ctx& ctx, const Args& a) {
  return OpmathResult(ctx, Apply(ctx, Op, OpmathOperand(ctx, a, 0)));
}


// erfinv: CHLO's polynomial estimate refined by one Newton step on erf (|x| <= 1/2) or, to
// keep precision near +-1 where erf(y) - x cancels, on erfc: 1 - |x| is exact there.
std::vector<Value> LowerErfInv(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  Value ax = Apply(ctx, kAbs, x);
  Value y = Apply(ctx, kErfInv, ax);
  Value near_one = ctx.b.Compare(Cmp::GT, ax, Const(ctx, 0.5, x));
  Value residual = ctx.b.Select(near_one, Sub(ctx, Sub(ctx, Const(ctx, 1, x), ax), Apply(ctx, kErfc, y)),
                                Sub(ctx, Apply(ctx, kErf, y), ax));
  Value slope = Mul(ctx, Const(ctx, M_2_SQRTPI, x), Apply(ctx, kExp, Apply(ctx, kNeg, Mul(ctx, y, y))));
  Value refined = Sub(ctx, y, Div(ctx, residual, slope));
  Value finite = ctx.b.Compare(Cmp::LT, ax, Const(ctx, 1, x));
  y = ctx.b.Select(finite, refined, y);
  return OpmathResult(ctx, Mul(ctx, Apply(ctx, kSign, x), y));  // sign(-0) keeps -0
}

// Integer abs/neg/sign keep the integer type (no opmath).
template <const char* Op>
std::vector<Value> LowerUnaryKeepType(Ctx& ctx, const Args& a) {
  if (IsComplex(a.tensor(0).type.elem) && !IsComplex(ctx.out().elem)) {  // abs of complex: the modulus
    Value x = a.tensor(0);
    return {ConvertTo(ctx, ctx.b.Op1(Op, {x}, {x.type.elem == ElemType::C64 ? ElemType::F32 : ElemType::F64, x.type.dims}), ctx.out().elem)};
  }
  if (IsFloat(ctx.out().elem)) return LowerUnary<Op>(ctx, a);
  if (ctx.out().elem == ElemType::Pred) return {CastTo(ctx, a.tensor(0), ctx.out())};  // abs/sign of bool: itself
  return {Apply(ctx, Op, CastTo(ctx, a.tensor(0), ctx.out()))};
}

// sign(x) = (0 < x) - (x < 0), as the CPU computes it: +0 for -0 and for NaN (stablehlo.sign
// keeps both). sgn(z) = z / |z|, 0 for z == 0 (+0, whatever the zero's signs), NaN parts for a
// NaN modulus: the CPU's formula, where stablehlo.sign keeps -0 and gives 1/sqrt(2) for 1+nanj.
std::vector<Value> LowerSign(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (IsComplex(x.type.elem)) {
    TensorType part{x.type.elem == ElemType::C64 ? ElemType::F32 : ElemType::F64, x.type.dims};
    Value re = ctx.b.Op1("stablehlo.real", {x}, part), im = ctx.b.Op1("stablehlo.imag", {x}, part);
    // |z| is NaN when a part is (the CPU's hypot; XLA's complex abs can drop the NaN).
    Value modulus = ctx.b.Select(Or(ctx, IsNan(ctx, re), IsNan(ctx, im)), Const(ctx, NAN, re),
                                 ctx.b.Op1("stablehlo.abs", {x}, part));
    Value unit = ctx.b.Op1("stablehlo.complex", {Div(ctx, re, modulus), Div(ctx, im, modulus)}, x.type);
    Value zero = ctx.b.Compare(Cmp::EQ, modulus, Const(ctx, 0, modulus));
    return {CastTo(ctx, ctx.b.Select(zero, ctx.b.Constant(0, x.type), unit), ctx.out())};
  }
  if (!IsFloat(ctx.out().elem)) return LowerUnaryKeepType<kSign>(ctx, a);
  x = OpmathOperand(ctx, a, 0);
  Value zero = Const(ctx, 0, x);
  Value negative = ctx.b.Select(ctx.b.Compare(Cmp::LT, x, zero), Const(ctx, -1, x), zero);
  return OpmathResult(ctx, ctx.b.Select(ctx.b.Compare(Cmp::GT, x, zero), Const(ctx, 1, x), negative));
}

// trunc(x) = sign(x) * floor(|x|); integers are already whole.
std::vector<Value> LowerTrunc(Ctx& ctx, const Args& a) {
  if (!IsFloat(ctx.out().elem)) return {CastTo(ctx, a.tensor(0), ctx.out())};
  Value x = OpmathOperand(ctx, a, 0);
  return OpmathResult(ctx, Mul(ctx, Apply(ctx, kSign, x), Apply(ctx, kFloor, Apply(ctx, kAbs, x))));
}

// Rounding ops are the identity on integers.
template <const char* Op>
std::vector<Value> LowerRounding(Ctx& ctx, const Args& a) {
  if (!IsFloat(ctx.out().elem)) return {CastTo(ctx, a.tensor(0), ctx.out())};
  return LowerUnary<Op>(ctx, a);
}

std::vector<Value> LowerReciprocal(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  return OpmathResult(ctx, Div(ctx, Const(ctx, 1, x), x));
}

std::vector<Value> LowerRelu(Ctx& ctx, const Args& a) {
  Value x = CastTo(ctx, a.tensor(0), ctx.out());
  Value r = Apply(ctx, "stablehlo.maximum", x, Const(ctx, 0, x));
  if (!IsFloat(x.type.elem)) return {r};
  // PyTorch's relu keeps NaN; stablehlo.maximum need not (XLA CPU's fast min/max drops it).
  return {ctx.b.Select(IsNan(ctx, x), x, r)};
}

std::vector<Value> LowerSilu(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  return OpmathResult(ctx, Mul(ctx, x, Apply(ctx, kSigmoid, x)));
}

// gelu(x) = x/2 * (1 + erf(x/sqrt 2)); approximate="tanh": x/2 * (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
// The exact form uses 1 + erf(x/sqrt 2) = erfc(-x/sqrt 2), which keeps its precision for very
// negative x (1 + erf cancels to a residue of the erf approximation instead of 0).
std::vector<Value> LowerGelu(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  Value half_x = Mul(ctx, x, Const(ctx, 0.5, x));
  if (a.str_or(1, "none") != "tanh") {
    return OpmathResult(ctx, Mul(ctx, half_x, Apply(ctx, kErfc, Mul(ctx, x, Const(ctx, -M_SQRT1_2, x)))));
  }
  Value cube = Mul(ctx, Mul(ctx, x, x), x);
  Value u = Mul(ctx, Const(ctx, std::sqrt(2.0 / M_PI), x), Add(ctx, x, Mul(ctx, Const(ctx, 0.044715, x), cube)));
  return OpmathResult(ctx, Mul(ctx, half_x, Add(ctx, Const(ctx, 1, x), Apply(ctx, kTanh, u))));
}

std::vector<Value> LowerGeluBackward(Ctx& ctx, const Args& a) {
  Value g = OpmathOperand(ctx, a, 0), x = OpmathOperand(ctx, a, 1);
  Value one = Const(ctx, 1, x), half = Const(ctx, 0.5, x);
  if (a.str_or(2, "none") == "tanh") {
    Value k = Const(ctx, std::sqrt(2.0 / M_PI), x), c = Const(ctx, 0.044715, x);
    Value x2 = Mul(ctx, x, x);
    Value t = Apply(ctx, kTanh, Mul(ctx, k, Add(ctx, x, Mul(ctx, c, Mul(ctx, x2, x)))));
    Value dinner = Mul(ctx, k, Add(ctx, one, Mul(ctx, Const(ctx, 3 * 0.044715, x), x2)));
    Value left = Mul(ctx, half, Add(ctx, one, t));
    Value right = Mul(ctx, Mul(ctx, half, x), Mul(ctx, Sub(ctx, one, Mul(ctx, t, t)), dinner));
    return OpmathResult(ctx, Mul(ctx, g, Add(ctx, left, right)));
  }
  Value cdf = Mul(ctx, half, Apply(ctx, kErfc, Mul(ctx, x, Const(ctx, -M_SQRT1_2, x))));
  Value pdf = Mul(ctx, Const(ctx, 0.5 * M_2_SQRTPI * M_SQRT1_2, x),
                  Apply(ctx, kExp, Mul(ctx, Const(ctx, -0.5, x), Mul(ctx, x, x))));
  return OpmathResult(ctx, Mul(ctx, g, Add(ctx, cdf, Mul(ctx, x, pdf))));
}

std::vector<Value> LowerSiluBackward(Ctx& ctx, const Args& a) {
  Value g = OpmathOperand(ctx, a, 0), x = OpmathOperand(ctx, a, 1);
  Value s = Apply(ctx, kSigmoid, x), one = Const(ctx, 1, x);
  return OpmathResult(ctx, Mul(ctx, g, Mul(ctx, s, Add(ctx, one, Mul(ctx, x, Sub(ctx, one, s))))));
}

std::vector<Value> LowerSigmoidBackward(Ctx& ctx, const Args& a) {
  Value g = OpmathOperand(ctx, a, 0), y = OpmathOperand(ctx, a, 1);
  return OpmathResult(ctx, Mul(ctx, g, Mul(ctx, y, Sub(ctx, Const(ctx, 1, y), y))));
}

std::vector<Value> LowerTanhBackward(Ctx& ctx, const Args& a) {
  Value g = OpmathOperand(ctx, a, 0), y = OpmathOperand(ctx, a, 1);
  return OpmathResult(ctx, Mul(ctx, g, Sub(ctx, Const(ctx, 1, y), Mul(ctx, y, y))));
}

// threshold_backward(g, x, t) = x <= t ? 0 : g
std::vector<Value> LowerThresholdBackward(Ctx& ctx, const Args& a) {
  Value g = CastTo(ctx, a.tensor(0), ctx.out());
  Value x = CastTo(ctx, a.tensor(1), ctx.out());
  Value t = CastTo(ctx, a.tensor(2), ctx.out());
  return {ctx.b.Select(ctx.b.Compare(Cmp::LE, x, t), Const(ctx, 0, g), g)};
}

// threshold(x, t, v) = x <= t ? v : x
std::vector<Value> LowerThreshold(Ctx& ctx, const Args& a) {
  Value x = CastTo(ctx, a.tensor(0), ctx.out());
  Value t = CastTo(ctx, a.tensor(1), ctx.out());
  Value v = CastTo(ctx, a.tensor(2), ctx.out());
  return {ctx.b.Select(ctx.b.Compare(Cmp::LE, x, t), v, x)};
}

// ---- binary arithmetic: out = op(a, b) in the output type ----
// alpha * y for add/sub/rsub (y unchanged without alpha); on bool, alpha multiplies as `and`.
Value TimesAlpha(Ctx& ctx, Value y, const Args& a, size_t arg) {
  if (a.is_none(arg)) return y;
  Value alpha = CastTo(ctx, a.tensor(arg), y.type);
  return y.type.elem == ElemType::Pred ? Apply(ctx, "stablehlo.and", y, alpha) : Mul(ctx, y, alpha);
}

// add/sub take alpha: out = a op alpha * b, computed in f32 for half types and rounded once
// (alpha itself arrives rounded to the result type, as PyTorch's CPU kernel has it). On bool,
// add is logical or.
template <const char* Op>
std::vector<Value> LowerAddSub(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  return OpmathResult(ctx, Apply(ctx, Op, x, TimesAlpha(ctx, y, a, 2)));
}

template <const char* Op>
std::vector<Value> LowerBinary(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  return OpmathResult(ctx, Apply(ctx, Op, CastTo(ctx, a.tensor(0), t), CastTo(ctx, a.tensor(1), t)));
}

// Reversed: rsub(a, b, alpha) = b - alpha * a.
std::vector<Value> LowerRsub(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  return OpmathResult(ctx, Sub(ctx, y, TimesAlpha(ctx, x, a, 2)));
}


// mul on bool is logical and (stablehlo.multiply rejects i1).
std::vector<Value> LowerMul(Ctx& ctx, const Args& a) {
  if (ctx.out().elem == ElemType::Pred) return {Apply(ctx, kAnd, CastTo(ctx, a.tensor(0), ctx.out()), CastTo(ctx, a.tensor(1), ctx.out()))};
  return LowerBinary<kMul>(ctx, a);
}

// Integer division, floor division and remainder by zero raise on the CPU (RuntimeError
// "ZeroDivisionError"); XLA would return a value.
void CheckNoIntegerZeroDivisor(Ctx& ctx, Value y) {
  if (IsFloat(y.type.elem) || IsComplex(y.type.elem) || y.type.numel() == 0) return;
  ctx.AddCheck(AnyTrue(ctx, ctx.b.Compare(Cmp::EQ, y, Const(ctx, 0, y))), "ZeroDivisionError", Ctx::ErrorKind::Runtime);
}

// Floor division as PyTorch computes it for floats (div_floor_floating): exact for
// values where floor(a / b) would round the wrong way.
Value FloorDivFloat(Ctx& ctx, Value x, Value y) {
  Value mod = Apply(ctx, "stablehlo.remainder", x, y);
  Value div = Div(ctx, Sub(ctx, x, mod), y);
  Value zero = Const(ctx, 0, x);
  Value signs_differ = ctx.b.Compare(Cmp::NE, ctx.b.Compare(Cmp::LT, y, zero), ctx.b.Compare(Cmp::LT, mod, zero));
  Value adjust = ctx.b.Op1("stablehlo.and", {ctx.b.Compare(Cmp::NE, mod, zero), signs_differ}, signs_differ.type);
  div = ctx.b.Select(adjust, Sub(ctx, div, Const(ctx, 1, x)), div);
  Value floored = Apply(ctx, kFloor, div);
  Value bump = ctx.b.Compare(Cmp::GT, Sub(ctx, div, floored), Const(ctx, 0.5, x));
  floored = ctx.b.Select(bump, Add(ctx, floored, Const(ctx, 1, x)), floored);
  // A zero quotient takes the sign of a / b, not of div (-1 // -5 is +0 in PyTorch).
  Value quotient = Div(ctx, x, y);
  Value signed_zero = Mul(ctx, zero, Apply(ctx, kSign, quotient));
  floored = ctx.b.Select(ctx.b.Compare(Cmp::EQ, div, zero), signed_zero, floored);
  // b == 0: PyTorch returns a / b (inf or nan).
  return ctx.b.Select(ctx.b.Compare(Cmp::EQ, y, zero), quotient, floored);
}

Value FloorDivInt(Ctx& ctx, Value x, Value y) {
  Value q = Div(ctx, x, y);
  Value r = Apply(ctx, "stablehlo.remainder", x, y);
  Value zero = Const(ctx, 0, x);
  Value signs_differ = ctx.b.Compare(Cmp::NE, ctx.b.Compare(Cmp::LT, x, zero), ctx.b.Compare(Cmp::LT, y, zero));
  Value adjust = ctx.b.Op1("stablehlo.and", {ctx.b.Compare(Cmp::NE, r, zero), signs_differ}, signs_differ.type);
  return ctx.b.Select(adjust, Sub(ctx, q, Const(ctx, 1, x)), q);
}

// div(a, b, rounding_mode): true division, "trunc" or "floor".
std::vector<Value> LowerDiv(Ctx& ctx, const Args& a) {
  std::string mode = a.size() > 2 ? a.str_or(2, "") : "";
  TensorType t = OpmathType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  if (mode.empty()) return OpmathResult(ctx, Div(ctx, x, y));
  bool is_float = IsFloat(t.elem);
  CheckNoIntegerZeroDivisor(ctx, y);
  if (mode == "trunc") {
    if (!is_float) return OpmathResult(ctx, Div(ctx, x, y));  // integer division truncates
    Value q = Div(ctx, x, y);
    return OpmathResult(ctx, Mul(ctx, Apply(ctx, kSign, q), Apply(ctx, kFloor, Apply(ctx, kAbs, q))));
  }
  return OpmathResult(ctx, is_float ? FloorDivFloat(ctx, x, y) : FloorDivInt(ctx, x, y));
}

std::vector<Value> LowerFloorDivide(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  CheckNoIntegerZeroDivisor(ctx, y);
  return OpmathResult(ctx, IsFloat(t.elem) ? FloorDivFloat(ctx, x, y) : FloorDivInt(ctx, x, y));
}

// remainder(a, b) = a - floor(a / b) * b: the sign follows the divisor (Python's %).
std::vector<Value> LowerRemainder(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  CheckNoIntegerZeroDivisor(ctx, y);
  Value r = Apply(ctx, "stablehlo.remainder", x, y);
  Value zero = Const(ctx, 0, x);
  Value fix = ctx.b.Op1("stablehlo.and",
                        {ctx.b.Compare(Cmp::NE, r, zero),
                         ctx.b.Compare(Cmp::NE, ctx.b.Compare(Cmp::LT, r, zero), ctx.b.Compare(Cmp::LT, y, zero))},
                        {ElemType::Pred, t.dims});
  return OpmathResult(ctx, ctx.b.Select(fix, Add(ctx, r, y), r));
}

// fmod: C's fmod, the sign follows the dividend (stablehlo.remainder).
std::vector<Value> LowerFmod(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value y = CastTo(ctx, a.tensor(1), t);
  CheckNoIntegerZeroDivisor(ctx, y);
  return OpmathResult(ctx, Apply(ctx, "stablehlo.remainder", CastTo(ctx, a.tensor(0), t), y));
}

// maximum/minimum propagate NaN, as PyTorch does.
template <bool kMax>
std::vector<Value> LowerMinMax(Ctx& ctx, const Args& a) {
  TensorType t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  if (t.elem == ElemType::Pred) return {Apply(ctx, kMax ? kOr : kAnd, x, y)};
  Value m = Apply(ctx, kMax ? "stablehlo.maximum" : "stablehlo.minimum", x, y);
  if (!IsFloat(t.elem)) return {m};
  Value any_nan = ctx.b.Op1("stablehlo.or", {IsNan(ctx, x), IsNan(ctx, y)}, {ElemType::Pred, t.dims});
  return {ctx.b.Select(any_nan, Add(ctx, x, y), m)};
}

// fmax/fmin ignore NaN when the other operand is a number.
template <bool kMax>
std::vector<Value> LowerFMinMax(Ctx& ctx, const Args& a) {
  TensorType t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  Value m = Apply(ctx, kMax ? "stablehlo.maximum" : "stablehlo.minimum", x, y);
  if (!IsFloat(t.elem)) return {m};
  m = ctx.b.Select(IsNan(ctx, x), y, m);
  return {ctx.b.Select(IsNan(ctx, y), x, m)};
}

// pow(x, e) for a special exponent, computed as the CPU computes it, so results keep its bits
// and the device multiplies where a general power calls powf per element:
//   every dtype: e=0 -> 1 (NaN bases too), e=1 -> x;  e=2 -> x*x, e=3 -> x*x*x;
//   floating and complex: e=-2 -> 1/(x*x), e=-1 -> 1/x, e=0.5 -> sqrt(x), e=-0.5 -> rsqrt(x).
// bf16 rounds each product to bf16, as the CPU's bf16 kernel does (x*x*x rounds twice). Half
// runs powf on the CPU: products in f32 rounded once agree with it (x*x exactly), but sqrt
// differs from powf at -0 and -inf, so half keeps the power for e=+-0.5. Integers reach here
// only with e in 0..3 (a negative integer exponent is an error, a fractional one promotes).
Value PowSpecial(Ctx& ctx, Value base, double e) {
  const TensorType& out = ctx.out();
  if (e == 0) return Splat(ctx, 1, out);
  TensorType t = OpmathType(out);
  Value x = CastTo(ctx, base, t);
  if (e == 1) return x;
  bool floating = IsFloat(out.elem) || IsComplex(out.elem);
  if ((!floating && e != 2 && e != 3) || (out.elem == ElemType::F16 && (e == 0.5 || e == -0.5)))
    return Apply(ctx, kPow, x, Splat(ctx, e, t));
  auto rounded = [&](Value v) {  // the CPU's bf16 arithmetic rounds every product
    return out.elem == ElemType::BF16 ? ConvertTo(ctx, ConvertTo(ctx, v, out.elem), t.elem) : v;
  };
  if (e == 2) return Mul(ctx, x, x);
  if (e == 3) return Mul(ctx, rounded(Mul(ctx, x, x)), x);
  if (e == -2) return Div(ctx, Splat(ctx, 1, t), rounded(Mul(ctx, x, x)));
  if (e == -1) return Div(ctx, Splat(ctx, 1, t), x);
  return Apply(ctx, e == 0.5 ? kSqrt : kRsqrt, x);  // as aten::sqrt and aten::rsqrt lower
}

// pow(x, y); y is a static Double when it is a special exponent (PowSpecial). Half and bf16
// operands round to their type before the f32 power: the CPU converts a Scalar exponent (or a
// Scalar base) to the tensor's dtype.
std::vector<Value> LowerPow(Ctx& ctx, const Args& a) {
  if (a.raw(1).kind == Arg::Kind::Double) return OpmathResult(ctx, PowSpecial(ctx, a.tensor(0), a.raw(1).d));
  TensorType t = OpmathType(ctx.out());
  auto operand = [&](size_t i) { return CastTo(ctx, CastTo(ctx, a.tensor(i), ctx.out()), t); };
  return OpmathResult(ctx, Apply(ctx, kPow, operand(0), operand(1)));
}

// ---- comparisons: computed in the promoted input type, output bool ----
template <Cmp C>
std::vector<Value> LowerCompare(Ctx& ctx, const Args& a) {
  TensorType t{ctx.common, ctx.out().dims};
  return {ctx.b.Compare(C, CastTo(ctx, a.tensor(0), t), CastTo(ctx, a.tensor(1), t))};
}

// ---- logical: operands as bool ----
template <const char* Op>
std::vector<Value> LowerLogical(Ctx& ctx, const Args& a) {
  TensorType t{ElemType::Pred, ctx.out().dims};
  Value x = ctx.b.Compare(Cmp::NE, a.tensor(0), ctx.b.Constant(0, a.tensor(0).type));
  Value y = ctx.b.Compare(Cmp::NE, a.tensor(1), ctx.b.Constant(0, a.tensor(1).type));
  return OpmathResult(ctx, Apply(ctx, Op, BroadcastTo(ctx, x, t.dims), BroadcastTo(ctx, y, t.dims)));
}

std::vector<Value> LowerLogicalNot(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  Value is_zero = ctx.b.Compare(Cmp::EQ, x, ctx.b.Constant(0, x.type));
  return OpmathResult(ctx, is_zero);
}

template <const char* Op>
std::vector<Value> LowerBitwise(Ctx& ctx, const Args& a) {
  TensorType t = ctx.out();
  return {Apply(ctx, Op, CastTo(ctx, a.tensor(0), t), CastTo(ctx, a.tensor(1), t))};
}

std::vector<Value> LowerBitwiseNot(Ctx& ctx, const Args& a) { return {Apply(ctx, kNot, CastTo(ctx, a.tensor(0), ctx.out()))}; }

// where(cond, a, b)
std::vector<Value> LowerWhere(Ctx& ctx, const Args& a) {
  TensorType t = ctx.out();
  Value cond = BroadcastTo(ctx, ConvertTo(ctx, a.tensor(0), ElemType::Pred), t.dims);
  return {ctx.b.Select(cond, CastTo(ctx, a.tensor(1), t), CastTo(ctx, a.tensor(2), t))};
}

// clamp(x, min?, max?): max then min, so NaN in x propagates and min > max gives max.
Value ClampWith(Ctx& ctx, Value x, Value bound, bool lower) {
  Value m = Apply(ctx, lower ? "stablehlo.maximum" : "stablehlo.minimum", x, bound);
  if (!IsFloat(x.type.elem)) return m;
  Value any_nan = ctx.b.Op1("stablehlo.or", {IsNan(ctx, x), IsNan(ctx, bound)}, {ElemType::Pred, x.type.dims});
  return ctx.b.Select(any_nan, Add(ctx, x, bound), m);
}

std::vector<Value> LowerClampRule(Ctx& ctx, const Args& a) {
  TensorType t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t);
  if (!a.is_none(1)) x = ClampWith(ctx, x, CastTo(ctx, a.tensor(1), t), true);
  if (!a.is_none(2)) x = ClampWith(ctx, x, CastTo(ctx, a.tensor(2), t), false);
  return {x};
}

std::vector<Value> LowerClampMin(Ctx& ctx, const Args& a) {
  return {ClampWith(ctx, CastTo(ctx, a.tensor(0), ctx.out()), CastTo(ctx, a.tensor(1), ctx.out()), true)};
}
std::vector<Value> LowerClampMax(Ctx& ctx, const Args& a) {
  return {ClampWith(ctx, CastTo(ctx, a.tensor(0), ctx.out()), CastTo(ctx, a.tensor(1), ctx.out()), false)};
}

// fill(self, value) / zero(self): the value broadcast to self's shape.
std::vector<Value> LowerFill(Ctx& ctx, const Args& a) { return {CastTo(ctx, a.tensor(1), ctx.out())}; }
std::vector<Value> LowerZero(Ctx& ctx, const Args&) { return {Splat(ctx, 0, ctx.out())}; }

// The device-to-device copy: cast and broadcast into the destination.
std::vector<Value> LowerCopyInto(Ctx& ctx, const Args& a) { return {CastTo(ctx, a.tensor(0), ctx.out())}; }

// lerp(a, b, w) = |w| < 0.5 ? a + w * (b - a) : b - (b - a) * (1 - w), PyTorch's two-sided
// form, exact at both ends (lerp(a, b, 1) == b).
std::vector<Value> LowerLerp(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t), w = CastTo(ctx, a.tensor(2), t);
  Value diff = Sub(ctx, y, x);
  Value small = ctx.b.Compare(Cmp::LT, Apply(ctx, kAbs, w), Const(ctx, 0.5, w));
  Value from_a = Add(ctx, x, Mul(ctx, w, diff));
  Value from_b = Sub(ctx, y, Mul(ctx, diff, Sub(ctx, Const(ctx, 1, w), w)));
  return OpmathResult(ctx, ctx.b.Select(small, from_a, from_b));
}

// addcmul(s, t1, t2, value) = s + value * t1 * t2; addcdiv likewise with t1 / t2.
template <bool kDivide>
std::vector<Value> LowerAddcOp(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value s = CastTo(ctx, a.tensor(0), t), x = CastTo(ctx, a.tensor(1), t), y = CastTo(ctx, a.tensor(2), t);
  Value v = a.is_none(3) ? Const(ctx, 1, s) : CastTo(ctx, a.tensor(3), t);
  Value term = kDivide ? Div(ctx, x, y) : Mul(ctx, x, y);
  return OpmathResult(ctx, Add(ctx, s, Mul(ctx, v, term)));
}

std::vector<Value> LowerIsNan(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (!IsFloat(x.type.elem)) return {Splat(ctx, 0, ctx.out())};
  return {IsNan(ctx, x)};
}

std::vector<Value> LowerLeakyRelu(Ctx& ctx, const Args& a) {
  TensorType t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t), slope = CastTo(ctx, a.tensor(1), t);
  return {ctx.b.Select(ctx.b.Compare(Cmp::GT, x, Const(ctx, 0, x)), x, Mul(ctx, x, slope))};
}

// leaky_relu_backward(g, x, slope, self_is_result) = x > 0 ? g : g * slope
std::vector<Value> LowerLeakyReluBackward(Ctx& ctx, const Args& a) {
  TensorType t = ctx.out();
  Value g = CastTo(ctx, a.tensor(0), t), x = CastTo(ctx, a.tensor(1), t), slope = CastTo(ctx, a.tensor(2), t);
  return {ctx.b.Select(ctx.b.Compare(Cmp::GT, x, Const(ctx, 0, x)), g, Mul(ctx, g, slope))};
}

// hardtanh(x, lo, hi) = clamp(x, lo, hi)
std::vector<Value> LowerHardtanh(Ctx& ctx, const Args& a) { return LowerClampRule(ctx, a); }

// hardtanh_backward(g, x, lo, hi) = lo < x < hi ? g : 0 (0 at a NaN x, as on the CPU)
std::vector<Value> LowerHardtanhBackward(Ctx& ctx, const Args& a) {
  TensorType t = ctx.out();
  Value g = CastTo(ctx, a.tensor(0), t), x = CastTo(ctx, a.tensor(1), t);
  Value lo = CastTo(ctx, a.tensor(2), t), hi = CastTo(ctx, a.tensor(3), t);
  Value inside = And(ctx, ctx.b.Compare(Cmp::GT, x, lo), ctx.b.Compare(Cmp::LT, x, hi));
  return {ctx.b.Select(inside, g, Const(ctx, 0, g))};
}


}  // namespace

bool IsSpecialExponent(double e) {
  return e == 0 || e == 1 || e == 2 || e == 3 || e == -2 || e == 0.5 || e == -0.5 || e == -1;
}

TPU_LOWERING("aten::abs", LowerUnaryKeepType<kAbs>);
TPU_LOWERING("aten::acos", LowerUnary<kAcos>);
TPU_LOWERING("aten::acosh", LowerUnary<kAcosh>);
TPU_LOWERING("aten::add.Scalar", LowerAddSub<kAdd>);
TPU_LOWERING("aten::add.Tensor", LowerAddSub<kAdd>);
TPU_LOWERING("aten::addcdiv", LowerAddcOp<true>);
TPU_LOWERING("aten::addcmul", LowerAddcOp<false>);
TPU_LOWERING("aten::asin", LowerUnary<kAsin>);
TPU_LOWERING("aten::asinh", LowerUnary<kAsinh>);
TPU_LOWERING("aten::atan", LowerUnary<kAtan>);
TPU_LOWERING("aten::atan2", LowerBinary<kAtan2>);
TPU_LOWERING("aten::atanh", LowerUnary<kAtanh>);
TPU_LOWERING("aten::bitwise_and.Tensor", LowerBitwise<kAnd>);
TPU_LOWERING("aten::bitwise_not", LowerBitwiseNot);
TPU_LOWERING("aten::bitwise_or.Tensor", LowerBitwise<kOr>);
TPU_LOWERING("aten::bitwise_xor.Tensor", LowerBitwise<kXor>);
TPU_LOWERING("aten::ceil", LowerRounding<kCeil>);
TPU_LOWERING("aten::clamp", LowerClampRule);
TPU_LOWERING("aten::clamp.Tensor", LowerClampRule);
TPU_LOWERING("aten::clamp_max", LowerClampMax);
TPU_LOWERING("aten::clamp_max.Tensor", LowerClampMax);
TPU_LOWERING("aten::clamp_min", LowerClampMin);
TPU_LOWERING("aten::clamp_min.Tensor", LowerClampMin);
TPU_LOWERING("aten::cos", LowerUnary<kCos>);
TPU_LOWERING("aten::cosh", LowerUnary<kCosh>);
TPU_LOWERING("aten::div.Scalar", LowerDiv);
TPU_LOWERING("aten::div.Scalar_mode", LowerDiv);
TPU_LOWERING("aten::div.Tensor", LowerDiv);
TPU_LOWERING("aten::div.Tensor_mode", LowerDiv);
TPU_LOWERING("aten::eq.Scalar", LowerCompare<Cmp::EQ>);
TPU_LOWERING("aten::eq.Tensor", LowerCompare<Cmp::EQ>);
TPU_LOWERING("aten::erf", LowerUnary<kErf>);
TPU_LOWERING("aten::erfc", LowerUnary<kErfc>);
TPU_LOWERING("aten::erfinv", LowerErfInv);
TPU_LOWERING("aten::exp", LowerUnary<kExp>);
TPU_LOWERING("aten::expm1", LowerUnary<kExpm1>);
TPU_LOWERING("aten::fill.Scalar", LowerFill);
TPU_LOWERING("aten::fill.Tensor", LowerFill);
TPU_LOWERING("aten::floor", LowerRounding<kFloor>);
TPU_LOWERING("aten::floor_divide", LowerFloorDivide);
TPU_LOWERING("aten::floor_divide.Scalar", LowerFloorDivide);
TPU_LOWERING("aten::floor_divide_.Tensor", LowerFloorDivide);  // the twin of floor_divide (no overload)
TPU_LOWERING("aten::fmax", LowerFMinMax<true>);
TPU_LOWERING("aten::fmin", LowerFMinMax<false>);
TPU_LOWERING("aten::fmod.Scalar", LowerFmod);
TPU_LOWERING("aten::fmod.Tensor", LowerFmod);
TPU_LOWERING("aten::ge.Scalar", LowerCompare<Cmp::GE>);
TPU_LOWERING("aten::ge.Tensor", LowerCompare<Cmp::GE>);
TPU_LOWERING("aten::gelu", LowerGelu);
TPU_LOWERING("aten::gelu_backward", LowerGeluBackward);
TPU_LOWERING("aten::gt.Scalar", LowerCompare<Cmp::GT>);
TPU_LOWERING("aten::gt.Tensor", LowerCompare<Cmp::GT>);
TPU_LOWERING("aten::hardtanh", LowerHardtanh);
TPU_LOWERING("aten::hardtanh_backward", LowerHardtanhBackward);
TPU_LOWERING("aten::isnan", LowerIsNan);
TPU_LOWERING("aten::le.Scalar", LowerCompare<Cmp::LE>);
TPU_LOWERING("aten::le.Tensor", LowerCompare<Cmp::LE>);
TPU_LOWERING("aten::leaky_relu", LowerLeakyRelu);
TPU_LOWERING("aten::leaky_relu_backward", LowerLeakyReluBackward);
TPU_LOWERING("aten::lerp.Scalar", LowerLerp);
TPU_LOWERING("aten::lerp.Tensor", LowerLerp);
TPU_LOWERING("aten::lgamma", LowerUnary<kLgamma>);
TPU_LOWERING("aten::log", LowerUnary<kLog>);
TPU_LOWERING("aten::log1p", LowerUnary<kLog1p>);
TPU_LOWERING("aten::logical_and", LowerLogical<kAnd>);
TPU_LOWERING("aten::logical_not", LowerLogicalNot);
TPU_LOWERING("aten::logical_or", LowerLogical<kOr>);
TPU_LOWERING("aten::logical_xor", LowerLogical<kXor>);
TPU_LOWERING("aten::lt.Scalar", LowerCompare<Cmp::LT>);
TPU_LOWERING("aten::lt.Tensor", LowerCompare<Cmp::LT>);
TPU_LOWERING("aten::maximum", LowerMinMax<true>);
TPU_LOWERING("aten::minimum", LowerMinMax<false>);
TPU_LOWERING("aten::mul.Scalar", LowerMul);
TPU_LOWERING("aten::mul.Tensor", LowerMul);
TPU_LOWERING("aten::ne.Scalar", LowerCompare<Cmp::NE>);
TPU_LOWERING("aten::ne.Tensor", LowerCompare<Cmp::NE>);
TPU_LOWERING("aten::neg", LowerUnaryKeepType<kNeg>);
TPU_LOWERING("aten::pow.Scalar", LowerPow);
TPU_LOWERING("aten::pow.Tensor_Scalar", LowerPow);
TPU_LOWERING("aten::pow.Tensor_Tensor", LowerPow);
TPU_LOWERING("aten::pow_.Scalar", LowerPow);  // pow_(self, Scalar exponent), not pow.Scalar's twin
TPU_SPECIAL_SCALAR("aten::pow.Tensor_Scalar", "exponent", IsSpecialExponent);
TPU_SPECIAL_SCALAR("aten::pow_.Scalar", "exponent", IsSpecialExponent);
TPU_LOWERING("aten::reciprocal", LowerReciprocal);
TPU_LOWERING("aten::relu", LowerRelu);
TPU_LOWERING("aten::remainder.Scalar", LowerRemainder);
TPU_LOWERING("aten::remainder.Scalar_Tensor", LowerRemainder);
TPU_LOWERING("aten::remainder.Tensor", LowerRemainder);
TPU_LOWERING("aten::round", LowerRounding<kRound>);
TPU_LOWERING("aten::rsqrt", LowerUnary<kRsqrt>);
TPU_LOWERING("aten::rsub.Scalar", LowerRsub);
TPU_LOWERING("aten::rsub.Tensor", LowerRsub);
TPU_LOWERING("aten::sgn", LowerSign);  // sgn is sign on real types
TPU_LOWERING("aten::sigmoid", LowerUnary<kSigmoid>);
TPU_LOWERING("aten::sigmoid_backward", LowerSigmoidBackward);
TPU_LOWERING("aten::sign", LowerSign);
TPU_LOWERING("aten::silu", LowerSilu);
TPU_LOWERING("aten::silu_backward", LowerSiluBackward);
TPU_LOWERING("aten::sin", LowerUnary<kSin>);
TPU_LOWERING("aten::sinh", LowerUnary<kSinh>);
TPU_LOWERING("aten::special_i1e", LowerUnary<kI1e>);
TPU_LOWERING("aten::sqrt", LowerUnary<kSqrt>);
TPU_LOWERING("aten::sub.Scalar", LowerAddSub<kSub>);
TPU_LOWERING("aten::sub.Tensor", LowerAddSub<kSub>);
TPU_LOWERING("aten::tan", LowerUnary<kTan>);
TPU_LOWERING("aten::tanh", LowerUnary<kTanh>);
TPU_LOWERING("aten::tanh_backward", LowerTanhBackward);
TPU_LOWERING("aten::threshold", LowerThreshold);
TPU_LOWERING("aten::threshold_backward", LowerThresholdBackward);
TPU_LOWERING("aten::trunc", LowerTrunc);
TPU_LOWERING("aten::where.self", LowerWhere);
TPU_LOWERING("aten::zero", LowerZero);
TPU_LOWERING("torch_tpu::_copy_into", LowerCopyInto);

}  // namespace tpu::lowering
