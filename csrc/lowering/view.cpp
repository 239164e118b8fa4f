// Reading and writing strided views of a 1-D storage value. Every program sees tensors as
// (storage, sizes, strides, offset), exactly as PyTorch lays them out.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>

#include "lowering.h"

namespace tpu::lowering {
namespace {

const TensorType kIndexType{ElemType::S64, {}};

// Flat storage index of every element of the view: offset + sum_i iota_i * stride_i.
Value FlatIndices(Builder& b, const ViewGeometry& g) {
  TensorType t{ElemType::S64, g.sizes};
  Value idx = b.ConstantInt(g.offset, t);
  for (size_t i = 0; i < g.sizes.size(); ++i) {
    if (g.sizes[i] == 1 || g.strides[i] == 0) continue;
    Value term = b.Binary("multiply", b.Iota(t, static_cast<int64_t>(i)), b.ConstantInt(g.strides[i], t));
    idx = b.Binary("add", idx, term);
  }
  return idx;
}

// 1 + the distance from the view's first element to its last (0 for an empty view).
int64_t Span(const ViewGeometry& g) {
  int64_t span = 1;
  for (size_t i = 0; i < g.sizes.size(); ++i) {
    if (g.sizes[i] == 0) return 0;
    span += (g.sizes[i] - 1) * g.strides[i];
  }
  return span;
}

// The view's elements are one run of consecutive storage elements, in row-major order.
bool IsContiguousRun(const ViewGeometry& g) {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(g.sizes.size()) - 1; i >= 0; --i) {
    if (g.sizes[i] != 1 && g.strides[i] != expected) return false;
    expected *= g.sizes[i];
  }
  return true;
}

}  // namespace

bool IsWholeStorage(const ViewGeometry& g) {
  if (g.offset != 0) return false;
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(g.sizes.size()) - 1; i >= 0; --i) {
    if (g.sizes[i] != 1 && g.strides[i] != expected) return false;
    expected *= g.sizes[i];
  }
  return expected == g.storage_numel;
}

Value ReadView(Builder& b, Value storage, const ViewGeometry& g) {
  TensorType result{storage.type.elem, g.sizes};
  int64_t numel = result.numel();
  if (numel == 0) return b.Constant(0, result);
  if (IsWholeStorage(g)) return b.Reshape(storage, g.sizes);

  // Dims that move through memory, outermost (largest stride) first.
  std::vector<int64_t> moving;
  for (size_t i = 0; i < g.sizes.size(); ++i)
    if (g.sizes[i] != 1 && g.strides[i] != 0) moving.push_back(static_cast<int64_t>(i));
  std::stable_sort(moving.begin(), moving.end(),
                   [&](int64_t a, int64_t c) { return g.strides[a] > g.strides[c]; });

  // A view whose strides nest (each divides the next larger, without overlap) is a window
  // of the storage reshaped and sliced; anything else is gathered element by element.
  bool nested = true;
  for (size_t k = 0; k < moving.size(); ++k) {
    int64_t s = g.strides[moving[k]];
    if (s < 0) nested = false;
    if (k + 1 < moving.size()) {
      int64_t inner = g.strides[moving[k + 1]];
      if (inner <= 0 || s % inner != 0 || s < g.sizes[moving[k + 1]] * inner) nested = false;
    }
  }
  if (!nested) return b.Gather1D(storage, FlatIndices(b, g));

  Value picked;
  std::vector<int64_t> picked_dims;  // sizes of `moving`, in that order
  if (moving.empty()) {
    picked = b.Slice(storage, {g.offset}, {g.offset + 1}, {1});
  } else {
    int64_t window = g.sizes[moving[0]] * g.strides[moving[0]];
    Value flat = storage;
    int64_t end = g.offset + window;
    if (end > g.storage_numel) {
      flat = b.Pad(storage, b.Constant(0, {storage.type.elem, {}}), {0}, {end - g.storage_numel}, {0});
    }
    flat = b.Slice(flat, {g.offset}, {end}, {1});
    std::vector<int64_t> shape = {g.sizes[moving[0]]};
    for (size_t k = 0; k + 1 < moving.size(); ++k)
      shape.push_back(g.strides[moving[k]] / g.strides[moving[k + 1]]);
    shape.push_back(g.strides[moving.back()]);
    Value grid = b.Reshape(flat, shape);
    std::vector<int64_t> start(shape.size(), 0), limit, step(shape.size(), 1);
    for (int64_t d : moving) limit.push_back(g.sizes[d]);
    limit.push_back(1);
    picked = b.Slice(grid, start, limit, step);
    for (int64_t d : moving) picked_dims.push_back(g.sizes[d]);
  }
  picked = b.Reshape(picked, picked_dims);
  // Back to the view's own dim order, then restore size-1 and broadcast (stride-0) dims.
  std::vector<int64_t> order(moving.begin(), moving.end());
  std::vector<int64_t> perm(order.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t c) { return order[a] < order[c]; });
  picked = b.Transpose(picked, perm);
  std::vector<int64_t> mapping;
  for (int64_t p : perm) mapping.push_back(order[p]);
  std::sort(mapping.begin(), mapping.end());
  return b.BroadcastInDim(picked, g.sizes, mapping);
}

