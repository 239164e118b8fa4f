// Pooling. Sliding windows unroll the window offsets as strided slices of the padded input,
// visited in PyTorch's row-major order so ties and NaNs pick the element the CPU kernel picks
// (max: the first maximum, or the last NaN). Adaptive pooling has variable windows and is
// separable: one pass per spatial dim over the window offsets. Gradients are the transposes:
// padded sums for avg, scatter-adds at the saved indices for max. f16/bf16 sum in f32.
#include <algorithm>
#include <cmath>
#include <functional>

#include "helpers.h"

namespace tpu::lowering {
namespace {

// One spatial dim of a sliding-window pool: input and output sizes, kernel, stride, padding,
// dilation, and the extra high padding ceil_mode's last window reaches into.
struct Win {
  int64_t in, out, k, s, p, d;
  int64_t high() const { return std::max<int64_t>(0, (out - 1) * s + (k - 1) * d + 1 - in - p); }
  int64_t pos(int64_t o, int64_t j) const { return o * s - p + j * d; }  // input position
};

// kernel_size / stride / padding / dilation lists: one entry means every dim; an empty stride
// means the kernel size.
std::vector<int64_t> Spread(const std::vector<int64_t>& v, size_t n, const std::vector<int64_t>& empty) {
  if (v.empty()) return empty;
  if (v.size() == 1) return std::vector<int64_t>(n, v[0]);
  return v;
}

struct Pool {
  int64_t lead = 0;          // leading (batch, channel) dims
  std::vector<Win> dims;     // spatial dims
  std::vector<int64_t> out;  // output shape
};

// The spatial geometry of x against the output type; dilation_arg < 0 for avg pooling.
Pool Geometry(const Value& x, const TensorType& out, const Args& a, size_t n, size_t k_arg, int dilation_arg) {
  Pool g;
  g.lead = x.type.rank() - static_cast<int64_t>(n);
  g.out = out.dims;
  auto k = Spread(a.ints(k_arg), n, {});
  auto s = Spread(a.ints(k_arg + 1), n, k);
  auto p = Spread(a.ints(k_arg + 2), n, std::vector<int64_t>(n, 0));
  auto d = dilation_arg < 0 ? std::vector<int64_t>(n, 1) : Spread(a.ints(dilation_arg), n, std::vector<int64_t>(n, 1));
  for (size_t i = 0; i < n; ++i) g.dims.push_back({x.type.dims[g.lead + i], out.dims[g.lead + i], k[i], s[i], p[i], d[i]});
  return g;
}

Value PadSpatial(Ctx& ctx, Value x, const Pool& g, double value) {
  int64_t r = x.type.rank();
  std::vector<int64_t> low(r, 0), high(r, 0), interior(r, 0);
  bool any = false;
  for (size_t i = 0; i < g.dims.size(); ++i) {
    low[g.lead + i] = g.dims[i].p;
    high[g.lead + i] = g.dims[i].high();
    any |= low[g.lead + i] || high[g.lead + i];
  }
  return any ? ctx.b.Pad(x, ctx.b.Constant(value, {x.type.elem, {}}), low, high, interior) : x;
}

// Calls fn(j) for every window offset j, the last spatial dim fastest.
void ForEachOffset(const Pool& g, const std::function<void(const std::vector<int64_t>&)>& fn) {
  std::vector<int64_t> j(g.dims.size(), 0);
  while (true) {
    fn(j);
    int64_t i = static_cast<int64_t>(j.size()) - 1;
    while (i >= 0 && ++j[i] == g.dims[i].k) j[i--] = 0;
    if (i < 0) return;
  }
}

// The padded input's elements at window offset j, one per output position.
Value OffsetSlice(Ctx& ctx, Value padded, const Pool& g, const std::vector<int64_t>& j) {
  int64_t r = padded.type.rank();
  std::vector<int64_t> start(r, 0), limit = padded.type.dims, strides(r, 1);
  for (size_t i = 0; i < g.dims.size(); ++i) {
    const Win& w = g.dims[i];
    start[g.lead + i] = j[i] * w.d;
    limit[g.lead + i] = j[i] * w.d + (w.out - 1) * w.s + 1;
    strides[g.lead + i] = w.s;
  }
  return ctx.b.Slice(padded, start, limit, strides);
}

// Whether offset j of each output window lies inside the input (invalid Value: everywhere).
Value OffsetValid(Ctx& ctx, const Pool& g, const std::vector<int64_t>& j) {
  Value valid;
  for (size_t i = 0; i < g.dims.size(); ++i) {
    const Win& w = g.dims[i];
    std::vector<bool> in;
    bool all = true;
    for (int64_t o = 0; o < w.out; ++o) {
      int64_t p = w.pos(o, j[i]);
      in.push_back(p >= 0 && p < w.in);
      all &= in.back();
    }
    if (all) continue;
    Value v = Along(ctx, ConstPred(ctx, in), g.out, g.lead + static_cast<int64_t>(i));
    valid = valid.valid() ? ctx.b.Binary("and", valid, v) : v;
  }
  return valid;
}

// The flat input index (over the spatial dims) of offset j of each output window.
Value OffsetIndex(Ctx& ctx, const Pool& g, const std::vector<int64_t>& j) {
  Value flat;
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(g.dims.size()) - 1; i >= 0; --i) {
    const Win& w = g.dims[i];
    std::vector<int64_t> idx;
    for (int64_t o = 0; o < w.out; ++o) idx.push_back(w.pos(o, j[i]) * stride);
    Value v = Along(ctx, ConstI64(ctx, idx), g.out, g.lead + i);
    flat = flat.valid() ? ctx.b.Binary("add", flat, v) : v;
    stride *= w.in;
  }
  return flat;
}

// One step of PyTorch's max scan: take the candidate where it is greater, NaN, or the first
// valid element of the window.
void MaxStep(Ctx& ctx, Value& best, Value& best_idx, Value v, Value idx, Value valid) {
  Value take = ctx.b.Compare(Cmp::GT, v, best);
  if (IsFloat(v.type.elem)) take = ctx.b.Binary("or", take, IsNan(ctx, v));
  take = ctx.b.Binary("or", take, ctx.b.Compare(Cmp::LT, best_idx, ctx.b.ConstantInt(0, best_idx.type)));
  if (valid.valid()) take = ctx.b.Binary("and", take, valid);
  best = ctx.b.Select(take, v, best);
  best_idx = ctx.b.Select(take, idx, best_idx);
}

// max_pool{2,3}d_with_indices(x, kernel, stride, padding, dilation, ceil_mode) -> (y, indices)
template <size_t N>
std::vector<Value> LowerMaxPool(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  Pool g = Geometry(x, ctx.out(0), a, N, 1, 4);
  Value padded = PadSpatial(ctx, x, g, 0);
  Value best = ctx.b.Extreme(false, {x.type.elem, g.out});
  Value best_idx = ctx.b.ConstantInt(-1, {ElemType::S64, g.out});
  ForEachOffset(g, [&](const std::vector<int64_t>& j) {
    MaxStep(ctx, best, best_idx, OffsetSlice(ctx, padded, g, j), OffsetIndex(ctx, g, j), OffsetValid(ctx, g, j));
  });
  return {best, ConvertTo(ctx, best_idx, ctx.out(1).elem)};
}

// Gradient of a max pool at saved flat spatial indices: grad_x[n, c, idx[n, c, o]] += g[n, c, o].
Value ScatterAtIndices(Ctx& ctx, Value g, Value indices, const TensorType& x_type, int64_t n) {
  int64_t lead = x_type.rank() - n, planes = 1, in = 1, out = 1;
  for (int64_t i = 0; i < x_type.rank(); ++i) (i < lead ? planes : in) *= x_type.dims[i];
  for (int64_t i = lead; i < g.type.rank(); ++i) out *= g.type.dims[i];
  Value idx = ctx.b.Reshape(ConvertTo(ctx, indices, ElemType::S64), {planes, out});
  Value base = ctx.b.Binary("multiply", ctx.b.Iota({ElemType::S64, {planes, out}}, 0),
                            ctx.b.ConstantInt(in, {ElemType::S64, {planes, out}}));
  idx = ctx.b.Reshape(ctx.b.Binary("add", idx, base), {planes * out});
  ElemType acc = AccumulatorType(x_type.elem);
  Value r = ScatterAddFlat(ctx, ConvertTo(ctx, g, acc), idx, planes * in);
  return ConvertTo(ctx, ctx.b.Reshape(r, x_type.dims), x_type.elem);
}

// max_pool{2,3}d_with_indices_backward(g, x, kernel, stride, padding, dilation, ceil_mode, indices)
template <size_t N>
std::vector<Value> LowerMaxPoolBackward(Ctx& ctx, const Args& a) {
  return {ScatterAtIndices(ctx, a.tensor(0), a.tensor(7), ctx.out(), N)};
}

// avg pooling's divisor for each output: divisor_override (any nonzero value, negative too, as
// on the CPU; Meta rejects 0), or the window's size clipped to the padded input
// (count_include_pad) or to the input. Empty windows get 1 (their sum is 0).
Value AvgDivisor(Ctx& ctx, const Pool& g, bool count_include_pad, int64_t divisor_override, ElemType acc) {
  TensorType t{acc, g.out};
  if (divisor_override != 0) return ctx.b.Constant(static_cast<double>(divisor_override), t);
  std::vector<std::vector<float>> per_dim;
  std::vector<bool> empty_any;
  Value divisor = ctx.b.Constant(1, t);
  for (size_t i = 0; i < g.dims.size(); ++i) {
    const Win& w = g.dims[i];
    std::vector<float> f;
    for (int64_t o = 0; o < w.out; ++o) {
      int64_t start = o * w.s - w.p, end = std::min(start + w.k, w.in + w.p);
      int64_t size = end - start;
      start = std::max<int64_t>(start, 0);
      end = std::min(end, w.in);
      int64_t count = count_include_pad ? size : end - start;
      f.push_back(static_cast<float>(end <= start ? 1 : count));
    }
    Value v = ConvertTo(ctx, Along(ctx, ConstF32(ctx, f), g.out, g.lead + static_cast<int64_t>(i)), acc);
    divisor = ctx.b.Binary("multiply", divisor, v);
  }
  return divisor;
}

// avg_pool{2,3}d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override?)
template <size_t N>
std::vector<Value> LowerAvgPool(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  Pool g = Geometry(x, ctx.out(), a, N, 1, -1);
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value padded = PadSpatial(ctx, ConvertTo(ctx, x, acc), g, 0);
  Value sum = ctx.b.Constant(0, {acc, g.out});
  ForEachOffset(g, [&](const std::vector<int64_t>& j) { sum = ctx.b.Binary("add", sum, OffsetSlice(ctx, padded, g, j)); });
  Value div = AvgDivisor(ctx, g, a.bool_(5), a.int_or(6, 0), acc);
  return {ConvertTo(ctx, ctx.b.Binary("divide", sum, div), ctx.out().elem)};
}

// avg_pool{2,3}d_backward(g, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override?):
// each output's g / divisor is added to every input of its window.
template <size_t N>
std::vector<Value> LowerAvgPoolBackward(Ctx& ctx, const Args& a) {
  Value x = a.tensor(1);
  Pool g = Geometry(x, a.tensor(0).type, a, N, 2, -1);
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value gd = ctx.b.Binary("divide", ConvertTo(ctx, a.tensor(0), acc), AvgDivisor(ctx, g, a.bool_(6), a.int_or(7, 0), acc));
  int64_t r = x.type.rank();
  std::vector<int64_t> padded_dims = x.type.dims;
  for (size_t i = 0; i < g.dims.size(); ++i) padded_dims[g.lead + i] += g.dims[i].p + g.dims[i].high();
  Value total = ctx.b.Constant(0, {acc, padded_dims});
  Value zero = ctx.b.Constant(0, {acc, {}});
  ForEachOffset(g, [&](const std::vector<int64_t>& j) {
    std::vector<int64_t> low(r, 0), high(r, 0), interior(r, 0);
    for (size_t i = 0; i < g.dims.size(); ++i) {
      const Win& w = g.dims[i];
      low[g.lead + i] = j[i] * w.d;
      high[g.lead + i] = padded_dims[g.lead + i] - (j[i] * w.d + (w.out - 1) * w.s + 1);
      interior[g.lead + i] = w.s - 1;
    }
    total = ctx.b.Binary("add", total, ctx.b.Pad(gd, zero, low, high, interior));
  });
  std::vector<int64_t> start(r, 0), limit = padded_dims, strides(r, 1);
  for (size_t i = 0; i < g.dims.size(); ++i) {
    start[g.lead + i] = g.dims[i].p;
    limit[g.lead + i] = g.dims[i].p + g.dims[i].in;
  }
  return {ConvertTo(ctx, ctx.b.Slice(total, start, limit, strides), ctx.out().elem)};
}

// Adaptive windows along one dim: output o covers [floor(o*in/out), ceil((o+1)*in/out)).
struct Adaptive {
  int64_t in, out, kmax = 0;
  std::vector<int64_t> start, end;
  Adaptive(int64_t in_, int64_t out_) : in(in_), out(out_) {
    for (int64_t o = 0; o < out; ++o) {
      start.push_back(o * in / out);
      end.push_back(((o + 1) * in + out - 1) / out);
      kmax = std::max(kmax, end.back() - start.back());
    }
  }
  // Window element j of every output (clamped into range) and whether it is inside the window.
  std::vector<int64_t> positions(int64_t j) const {
    std::vector<int64_t> p;
    for (int64_t o = 0; o < out; ++o) p.push_back(std::min(start[o] + j, in - 1));
    return p;
  }
  std::vector<bool> inside(int64_t j, bool* all) const {
    std::vector<bool> v;
    *all = true;
    for (int64_t o = 0; o < out; ++o) {
      v.push_back(start[o] + j < end[o]);
      *all &= v.back();
    }
    return v;
  }
  std::vector<float> counts() const {
    std::vector<float> c;
    for (int64_t o = 0; o < out; ++o) c.push_back(static_cast<float>(end[o] - start[o]));
    return c;
  }
};

std::vector<Adaptive> AdaptiveDims(const TensorType& in, const TensorType& out, size_t n) {
  std::vector<Adaptive> dims;
  int64_t lead = in.rank() - static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) dims.emplace_back(in.dims[lead + i], out.dims[lead + i]);
  return dims;
}

