// Which TpuStorage a tpu tensor lives in, where in it, and its view geometry as programs see it
// (offset keys included: which views are read at a run-time offset, and how).
#include <vector>

#include "../common.h"
#include "../../runtime/runtime.h"

namespace tpu::aten {

using runtime::Runtime;
using runtime::TpuStorage;

namespace {
// The TpuStorage holding a storage, and the byte where that storage starts in it.
std::pair<TpuStorage*, int64_t> Resolve(const c10::StorageImpl& storage) {
  const c10::DataPtr& p = storage.data_ptr();
  if (IsTpuAllocation(p)) return {static_cast<TpuStorage*>(p.get_context()), 0};
  int64_t byte_offset = 0;
  TpuStorage* s = Runtime::Get().LookupContaining(reinterpret_cast<uintptr_t>(p.get()), &byte_offset);
  return {s, byte_offset};
}
std::pair<TpuStorage*, int64_t> Resolve(const at::Tensor& t) {
  auto resolved = Resolve(*t.storage().unsafeGetStorageImpl());
  TORCH_CHECK(resolved.first != nullptr, "tpu: tensor has no tpu storage");
  return resolved;
}
}  // namespace

TpuStorage* StorageOf(const at::Tensor& t) { return Resolve(t).first; }
TpuStorage* StorageOf(const c10::StorageImpl& storage) { return Resolve(storage).first; }

int64_t StorageOffsetOf(const at::Tensor& t) {
  int64_t bytes = Resolve(t).second;
  TORCH_CHECK(bytes % static_cast<int64_t>(t.element_size()) == 0, "tpu: a ", t.scalar_type(),
              " view of a storage slice that starts at byte ", bytes, " of its tpu storage is not aligned");
  return t.storage_offset() + bytes / static_cast<int64_t>(t.element_size());
}

lowering::ViewGeometry GeometryOf(const at::Tensor& t) {
  lowering::ViewGeometry g;
  g.sizes = t.sizes().vec();
  g.strides = t.strides().vec();
  g.offset = StorageOffsetOf(t);
  g.storage_numel = static_cast<int64_t>(StorageOf(t)->nbytes / t.element_size());
  return g;
}

bool HasRunTimeOffset(const at::Tensor& t) {
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return false;
    span += (t.size(d) - 1) * t.stride(d);
  }
  return span < static_cast<int64_t>(StorageOf(t)->nbytes / t.element_size());
}

namespace {
// The dims of the buffer a view at a run-time offset is read as a box of, or empty: only a
// typed storage of the view's own element type whose buffer is shaped (rank >= 2).
std::vector<int64_t> BoxBufferDims(const at::Tensor& t) {
  const TpuStorage* s = StorageOf(t);
  if (s->dims.size() < 2 || !(s->buffer || s->pending) || s->elem != ToElemType(t.scalar_type())) return {};
  lowering::ViewGeometry g = GeometryOf(t);
  g.buffer_dims = s->dims;
  return lowering::IsBufferBoxAt(g) ? s->dims : std::vector<int64_t>{};
}
}  // namespace

int64_t OffsetKey(const at::Tensor& t) {
  if (!HasRunTimeOffset(t)) return StorageOffsetOf(t);
  return BoxBufferDims(t).empty() ? -2 : -1;
}

lowering::ViewGeometry GeometryWithBufferOf(const at::Tensor& t) {
  lowering::ViewGeometry g = GeometryOf(t);
  if (HasRunTimeOffset(t)) g.buffer_dims = BoxBufferDims(t);
  return g;
}

}  // namespace tpu::aten
