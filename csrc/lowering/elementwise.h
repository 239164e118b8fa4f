// Names of the StableHLO and CHLO ops the elementwise families (elementwise.cpp, math.cpp)
// are parameterised by.
#pragma once

namespace tpu::lowering {

// The exponents PyTorch's CPU kernel computes without pow (Pow.cpp, cpu/PowKernel.cpp): 0, 1,
// 2, 3, -2, -1, 0.5, -0.5. pow's lowerings specialise on them (TPU_SPECIAL_SCALAR), so eager
// and compiled callers key them by value and hand them over as static Doubles.
bool IsSpecialExponent(double e);

}  // namespace tpu::lowering

namespace tpu::lowering::ops {

inline constexpr char kAbs[] = "stablehlo.abs";
inline constexpr char kNeg[] = "stablehlo.negate";
inline constexpr char kExp[] = "stablehlo.exponential";
inline constexpr char kExpm1[] = "stablehlo.exponential_minus_one";
inline constexpr char kLog[] = "stablehlo.log";
inline constexpr char kLog1p[] = "stablehlo.log_plus_one";
inline constexpr char kSqrt[] = "stablehlo.sqrt";
inline constexpr char kRsqrt[] = "stablehlo.rsqrt";
inline constexpr char kSin[] = "stablehlo.sine";
inline constexpr char kCos[] = "stablehlo.cosine";
inline constexpr char kTan[] = "chlo.tan";
inline constexpr char kTanh[] = "stablehlo.tanh";
inline constexpr char kSigmoid[] = "stablehlo.logistic";
inline constexpr char kErf[] = "chlo.erf";
inline constexpr char kErfc[] = "chlo.erfc";
inline constexpr char kFloor[] = "stablehlo.floor";
inline constexpr char kCeil[] = "stablehlo.ceil";
inline constexpr char kRound[] = "stablehlo.round_nearest_even";  // PyTorch rounds half to even
inline constexpr char kSign[] = "stablehlo.sign";
inline constexpr char kAsin[] = "chlo.asin";
inline constexpr char kAcos[] = "chlo.acos";
inline constexpr char kAtan[] = "chlo.atan";
inline constexpr char kSinh[] = "chlo.sinh";
inline constexpr char kCosh[] = "chlo.cosh";
inline constexpr char kAsinh[] = "chlo.asinh";
inline constexpr char kAcosh[] = "chlo.acosh";
inline constexpr char kAtanh[] = "chlo.atanh";
inline constexpr char kErfInv[] = "chlo.erf_inv";
inline constexpr char kLgamma[] = "chlo.lgamma";
inline constexpr char kI1e[] = "chlo.bessel_i1e";
inline constexpr char kNot[] = "stablehlo.not";
inline constexpr char kAdd[] = "stablehlo.add";
inline constexpr char kSub[] = "stablehlo.subtract";
inline constexpr char kMul[] = "stablehlo.multiply";
inline constexpr char kDiv[] = "stablehlo.divide";
inline constexpr char kPow[] = "stablehlo.power";
inline constexpr char kAtan2[] = "stablehlo.atan2";
inline constexpr char kAnd[] = "stablehlo.and";
inline constexpr char kOr[] = "stablehlo.or";
inline constexpr char kXor[] = "stablehlo.xor";

}  // namespace tpu::lowering::ops
