// Elementwise ops: one generic rule per family (unary, binary arithmetic, compare, logical),
// parameterised by the StableHLO op. Operands are converted to the computation type and
// broadcast to the output shape first (rule 6).
#include <cmath>
#include <limits>

#include "helpers.h"

namespace tpu::lowering {
namespace {

Value Apply(Ctx& ctx, const char* op, Value x) { return ctx.b.Op1(op, {x}, x.type); }
Value Apply(Ctx& ctx, const char* op, Value x, Value y) { return ctx.b.Op1(op, {x, y}, x.type); }

// Half types compute in f32, as PyTorch's CPU kernels do (opmath), then round once.
TensorType ComputeType(const TensorType& out) { return {AccumulatorType(out.elem), out.dims}; }

// x converted and broadcast to the computation type of output `i`.
Value Operand(Ctx& ctx, const Args& a, size_t arg, size_t out = 0) {
  return CastTo(ctx, a.tensor(arg), ComputeType(ctx.out(out)));
}

std::vector<Value> Result(Ctx& ctx, Value v, size_t out = 0) { return {ConvertTo(ctx, v, ctx.out(out).elem)}; }

// ---- unary: out = op(x) ----
template <const char* Op>
std::vector<Value> LowerUnary(Ctx& ctx, const Args& a) {
  return Result(ctx, Apply(ctx, Op, Operand(ctx, a, 0)));
}

constexpr char kAbs[] = "stablehlo.abs";
constexpr char kNeg[] = "stablehlo.negate";
constexpr char kExp[] = "stablehlo.exponential";
constexpr char kExpm1[] = "stablehlo.exponential_minus_one";
constexpr char kLog[] = "stablehlo.log";
constexpr char kLog1p[] = "stablehlo.log_plus_one";
constexpr char kSqrt[] = "stablehlo.sqrt";
constexpr char kRsqrt[] = "stablehlo.rsqrt";
constexpr char kSin[] = "stablehlo.sine";
constexpr char kCos[] = "stablehlo.cosine";
constexpr char kTan[] = "chlo.tan";
constexpr char kTanh[] = "stablehlo.tanh";
constexpr char kSigmoid[] = "stablehlo.logistic";
constexpr char kErf[] = "chlo.erf";
constexpr char kErfc[] = "chlo.erfc";
constexpr char kFloor[] = "stablehlo.floor";
constexpr char kCeil[] = "stablehlo.ceil";
constexpr char kRound[] = "stablehlo.round_nearest_even";  // PyTorch rounds half to even
constexpr char kSign[] = "stablehlo.sign";
constexpr char kAsin[] = "chlo.asin";
constexpr char kAcos[] = "chlo.acos";
constexpr char kAtan[] = "chlo.atan";
constexpr char kSinh[] = "chlo.sinh";
constexpr char kCosh[] = "chlo.cosh";
constexpr char kAsinh[] = "chlo.asinh";
constexpr char kAcosh[] = "chlo.acosh";
constexpr char kAtanh[] = "chlo.atanh";
constexpr char kErfInv[] = "chlo.erf_inv";
constexpr char kLgamma[] = "chlo.lgamma";
constexpr char kDigamma[] = "chlo.digamma";
constexpr char kNot[] = "stablehlo.not";

// erfinv: CHLO's polynomial estimate refined by one Newton step on erf (|x| <= 1/2) or, to
// keep precision near +-1 where erf(y) - x cancels, on erfc: 1 - |x| is exact there.
std::vector<Value> LowerErfInv(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  Value ax = Apply(ctx, kAbs, x);
  Value y = Apply(ctx, kErfInv, ax);
  Value near_one = ctx.b.Compare(Cmp::GT, ax, Const(ctx, 0.5, x));
  Value residual = ctx.b.Select(near_one, Sub(ctx, Sub(ctx, Const(ctx, 1, x), ax), Apply(ctx, kErfc, y)),
                                Sub(ctx, Apply(ctx, kErf, y), ax));
  Value slope = Mul(ctx, Const(ctx, M_2_SQRTPI, x), Apply(ctx, kExp, Apply(ctx, kNeg, Mul(ctx, y, y))));
  Value refined = Sub(ctx, y, Div(ctx, residual, slope));
  Value finite = ctx.b.Compare(Cmp::LT, ax, Const(ctx, 1, x));
  y = ctx.b.Select(finite, refined, y);
  return Result(ctx, Mul(ctx, Apply(ctx, kSign, x), y));  // sign(-0) keeps -0
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

// sign(x) = (0 < x) - (x < 0), as the CPU computes it: 0 for NaN (stablehlo.sign keeps NaN).
std::vector<Value> LowerSign(Ctx& ctx, const Args& a) {
  std::vector<Value> r = LowerUnaryKeepType<kSign>(ctx, a);
  if (!IsFloat(ctx.out().elem) || IsComplex(a.tensor(0).type.elem)) return r;
  Value x = CastTo(ctx, a.tensor(0), ctx.out());
  return {ctx.b.Select(IsNan(ctx, x), Const(ctx, 0, r[0]), r[0])};
}

// trunc(x) = sign(x) * floor(|x|); integers are already whole.
std::vector<Value> LowerTrunc(Ctx& ctx, const Args& a) {
  if (!IsFloat(ctx.out().elem)) return {CastTo(ctx, a.tensor(0), ctx.out())};
  Value x = Operand(ctx, a, 0);
  return Result(ctx, Mul(ctx, Apply(ctx, kSign, x), Apply(ctx, kFloor, Apply(ctx, kAbs, x))));
}

// Rounding ops are the identity on integers.
template <const char* Op>
std::vector<Value> LowerRounding(Ctx& ctx, const Args& a) {
  if (!IsFloat(ctx.out().elem)) return {CastTo(ctx, a.tensor(0), ctx.out())};
  return LowerUnary<Op>(ctx, a);
}

std::vector<Value> LowerReciprocal(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  return Result(ctx, Div(ctx, Const(ctx, 1, x), x));
}

std::vector<Value> LowerRelu(Ctx& ctx, const Args& a) {
  Value x = CastTo(ctx, a.tensor(0), ctx.out());
  Value r = Apply(ctx, "stablehlo.maximum", x, Const(ctx, 0, x));
  if (!IsFloat(x.type.elem)) return {r};
  // PyTorch's relu keeps NaN; stablehlo.maximum need not (XLA CPU's fast min/max drops it).
  return {ctx.b.Select(IsNan(ctx, x), x, r)};
}

std::vector<Value> LowerSilu(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  return Result(ctx, Mul(ctx, x, Apply(ctx, kSigmoid, x)));
}

// gelu(x) = x/2 * (1 + erf(x/sqrt 2)); approximate="tanh": x/2 * (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
// The exact form uses 1 + erf(x/sqrt 2) = erfc(-x/sqrt 2), which keeps its precision for very
// negative x (1 + erf cancels to a residue of the erf approximation instead of 0).
std::vector<Value> LowerGelu(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  Value half_x = Mul(ctx, x, Const(ctx, 0.5, x));
  if (a.str_or(1, "none") != "tanh") {
    return Result(ctx, Mul(ctx, half_x, Apply(ctx, kErfc, Mul(ctx, x, Const(ctx, -M_SQRT1_2, x)))));
  }
  Value cube = Mul(ctx, Mul(ctx, x, x), x);
  Value u = Mul(ctx, Const(ctx, std::sqrt(2.0 / M_PI), x), Add(ctx, x, Mul(ctx, Const(ctx, 0.044715, x), cube)));
  return Result(ctx, Mul(ctx, half_x, Add(ctx, Const(ctx, 1, x), Apply(ctx, kTanh, u))));
}

std::vector<Value> LowerGeluBackward(Ctx& ctx, const Args& a) {
  Value g = Operand(ctx, a, 0), x = Operand(ctx, a, 1);
  Value one = Const(ctx, 1, x), half = Const(ctx, 0.5, x);
  if (a.str_or(2, "none") == "tanh") {
    Value k = Const(ctx, std::sqrt(2.0 / M_PI), x), c = Const(ctx, 0.044715, x);
    Value x2 = Mul(ctx, x, x);
    Value t = Apply(ctx, kTanh, Mul(ctx, k, Add(ctx, x, Mul(ctx, c, Mul(ctx, x2, x)))));
    Value dinner = Mul(ctx, k, Add(ctx, one, Mul(ctx, Const(ctx, 3 * 0.044715, x), x2)));
    Value left = Mul(ctx, half, Add(ctx, one, t));
    Value right = Mul(ctx, Mul(ctx, half, x), Mul(ctx, Sub(ctx, one, Mul(ctx, t, t)), dinner));
    return Result(ctx, Mul(ctx, g, Add(ctx, left, right)));
  }
  Value cdf = Mul(ctx, half, Apply(ctx, kErfc, Mul(ctx, x, Const(ctx, -M_SQRT1_2, x))));
  Value pdf = Mul(ctx, Const(ctx, 0.5 * M_2_SQRTPI * M_SQRT1_2, x),
                  Apply(ctx, kExp, Mul(ctx, Const(ctx, -0.5, x), Mul(ctx, x, x))));
  return Result(ctx, Mul(ctx, g, Add(ctx, cdf, Mul(ctx, x, pdf))));
}

std::vector<Value> LowerSiluBackward(Ctx& ctx, const Args& a) {
  Value g = Operand(ctx, a, 0), x = Operand(ctx, a, 1);
  Value s = Apply(ctx, kSigmoid, x), one = Const(ctx, 1, x);
  return Result(ctx, Mul(ctx, g, Mul(ctx, s, Add(ctx, one, Mul(ctx, x, Sub(ctx, one, s))))));
}

std::vector<Value> LowerSigmoidBackward(Ctx& ctx, const Args& a) {
  Value g = Operand(ctx, a, 0), y = Operand(ctx, a, 1);
  return Result(ctx, Mul(ctx, g, Mul(ctx, y, Sub(ctx, Const(ctx, 1, y), y))));
}

std::vector<Value> LowerTanhBackward(Ctx& ctx, const Args& a) {
  Value g = Operand(ctx, a, 0), y = Operand(ctx, a, 1);
  return Result(ctx, Mul(ctx, g, Sub(ctx, Const(ctx, 1, y), Mul(ctx, y, y))));
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
  TensorType t = ComputeType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  return Result(ctx, Apply(ctx, Op, x, TimesAlpha(ctx, y, a, 2)));
}

template <const char* Op>
std::vector<Value> LowerBinary(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  return Result(ctx, Apply(ctx, Op, CastTo(ctx, a.tensor(0), t), CastTo(ctx, a.tensor(1), t)));
}

// Reversed: rsub(a, b, alpha) = b - alpha * a.
std::vector<Value> LowerRsub(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  return Result(ctx, Sub(ctx, y, TimesAlpha(ctx, x, a, 2)));
}

constexpr char kAdd[] = "stablehlo.add";
constexpr char kSub[] = "stablehlo.subtract";
constexpr char kMul[] = "stablehlo.multiply";
constexpr char kDiv[] = "stablehlo.divide";
constexpr char kPow[] = "stablehlo.power";
constexpr char kAtan2[] = "stablehlo.atan2";
constexpr char kAnd[] = "stablehlo.and";
constexpr char kOr[] = "stablehlo.or";
constexpr char kXor[] = "stablehlo.xor";

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
  TensorType t = ComputeType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  if (mode.empty()) return Result(ctx, Div(ctx, x, y));
  bool is_float = IsFloat(t.elem);
  CheckNoIntegerZeroDivisor(ctx, y);
  if (mode == "trunc") {
    if (!is_float) return Result(ctx, Div(ctx, x, y));  // integer division truncates
    Value q = Div(ctx, x, y);
    return Result(ctx, Mul(ctx, Apply(ctx, kSign, q), Apply(ctx, kFloor, Apply(ctx, kAbs, q))));
  }
  return Result(ctx, is_float ? FloorDivFloat(ctx, x, y) : FloorDivInt(ctx, x, y));
}

std::vector<Value> LowerFloorDivide(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  CheckNoIntegerZeroDivisor(ctx, y);
  return Result(ctx, IsFloat(t.elem) ? FloorDivFloat(ctx, x, y) : FloorDivInt(ctx, x, y));
}

// remainder(a, b) = a - floor(a / b) * b: the sign follows the divisor (Python's %).
std::vector<Value> LowerRemainder(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  CheckNoIntegerZeroDivisor(ctx, y);
  Value r = Apply(ctx, "stablehlo.remainder", x, y);
  Value zero = Const(ctx, 0, x);
  Value fix = ctx.b.Op1("stablehlo.and",
                        {ctx.b.Compare(Cmp::NE, r, zero),
                         ctx.b.Compare(Cmp::NE, ctx.b.Compare(Cmp::LT, r, zero), ctx.b.Compare(Cmp::LT, y, zero))},
                        {ElemType::Pred, t.dims});
  return Result(ctx, ctx.b.Select(fix, Add(ctx, r, y), r));
}

// fmod: C's fmod, the sign follows the dividend (stablehlo.remainder).
std::vector<Value> LowerFmod(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  Value y = CastTo(ctx, a.tensor(1), t);
  CheckNoIntegerZeroDivisor(ctx, y);
  return Result(ctx, Apply(ctx, "stablehlo.remainder", CastTo(ctx, a.tensor(0), t), y));
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

std::vector<Value> LowerPow(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  return Result(ctx, Apply(ctx, kPow, CastTo(ctx, a.tensor(0), t), CastTo(ctx, a.tensor(1), t)));
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
  return Result(ctx, Apply(ctx, Op, BroadcastTo(ctx, x, t.dims), BroadcastTo(ctx, y, t.dims)));
}

std::vector<Value> LowerLogicalNot(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  Value is_zero = ctx.b.Compare(Cmp::EQ, x, ctx.b.Constant(0, x.type));
  return Result(ctx, is_zero);
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
  TensorType t = ComputeType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t), w = CastTo(ctx, a.tensor(2), t);
  Value diff = Sub(ctx, y, x);
  Value small = ctx.b.Compare(Cmp::LT, Apply(ctx, kAbs, w), Const(ctx, 0.5, w));
  Value from_a = Add(ctx, x, Mul(ctx, w, diff));
  Value from_b = Sub(ctx, y, Mul(ctx, diff, Sub(ctx, Const(ctx, 1, w), w)));
  return Result(ctx, ctx.b.Select(small, from_a, from_b));
}

// addcmul(s, t1, t2, value) = s + value * t1 * t2; addcdiv likewise with t1 / t2.
template <bool kDivide>
std::vector<Value> LowerAddcOp(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  Value s = CastTo(ctx, a.tensor(0), t), x = CastTo(ctx, a.tensor(1), t), y = CastTo(ctx, a.tensor(2), t);
  Value v = a.is_none(3) ? Const(ctx, 1, s) : CastTo(ctx, a.tensor(3), t);
  Value term = kDivide ? Div(ctx, x, y) : Mul(ctx, x, y);
  return Result(ctx, Add(ctx, s, Mul(ctx, v, term)));
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


// ---- more unary and binary math (PyTorch's formulas, in the half types' f32 opmath) ----

constexpr double kLn2 = 0.69314718055994530942, kLn10 = 2.30258509299404568402;

// exp2(x) = 2^x through power (libm-accurate, unlike exp(x ln 2) for large x).
std::vector<Value> LowerExp2(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  return Result(ctx, Apply(ctx, kPow, Const(ctx, 2, x), x));
}

// log2 / log10 = log(x) / ln(base)
template <int kBase>
std::vector<Value> LowerLogBase(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  return Result(ctx, Div(ctx, Apply(ctx, kLog, x), Const(ctx, kBase == 2 ? kLn2 : kLn10, x)));
}

// logaddexp(a, b) = log(e^a + e^b); logaddexp2(a, b) = log2(2^a + 2^b).
std::vector<Value> LowerLogAddExp(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  return Result(ctx, LogAddExp(ctx, CastTo(ctx, a.tensor(0), t), CastTo(ctx, a.tensor(1), t)));
}
std::vector<Value> LowerLogAddExp2(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  Value ln2 = ctx.b.Constant(kLn2, t);
  Value x = Mul(ctx, CastTo(ctx, a.tensor(0), t), ln2), y = Mul(ctx, CastTo(ctx, a.tensor(1), t), ln2);
  return Result(ctx, Div(ctx, LogAddExp(ctx, x, y), ln2));
}

// frac(x) = x - trunc(x)
std::vector<Value> LowerFrac(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  Value trunc = Mul(ctx, Apply(ctx, kSign, x), Apply(ctx, kFloor, Apply(ctx, kAbs, x)));
  return Result(ctx, Sub(ctx, x, trunc));
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
  TensorType t = ComputeType(ctx.out());
  Value x = Apply(ctx, kAbs, CastTo(ctx, a.tensor(0), t)), y = Apply(ctx, kAbs, CastTo(ctx, a.tensor(1), t));
  Value x_big = ctx.b.Compare(Cmp::GE, x, y);
  Value mx = ctx.b.Select(x_big, x, y), mn = ctx.b.Select(x_big, y, x);
  Value zero = Const(ctx, 0, x), one = Const(ctx, 1, x);
  Value ratio = Div(ctx, mn, ctx.b.Select(ctx.b.Compare(Cmp::EQ, mx, zero), one, mx));
  Value r = Mul(ctx, mx, Apply(ctx, kSqrt, Add(ctx, one, Mul(ctx, ratio, ratio))));
  r = ctx.b.Select(Or(ctx, IsNan(ctx, x), IsNan(ctx, y)), Add(ctx, x, y), r);
  Value inf = Const(ctx, INFINITY, x);
  r = ctx.b.Select(Or(ctx, ctx.b.Compare(Cmp::EQ, x, inf), ctx.b.Compare(Cmp::EQ, y, inf)), inf, r);
  return Result(ctx, r);
}

// xlogy(x, y) = x == 0 ? 0 : x * log(y); xlog1py with log1p. NaN in y propagates.
template <const char* kLogOp>
std::vector<Value> LowerXLogY(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  Value r = Mul(ctx, x, Apply(ctx, kLogOp, y));
  r = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), Const(ctx, 0, x), r);
  return Result(ctx, ctx.b.Select(IsNan(ctx, y), y, r));
}

// entr(x) = -x log x for x > 0, 0 at 0, -inf below.
std::vector<Value> LowerEntr(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  Value r = Mul(ctx, Apply(ctx, kNeg, x), Apply(ctx, kLog, x));
  r = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), Const(ctx, 0, x), r);
  r = ctx.b.Select(ctx.b.Compare(Cmp::LT, x, Const(ctx, 0, x)), Const(ctx, -INFINITY, x), r);
  return Result(ctx, r);
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
  Value x = Operand(ctx, a, 0);
  int64_t d = a.int_(1);
  Value ten = Const(ctx, std::pow(10.0, static_cast<double>(d < 0 ? -d : d)), x);
  if (d < 0) return Result(ctx, Mul(ctx, Apply(ctx, kRound, Div(ctx, x, ten)), ten));
  return Result(ctx, Div(ctx, Apply(ctx, kRound, Mul(ctx, x, ten)), ten));
}

