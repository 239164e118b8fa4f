// Custom kernels (DESIGN.md "Custom kernels"): a user's StableHLO module (exported from JAX or
// given as text) becomes the op `torch_tpu::<name>`. Its functions, renamed to be unique to one
// variant (kernel, static arguments, input types), are imported into whatever module calls it
// (a strict op's program, a fused graph, a compiled graph) as private functions, and the op
// lowers to one func.call of its entry. No torch here: torch_tpu/kernels registers variants.
#pragma once

#include <string>
#include <vector>

#include "lowering.h"

namespace tpu::lowering {

// One exported module of a kernel: its functions (all private, symbols renamed), the renamed
// @main and main's signature.
struct KernelModule {
  std::string functions;
  std::string entry;
  std::vector<TensorType> inputs, results;
};

// Makes `op` ("torch_tpu::rms_norm") a kernel op: its lowering is LowerCustomKernel.
void RegisterKernelOp(const std::string& op);
// The module `op` calls for one set of static arguments (the op's `statics` string argument)
// and input types. Replaces one registered before under the same key.
void AddKernelVariant(const std::string& op, const std::string& statics, KernelModule module);
// The number of variants registered (for tests and metrics).
size_t KernelVariantCount();
// Parses an MLIR element type name ("f32", "bf16", "i1", "ui8", "complex<f32>").
ElemType ElemTypeFromMlir(const std::string& name);

// Tensor arguments (and Tensor[] ones, flattened), in order, are the entry's operands; a String argument holds the statics.
std::vector<Value> LowerCustomKernel(Ctx& ctx, const Args& args);

}  // namespace tpu::lowering