Value WriteView(Builder& b, Value storage, const ViewGeometry& g, Value value) {
  int64_t numel = TensorType{value.type.elem, g.sizes}.numel();
  if (numel == 0) return storage;
  if (IsWholeStorage(g)) return b.Reshape(value, {g.storage_numel});
  if (IsContiguousRun(g)) return b.DynamicUpdateSlice(storage, b.Reshape(value, {numel}), {g.offset});
  Value idx = b.Reshape(FlatIndices(b, g), {numel});
  return b.Scatter1D(storage, idx, b.Reshape(value, {numel}));
}

bool HasRunTimeOffset(const ViewGeometry& g) {
  int64_t span = Span(g);
  return span > 0 && span < g.storage_numel;
}

std::vector<int64_t> BoxInBuffer(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                 const std::vector<int64_t>& buffer_dims) {
  int64_t rank = static_cast<int64_t>(buffer_dims.size());
  if (rank < 2) return {};
  int64_t numel = 1;
  for (int64_t d : buffer_dims) numel *= d;
  if (numel > std::numeric_limits<int32_t>::max()) return {};  // its starts are computed in s32
  std::vector<int64_t> buffer_strides(rank, 1), box(rank, 1);
  for (int64_t j = rank - 2; j >= 0; --j) buffer_strides[j] = buffer_strides[j + 1] * buffer_dims[j + 1];
  int64_t j = rank - 1;  // the buffer dim the innermost view dims fill
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] == 0) return {};
    if (sizes[d] == 1) continue;
    // The next run within dim j, unless that would overflow it: then an outer dim's start (a view
    // of whole rows continues into the next outer dim, whose stride is the same number).
    bool within = strides[d] == buffer_strides[j] * box[j] && box[j] * sizes[d] <= buffer_dims[j];
    if (!within) {
      int64_t k = j - 1;
      while (k >= 0 && buffer_strides[k] != strides[d]) --k;
      if (k < 0) return {};
      j = k;
    }
    box[j] *= sizes[d];
    if (box[j] > buffer_dims[j]) return {};
  }
  return box;
}

bool BoxFitsAt(const std::vector<int64_t>& box, const std::vector<int64_t>& buffer_dims, int64_t offset) {
  for (int64_t j = static_cast<int64_t>(buffer_dims.size()) - 1; j >= 0; --j) {
    if (offset % buffer_dims[j] + box[j] > buffer_dims[j]) return false;
    offset /= buffer_dims[j];
  }
  return offset == 0;
}