// sinc(x) = sin(pi x) / (pi x), 1 at 0.
std::vector<Value> LowerSinc(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  Value px = Mul(ctx, Const(ctx, M_PI, x), x);
  Value r = Div(ctx, Apply(ctx, kSin, px), px);
  return Result(ctx, ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), Const(ctx, 1, x), r));
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
  return Result(ctx, Apply(ctx, kLog, Div(ctx, x, Sub(ctx, Const(ctx, 1, x), x))));
}

// logit_backward(grad, x, eps?) = grad / (x (1 - x)); 0 outside [eps, 1 - eps], NaN outside
// [0, 1] without eps.
std::vector<Value> LowerLogitBackward(Ctx& ctx, const Args& a) {
  Value g = Operand(ctx, a, 0), x = Operand(ctx, a, 1);
  Value r = Div(ctx, g, Mul(ctx, x, Sub(ctx, Const(ctx, 1, x), x)));
  bool has_eps = !a.is_none(2) && a.double_(2) >= 0;
  double lo = has_eps ? a.double_(2) : 0, hi = has_eps ? 1 - a.double_(2) : 1;
  Value outside = Or(ctx, ctx.b.Compare(Cmp::LT, x, Const(ctx, lo, x)), ctx.b.Compare(Cmp::GT, x, Const(ctx, hi, x)));
  return Result(ctx, ctx.b.Select(outside, Const(ctx, has_eps ? 0 : NAN, x), r));
}

