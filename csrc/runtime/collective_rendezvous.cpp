#include "collective_rendezvous.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "../lowering/replicas.h"
#include "dump.h"
#include "metrics.h"
#include "profiler_events.h"
#include "runtime.h"
#include "tpu_target.h"

namespace tpu::runtime {
namespace {

// One collective of one group: the ranks that have arrived, then everyone's results.
struct Slot {
  std::vector<std::optional<CollectiveArrival>> arrivals;
  int arrived = 0;
  int taken = 0;
  bool done = false;
  std::string error;
  std::vector<std::vector<pjrt::BufferPtr>> results;  // by rank
  std::vector<std::vector<int64_t>> host_values;  // every rank's, once done
};

struct Group {
  std::vector<int64_t> next;  // per rank: the number of its next collective
  std::map<int64_t, std::shared_ptr<Slot>> slots;
};

std::mutex mu;
std::condition_variable arrived_cv;
std::map<std::string, Group> groups;

std::mutex exe_mu;
std::map<std::string, pjrt::ExecutablePtr> executables;  // by device ids + module text

std::mutex cross_mu;
std::map<std::string, std::shared_ptr<const CrossProcessReplicas>> cross_groups;

std::shared_ptr<const CrossProcessReplicas> CrossGroup(const std::string& group) {
  std::lock_guard<std::mutex> lock(cross_mu);
  auto it = cross_groups.find(group);
  return it == cross_groups.end() ? nullptr : it->second;
}

std::string Name(const CollectiveArrival& a, int64_t k) {
  return "collective #" + std::to_string(k) + " of group '" + a.group + "'";
}

std::string Listed(const std::vector<int>& replicas) {
  std::string text;
  for (int r : replicas) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return "[" + text + "]";
}

// By rank, by collective group the program marks: the replicas of the rank's own group.
using GroupsByRank = std::vector<std::vector<std::vector<int>>>;

GroupsByRank GroupsOf(const Slot& slot) {
  GroupsByRank groups;
  for (const auto& a : slot.arrivals) groups.push_back(a->member_groups);
  return groups;
}

// Empty when, for each collective group the program marks, every rank's own group holds it and
// the groups of any two ranks are the same or disjoint: together a partition of the replicas.
// `where` names the collective in the error.
std::string GroupsMismatch(const GroupsByRank& groups, const std::string& where) {
  const int n = static_cast<int>(groups.size());
  auto diverged = [&](const std::string& what) {
    return "torch.distributed on tpu: ranks diverged at " + where + ": " + what;
  };
  for (int r = 1; r < n; ++r)
    if (groups[r].size() != groups[0].size())
      return diverged("rank 0 and rank " + std::to_string(r) + " run programs of different collective groups");
  for (size_t g = 0; g < groups[0].size(); ++g) {
    std::vector<int> lister(n, -1);  // by replica: a rank whose own group holds it
    for (int r = 0; r < n; ++r) {
      const std::vector<int>& mine = groups[r][g];
      if (std::find(mine.begin(), mine.end(), r) == mine.end())
        return diverged("rank " + std::to_string(r) + " is not in its own group " + Listed(mine) +
                        " of collective group " + std::to_string(g));
      for (int x : mine) {
        if (x < 0 || x >= n)
          return diverged("rank " + std::to_string(r) + "'s group " + Listed(mine) + " holds a replica outside 0.." +
                          std::to_string(n - 1));
        if (lister[x] >= 0 && groups[lister[x]][g] != mine)
          return diverged("the groups " + Listed(groups[lister[x]][g]) + " of rank " + std::to_string(lister[x]) +
                          " and " + Listed(mine) + " of rank " + std::to_string(r) + " overlap (collective group " +
                          std::to_string(g) + ")");
        lister[x] = r;
      }
    }
  }
  return "";
}

// The replica groups of each marked collective group: the ranks' own groups, each once, in
// order of their first replica (GroupsMismatch found them a partition).
std::vector<std::vector<std::vector<int>>> Partitions(const GroupsByRank& groups) {
  std::vector<std::vector<std::vector<int>>> partitions(groups[0].size());
  for (size_t g = 0; g < partitions.size(); ++g) {
    for (const auto& of_rank : groups) {
      const std::vector<int>& mine = of_rank[g];
      if (std::find(partitions[g].begin(), partitions[g].end(), mine) == partitions[g].end())
        partitions[g].push_back(mine);
    }
    std::sort(partitions[g].begin(), partitions[g].end());
  }
  return partitions;
}

// The program a rank runs when the ranks' operand shapes differ.
const std::string& FlatText(const CollectiveArrival& a) {
  return a.flat_module_text.empty() ? a.module_text : a.flat_module_text;
}

// Whether every rank's program is the same (else their operands differ only in shape).
bool SameShapes(const Slot& slot) {
  for (const auto& a : slot.arrivals)
    if (a->module_text != slot.arrivals[0]->module_text) return false;
  return true;
}

// Empty when every rank issued the same collective on distinct devices.
std::string Mismatch(const Slot& slot, int64_t k) {
  const CollectiveArrival& first = *slot.arrivals[0];
  for (size_t r = 1; r < slot.arrivals.size(); ++r) {
    const CollectiveArrival& other = *slot.arrivals[r];
    if (other.description != first.description || other.group_size != first.group_size)
      return "torch.distributed on tpu: ranks diverged at " + Name(first, k) + ": rank 0 issued " +
             first.description + "; rank " + std::to_string(r) + " issued " + other.description;
  }
  for (size_t r = 1; r < slot.arrivals.size(); ++r)
    if (slot.arrivals[r]->module_text != first.module_text && FlatText(*slot.arrivals[r]) != FlatText(first))
      return "torch.distributed on tpu: ranks diverged at " + Name(first, k) + ": rank 0 and rank " +
             std::to_string(r) + " run different programs for " + first.description +
             " (their graphs or inputs differ)";
  if (first.module_text.empty()) return "";  // a barrier runs nothing on the devices
  if (std::string groups = GroupsMismatch(GroupsOf(slot), Name(first, k)); !groups.empty()) return groups;
  std::set<int> devices;
  for (const auto& a : slot.arrivals)
    if (!devices.insert(a->device).second)
      return "torch.distributed on tpu: " + Name(first, k) + ": two ranks are on device tpu:" +
             std::to_string(a->device) + "; ranks of one process need a device each (torch.tpu.set_device(rank))";
  return "";
}

// Runs the program over every rank's device (called by the last rank to arrive, unlocked).
std::vector<std::vector<pjrt::BufferPtr>> Run(const Slot& slot) {
  const CollectiveArrival& first = *slot.arrivals[0];
  size_t n = slot.arrivals.size();
  if (first.module_text.empty()) return std::vector<std::vector<pjrt::BufferPtr>>(n);
  Runtime& rt = Runtime::Get();
  const bool same_shapes = SameShapes(slot);
  std::vector<int64_t> ids;
  std::vector<std::vector<PJRT_Buffer*>> args;
  std::vector<pjrt::BufferPtr> flattened;  // alive until the program has run
  for (const auto& a : slot.arrivals) {
    ids.push_back(rt.client().device_id(a->device));
    args.emplace_back();
    for (const pjrt::BufferPtr& b : a->operands) {
      if (same_shapes || a->flat_module_text.empty()) {
        args.back().push_back(b->raw());
        continue;
      }
      pjrt::ExecutablePtr flatten = CollectiveExecutable(a->flatten_text, {ids.back()}, "reshape to 1-D for " +
                                                         a->description);
      flattened.push_back(flatten->ExecuteReplicated({{b->raw()}}).at(0).at(0));
      GetMetrics().executions++;
      args.back().push_back(flattened.back()->raw());
    }
  }
  const std::string& text = same_shapes ? first.module_text : FlatText(first);
  std::string module_text =
      first.member_groups.empty() ? text : lowering::FillReplicaGroups(text, Partitions(GroupsOf(slot)));
  pjrt::ExecutablePtr exe = CollectiveExecutable(module_text, ids, first.description);
  std::vector<std::vector<pjrt::BufferPtr>> outputs = exe->ExecuteReplicated(args);
  CountTpuTargetRun(exe.get());
  GetMetrics().executions++;
  return outputs;
}

}  // namespace

pjrt::ExecutablePtr CollectiveExecutable(const std::string& module_text, const std::vector<int64_t>& device_ids,
                                         const std::string& description) {
  std::string key;
  for (int64_t id : device_ids) key += std::to_string(id) + ",";
  key += "\n" + module_text;
  std::lock_guard<std::mutex> lock(exe_mu);  // compiles are rare: one at a time is fine
  auto it = executables.find(key);
  if (it != executables.end()) return it->second;
  Runtime& rt = Runtime::Get();
  const std::string name = "collective " + description;
  std::string options = pjrt::ReplicatedCompileOptions(device_ids);
  rt.AddPlatformOverrides(options);
  const std::string dumped = rt.DumpWithOptions(module_text, name, options);
  auto start = std::chrono::steady_clock::now();
  profiler::Scope compile(profiler::Kind::Compile, "tpu compile: collective");
  if (compile.on()) {
    compile.Rename("tpu compile: " + name);
    compile.Arg("cache", "miss");
    compile.Arg("cache key", Runtime::TextKey(key));
  }
  pjrt::ExecutablePtr exe;
  try {
    exe = rt.client().Compile(module_text, options);
  } catch (const std::exception& e) {
    DumpCompileEnd(dumped, start, e.what());
    throw;
  }
  DumpCompileEnd(dumped, start);
  GetMetrics().programs_compiled++;
  // Also compiled for a TPU topology (its mhlo.num_replicas chips) when one is asked for.
  TrackTpuTargetRuns(exe.get(), LogForTpuTarget(name, module_text, dumped, /*from_disk=*/false));
  executables.emplace(key, exe);
  return exe;
}

namespace {

// Waits for every rank of the group at its next collective; the last to arrive runs the
// program. Returns the finished slot (its error set on divergence, failure or timeout).
std::shared_ptr<Slot> Meet(const CollectiveArrival& arrival) {
  if (arrival.rank < 0 || arrival.rank >= arrival.group_size)
    throw std::invalid_argument("collective: rank " + std::to_string(arrival.rank) + " outside a group of " +
                                std::to_string(arrival.group_size));
  std::unique_lock<std::mutex> lock(mu);
  Group& group = groups[arrival.group];
  if (group.next.empty()) group.next.assign(arrival.group_size, 0);
  if (static_cast<int>(group.next.size()) != arrival.group_size)
    throw std::runtime_error("torch.distributed on tpu: group '" + arrival.group + "' was joined with " +
                             std::to_string(arrival.group_size) + " ranks and " + std::to_string(group.next.size()));
  int64_t k = group.next[arrival.rank]++;
  std::shared_ptr<Slot>& entry = group.slots[k];
  if (!entry) {
    entry = std::make_shared<Slot>();
    entry->arrivals.resize(arrival.group_size);
  }
  std::shared_ptr<Slot> slot = entry;
  auto finish = [&]() {  // lock held, slot done
    if (++slot->taken == arrival.group_size) groups[arrival.group].slots.erase(k);
    return slot;
  };
  if (slot->done) return finish();  // timed out before this rank came
  slot->arrivals[arrival.rank] = arrival;
  if (++slot->arrived == arrival.group_size) {
    std::string error = Mismatch(*slot, k);
    std::vector<std::vector<pjrt::BufferPtr>> results;
    if (error.empty()) {
      lock.unlock();
      try {
        results = Run(*slot);
      } catch (const std::exception& e) {
        error = "torch.distributed on tpu: " + Name(arrival, k) + " (" + arrival.description + ") failed: " + e.what();
      }
      lock.lock();
    }
    slot->error = error;
    slot->results = std::move(results);
    for (auto& a : slot->arrivals) {
      slot->host_values.push_back(a->host_values);
      a->operands.clear();
    }
    slot->done = true;
    arrived_cv.notify_all();
    if (error.empty() && arrival.compiled_graph) {
      GetMetrics().replicated_graph_runs++;
      GetMetrics().collectives_in_graphs += arrival.collectives;
    } else if (!arrival.compiled_graph && (!arrival.module_text.empty() || arrival.host_values.empty())) {
      GetMetrics().collectives_on_device++;
    }
    return finish();
  }
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(arrival.timeout_seconds));
  while (!slot->done) {
    bool all_here = slot->arrived == arrival.group_size;  // then it is running: wait however long
    if (arrived_cv.wait_until(lock, deadline) == std::cv_status::timeout && !slot->done && !all_here &&
        slot->arrived < arrival.group_size) {
      std::ostringstream missing;
      for (int r = 0; r < arrival.group_size; ++r)
        if (!slot->arrivals[r]) missing << (missing.tellp() ? ", " : "") << r;
      slot->error = "torch.distributed on tpu: " + Name(arrival, k) + " (" + arrival.description + "): rank(s) " +
                    missing.str() + " did not arrive within the process group's timeout of " +
                    std::to_string(static_cast<int64_t>(arrival.timeout_seconds)) +
                    " s (they issued no collective, or one on another group)";
      for (auto& a : slot->arrivals)
        if (a) a->operands.clear();
      slot->done = true;
      arrived_cv.notify_all();
    }
  }
  return finish();
}

}  // namespace

