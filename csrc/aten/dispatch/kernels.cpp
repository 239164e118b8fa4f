// Kernels that are not lowerings: allocation, views (metadata only), copies, resize,
// reading a scalar. Everything else is the generic kernel or the CPU fallback.
#include <ATen/EmptyTensor.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/InferSize.h>
#include <ATen/autocast_mode.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_resize_output_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "../distributed/collective_agreement.h"
#include "../common.h"
#include "dispatch.h"
#include "../../runtime/env.h"
#include "../../runtime/long_wait.h"
#include "../../runtime/metrics.h"

namespace tpu::aten {

using runtime::GetMetrics;
using runtime::Runtime;
using runtime::TpuStorage;

namespace {
// The name a Python user knows: "torch.float8_e4m3fn".
std::string DtypeName(c10::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }
}  // namespace

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
      TORCH_CHECK_TYPE(false, "tpu: unsupported dtype ", DtypeName(t));
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

namespace {
// A KeyboardInterrupt during a lazy import inside an op (sympy, on the first op) leaves the
// package's already-imported submodules in sys.modules without their package: importing it
// again then fails forever ("module 'sympy' has no attribute 'core'"). Those orphans are
// forgotten, so the next import starts clean and the process stays usable.
void ForgetOrphanedModules() {
  pybind11::gil_scoped_acquire gil;
  PyObject* modules = PyImport_GetModuleDict();
  for (bool removed = true; removed;) {  // again until no orphan is left (a.b, then a.b.c)
    removed = false;
    PyObject* names = PyDict_Keys(modules);
    if (names == nullptr) break;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); ++i) {
      PyObject* name = PyList_GET_ITEM(names, i);
      const char* utf8 = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : nullptr;
      if (utf8 == nullptr) continue;
      std::string n = utf8;
      size_t dot = n.rfind('.');
      if (dot == std::string::npos || PyDict_GetItemString(modules, n.substr(0, dot).c_str())) continue;
      removed |= PyDict_DelItem(modules, name) == 0;
    }
    Py_DECREF(names);
  }
  PyErr_Clear();
}
}  // namespace

namespace {
unsigned long g_main_thread = 0;  // Python runs signal handlers on this thread only

bool PythonFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// The GIL is taken only for the check itself: the waiting thread released it, so other Python
// threads keep running. A handler's exception (KeyboardInterrupt from the default SIGINT
// handler, or whatever a user's handler raises) is saved, and torch restores it at the top.
void CheckPythonSignals() {
  if (PyThread_get_thread_ident() != g_main_thread || !Py_IsInitialized() || PythonFinalizing()) return;
  pybind11::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return;
  python_error interrupted;
  interrupted.persist();
  throw interrupted;
}
}  // namespace

void InstallWaitInterruptCheck() {
  g_main_thread = pybind11::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  runtime::SetWaitInterruptCheck([] {
    CheckPythonSignals();
    SettleCollectiveChecks(/*wait=*/false);  // the device may wait in a collective that diverged
  });
  runtime::SetHostReadCheck([] { SettleCollectiveChecks(/*wait=*/true); });
}

void RethrowAsTorchError(const std::exception& e, const std::string& what) {
  // A failed device-side assert raises its own message, as a CUDA device assert would.
  if (auto* failed = dynamic_cast<const runtime::CheckFailed*>(&e)) RaiseCheckFailure(*failed);
  // An exception raised by Python code the op ran (a Python meta kernel, a lazy import) stays
  // what it was: a KeyboardInterrupt is caught by `except KeyboardInterrupt`.
  if (dynamic_cast<const python_error*>(&e) || dynamic_cast<const pybind11::error_already_set*>(&e)) {
    ForgetOrphanedModules();
    throw;
  }
  if (auto* pe = dynamic_cast<const pjrt::Error*>(&e)) {
    TORCH_CHECK_WITH(OutOfMemoryError, !pe->out_of_memory(), "tpu: out of memory in ", what, ": ", e.what());
  }
  if (dynamic_cast<const std::out_of_range*>(&e)) TORCH_CHECK_INDEX(false, what, ": ", e.what());
  if (dynamic_cast<const runtime::EnvError*>(&e)) TORCH_CHECK_VALUE(false, e.what());
  TORCH_CHECK(false, what, ": ", e.what());
}

