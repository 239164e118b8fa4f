// Kernels that are not lowerings: allocation, views (metadata only), copies, resize,
// reading a scalar. Everything else is the generic kernel or the CPU fallback.
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <cstring>

#include "common.h"
#include "op_kernel.h"
#include "../runtime/metrics.h"

namespace tpu::aten {

using runtime::GetMetrics;
using runtime::Runtime;
using runtime::TpuStorage;

shlo::ElemType ToElemType(c10::ScalarType t) {
  switch (t) {
    case at::kBool: return shlo::ElemType::Pred;
    case at::kChar: return shlo::ElemType::S8;
    case at::kShort: return shlo::ElemType::S16;
    case at::kInt: return shlo::ElemType::S32;
    case at::kLong: return shlo::ElemType::S64;
    case at::kByte: return shlo::ElemType::U8;
    case at::kUInt16: return shlo::ElemType::U16;
    case at::kUInt32: return shlo::ElemType::U32;
    case at::kUInt64: return shlo::ElemType::U64;
    case at::kHalf: return shlo::ElemType::F16;
    case at::kBFloat16: return shlo::ElemType::BF16;
    case at::kFloat: return shlo::ElemType::F32;
    case at::kDouble: return shlo::ElemType::F64;
    case at::kComplexFloat: return shlo::ElemType::C64;
    case at::kComplexDouble: return shlo::ElemType::C128;
    default:
      TORCH_CHECK_TYPE(false, "tpu: unsupported dtype ", t);
  }
}

c10::ScalarType ToScalarType(shlo::ElemType t) {
  switch (t) {
    case shlo::ElemType::Pred: return at::kBool;
    case shlo::ElemType::S8: return at::kChar;
    case shlo::ElemType::S16: return at::kShort;
    case shlo::ElemType::S32: return at::kInt;
    case shlo::ElemType::S64: return at::kLong;
    case shlo::ElemType::U8: return at::kByte;
    case shlo::ElemType::U16: return at::kUInt16;
    case shlo::ElemType::U32: return at::kUInt32;
    case shlo::ElemType::U64: return at::kUInt64;
    case shlo::ElemType::F16: return at::kHalf;
    case shlo::ElemType::BF16: return at::kBFloat16;
    case shlo::ElemType::F32: return at::kFloat;
    case shlo::ElemType::F64: return at::kDouble;
    case shlo::ElemType::C64: return at::kComplexFloat;
    case shlo::ElemType::C128: return at::kComplexDouble;
  }
  return at::kFloat;
}

bool IsSupportedDtype(c10::ScalarType t) {
  switch (t) {
    case at::kBool: case at::kChar: case at::kShort: case at::kInt: case at::kLong: case at::kByte:
    case at::kUInt16: case at::kUInt32: case at::kUInt64: case at::kHalf: case at::kBFloat16:
    case at::kFloat: case at::kDouble: case at::kComplexFloat: case at::kComplexDouble:
      return true;
    default:
      return false;
  }
}

TpuStorage* StorageOf(const at::Tensor& t) {
  auto* s = static_cast<TpuStorage*>(t.storage().data_ptr().get_context());
  TORCH_CHECK(s != nullptr, "tpu: tensor has no tpu storage");
  return s;
}

lowering::ViewGeometry GeometryOf(const at::Tensor& t) {
  lowering::ViewGeometry g;
  g.sizes = t.sizes().vec();
  g.strides = t.strides().vec();
  g.offset = t.storage_offset();
  g.storage_numel = static_cast<int64_t>(StorageOf(t)->nbytes / t.element_size());
  return g;
}

void RethrowAsTorchError(const std::exception& e, const std::string& what) {
  if (auto* pe = dynamic_cast<const pjrt::Error*>(&e)) {
    TORCH_CHECK_WITH(OutOfMemoryError, !pe->out_of_memory(), "tpu: out of memory in ", what, ": ", e.what());
  }
  if (dynamic_cast<const std::out_of_range*>(&e)) TORCH_CHECK_INDEX(false, what, ": ", e.what());
  TORCH_CHECK(false, what, ": ", e.what());
}

namespace {

void CheckDtype(std::optional<at::ScalarType> dtype) {
  auto t = dtype.value_or(at::get_default_dtype_as_scalartype());
  TORCH_CHECK_TYPE(IsSupportedDtype(t), "tpu: unsupported dtype ", t);
}

c10::DeviceIndex TargetIndex(std::optional<at::Device> device) {
  if (device && device->has_index()) return device->index();
  return CurrentDevice();
}

at::Tensor Empty(at::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                 std::optional<at::Device> device, std::optional<bool>,
                 std::optional<at::MemoryFormat> memory_format) {
  CheckDtype(dtype);
  c10::DeviceGuard guard(c10::Device(kTpu, TargetIndex(device)));
  (void)Runtime::Get();
  SetCurrentDevice(TargetIndex(device));  // validates the index with a clear message
  return at::detail::empty_generic(size, c10::GetAllocator(kTpu), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   dtype.value_or(at::get_default_dtype_as_scalartype()), memory_format);
}

at::Tensor EmptyStrided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                        std::optional<at::Layout>, std::optional<at::Device> device, std::optional<bool>) {
  CheckDtype(dtype);
  c10::DeviceGuard guard(c10::Device(kTpu, TargetIndex(device)));
  SetCurrentDevice(TargetIndex(device));
  return at::detail::empty_strided_generic(size, stride, c10::GetAllocator(kTpu),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           dtype.value_or(at::get_default_dtype_as_scalartype()));
}

// Grows the storage when needed (contents kept), then sets the new geometry.
const at::Tensor& Resize(const at::Tensor& self, at::IntArrayRef size, std::optional<at::MemoryFormat> format) {
  auto* impl = self.unsafeGetTensorImpl();
  auto fmt = format.value_or(at::MemoryFormat::Contiguous);
  impl->set_sizes_contiguous(size);
  if (fmt != at::MemoryFormat::Contiguous && fmt != at::MemoryFormat::Preserve) impl->empty_tensor_restride(fmt);
  size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.element_size(),
                                                    self.storage_offset());
  const c10::Storage& storage = self.storage();
  if (needed > storage.nbytes()) {
    at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(storage, needed);
  }
  return self;
}

