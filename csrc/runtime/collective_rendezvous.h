// Collectives among ranks that are threads of this process, one device each: every rank's
// thread deposits its operands for the group's k-th collective; the last to arrive runs one
// program replicated over the group's devices (collective_programs.h, or a compiled graph
// holding collectives) and each rank takes its own outputs. Ranks that issue different
// collectives raise on every rank, naming both; a rank that never arrives makes the others
// raise once the timeout has passed. No torch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../pjrt/pjrt.h"
#include "collective_programs.h"

namespace tpu::runtime {

struct CollectiveArrival {
  std::string group;  // the same on every rank of the group, distinct between groups
  int rank = 0;
  int group_size = 1;
  int device = 0;      // this rank's device index
  std::string description;  // what all ranks must agree on (CollectiveSpec::Describe, "barrier")
  std::string module_text;  // empty: a barrier (no program runs); ranks must agree on it too
  std::vector<pjrt::BufferPtr> operands;  // on `device` (a collective's: one); none for a barrier
  // A collective whose operand keeps its buffer's shape (CollectiveSpec::dims): the 1-D program
  // and the reshape of the operand to 1-D (collective_programs.h). When ranks' shapes differ
  // (the same tensor shape, buffers made by different ops), every rank runs the 1-D program.
  std::string flat_module_text;
  std::string flatten_text;
  std::vector<int64_t> host_values;  // what ShareHostValues hands every rank
  double timeout_seconds = 1800;
  int collectives = 1;  // the collective ops the program holds (metrics)
  bool compiled_graph = false;  // a torch.compile program, counted apart from eager collectives
  // A compiled graph holding collectives of several groups: this rank's own group of each group
  // the text marks (Request::member_groups); the groups of all ranks fill the markers.
  std::vector<std::vector<int>> member_groups;
};

// A group whose ranks are processes, one device each in this process (a plugin client that spans
// them): a replicated program is compiled for the group's global device ids and this process
// runs its own replica. `agree` runs first with the program's description and this rank's
// host values, raises when another rank's description differs, and returns every rank's
// values in rank order (the store exchange of csrc/aten/distributed/collective_agreement.h; with no values
// it may be only a check, returning none).
struct CrossProcessReplicas {
  std::vector<int64_t> device_ids;  // PJRT global ids, in group rank order
  std::function<std::vector<std::vector<int64_t>>(const std::string& description,
                                                  const std::vector<int64_t>& host_values)> agree;
};
void RegisterCrossProcessReplicas(const std::string& group, CrossProcessReplicas replicas);
void ForgetCrossProcessReplicas(const std::string& group);
bool RunsAcrossProcesses(const std::string& group);

// Blocks until every rank of the group has arrived at its next collective, then returns this
// rank's result (null for a barrier). For a group across processes: agrees, then runs this
// process's replica. Throws std::runtime_error on divergence or timeout.
pjrt::BufferPtr RunCollective(const CollectiveArrival& arrival);
// The same for a program of any number of operands and results: this rank's results.
std::vector<pjrt::BufferPtr> RunReplicated(const CollectiveArrival& arrival);
// A meeting with no program: every rank's `host_values`, in rank order (an uneven all_to_all's
// split sizes). Not counted as a collective on the devices. Throws as RunCollective does.
std::vector<std::vector<int64_t>> ShareHostValues(const CollectiveArrival& arrival);
// The program of `module_text` compiled for `device_ids` (one replica each), cached; also
// compiled for the TPU target when one is asked for, logged as "collective <description>".
pjrt::ExecutablePtr CollectiveExecutable(const std::string& module_text, const std::vector<int64_t>& device_ids,
                                         const std::string& description);
// Forgets the collectives counted for `group` (a new group of the same name starts at #0).
void ForgetCollectiveGroup(const std::string& group);

}  // namespace tpu::runtime