// Product of the window sizes of every output, broadcast to `dims`.
Value AdaptiveCounts(Ctx& ctx, const std::vector<Adaptive>& ad, const std::vector<int64_t>& dims, ElemType acc) {
  int64_t lead = static_cast<int64_t>(dims.size() - ad.size());
  Value c = ctx.b.Constant(1, {acc, dims});
  for (size_t i = 0; i < ad.size(); ++i)
    c = ctx.b.Binary("multiply", c, ConvertTo(ctx, Along(ctx, ConstF32(ctx, ad[i].counts()), dims, lead + i), acc));
  return c;
}

// _adaptive_avg_pool{2,3}d(x, output_size): sums over each dim's windows, then one division.
template <size_t N>
std::vector<Value> LowerAdaptiveAvgPool(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value x = ConvertTo(ctx, a.tensor(0), acc);
  auto ad = AdaptiveDims(x.type, ctx.out(), N);
  int64_t lead = x.type.rank() - static_cast<int64_t>(N);
  for (size_t i = 0; i < N; ++i) {
    int64_t dim = lead + static_cast<int64_t>(i);
    Value sum;
    for (int64_t j = 0; j < ad[i].kmax; ++j) {
      Value v = Pick(ctx, x, dim, ad[i].positions(j));
      bool all;
      std::vector<bool> inside = ad[i].inside(j, &all);
      if (!all) v = ctx.b.Select(Along(ctx, ConstPred(ctx, inside), v.type.dims, dim), v, ctx.b.Constant(0, v.type));
      sum = sum.valid() ? ctx.b.Binary("add", sum, v) : v;
    }
    x = sum;
  }
  Value y = ctx.b.Binary("divide", x, AdaptiveCounts(ctx, ad, x.type.dims, acc));
  return {ConvertTo(ctx, y, ctx.out().elem)};
}

