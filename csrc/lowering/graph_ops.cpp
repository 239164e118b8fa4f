// Graph-only lowerings of ops that eager runs without a lowering of its own: copies and
// factories are kernels or composites in csrc/aten, and x[indices] (index.Tensor) needs
// PyTorch's index errors and data-dependent masks there, which a compiled graph cannot have.
// They appear as nodes of torch.compile graphs after core ATen decomposition.
#include <algorithm>

#include "helpers.h"
#include "lowering.h"

namespace tpu::lowering {
namespace {

// _to_copy, clone, copy(self, src), lift_fresh_copy: the value converted to the output type.
std::vector<Value> LowerCopyOf0(Ctx& ctx, const Args& a) { return {CastTo(ctx, a.tensor(0), ctx.out())}; }
std::vector<Value> LowerCopyOf1(Ctx& ctx, const Args& a) { return {CastTo(ctx, a.tensor(1), ctx.out())}; }

// full(size, v), scalar_tensor(v), full_like(x, v), new_full(x, size, v): v everywhere.
template <size_t kValueArg>
std::vector<Value> LowerFill(Ctx& ctx, const Args& a) {
  return {CastTo(ctx, a.tensor(kValueArg), ctx.out())};
}

// zeros, ones, empty (uninitialised in PyTorch; zeros here) and their _like / new_ forms.
template <int kValue>
std::vector<Value> LowerConstant(Ctx& ctx, const Args&) { return {ctx.b.Constant(kValue, ctx.out())}; }

// arange(start, end, step)[i] = start + i * step, computed in f32 (half types) or the
// output type, as PyTorch's kernels do.
std::vector<Value> ArangeFrom(Ctx& ctx, Value start, Value step) {
  const TensorType& t = ctx.out();
  TensorType c{IsFloat(t.elem) ? AccumulatorType(t.elem) : ElemType::S64, t.dims};
  Value i = ctx.b.Iota(c, 0);
  Value v = ctx.b.Binary("add", CastTo(ctx, start, c), ctx.b.Binary("multiply", i, CastTo(ctx, step, c)));
  return {ConvertTo(ctx, v, t.elem)};
}
std::vector<Value> LowerArange(Ctx& ctx, const Args&) {
  return ArangeFrom(ctx, ctx.b.Constant(0, {ElemType::S64, {}}), ctx.b.Constant(1, {ElemType::S64, {}}));
}
std::vector<Value> LowerArangeStart(Ctx& ctx, const Args& a) {
  return ArangeFrom(ctx, a.tensor(0), ctx.b.Constant(1, {ElemType::S64, {}}));
}
std::vector<Value> LowerArangeStartStep(Ctx& ctx, const Args& a) { return ArangeFrom(ctx, a.tensor(0), a.tensor(2)); }

// prims.fma(a, b, c) = a * b + c (the foreach optimizers' decompositions use it).
std::vector<Value> LowerFma(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  TensorType c{AccumulatorType(t.elem), t.dims};
  Value p = ctx.b.Binary("multiply", CastTo(ctx, a.tensor(0), c), CastTo(ctx, a.tensor(1), c));
  return {ConvertTo(ctx, ctx.b.Binary("add", p, CastTo(ctx, a.tensor(2), c)), t.elem)};
}

// slice_scatter(self, src, dim, start, end, step): self with self[start:end:step] = src.
// The strided case pads src into place (interior padding = step - 1) and selects it.
std::vector<Value> LowerSliceScatter(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t), src = ConvertTo(ctx, a.tensor(1), t.elem);
  if (t.rank() == 0 || src.type.numel() == 0) return {self};
  int64_t dim = WrapDim(a.int_or(2, 0), t.rank()), size = t.dims[dim];
  int64_t start = a.is_none(3) ? 0 : a.int_(3);
  if (start < 0) start += size;
  start = std::min(std::max<int64_t>(start, 0), size);
  int64_t step = a.int_or(5, 1), n = src.type.dims[dim];
  if (step == 1) {
    std::vector<int64_t> at(t.rank(), 0);
    at[dim] = start;
    return {ctx.b.DynamicUpdateSlice(self, src, at)};
  }
  int64_t last = start + (n - 1) * step;
  std::vector<int64_t> lo(t.rank(), 0), hi(t.rank(), 0), interior(t.rank(), 0);
  lo[dim] = start;
  hi[dim] = size - last - 1;
  interior[dim] = step - 1;
  Value placed = ctx.b.Pad(src, ctx.b.Constant(0, {t.elem, {}}), lo, hi, interior);
  TensorType it{ElemType::S64, t.dims};
  Value i = ctx.b.Binary("subtract", ctx.b.Iota(it, dim), ctx.b.ConstantInt(start, it));
  Value in_range = ctx.b.Binary("and", ctx.b.Compare(Cmp::GE, i, ctx.b.ConstantInt(0, it)),
                                ctx.b.Compare(Cmp::LE, i, ctx.b.ConstantInt(last - start, it)));
  Value on_step = ctx.b.Compare(Cmp::EQ, ctx.b.Binary("remainder", i, ctx.b.ConstantInt(step, it)),
                                ctx.b.ConstantInt(0, it));
  return {ctx.b.Select(ctx.b.Binary("and", in_range, on_step), placed, self)};
}

// select_scatter(self, src, dim, index): self with self.select(dim, index) = src.
std::vector<Value> LowerSelectScatter(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t);
  int64_t dim = WrapDim(a.int_(2), t.rank()), index = a.int_(3);
  if (index < 0) index += t.dims[dim];
  std::vector<int64_t> dims = t.dims, at(t.rank(), 0);
  dims[dim] = 1;
  at[dim] = index;
  Value src = ctx.b.Reshape(ConvertTo(ctx, a.tensor(1), t.elem), dims);
  return {ctx.b.DynamicUpdateSlice(self, src, at)};
}

