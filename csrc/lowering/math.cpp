// More elementwise math: PyTorch's formulas for the ops no single StableHLO op covers (exp2,
// logaddexp, hypot, xlogy, logit, ...), float bit manipulation (copysign, signbit, nextafter,
// frexp), integer math (shifts, gcd, lcm), complex construction. Half types compute in f32.
#include <cmath>
#include <limits>

#include "elementwise.h"
#include "helpers.h"

namespace tpu::lowering {
namespace {

using namespace ops;

constexpr double kLn2 = 0.69314718055994530942, kLn10 = 2.30258509299404568402;

// exp2(x) = 2^x through power (libm-accurate, unlike exp(x ln 2) for large x).
std::vector<Value> LowerExp2(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  return OpmathResult(ctx, Apply(ctx, kPow, Const(ctx, 2, x), x));
}

// log2 / log10 = log(x) / ln(base)
template <int kBase>
std::vector<Value> LowerLogBase(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  return OpmathResult(ctx, Div(ctx, Apply(ctx, kLog, x), Const(ctx, kBase == 2 ? kLn2 : kLn10, x)));
}

// logaddexp(a, b) = log(e^a + e^b); logaddexp2(a, b) = log2(2^a + 2^b).
std::vector<Value> LowerLogAddExp(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  return OpmathResult(ctx, LogAddExp(ctx, CastTo(ctx, a.tensor(0), t), CastTo(ctx, a.tensor(1), t)));
}
std::vector<Value> LowerLogAddExp2(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value ln2 = ctx.b.Constant(kLn2, t);
  Value x = Mul(ctx, CastTo(ctx, a.tensor(0), t), ln2), y = Mul(ctx, CastTo(ctx, a.tensor(1), t), ln2);
  return OpmathResult(ctx, Div(ctx, LogAddExp(ctx, x, y), ln2));
}

// frac(x) = x - trunc(x)
std::vector<Value> LowerFrac(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  Value trunc = Mul(ctx, Apply(ctx, kSign, x), Apply(ctx, kFloor, Apply(ctx, kAbs, x)));
  return OpmathResult(ctx, Sub(ctx, x, trunc));
}

// The unsigned integer type of a float's bits and its sign bit.
ElemType BitsType(ElemType f) {
  switch (f) {
    case ElemType::F16:
    case ElemType::BF16: return ElemType::U16;
    case ElemType::F32: return ElemType::U32;
    default: return ElemType::U64;
  }
}
Value SignBitMask(Ctx& ctx, const TensorType& bits) {
  int width = static_cast<int>(shlo::ByteSize(bits.elem)) * 8;
  return ctx.b.BitcastConvert(ctx.b.ConstantInt(std::numeric_limits<int64_t>::min() >> (64 - width), {IsSigned(bits.elem) ? bits.elem : bits.elem == ElemType::U16 ? ElemType::S16 : bits.elem == ElemType::U32 ? ElemType::S32 : ElemType::S64, bits.dims}), bits);
}
Value Bits(Ctx& ctx, Value x) { return ctx.b.BitcastConvert(x, {BitsType(x.type.elem), x.type.dims}); }
Value SignBitSet(Ctx& ctx, Value x) {
  Value bits = Bits(ctx, x);
  Value s = ctx.b.Binary("and", bits, SignBitMask(ctx, bits.type));
  return ctx.b.Compare(Cmp::NE, s, ctx.b.ConstantInt(0, s.type));
}

// copysign(a, b) = |a| with the sign bit of b (so -0.0 and NaN signs count).
std::vector<Value> LowerCopysign(Ctx& ctx, const Args& a) {
  TensorType t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  Value ax = Bits(ctx, Apply(ctx, kAbs, x));
  Value sign = ctx.b.Binary("and", Bits(ctx, y), SignBitMask(ctx, ax.type));
  return {ctx.b.BitcastConvert(ctx.b.Binary("or", ax, sign), t)};
}

// signbit(x): the sign bit of floats (true for -0.0), x < 0 for integers.
std::vector<Value> LowerSignbit(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (IsFloat(x.type.elem)) return {SignBitSet(ctx, x)};
  if (!IsSigned(x.type.elem)) return {Splat(ctx, 0, ctx.out())};
  return {ctx.b.Compare(Cmp::LT, x, ctx.b.Constant(0, x.type))};
}

// hypot(a, b) = sqrt(a^2 + b^2) scaled by max(|a|, |b|) so that it neither overflows nor
// underflows; an infinite operand gives inf even next to NaN.
std::vector<Value> LowerHypot(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value x = Apply(ctx, kAbs, CastTo(ctx, a.tensor(0), t)), y = Apply(ctx, kAbs, CastTo(ctx, a.tensor(1), t));
  Value x_big = ctx.b.Compare(Cmp::GE, x, y);
  Value mx = ctx.b.Select(x_big, x, y), mn = ctx.b.Select(x_big, y, x);
  Value zero = Const(ctx, 0, x), one = Const(ctx, 1, x);
  Value ratio = Div(ctx, mn, ctx.b.Select(ctx.b.Compare(Cmp::EQ, mx, zero), one, mx));
  Value r = Mul(ctx, mx, Apply(ctx, kSqrt, Add(ctx, one, Mul(ctx, ratio, ratio))));
  r = ctx.b.Select(Or(ctx, IsNan(ctx, x), IsNan(ctx, y)), Add(ctx, x, y), r);
  Value inf = Const(ctx, INFINITY, x);
  r = ctx.b.Select(Or(ctx, ctx.b.Compare(Cmp::EQ, x, inf), ctx.b.Compare(Cmp::EQ, y, inf)), inf, r);
  return OpmathResult(ctx, r);
}

// xlogy(x, y) = x == 0 ? 0 : x * log(y); xlog1py with log1p. NaN in y propagates.
template <const char* kLogOp>
std::vector<Value> LowerXLogY(Ctx& ctx, const Args& a) {
  TensorType t = OpmathType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  Value r = Mul(ctx, x, Apply(ctx, kLogOp, y));
  r = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), Const(ctx, 0, x), r);
  return OpmathResult(ctx, ctx.b.Select(IsNan(ctx, y), y, r));
}