// _adaptive_avg_pool{2,3}d_backward(g, x): g / count spread over each window, dim by dim.
template <size_t N>
std::vector<Value> LowerAdaptiveAvgPoolBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value g = ConvertTo(ctx, a.tensor(0), acc);
  auto ad = AdaptiveDims(a.tensor(1).type, g.type, N);
  int64_t lead = g.type.rank() - static_cast<int64_t>(N);
  g = ctx.b.Binary("divide", g, AdaptiveCounts(ctx, ad, g.type.dims, acc));
  for (size_t i = 0; i < N; ++i) {
    int64_t dim = lead + static_cast<int64_t>(i);
    Value sum;
    for (int64_t j = 0; j < ad[i].kmax; ++j) {
      bool all;
      std::vector<bool> inside = ad[i].inside(j, &all);
      Value v = g;
      if (!all) v = ctx.b.Select(Along(ctx, ConstPred(ctx, inside), g.type.dims, dim), g, ctx.b.Constant(0, g.type));
      v = PickTranspose(ctx, v, dim, ad[i].positions(j), ad[i].in);
      sum = sum.valid() ? ctx.b.Binary("add", sum, v) : v;
    }
    g = sum;
  }
  return {ConvertTo(ctx, g, ctx.out().elem)};
}

// adaptive_max_pool{2,3}d(x, output_size) -> (y, indices). Separable: the last dim's windows
// first, each pass keeping the flat index of its pick, so the result is PyTorch's row-major
// scan (the first maximum, or the last NaN).
template <size_t N>
std::vector<Value> LowerAdaptiveMaxPool(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  auto ad = AdaptiveDims(x.type, ctx.out(0), N);
  int64_t lead = x.type.rank() - static_cast<int64_t>(N);
  Value val = x, idx = ctx.b.ConstantInt(0, {ElemType::S64, x.type.dims});
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(N) - 1; i >= 0; --i) {
    int64_t dim = lead + i;
    std::vector<int64_t> dims = val.type.dims;
    dims[dim] = ad[i].out;
    Value best = ctx.b.Extreme(false, {x.type.elem, dims});
    Value best_idx = ctx.b.ConstantInt(-1, {ElemType::S64, dims});
    for (int64_t j = 0; j < ad[i].kmax; ++j) {
      std::vector<int64_t> pos = ad[i].positions(j), scaled;
      for (int64_t p : pos) scaled.push_back(p * stride);
      Value cand_idx = ctx.b.Binary("add", Pick(ctx, idx, dim, pos), Along(ctx, ConstI64(ctx, scaled), dims, dim));
      bool all;
      std::vector<bool> inside = ad[i].inside(j, &all);
      Value valid = all ? Value{} : Along(ctx, ConstPred(ctx, inside), dims, dim);
      MaxStep(ctx, best, best_idx, Pick(ctx, val, dim, pos), cand_idx, valid);
    }
    val = best;
    idx = best_idx;
    stride *= ad[i].in;
  }
  return {val, ConvertTo(ctx, idx, ctx.out(1).elem)};
}

