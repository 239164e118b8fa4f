// PyTorch's float32 matmul precision, as tpu programs take it (DESIGN.md, Numerics).
#pragma once

#include "../../stablehlo/builder.h"

namespace tpu::aten {

// How f32 matrix products multiply in a program built now: "highest" -> HIGHEST, "high" ->
// HIGH, "medium" -> DEFAULT. Read once per op call or compiled-graph run (tens of ns, no
// strings), and keyed with the program, so a program is never reused under another setting.
shlo::Precision MatmulPrecision();
// "highest", "high" or "medium", as torch.get_float32_matmul_precision() says it.
const char* MatmulPrecisionSetting(shlo::Precision p);

}  // namespace tpu::aten
