// grid_sampler_2d / grid_sampler_3d (F.grid_sample) and their backward. Every output point
// reads a few taps of the input: 2 per spatial dim (bilinear), 1 (nearest) or 4 per dim
// (bicubic, 2-D only). A tap is a gather of [P, C] rows of the input laid out as
// [N * spatial, C]; the backward scatter-adds the weighted taps (grad_input) and sums tap values
// times the weight derivatives (grad_grid).
//
// The forward repeats PyTorch's CPU arithmetic op by op in the input's own type: in f16/bf16
// every step rounds, and a coordinate computed in f32 lands on other pixels (f16 is held in f32
// and rounded after every op, the same on every host: Arith). The 2-D CPU kernel
// is the vectorized one (GridSamplerKernel.cpp), the 3-D one the scalar one (GridSampler.h);
// their unnormalize, reflection and weight formulas differ in rounding, so both are followed.
// The backward accumulates in f32 for f16/bf16.
#include "helpers.h"

namespace tpu::lowering {
namespace {

enum Interp { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

struct Sampler {
  int64_t interp, padding;
  bool align;
  bool scalar;  // the 3-D (scalar) CPU formulas rather than the 2-D (vectorized) ones
};

Sampler SamplerOf(const Args& a, bool three_d) {
  return {a.int_("interpolation_mode"), a.int_("padding_mode"), a.bool_("align_corners"), three_d};
}

// The coordinate and weight arithmetic, in the grid's type. An f16 grid is held in f32 and every
// result rounded to f16 (RoundToF16): native f16 code let XLA's CPU compiler fuse a multiply and
// an add into one rounding on hosts with AVX512-FP16, and points moved against the CPU's there.
struct Arith {
  Ctx& ctx;
  bool f16_in_f32;
  Value R(Value v) const { return f16_in_f32 ? RoundToF16(ctx, v) : v; }
  Value add(Value x, Value y) const { return R(Add(ctx, x, y)); }
  Value sub(Value x, Value y) const { return R(Sub(ctx, x, y)); }
  Value mul(Value x, Value y) const { return R(Mul(ctx, x, y)); }
  Value div(Value x, Value y) const { return R(Div(ctx, x, y)); }
  Value k(double v, const Value& like) const { return R(Const(ctx, v, like)); }
  // Exact in any type: no rounding needed.
  Value unary(const char* op, Value x) const { return ctx.b.Unary(op, x); }
  Value rem(Value x, Value y) const { return ctx.b.Binary("remainder", x, y); }
  Value less(Value x, Value y) const { return ctx.b.Compare(Cmp::LT, x, y); }
  Value cmp(Cmp c, Value x, Value y) const { return ctx.b.Compare(c, x, y); }
  Value select(Value p, Value x, Value y) const { return ctx.b.Select(p, x, y); }
};

// Grid value in [-1, 1] -> source coordinate (align_corners: -1 and 1 are the corner pixels'
// centres; otherwise their outer edges).
Value Unnormalize(const Arith& m, Value g, int64_t size, const Sampler& s) {
  Value one = m.k(1, g);
  if (s.scalar) {
    if (s.align) return m.mul(m.div(m.add(g, one), m.k(2, g)), m.k(size - 1, g));
    return m.div(m.sub(m.mul(m.add(g, one), m.k(size, g)), one), m.k(2, g));
  }
  Value scaled = m.mul(m.add(g, one), m.k(s.align ? (size - 1) / 2.0 : size / 2.0, g));
  return s.align ? scaled : m.sub(scaled, m.k(0.5, g));
}

// Clamp to [0, size - 1]; NaN becomes 0.
Value Clip(const Arith& m, Value x, int64_t size) {
  Value zero = m.k(0, x), hi = m.k(size - 1, x);
  x = m.select(m.cmp(Cmp::GT, x, zero), x, zero);
  return m.select(m.less(x, hi), x, hi);
}

// Reflection off the borders (pixel centres with align_corners, else the outer edges) until the
// coordinate lies inside; `sign` receives d result / d x.
Value Reflect(const Arith& m, Value x, int64_t size, const Sampler& s, Value* sign) {
  if (s.align && size <= 1) {
    *sign = m.k(0, x);
    return m.k(0, x);
  }
  double low = s.align ? 0 : -0.5, span = s.align ? size - 1 : size;
  Value v = s.align ? x : m.sub(x, m.k(low, x));
  Value negative = m.less(v, m.k(0, x));
  Value a = m.unary("abs", v), flipped, r;
  if (s.scalar) {  // fmod by the span; odd numbers of spans flip
    Value extra = m.rem(a, m.k(span, x));
    Value flips = m.unary("floor", m.div(a, m.k(span, x)));
    flipped = m.cmp(Cmp::NE, m.rem(flips, m.k(2, x)), m.k(0, x));
    r = m.select(flipped, m.sub(m.k(span, x), extra), extra);
  } else {  // whole double spans removed, then one more flip when past the far border
    Value twice = m.k(2 * span, x);
    Value extra = m.sub(a, m.mul(m.unary("floor", m.div(a, twice)), twice));
    Value reflected = m.sub(twice, extra);
    flipped = m.cmp(Cmp::GT, extra, reflected);
    r = m.select(flipped, reflected, extra);
  }
  *sign = m.select(m.ctx.b.Binary("xor", flipped, negative), m.k(-1, x), m.k(1, x));
  return s.align ? r : m.add(r, m.k(low, x));
}

// compute_coordinates: the padding mode applied to a source coordinate. `mult` (optional), the
// derivative so far, is multiplied by the padding's derivative (0 on and beyond the borders).
Value Pad(const Arith& m, Value x, int64_t size, const Sampler& s, Value* mult) {
  if (s.padding == kReflection) {
    Value sign;
    x = Reflect(m, x, size, s, &sign);
    if (mult) *mult = m.mul(sign, *mult);
  }
  if (s.padding != kZeros) {
    Value inside = And(m.ctx, m.cmp(Cmp::GT, x, m.k(0, x)), m.less(x, m.k(size - 1, x)));
    if (mult) *mult = m.select(inside, *mult, m.k(0, x));
    x = Clip(m, x, size);
  }
  if (s.scalar) {  // safe_downgrade_to_int_range: NaN and huge coordinates read nothing
    Value ok = m.cmp(Cmp::LE, m.unary("abs", x), m.k(2147483647.0, x));
    x = m.select(ok, x, m.k(-100, x));
  }
  return x;
}

// An integral coordinate as an s64 position, clamped to [-2, size] (still outside when outside).
Value ToIndex(const Arith& m, Value x, int64_t size) {
  Value lo = m.k(-2, x), hi = m.k(size, x);
  x = m.select(m.cmp(Cmp::GT, x, lo), x, lo);  // NaN -> -2
  return m.ctx.b.Convert(m.select(m.less(x, hi), x, hi), ElemType::S64);
}

// The taps of one spatial dim for every point: positions, weights, d weight / d coordinate,
// and d coordinate / d grid value.
struct Axis {
  std::vector<Value> index, weight, dweight;
  Value mult;
};

// Keys' cubic convolution weights (A = -0.75) at distances 1 + t, t, 1 - t, 2 - t, in the CPU
// kernel's order of operations, and their derivatives in t.
void Cubic(const Arith& m, Value t, Axis& ax) {
  const double A = -0.75;
  auto k = [&](double v) { return m.k(v, t); };
  auto far = [&](Value x) {  // ((A x - 5A) x + 8A) x - 4A for 1 <= x <= 2
    return m.sub(m.mul(m.add(m.mul(m.sub(m.mul(k(A), x), k(5 * A)), x), k(8 * A)), x), k(4 * A));
  };
  auto near = [&](Value x) {  // ((A + 2) x - (A + 3)) x x + 1 for x <= 1
    return m.add(m.mul(m.mul(m.sub(m.mul(k(A + 2), x), k(A + 3)), x), x), k(1));
  };
  auto dfar = [&](Value x) { return m.add(m.mul(m.sub(m.mul(k(3 * A), x), k(10 * A)), x), k(8 * A)); };
  auto dnear = [&](Value x) { return m.mul(m.sub(m.mul(k(3 * (A + 2)), x), k(2 * (A + 3))), x); };
  Value t1 = m.add(t, k(1)), u = m.sub(k(1), t), u1 = m.sub(k(2), t);
  ax.weight = {far(t1), near(t), near(u), far(u1)};
  ax.dweight = {dfar(t1), dnear(t), m.sub(k(0), dnear(u)), m.sub(k(0), dfar(u1))};
}

Axis AxisTaps(const Arith& m, Value g, int64_t size, const Sampler& s) {
  Axis ax;
  Value x = Unnormalize(m, g, size, s);
  ax.mult = m.k(s.align ? (size - 1) / 2.0 : size / 2.0, g);
  Value one = m.k(1, g);
  if (s.interp == kBicubic) {  // padding applies to each tap's position, not to x
    Value fl = m.unary("floor", x);
    Cubic(m, m.sub(x, fl), ax);
    for (int k = -1; k <= 2; ++k) ax.index.push_back(ToIndex(m, Pad(m, m.add(fl, m.k(k, g)), size, s, nullptr), size));
    return ax;
  }
  x = Pad(m, x, size, s, &ax.mult);
  if (s.interp == kNearest) {
    ax.index = {ToIndex(m, m.unary("round_nearest_even", x), size)};
    ax.weight = {one};
    ax.dweight = {m.k(0, g)};
    return ax;
  }
  Value fl = m.unary("floor", x);
  Value i0 = ToIndex(m, fl, size);
  ax.index = {i0, Add(m.ctx, i0, ConstI(m.ctx, 1, i0))};
  Value w1 = m.sub(x, fl);
  ax.weight = {s.scalar ? m.sub(m.add(fl, one), x) : m.sub(one, w1), w1};
  ax.dweight = {m.k(-1, g), one};
  return ax;
}

// One input position read by every output point: its row of the [N * spatial, C] input
// (`total` when outside) and its index into each axis's taps.
struct Tap {
  Value row, valid;
  std::vector<int> k;
};

// Everything the forward and backward share: the input as rows, the axes (in spatial order,
// fed by grid components nd - 1 ... 0), and the taps in row-major order of the axes.
struct Plan {
  bool f16_in_f32;  // an f16 grid's arithmetic runs in f32, rounded to f16 (Arith)
  int64_t n, c, points, total;
  std::vector<int64_t> spatial, out;  // input and output spatial sizes
  std::vector<Axis> axes;
  std::vector<Tap> taps;
};

Plan MakePlan(Ctx& ctx, const TensorType& input, Value grid, const Sampler& s) {
  Plan p;
  int64_t nd = input.rank() - 2;
  p.n = input.dims[0];
  p.c = input.dims[1];
  p.spatial.assign(input.dims.begin() + 2, input.dims.end());
  p.out.assign(grid.type.dims.begin() + 1, grid.type.dims.end() - 1);
  p.points = grid.type.numel() / nd;
  p.f16_in_f32 = grid.type.elem == ElemType::F16;
  Arith m{ctx, p.f16_in_f32};
  Value g = ctx.b.Reshape(p.f16_in_f32 ? ctx.b.Convert(grid, ElemType::F32) : grid, {p.points, nd});
  for (int64_t d = 0; d < nd; ++d) {
    int64_t comp = nd - 1 - d;
    Value gd = ctx.b.Reshape(ctx.b.Slice(g, {0, comp}, {p.points, comp + 1}, {1, 1}), {p.points});
    p.axes.push_back(AxisTaps(m, gd, p.spatial[d], s));
  }
  int64_t per_image = 1;
  for (int64_t size : p.spatial) per_image *= size;
  p.total = p.n * per_image;
  Value base = ctx.b.Reshape(ctx.b.Iota({ElemType::S64, {p.n, p.points / p.n}}, 0), {p.points});
  base = Mul(ctx, base, ConstI(ctx, per_image, base));
  std::vector<Tap> taps = {{base, ctx.b.Constant(1, {ElemType::Pred, {p.points}}), {}}};
  int64_t stride = per_image;
  for (int64_t d = 0; d < nd; ++d) {
    stride /= p.spatial[d];
    std::vector<Tap> next;
    for (const Tap& t : taps) {
      for (size_t k = 0; k < p.axes[d].index.size(); ++k) {
        Value i = p.axes[d].index[k];
        Value in = And(ctx, ctx.b.Compare(Cmp::GE, i, ConstI(ctx, 0, i)), ctx.b.Compare(Cmp::LT, i, ConstI(ctx, p.spatial[d], i)));
        Tap u{Add(ctx, t.row, Mul(ctx, i, ConstI(ctx, stride, i))), And(ctx, t.valid, in), t.k};
        u.k.push_back(static_cast<int>(k));
        next.push_back(u);
      }
    }
    taps = next;
  }
  for (Tap& t : taps) t.row = ctx.b.Select(t.valid, t.row, ConstI(ctx, p.total, t.row));
  p.taps = taps;
  return p;
}

// input [N, C, *S] -> [N * S, C] rows.
Value Rows(Ctx& ctx, Value x) {
  int64_t r = x.type.rank();
  std::vector<int64_t> perm = {0};
  for (int64_t d = 2; d < r; ++d) perm.push_back(d);
  perm.push_back(1);
  return ctx.b.Reshape(ctx.b.Transpose(x, perm), {x.type.numel() / x.type.dims[1], x.type.dims[1]});
}

// [N * rest, C] rows -> [N, C, *rest].
Value Unrows(Ctx& ctx, Value rows, int64_t n, const std::vector<int64_t>& rest) {
  std::vector<int64_t> dims = {n}, perm = {0, static_cast<int64_t>(rest.size()) + 1};
  dims.insert(dims.end(), rest.begin(), rest.end());
  dims.push_back(rows.type.dims[1]);
  for (size_t d = 0; d < rest.size(); ++d) perm.push_back(static_cast<int64_t>(d) + 1);
  return ctx.b.Transpose(ctx.b.Reshape(rows, dims), perm);
}

// The tap's input values [P, C], zero outside.
Value Read(Ctx& ctx, Value rows, const Tap& t) {
  Value v = Take(ctx, rows, 0, t.row);
  return ctx.b.Select(ctx.b.BroadcastInDim(t.valid, v.type.dims, {0}), v, Const(ctx, 0, v));
}

Value PerPoint(Ctx& ctx, Value w, const Value& like) { return ctx.b.BroadcastInDim(w, like.type.dims, {0}); }

// The tap's weight: the axes' weights multiplied from the last spatial dim to the first.
Value TapWeight(Ctx& ctx, const Plan& p, const Tap& t) {
  Arith m{ctx, p.f16_in_f32};
  Value w = p.axes.back().weight[t.k.back()];
  for (size_t d = p.axes.size() - 1; d-- > 0;) w = m.mul(w, p.axes[d].weight[t.k[d]]);
  return w;
}

// grid_sampler_2d/3d(input, grid, interpolation_mode, padding_mode, align_corners) -> [N, C, *O]
std::vector<Value> LowerGridSampler(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {Splat(ctx, 0, t)};
  Value x = a.tensor("input");
  Sampler s = SamplerOf(a, x.type.rank() == 5);
  Plan p = MakePlan(ctx, x.type, a.tensor("grid"), s);
  Arith m{ctx, p.f16_in_f32};
  Value rows = Rows(ctx, x), out;
  if (p.f16_in_f32) rows = ctx.b.Convert(rows, ElemType::F32);
  if (s.interp == kBicubic) {  // rows of x taps first, then the column of rows
    const Axis &ay = p.axes[0], &ax = p.axes[1];
    for (int j = 0; j < 4; ++j) {
      Value row;
      for (int i = 0; i < 4; ++i) {
        Value v = Read(ctx, rows, p.taps[j * 4 + i]);
        v = m.mul(PerPoint(ctx, ax.weight[i], v), v);
        row = i ? m.add(row, v) : v;
      }
      Value v = m.mul(PerPoint(ctx, ay.weight[j], row), row);
      out = j ? m.add(out, v) : v;
    }
  } else {
    for (size_t i = 0; i < p.taps.size(); ++i) {
      Value v = Read(ctx, rows, p.taps[i]);
      if (s.interp == kBilinear) v = m.mul(v, PerPoint(ctx, TapWeight(ctx, p, p.taps[i]), v));
      out = i ? m.add(out, v) : v;
    }
  }
  out = Unrows(ctx, out, p.n, p.out);
  return {p.f16_in_f32 ? ctx.b.Convert(out, t.elem) : out};
}

// grid_sampler_2d/3d_backward(grad_output, input, grid, interpolation_mode, padding_mode,
// align_corners, output_mask) -> (grad_input if output_mask[0], grad_grid).
// grad_input scatter-adds weight * grad_output at every tap; grad_grid[d] sums, over taps and
// channels, d weight / d coordinate * value * grad_output, times d coordinate / d grid.
std::vector<Value> LowerGridSamplerBackward(Ctx& ctx, const Args& a) {
  Value x = a.tensor("input");
  Sampler s = SamplerOf(a, x.type.rank() == 5);
  const auto& mask = a.raw(a.index("output_mask")).ints;
  const TensorType &gi_t = ctx.out(0), &gg_t = ctx.out(1);
  ElemType acc = AccumulatorType(gg_t.elem);
  if (gg_t.numel() == 0 || x.type.numel() == 0) return {Splat(ctx, 0, gi_t), Splat(ctx, 0, gg_t)};
  Plan p = MakePlan(ctx, x.type, a.tensor("grid"), s);
  Value rows = ConvertTo(ctx, Rows(ctx, x), acc), gout = ConvertTo(ctx, Rows(ctx, a.tensor("grad_output")), acc);
  auto f = [&](Value v) { return ConvertTo(ctx, v, acc); };
  std::vector<Value> updates, where, comps(p.axes.size());
  for (const Tap& t : p.taps) {
    Value w = f(TapWeight(ctx, p, t));
    updates.push_back(Mul(ctx, gout, PerPoint(ctx, w, gout)));
    where.push_back(t.row);
    if (s.interp == kNearest) continue;
    Value vg = SumOver(ctx, Mul(ctx, Read(ctx, rows, t), gout), {1});  // [P]
    for (size_t d = 0; d < p.axes.size(); ++d) {
      Value dw = f(p.axes[d].dweight[t.k[d]]);
      for (size_t e = 0; e < p.axes.size(); ++e)
        if (e != d) dw = Mul(ctx, dw, f(p.axes[e].weight[t.k[e]]));
      Value term = Mul(ctx, dw, vg);
      comps[d] = comps[d].valid() ? Add(ctx, comps[d], term) : term;
    }
  }
  Value grad_input = Splat(ctx, 0, gi_t);
  if (mask.empty() || mask[0]) {
    Value upd = ctx.b.Concatenate(updates, 0), idx = ctx.b.Concatenate(where, 0);
    Value sums = ScatterAddAlong(ctx, upd, 0, idx, p.total + 1);  // the extra row takes the outside taps
    sums = ctx.b.Slice(sums, {0, 0}, {p.total, p.c}, {1, 1});
    grad_input = ConvertTo(ctx, Unrows(ctx, sums, p.n, p.spatial), gi_t.elem);
  }
  int64_t nd = static_cast<int64_t>(p.axes.size());
  Value grad_grid = ctx.b.Constant(0, {acc, {p.points, nd}});
  if (s.interp != kNearest) {
    std::vector<Value> cols(nd);
    for (int64_t d = 0; d < nd; ++d)
      cols[nd - 1 - d] = ctx.b.Reshape(Mul(ctx, comps[d], f(p.axes[d].mult)), {p.points, 1});
    grad_grid = ctx.b.Concatenate(cols, 1);
  }
  return {grad_input, ConvertTo(ctx, ctx.b.Reshape(grad_grid, gg_t.dims), gg_t.elem)};
}

}  // namespace

TPU_LOWERING("aten::grid_sampler_2d", LowerGridSampler);
TPU_LOWERING("aten::grid_sampler_2d_backward", LowerGridSamplerBackward);
TPU_LOWERING("aten::grid_sampler_3d", LowerGridSampler);
TPU_LOWERING("aten::grid_sampler_3d_backward", LowerGridSamplerBackward);

}  // namespace tpu::lowering