// adaptive_max_pool{2,3}d_backward(g, x, indices)
template <size_t N>
std::vector<Value> LowerAdaptiveMaxPoolBackward(Ctx& ctx, const Args& a) {
  return {ScatterAtIndices(ctx, a.tensor(0), a.tensor(2), ctx.out(), N)};
}

// ---- fractional max pooling (Graham 2014): windows at pseudo-random strides ----

// Rounds f32 values to the nearest `bits`-bit-shorter mantissa (ties to even) with integer
// ops, so no compiler pass can elide it: bf16 drops 16 bits, f16 13 (for f16's normal range).
Value RoundMantissa(Ctx& ctx, Value v, int bits) {
  TensorType u{ElemType::U32, v.type.dims};
  Value w = ctx.b.BitcastConvert(v, u);
  Value lsb = ctx.b.Binary("and", ctx.b.Binary("shift_right_logical", w, ctx.b.ConstantInt(bits, u)), ctx.b.ConstantInt(1, u));
  w = Add(ctx, w, Add(ctx, lsb, ctx.b.ConstantInt((int64_t{1} << (bits - 1)) - 1, u)));
  w = ctx.b.Binary("and", w, ctx.b.ConstantInt(static_cast<int64_t>(0xFFFFFFFFu << bits) & 0xFFFFFFFF, u));
  return ctx.b.BitcastConvert(w, v.type);
}

