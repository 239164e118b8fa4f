// Lowerings that differ when programs are for a TPU (lowering.h, SetTpuTarget). libtpu's
// compiler rejects a few programs that other plugins compile; where no other form exists
// the op raises here, on the device, instead of handing libtpu a program that fails (or, for
// some converts, aborts the process). README's "TPU refusals" lists them.
#include <stdexcept>

#include "lowering.h"

namespace tpu::lowering {

namespace {
bool tpu_target = false;
}  // namespace

void SetTpuTarget(bool on) {
  tpu_target = on;
  shlo::SetX64DotsAsReductions(on);
}

bool TpuTarget() { return tpu_target; }

void RefuseOnTpu(const Ctx& ctx, const std::string& what) {
  if (!tpu_target) return;
  throw std::runtime_error(what + " has no lowering that compiles for TPU (libtpu rejects it); " +
                           "compute it in a supported dtype or on the CPU");
}

}  // namespace tpu::lowering
