// Interpolation (upsample_*): separable, one pass per spatial dim. The source indices and
// weights of every output position are computed on the host exactly as PyTorch's CPU kernels
// do (UpSample.h: float arithmetic for f16/bf16/f32, double for f64) and enter the program as
// constant tables; each pass gathers the taps and sums them weighted. Gradients are the
// transposes (scatter-adds of the weighted taps). f16/bf16 interpolate in f32.
#include <algorithm>
#include <cmath>
#include <optional>

#include "helpers.h"

namespace tpu::lowering {
namespace {

enum class Mode { Nearest, NearestExact, Linear, Cubic, LinearAA, CubicAA };

// The taps of one spatial dim: for each tap t, the input index and weight of every output.
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weight;  // empty for nearest
};

// PyTorch's compute_scales_value / area_pixel_compute_scale / area_pixel_compute_source_index,
// in the op-math type T.
template <typename T>
T ScalesValue(std::optional<double> scale, int64_t in, int64_t out) {
  return (scale && *scale > 0) ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / static_cast<T>(out);
}

template <typename T>
T AreaScale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  return ScalesValue<T>(scale, in, out);
}

template <typename T>
T SourceIndex(T scale, int64_t dst, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<T>(dst);
  T src = scale * (static_cast<T>(dst) + static_cast<T>(0.5)) - static_cast<T>(0.5);
  return (!cubic && src < T(0)) ? T(0) : src;
}

// guard_index_and_lambda: the floor index (at most in - 1) and the fraction clamped to [0, 1].
template <typename T>
void GuardIndex(T real, int64_t in, int64_t& index, T& lambda) {
  index = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
  lambda = std::min(std::max(real - static_cast<T>(index), T(0)), T(1));
}

// Keys' cubic convolution weights with A = -0.75 (get_cubic_upsample_coefficients).
template <typename T>
void CubicWeights(T t, T w[4]) {
  const T A = static_cast<T>(-0.75);
  auto conv1 = [&](T x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto conv2 = [&](T x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  T x2 = 1 - t;
  w[0] = conv2(t + 1);
  w[1] = conv1(t);
  w[2] = conv1(x2);
  w[3] = conv2(x2 + 1);
}

// Anti-aliased taps (_upsample_{bilinear,bicubic}2d_aa, PIL's resampling, as PyTorch's
// _compute_weights_aa): output o covers the input within `support` of its centre
// scale * (o + 0.5), the filter stretched by the scale when downsampling, the weights
// normalised to sum to 1. Taps past a window's end get weight 0.
template <typename T>
Taps AntialiasTaps(bool cubic, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  T s = AreaScale<T>(in, out, align_corners, scale);
  T interp = cubic ? T(4) : T(2);
  T support = s >= T(1) ? interp * T(0.5) * s : interp * T(0.5);
  T invscale = s >= T(1) ? T(1) / s : T(1);
  auto filter = [&](T x) {
    x = std::abs(x);
    if (!cubic) return x < T(1) ? T(1) - x : T(0);
    const T A = static_cast<T>(-0.5);  // Keys' a = -0.5, as PIL
    if (x < T(1)) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < T(2)) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return T(0);
  };
  size_t n = static_cast<size_t>(std::ceil(support)) * 2 + 1;
  Taps taps;
  taps.index.resize(n);
  taps.weight.resize(n);
  for (int64_t o = 0; o < out; ++o) {
    T center = s * (static_cast<T>(o) + T(0.5));
    int64_t xmin = std::max(static_cast<int64_t>(center - support + T(0.5)), int64_t{0});
    int64_t xsize = std::min(static_cast<int64_t>(center + support + T(0.5)), in) - xmin;
    std::vector<T> w(n, T(0));
    T total = 0;
    for (int64_t j = 0; j < xsize && j < static_cast<int64_t>(n); ++j) {
      w[j] = filter((static_cast<T>(j + xmin) - center + T(0.5)) * invscale);
      total += w[j];
    }
    for (size_t t = 0; t < n; ++t) {
      taps.index[t].push_back(std::min(xmin + static_cast<int64_t>(t), in - 1));
      taps.weight[t].push_back(static_cast<double>(total != T(0) ? w[t] / total : w[t]));
    }
  }
  return taps;
}

template <typename T>
Taps ComputeTaps(Mode mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (mode == Mode::LinearAA || mode == Mode::CubicAA)
    return AntialiasTaps<T>(mode == Mode::CubicAA, in, out, align_corners, scale);
  Taps taps;
  if (mode == Mode::Nearest || mode == Mode::NearestExact) {
    taps.index.resize(1);
    float s = ScalesValue<float>(scale, in, out);
    for (int64_t o = 0; o < out; ++o) {
      int64_t src;
      if (mode == Mode::NearestExact) {
        src = std::min(static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(o) + 0.5) * s))), in - 1);
      } else if (out == in) {
        src = o;
      } else if (out == 2 * in) {
        src = o >> 1;
      } else {
        src = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * s)), in - 1);
      }
      taps.index[0].push_back(src);
    }
    return taps;
  }
  bool cubic = mode == Mode::Cubic;
  size_t n = cubic ? 4 : 2;
  taps.index.resize(n);
  taps.weight.resize(n);
  T s = AreaScale<T>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i;
    T lambda;
    GuardIndex<T>(SourceIndex<T>(s, o, align_corners, cubic), in, i, lambda);
    if (cubic) {
      T w[4];
      CubicWeights<T>(lambda, w);
      for (size_t t = 0; t < 4; ++t) {
        taps.index[t].push_back(std::max<int64_t>(std::min<int64_t>(i - 1 + static_cast<int64_t>(t), in - 1), 0));
        taps.weight[t].push_back(static_cast<double>(w[t]));
      }
    } else {
      taps.index[0].push_back(i);
      taps.index[1].push_back(i + (i < in - 1 ? 1 : 0));
      taps.weight[0].push_back(static_cast<double>(T(1) - lambda));
      taps.weight[1].push_back(static_cast<double>(lambda));
    }
  }
  return taps;
}