// Window starts along one dim for every plane, from its sample u (planes,):
// start[i] = int((i + u) * alpha) - int(u * alpha), alpha = (in - k) / (out - 1), the last
// start in - k. PyTorch computes this in the input's type, rounding every step for bf16/f16.
Value FractionalStarts(Ctx& ctx, Value u, ElemType elem, int64_t in, int64_t out, int64_t k) {
  int64_t planes = u.type.dims[0];
  TensorType last{ElemType::S64, {planes, 1}};
  Value last_start = ctx.b.ConstantInt(in - k, last);
  if (out == 1) return last_start;
  ElemType ct = elem == ElemType::F64 ? ElemType::F64 : ElemType::F32;
  int bits = elem == ElemType::BF16 ? 16 : elem == ElemType::F16 ? 13 : 0;
  auto R = [&](Value v) { return bits ? RoundMantissa(ctx, v, bits) : v; };
  TensorType t{ct, {planes, out - 1}};
  Value uu = ctx.b.BroadcastInDim(ConvertTo(ctx, u, ct), t.dims, {0});
  Value alpha = R(ctx.b.Binary("divide", R(ctx.b.Constant(static_cast<double>(in - k), t)),
                               R(ctx.b.Constant(static_cast<double>(out - 1), t))));
  Value i = ctx.b.Iota(t, 1);
  Value hi = ctx.b.Convert(R(Mul(ctx, R(Add(ctx, i, uu)), alpha)), ElemType::S64);  // truncation, as the cast
  Value lo = ctx.b.Convert(R(Mul(ctx, uu, alpha)), ElemType::S64);
  return ctx.b.Concatenate({Sub(ctx, hi, lo), last_start}, 1);
}