// embedding(weight, indices) = weight[indices]: index_select of the flattened indices.
std::vector<Value> LowerEmbedding(Ctx& ctx, const Args& a) {
  static const LowerFn index_select = Find("aten::index_select");
  Value weight = a.tensor(0), indices = a.tensor(1);
  int64_t n = indices.type.numel();
  std::vector<int64_t> rows = weight.type.dims;
  rows[0] = n;
  std::vector<Arg> args(3);
  args[0].kind = Arg::Kind::Tensor;
  args[0].value = weight;
  args[1].kind = Arg::Kind::Int;
  args[2].kind = Arg::Kind::Tensor;
  args[2].value = ctx.b.Reshape(indices, {n});
  Ctx sub{ctx.b, {{ctx.out().elem, rows}}, ctx.common};
  Value rows_of = index_select(sub, Args(args)).at(0);
  for (auto& c : sub.checks) ctx.checks.push_back(c);
  return {ctx.b.Reshape(rows_of, ctx.out().dims)};
}

// _scaled_dot_product_fused_attention_overrideable(q, k, v, attn_bias?, dropout_p, is_causal,
// return_debug_mask, *, scale?) -> (out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
// philox_seed, philox_offset, debug_attn_mask): eager's kernel (csrc/aten/nn_ops.cpp) calls
// torch_tpu::_sdpa_forward; a graph calls its lowering. The slots eager leaves empty (and the
// two sizes) are not values of the program.
std::vector<Value> LowerSdpaOverrideable(Ctx& ctx, const Args& a) {
  static const LowerFn forward = Find("torch_tpu::_sdpa_forward");
  if (!forward) throw Unsupported("no lowering for torch_tpu::_sdpa_forward");
  std::vector<Arg> args;
  for (size_t i = 0; i < 8; ++i) args.push_back(i < a.size() ? a.raw(i) : Arg{});
  args.push_back(Arg{});  // generator: none (dropout then runs eagerly)
  Ctx sub{ctx.b, {ctx.out(0), ctx.out(1), ctx.out(6), ctx.out(7)}, ctx.common};
  std::vector<Value> r = forward(sub, Args(args));
  for (auto& c : sub.checks) ctx.checks.push_back(c);
  std::vector<Value> out;
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    if (i == 0 || i == 1) out.push_back(r[i]);
    else if (i == 6 || i == 7) out.push_back(r[i - 4]);
    else out.push_back(ctx.b.Constant(0, ctx.out(i)));
  }
  return out;
}