// i0e(x) = e^-|x| I0(x), which CHLO lacks: the power series sum (x^2/4)^k / k!^2 below
// |x| = 15, the asymptotic series e^x / sqrt(2 pi x) sum ((2k-1)!!)^2 / (k! (8x)^k) above.
Value I0e(Ctx& ctx, Value x) {
  Value ax = Apply(ctx, kAbs, x);
  Value q = Mul(ctx, Mul(ctx, ax, ax), Const(ctx, 0.25, x));
  Value series = Const(ctx, 1, x);  // Horner: 1 + q/1 (1 + q/4 (1 + q/9 (...)))
  for (int k = 48; k >= 1; --k)
    series = Add(ctx, Const(ctx, 1, x), Mul(ctx, series, Mul(ctx, q, Const(ctx, 1.0 / (static_cast<double>(k) * k), x))));
  Value small = Mul(ctx, series, Apply(ctx, kExp, Apply(ctx, kNeg, ax)));
  Value big_x = ctx.b.Select(ctx.b.Compare(Cmp::GT, ax, Const(ctx, 15, x)), ax, Const(ctx, 15, x));
  Value inv8x = Div(ctx, Const(ctx, 0.125, x), big_x);
  Value asym = Const(ctx, 1, x);
  for (int k = 12; k >= 1; --k)
    asym = Add(ctx, Const(ctx, 1, x), Mul(ctx, asym, Mul(ctx, inv8x, Const(ctx, (2.0 * k - 1) * (2.0 * k - 1) / k, x))));
  asym = Div(ctx, asym, Apply(ctx, kSqrt, Mul(ctx, Const(ctx, 2 * M_PI, x), big_x)));
  return ctx.b.Select(ctx.b.Compare(Cmp::GT, ax, Const(ctx, 15, x)), asym, small);
}