// entr(x) = -x log x for x > 0, 0 at 0, -inf below.
std::vector<Value> LowerEntr(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  Value r = Mul(ctx, Apply(ctx, kNeg, x), Apply(ctx, kLog, x));
  r = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), Const(ctx, 0, x), r);
  r = ctx.b.Select(ctx.b.Compare(Cmp::LT, x, Const(ctx, 0, x)), Const(ctx, -INFINITY, x), r);
  return OpmathResult(ctx, r);
}

double LargestFinite(ElemType t) {
  switch (t) {
    case ElemType::F16: return 65504.0;
    case ElemType::BF16: return 3.38953138925153547590e+38;
    case ElemType::F32: return 3.40282346638528859812e+38;
    default: return 1.79769313486231570815e+308;
  }
}

// nan_to_num(x, nan, posinf, neginf): defaults 0 and the dtype's largest / lowest finite value.
std::vector<Value> LowerNanToNum(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t);
  if (!IsFloat(t.elem)) return {x};
  double big = LargestFinite(t.elem);
  double nan = a.is_none(1) ? 0 : a.double_(1), pos = a.is_none(2) ? big : a.double_(2),
         neg = a.is_none(3) ? -big : a.double_(3);
  x = ctx.b.Select(IsNan(ctx, x), Const(ctx, nan, x), x);
  x = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, INFINITY, x)), Const(ctx, pos, x), x);
  return {ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, -INFINITY, x)), Const(ctx, neg, x), x)};
}

// isposinf / isneginf
template <bool kPositive>
std::vector<Value> LowerIsInf(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (!IsFloat(x.type.elem)) return {Splat(ctx, 0, ctx.out())};
  return {ctx.b.Compare(Cmp::EQ, x, Const(ctx, kPositive ? INFINITY : -INFINITY, x))};
}