// fractional_max_pool{2,3}d(x, kernel_size, output_size, random_samples (planes, N)) -> (y, indices).
// The samples are the op's input (drawn by the caller), so the windows are run-time values:
// each kernel offset is one gather, scanned in row-major order as the CPU kernel does (the
// first maximum, or the last NaN). The 2-d op takes W's sample first, the 3-d op T's.
template <size_t N>
std::vector<Value> LowerFractionalMaxPool(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  const auto& k = a.ints(1);
  const TensorType& out = ctx.out(0);
  int64_t lead = x.type.rank() - static_cast<int64_t>(N), planes = 1, in_numel = 1;
  for (int64_t i = 0; i < lead; ++i) planes *= x.type.dims[i];
  std::vector<int64_t> grid = {planes}, in_stride(N, 1);
  for (size_t d = 0; d < N; ++d) grid.push_back(out.dims[lead + d]);
  for (int64_t d = static_cast<int64_t>(N) - 1; d >= 0; --d) {
    in_stride[d] = in_numel;
    in_numel *= x.type.dims[lead + d];
  }
  Value samples = ctx.b.Reshape(a.tensor(3), {planes, static_cast<int64_t>(N)});
  std::vector<Value> starts;  // (planes, out_d) s64
  for (size_t d = 0; d < N; ++d) {
    int64_t column = N == 2 ? 1 - static_cast<int64_t>(d) : static_cast<int64_t>(d);
    Value u = ctx.b.Reshape(ctx.b.Slice(samples, {0, column}, {planes, column + 1}, {1, 1}), {planes});
    starts.push_back(FractionalStarts(ctx, u, x.type.elem, x.type.dims[lead + d], grid[d + 1], k[d]));
  }
  TensorType grid_s64{ElemType::S64, grid};
  Value base = Mul(ctx, ctx.b.Iota(grid_s64, 0), ctx.b.ConstantInt(in_numel, grid_s64));
  Value flat_x = ctx.b.Reshape(x, {planes * in_numel});
  Value best = ctx.b.Extreme(false, {x.type.elem, grid});
  Value best_idx = ctx.b.ConstantInt(-1, grid_s64);
  std::vector<int64_t> j(N, 0);
  while (true) {
    Value flat = ctx.b.ConstantInt(0, grid_s64);
    for (size_t d = 0; d < N; ++d) {
      Value pos = Add(ctx, starts[d], ctx.b.ConstantInt(j[d], starts[d].type));
      pos = Mul(ctx, pos, ctx.b.ConstantInt(in_stride[d], pos.type));
      flat = Add(ctx, flat, ctx.b.BroadcastInDim(pos, grid, {0, static_cast<int64_t>(d) + 1}));
    }
    std::vector<int64_t> coord_dims = grid;
    coord_dims.push_back(1);
    Value v = GatherPoints(ctx, flat_x, ctx.b.Reshape(Add(ctx, flat, base), coord_dims));
    MaxStep(ctx, best, best_idx, v, flat, Value{});
    int64_t d = static_cast<int64_t>(N) - 1;
    while (d >= 0 && ++j[d] == k[d]) j[d--] = 0;
    if (d < 0) break;
  }
  return {ctx.b.Reshape(best, out.dims), ConvertTo(ctx, ctx.b.Reshape(best_idx, out.dims), ctx.out(1).elem)};
}

