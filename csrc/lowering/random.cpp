// Random ops and factories. Random bits come from rng_bit_generator (Philox) keyed by the
// generator's (seed, offset), a run-time parameter: a seed reproduces values, and a new
// offset never recompiles.
#include <cmath>
#include <limits>

#include "lowering.h"

namespace tpu::lowering {
namespace {

// Uniform floats in [0, 1) of `dims`, built from the top mantissa bits of random words.
Value Uniform01(Ctx& ctx, Value state, const std::vector<int64_t>& dims) {
  TensorType bits_type{ElemType::U32, dims};
  auto outs = ctx.b.Op("stablehlo.rng_bit_generator", {state}, {state.type, bits_type},
                       "rng_algorithm = #stablehlo<rng_algorithm PHILOX>");
  Value bits = outs[1];
  Value mantissa = ctx.b.Binary("shift_right_logical", bits, ctx.b.ConstantInt(9, bits_type));
  Value one_bits = ctx.b.Binary("or", mantissa, ctx.b.ConstantInt(0x3F800000, bits_type));
  Value in_1_2 = ctx.b.BitcastConvert(one_bits, {ElemType::F32, dims});
  return ctx.b.Binary("subtract", in_1_2, ctx.b.Constant(1, {ElemType::F32, dims}));
}

Value RandomBits64(Ctx& ctx, Value state, const std::vector<int64_t>& dims) {
  return ctx.b.Op("stablehlo.rng_bit_generator", {state}, {state.type, {ElemType::U64, dims}},
                  "rng_algorithm = #stablehlo<rng_algorithm PHILOX>")[1];
}

// uniform_(self, from, to, generator)
std::vector<Value> LowerUniform(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value u = Uniform01(ctx, a.tensor(3), t.dims);
  double from = a.double_(1), to = a.double_(2);
  Value r = ctx.b.Binary("add", ctx.b.Binary("multiply", u, ctx.b.Constant(to - from, u.type)), ctx.b.Constant(from, u.type));
  return {ConvertTo(ctx, r, t.elem)};
}

// normal_(self, mean, std, generator): Box-Muller over two uniform draws.
std::vector<Value> LowerNormal(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  std::vector<int64_t> dims2 = {2};
  dims2.insert(dims2.end(), t.dims.begin(), t.dims.end());
  Value u = Uniform01(ctx, a.tensor(3), dims2);
  std::vector<int64_t> start(dims2.size(), 0), limit = dims2, step(dims2.size(), 1);
  limit[0] = 1;
  Value u1 = ctx.b.Reshape(ctx.b.Slice(u, start, limit, step), t.dims);
  start[0] = 1;
  limit[0] = 2;
  Value u2 = ctx.b.Reshape(ctx.b.Slice(u, start, limit, step), t.dims);
  TensorType f{ElemType::F32, t.dims};
  Value one_minus = ctx.b.Binary("subtract", ctx.b.Constant(1, f), u1);  // (0, 1]: log is finite
  Value radius = ctx.b.Unary("sqrt", ctx.b.Binary("multiply", ctx.b.Constant(-2, f), ctx.b.Unary("log", one_minus)));
  Value angle = ctx.b.Binary("multiply", ctx.b.Constant(2 * M_PI, f), u2);
  Value z = ctx.b.Binary("multiply", radius, ctx.b.Unary("cosine", angle));
  Value r = ctx.b.Binary("add", ctx.b.Binary("multiply", z, ctx.b.Constant(a.double_(2), f)), ctx.b.Constant(a.double_(1), f));
  return {ConvertTo(ctx, r, t.elem)};
}

// bernoulli_(self, p: float, generator) = uniform < p
std::vector<Value> LowerBernoulliFloat(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value u = Uniform01(ctx, a.tensor(2), t.dims);
  return {ConvertTo(ctx, ctx.b.Compare(Cmp::LT, u, ctx.b.Constant(a.double_(1), u.type)), t.elem)};
}

// bernoulli_(self, p: Tensor, generator)
std::vector<Value> LowerBernoulliTensor(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value u = Uniform01(ctx, a.tensor(2), t.dims);
  Value p = CastTo(ctx, a.tensor(1), u.type);
  return {ConvertTo(ctx, ctx.b.Compare(Cmp::LT, u, p), t.elem)};
}

// random_(self, from, to?, generator): integers uniform in [from, to).
std::vector<Value> LowerRandomFromTo(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  int64_t from = a.int_(1);
  int64_t to = a.is_none(2) ? (int64_t{1} << (IsFloat(t.elem) ? 24 : 62)) : a.int_(2);
  uint64_t range = static_cast<uint64_t>(to - from);
  Value bits = RandomBits64(ctx, a.tensor(3), t.dims);
  TensorType u64{ElemType::U64, t.dims};
  Value r = ctx.b.Binary("remainder", bits, ctx.b.ConstantInt(static_cast<int64_t>(range), u64));
  Value s = ctx.b.Binary("add", ctx.b.Convert(r, ElemType::S64), ctx.b.ConstantInt(from, {ElemType::S64, t.dims}));
  return {ConvertTo(ctx, s, t.elem)};
}

// random_(self, generator): [0, 2^mantissa] for floats, [0, max] for integers.
std::vector<Value> LowerRandomDefault(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  int64_t to;
  switch (t.elem) {
    case ElemType::F16: to = (1 << 11) + 1; break;
    case ElemType::BF16: to = (1 << 8) + 1; break;
    case ElemType::F32: to = (1 << 24) + 1; break;
    case ElemType::F64: to = (int64_t{1} << 53) + 1; break;
    case ElemType::Pred: to = 2; break;
    case ElemType::S8: to = 128; break;
    case ElemType::U8: to = 256; break;
    case ElemType::S16: to = 32768; break;
    case ElemType::S32: to = int64_t{1} << 31; break;
    default: to = std::numeric_limits<int64_t>::max(); break;
  }
  std::vector<Arg> args(4);
  args[0].kind = Arg::Kind::Tensor;
  args[1].kind = Arg::Kind::Int;
  args[2].kind = Arg::Kind::Int;
  args[2].i = to;
  args[3].kind = Arg::Kind::Tensor;
  args[3].value = a.tensor(1);
  return LowerRandomFromTo(ctx, Args(args));
}

std::vector<Value> LowerRandomTo(Ctx& ctx, const Args& a) {
  std::vector<Arg> args(4);
  args[0].kind = Arg::Kind::Tensor;
  args[1].kind = Arg::Kind::Int;
  args[1].i = 0;
  args[2].kind = Arg::Kind::Int;
  args[2].i = a.int_(1);
  args[3].kind = Arg::Kind::Tensor;
  args[3].value = a.tensor(2);
  return LowerRandomFromTo(ctx, Args(args));
}

// arange.start_out(start, end, step, out): start + i * step.
std::vector<Value> LowerArange(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  ElemType compute = IsFloat(t.elem) ? AccumulatorType(t.elem) : ElemType::S64;
  TensorType ct{compute, t.dims};
  Value i = ctx.b.Iota(ct, 0);
  Value start = CastTo(ctx, a.tensor(0), ct), step = CastTo(ctx, a.tensor(2), ct);
  return {ConvertTo(ctx, ctx.b.Binary("add", start, ctx.b.Binary("multiply", i, step)), t.elem)};
}

// linspace.out(start, end, steps, out): the first half counts up from start, the second
// half down from end, as PyTorch does, so both ends are exact.
std::vector<Value> LowerLinspace(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  int64_t steps = a.int_(2);
  ElemType compute = IsFloat(t.elem) ? AccumulatorType(t.elem) : ElemType::F64;
  TensorType ct{compute, t.dims};
  Value start = CastTo(ctx, a.tensor(0), ct), end = CastTo(ctx, a.tensor(1), ct);
  if (steps <= 1) return {ConvertTo(ctx, start, t.elem)};
  Value step = ctx.b.Binary("divide", ctx.b.Binary("subtract", end, start), ctx.b.Constant(static_cast<double>(steps - 1), ct));
  Value i = ctx.b.Convert(ctx.b.Iota({ElemType::S64, t.dims}, 0), compute);
  Value up = ctx.b.Binary("add", start, ctx.b.Binary("multiply", i, step));
  Value back = ctx.b.Binary("subtract", ctx.b.Constant(static_cast<double>(steps - 1), ct), i);
  Value down = ctx.b.Binary("subtract", end, ctx.b.Binary("multiply", back, step));
  Value first_half = ctx.b.Compare(Cmp::LT, i, ctx.b.Constant(static_cast<double>(steps / 2), ct));
  Value r = ctx.b.Select(first_half, up, down);
  if (!IsFloat(t.elem)) r = ctx.b.Unary("floor", r);
  return {ConvertTo(ctx, r, t.elem)};
}

// eye: ones on the main diagonal.
std::vector<Value> LowerEye(Ctx& ctx, const Args&) {
  const TensorType& t = ctx.out();
  TensorType idx{ElemType::S64, t.dims};
  Value diag = ctx.b.Compare(Cmp::EQ, ctx.b.Iota(idx, 0), ctx.b.Iota(idx, 1));
  return {ConvertTo(ctx, diag, t.elem)};
}

}  // namespace

TPU_LOWERING("aten::arange.start_out", LowerArange);
TPU_LOWERING("aten::bernoulli_.Tensor", LowerBernoulliTensor);
TPU_LOWERING("aten::bernoulli_.float", LowerBernoulliFloat);
TPU_LOWERING("aten::eye.m_out", LowerEye);
TPU_LOWERING("aten::eye.out", LowerEye);
TPU_LOWERING("aten::linspace.out", LowerLinspace);
TPU_LOWERING("aten::normal_", LowerNormal);
TPU_LOWERING("aten::random_", LowerRandomDefault);
TPU_LOWERING("aten::random_.from", LowerRandomFromTo);
TPU_LOWERING("aten::random_.to", LowerRandomTo);
TPU_LOWERING("aten::uniform_", LowerUniform);

}  // namespace tpu::lowering