struct Spec {
  Mode mode;
  bool align_corners = false;
  std::vector<std::optional<double>> scales;
};

// The op's mode, align_corners and per-dim scales, reading scales from argument `first_scale`.
Spec ReadSpec(const Args& a, Mode mode, size_t n, size_t first_scale, int align_arg) {
  Spec s{mode};
  if (align_arg >= 0) s.align_corners = a.bool_(align_arg);
  for (size_t i = 0; i < n; ++i) {
    size_t k = first_scale + i;
    s.scales.push_back(a.is_none(k) ? std::nullopt : std::optional<double>(a.double_(k)));
  }
  return s;
}

Taps TapsFor(const Spec& s, ElemType acc, int64_t in, int64_t out, size_t i) {
  if (acc == ElemType::F64) return ComputeTaps<double>(s.mode, in, out, s.align_corners, s.scales[i]);
  return ComputeTaps<float>(s.mode, in, out, s.align_corners, s.scales[i]);
}

// Interpolates x (already in the compute type) to `out_dims` (the last n dims resized).
Value Interpolate(Ctx& ctx, Value x, const std::vector<int64_t>& out_dims, const Spec& s, size_t n) {
  int64_t lead = x.type.rank() - static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t dim = lead + static_cast<int64_t>(i);
    Taps taps = TapsFor(s, x.type.elem, x.type.dims[dim], out_dims[dim], i);
    Value sum;
    for (size_t t = 0; t < taps.index.size(); ++t) {
      Value v = Pick(ctx, x, dim, taps.index[t]);
      if (!taps.weight.empty())
        v = Bin(ctx, "multiply", v, Along(ctx, ConstFloats(ctx, taps.weight[t], x.type.elem), v.type.dims, dim));
      sum = sum.valid() ? Bin(ctx, "add", sum, v) : v;
    }
    x = sum;
  }
  return x;
}

// The transpose of Interpolate: g (output-shaped) spread back onto `in_dims`.
Value InterpolateBackward(Ctx& ctx, Value g, const std::vector<int64_t>& in_dims, const Spec& s, size_t n) {
  int64_t lead = g.type.rank() - static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t dim = lead + static_cast<int64_t>(i);
    Taps taps = TapsFor(s, g.type.elem, in_dims[dim], g.type.dims[dim], i);
    Value sum;
    for (size_t t = 0; t < taps.index.size(); ++t) {
      Value v = g;
      if (!taps.weight.empty())
        v = Bin(ctx, "multiply", v, Along(ctx, ConstFloats(ctx, taps.weight[t], g.type.elem), v.type.dims, dim));
      v = PickTranspose(ctx, v, dim, taps.index[t], in_dims[dim]);
      sum = sum.valid() ? Bin(ctx, "add", sum, v) : v;
    }
    g = sum;
  }
  return g;
}

// upsample_nearest{1,2,3}d / _upsample_nearest_exact{1,2,3}d(x, output_size, scales...)
template <Mode M, size_t N>
std::vector<Value> LowerNearest(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return {Interpolate(ctx, x, ctx.out().dims, ReadSpec(a, M, N, 2, -1), N)};
}

