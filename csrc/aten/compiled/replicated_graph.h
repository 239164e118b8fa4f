// A compiled graph holding functional collectives of in-process groups (DESIGN.md
// "Distributed"): its program is replicated over the devices of a span group's ranks, and each
// rank thread's run deposits its inputs at the span's rendezvous, where the last rank to arrive
// runs the program once for all (csrc/runtime/collective_rendezvous.h). The span is the
// collectives' one group or, when the graph holds collectives of several groups (a 2-D
// DeviceMesh's "dp" and "tp"), the world; each collective then reduces over its own group's
// replicas (csrc/lowering/replicas.h).
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <string>
#include <vector>

#include "../../lowering/replicas.h"
#include "../../runtime/program.h"

namespace tpu::aten {

class ReplicatedGraph {
 public:
  // From a graph description's replication entry: None (no collectives), or (span group name,
  // span size, [(group name, group size) of each group whose collectives the graph holds]).
  explicit ReplicatedGraph(const pybind11::handle& entry);

  bool replicated() const { return replication_.replicas > 0; }
  // What the graph's collective lowerings read, while the returned object lives.
  lowering::ReplicatedLowering Lowering() const { return lowering::ReplicatedLowering(replication_); }
  // Declares `program`, built from `module_text` over nodes `ops`, replicated over the span.
  void Declare(runtime::Program& program, const std::string& module_text, const std::vector<std::string>& ops) const;
  // This rank thread's place in the run of `graph`: its rank in the span, how long it waits
  // for the others, and its own group of each collective group. Raises when the thread is no
  // rank of those groups.
  void Join(runtime::Request& request, const std::string& graph) const;

 private:
  std::string span_;  // the group whose ranks run the program (replica i = its rank i)
  lowering::Replication replication_;
};

}  // namespace tpu::aten
