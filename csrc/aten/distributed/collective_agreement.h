// Ranks of a group of processes whose collectives run on the devices agree on each collective.
// A device collective that one rank skips, or issues with another kind, shape, dtype or root,
// waits in the plugin forever (the hang NCCL and TorchTPU document as "never diverge"). So each
// rank posts what it runs, numbered, to the group's c10d store and reads every other rank's post:
// a mismatch raises on every rank with the differing descriptions, and a rank that has not posted
// within the group's timeout is named in the error. The same exchange carries host integers a
// collective needs from every rank (an uneven all_to_all's split sizes, buffer shapes).
//
// A collective that needs nothing from the others is checked behind it by default: its rank posts
// and runs it at once, and reads the others' posts later, several collectives in one store round
// trip. Nothing it computed reaches the host unchecked: every host read of a device value and
// every synchronize first settles the checks behind (SettleCollectiveChecks), and a wait on the
// device that lasts checks them too, so a divergence raises instead of hanging there.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace tpu::aten {

// TORCH_TPU_COLLECTIVE_CHECKS: what a group checks. All ranks use the least of their settings.
enum class CollectiveChecks {
  kOff,     // only the exchanges that carry values (a divergence elsewhere hangs, as with NCCL)
  kBehind,  // every collective; those that need no values are checked behind them (the default)
  kBefore,  // every collective, before it runs: a divergence raises before any rank runs it
};
CollectiveChecks ParseCollectiveChecks(const std::string& setting);  // "off", "behind", "before"

// Starts numbering the collectives of the group `name` (this process is its rank `rank` of `size`).
void RegisterAgreement(const std::string& name, c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                       std::chrono::milliseconds timeout, CollectiveChecks checks = CollectiveChecks::kBehind);
void ForgetAgreement(const std::string& name);
CollectiveChecks ChecksOf(const std::string& name);

// Posts this rank's next collective of `group` and, unless it may be checked behind, blocks until
// every rank has posted it; returns every rank's `host_values` in rank order (empty when checked
// behind or skipped). Raises (c10::Error) when the descriptions differ, when a rank does not post
// within the group's timeout, and for every collective after a divergence.
// `only_a_check`: the caller needs nothing from the others: checked behind (kBehind) or skipped
// (kOff). `members`: the ranks taking part, in order (a send/recv's pair), numbered apart from the
// group's collectives and always checked before; empty: every rank. `values_repeat` (kBehind):
// once every rank posted these values alike for this description, they are taken to hold again
// (returned as every rank's) and checked behind with it; a rank whose values changed diverges.
// For values that change only where ranks differ anyway (buffer shapes), not split sizes.
std::vector<std::vector<int64_t>> AgreeAcrossProcesses(const std::string& group, const std::string& description,
                                                       const std::vector<int64_t>& host_values = {},
                                                       bool only_a_check = false,
                                                       const std::vector<int>& members = {},
                                                       bool values_repeat = false);

// Checks every collective posted behind, of every group: `wait` blocks until the other ranks have
// posted them (up to the groups' timeouts), else only what they posted already is read. Raises a
// divergence or a missing rank (as AgreeAcrossProcesses) and, while waiting on the device
// (`wait` false), a divergence found behind before: the devices may wait in it. Called before
// host reads and synchronizes (wait) and by long device waits (no wait); nearly free without
// collectives behind.
void SettleCollectiveChecks(bool wait);

}  // namespace tpu::aten
