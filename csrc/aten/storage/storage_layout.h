// Buffers shaped like the tensors that read them (runtime.h TpuStorage): the shape a dense
// tensor's storage has when the tensor made it, and relaying a storage to that shape.
#pragma once

#include <vector>

#include "../common.h"

namespace tpu::aten {

// The buffer dims of a storage made by a tensor of geometry `g` that covers it densely (a
// parameter, an op's result, or their transpose): its sizes in memory order. Empty when `g`
// does not cover its storage densely, or when that buffer is 1-D.
std::vector<int64_t> DenseBufferDims(const lowering::ViewGeometry& g);

// A guess at the buffer dims of the storage that a view of geometry `g` (a part of it, e.g.
// `ids[:, -1:]`) is cut from, for a program compiled before the storage is seen: the row-major
// shape its strides nest in (strides 8, 1 in 32 elements: [4, 8]; strides 512, 1 in 64: [1, 64]).
// Empty when the strides do not nest in the storage, or the shape is 1-D.
std::vector<int64_t> NestedBufferDims(const lowering::ViewGeometry& g);

// When `t` covers its storage densely and the buffer is shaped otherwise (a reshape of a
// permuted tensor is a view of its clone, shaped like the clone), lays the storage out in
// DenseBufferDims(t) with one copy on the device. The storage keeps its value and checks,
// so every view of it reads the same elements. Returns whether it relaid the storage.
bool ShapeStorageLike(const at::Tensor& t);

}  // namespace tpu::aten
