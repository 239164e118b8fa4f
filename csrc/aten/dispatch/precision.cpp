#include "precision.h"

#include <ATen/Context.h>

namespace tpu::aten {

// at::Context::float32MatmulPrecision() (torch.get_float32_matmul_precision) raises whenever
// the newer per-backend API has set a state it cannot name (torch.backends.fp32_precision =
// "tf32" alone does), and a raise costs about 13 us: too much for every op. So the setting is
// read where both APIs write it, the per-backend matmul precisions:
// torch.set_float32_matmul_precision("highest") sets cuda and mkldnn matmul to ieee, "high" to
// tf32, "medium" cuda to tf32 and mkldnn to bf16; the generic torch.backends.fp32_precision
// ("ieee", "tf32", "bf16") reaches both where they are unset. Under
// torch.set_float32_matmul_precision alone this is exactly what
// torch.get_float32_matmul_precision() answers; after later per-backend writes, the latest
// write wins. Convolutions follow the matmul setting too, not cudnn.conv (TF32 by default on
// CUDA): tpu's default stays full f32 everywhere, as PyTorch's default is for matmuls.
shlo::Precision MatmulPrecision() {
  const at::Context& c = at::globalContext();
  at::Float32Precision mkldnn = c.float32Precision(at::Float32Backend::MKLDNN, at::Float32Op::MATMUL);
  if (mkldnn == at::Float32Precision::BF16) return shlo::Precision::Default;
  if (mkldnn == at::Float32Precision::TF32 ||
      c.float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) == at::Float32Precision::TF32)
    return shlo::Precision::High;
  return shlo::Precision::Highest;
}

const char* MatmulPrecisionSetting(shlo::Precision p) {
  switch (p) {
    case shlo::Precision::Default: return "medium";
    case shlo::Precision::High: return "high";
    case shlo::Precision::Highest: return "highest";
  }
  return "highest";
}

}  // namespace tpu::aten
