// The one argument model (DESIGN.md "One op, three ways to run it"): each schema argument is
// classified once, here, and eager, fused and compiled execution (and torch_tpu/compile.py,
// through _C._op_arguments) read that classification.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace tpu::aten {

enum class ArgRole : int {
  kStatic = 0,     // shape-defining ints, flags, strings, dtypes: part of the signature
  kTensor,         // a tensor operand (Tensor or Tensor?)
  kTensorList,     // Tensor[] / Tensor?[]
  kScalar,         // a Scalar: a run-time parameter, never part of the signature
  kScalarList,     // Scalar[] (foreach ops): run-time parameters
  kGenerator,      // Generator?: the generator's Philox state, a run-time parameter
  kImplicitRng,    // the trailing state a seeded op without a Generator argument receives
  kOutTarget,      // an out= tensor the op writes
  kInplaceTarget,  // self of an in-place op (Tensor(a!) that is not out=)
};
const char* RoleName(ArgRole role);

struct OpArguments {
  std::vector<std::string> names;  // schema order, then "generator" for an implicit RNG state
  std::vector<ArgRole> roles;      // same order
  bool implicit_rng = false;       // the last entry is kImplicitRng
  size_t num_outs = 0;             // trailing out= arguments
};
OpArguments ClassifyArguments(const c10::OperatorHandle& op);

}  // namespace tpu::aten