std::vector<Value> LowerI0e(Ctx& ctx, const Args& a) { return Result(ctx, I0e(ctx, Operand(ctx, a, 0))); }

// Modified Bessel functions from their exponentially scaled forms: i0 = i0e * e^|x|.
constexpr char kI1e[] = "chlo.bessel_i1e";
std::vector<Value> LowerI0(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  return Result(ctx, Mul(ctx, I0e(ctx, x), Apply(ctx, kExp, Apply(ctx, kAbs, x))));
}
std::vector<Value> LowerI1(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  return Result(ctx, Mul(ctx, Apply(ctx, kI1e, x), Apply(ctx, kExp, Apply(ctx, kAbs, x))));
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

// digamma with PyTorch's poles: +-0 gives -+inf (copysign(inf, -x)), other non-positive
// integers NaN (CHLO gives NaN at 0).
Value Digamma(Ctx& ctx, Value x) {
  Value r = Apply(ctx, kDigamma, x);
  Value inf = ctx.b.BitcastConvert(ctx.b.Binary("or", Bits(ctx, Const(ctx, INFINITY, x)),
                                                ctx.b.Binary("and", Bits(ctx, Apply(ctx, kNeg, x)), SignBitMask(ctx, Bits(ctx, x).type))),
                                   x.type);
  return ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), inf, r);
}

