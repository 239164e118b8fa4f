// torch.autocast("tpu"): CUDA's op lists and policies (ATen/autocast_mode.h): matmuls and
// convolutions in the lower precision (PyTorch's default for a device, float16, unless
// torch.autocast("tpu", dtype=torch.bfloat16) asks for bf16; torch.tpu.get_amp_supported_dtype),
// numerically sensitive ops (softmax, norms, losses, reductions) in f32, multi-input ops
// promoted to the widest input type. binary_cross_entropy is refused, as on CUDA. Ops without
// a policy fall through (kernels.cpp).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include "../torch_compat.h"

namespace tpu::aten {
namespace autocast_policies {
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

Tensor BinaryCrossEntropyBanned(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TPU_AUTOCAST_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
#define TPU_AUTOCAST_REDISPATCH(FUNC, NAME, SIGNATURE, REDISPATCH_SIGNATURE, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(FUNC, NAME, SIGNATURE, REDISPATCH_SIGNATURE, POLICY)
  AT_FORALL_LOWER_PRECISION_FP(TPU_AUTOCAST_LOWER_PRECISION)
  AT_FORALL_FP32(TPU_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(TPU_AUTOCAST_REDISPATCH)
  AT_FORALL_PROMOTE(TPU_AUTOCAST_PROMOTE)
#undef TPU_AUTOCAST_LOWER_PRECISION
#undef TPU_AUTOCAST_FP32
#undef TPU_AUTOCAST_FP32_SET_OPT_DTYPE
#undef TPU_AUTOCAST_PROMOTE
#undef TPU_AUTOCAST_REDISPATCH
  m.impl("binary_cross_entropy", BinaryCrossEntropyBanned);
}

}  // namespace autocast_policies
}  // namespace tpu::aten
