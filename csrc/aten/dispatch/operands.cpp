#include "operands.h"

#include <cstring>

#include "../../runtime/executor.h"

namespace tpu::aten {

using runtime::Executor;
using runtime::Runtime;
using runtime::TpuStorage;

void AddTensor(Operands& ops, std::vector<int64_t>& k, const at::Tensor& t, std::vector<TpuStorage*>& seen) {
  if (t.device().type() != kTpu) {
    TORCH_CHECK(t.dim() == 0 && t.device().is_cpu(),
                "Expected all tensors to be on the same device, but found at least two devices, tpu:",
                ops.device < 0 ? 0 : ops.device, " and ", t.device(), "!");
    k.push_back(kCpuScalar);
    k.push_back(static_cast<int64_t>(t.scalar_type()));
    ops.slots.push_back(t);
    ops.slot_is_cpu_scalar.push_back(true);
    return;
  }
  int dev = t.device().index();
  if (ops.device < 0) ops.device = dev;
  TORCH_CHECK(ops.device == dev, "Expected all tensors to be on the same device, but found at least two devices, tpu:",
              ops.device, " and tpu:", dev, "!");
  TpuStorage* s = StorageOf(t);
  k.push_back(kTpuTensor);
  k.push_back(static_cast<int64_t>(t.scalar_type()));
  k.push_back(t.dim());
  for (int64_t d : t.sizes()) k.push_back(d);
  for (int64_t d : t.strides()) k.push_back(d);
  k.push_back(OffsetKey(t));  // negative: a run-time parameter
  k.push_back(static_cast<int64_t>(s->nbytes));
  if (s->buffer || s->pending) {
    k.push_back(static_cast<int64_t>(s->elem));
    k.push_back(static_cast<int64_t>(s->dims.size()));  // the buffer's shape (runtime.h): 0 when 1-D
    for (int64_t d : s->dims) k.push_back(d);
  } else {
    k.push_back(-1);
  }
  int64_t alias = -1;
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] == s) alias = static_cast<int64_t>(i);
  k.push_back(alias);
  seen.push_back(s);
  ops.slots.push_back(t);
  ops.slot_is_cpu_scalar.push_back(false);
}

void AddScalar(Operands& ops, std::vector<int64_t>& key, const c10::Scalar& s) {
  key.push_back(kScalar);
  key.push_back(s.isFloatingPoint() ? 1 : s.isIntegral(false) ? 2 : s.isBoolean() ? 3 : 4);
  ops.scalars.push_back(s);
}

std::optional<double> SpecialScalarValue(lowering::SpecialScalarFn special, const c10::Scalar& s) {
  if (!special || s.isComplex() || s.isSymbolic()) return std::nullopt;
  double v = s.isBoolean() ? (s.toBool() ? 1.0 : 0.0) : s.toDouble();
  if (!special(v)) return std::nullopt;
  return v;
}

void AddSpecialScalar(std::vector<int64_t>& key, const c10::Scalar& s, double value) {
  key.push_back(kDouble);
  key.push_back(s.isFloatingPoint() ? 1 : s.isIntegral(false) ? 2 : 3);
  int64_t bits;
  std::memcpy(&bits, &value, 8);
  key.push_back(bits);
}