at::Tensor& SetStorage(at::Tensor& self, c10::Storage source, c10::SymInt offset, c10::SymIntArrayRef size,
                       c10::SymIntArrayRef stride) {
  self.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(source));
  self.unsafeGetTensorImpl()->set_sizes_and_strides(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                                    offset.guard_int(__FILE__, __LINE__));
  size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.element_size(),
                                                    self.storage_offset());
  if (needed > self.storage().nbytes() && self.numel() > 0)
    at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(self.storage(), needed);
  return self;
}

at::Tensor& SetSourceStorage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.element_size());
  std::vector<c10::SymInt> size = {c10::SymInt(n)}, stride = {c10::SymInt(1)};
  return SetStorage(self, std::move(source), 0, size, stride);
}

at::Tensor& SetSourceTensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return SetStorage(self, source.storage(), source.sym_storage_offset(), source.sym_sizes(), source.sym_strides());
}

at::Tensor& SetEmpty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::GetAllocator(kTpu), true);
  std::vector<c10::SymInt> size = {c10::SymInt(0)}, stride = {c10::SymInt(1)};
  return SetStorage(self, std::move(storage), 0, size, stride);
}

// Host bytes of a tpu tensor's storage, viewed with the tensor's geometry as a CPU tensor.
at::Tensor HostView(const at::Tensor& src) {
  TpuStorage* s = StorageOf(src);
  GetMetrics().CountSync("device_to_host");
  auto bytes = at::empty({static_cast<int64_t>(s->nbytes)}, at::TensorOptions().dtype(at::kByte));
  s->ReadBytes(bytes.data_ptr());
  auto typed = at::empty({0}, src.options().device(at::kCPU));
  typed.set_(bytes.storage(), src.storage_offset(), src.sizes(), src.strides());
  return typed;
}

at::Tensor CopyInto(const at::Tensor& src, const at::Tensor& dst);

