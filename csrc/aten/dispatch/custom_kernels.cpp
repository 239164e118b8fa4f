// torch_tpu._C's side of custom kernels (torch_tpu/kernels, DESIGN.md "Custom kernels"):
// registering a kernel op with the generic boxed kernel, its exported modules with the
// lowering layer, and the plugin's StableHLO range that imported modules are checked against.
#include <torch/csrc/utils/pybind.h>

#include "dispatch.h"
#include "../../lowering/custom_kernel.h"
#include "../../runtime/runtime.h"

namespace py = pybind11;

namespace tpu::aten {
namespace {

// (element type name as MLIR prints it, dims) pairs, as torch_tpu/kernels/_stablehlo.py parses them.
std::vector<shlo::TensorType> TypesOf(const py::list& types) {
  std::vector<shlo::TensorType> out;
  for (py::handle h : types) {
    auto t = h.cast<py::tuple>();
    out.push_back({lowering::ElemTypeFromMlir(t[0].cast<std::string>()), t[1].cast<std::vector<int64_t>>()});
  }
  return out;
}

}  // namespace

void RegisterKernelBindings(py::module_& m) {
  m.def("_kernel_register_op", &RegisterKernelOp);
  m.def("_kernel_add_variant", [](const std::string& op, const std::string& statics, const std::string& functions,
                                  const std::string& entry, const py::list& inputs, const py::list& results) {
    lowering::KernelModule module{functions, entry, TypesOf(inputs), TypesOf(results)};
    lowering::AddKernelVariant(op, statics, std::move(module));
  });
  m.def("_kernel_variant_count", &lowering::KernelVariantCount);
  m.def("_plugin_attributes", [] { return runtime::Runtime::Get().client().plugin()->Attributes(); });
}

}  // namespace tpu::aten
