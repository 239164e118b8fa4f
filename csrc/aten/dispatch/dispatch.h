// What the rest of csrc/aten and the Python module call to reach execution: eager modes,
// synchronisation points, registration of the lowered ops, the CPU fallback.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "../../runtime/executor.h"

namespace tpu::aten {

// DESIGN.md "One op, three ways to run it": debug waits after every op; strict runs one
// program per op asynchronously; fused (the default) records ops and runs them as one
// program at a sync point. The Executor (csrc/runtime) implements the modes.
using EagerMode = runtime::Mode;
void SetEagerMode(EagerMode mode);
EagerMode GetEagerMode();
// A synchronisation point: runs the open fused graph of `device` (every device's when -1).
void SyncPoint(const char* cause, int device = -1);
// Starts the open fused graph (asynchronously; the host does not wait).
void RunPendingGraph(const char* cause);

// Registers the generic boxed kernel for every op in the lowering table, plus the in-place
// and out= variants derived from each functional op. Call once, after static initialisers.
void RegisterLoweredOps();
// Registers the generic boxed kernel for one custom kernel op (`torch_tpu::<name>`, defined
// by torch_tpu/kernels after RegisterLoweredOps ran), lowered by lowering::LowerCustomKernel.
void RegisterKernelOp(const std::string& name);
// Runs `op` on the CPU with a one-time warning and a counter; errors under TORCH_TPU_STRICT=1.
void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// Names of the ATen overloads that have a native kernel on tpu.
std::vector<std::string> NativeOps();

}  // namespace tpu::aten