std::vector<Value> LowerDigamma(Ctx& ctx, const Args& a) { return Result(ctx, Digamma(ctx, Operand(ctx, a, 0))); }

// True where x is a non-positive integer (the poles of the polygamma functions).
Value AtPole(Ctx& ctx, Value x) {
  return And(ctx, ctx.b.Compare(Cmp::LE, x, Const(ctx, 0, x)), ctx.b.Compare(Cmp::EQ, x, Apply(ctx, kFloor, x)));
}

// Hurwitz zeta; CHLO's loses accuracy for q well below 0, so negative q is first shifted up by
// 16: zeta(s, q) = sum_{i<16} (q + i)^-s + zeta(s, q + 16).
Value Zeta(Ctx& ctx, Value s, Value q) {
  Value direct = ctx.b.Op1("chlo.zeta", {s, q}, q.type);
  Value sum = ctx.b.Op1("chlo.zeta", {s, Add(ctx, q, Const(ctx, 16, q))}, q.type);
  Value neg_s = Apply(ctx, kNeg, s);
  for (int i = 0; i < 16; ++i) sum = Add(ctx, sum, Apply(ctx, kPow, Add(ctx, q, Const(ctx, i, q)), neg_s));
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
    Value s = Apply(ctx, kSin, Mul(ctx, Const(ctx, M_PI, x), x));
    Value reflected = Div(ctx, Const(ctx, M_PI * M_PI, x), Mul(ctx, s, s));
    pole = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 0, x)), pole, reflected);
  }
  return ctx.b.Select(AtPole(ctx, x), pole, r);
}

