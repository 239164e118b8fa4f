#include "storage_layout.h"

#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <functional>
#include <mutex>

#include "../../runtime/executor.h"

namespace tpu::aten {

using runtime::TpuStorage;

std::vector<int64_t> DenseBufferDims(const lowering::ViewGeometry& g) {
  if (g.offset != 0) return {};
  std::vector<size_t> order(g.sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t c) { return g.strides[a] > g.strides[c]; });
  int64_t expected = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (g.sizes[*it] != 1 && g.strides[*it] != expected) return {};
    expected *= g.sizes[*it];
  }
  if (expected != g.storage_numel) return {};
  std::vector<int64_t> dims;
  for (size_t i : order) dims.push_back(g.sizes[i]);
  return TpuStorage::ShapedDims(dims);
}

std::vector<int64_t> NestedBufferDims(const lowering::ViewGeometry& g) {
  std::vector<int64_t> strides = g.strides;
  std::sort(strides.begin(), strides.end(), std::greater<int64_t>());
  if (strides.empty() || strides.back() != 1 || g.storage_numel <= 0) return {};
  // Outermost first: each dim spans the stride of the one outside it (the storage for the
  // first). A stride beyond that span (a size-1 dim's, which PyTorch leaves arbitrary) is a
  // dim of extent 1.
  std::vector<int64_t> dims;
  int64_t span = g.storage_numel;
  for (int64_t stride : strides) {
    if (stride >= span) {
      dims.push_back(1);
      continue;
    }
    if (span % stride != 0) return {};
    dims.push_back(span / stride);
    span = stride;
  }
  return TpuStorage::ShapedDims(dims);
}

bool ShapeStorageLike(const at::Tensor& t) {
  if (t.device().type() != kTpu || t.is_conj() || t.is_neg()) return false;
  std::vector<int64_t> want = DenseBufferDims(GeometryOf(t));
  if (want.empty()) return false;
  TpuStorage* s = StorageOf(t);
  const shlo::ElemType elem = ToElemType(t.scalar_type());
  {
    std::lock_guard<std::mutex> lock(s->mu);
    // Unwritten storages take their first writer's shape; a failed value raises where it is read.
    if (!s->buffer || s->pending || !s->error.empty() || s->elem != elem || s->dims == want) return false;
  }
  // A copy with t's strides writes a whole storage of t's own shape (runtime.h).
  at::Tensor copy = at::empty_strided(t.sizes(), t.strides(), t.options());
  copy.copy_(t);
  TpuStorage* c = StorageOf(copy);
  if (c->pending) runtime::Executor::Get().FlushFor(*c, "relayout of a storage");
  pjrt::BufferPtr buffer;
  std::vector<int64_t> dims;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    buffer = c->buffer;
    dims = c->dims;
  }
  if (!buffer || dims != want) return false;
  s->Assign(std::move(buffer), elem, s->Checks(), dims);
  return true;
}

}  // namespace tpu::aten