// fractional_max_pool{2,3}d_backward(g, x, kernel_size, output_size, indices)
template <size_t N>
std::vector<Value> LowerFractionalMaxPoolBackward(Ctx& ctx, const Args& a) {
  return {ScatterAtIndices(ctx, a.tensor(0), a.tensor(4), ctx.out(), N)};
}

// max_unpool2d(x, indices, output_size) / max_unpool3d(x, indices, output_size, stride, padding):
// zeros of the output shape with y[n, c, indices[n, c, i]] = x[n, c, i]. Indices repeat only
// where pool windows overlapped, with the same value; one outside the output plane raises,
// as on the CPU.
template <size_t N>
std::vector<Value> LowerMaxUnpool(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  const TensorType& out = ctx.out();
  int64_t lead = out.rank() - static_cast<int64_t>(N), planes = 1, plane = 1;
  for (int64_t i = 0; i < out.rank(); ++i) (i < lead ? planes : plane) *= out.dims[i];
  int64_t in = planes ? x.type.numel() / planes : 0;
  TensorType idx_type{ElemType::S64, {planes, in}};
  Value idx = ctx.b.Reshape(ConvertTo(ctx, a.tensor(1), ElemType::S64), idx_type.dims);
  ctx.AddCheck(IndexOutOfRange(ctx, idx, plane, false),
               "max_unpool" + std::to_string(N) + "d(): found an invalid max index (outside the output size)");
  idx = Add(ctx, idx, Mul(ctx, ctx.b.Iota(idx_type, 0), ctx.b.ConstantInt(plane, idx_type)));
  Value y = ScatterPoints(ctx, ctx.b.Constant(0, {out.elem, {planes * plane}}), ctx.b.Reshape(idx, {planes * in, 1}),
                          ctx.b.Reshape(x, {planes * in}), "");
  return {ctx.b.Reshape(y, out.dims)};
}

}  // namespace

TPU_LOWERING("aten::_adaptive_avg_pool2d", LowerAdaptiveAvgPool<2>);
TPU_LOWERING("aten::_adaptive_avg_pool2d_backward", LowerAdaptiveAvgPoolBackward<2>);
TPU_LOWERING("aten::_adaptive_avg_pool3d", LowerAdaptiveAvgPool<3>);
TPU_LOWERING("aten::_adaptive_avg_pool3d_backward", LowerAdaptiveAvgPoolBackward<3>);
TPU_LOWERING("aten::adaptive_max_pool2d", LowerAdaptiveMaxPool<2>);
TPU_LOWERING("aten::adaptive_max_pool2d_backward", LowerAdaptiveMaxPoolBackward<2>);
TPU_LOWERING("aten::adaptive_max_pool3d", LowerAdaptiveMaxPool<3>);
TPU_LOWERING("aten::adaptive_max_pool3d_backward", LowerAdaptiveMaxPoolBackward<3>);
TPU_LOWERING("aten::avg_pool2d", LowerAvgPool<2>);
TPU_LOWERING("aten::avg_pool2d_backward", LowerAvgPoolBackward<2>);
TPU_LOWERING("aten::avg_pool3d", LowerAvgPool<3>);
TPU_LOWERING("aten::avg_pool3d_backward", LowerAvgPoolBackward<3>);
TPU_LOWERING("aten::fractional_max_pool2d", LowerFractionalMaxPool<2>);
TPU_LOWERING("aten::fractional_max_pool2d_backward", LowerFractionalMaxPoolBackward<2>);
TPU_LOWERING("aten::fractional_max_pool3d", LowerFractionalMaxPool<3>);
TPU_LOWERING("aten::fractional_max_pool3d_backward", LowerFractionalMaxPoolBackward<3>);
TPU_LOWERING("aten::max_pool2d_with_indices", LowerMaxPool<2>);
TPU_LOWERING("aten::max_pool2d_with_indices_backward", LowerMaxPoolBackward<2>);
TPU_LOWERING("aten::max_pool3d_with_indices", LowerMaxPool<3>);
TPU_LOWERING("aten::max_pool3d_with_indices_backward", LowerMaxPoolBackward<3>);
TPU_LOWERING("aten::max_unpool2d", LowerMaxUnpool<2>);
TPU_LOWERING("aten::max_unpool3d", LowerMaxUnpool<3>);

}  // namespace tpu::lowering
