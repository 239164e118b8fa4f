#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace tpu::aten {

// Registers the generic boxed kernel for every op in the lowering table, plus the in-place
// and out= variants derived from each functional op. Call once, after static initialisers.
void RegisterLoweredOps();
// Runs `op` on the CPU with a one-time warning and a counter; errors under TORCH_TPU_STRICT=1.
void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// Names of the ATen overloads that have a native kernel on tpu.
std::vector<std::string> NativeOps();

}  // namespace tpu::aten