// heaviside(x, v) = x == 0 ? v : (x > 0)
std::vector<Value> LowerHeaviside(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t), v = CastTo(ctx, a.tensor(1), t);
  Value step = ConvertTo(ctx, ctx.b.Compare(Cmp::GT, x, ctx.b.Constant(0, x.type)), t.elem);
  return {ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, ctx.b.Constant(0, x.type)), v, step)};
}

// round(x, decimals): half to even at 10^-decimals, as PyTorch scales (divides for negative decimals).
std::vector<Value> LowerRoundDecimals(Ctx& ctx, const Args& a) {
  if (!IsFloat(ctx.out().elem)) return {CastTo(ctx, a.tensor(0), ctx.out())};
  Value x = OpmathOperand(ctx, a, 0);
  int64_t d = a.int_(1);
  Value ten = Const(ctx, std::pow(10.0, static_cast<double>(d < 0 ? -d : d)), x);
  if (d < 0) return OpmathResult(ctx, Mul(ctx, Apply(ctx, kRound, Div(ctx, x, ten)), ten));
  return OpmathResult(ctx, Div(ctx, Apply(ctx, kRound, Mul(ctx, x, ten)), ten));
}

// sinc(x) = sin(pi x) / (pi x), 1 at 0.
std::vector<Value> LowerSinc(Ctx& ctx, const Args& a) {
  Value x = OpmathOperand(ctx, a, 0);
  Value px = Mul(ctx, Const(ctx, M_PI, x), x);
  Value r = Div(ctx, Apply(ctx, kSin, px), px);
  return OpmathResult(ctx, ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), Const(ctx, 1, x), r));
}

// logit(x, eps?) = log(z / (1 - z)), z = x clamped to [eps, 1 - eps] when eps is given.
// Computed in the result type: PyTorch's CPU kernel rounds every step for half types.
std::vector<Value> LowerLogit(Ctx& ctx, const Args& a) {
  Value x = CastTo(ctx, a.tensor(0), ctx.out());
  if (!a.is_none(1)) {
    double eps = a.double_(1);
    Value lo = Const(ctx, eps, x), hi = Const(ctx, 1 - eps, x);
    x = ctx.b.Select(ctx.b.Compare(Cmp::LT, x, lo), lo, ctx.b.Select(ctx.b.Compare(Cmp::GT, x, hi), hi, x));
  }
  return OpmathResult(ctx, Apply(ctx, kLog, Div(ctx, x, Sub(ctx, Const(ctx, 1, x), x))));
}

// logit_backward(grad, x, eps?) = grad / (x (1 - x)); 0 outside [eps, 1 - eps], NaN outside
// [0, 1] without eps.
std::vector<Value> LowerLogitBackward(Ctx& ctx, const Args& a) {
  Value g = OpmathOperand(ctx, a, 0), x = OpmathOperand(ctx, a, 1);
  Value r = Div(ctx, g, Mul(ctx, x, Sub(ctx, Const(ctx, 1, x), x)));
  bool has_eps = !a.is_none(2) && a.double_(2) >= 0;
  double lo = has_eps ? a.double_(2) : 0, hi = has_eps ? 1 - a.double_(2) : 1;
  Value outside = Or(ctx, ctx.b.Compare(Cmp::LT, x, Const(ctx, lo, x)), ctx.b.Compare(Cmp::GT, x, Const(ctx, hi, x)));
  return OpmathResult(ctx, ctx.b.Select(outside, Const(ctx, has_eps ? 0 : NAN, x), r));
}

// nextafter(a, b): the next representable value after a towards b, stepping the bits.
std::vector<Value> LowerNextafter(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  Value bits = Bits(ctx, x);
  Value one = ctx.b.ConstantInt(1, bits.type);
  Value zero = Const(ctx, 0, x);
  Value up = ctx.b.Compare(Cmp::EQ, ctx.b.Compare(Cmp::LT, x, y), ctx.b.Compare(Cmp::GT, x, zero));
  Value stepped = ctx.b.Select(up, ctx.b.Binary("add", bits, one), ctx.b.Binary("subtract", bits, one));
  Value tiny = ctx.b.Binary("or", ctx.b.Binary("and", Bits(ctx, y), SignBitMask(ctx, bits.type)), one);
  Value r_bits = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, zero), tiny, stepped);
  Value r = ctx.b.BitcastConvert(r_bits, t);
  r = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, y), y, r);
  return {ctx.b.Select(Or(ctx, IsNan(ctx, x), IsNan(ctx, y)), Add(ctx, x, y), r)};
}