std::vector<int64_t> SplitAtStrides(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                    const std::vector<int64_t>& buffer_dims) {
  const int64_t rank = static_cast<int64_t>(buffer_dims.size());
  std::vector<int64_t> cuts;  // the strides of the view's dims that step more than one element
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] > 1 && strides[d] > 0) cuts.push_back(strides[d]);
  std::sort(cuts.begin(), cuts.end(), std::greater<int64_t>());
  std::vector<int64_t> dims;
  int64_t inner = 1;  // the stride of buffer dim j
  std::vector<int64_t> buffer_strides(rank);
  for (int64_t j = rank - 1; j >= 0; --j) {
    buffer_strides[j] = inner;
    inner *= buffer_dims[j];
  }
  for (int64_t j = 0; j < rank; ++j) {
    int64_t span = buffer_strides[j] * buffer_dims[j], stride = buffer_strides[j];
    for (int64_t cut : cuts)
      if (cut > stride && cut < span && cut % stride == 0 && span % cut == 0) {
        dims.push_back(span / cut);
        span = cut;
      }
    dims.push_back(span / stride);
  }
  return dims;
}

namespace {

// The view's box in its buffer split at the view's strides (SplitAtStrides), and those dims;
// an empty box when it is none at the view's offset. The box is of the view's dims taken in
// memory order (`order`, by stride, outermost first): a transposed view (RoPE's half of
// `q.view(b, s, h, d).transpose(1, 2)`) is a box read and then transposed.
struct BufferBox {
  std::vector<int64_t> dims, box, order;
  bool permuted() const {
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i] != static_cast<int64_t>(i)) return true;
    return false;
  }
};
BufferBox BoxOf(const ViewGeometry& g) {
  if (g.buffer_dims.size() < 2) return {};
  BufferBox b{SplitAtStrides(g.sizes, g.strides, g.buffer_dims), {}, std::vector<int64_t>(g.sizes.size())};
  std::iota(b.order.begin(), b.order.end(), 0);
  std::stable_sort(b.order.begin(), b.order.end(), [&](int64_t x, int64_t y) { return g.strides[x] > g.strides[y]; });
  std::vector<int64_t> sizes, strides;
  for (int64_t d : b.order) {
    sizes.push_back(g.sizes[d]);
    strides.push_back(g.strides[d]);
  }
  b.box = BoxInBuffer(sizes, strides, b.dims);
  if (!b.box.empty() && !BoxFitsAt(b.box, b.dims, g.offset)) b.box.clear();
  return b;
}

// The view's sizes in memory order (the box's dims, unsplit).
std::vector<int64_t> OrderedSizes(const BufferBox& at, const ViewGeometry& g) {
  std::vector<int64_t> sizes;
  for (int64_t d : at.order) sizes.push_back(g.sizes[d]);
  return sizes;
}

}  // namespace

bool IsBufferBoxAt(const ViewGeometry& g) { return !BoxOf(g).box.empty(); }

