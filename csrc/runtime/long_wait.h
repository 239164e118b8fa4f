// A host thread waiting on the device for a program that runs long (a sync: .cpu(), .item(),
// printing, torch.tpu.synchronize()). The wait polls instead of blocking in the plugin
// (pjrt::WaitObserver), so that
//   * every 50 ms it runs the interrupt check that csrc/aten installs (Python's pending signals,
//     on the main thread): a Ctrl-C abandons the wait and raises KeyboardInterrupt there. The
//     program keeps running in the plugin and its outputs stay owned by their tensors (nothing
//     the plugin writes is freed), so reading them later waits again or returns their values;
//   * once per process, a wait that passes TORCH_TPU_WAIT_NOTICE_S seconds (default 5) prints
//     one line naming the program the device runs and for how long it has run, as the compile
//     notice does for compiles. TORCH_TPU_QUIET=1 hides it. Torch-free and Python-free.
#pragma once

#include <functional>

#include "../pjrt/pjrt.h"

namespace tpu::runtime {

// Makes `plugin`'s long waits observed: the notice after `notice_after_s` (unless `quiet`) and
// the interrupt check.
void ObserveLongWaits(pjrt::Plugin& plugin, double notice_after_s, bool quiet);
// Called while a wait lasts; it may throw to abandon the wait (what it throws propagates).
void SetWaitInterruptCheck(std::function<void()> check);
// Called before a host thread reads a device value (TpuStorage::ReadBytes); it may wait and may
// throw. csrc/aten settles there the checks of collectives that ran unchecked
// (collective_agreement.h), so no value of a diverged collective reaches the host.
void SetHostReadCheck(void (*check)());
void CheckBeforeHostRead();

}  // namespace tpu::runtime