pjrt::BufferPtr RunCollective(const CollectiveArrival& arrival) {
  std::vector<pjrt::BufferPtr> results = RunReplicated(arrival);
  return results.empty() ? nullptr : results.at(0);
}

void RegisterCrossProcessReplicas(const std::string& group, CrossProcessReplicas replicas) {
  std::lock_guard<std::mutex> lock(cross_mu);
  cross_groups[group] = std::make_shared<const CrossProcessReplicas>(std::move(replicas));
}

void ForgetCrossProcessReplicas(const std::string& group) {
  std::lock_guard<std::mutex> lock(cross_mu);
  cross_groups.erase(group);
}

bool RunsAcrossProcesses(const std::string& group) { return CrossGroup(group) != nullptr; }

namespace {

std::vector<pjrt::BufferPtr> RunThisProcessReplica(const CollectiveArrival& arrival,
                                                   const CrossProcessReplicas& cross) {
  if (static_cast<int>(cross.device_ids.size()) != arrival.group_size)
    throw std::runtime_error("torch.distributed on tpu: group '" + arrival.group + "' spans " +
                             std::to_string(cross.device_ids.size()) + " processes, a program was built for " +
                             std::to_string(arrival.group_size));
  // Ranks whose programs differ in anything would wait for each other forever: the text's hash
  // is part of what they agree on.
  std::ostringstream what;
  what << arrival.description;
  if (!arrival.module_text.empty()) what << " (program " << std::hex << std::hash<std::string>{}(arrival.module_text) << ")";
  // A program holding collectives of several groups: every rank's own groups fill its markers.
  std::vector<int64_t> mine;
  if (!arrival.member_groups.empty()) {
    mine.push_back(static_cast<int64_t>(arrival.member_groups.size()));
    for (const std::vector<int>& g : arrival.member_groups) {
      mine.push_back(static_cast<int64_t>(g.size()));
      mine.insert(mine.end(), g.begin(), g.end());
    }
  }
  std::vector<std::vector<int64_t>> everyone = cross.agree(what.str(), mine);
  if (arrival.module_text.empty()) return {};
  std::string module_text = arrival.module_text;
  if (!arrival.member_groups.empty()) {
    GroupsByRank groups;
    for (const std::vector<int64_t>& values : everyone) {
      groups.emplace_back();
      size_t at = 1;
      for (int64_t g = 0; !values.empty() && g < values[0]; ++g) {
        const int64_t len = values.at(at++);
        groups.back().emplace_back(values.begin() + at, values.begin() + at + len);
        at += len;
      }
    }
    const std::string where = arrival.description + " of group '" + arrival.group + "'";
    if (std::string error = GroupsMismatch(groups, where); !error.empty()) throw std::runtime_error(error);
    module_text = lowering::FillReplicaGroups(module_text, Partitions(groups));
  }
  pjrt::ExecutablePtr exe = CollectiveExecutable(module_text, cross.device_ids, arrival.description);
  std::vector<PJRT_Buffer*> args;
  for (const pjrt::BufferPtr& b : arrival.operands) args.push_back(b->raw());
  std::vector<pjrt::BufferPtr> results;
  try {
    results = exe->ExecuteReplicated({args}).at(0);
  } catch (const std::exception& e) {
    throw std::runtime_error("torch.distributed on tpu: " + arrival.description + " on rank " +
                             std::to_string(arrival.rank) + " of group '" + arrival.group +
                             "' across processes failed: " + e.what());
  }
  CountTpuTargetRun(exe.get());
  GetMetrics().executions++;
  if (arrival.compiled_graph) {
    GetMetrics().replicated_graph_runs++;
    GetMetrics().collectives_in_graphs += arrival.collectives;
  } else {
    GetMetrics().collectives_on_device++;
  }
  return results;
}

}  // namespace