// Handles every copy that involves tpu: host to device, device to host, device to device
// (also across device indexes), dtype casts, broadcast and arbitrary strides.
at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  (void)non_blocking;  // PJRT orders transfers after the computations they depend on
  if (self.numel() == 0 && dst.numel() == 0) return dst;
  if (dst.device().type() != kTpu) {
    dst.copy_(HostView(self));
    return dst;
  }
  if (self.device().type() != kTpu) {
    // Host to device: cast and broadcast on the host, upload, then write the view.
    TORCH_CHECK_TYPE(IsSupportedDtype(dst.scalar_type()), "tpu: unsupported dtype ", dst.scalar_type());
    at::Tensor host = self.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    auto g = GeometryOf(dst);
    TpuStorage* s = StorageOf(dst);
    if (lowering::IsWholeStorage(g)) {
      UploadWholeStorage(s, host.data_ptr(), ToElemType(dst.scalar_type()));
      return dst;
    }
    c10::DeviceGuard guard(dst.device());
    at::Tensor staged = at::empty(dst.sizes(), dst.options());
    UploadWholeStorage(StorageOf(staged), host.data_ptr(), ToElemType(dst.scalar_type()));
    CopyInto(staged, dst);
    return dst;
  }
  if (self.device() != dst.device()) {
    // Across devices: move the source's whole storage, then copy within the target device.
    TpuStorage* s = StorageOf(self);
    c10::DeviceGuard guard(dst.device());
    at::Tensor moved = at::empty({static_cast<int64_t>(s->nbytes / self.element_size())}, self.options().device(dst.device()));
    pjrt::BufferPtr buffer = s->Materialize(ToElemType(self.scalar_type()));
    StorageOf(moved)->Assign(Runtime::Get().client().CopyToDevice(*buffer, dst.device().index()), s->elem);
    at::Tensor view = moved.as_strided(self.sizes(), self.strides(), self.storage_offset());
    CopyInto(view, dst);
    return dst;
  }
  CopyInto(self, dst);
  return dst;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    at::Tensor d = dst;
    Resize(d, self.sizes(), std::nullopt);
  }
  return CopyFrom(self, dst, false);
}

at::Scalar LocalScalarDense(const at::Tensor& self) {
  GetMetrics().CountSync("item");
  return at::_local_scalar_dense(HostView(self));
}

at::Tensor CopyInto(const at::Tensor& src, const at::Tensor& dst) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("torch_tpu::_copy_into", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&)>();
  return op.call(src, dst);
}

// Meta for _copy_into: the source must broadcast to the destination.
at::Tensor CopyIntoMeta(const at::Tensor& src, const at::Tensor& dst) {
  at::infer_size(src.sizes(), dst.sizes());
  TORCH_CHECK(at::infer_size(src.sizes(), dst.sizes()) == dst.sizes().vec(), "output with shape ", dst.sizes(),
              " doesn't match the broadcast shape ", at::infer_size(src.sizes(), dst.sizes()));
  return dst;
}

void BoxedFallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  CpuFallback(op, stack);
}

void RecordStream(at::Tensor&, c10::Stream) {}

}  // namespace

TORCH_LIBRARY(torch_tpu, m) {
  // Writes `src` (cast and broadcast) into `out`: the device-to-device copy.
  m.def("_copy_into(Tensor src, *, Tensor(a!) out) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(torch_tpu, Meta, m) { m.impl("_copy_into", CopyIntoMeta); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", Empty);
  m.impl("empty_strided", EmptyStrided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("alias", at::native::alias);
  m.impl("resize_", Resize);
  m.impl("set_.source_Storage_storage_offset", SetStorage);
  m.impl("set_.source_Storage", SetSourceStorage);
  m.impl("set_.source_Tensor", SetSourceTensor);
  m.impl("set_", SetEmpty);
  m.impl("_copy_from", CopyFrom);
  m.impl("_copy_from_and_resize", CopyFromAndResize);
  m.impl("_local_scalar_dense", LocalScalarDense);
  m.impl("record_stream", RecordStream);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&BoxedFallback>()); }

// Autocast on tpu: ops without a policy fall through.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

}  // namespace tpu::aten