namespace {

// Where the box of a view at the run-time offset starts in its shaped buffer: the offset's
// digits in the buffer's dims (in s32: TPUs emulate s64 division).
std::vector<Value> BoxStarts(Builder& b, const std::vector<int64_t>& buffer_dims, Value offset) {
  const TensorType index{ElemType::S32, {}};
  Value rest = b.Convert(offset, ElemType::S32);
  std::vector<Value> starts(buffer_dims.size());
  for (int64_t j = static_cast<int64_t>(buffer_dims.size()) - 1; j > 0; --j) {
    Value dim = b.ConstantInt(buffer_dims[j], index);
    starts[j] = b.Binary("remainder", rest, dim);
    rest = b.Binary("divide", rest, dim);
  }
  starts[0] = rest;
  return starts;
}

// The box a view is in its shaped buffer, at the run-time offset: one dynamic_slice.
Value ReadBoxAt(Builder& b, Value storage, const ViewGeometry& g, Value offset) {
  BufferBox at = BoxOf(g);
  Value buffer = b.Reshape(storage, at.dims);  // the parameter itself, its dims split (reshapes fold)
  Value box = b.DynamicSlice(buffer, BoxStarts(b, at.dims, offset), at.box);
  if (!at.permuted()) return b.Reshape(box, g.sizes);
  std::vector<int64_t> to_view(at.order.size());  // view dim d is memory-order dim to_view[d]
  for (size_t i = 0; i < at.order.size(); ++i) to_view[at.order[i]] = static_cast<int64_t>(i);
  return b.Transpose(b.Reshape(box, OrderedSizes(at, g)), to_view);
}

// The storage with that box replaced by `value`: one dynamic_update_slice of the shaped buffer,
// which the caller's buffer (WrittenBuffer) reads back without a relayout.
Value WriteBoxAt(Builder& b, Value storage, const ViewGeometry& g, Value offset, Value value) {
  BufferBox at = BoxOf(g);
  Value buffer = b.Reshape(storage, at.dims);
  if (at.permuted()) value = b.Transpose(value, at.order);  // to memory order
  Value updated = b.DynamicUpdateSliceAt(buffer, b.Reshape(value, at.box), BoxStarts(b, at.dims, offset));
  return b.Reshape(updated, {storage.type.numel()});
}

}  // namespace

Value ReadViewAt(Builder& b, Value storage, const ViewGeometry& g, Value offset) {
  int64_t span = Span(g);
  if (span == 0) return ReadView(b, storage, g);  // empty
  ViewGeometry in_span = g;
  in_span.offset = 0;
  in_span.storage_numel = span;
  return ReadView(b, b.DynamicSlice(storage, {offset}, {span}), in_span);
}

Value WriteViewAt(Builder& b, Value storage, const ViewGeometry& g, Value offset, Value value) {
  int64_t numel = TensorType{value.type.elem, g.sizes}.numel();
  if (numel == 0) return storage;
  if (IsContiguousRun(g)) return b.DynamicUpdateSliceAt(storage, b.Reshape(value, {numel}), {offset});
  ViewGeometry at_zero = g;
  at_zero.offset = 0;
  Value idx = FlatIndices(b, at_zero);
  idx = b.Binary("add", idx, b.BroadcastInDim(offset, g.sizes, {}));
  return b.Scatter1D(storage, b.Reshape(idx, {numel}), b.Reshape(value, {numel}));
}

Value AsBuffer(Builder& b, Value value) {
  int64_t numel = value.type.numel();
  if (value.type.dims.size() >= 2 && numel > 0) return value;
  return b.Reshape(value, {numel});
}

Value LayOut(Builder& b, Value value, const std::vector<int64_t>& strides) {
  std::vector<int64_t> perm(strides.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t c) { return strides[a] > strides[c]; });
  return AsBuffer(b, b.Transpose(value, perm));
}

Value StorageParam(Builder& b, ElemType elem, const std::vector<int64_t>& buffer_dims) {
  Value param = b.Param({elem, buffer_dims});
  return b.Reshape(param, {param.type.numel()});
}

Value WrittenBuffer(Builder& b, const ViewGeometry& g, Value value, Value updated,
                    const std::vector<int64_t>& buffer_dims) {
  if (IsWholeStorage(g) && value.type.elem == updated.type.elem) return AsBuffer(b, value);
  if (updated.type.numel() == TensorType{updated.type.elem, buffer_dims}.numel()) return b.Reshape(updated, buffer_dims);
  return updated;
}