// angle(x) for real x: pi below zero, 0 otherwise, NaN kept.
std::vector<Value> LowerAngle(Ctx& ctx, const Args& a) {
  if (IsComplex(a.tensor(0).type.elem)) {  // atan2(imag, real)
    Value z = a.tensor(0);
    TensorType part{z.type.elem == ElemType::C64 ? ElemType::F32 : ElemType::F64, z.type.dims};
    Value re = ctx.b.Op1("stablehlo.real", {z}, part), im = ctx.b.Op1("stablehlo.imag", {z}, part);
    return OpmathResult(ctx, Apply(ctx, kAtan2, im, re));
  }
  Value x = OpmathOperand(ctx, a, 0);
  Value r = ctx.b.Select(ctx.b.Compare(Cmp::LT, x, Const(ctx, 0, x)), Const(ctx, M_PI, x), Const(ctx, 0, x));
  return OpmathResult(ctx, ctx.b.Select(IsNan(ctx, x), x, r));
}

// frexp(x) = (mantissa in [0.5, 1), exponent) with x = mantissa * 2^exponent, from the bits;
// zero, inf and NaN give (x, 0); subnormals are scaled into the normal range first.
std::vector<Value> LowerFrexp(Ctx& ctx, const Args& a) {
  Value x = CastTo(ctx, a.tensor(0), {ctx.out(0).elem, ctx.out(0).dims});
  ElemType e = x.type.elem;
  int mant = e == ElemType::F16 ? 10 : e == ElemType::BF16 ? 7 : e == ElemType::F32 ? 23 : 52;
  int exp_bits = e == ElemType::F16 ? 5 : e == ElemType::F64 ? 11 : 8;
  int64_t bias = (int64_t{1} << (exp_bits - 1)) - 2;  // exponent field of a value in [0.5, 1)
  double smallest_normal = std::ldexp(1.0, static_cast<int>(-bias));
  Value ax = Apply(ctx, kAbs, x);
  Value sub = ctx.b.Compare(Cmp::LT, ax, Const(ctx, smallest_normal, x));
  Value scaled = ctx.b.Select(sub, Mul(ctx, x, Const(ctx, std::ldexp(1.0, mant + 1), x)), x);
  Value bits = Bits(ctx, scaled);
  ElemType be = bits.type.elem;
  TensorType bt = bits.type;
  Value field = ctx.b.Binary("and", ctx.b.Binary("shift_right_logical", bits, ctx.b.ConstantInt(mant, bt)),
                             ctx.b.ConstantInt((int64_t{1} << exp_bits) - 1, bt));
  Value expo = Sub(ctx, ctx.b.Convert(field, ElemType::S32), ctx.b.ConstantInt(bias, {ElemType::S32, x.type.dims}));
  expo = ctx.b.Select(sub, Sub(ctx, expo, ctx.b.ConstantInt(mant + 1, expo.type)), expo);
  int64_t keep = (int64_t{1} << mant) - 1;
  Value sign = ctx.b.Binary("and", bits, SignBitMask(ctx, bt));
  Value m_bits = ctx.b.Binary("or", ctx.b.Binary("or", ctx.b.Binary("and", bits, ctx.b.ConstantInt(keep, bt)), sign),
                              ctx.b.ConstantInt(bias << mant, bt));
  (void)be;
  Value m = ctx.b.BitcastConvert(m_bits, x.type);
  Value special = Or(ctx, Or(ctx, ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), IsNan(ctx, x)),
                     ctx.b.Compare(Cmp::EQ, ax, Const(ctx, INFINITY, x)));
  m = ctx.b.Select(special, x, m);
  expo = ctx.b.Select(special, ctx.b.ConstantInt(0, expo.type), expo);
  return {m, ConvertTo(ctx, expo, ctx.out(1).elem)};
}