// Stacks per-dim coordinate arrays (all of shape `dims`) into [*dims, n] gather/scatter indices.
Value StackCoords(Ctx& ctx, const std::vector<Value>& coords, const std::vector<int64_t>& dims) {
  std::vector<int64_t> one = dims;
  one.push_back(1);
  std::vector<Value> parts;
  for (const Value& c : coords) parts.push_back(ctx.b.Reshape(BroadcastTo(ctx, c, dims), one));
  return ctx.b.Concatenate(parts, static_cast<int64_t>(dims.size()));
}

// Advanced indexing x[i0, i1, ...] with tensors on some dims (None on the others). The
// index tensors broadcast to B; the result is x's dims with the indexed ones replaced by B,
// in place when the indexed dims are adjacent, else in front (NumPy's rule).
struct Indexing {
  std::vector<int64_t> indexed, rest;  // dims of x with and without an index
  std::vector<int64_t> batch;          // B
  Value coords;                        // [*B, k] s64 coordinates into the indexed dims
  bool in_place = false;               // B sits at the position of the first indexed dim
};

Indexing PrepareIndexing(Ctx& ctx, const Value& x, const std::vector<Value>& indices) {
  Indexing ix;
  int64_t r = x.type.rank();
  if (static_cast<int64_t>(indices.size()) > r) throw Unsupported("too many indices");
  std::vector<Value> used;
  for (int64_t d = 0; d < r; ++d) {
    bool has = d < static_cast<int64_t>(indices.size()) && indices[d].valid();
    (has ? ix.indexed : ix.rest).push_back(d);
    if (!has) continue;
    if (indices[d].type.elem == ElemType::Pred) throw Unsupported("boolean mask index");
    // Never clamped silently: an index out of range guards the result (as eager's lowering).
    if (indices[d].type.numel() > 0)
      ctx.AddCheck(IndexOutOfRange(ctx, indices[d], x.type.dims[d], true),
                   "index: index out of range: an index is out of bounds for dimension " + std::to_string(d) +
                       " with size " + std::to_string(x.type.dims[d]));
    used.push_back(WrapIndex(ctx, indices[d], x.type.dims[d]));
  }
  if (used.empty()) throw Unsupported("index without index tensors");
  for (const Value& v : used) {  // broadcast shape of the index tensors
    const auto& d = v.type.dims;
    if (d.size() > ix.batch.size()) ix.batch.insert(ix.batch.begin(), d.size() - ix.batch.size(), 1);
    for (size_t i = 0; i < d.size(); ++i) {
      int64_t& b = ix.batch[ix.batch.size() - d.size() + i];
      if (b == 1) b = d[i];
    }
  }
  ix.coords = StackCoords(ctx, used, ix.batch);
  ix.in_place = ix.indexed.back() - ix.indexed.front() + 1 == static_cast<int64_t>(ix.indexed.size());
  return ix;
}

// x with its indexed dims moved to the front.
std::vector<int64_t> IndexedFirst(const Indexing& ix) {
  std::vector<int64_t> perm = ix.indexed;
  perm.insert(perm.end(), ix.rest.begin(), ix.rest.end());
  return perm;
}