namespace {

// The real type of a complex type's parts.
ElemType PartType(ElemType t) { return t == ElemType::C64 ? ElemType::F32 : ElemType::F64; }

// Storage bytes as unsigned integers of one width: the common ground of every reinterpretation.
ElemType BitsOfSize(size_t bytes) {
  switch (bytes) {
    case 1: return ElemType::U8;
    case 2: return ElemType::U16;
    case 4: return ElemType::U32;
    default: return ElemType::U64;
  }
}

// [n] -> [n * from / to] between two real (non-bool, non-complex) types of any widths.
Value BitcastWidths(Builder& b, Value v, ElemType elem) {
  size_t from = shlo::ByteSize(v.type.elem), to = shlo::ByteSize(elem);
  int64_t n = v.type.dims[0];
  if (from == to) return b.BitcastConvert(v, {elem, {n}});
  if (from > to) {  // each element splits into from/to narrower ones along a new minor dim
    int64_t k = static_cast<int64_t>(from / to);
    return b.Reshape(b.BitcastConvert(v, {elem, {n, k}}), {n * k});
  }
  int64_t k = static_cast<int64_t>(to / from);
  if (n % k != 0) throw Unsupported("a storage whose size is not a multiple of the element size");
  return b.BitcastConvert(b.Reshape(v, {n / k, k}), {elem, {n / k}});
}

}  // namespace

Value Reinterpret(Builder& b, Value storage, ElemType elem) {
  ElemType from = storage.type.elem;
  if (from == elem) return storage;
  int64_t n = storage.type.dims.at(0);
  if (from == ElemType::Pred) return Reinterpret(b, b.Convert(storage, ElemType::U8), elem);
  if (elem == ElemType::Pred) {
    Value bytes = Reinterpret(b, storage, ElemType::U8);
    return b.Compare(Cmp::NE, bytes, b.Constant(0, bytes.type));
  }
  if (shlo::IsComplex(from)) {  // (re, im) interleaved
    ElemType part = PartType(from);
    Value re = b.Reshape(b.Op1("stablehlo.real", {storage}, {part, {n}}), {n, 1});
    Value im = b.Reshape(b.Op1("stablehlo.imag", {storage}, {part, {n}}), {n, 1});
    Value parts = b.Reshape(b.Concatenate({re, im}, 1), {2 * n});
    return Reinterpret(b, b.BitcastConvert(parts, {BitsOfSize(shlo::ByteSize(part)), {2 * n}}), elem);
  }
  if (shlo::IsComplex(elem)) {
    ElemType part = PartType(elem);
    Value parts = BitcastWidths(b, storage, part);
    int64_t m = parts.type.dims[0] / 2;
    Value pairs = b.Reshape(parts, {m, 2});
    Value re = b.Reshape(b.Slice(pairs, {0, 0}, {m, 1}, {1, 1}), {m});
    Value im = b.Reshape(b.Slice(pairs, {0, 1}, {m, 2}, {1, 1}), {m});
    return b.Op1("stablehlo.complex", {re, im}, {elem, {m}});
  }
  return BitcastWidths(b, storage, elem);
}

Value ReadViewOf(Builder& b, Value storage, ElemType elem, const ViewGeometry& g,
                 const std::function<Value()>& offset) {
  bool same_type = storage.type.elem == elem;
  storage = Reinterpret(b, storage, elem);  // a view(dtype), an untyped storage
  if (!HasRunTimeOffset(g)) return ReadView(b, storage, g);
  if (same_type && IsBufferBoxAt(g)) return ReadBoxAt(b, storage, g, offset());
  return ReadViewAt(b, storage, g, offset());
}

Value WriteViewOf(Builder& b, Value storage, ViewGeometry g, Value value, const std::function<Value()>& offset) {
  bool run_time_offset = HasRunTimeOffset(g);  // as the key decided
  bool same_type = storage.type.elem == value.type.elem;
  storage = Reinterpret(b, storage, value.type.elem);
  g.storage_numel = storage.type.dims[0];
  if (!run_time_offset) return WriteView(b, storage, g, value);
  if (same_type && IsBufferBoxAt(g)) return WriteBoxAt(b, storage, g, offset(), value);
  return WriteViewAt(b, storage, g, offset(), value);
}

}  // namespace tpu::lowering