// isin(elements, test_elements, assume_unique, invert): whether each element equals any test
// element (compared in the promoted type).
std::vector<Value> LowerIsin(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = ConvertTo(ctx, a.tensor(0), ctx.common), test = ConvertTo(ctx, a.tensor(1), ctx.common);
  bool invert = a.bool_or(3, false);
  int64_t m = test.type.numel();
  if (m == 0) return {ctx.b.Constant(invert ? 1 : 0, t)};
  Value flat = ctx.b.Reshape(test, {m});
  std::vector<int64_t> grid = t.dims;
  grid.push_back(m);
  std::vector<int64_t> map(t.rank());
  for (int64_t i = 0; i < t.rank(); ++i) map[i] = i;
  Value eq = ctx.b.Compare(Cmp::EQ, ctx.b.BroadcastInDim(ctx.b.Reshape(x, t.dims), grid, map),
                           ctx.b.BroadcastInDim(flat, grid, {t.rank()}));
  Value any = ctx.b.Reduce(eq, ctx.b.Constant(0, {ElemType::Pred, {}}), {t.rank()}, "or");
  return {invert ? Not(ctx, any) : any};
}

// bitwise_left_shift / bitwise_right_shift: shifts of the bit width or more (or negative) give
// 0, or the sign fill for an arithmetic right shift, which is StableHLO's rule too.
template <bool kLeft>
std::vector<Value> LowerShift(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  const char* op = kLeft ? "shift_left" : IsUnsigned(t.elem) ? "shift_right_logical" : "shift_right_arithmetic";
  return {ctx.b.Binary(op, x, y)};
}

// gcd(a, b) by Euclid's algorithm (a loop until every remainder is 0), non-negative.
Value Gcd(Ctx& ctx, Value x, Value y) {
  auto out = While(
      ctx, {Apply(ctx, kAbs, x), Apply(ctx, kAbs, y)},
      [&](const std::vector<Value>& v) { return AnyTrue(ctx, ctx.b.Compare(Cmp::NE, v[1], Const(ctx, 0, v[1]))); },
      [&](const std::vector<Value>& v) {
        Value zero = ctx.b.Compare(Cmp::EQ, v[1], Const(ctx, 0, v[1]));
        Value safe = ctx.b.Select(zero, Const(ctx, 1, v[1]), v[1]);
        Value r = ctx.b.Binary("remainder", v[0], safe);
        return std::vector<Value>{ctx.b.Select(zero, v[0], v[1]), ctx.b.Select(zero, v[1], r)};
      });
  return out[0];
}

std::vector<Value> LowerGcd(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  return {Gcd(ctx, CastTo(ctx, a.tensor(0), t), CastTo(ctx, a.tensor(1), t))};
}

// lcm(a, b) = |a / gcd(a, b) * b|, 0 when gcd is 0.
std::vector<Value> LowerLcm(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  Value g = Gcd(ctx, x, y);
  Value zero = ctx.b.Compare(Cmp::EQ, g, Const(ctx, 0, g));
  Value r = Apply(ctx, kAbs, Mul(ctx, Div(ctx, x, ctx.b.Select(zero, Const(ctx, 1, g), g)), y));
  return {ctx.b.Select(zero, Const(ctx, 0, g), r)};
}

// complex(real, imag) and polar(abs, angle) = abs * (cos angle + i sin angle).
std::vector<Value> LowerComplex(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  ElemType part = t.elem == ElemType::C64 ? ElemType::F32 : ElemType::F64;
  TensorType pt{part, t.dims};
  return {ctx.b.Op1("stablehlo.complex", {CastTo(ctx, a.tensor(0), pt), CastTo(ctx, a.tensor(1), pt)}, t)};
}
std::vector<Value> LowerPolar(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  ElemType part = t.elem == ElemType::C64 ? ElemType::F32 : ElemType::F64;
  TensorType pt{part, t.dims};
  Value r = CastTo(ctx, a.tensor(0), pt), th = CastTo(ctx, a.tensor(1), pt);
  return {ctx.b.Op1("stablehlo.complex", {Mul(ctx, r, Apply(ctx, kCos, th)), Mul(ctx, r, Apply(ctx, kSin, th))}, t)};
}

