// View ops as graph values. In eager a view only changes metadata (csrc/aten/dispatch/kernels.cpp
// registers PyTorch's native view kernels), so these lowerings are graph-only: in a
// torch.compile graph a view node is a new value computed from its operand's logical array.
#include <algorithm>
#include <numeric>

#include "lowering.h"

namespace tpu::lowering {
namespace {

// view, reshape, squeeze, unsqueeze, flatten...: same elements, row-major, new shape.
std::vector<Value> LowerReshape(Ctx& ctx, const Args& a) {
  return {ctx.b.Reshape(a.tensor(0), ctx.out().dims)};
}

// alias, detach: the operand itself.
std::vector<Value> LowerIdentity(Ctx& ctx, const Args& a) { return {CastTo(ctx, a.tensor(0), ctx.out())}; }

// permute(x, dims): out.shape[i] = x.shape[dims[i]].
std::vector<Value> LowerPermute(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  std::vector<int64_t> perm;
  for (int64_t d : a.ints(1)) perm.push_back(WrapDim(d, x.type.rank()));
  return {ctx.b.Transpose(x, perm)};
}

// transpose(x, d0, d1) swaps two dims; t(x) is transpose(x, 0, 1) for rank 2.
std::vector<Value> LowerTranspose(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t r = x.type.rank();
  if (r < 2) return {x};
  int64_t d0 = a.is_none(1) ? 0 : WrapDim(a.int_(1), r), d1 = a.is_none(2) ? 1 : WrapDim(a.int_(2), r);
  std::vector<int64_t> perm(r);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return {ctx.b.Transpose(x, perm)};
}

// expand(x, size): size-1 dims (and new leading dims) repeat to the output shape.
std::vector<Value> LowerExpand(Ctx& ctx, const Args& a) { return {BroadcastTo(ctx, a.tensor(0), ctx.out().dims)}; }

// PyTorch's slice bounds: None is the whole range, negatives count from the end, both clamp.
int64_t ClampIndex(int64_t i, int64_t size) {
  if (i < 0) i += size;
  return std::min(std::max<int64_t>(i, 0), size);
}

// x[start:start + (n - 1) * step + 1:step] along `dim`, n taken from the output shape.
Value SliceDim(Ctx& ctx, Value x, int64_t dim, int64_t start, int64_t step, int64_t n) {
  std::vector<int64_t> lo(x.type.rank(), 0), hi = x.type.dims, st(x.type.rank(), 1);
  lo[dim] = start;
  hi[dim] = n == 0 ? start : start + (n - 1) * step + 1;
  st[dim] = step;
  return ctx.b.Slice(x, lo, hi, st);
}

// slice(x, dim, start, end, step) = x[..., start:end:step, ...]
std::vector<Value> LowerSlice(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.rank() == 0) return {x};
  int64_t dim = WrapDim(a.int_(1), x.type.rank());
  int64_t start = a.is_none(2) ? 0 : ClampIndex(a.int_(2), x.type.dims[dim]);
  return {SliceDim(ctx, x, dim, start, a.int_or(4, 1), ctx.out().dims[dim])};
}

// narrow(x, dim, start, length) = x[..., start:start + length, ...]
std::vector<Value> LowerNarrow(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t dim = WrapDim(a.int_(1), x.type.rank());
  int64_t start = a.int_(2) < 0 ? a.int_(2) + x.type.dims[dim] : a.int_(2);
  return {SliceDim(ctx, x, dim, start, 1, ctx.out().dims[dim])};
}

// select(x, dim, index) = x[..., index, ...] (dim removed).
std::vector<Value> LowerSelect(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t dim = WrapDim(a.int_(1), x.type.rank());
  int64_t index = a.int_(2) < 0 ? a.int_(2) + x.type.dims[dim] : a.int_(2);
  if (index < 0 || index >= x.type.dims[dim]) throw std::out_of_range("select(): index out of range");
  return {ctx.b.Reshape(SliceDim(ctx, x, dim, index, 1, 1), ctx.out().dims)};
}

// split_with_sizes / split / unbind / chunk: consecutive slices along dim, one per output
// (unbind's outputs drop the dim, which the reshape to each output's shape does).
std::vector<Value> LowerSplitOutputs(Ctx& ctx, Value x, int64_t dim, bool keep_dim) {
  std::vector<Value> out;
  int64_t start = 0;
  for (const TensorType& t : ctx.outputs) {
    int64_t n = keep_dim ? t.dims[dim] : 1;
    out.push_back(ctx.b.Reshape(SliceDim(ctx, x, dim, start, 1, n), t.dims));
    start += n;
  }
  return out;
}
std::vector<Value> LowerSplit(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return LowerSplitOutputs(ctx, x, WrapDim(a.int_or(2, 0), x.type.rank()), true);
}
std::vector<Value> LowerUnbind(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  return LowerSplitOutputs(ctx, x, WrapDim(a.int_or(1, 0), x.type.rank()), false);
}

// diagonal(x, offset, d1, d2): out[..., i] = x[..., i, i + offset] (d1, d2 moved last).
std::vector<Value> LowerDiagonal(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t r = x.type.rank(), offset = a.int_or(1, 0);
  int64_t d1 = WrapDim(a.int_or(2, 0), r), d2 = WrapDim(a.int_or(3, 1), r);
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i)
    if (i != d1 && i != d2) perm.push_back(i);
  perm.push_back(d1);
  perm.push_back(d2);
  x = ctx.b.Transpose(x, perm);
  int64_t n = ctx.out().dims.back();
  int64_t row0 = offset < 0 ? -offset : 0, col0 = offset > 0 ? offset : 0;
  std::vector<int64_t> lo(r, 0), hi = x.type.dims, st(r, 1);
  lo[r - 2] = row0;
  hi[r - 2] = row0 + n;
  lo[r - 1] = col0;
  hi[r - 1] = col0 + n;
  x = ctx.b.Slice(x, lo, hi, st);  // [..., n, n]: keep where row == col, sum away the rest
  TensorType square{x.type.elem, x.type.dims};
  Value eye = ctx.b.Compare(Cmp::EQ, ctx.b.Iota({ElemType::S32, square.dims}, r - 2),
                            ctx.b.Iota({ElemType::S32, square.dims}, r - 1));
  Value zero = ctx.b.Constant(0, square);
  Value masked = ctx.b.Select(eye, x, zero);
  if (x.type.elem == ElemType::Pred) return {ctx.b.Reduce(masked, ctx.b.Constant(0, {x.type.elem, {}}), {r - 1}, "or")};
  return {ctx.b.Reduce(masked, ctx.b.Constant(0, {x.type.elem, {}}), {r - 1}, "add")};
}