void RaiseCheckFailure(const runtime::CheckFailed& failed) {
  switch (failed.kind()) {
    case runtime::CheckKind::Index: TORCH_CHECK_INDEX(false, failed.what());
    case runtime::CheckKind::Value: TORCH_CHECK_VALUE(false, failed.what());
    case runtime::CheckKind::Runtime: break;
  }
  TORCH_CHECK(false, failed.what());
}

void RaiseChecksOf(const runtime::TpuStorage* storage) {
  try {
    storage->RaiseChecks();
  } catch (const runtime::CheckFailed& failed) {
    RaiseCheckFailure(failed);
  }
}


namespace {

void CheckDtype(std::optional<at::ScalarType> dtype) {
  auto t = dtype.value_or(at::get_default_dtype_as_scalartype());
  TORCH_CHECK_TYPE(IsSupportedDtype(t), "tpu: unsupported dtype ", DtypeName(t));
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

// A storage written as raw bytes (torch.load fills untyped storages) is re-typed to the
// element type of a tensor set onto it, so programs read it without a size-changing bitcast.
void AdoptElemType(const at::Tensor& self) {
  if (!IsSupportedDtype(self.scalar_type()) || self.storage().nbytes() == 0) return;
  TpuStorage* s = StorageOf(self);
  shlo::ElemType want = ToElemType(self.scalar_type());
  size_t size = shlo::ByteSize(want);
  {
    std::lock_guard<std::mutex> lock(s->mu);
    // Only raw bytes: a storage already typed by its tensors keeps its element type.
    if (!s->buffer || s->elem != shlo::ElemType::U8 || size == 1 || s->nbytes % size != 0) return;
  }
  std::vector<char> bytes(s->nbytes);
  s->ReadBytes(bytes.data());
  UploadWholeStorage(s, bytes.data(), want);
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
  AdoptElemType(self);
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
  // Its device's open graph runs, not every device's: a rank thread reading its own value must
  // not cut the graph another rank thread is recording.
  SyncPoint("device to host", s->device);
  GetMetrics().CountSync("device_to_host");
  RaiseChecksOf(s);
  auto bytes = at::empty({static_cast<int64_t>(s->nbytes)}, at::TensorOptions().dtype(at::kByte));
  s->ReadBytes(bytes.data_ptr());
  auto typed = at::empty({0}, src.options().device(at::kCPU));
  typed.set_(bytes.storage(), StorageOffsetOf(src), src.sizes(), src.strides());
  return typed;
}

at::Tensor CopyInto(const at::Tensor& src, const at::Tensor& dst);

// The same view of the same memory without the lazy conj/neg bits: the values as stored.
at::Tensor Physical(const at::Tensor& t) {
  if (!t.is_conj() && !t.is_neg()) return t;
  at::Tensor raw = at::alias(t);
  raw._set_conj(false);
  raw._set_neg(false);
  return raw;
}

// Applies the lazy bits of `like` to values without bits. Reading a tensor turns its stored
// values into its logical ones; writing into one needs the same map (conj and neg are involutions).
at::Tensor ApplyBits(at::Tensor v, const at::Tensor& like) {
  if (like.is_conj()) v = at::conj_physical(v);
  if (like.is_neg()) v = at::neg(v);
  return v;
}

// Depth of host-to-device copies staged through a device program on this thread.
thread_local int t_staged_copy_depth = 0;
struct StagedCopyScope {
  StagedCopyScope() { ++t_staged_copy_depth; }
  ~StagedCopyScope() { --t_staged_copy_depth; }
};

// Writes `host` (the view's dtype and shape, contiguous) into the view `dst` by reading the
// whole storage, patching it on the host and uploading it again (its element type kept).
void WriteViewOnHost(const at::Tensor& dst, const at::Tensor& host) {
  TpuStorage* s = StorageOf(dst);
  GetMetrics().CountSync("device_to_host");
  auto bytes = at::empty({static_cast<int64_t>(s->nbytes)}, at::TensorOptions().dtype(at::kByte));
  s->ReadBytesUnchecked(bytes.data_ptr());  // a write: the rest of the storage keeps its checks
  runtime::CheckSet guards = s->Checks();
  auto view = at::empty({0}, dst.options().device(at::kCPU));
  view.set_(bytes.storage(), StorageOffsetOf(dst), dst.sizes(), dst.strides());
  view.copy_(host);
  shlo::ElemType elem = ToElemType(dst.scalar_type());
  std::vector<int64_t> dims;  // the buffer keeps its shape
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->buffer) elem = s->elem, dims = s->dims;
  }
  if (s->nbytes % shlo::ByteSize(elem) != 0) elem = shlo::ElemType::U8, dims.clear();
  UploadWholeStorage(s, bytes.data_ptr(), elem, dims);
  s->SetChecks(std::move(guards));
}

