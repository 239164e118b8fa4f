// Ranks of a group of processes whose collectives run on the devices agree on each collective
// before any of them runs it. A device collective that one rank skips, or issues with another
// kind, shape, dtype or root, waits in the plugin forever (the hang NCCL and TorchTPU document as
// "never diverge"). So each rank posts what it is about to run, numbered, to the group's c10d
// store and reads every other rank's post: a mismatch raises on every rank with the differing
// descriptions, and a rank that has not posted within the group's timeout is named in the error.
// The same exchange carries host integers a collective needs from every rank (an uneven
// all_to_all's split sizes), so it costs no second round trip.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace tpu::aten {

// Starts numbering the collectives of the group `name` (this process is its rank `rank` of `size`).
// `check_each`: whether every collective is checked, or only those that need the exchange
// (TORCH_TPU_COLLECTIVE_CHECKS=0: two store round trips saved per collective, as NCCL does).
void RegisterAgreement(const std::string& name, c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                       std::chrono::milliseconds timeout, bool check_each = true);
void ForgetAgreement(const std::string& name);
// Whether the group checks every collective (else only the exchanges that carry values).
bool ChecksEachCollective(const std::string& name);

// Blocks until every rank of `group` has posted its next collective; returns every rank's
// `host_values` in rank order. Raises (c10::Error) when the descriptions differ, when a rank
// does not post within the group's timeout, and for every collective after a divergence.
// `only_a_check`: the caller needs nothing from the others; skipped (returns {}) where the group
// checks only what needs the exchange. `members`: the ranks taking part, in order (a send/recv's
// pair), numbered apart from the group's collectives; empty: every rank.
std::vector<std::vector<int64_t>> AgreeAcrossProcesses(const std::string& group, const std::string& description,
                                                       const std::vector<int64_t>& host_values = {},
                                                       bool only_a_check = false,
                                                       const std::vector<int>& members = {});

}  // namespace tpu::aten
