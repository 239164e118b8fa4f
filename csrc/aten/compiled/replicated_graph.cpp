#include "replicated_graph.h"

#include <algorithm>

#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

#include "../distributed/device_collectives.h"
#include "../../runtime/collective_rendezvous.h"

namespace py = pybind11;

namespace tpu::aten {

ReplicatedGraph::ReplicatedGraph(const py::handle& entry) {
  if (entry.is_none()) return;
  auto span = entry.cast<py::tuple>();
  span_ = span[0].cast<std::string>();
  replication_.replicas = span[1].cast<int>();
  for (py::handle h : span[2]) {
    auto g = h.cast<py::tuple>();
    replication_.groups.push_back({g[0].cast<std::string>(), g[1].cast<int>()});
  }
}

void ReplicatedGraph::Declare(runtime::Program& program, const std::string& module_text,
                              const std::vector<std::string>& ops) const {
  program.module_text = lowering::WithReplicas(module_text, replication_.replicas);
  if (!replicated()) return;
  program.replicas = replication_.replicas;
  program.replica_group = span_;
  for (const std::string& op : ops)
    program.collectives += op.rfind("_c10d_functional::", 0) == 0 && op != "_c10d_functional::wait_tensor";
}

namespace {

// The places in the span (its rank order) of the ranks of `g`, whose world ranks are `world_ranks`.
std::vector<int> PlacesIn(const InProcessMember& span, const std::string& span_name, const lowering::CollectiveGroup& g,
                          const std::vector<int>& world_ranks, const std::string& graph) {
  TORCH_CHECK(static_cast<int>(world_ranks.size()) == g.size, "tpu: torch.compile: graph ", graph,
              " was compiled for a group of ", g.size, " ranks; group '", g.name, "' has ", world_ranks.size());
  std::vector<int> replicas;
  for (int world_rank : world_ranks) {
    auto at = std::find(span.world_ranks.begin(), span.world_ranks.end(), world_rank);
    TORCH_CHECK(at != span.world_ranks.end(), "tpu: torch.compile: graph ", graph, ": group '", g.name,
                "' has a rank outside group '", span_name, "', which runs its program");
    replicas.push_back(static_cast<int>(at - span.world_ranks.begin()));
  }
  return replicas;
}

}  // namespace

void ReplicatedGraph::Join(runtime::Request& request, const std::string& graph) const {
  if (runtime::RunsAcrossProcesses(span_)) {  // processes: this one runs its rank's replica
    c10::intrusive_ptr<c10d::ProcessGroup> group = c10d::resolve_process_group(span_);
    TORCH_CHECK(group->getSize() == replication_.replicas, "tpu: torch.compile: graph ", graph,
                " was compiled for a group of ", replication_.replicas, " ranks; group '", span_, "' has ",
                group->getSize());
    request.rank = static_cast<int>(group->getRank());
    request.member_groups.clear();
    if (replication_.groups.size() < 2) return;
    InProcessMember span;
    span.size = static_cast<int>(group->getSize());
    span.world_ranks = CrossProcessWorldRanks(span_);
    for (const lowering::CollectiveGroup& g : replication_.groups)
      request.member_groups.push_back(PlacesIn(span, span_, g, CrossProcessWorldRanks(g.name), graph));
    return;
  }
  InProcessMember span = MemberOf(span_);
  TORCH_CHECK(span.size == replication_.replicas, "tpu: torch.compile: graph ", graph, " was compiled for a group of ",
              replication_.replicas, " ranks; group '", span_, "' has ", span.size);
  request.rank = span.rank;
  request.timeout_seconds = span.timeout_s;
  // The collectives of the span itself need no groups: their replica groups are all replicas.
  request.member_groups.clear();
  if (replication_.groups.size() < 2) return;
  for (const lowering::CollectiveGroup& g : replication_.groups)
    request.member_groups.push_back(PlacesIn(span, span_, g, MemberOf(g.name).world_ranks, graph));
}

}  // namespace tpu::aten