// Permutation from [B, rest] order to the result order ([pre, B, post] when in place).
std::vector<int64_t> ResultOrder(const Indexing& ix) {
  int64_t nb = static_cast<int64_t>(ix.batch.size()), nr = static_cast<int64_t>(ix.rest.size());
  std::vector<int64_t> perm;
  int64_t pre = ix.in_place ? ix.indexed.front() : 0;
  for (int64_t i = 0; i < pre; ++i) perm.push_back(nb + i);
  for (int64_t i = 0; i < nb; ++i) perm.push_back(i);
  for (int64_t i = pre; i < nr; ++i) perm.push_back(nb + i);
  return perm;
}

std::string Iota(int64_t from, int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(from + i);
  return shlo::JoinInts(v);
}

// index.Tensor(x, indices) = x[indices] (gather).
std::vector<Value> LowerIndex(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  Indexing ix = PrepareIndexing(ctx, x, a.tensors(1));
  int64_t k = static_cast<int64_t>(ix.indexed.size()), nb = static_cast<int64_t>(ix.batch.size());
  Value xt = ctx.b.Transpose(x, IndexedFirst(ix));
  std::vector<int64_t> slice(k, 1), dims = ix.batch;
  for (int64_t d : ix.rest) {
    slice.push_back(x.type.dims[d]);
    dims.push_back(x.type.dims[d]);
  }
  std::string attrs = "dimension_numbers = #stablehlo.gather<offset_dims = [" + Iota(nb, ix.rest.size()) +
                      "], collapsed_slice_dims = [" + Iota(0, k) + "], start_index_map = [" + Iota(0, k) +
                      "], index_vector_dim = " + std::to_string(nb) + ">, slice_sizes = " + shlo::DenseI64(slice) +
                      ", indices_are_sorted = false";
  Value g = ctx.b.Op1("stablehlo.gather", {xt, ix.coords}, {x.type.elem, dims}, attrs);
  return {CastTo(ctx, ctx.b.Transpose(g, ResultOrder(ix)), ctx.out())};
}

}  // namespace

TPU_GRAPH_LOWERING("aten::_scaled_dot_product_fused_attention_overrideable", LowerSdpaOverrideable);
TPU_GRAPH_LOWERING("aten::_to_copy", LowerCopyOf0);
TPU_GRAPH_LOWERING("aten::arange", LowerArange);
TPU_GRAPH_LOWERING("aten::arange.start", LowerArangeStart);
TPU_GRAPH_LOWERING("aten::arange.start_step", LowerArangeStartStep);
TPU_GRAPH_LOWERING("aten::clone", LowerCopyOf0);
TPU_GRAPH_LOWERING("aten::copy", LowerCopyOf1);
TPU_GRAPH_LOWERING("aten::embedding", LowerEmbedding);
TPU_GRAPH_LOWERING("aten::empty.memory_format", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::empty_like", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::empty_strided", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::full", LowerFill<1>);
TPU_GRAPH_LOWERING("aten::full_like", LowerFill<1>);
TPU_GRAPH_LOWERING("aten::index.Tensor", LowerIndex);
TPU_GRAPH_LOWERING("aten::lift_fresh_copy", LowerCopyOf0);
TPU_GRAPH_LOWERING("aten::new_empty", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::new_empty_strided", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::new_full", LowerFill<2>);
TPU_GRAPH_LOWERING("aten::new_ones", LowerConstant<1>);
TPU_GRAPH_LOWERING("aten::new_zeros", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::ones", LowerConstant<1>);
TPU_GRAPH_LOWERING("aten::ones_like", LowerConstant<1>);
TPU_GRAPH_LOWERING("aten::scalar_tensor", LowerFill<0>);
TPU_LOWERING("aten::select_scatter", LowerSelectScatter);
TPU_LOWERING("aten::slice_scatter", LowerSliceScatter);
TPU_GRAPH_LOWERING("aten::zeros", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::zeros_like", LowerConstant<0>);
TPU_GRAPH_LOWERING("prims::fma", LowerFma);

}  // namespace tpu::lowering