std::vector<Value> LowerPolygamma(Ctx& ctx, const Args& a) {
  return Result(ctx, Polygamma(ctx, a.int_(0), CastTo(ctx, a.tensor(1), ComputeType(ctx.out()))));
}
// polygamma_(self, n): the in-place form takes its arguments the other way round.
std::vector<Value> LowerPolygammaInplace(Ctx& ctx, const Args& a) {
  return Result(ctx, Polygamma(ctx, a.int_(1), CastTo(ctx, a.tensor(0), ComputeType(ctx.out()))));
}

// zeta(x, q): the Hurwitz zeta function with PyTorch's (Cephes') domain: inf at x == 1, NaN
// for x < 1, inf at non-positive integer q, NaN for negative q with non-integer x.
std::vector<Value> LowerZeta(Ctx& ctx, const Args& a) {
  TensorType t = ComputeType(ctx.out());
  Value x = CastTo(ctx, a.tensor(0), t), q = CastTo(ctx, a.tensor(1), t);
  Value r = Zeta(ctx, x, q);
  Value nan = Const(ctx, NAN, x), inf = Const(ctx, INFINITY, x);
  Value q_neg_frac = And(ctx, ctx.b.Compare(Cmp::LT, q, Const(ctx, 0, q)), ctx.b.Compare(Cmp::NE, x, Apply(ctx, kFloor, x)));
  r = ctx.b.Select(q_neg_frac, nan, r);
  r = ctx.b.Select(AtPole(ctx, q), inf, r);
  r = ctx.b.Select(ctx.b.Compare(Cmp::LT, x, Const(ctx, 1, x)), nan, r);
  r = ctx.b.Select(ctx.b.Compare(Cmp::EQ, x, Const(ctx, 1, x)), inf, r);
  return Result(ctx, ctx.b.Select(Or(ctx, IsNan(ctx, x), IsNan(ctx, q)), Add(ctx, x, q), r));
}

// mvlgamma(x, p) = sum_{i<p} lgamma(x - i/2) + p(p-1)/4 log(pi); every x must exceed (p-1)/2.
std::vector<Value> LowerMvlgamma(Ctx& ctx, const Args& a) {
  Value x = Operand(ctx, a, 0);
  int64_t p = a.int_(1);
  ctx.AddCheck(AnyTrue(ctx, Not(ctx, ctx.b.Compare(Cmp::GT, x, Const(ctx, (p - 1) / 2.0, x)))),
               "mvlgamma: All elements must be greater than (p-1)/2");
  Value r = Const(ctx, p * (p - 1) / 4.0 * std::log(M_PI), x);
  for (int64_t i = 0; i < p; ++i) r = Add(ctx, r, Apply(ctx, kLgamma, Sub(ctx, x, Const(ctx, i / 2.0, x))));
  return Result(ctx, r);
}

// angle(x) for real x: pi below zero, 0 otherwise, NaN kept.
std::vector<Value> LowerAngle(Ctx& ctx, const Args& a) {
  if (IsComplex(a.tensor(0).type.elem)) {  // atan2(imag, real)
    Value z = a.tensor(0);
    TensorType part{z.type.elem == ElemType::C64 ? ElemType::F32 : ElemType::F64, z.type.dims};
    Value re = ctx.b.Op1("stablehlo.real", {z}, part), im = ctx.b.Op1("stablehlo.imag", {z}, part);
    return Result(ctx, Apply(ctx, kAtan2, im, re));
  }
  Value x = Operand(ctx, a, 0);
  Value r = ctx.b.Select(ctx.b.Compare(Cmp::LT, x, Const(ctx, 0, x)), Const(ctx, M_PI, x), Const(ctx, 0, x));
  return Result(ctx, ctx.b.Select(IsNan(ctx, x), x, r));
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

}  // namespace

