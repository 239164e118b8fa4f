// How hard the compiler works on a program. Lowering the plugin's optimisation effort (LLVM at
// -O0 on the XLA CPU plugin) cuts a small program's compile time by more than half, but changes
// float results (transcendental approximations, FMA contraction, vectorised reductions): so only
// programs whose every operation is exact whatever the code generator does are compiled quickly.
// Torch-free.
#pragma once

#include <string>

namespace tpu::runtime {

enum class Effort { kFull, kQuick };

// True when every operation of `module_text` gives the same bits at any optimisation level:
// data movement (reshape, slice, concatenate, gather, scatter without a combiner, select,
// compare, convert, ...), and any operation on integer and boolean types only. Float arithmetic,
// custom calls and calls to other functions are not.
bool ExactAtAnyEffort(const std::string& module_text);

}  // namespace tpu::runtime
