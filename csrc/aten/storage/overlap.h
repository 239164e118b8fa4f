// Writes that overlap the op's own memory raise as on the CPU (overlap.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace tpu::aten {

// For an in-place op (`inplace`, the target is argument 0) or an out= op (the last `num_outs`
// arguments): raises the CPU's error when a target has internal overlap or partially overlaps
// an input.
void CheckWriteOverlap(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first, size_t num_args,
                       size_t num_outs, bool inplace);

// Whether a target shares its storage with another tensor argument (not the same tensor):
// only then can partial overlap vary between calls of one signature.
bool WritesIntoAnAliasedStorage(const torch::jit::Stack& stack, size_t first, size_t num_args, size_t num_outs,
                                bool inplace);

}  // namespace tpu::aten