namespace {

bool IsDense(at::IntArrayRef sizes, at::IntArrayRef strides) {
  if (strides.size() != sizes.size()) return false;
  std::vector<int64_t> perm(sizes.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  int64_t expected = 1;
  for (auto it = perm.rbegin(); it != perm.rend(); ++it) {
    if (sizes[*it] != 1 && strides[*it] != expected) return false;
    expected *= sizes[*it];
  }
  return true;
}

pjrt::BufferPtr UploadScalar(const at::Tensor& cpu_value, shlo::ElemType elem, int device) {
  at::Tensor v = cpu_value.to(ToScalarType(elem));
  return Runtime::Get().client().FromHost(v.data_ptr(), runtime::ToPjrt(elem), {}, device);
}

// One device buffer per distinct value (Executor::ScalarBuffer); conversion on a miss is the
// tensor cast the uncached path uses.
pjrt::BufferPtr ScalarBuffer(const c10::Scalar& s, shlo::ElemType elem, int device) {
  runtime::ScalarKey key{static_cast<int>(s.type()), static_cast<int>(elem), device, {0, 0}};
  if (s.isComplex()) {
    auto c = s.toComplexDouble();
    double re = c.real(), im = c.imag();
    std::memcpy(&key.bits[0], &re, 8);
    std::memcpy(&key.bits[1], &im, 8);
  } else if (s.isFloatingPoint()) {
    double d = s.toDouble();
    std::memcpy(&key.bits[0], &d, 8);
  } else if (s.isBoolean()) {
    key.bits[0] = s.toBool();
  } else if (s.isIntegral(false) && !s.isSymbolic()) {
    int64_t v = s.toLong();
    std::memcpy(&key.bits[0], &v, 8);
  } else {
    return UploadScalar(at::scalar_tensor(s, at::TensorOptions().dtype(s.type())), elem, device);
  }
  return Executor::Get().ScalarBuffer(key, [&] {
    return UploadScalar(at::scalar_tensor(s, at::TensorOptions().dtype(s.type())), elem, device);
  });
}

pjrt::BufferPtr ScalarBuffer(const at::Tensor& cpu_value, shlo::ElemType elem, int device) {
  size_t size = cpu_value.element_size();
  if (cpu_value.numel() != 1 || size > 16 || !cpu_value.device().is_cpu()) return UploadScalar(cpu_value, elem, device);
  runtime::ScalarKey key{100 + static_cast<int>(cpu_value.scalar_type()), static_cast<int>(elem), device, {0, 0}};
  std::memcpy(key.bits, cpu_value.data_ptr(), size);
  return Executor::Get().ScalarBuffer(key, [&] { return UploadScalar(cpu_value, elem, device); });
}

}  // namespace

std::vector<int64_t> DenseStrides(at::IntArrayRef sizes, at::IntArrayRef strides) {
  if (IsDense(sizes, strides)) return strides.vec();
  auto contiguous = c10::contiguous_strides(sizes);
  return std::vector<int64_t>(contiguous.begin(), contiguous.end());
}

std::vector<at::Tensor> NewTensors(const std::vector<NewTensor>& specs, int device) {
  std::vector<at::Tensor> fresh;
  fresh.reserve(specs.size());
  c10::DeviceGuard guard(c10::Device(kTpu, static_cast<c10::DeviceIndex>(device)));
  for (const NewTensor& nt : specs) {
    if (!nt.defined) {
      fresh.emplace_back();
      continue;
    }
    fresh.push_back(at::empty_strided(nt.sizes, nt.strides, at::TensorOptions().dtype(nt.dtype).device(kTpu, device)));
  }
  return fresh;
}

runtime::Request MakeRequest(std::shared_ptr<runtime::Program> program, const Operands& ops, int device,
                             const std::vector<at::Tensor>& fresh) {
  runtime::Request r;
  r.device = device;
  r.storages.reserve(ops.slots.size());
  for (size_t i = 0; i < ops.slots.size(); ++i)
    r.storages.push_back(ops.slot_is_cpu_scalar[i] ? nullptr : StorageOf(ops.slots[i]));
  r.new_storages.reserve(fresh.size());
  for (const at::Tensor& t : fresh)
    if (t.defined()) r.new_storages.push_back(StorageOf(t));
  r.host_params.reserve(program->params.size());
  for (const runtime::ParamSource& src : program->params) {
    if (src.kind == runtime::ParamSource::Storage) {
      r.host_params.emplace_back();
    } else if (src.kind == runtime::ParamSource::Scalar) {
      r.host_params.push_back(src.slot >= 0 ? ScalarBuffer(ops.slots[src.slot], src.elem, device)
                                            : ScalarBuffer(ops.scalars[-1 - src.slot], src.elem, device));
    } else if (src.kind == runtime::ParamSource::Offset) {
      r.host_params.push_back(ScalarBuffer(c10::Scalar(StorageOffsetOf(ops.slots[src.slot])), src.elem, device));
    } else {
      auto [seed, offset] = NextPhiloxState(ops.generators[src.slot], device, src.rng_increment);
      uint64_t state[2] = {seed, offset};
      r.host_params.push_back(Runtime::Get().client().FromHost(state, PJRT_Buffer_Type_U64, {2}, device));
    }
  }
  r.program = std::move(program);
  return r;
}

}  // namespace tpu::aten