// upsample_nearest{1,2,3}d_backward(g, output_size, input_size, scales...)
template <Mode M, size_t N>
std::vector<Value> LowerNearestBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value g = ConvertTo(ctx, a.tensor(0), acc);
  return {ConvertTo(ctx, InterpolateBackward(ctx, g, ctx.out().dims, ReadSpec(a, M, N, 3, -1), N), ctx.out().elem)};
}

// upsample_linear1d / bilinear2d / trilinear3d / bicubic2d(x, output_size, align_corners, scales...)
template <Mode M, size_t N>
std::vector<Value> LowerInterp(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  if (!IsFloat(acc)) throw Unsupported("linear interpolation of an integer tensor");
  Value x = ConvertTo(ctx, a.tensor(0), acc);
  return {ConvertTo(ctx, Interpolate(ctx, x, ctx.out().dims, ReadSpec(a, M, N, 3, 2), N), ctx.out().elem)};
}

// upsample_*_backward(g, output_size, input_size, align_corners, scales...)
template <Mode M, size_t N>
std::vector<Value> LowerInterpBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value g = ConvertTo(ctx, a.tensor(0), acc);
  return {ConvertTo(ctx, InterpolateBackward(ctx, g, ctx.out().dims, ReadSpec(a, M, N, 4, 3), N), ctx.out().elem)};
}

}  // namespace

TPU_LOWERING("aten::_upsample_bicubic2d_aa", (LowerInterp<Mode::CubicAA, 2>));
TPU_LOWERING("aten::_upsample_bicubic2d_aa_backward", (LowerInterpBackward<Mode::CubicAA, 2>));
TPU_LOWERING("aten::_upsample_bilinear2d_aa", (LowerInterp<Mode::LinearAA, 2>));
TPU_LOWERING("aten::_upsample_bilinear2d_aa_backward", (LowerInterpBackward<Mode::LinearAA, 2>));
TPU_LOWERING("aten::_upsample_nearest_exact1d", (LowerNearest<Mode::NearestExact, 1>));
TPU_LOWERING("aten::_upsample_nearest_exact1d_backward", (LowerNearestBackward<Mode::NearestExact, 1>));
TPU_LOWERING("aten::_upsample_nearest_exact2d", (LowerNearest<Mode::NearestExact, 2>));
TPU_LOWERING("aten::_upsample_nearest_exact2d_backward", (LowerNearestBackward<Mode::NearestExact, 2>));
TPU_LOWERING("aten::_upsample_nearest_exact3d", (LowerNearest<Mode::NearestExact, 3>));
TPU_LOWERING("aten::_upsample_nearest_exact3d_backward", (LowerNearestBackward<Mode::NearestExact, 3>));
TPU_LOWERING("aten::upsample_bicubic2d", (LowerInterp<Mode::Cubic, 2>));
TPU_LOWERING("aten::upsample_bicubic2d_backward", (LowerInterpBackward<Mode::Cubic, 2>));
TPU_LOWERING("aten::upsample_bilinear2d", (LowerInterp<Mode::Linear, 2>));
TPU_LOWERING("aten::upsample_bilinear2d_backward", (LowerInterpBackward<Mode::Linear, 2>));
TPU_LOWERING("aten::upsample_linear1d", (LowerInterp<Mode::Linear, 1>));
TPU_LOWERING("aten::upsample_linear1d_backward", (LowerInterpBackward<Mode::Linear, 1>));
TPU_LOWERING("aten::upsample_nearest1d", (LowerNearest<Mode::Nearest, 1>));
TPU_LOWERING("aten::upsample_nearest1d_backward", (LowerNearestBackward<Mode::Nearest, 1>));
TPU_LOWERING("aten::upsample_nearest2d", (LowerNearest<Mode::Nearest, 2>));
TPU_LOWERING("aten::upsample_nearest2d_backward", (LowerNearestBackward<Mode::Nearest, 2>));
TPU_LOWERING("aten::upsample_nearest3d", (LowerNearest<Mode::Nearest, 3>));
TPU_LOWERING("aten::upsample_nearest3d_backward", (LowerNearestBackward<Mode::Nearest, 3>));
TPU_LOWERING("aten::upsample_trilinear3d", (LowerInterp<Mode::Linear, 3>));
TPU_LOWERING("aten::upsample_trilinear3d_backward", (LowerInterpBackward<Mode::Linear, 3>));

}  // namespace tpu::lowering
