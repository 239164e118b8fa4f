// Sparse layouts on tpu are refused with one error that names the layout, instead of the
// dispatcher's kernel listing. Every op on a sparse tpu tensor (COO: SparsePrivateUse1; CSR,
// CSC, BSR, BSC: SparseCsrPrivateUse1) lands here, including the op that creates a COO tensor
// (_sparse_coo_tensor_with_dims_and_tensors, behind x.to_sparse(), sparse_coo_tensor(device=)
// and .to("tpu")), so no COO tensor is ever half made. PyTorch builds compressed tensors
// without dispatching on the new tensor, so a CSR tensor can exist on tpu, but the first op
// on it raises here. Sparse tensors stay usable on the CPU; x.to_dense() moves their values.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace tpu::aten {
namespace {

std::string PythonName(at::Layout layout) {
  switch (layout) {
    case at::kSparse: return "sparse_coo";
    case at::kSparseCsr: return "sparse_csr";
    case at::kSparseCsc: return "sparse_csc";
    case at::kSparseBsr: return "sparse_bsr";
    case at::kSparseBsc: return "sparse_bsc";
    default: return c10::str(layout);
  }
}

// The sparse layout among the op's arguments (a sparse tensor, or a `layout=` argument such as
// empty's), as Python prints it.
std::string SparseLayoutOf(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const char* fallback) {
  const auto& args = op.schema().arguments();
  size_t first = stack.size() - std::min(args.size(), stack.size());
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().layout() != at::kStrided)
      return PythonName(v.toTensor().layout());
    if (v.isInt() && args[i - first].name() == "layout" && v.toInt() != static_cast<int64_t>(at::kStrided))
      return PythonName(static_cast<at::Layout>(v.toInt()));
  }
  return fallback;
}

[[noreturn]] void Refuse(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const char* layout) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu: sparse tensors (layout torch.", SparseLayoutOf(op, stack, layout),
                              ") are not supported on tpu (", op.operator_name(),
                              "); keep them on the CPU, or use dense tensors on tpu (x.to_dense())");
}

void RefuseCoo(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  Refuse(op, *stack, "sparse_coo");
}

void RefuseCompressed(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  Refuse(op, *stack, "sparse_csr");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&RefuseCoo>()); }
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&RefuseCompressed>());
}

}  // namespace tpu::aten