std::vector<pjrt::BufferPtr> RunReplicated(const CollectiveArrival& arrival) {
  // Covers this rank's wait for the others and the replicated run (started by the last to come).
  profiler::Scope event(profiler::Kind::Collective, "tpu collective");
  if (event.on()) {
    event.Rename("tpu collective: " + arrival.description);
    event.Device(arrival.device);
    event.Arg("group", arrival.group);
    event.Arg("rank", std::to_string(arrival.rank) + " of " + std::to_string(arrival.group_size));
    int64_t elements = 0;
    for (const pjrt::BufferPtr& b : arrival.operands) {
      int64_t n = 1;
      for (int64_t d : b->dims()) n *= d;
      elements += n;
    }
    event.Arg("operand elements", std::to_string(elements));
  }
  if (auto cross = CrossGroup(arrival.group)) return RunThisProcessReplica(arrival, *cross);
  std::shared_ptr<Slot> slot = Meet(arrival);
  if (!slot->error.empty()) throw std::runtime_error(slot->error);
  return slot->results.empty() ? std::vector<pjrt::BufferPtr>{} : slot->results[arrival.rank];
}

std::vector<std::vector<int64_t>> ShareHostValues(const CollectiveArrival& arrival) {
  std::shared_ptr<Slot> slot = Meet(arrival);
  if (!slot->error.empty()) throw std::runtime_error(slot->error);
  return slot->host_values;
}

void ForgetCollectiveGroup(const std::string& group) {
  std::lock_guard<std::mutex> lock(mu);
  groups.erase(group);
}

}  // namespace tpu::runtime
