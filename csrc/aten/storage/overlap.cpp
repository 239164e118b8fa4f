// Writes that overlap the op's own memory: the CPU refuses an in-place or out= op whose target
// has internal overlap (an expanded tensor, `expand(...).add_`) or partially overlaps an input
// (`x[1:5] += x[0:4]`, `out=` a shifted view of an input). Meta kernels skip these checks, and
// a program would compute something else, so such a call is replayed on CPU tensors of the
// same geometry and aliasing: the CPU's own checks decide, with its message. The signature
// records every tensor's geometry and aliasing, so this runs once per signature (on a miss),
// except where a written storage is also read through another view: a view's offset may be a
// run-time parameter, outside the signature, so such calls are checked every time.
#include <ATen/MemoryOverlap.h>

#include <unordered_map>

#include "../common.h"
#include "overlap.h"

namespace tpu::aten {
namespace {

bool IsTpu(const at::Tensor& t) { return t.defined() && t.device().type() == kTpu; }

void TensorsOf(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) {
    if (IsTpu(v.toTensor())) out.push_back(v.toTensor());
  } else if (v.isTensorList() || v.isOptionalTensorList()) {
    for (const c10::IValue& item : v.toListRef())
      if (item.isTensor() && IsTpu(item.toTensor())) out.push_back(item.toTensor());
  }
}

bool Overlaps(const std::vector<at::Tensor>& written, const std::vector<at::Tensor>& read) {
  for (const at::Tensor& w : written) {
    if (w.numel() == 0) continue;
    if (at::has_internal_overlap(w) == at::MemOverlap::Yes) return true;
    for (const at::Tensor& r : read)
      if (!r.is_same(w) && at::get_overlap_status(w, r) == at::MemOverlapStatus::Partial) return true;
  }
  return false;
}

// The call on CPU zeros that alias as the tpu tensors do (one host buffer per tpu storage).
void ReplayOnCpu(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first, size_t n) {
  std::unordered_map<const void*, c10::Storage> hosts;
  auto host = [&](const at::Tensor& t) -> at::Tensor {
    if (!IsTpu(t)) return t;
    const void* key = t.storage().unsafeGetStorageImpl();
    auto it = hosts.find(key);
    if (it == hosts.end()) {
      at::Tensor bytes = at::zeros({static_cast<int64_t>(t.storage().nbytes())}, at::kByte);
      it = hosts.emplace(key, bytes.storage()).first;
    }
    at::Tensor v = at::empty({0}, t.options().device(at::kCPU));
    v.set_(it->second, t.storage_offset(), t.sizes(), t.strides());
    return v;
  };
  torch::jit::Stack cpu;
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = stack[first + i];
    if (v.isTensor()) {
      cpu.emplace_back(host(v.toTensor()));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) list.push_back(host(t));
      cpu.emplace_back(list);
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const c10::IValue& item : v.toListRef())
        list.push_back(item.isNone() ? std::nullopt : std::optional<at::Tensor>(host(item.toTensor())));
      cpu.emplace_back(list);
    } else if (v.isDevice()) {
      cpu.emplace_back(c10::Device(at::kCPU));
    } else {
      cpu.push_back(v);
    }
  }
  op.callBoxed(cpu);
}

void Split(const torch::jit::Stack& stack, size_t first, size_t num_args, size_t num_outs, bool inplace,
           std::vector<at::Tensor>& written, std::vector<at::Tensor>& read) {
  for (size_t i = 0; i < num_args; ++i) {
    bool is_written = inplace ? i == 0 : i >= num_args - num_outs;
    TensorsOf(stack[first + i], is_written ? written : read);
  }
}

}  // namespace

bool WritesIntoAnAliasedStorage(const torch::jit::Stack& stack, size_t first, size_t num_args, size_t num_outs,
                                bool inplace) {
  std::vector<at::Tensor> written, read;
  Split(stack, first, num_args, num_outs, inplace, written, read);
  for (size_t i = 0; i < written.size(); ++i) {
    for (const at::Tensor& r : read)
      if (!r.is_same(written[i]) && r.storage().is_alias_of(written[i].storage())) return true;
    for (size_t j = i + 1; j < written.size(); ++j)
      if (written[j].storage().is_alias_of(written[i].storage())) return true;
  }
  return false;
}

void CheckWriteOverlap(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first, size_t num_args,
                       size_t num_outs, bool inplace) {
  std::vector<at::Tensor> written, read;
  Split(stack, first, num_args, num_outs, inplace, written, read);
  if (written.empty() || !Overlaps(written, read)) return;
  ReplayOnCpu(op, stack, first, num_args);  // raises as the CPU does; else the op is fine there too
}

}  // namespace tpu::aten