// as_strided(x, size, stride, offset): the compile path only sends it an operand that is
// contiguous from offset 0 of its own storage, so the operand's row-major array is the storage.
std::vector<Value> LowerAsStrided(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  ViewGeometry g;
  g.sizes = a.ints(1);
  g.strides = a.ints(2);
  g.offset = a.int_or(3, 0);
  g.storage_numel = x.type.numel();
  return {ReadView(ctx.b, ctx.b.Reshape(x, {g.storage_numel}), g)};
}

// as_strided_scatter(self, src, size, stride, offset): a copy of self's storage with the
// strided view written with src. Graph-only: eager runs PyTorch's composite (clone, as_strided,
// copy_), which knows self's strides; a graph value is its logical array, so describe.py only
// sends a self that is its whole contiguous storage from offset 0 (the functionalized base).
std::vector<Value> LowerAsStridedScatter(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t);
  ViewGeometry g;
  g.sizes = a.ints(2);
  g.strides = a.ints(3);
  g.offset = a.int_or(4, 0);
  g.storage_numel = t.numel();
  Value src = ConvertTo(ctx, a.tensor(1), t.elem);  // copy_ converts to self's dtype
  return {ctx.b.Reshape(WriteView(ctx.b, ctx.b.Reshape(self, {g.storage_numel}), g, src), t.dims)};
}

}  // namespace

TPU_GRAPH_LOWERING("aten::_reshape_alias", LowerReshape);
TPU_GRAPH_LOWERING("aten::_unsafe_view", LowerReshape);
TPU_GRAPH_LOWERING("aten::alias", LowerIdentity);
TPU_GRAPH_LOWERING("aten::alias_copy", LowerIdentity);
TPU_GRAPH_LOWERING("aten::as_strided", LowerAsStrided);
TPU_GRAPH_LOWERING("aten::as_strided_copy", LowerAsStrided);
TPU_GRAPH_LOWERING("aten::as_strided_scatter", LowerAsStridedScatter);
TPU_GRAPH_LOWERING("aten::detach", LowerIdentity);
TPU_GRAPH_LOWERING("aten::diagonal", LowerDiagonal);
TPU_GRAPH_LOWERING("aten::diagonal_copy", LowerDiagonal);
TPU_GRAPH_LOWERING("aten::expand", LowerExpand);
TPU_GRAPH_LOWERING("aten::expand_copy", LowerExpand);
TPU_GRAPH_LOWERING("aten::narrow", LowerNarrow);
TPU_GRAPH_LOWERING("aten::permute", LowerPermute);
TPU_GRAPH_LOWERING("aten::permute_copy", LowerPermute);
TPU_GRAPH_LOWERING("aten::reshape", LowerReshape);
TPU_GRAPH_LOWERING("aten::select.int", LowerSelect);
TPU_GRAPH_LOWERING("aten::select_copy.int", LowerSelect);
TPU_GRAPH_LOWERING("aten::slice.Tensor", LowerSlice);
TPU_GRAPH_LOWERING("aten::slice_copy.Tensor", LowerSlice);
TPU_GRAPH_LOWERING("aten::split.Tensor", LowerSplit);
TPU_GRAPH_LOWERING("aten::split_copy.Tensor", LowerSplit);
TPU_GRAPH_LOWERING("aten::split_with_sizes", LowerSplit);
TPU_GRAPH_LOWERING("aten::split_with_sizes_copy", LowerSplit);
TPU_GRAPH_LOWERING("aten::squeeze", LowerReshape);
TPU_GRAPH_LOWERING("aten::squeeze.dim", LowerReshape);
TPU_GRAPH_LOWERING("aten::squeeze.dims", LowerReshape);
TPU_GRAPH_LOWERING("aten::squeeze_copy.dims", LowerReshape);
TPU_GRAPH_LOWERING("aten::t", LowerTranspose);
TPU_GRAPH_LOWERING("aten::t_copy", LowerTranspose);
TPU_GRAPH_LOWERING("aten::transpose.int", LowerTranspose);
TPU_GRAPH_LOWERING("aten::transpose_copy.int", LowerTranspose);
TPU_GRAPH_LOWERING("aten::unbind.int", LowerUnbind);
TPU_GRAPH_LOWERING("aten::unbind_copy.int", LowerUnbind);
TPU_GRAPH_LOWERING("aten::unsqueeze", LowerReshape);
TPU_GRAPH_LOWERING("aten::unsqueeze_copy", LowerReshape);
TPU_GRAPH_LOWERING("aten::view", LowerReshape);
TPU_GRAPH_LOWERING("aten::view_copy", LowerReshape);

}  // namespace tpu::lowering