TPU_LOWERING("aten::_conj_physical", LowerConjPhysical);
TPU_LOWERING("aten::abs", LowerUnaryKeepType<kAbs>);
TPU_LOWERING("aten::acos", LowerUnary<kAcos>);
TPU_LOWERING("aten::acosh", LowerUnary<kAcosh>);
TPU_LOWERING("aten::add.Scalar", LowerAddSub<kAdd>);
TPU_LOWERING("aten::add.Tensor", LowerAddSub<kAdd>);
TPU_LOWERING("aten::addcdiv", LowerAddcOp<true>);
TPU_LOWERING("aten::addcmul", LowerAddcOp<false>);
TPU_LOWERING("aten::angle", LowerAngle);
TPU_LOWERING("aten::asin", LowerUnary<kAsin>);
TPU_LOWERING("aten::asinh", LowerUnary<kAsinh>);
TPU_LOWERING("aten::atan", LowerUnary<kAtan>);
TPU_LOWERING("aten::atan2", LowerBinary<kAtan2>);
TPU_LOWERING("aten::atanh", LowerUnary<kAtanh>);
TPU_LOWERING("aten::bitwise_and.Tensor", LowerBitwise<kAnd>);
TPU_LOWERING("aten::bitwise_left_shift.Tensor", LowerShift<true>);
TPU_LOWERING("aten::bitwise_not", LowerBitwiseNot);
TPU_LOWERING("aten::bitwise_or.Tensor", LowerBitwise<kOr>);
TPU_LOWERING("aten::bitwise_right_shift.Tensor", LowerShift<false>);
TPU_LOWERING("aten::bitwise_xor.Tensor", LowerBitwise<kXor>);
TPU_LOWERING("aten::ceil", LowerRounding<kCeil>);
TPU_LOWERING("aten::clamp", LowerClampRule);
TPU_LOWERING("aten::clamp.Tensor", LowerClampRule);
TPU_LOWERING("aten::clamp_max", LowerClampMax);
TPU_LOWERING("aten::clamp_max.Tensor", LowerClampMax);
TPU_LOWERING("aten::clamp_min", LowerClampMin);
TPU_LOWERING("aten::clamp_min.Tensor", LowerClampMin);
TPU_LOWERING("aten::complex", LowerComplex);
TPU_LOWERING("aten::conj_physical.out", LowerConjPhysical);
TPU_LOWERING("aten::copysign.Scalar", LowerCopysign);
TPU_LOWERING("aten::copysign.Tensor", LowerCopysign);
TPU_LOWERING("aten::cos", LowerUnary<kCos>);
TPU_LOWERING("aten::cosh", LowerUnary<kCosh>);
TPU_LOWERING("aten::digamma", LowerDigamma);
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
TPU_LOWERING("aten::exp2", LowerExp2);
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
TPU_LOWERING("aten::frac", LowerFrac);
TPU_LOWERING("aten::frexp.Tensor", LowerFrexp);
TPU_LOWERING("aten::gcd", LowerGcd);
TPU_LOWERING("aten::ge.Scalar", LowerCompare<Cmp::GE>);
TPU_LOWERING("aten::ge.Tensor", LowerCompare<Cmp::GE>);
TPU_LOWERING("aten::gelu", LowerGelu);
TPU_LOWERING("aten::gelu_backward", LowerGeluBackward);
TPU_LOWERING("aten::gt.Scalar", LowerCompare<Cmp::GT>);
TPU_LOWERING("aten::gt.Tensor", LowerCompare<Cmp::GT>);
TPU_LOWERING("aten::hardtanh", LowerHardtanh);
TPU_LOWERING("aten::hardtanh_backward", LowerHardtanhBackward);
TPU_LOWERING("aten::heaviside", LowerHeaviside);
TPU_LOWERING("aten::hypot", LowerHypot);
TPU_LOWERING("aten::i0", LowerI0);
TPU_LOWERING("aten::isin.Scalar_Tensor", LowerIsin);
TPU_LOWERING("aten::isin.Tensor_Scalar", LowerIsin);
TPU_LOWERING("aten::isin.Tensor_Tensor", LowerIsin);
TPU_LOWERING("aten::isnan", LowerIsNan);
TPU_LOWERING("aten::isneginf", LowerIsInf<false>);
TPU_LOWERING("aten::isposinf", LowerIsInf<true>);
TPU_LOWERING("aten::lcm", LowerLcm);
TPU_LOWERING("aten::le.Scalar", LowerCompare<Cmp::LE>);
TPU_LOWERING("aten::le.Tensor", LowerCompare<Cmp::LE>);
TPU_LOWERING("aten::leaky_relu", LowerLeakyRelu);
TPU_LOWERING("aten::leaky_relu_backward", LowerLeakyReluBackward);
TPU_LOWERING("aten::lerp.Scalar", LowerLerp);
TPU_LOWERING("aten::lerp.Tensor", LowerLerp);
TPU_LOWERING("aten::lgamma", LowerUnary<kLgamma>);
TPU_LOWERING("aten::log", LowerUnary<kLog>);
TPU_LOWERING("aten::log10", LowerLogBase<10>);
TPU_LOWERING("aten::log1p", LowerUnary<kLog1p>);
TPU_LOWERING("aten::log2", LowerLogBase<2>);
TPU_LOWERING("aten::logaddexp", LowerLogAddExp);
TPU_LOWERING("aten::logaddexp2", LowerLogAddExp2);
TPU_LOWERING("aten::logical_and", LowerLogical<kAnd>);
TPU_LOWERING("aten::logical_not", LowerLogicalNot);
TPU_LOWERING("aten::logical_or", LowerLogical<kOr>);
TPU_LOWERING("aten::logical_xor", LowerLogical<kXor>);
TPU_LOWERING("aten::logit", LowerLogit);
TPU_LOWERING("aten::logit_backward", LowerLogitBackward);
TPU_LOWERING("aten::lt.Scalar", LowerCompare<Cmp::LT>);
TPU_LOWERING("aten::lt.Tensor", LowerCompare<Cmp::LT>);
TPU_LOWERING("aten::maximum", LowerMinMax<true>);
TPU_LOWERING("aten::minimum", LowerMinMax<false>);
TPU_LOWERING("aten::mul.Scalar", LowerMul);
TPU_LOWERING("aten::mul.Tensor", LowerMul);
TPU_LOWERING("aten::mvlgamma", LowerMvlgamma);
TPU_LOWERING("aten::nan_to_num", LowerNanToNum);
TPU_LOWERING("aten::ne.Scalar", LowerCompare<Cmp::NE>);
TPU_LOWERING("aten::ne.Tensor", LowerCompare<Cmp::NE>);
TPU_LOWERING("aten::neg", LowerUnaryKeepType<kNeg>);
TPU_LOWERING("aten::nextafter", LowerNextafter);
TPU_LOWERING("aten::polar", LowerPolar);
TPU_LOWERING("aten::polygamma", LowerPolygamma);
TPU_LOWERING("aten::polygamma_", LowerPolygammaInplace);
TPU_LOWERING("aten::pow.Scalar", LowerPow);
TPU_LOWERING("aten::pow.Tensor_Scalar", LowerPow);
TPU_LOWERING("aten::pow.Tensor_Tensor", LowerPow);
TPU_LOWERING("aten::pow_.Scalar", LowerPow);  // pow_(self, Scalar exponent), not pow.Scalar's twin
TPU_LOWERING("aten::reciprocal", LowerReciprocal);
TPU_LOWERING("aten::relu", LowerRelu);
TPU_LOWERING("aten::remainder.Scalar", LowerRemainder);
TPU_LOWERING("aten::remainder.Scalar_Tensor", LowerRemainder);
TPU_LOWERING("aten::remainder.Tensor", LowerRemainder);
TPU_LOWERING("aten::round", LowerRounding<kRound>);
TPU_LOWERING("aten::round.decimals", LowerRoundDecimals);
TPU_LOWERING("aten::rsqrt", LowerUnary<kRsqrt>);
TPU_LOWERING("aten::rsub.Scalar", LowerRsub);
TPU_LOWERING("aten::rsub.Tensor", LowerRsub);
TPU_LOWERING("aten::sgn", LowerSign);  // sgn is sign on real types
TPU_LOWERING("aten::sigmoid", LowerUnary<kSigmoid>);
TPU_LOWERING("aten::sigmoid_backward", LowerSigmoidBackward);
TPU_LOWERING("aten::sign", LowerSign);
TPU_LOWERING("aten::signbit", LowerSignbit);
TPU_LOWERING("aten::silu", LowerSilu);
TPU_LOWERING("aten::silu_backward", LowerSiluBackward);
TPU_LOWERING("aten::sin", LowerUnary<kSin>);
TPU_LOWERING("aten::sinc", LowerSinc);
TPU_LOWERING("aten::sinh", LowerUnary<kSinh>);
TPU_LOWERING("aten::special_entr", LowerEntr);
TPU_LOWERING("aten::special_i0e", LowerI0e);
TPU_LOWERING("aten::special_i1", LowerI1);
TPU_LOWERING("aten::special_i1e", LowerUnary<kI1e>);
TPU_LOWERING("aten::special_modified_bessel_i0", LowerI0);
TPU_LOWERING("aten::special_modified_bessel_i1", LowerI1);
TPU_LOWERING("aten::special_xlog1py", LowerXLogY<kLog1p>);
TPU_LOWERING("aten::special_zeta", LowerZeta);
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
TPU_LOWERING("aten::xlogy.Tensor", LowerXLogY<kLog>);
TPU_LOWERING("aten::zero", LowerZero);
TPU_LOWERING("torch_tpu::_copy_into", LowerCopyInto);

}  // namespace tpu::lowering
