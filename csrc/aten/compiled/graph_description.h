// The description of an FX graph that torch_tpu/compile.py sends to a compiled graph
// (compiled_graph.cpp): its values' types, its nodes with their arguments, and its outputs,
// decoded from Python objects.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>
#include <vector>

#include "../dispatch/arguments.h"
#include "../common.h"

namespace tpu::aten::graph {

// Argument kinds, as torch_tpu/compile.py encodes them: (kind, payload).
enum ArgKind {
  kNoneArg = 0, kTensorArg, kScalarArg, kIntArg, kDoubleArg, kBoolArg, kIntsArg, kDoublesArg, kBoolsArg,
  kStringArg, kTensorsArg, kScalarsArg, kDtypeArg, kLayoutArg, kMemoryFormatArg, kGeneratorArg
};

struct GType {
  bool defined = false;
  bool cpu_scalar = false;  // a 0-d CPU tensor operand, fed as a run-time scalar parameter
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> sizes, strides;
  shlo::TensorType type() const { return {ToElemType(dtype), sizes}; }
};

struct GArg {
  int kind = kNoneArg;
  lowering::Arg arg;                       // the static part (ints, flags, strings), as a lowering sees it
  int64_t id = -1;               // kTensorArg
  std::vector<int64_t> ids;      // kTensorsArg (-1 for None)
  std::vector<c10::Scalar> scalars;  // kScalarArg (one) / kScalarsArg
};

struct GNode {
  std::string name, op;
  lowering::LowerFn fn = nullptr;
  std::shared_ptr<const OpArguments> schema;  // the op's argument names and roles
  std::vector<GArg> args;
  std::vector<GType> outs;
  int64_t first_id = 0;  // value id of outs[0]
};

// One graph output: a value of the program, an input returned as is, or None.
struct GOutput {
  enum Kind { Value, Input, None } kind = None;
  int64_t index = -1;  // value id or input index
};

c10::Scalar ScalarOf(const pybind11::handle& h);
GType TypeOf(const pybind11::handle& h);
GArg ArgOf(const pybind11::handle& h);
// The classification of an op's arguments (arguments.h), once per op name; null for names
// the dispatcher does not know.
std::shared_ptr<const OpArguments> ArgumentsOf(const std::string& op);

}  // namespace tpu::aten::graph