// conj_physical(x): a copy for real x; the imaginary part negated for complex x.
std::vector<Value> LowerConjPhysical(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t);
  if (!IsComplex(t.elem)) return {x};
  TensorType pt{t.elem == ElemType::C64 ? ElemType::F32 : ElemType::F64, t.dims};
  Value re = ctx.b.Op1("stablehlo.real", {x}, pt), im = ctx.b.Op1("stablehlo.imag", {x}, pt);
  return {ctx.b.Op1("stablehlo.complex", {re, Apply(ctx, kNeg, im)}, t)};
}

// prims.fma(a, b, c) = a * b + c (the foreach optimizers' decompositions use it).
std::vector<Value> LowerFma(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  TensorType c{AccumulatorType(t.elem), t.dims};
  Value p = ctx.b.Binary("multiply", CastTo(ctx, a.tensor(0), c), CastTo(ctx, a.tensor(1), c));
  return {ConvertTo(ctx, ctx.b.Binary("add", p, CastTo(ctx, a.tensor(2), c)), t.elem)};
}

}  // namespace

TPU_LOWERING("aten::_conj_physical", LowerConjPhysical);
TPU_LOWERING("aten::angle", LowerAngle);
TPU_LOWERING("aten::bitwise_left_shift.Tensor", LowerShift<true>);
TPU_LOWERING("aten::bitwise_right_shift.Tensor", LowerShift<false>);
TPU_LOWERING("aten::complex", LowerComplex);
TPU_LOWERING("aten::conj_physical.out", LowerConjPhysical);
TPU_LOWERING("aten::copysign.Scalar", LowerCopysign);
TPU_LOWERING("aten::copysign.Tensor", LowerCopysign);
TPU_LOWERING("aten::exp2", LowerExp2);
TPU_LOWERING("aten::frac", LowerFrac);
TPU_LOWERING("aten::frexp.Tensor", LowerFrexp);
TPU_LOWERING("aten::gcd", LowerGcd);
TPU_LOWERING("aten::heaviside", LowerHeaviside);
TPU_LOWERING("aten::hypot", LowerHypot);
TPU_LOWERING("aten::isin.Scalar_Tensor", LowerIsin);
TPU_LOWERING("aten::isin.Tensor_Scalar", LowerIsin);
TPU_LOWERING("aten::isin.Tensor_Tensor", LowerIsin);
TPU_LOWERING("aten::isneginf", LowerIsInf<false>);
TPU_LOWERING("aten::isposinf", LowerIsInf<true>);
TPU_LOWERING("aten::lcm", LowerLcm);
TPU_LOWERING("aten::log10", LowerLogBase<10>);
TPU_LOWERING("aten::log2", LowerLogBase<2>);
TPU_LOWERING("aten::logaddexp", LowerLogAddExp);
TPU_LOWERING("aten::logaddexp2", LowerLogAddExp2);
TPU_LOWERING("aten::logit", LowerLogit);
TPU_LOWERING("aten::logit_backward", LowerLogitBackward);
TPU_LOWERING("aten::nan_to_num", LowerNanToNum);
TPU_LOWERING("aten::nextafter", LowerNextafter);
TPU_LOWERING("aten::polar", LowerPolar);
TPU_LOWERING("aten::round.decimals", LowerRoundDecimals);
TPU_LOWERING("aten::signbit", LowerSignbit);
TPU_LOWERING("aten::sinc", LowerSinc);
TPU_LOWERING("aten::special_entr", LowerEntr);
TPU_LOWERING("aten::special_xlog1py", LowerXLogY<kLog1p>);
TPU_LOWERING("aten::xlogy.Tensor", LowerXLogY<kLog>);
TPU_GRAPH_LOWERING("prims::fma", LowerFma);

}  // namespace tpu::lowering