// Handles every copy that involves tpu: host to device, device to host, device to device
// (also across device indexes), dtype casts, broadcast, arbitrary strides and conj/neg bits.
// The Conjugate and Negative keys fall through to here (see below), so no clone that resolves
// the bits (itself a copy) recurses into this kernel.
at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  (void)non_blocking;  // PJRT orders transfers after the computations they depend on
  if (self.numel() == 0 && dst.numel() == 0) return dst;
  if (dst.device().type() != kTpu) {
    at::Tensor host = HostView(self);
    host._set_conj(self.is_conj());
    host._set_neg(self.is_neg());
    dst.copy_(host);  // a CPU copy: handles casts, broadcast and the bits of both sides
    return dst;
  }
  // The checks TensorIterator makes for a CPU copy, with the same messages.
  at::assert_no_internal_overlap(dst);
  if (self.device() == dst.device()) at::assert_no_partial_overlap(dst, self);
  at::Tensor out = Physical(dst);
  if (self.device().type() != kTpu) {
    // Host to device: cast and broadcast on the host, upload, then write the view. A source on
    // another device (a CUDA tensor .to("tpu")) comes to the host first: its data pointer is
    // that device's memory, which the upload would read as host memory (a segfault).
    TORCH_CHECK_TYPE(IsSupportedDtype(dst.scalar_type()), "tpu: unsupported dtype ", DtypeName(dst.scalar_type()));
    at::Tensor on_host = self.device().is_cpu() ? self : self.cpu();
    at::Tensor host = ApplyBits(on_host.resolve_conj().resolve_neg().to(dst.scalar_type()), dst);
    host = host.expand(dst.sizes()).contiguous();
    auto g = GeometryOf(out);
    TpuStorage* s = StorageOf(out);
    if (lowering::IsWholeStorage(g)) {
      UploadWholeStorage(s, host.data_ptr(), ToElemType(dst.scalar_type()), g.sizes);
      return dst;
    }
    bool other_elem_size;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      other_elem_size = s->buffer && shlo::ByteSize(s->elem) != static_cast<size_t>(dst.element_size());
    }
    if (other_elem_size || t_staged_copy_depth > 0) {
      // A device program cannot write this view (or already failed to: the CPU fallback of
      // the staged copy below writes back through here). Patch the bytes on the host.
      WriteViewOnHost(out, host);
      return dst;
    }
    c10::DeviceGuard guard(dst.device());
    at::Tensor staged = at::empty(dst.sizes(), out.options());
    UploadWholeStorage(StorageOf(staged), host.data_ptr(), ToElemType(dst.scalar_type()));
    StagedCopyScope scope;
    CopyInto(staged, out);
    return dst;
  }
  at::Tensor src = Physical(self);
  if (self.device() != dst.device()) {
    // Across devices: move the source's whole storage, then copy within the target device.
    TpuStorage* s = StorageOf(src);
    RaiseChecksOf(s);  // a copy to another device reads the value, as a copy to the host does
    c10::DeviceGuard guard(dst.device());
    at::Tensor moved = at::empty({static_cast<int64_t>(s->nbytes / src.element_size())},
                                 src.options().device(dst.device()));
    pjrt::BufferPtr buffer = s->Materialize(ToElemType(src.scalar_type()));
    StorageOf(moved)->Assign(Runtime::Get().client().CopyToDevice(*buffer, dst.device().index()), s->elem, {},
                             s->dims);
    src = moved.as_strided(src.sizes(), src.strides(), StorageOffsetOf(src));
  }
  c10::DeviceGuard guard(dst.device());
  CopyInto(ApplyBits(ApplyBits(src, self), dst), out);
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

