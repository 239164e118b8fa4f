// Random ops. Random bits come from rng_bit_generator (Philox) keyed by the
// generator's (seed, offset), a run-time parameter: a seed reproduces values, and a new
// offset never recompiles.
#include <cmath>
#include <limits>

#include "helpers.h"

namespace tpu::lowering {
namespace {

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

// Standard normal f32 draws of `dims`: Box-Muller over two uniform draws.
Value StandardNormal(Ctx& ctx, Value state, const std::vector<int64_t>& dims) {
  std::vector<int64_t> dims2 = {2};
  dims2.insert(dims2.end(), dims.begin(), dims.end());
  Value u = Uniform01(ctx, state, dims2);
  std::vector<int64_t> start(dims2.size(), 0), limit = dims2, step(dims2.size(), 1);
  limit[0] = 1;
  Value u1 = ctx.b.Reshape(ctx.b.Slice(u, start, limit, step), dims);
  start[0] = 1;
  limit[0] = 2;
  Value u2 = ctx.b.Reshape(ctx.b.Slice(u, start, limit, step), dims);
  TensorType f{ElemType::F32, dims};
  Value one_minus = ctx.b.Binary("subtract", ctx.b.Constant(1, f), u1);  // (0, 1]: log is finite
  Value radius = ctx.b.Unary("sqrt", ctx.b.Binary("multiply", ctx.b.Constant(-2, f), ctx.b.Unary("log", one_minus)));
  Value angle = ctx.b.Binary("multiply", ctx.b.Constant(2 * M_PI, f), u2);
  return ctx.b.Binary("multiply", radius, ctx.b.Unary("cosine", angle));
}

// normal_(self, mean, std, generator)
std::vector<Value> LowerNormal(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value z = StandardNormal(ctx, a.tensor(3), t.dims);
  Value r = ctx.b.Binary("add", ctx.b.Binary("multiply", z, ctx.b.Constant(a.double_(2), z.type)), ctx.b.Constant(a.double_(1), z.type));
  return {ConvertTo(ctx, r, t.elem)};
}

// normal.Tensor_float / float_Tensor / Tensor_Tensor (mean, std, generator): mean + std * z,
// with a device-side check that every std is >= 0.
std::vector<Value> LowerNormalTensors(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  TensorType f{AccumulatorType(t.elem) == ElemType::F64 ? ElemType::F64 : ElemType::F32, t.dims};
  auto operand = [&](size_t i) {
    if (a.raw(i).kind == Arg::Kind::Double) return ctx.b.Constant(a.double_(i), f);
    return CastTo(ctx, a.tensor(i), f);
  };
  Value mean = operand(0), std = operand(1);
  if (a.raw(1).kind != Arg::Kind::Double)
    ctx.AddCheck(AnyTrue(ctx, ctx.b.Compare(Cmp::LT, std, ctx.b.Constant(0, f))), "normal expects all elements of std >= 0.0");
  Value z = ConvertTo(ctx, StandardNormal(ctx, a.tensor(2), t.dims), f.elem);
  return {ConvertTo(ctx, ctx.b.Binary("add", mean, ctx.b.Binary("multiply", std, z)), t.elem)};
}

// log_normal_(self, mean, std) = exp(mean + std * z)
std::vector<Value> LowerLogNormal(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value z = StandardNormal(ctx, a.tensor(3), t.dims);
  Value n = ctx.b.Binary("add", ctx.b.Binary("multiply", z, ctx.b.Constant(a.double_(2), z.type)), ctx.b.Constant(a.double_(1), z.type));
  return {ConvertTo(ctx, ctx.b.Unary("exponential", n), t.elem)};
}

// exponential_(self, lambd) = -log(1 - u) / lambd
std::vector<Value> LowerExponential(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value u = Uniform01(ctx, a.tensor(2), t.dims);
  Value l = ctx.b.Unary("log_plus_one", ctx.b.Unary("negate", u));
  return {ConvertTo(ctx, ctx.b.Binary("divide", l, ctx.b.Constant(-a.double_(1), u.type)), t.elem)};
}

// cauchy_(self, median, sigma) = median + sigma * tan(pi (u - 1/2))
std::vector<Value> LowerCauchy(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value u = Uniform01(ctx, a.tensor(3), t.dims);
  Value ang = ctx.b.Binary("multiply", ctx.b.Binary("subtract", u, ctx.b.Constant(0.5, u.type)), ctx.b.Constant(M_PI, u.type));
  Value r = ctx.b.Binary("add", ctx.b.Constant(a.double_(1), u.type),
                         ctx.b.Binary("multiply", ctx.b.Constant(a.double_(2), u.type), ctx.b.Op1("chlo.tan", {ang}, u.type)));
  return {ConvertTo(ctx, r, t.elem)};
}

// geometric_(self, p): the number of Bernoulli(p) trials up to the first success,
// ceil(log(1 - u) / log(1 - p)), at least 1.
std::vector<Value> LowerGeometric(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value u = Uniform01(ctx, a.tensor(2), t.dims);
  Value l = ctx.b.Unary("log_plus_one", ctx.b.Unary("negate", u));
  Value k = ctx.b.Unary("ceil", ctx.b.Binary("divide", l, ctx.b.Constant(std::log1p(-a.double_(1)), u.type)));
  k = ctx.b.Binary("maximum", k, ctx.b.Constant(1, u.type));
  return {ConvertTo(ctx, k, t.elem)};
}

// bernoulli(self, generator): 1 with probability self.
std::vector<Value> LowerBernoulliSelf(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value u = Uniform01(ctx, a.tensor(1), t.dims);
  return {ConvertTo(ctx, ctx.b.Compare(Cmp::LT, u, CastTo(ctx, a.tensor(0), u.type)), t.elem)};
}

// randperm.generator_out(n, generator, out): the order of n random 64-bit keys.
std::vector<Value> LowerRandperm(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  int64_t n = a.int_(0);
  if (n == 0) return {ctx.b.Constant(0, t)};
  Value keys = RandomBits64(ctx, a.tensor(1), {n});
  Value idx = ctx.b.Iota({ElemType::S64, {n}}, 0);
  return {ConvertTo(ctx, SortAlong(ctx, {keys, idx}, 0, false)[1], t.elem)};
}

// multinomial(self, num_samples, replacement, generator): category indices drawn from the
// (unnormalised) weights in the last dim. With replacement: inverse CDF; without: the
// Gumbel top-k trick (keys log p + Gumbel noise, the largest num_samples win), which draws
// exactly like sequential sampling without replacement.
std::vector<Value> LowerMultinomial(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value p = ConvertTo(ctx, a.tensor(0), ElemType::F32);
  int64_t n = a.int_(1), r = p.type.rank(), k = p.type.dims.back();
  bool replacement = a.bool_or(2, false);
  Value zero = ctx.b.Constant(0, p.type);
  Value bad = Or(ctx, Or(ctx, ctx.b.Compare(Cmp::LT, p, zero), IsNan(ctx, p)),
                 ctx.b.Compare(Cmp::EQ, ctx.b.Unary("abs", p), ctx.b.Constant(INFINITY, p.type)));
  ctx.AddCheck(AnyTrue(ctx, bad), "multinomial: probability tensor contains either `inf`, `nan` or element < 0");
  Value total = ctx.b.Reduce(p, ctx.b.Constant(0, {ElemType::F32, {}}), {r - 1}, "add");
  ctx.AddCheck(AnyTrue(ctx, ctx.b.Compare(Cmp::LE, total, ctx.b.Constant(0, total.type))),
               "multinomial: invalid multinomial distribution (sum of probabilities <= 0)");
  std::vector<int64_t> sample_dims = t.dims;  // [.., n]
  if (replacement) {
    Value cdf = Scan(ctx, {p}, r - 1, {ctx.b.Constant(0, {ElemType::F32, {}})},
                     [&](const std::vector<Value>& e, const std::vector<Value>& l) {
                       return std::vector<Value>{Add(ctx, e[0], l[0])};
                     })[0];
    Value u = Uniform01(ctx, a.tensor(3), sample_dims);
    Value target = Mul(ctx, u, Unreduce(ctx, total, sample_dims, {r - 1}));
    std::vector<int64_t> grid = sample_dims;
    grid.push_back(k);
    std::vector<int64_t> cmap, tmap;
    for (int64_t d = 0; d < r - 1; ++d) cmap.push_back(d);
    cmap.push_back(r);
    for (int64_t d = 0; d < r; ++d) tmap.push_back(d);
    Value below = ctx.b.Compare(Cmp::LE, ctx.b.BroadcastInDim(cdf, grid, cmap), ctx.b.BroadcastInDim(target, grid, tmap));
    Value idx = ctx.b.Reduce(ctx.b.Convert(below, ElemType::S64), ctx.b.ConstantInt(0, {ElemType::S64, {}}), {r}, "add");
    idx = ctx.b.Binary("minimum", idx, ctx.b.ConstantInt(k - 1, idx.type));
    return {ConvertTo(ctx, idx, t.elem)};
  }
  Value nonzero = ctx.b.Reduce(ctx.b.Convert(ctx.b.Compare(Cmp::GT, p, zero), ElemType::S64),
                               ctx.b.ConstantInt(0, {ElemType::S64, {}}), {r - 1}, "add");
  ctx.AddCheck(AnyTrue(ctx, ctx.b.Compare(Cmp::LT, nonzero, ctx.b.ConstantInt(n, nonzero.type))),
               "multinomial: invalid multinomial distribution (with replacement=False, not enough non-negative category to sample)");
  Value u = Uniform01(ctx, a.tensor(3), p.type.dims);
  u = ctx.b.Binary("maximum", u, ctx.b.Constant(1e-30, u.type));
  Value gumbel = ctx.b.Unary("negate", ctx.b.Unary("log", ctx.b.Unary("negate", ctx.b.Unary("log", u))));
  Value keys = Add(ctx, ctx.b.Unary("log", p), gumbel);
  Value idx = ctx.b.Iota({ElemType::S64, p.type.dims}, r - 1);
  Value order = SortAlong(ctx, {keys, idx}, r - 1, true)[1];
  std::vector<int64_t> start(r, 0), limit = p.type.dims, ones(r, 1);
  limit[r - 1] = n;
  return {ConvertTo(ctx, ctx.b.Slice(order, start, limit, ones), t.elem)};
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

// Graph forms (torch.compile): rand/randn(size) and rand_like/randn_like(self), whose
// generator state the graph appends as their last argument; eager runs them as empty + fill.
std::vector<Value> LowerRandFactory(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  return {ConvertTo(ctx, Uniform01(ctx, a.tensor(a.size() - 1), t.dims), t.elem)};
}
std::vector<Value> LowerRandnFactory(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  return {ConvertTo(ctx, StandardNormal(ctx, a.tensor(a.size() - 1), t.dims), t.elem)};
}

}  // namespace

TPU_LOWERING("aten::bernoulli", LowerBernoulliSelf);
TPU_LOWERING("aten::bernoulli_.Tensor", LowerBernoulliTensor);
TPU_LOWERING("aten::bernoulli_.float", LowerBernoulliFloat);
TPU_LOWERING("aten::cauchy_", LowerCauchy);
TPU_LOWERING("aten::exponential_", LowerExponential);
TPU_LOWERING("aten::geometric_", LowerGeometric);
TPU_LOWERING("aten::log_normal_", LowerLogNormal);
TPU_LOWERING("aten::multinomial", LowerMultinomial);
TPU_LOWERING("aten::normal.Tensor_Tensor", LowerNormalTensors);
TPU_LOWERING("aten::normal.Tensor_float", LowerNormalTensors);
TPU_LOWERING("aten::normal.float_Tensor", LowerNormalTensors);
TPU_LOWERING("aten::normal_", LowerNormal);
TPU_LOWERING("aten::random_", LowerRandomDefault);
TPU_LOWERING("aten::random_.from", LowerRandomFromTo);
TPU_LOWERING("aten::random_.to", LowerRandomTo);
TPU_LOWERING("aten::randperm.generator_out", LowerRandperm);
TPU_LOWERING("aten::uniform_", LowerUniform);
// Functional and factory forms found in torch.compile graphs.
TPU_GRAPH_LOWERING("aten::bernoulli.p", LowerBernoulliFloat);
TPU_GRAPH_LOWERING("aten::exponential", LowerExponential);
TPU_GRAPH_LOWERING("aten::normal_functional", LowerNormal);
TPU_GRAPH_LOWERING("aten::rand", LowerRandFactory);
TPU_GRAPH_LOWERING("aten::rand_like", LowerRandFactory);
TPU_GRAPH_LOWERING("aten::randn", LowerRandnFactory);
TPU_GRAPH_LOWERING("aten::randn_like", LowerRandnFactory);
TPU_GRAPH_LOWERING("aten::uniform", LowerUniform);

}  // namespace tpu::lowering
