// Shorthands of the special-function families (special.cpp, bessel.cpp): they compute in the
// accumulator type (f32 for half types) and round once at the end.
#pragma once

#include <vector>

#include "helpers.h"

namespace tpu::lowering::special {

inline TensorType Compute(const TensorType& out) { return {AccumulatorType(out.elem), out.dims}; }
inline Value Un(Ctx& ctx, const char* op, Value x) { return ctx.b.Unary(op, x); }
inline Value Lt(Ctx& ctx, Value x, Value y) { return ctx.b.Compare(Cmp::LT, x, y); }
inline Value Eq(Ctx& ctx, Value x, Value y) { return ctx.b.Compare(Cmp::EQ, x, y); }
inline Value Sel(Ctx& ctx, Value p, Value a, Value b) { return ctx.b.Select(p, a, b); }
inline Value C(Ctx& ctx, double v, const Value& like) { return ctx.b.Constant(v, like.type); }
inline Value Abs(Ctx& ctx, Value x) { return Un(ctx, "abs", x); }
// The result rounded to the output's element type.
inline std::vector<Value> Done(Ctx& ctx, Value r) { return {ConvertTo(ctx, r, ctx.out().elem)}; }

}  // namespace tpu::lowering::special