// Meta for _copy_into: the source must broadcast to the destination (the CPU copy_'s
// messages: "tensor a" is the destination).
at::Tensor CopyIntoMeta(const at::Tensor& src, const at::Tensor& dst) {
  auto shape = at::infer_size(dst.sizes(), src.sizes());
  TORCH_CHECK(shape == dst.sizes().vec(), "output with shape ", dst.sizes(), " doesn't match the broadcast shape ",
              shape);
  return dst;
}

// On CPU tensors _copy_into is copy_ (an error raised at Meta inference is replayed on the CPU).
at::Tensor CopyIntoCpu(const at::Tensor& src, const at::Tensor& dst) {
  at::Tensor out = dst;
  out.copy_(src);
  return dst;
}

// A view op run on the CPU would return a copy: aliasing would silently break.
bool IsViewOp(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns())
    if (r.alias_info() && !r.alias_info()->isWrite()) return true;
  return false;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The tpu device a fallback call runs for: its first tpu tensor, else the current device.
int DeviceOfCall(const torch::jit::Stack& stack, size_t first) {
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kTpu)
      return v.toTensor().device().index();
    if (v.isDevice() && v.toDevice().type() == kTpu && v.toDevice().has_index()) return v.toDevice().index();
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList())
        if (t.defined() && t.device().type() == kTpu) return t.device().index();
  }
  return CurrentDevice();
}

// A random op run by the CPU fallback draws from a fresh CPU generator seeded by the tpu
// generator's (seed, offset), which then advances: torch.tpu.manual_seed and tpu
// torch.Generator objects reproduce it, and the CPU's default generator is left alone.
void SubstituteGenerators(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  size_t first = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    c10::TypePtr type = args[i].type();
    if (type->kind() == c10::TypeKind::OptionalType) type = type->castRaw<c10::OptionalType>()->getElementType();
    if (type->kind() != c10::TypeKind::GeneratorType) continue;
    c10::IValue& v = (*stack)[first + i];
    std::optional<at::Generator> gen;
    if (!v.isNone()) {
      gen = v.toGenerator();
      if (gen->device().type() != kTpu) continue;  // a CPU generator: the CPU kernel decides
    }
    int device = gen ? gen->device().index() : DeviceOfCall(*stack, first);
    auto [seed, offset] = NextPhiloxState(gen, device, 4);
    v = c10::IValue(at::make_generator<at::CPUGeneratorImpl>(SplitMix64(seed ^ SplitMix64(offset))));
  }
}

// The fallback moves every tensor to the CPU, which would hide a device mismatch: check as a
// device kernel does. CPU 0-d tensors mix with any device; index lists (Tensor?[]) may be on
// the CPU, as on CUDA.
void CheckSameDevice(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  size_t first = stack.size() - args.size();
  std::optional<c10::Device> device;
  auto visit = [&](const at::Tensor& t, const std::string& name) {
    if (!t.defined() || (t.device().is_cpu() && t.dim() == 0)) return;
    if (!device) {
      device = t.device();
      return;
    }
    TORCH_CHECK(t.device() == *device, "Expected all tensors to be on the same device, but got ", name, " is on ",
                t.device(), ", different from other tensors on ", *device, " (when checking argument in method ",
                op.operator_name(), ")");
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    if (v.isTensor()) visit(v.toTensor(), args[i].name());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList()) visit(t, args[i].name());
  }
}

void BoxedFallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  TORCH_CHECK_NOT_IMPLEMENTED(!IsViewOp(op.schema()), "tpu: the view op ", op.operator_name(),
                              " has no native tpu kernel (a CPU fallback cannot alias device memory)");
  CheckSameDevice(op, *stack);
  SubstituteGenerators(op, stack);
  // An op with only accelerator kernels (the cuDNN family) would fail in the CPU dispatcher
  // with its whole kernel listing: say in one line what is missing instead.
  const auto no_kernel = [&] {
    return c10::NotImplementedError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                    "tpu: " + c10::toString(op.operator_name()) +
                                        " has neither a tpu lowering nor a CPU kernel to fall back to");
  };
  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) throw no_kernel();
  try {
    CpuFallback(op, stack);
  } catch (const c10::NotImplementedError& e) {
    // The dispatcher's "Could not run 'op' with arguments from the 'CPU' backend" (a kernel
    // the CPU one calls is missing); the CPU kernel's own NotImplementedErrors pass through.
    if (std::string(e.what_without_backtrace()).rfind("Could not run '", 0) == 0) throw no_kernel();
    throw;
  }
}

// native_dropout from native ops (the CPU kernel's formula), so dropout runs on the device
// and draws from the tpu generator: mask ~ Bernoulli(1 - p), out = input * mask / (1 - p).
std::tuple<at::Tensor, at::Tensor> NativeDropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input, input.options().dtype(at::kBool))};
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  double keep = 1.0 - p;
  double scale = keep == 0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = at::empty_like(input, at::MemoryFormat::Contiguous).bernoulli_(keep);
  at::Tensor out = input.mul(mask).mul_(scale);
  return {out, mask.to(at::kBool)};
}

at::Tensor NativeDropoutBackward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  return grad.mul(mask.to(grad.scalar_type())).mul_(scale);
}

void RecordStream(at::Tensor&, c10::Stream) {}

// `cpu_param.data = tpu_tensor` (and back) is allowed, as between CPU and CUDA.
bool HasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.device().type() == kTpu || t.device().is_cpu());
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) || (dense(self) && dense(from));
}

}  // namespace

// Kernels built from other tpu ops, for ATen ops that have no lowering (yet): registered
// after the lowered ones, and only where the lowering table has no entry.
void RegisterCompositeKernels() {
  static bool done = false;
  if (done) return;
  done = true;
  auto lowered = lowering::RegisteredOps();
  auto has = [&](const char* name) { return std::find(lowered.begin(), lowered.end(), name) != lowered.end(); };
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                                        __LINE__);
  if (!has("aten::native_dropout")) lib->impl("native_dropout", NativeDropout);
  if (!has("aten::native_dropout_backward")) lib->impl("native_dropout_backward", NativeDropoutBackward);
}

TORCH_LIBRARY(torch_tpu, m) {
  // Writes `src` (cast and broadcast) into `out`: the device-to-device copy.
  m.def("_copy_into(Tensor src, *, Tensor(a!) out) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(torch_tpu, Meta, m) { m.impl("_copy_into", CopyIntoMeta); }
TORCH_LIBRARY_IMPL(torch_tpu, CPU, m) { m.impl("_copy_into", CopyIntoCpu); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", Empty);
  m.impl("empty_strided", EmptyStrided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("alias", at::native::alias);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("is_set_to", at::native::is_set_to);
  m.impl("_resize_output_", at::native::_resize_output_);
  m.impl("resize_", Resize);
  m.impl("set_.source_Storage_storage_offset", SetStorage);
  m.impl("set_.source_Storage", SetSourceStorage);
  m.impl("set_.source_Tensor", SetSourceTensor);
  m.impl("set_", SetEmpty);
  m.impl("_copy_from", CopyFrom);
  m.impl("_copy_from_and_resize", CopyFromAndResize);
  m.impl("_local_scalar_dense", LocalScalarDense);
  m.impl("record_stream", RecordStream);
  m.impl("_has_compatible_shallow_copy_type", HasCompatibleShallowCopyType);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&BoxedFallback>()); }

// Copies resolve conj/neg bits themselves (CopyFrom): the generic Conjugate/Negative fallbacks
// would clone the source, and a clone is a copy that lands here again.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

// Autocast on tpu: ops without a policy fall through.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

// The policy list (which ops autocast to which precision) is in autocast.cpp.

}  // namespace tpu::aten
