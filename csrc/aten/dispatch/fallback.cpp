// The CPU fallback (DESIGN.md "Errors"): an op without a native kernel runs on the CPU with a
// one-time warning and a counter; TORCH_TPU_STRICT=1 makes that an error.
#include <ATen/native/CPUFallback.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "../common.h"
#include "dispatch.h"
#include "../../runtime/metrics.h"

namespace tpu::aten {
namespace {

bool StrictFallback() {
  static bool strict = [] {
    const char* env = std::getenv("TORCH_TPU_STRICT");
    return env && std::strcmp(env, "0") != 0 && *env;
  }();
  return strict;
}

}  // namespace

void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = c10::toString(op.operator_name());
  TORCH_CHECK(!StrictFallback(), "tpu: ", name,
              " has no native tpu kernel and TORCH_TPU_STRICT=1 forbids running it on the CPU");
  static std::mutex mu;
  static std::unordered_set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(name).second) {
      TORCH_WARN("tpu: ", name, " has no native tpu kernel; it runs on the CPU (slow). ",
                 "Set TORCH_TPU_STRICT=1 to make this an error.");
    }
  }
  runtime::GetMetrics().CountFallback(name);
  // PyTorch's cpu_fallback moves Tensor and Tensor[] arguments but not Tensor?[] (index_put's
  // indices): move those here; they are read-only inputs.
  const size_t num_args = op.schema().arguments().size();
  for (size_t i = stack->size() - num_args; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (!v.isOptionalTensorList()) continue;
    c10::List<std::optional<at::Tensor>> moved;
    for (const c10::IValue& item : v.toListRef()) {
      if (item.isNone() || !item.toTensor().defined()) moved.push_back(std::nullopt);
      else moved.push_back(item.toTensor().cpu());
    }
    v = moved;
  }
  at::native::cpu_fallback(op, stack, false, c10::DispatchKey::CPU);
}

}  // namespace tpu::aten
