// Histograms with explicit bins (histogram, histogramdd): every sample finds its bin among the
// edges (the count of edges <= x, minus one; the last edge closes the last bin), out-of-range
// and NaN samples drop out, and a scatter-add sums ones or weights into the flattened bins.
#include "helpers.h"

namespace tpu::lowering {
namespace {

// Edges b + 1 from lo to hi as PyTorch's linspace: the first half counts up from lo, the
// second half down from hi (both ends exact).
Value Linspace(Ctx& ctx, Value lo, Value hi, int64_t bins) {
  TensorType t{lo.type.elem, {bins + 1}};
  Value l = BroadcastTo(ctx, lo, t.dims), h = BroadcastTo(ctx, hi, t.dims);
  Value step = Div(ctx, Sub(ctx, h, l), ctx.b.Constant(static_cast<double>(bins), t));
  Value i = ctx.b.Convert(ctx.b.Iota({ElemType::S64, t.dims}, 0), t.elem);
  Value up = Add(ctx, l, Mul(ctx, i, step));
  Value down = Sub(ctx, h, Mul(ctx, Sub(ctx, ctx.b.Constant(static_cast<double>(bins), t), i), step));
  return ctx.b.Select(ctx.b.Compare(Cmp::LT, i, ctx.b.Constant(static_cast<double>((bins + 1) / 2), t)), up, down);
}

// The edges of dim d for a bin count: the range if given, else the data's min and max
// (widened by 1/2 on both sides when equal).
Value EdgesFor(Ctx& ctx, Value col, int64_t bins, const std::vector<double>& range, size_t d) {
  TensorType s{col.type.elem, {}};
  Value lo, hi;
  if (!range.empty()) {
    lo = ctx.b.Constant(range[2 * d], s);
    hi = ctx.b.Constant(range[2 * d + 1], s);
  } else if (col.type.numel() == 0) {
    lo = ctx.b.Constant(0, s);
    hi = ctx.b.Constant(0, s);
  } else {
    lo = ctx.b.Reduce(col, ctx.b.Extreme(true, s), {0}, "minimum");
    hi = ctx.b.Reduce(col, ctx.b.Extreme(false, s), {0}, "maximum");
  }
  Value same = ctx.b.Compare(Cmp::EQ, lo, hi);
  lo = ctx.b.Select(same, Sub(ctx, lo, ctx.b.Constant(0.5, s)), lo);
  hi = ctx.b.Select(same, Add(ctx, hi, ctx.b.Constant(0.5, s)), hi);
  return Linspace(ctx, lo, hi, bins);
}

// Column d of x [N, D] as [N].
Value Col(Ctx& ctx, Value x, int64_t d) {
  int64_t n = x.type.dims[0];
  return ctx.b.Reshape(ctx.b.Slice(x, {0, d}, {n, d + 1}, {1, 1}), {n});
}

// The histogram of x [N, D] over per-dim edges, optionally weighted and as a density.
Value HistogramDD(Ctx& ctx, Value x, const std::vector<Value>& edges, Value weight, bool density, const TensorType& out) {
  int64_t n = x.type.dims[0], total = 1;
  for (const Value& e : edges) total *= e.type.dims[0] - 1;
  Value flat = ctx.b.ConstantInt(0, {ElemType::S64, {n}});
  Value valid = ctx.b.Constant(1, {ElemType::Pred, {n}});
  int64_t stride = total;
  for (size_t d = 0; d < edges.size(); ++d) {
    Value col = Col(ctx, x, static_cast<int64_t>(d)), e = edges[d];
    int64_t m = e.type.dims[0], bins = m - 1;
    stride /= bins;
    Value le = ctx.b.Compare(Cmp::LE, ctx.b.BroadcastInDim(e, {n, m}, {1}), ctx.b.BroadcastInDim(col, {n, m}, {0}));
    Value idx = Sub(ctx, ctx.b.Reduce(ctx.b.Convert(le, ElemType::S64), ctx.b.ConstantInt(0, {ElemType::S64, {}}), {1}, "add"),
                    ctx.b.ConstantInt(1, {ElemType::S64, {n}}));
    idx = ctx.b.Select(ctx.b.Compare(Cmp::EQ, idx, ctx.b.ConstantInt(bins, idx.type)), ctx.b.ConstantInt(bins - 1, idx.type), idx);
    Value first = ctx.b.Slice(e, {0}, {1}, {1}), last = ctx.b.Slice(e, {m - 1}, {m}, {1});
    Value inside = And(ctx, ctx.b.Compare(Cmp::GE, col, BroadcastTo(ctx, ctx.b.Reshape(first, {}), {n})),
                       ctx.b.Compare(Cmp::LE, col, BroadcastTo(ctx, ctx.b.Reshape(last, {}), {n})));
    valid = And(ctx, valid, inside);
    flat = Add(ctx, flat, Mul(ctx, idx, ctx.b.ConstantInt(stride, idx.type)));
  }
  flat = ctx.b.Select(valid, flat, ctx.b.ConstantInt(total, flat.type));  // dropped by the scatter
  TensorType ht{out.elem, {total}};
  Value w = weight.valid() ? ConvertTo(ctx, weight, out.elem) : ctx.b.Constant(1, {out.elem, {n}});
  Value hist = n == 0 ? ctx.b.Constant(0, ht) : ScatterPoints(ctx, ctx.b.Constant(0, ht), ctx.b.Reshape(flat, {n, 1}), w, "add");
  hist = ctx.b.Reshape(hist, out.dims);
  if (!density) return hist;
  Value sum = ctx.b.Reduce(hist, ctx.b.Constant(0, {out.elem, {}}), [&] {
    std::vector<int64_t> all(out.rank());
    for (int64_t i = 0; i < out.rank(); ++i) all[i] = i;
    return all;
  }(), "add");
  hist = Div(ctx, hist, BroadcastTo(ctx, sum, out.dims));
  for (size_t d = 0; d < edges.size(); ++d) {
    int64_t m = edges[d].type.dims[0];
    Value width = Sub(ctx, ctx.b.Slice(edges[d], {1}, {m}, {1}), ctx.b.Slice(edges[d], {0}, {m - 1}, {1}));
    hist = Div(ctx, hist, ctx.b.BroadcastInDim(ConvertTo(ctx, width, out.elem), out.dims, {static_cast<int64_t>(d)}));
  }
  return hist;
}

std::vector<double> Range(const Args& a) {
  return a.is_none("range") ? std::vector<double>{} : a.raw(a.index("range")).doubles;
}

// histogram.bin_ct(self, bins, range, weight, density) -> (hist, bin_edges)
std::vector<Value> LowerHistogramBins(Ctx& ctx, const Args& a) {
  Value x = a.tensor("self");
  x = ctx.b.Reshape(x, {x.type.numel(), 1});
  Value edges = EdgesFor(ctx, Col(ctx, x, 0), a.int_("bins"), Range(a), 0);
  Value w = a.optional_tensor("weight");
  if (w.valid()) w = ctx.b.Reshape(w, {w.type.numel()});
  return {HistogramDD(ctx, x, {edges}, w, a.bool_or("density", false), ctx.out(0)), ConvertTo(ctx, edges, ctx.out(1).elem)};
}

// histogram.bins_tensor(self, bins, weight, density) -> (hist, bins)
std::vector<Value> LowerHistogramEdges(Ctx& ctx, const Args& a) {
  Value x = a.tensor("self");
  x = ctx.b.Reshape(x, {x.type.numel(), 1});
  Value edges = ConvertTo(ctx, a.tensor("bins"), x.type.elem);
  Value w = a.optional_tensor("weight");
  if (w.valid()) w = ctx.b.Reshape(w, {w.type.numel()});
  return {HistogramDD(ctx, x, {edges}, w, a.bool_or("density", false), ctx.out(0)), CastTo(ctx, a.tensor("bins"), ctx.out(1))};
}

// Samples of histogramdd: self [..., D] as [N, D].
Value Samples(Ctx& ctx, Value x) {
  int64_t d = x.type.dims.back();
  return ctx.b.Reshape(x, {d ? x.type.numel() / d : 0, d});
}

std::vector<Value> EdgesDD(Ctx& ctx, const Args& a, Value x) {
  std::vector<Value> edges;
  const auto& bins = a.ints("bins");
  for (size_t d = 0; d < bins.size(); ++d) edges.push_back(EdgesFor(ctx, Col(ctx, x, static_cast<int64_t>(d)), bins[d], Range(a), d));
  return edges;
}

Value WeightOf(Ctx& ctx, const Args& a) {
  Value w = a.optional_tensor("weight");
  return w.valid() ? ctx.b.Reshape(w, {w.type.numel()}) : w;
}

// _histogramdd_bin_edges(self, bins, range, weight, density) -> edges per dim
std::vector<Value> LowerHistogramddEdges(Ctx& ctx, const Args& a) {
  std::vector<Value> edges = EdgesDD(ctx, a, Samples(ctx, a.tensor("self")));
  for (size_t i = 0; i < edges.size(); ++i) edges[i] = ConvertTo(ctx, edges[i], ctx.out(i).elem);
  return edges;
}

// _histogramdd_from_bin_cts(self, bins, range, weight, density)
std::vector<Value> LowerHistogramddCounts(Ctx& ctx, const Args& a) {
  Value x = Samples(ctx, a.tensor("self"));
  return {HistogramDD(ctx, x, EdgesDD(ctx, a, x), WeightOf(ctx, a), a.bool_or("density", false), ctx.out())};
}

// _histogramdd_from_bin_tensors(self, bins, weight, density)
std::vector<Value> LowerHistogramddTensors(Ctx& ctx, const Args& a) {
  Value x = Samples(ctx, a.tensor("self"));
  std::vector<Value> edges;
  for (const Value& e : a.tensors("bins")) edges.push_back(ConvertTo(ctx, e, x.type.elem));
  return {HistogramDD(ctx, x, edges, WeightOf(ctx, a), a.bool_or("density", false), ctx.out())};
}

}  // namespace

TPU_LOWERING("aten::_histogramdd_bin_edges", LowerHistogramddEdges);
TPU_LOWERING("aten::_histogramdd_from_bin_cts", LowerHistogramddCounts);
TPU_LOWERING("aten::_histogramdd_from_bin_tensors", LowerHistogramddTensors);
TPU_LOWERING("aten::histogram.bin_ct", LowerHistogramBins);
TPU_LOWERING("aten::histogram.bins_tensor", LowerHistogramEdges);

}  // namespace tpu::lowering
