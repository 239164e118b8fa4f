// The operands of one program run, gathered from tensors, and turned into an executor
// request. Shared by the eager boxed kernel and by compiled graphs, so both key, upload
// and lay out results alike.
#pragma once

#include <optional>
#include <vector>

#include "../common.h"
#include "../../runtime/program.h"

namespace tpu::aten {

struct Operands {
  std::vector<at::Tensor> slots;  // tpu tensors and 0-d CPU tensors, in argument order
  std::vector<bool> slot_is_cpu_scalar;
  std::vector<c10::Scalar> scalars;                        // run-time Scalars
  std::vector<std::optional<at::Generator>> generators;    // one per Rng parameter source
  int device = -1;                                         // of the tpu tensors (-1: none yet)
  shlo::Precision precision = shlo::Precision::Highest;    // of f32 products (precision.h), keyed
};

// Signature tags (csrc/aten/dispatch/op_program.cpp builds eager signatures from them).
enum Tag : int64_t {
  kNone = 1, kTpuTensor, kCpuScalar, kScalar, kInt, kDouble, kBool, kIntList, kDoubleList, kBoolList,
  kString, kTensorList, kGenerator, kOther, kListEnd
};

// Appends `t` as a slot and its signature to `key`: dtype, view geometry, storage size and
// value type, and which earlier slot's storage it shares (`seen` holds those storages).
// A non-tpu tensor must be a 0-d CPU tensor (a run-time scalar).
void AddTensor(Operands& ops, std::vector<int64_t>& key, const at::Tensor& t, std::vector<runtime::TpuStorage*>& seen);
void AddScalar(Operands& ops, std::vector<int64_t>& key, const c10::Scalar& s);
// The value of `s` when `special` (a lowering's lowering::SpecialScalarFn) accepts it: the
// lowering then receives it as a static Double. Bools count as 0 and 1; complex and symbolic
// Scalars never qualify.
std::optional<double> SpecialScalarValue(lowering::SpecialScalarFn special, const c10::Scalar& s);
// Appends a special Scalar's signature: its type (it decides promotion) and its value.
void AddSpecialScalar(std::vector<int64_t>& key, const c10::Scalar& s, double value);

// A tensor a program returns.
struct NewTensor {
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype;
  bool defined = true;  // false for outputs masked off (e.g. output_mask of backward ops)
};
// PyTorch's strides for a new result when they are dense and non-overlapping, else contiguous ones.
std::vector<int64_t> DenseStrides(at::IntArrayRef sizes, at::IntArrayRef strides);
std::vector<at::Tensor> NewTensors(const std::vector<NewTensor>& specs, int device);

// The request for one run of `program` over `ops`: scalar parameters and RNG states are
// uploaded now (RNG states advance their generators); `fresh` receive the new results.
runtime::Request MakeRequest(std::shared_ptr<runtime::Program> program, const Operands& ops, int device,
                             const std::vector<at::Tensor>& fresh);

}  // namespace tpu::aten
