// torch.distributed collectives among processes whose plugin client spans them (libtpu on a TPU
// slice, the CUDA plugin under torchrun): a group registered here runs each collective as one
// program compiled for its ranks' devices, of which this process runs its own replica, after the
// ranks agree on it through the group's store (collective_agreement.h). Registered from Python
// (torch_tpu/distributed.py, _register_across_processes) when the group is made.
#include <algorithm>
#include <exception>
#include <map>
#include <mutex>

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "collective_agreement.h"
#include "../common.h"
#include "device_collectives.h"
#include "../../runtime/collective_programs.h"
#include "../../runtime/collective_rendezvous.h"
#include "../../runtime/metrics.h"

namespace tpu::aten {
namespace {

using runtime::CollectiveKind;
using runtime::CollectiveReduce;
using runtime::CollectiveSpec;

struct RegisteredGroup {
  std::vector<int64_t> device_ids;  // global PJRT ids, in group rank order
  std::vector<int> world_ranks;     // its ranks' ranks in the world
};

std::mutex cross_mu;
std::map<std::string, RegisteredGroup> registered;  // by group name

RegisteredGroup Registered(const std::string& name) {
  std::lock_guard<std::mutex> lock(cross_mu);
  auto it = registered.find(name);
  TORCH_CHECK(it != registered.end(), "torch.distributed on tpu: group '", name, "' has no devices across processes");
  return it->second;
}

}  // namespace

void RegisterCrossProcessGroup(const std::string& name, const std::vector<int64_t>& device_ids,
                               c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds timeout,
                               const std::string& checks, const std::vector<int>& world_ranks) {
  RegisterAgreement(name, std::move(store), rank, static_cast<int>(device_ids.size()), timeout,
                    ParseCollectiveChecks(checks));
  // A compiled graph holding this group's collectives: one program, each process its replica.
  runtime::RegisterCrossProcessReplicas(
      name, {device_ids, [name](const std::string& description, const std::vector<int64_t>& values) {
               RunPendingTransfers(name);
               return AgreeAcrossProcesses(name, description, values, /*only_a_check=*/values.empty());
             }});
  std::lock_guard<std::mutex> lock(cross_mu);
  registered[name] = {device_ids, world_ranks};
}

std::vector<int> CrossProcessWorldRanks(const std::string& name) { return Registered(name).world_ranks; }

void ForgetCrossProcessGroup(const std::string& name) {
  runtime::ForgetCrossProcessReplicas(name);
  ForgetAgreement(name);
  ForgetPendingTransfers(name);
  std::lock_guard<std::mutex> lock(cross_mu);
  registered.erase(name);
}

std::string CheckAcrossProcesses(const std::string& name, int rank, int device) {
  const std::vector<int64_t> device_ids = CrossProcessDevices(name);
  const int n = static_cast<int>(device_ids.size());
  CollectiveSpec spec{CollectiveKind::kAllReduce, CollectiveReduce::kSum, shlo::ElemType::S32, 1, {}, n};
  const std::string description = "the group's check (" + spec.Describe() + ")";
  // Every rank compiles the same program: all succeed or all fail, but say so before running it.
  std::string failure;
  pjrt::ExecutablePtr exe;
  try {
    exe = runtime::CollectiveExecutable(runtime::CollectiveModule(spec), device_ids, description);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  auto compiled = AgreeAcrossProcesses(name, description + ": compiled", {failure.empty() ? 1 : 0});
  for (int r = 0; r < n; ++r)
    if (!compiled[r][0])
      return "rank " + std::to_string(r) + " could not compile it" + (r == rank ? ": " + failure : std::string());
  // Each rank adds rank + 1: every rank must read n (n + 1) / 2.
  c10::DeviceGuard guard(c10::Device(kTpu, static_cast<c10::DeviceIndex>(device)));
  at::Tensor mine = at::full({1}, rank + 1, at::TensorOptions().dtype(at::kInt).device(kTpu, device));
  int64_t got = -1;
  try {
    pjrt::BufferPtr result = exe->ExecuteReplicated({{Operand(mine)->raw()}}).at(0).at(0);
    got = FromResult(std::move(result), 1, mine.options()).cpu().item<int64_t>();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  auto results = AgreeAcrossProcesses(name, description + ": ran", {got});
  for (int r = 0; r < n; ++r)
    if (results[r][0] != int64_t{n} * (n + 1) / 2)
      return "rank " + std::to_string(r) + " read " + std::to_string(results[r][0]) + ", not " +
             std::to_string(int64_t{n} * (n + 1) / 2) + (r == rank && !failure.empty() ? ": " + failure : std::string());
  return "";
}

std::vector<int64_t> CrossProcessDevices(const std::string& group) { return Registered(group).device_ids; }

bool AcrossProcessesOnDevices(const c10d::ProcessGroup& group) {
  std::lock_guard<std::mutex> lock(cross_mu);
  auto it = registered.find(group.getGroupName());
  return it != registered.end() && static_cast<int>(it->second.device_ids.size()) == group.getSize();
}

// This process's part of a collective across processes: one program compiled for the group's
// devices and run on this rank's. Each rank's operand buffer shape travels with the agreement
// (unless the checks are off): equal shapes on every rank run the program typed in that shape (a
// TPU's tiled 2-D buffer reaches it without a relayout), else every rank runs the 1-D program.
// Checked behind (the default), a collective every rank once ran in one buffer shape runs in it
// again without waiting for the others (the shapes repeat: collective_agreement.h). The plugin's
// collectives wait for the other processes.
pjrt::BufferPtr RunAcrossProcesses(const c10d::ProcessGroup& group, const CollectiveSpec& spec,
                                   const at::Tensor& input) {
  const std::string name = group.getGroupName();
  const std::vector<int64_t> device_ids = CrossProcessDevices(name);
  const std::string description = spec.Describe();
  RunPendingTransfers(name);
  const bool exchange_shapes = ChecksOf(name) != CollectiveChecks::kOff;
  pjrt::BufferPtr operand;
  std::exception_ptr failed;  // this rank's operand: the others hear of it at once, not at the timeout
  std::string failure;
  if (spec.numel > 0) {
    try {
      operand = Operand(input, [&](const std::vector<int64_t>& dims) {
        return exchange_shapes && runtime::KeepsShape(spec.kind, dims, spec.group_size);
      });
    } catch (const std::exception& e) {
      failed = std::current_exception();
      failure = e.what();
    }
  }
  const std::vector<int64_t> dims = operand ? operand->dims() : std::vector<int64_t>{};
  std::vector<std::vector<int64_t>> shapes;
  try {
    // Before anything that only some ranks might do: a rank whose collective differs must not
    // leave the others waiting in the plugin.
    shapes = AgreeAcrossProcesses(name, failed ? "a collective that failed on its rank (" + failure + ")" : description,
                                  exchange_shapes ? dims : std::vector<int64_t>{}, /*only_a_check=*/!exchange_shapes,
                                  {}, /*values_repeat=*/!failed);
  } catch (const std::exception&) {
    if (failed) std::rethrow_exception(failed);
    throw;
  }
  if (failed) std::rethrow_exception(failed);
  if (spec.numel == 0) return nullptr;
  CollectiveSpec program = spec;
  const bool same_shapes =
      dims.size() > 1 && std::all_of(shapes.begin(), shapes.end(), [&](const auto& d) { return d == dims; });
  if (same_shapes) program.dims = dims;
  else if (dims.size() > 1) operand = Operand(input);  // copied out 1-D
  try {
    pjrt::ExecutablePtr exe =
        runtime::CollectiveExecutable(runtime::CollectiveModule(program), device_ids, description);
    pjrt::BufferPtr result = exe->ExecuteReplicated({{operand->raw()}}).at(0).at(0);
    runtime::GetMetrics().executions++;
    runtime::GetMetrics().collectives_on_device++;
    return result;
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "torch.distributed on tpu: ", e.what());
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "torch.distributed on tpu: ", description, " on rank ", group.getRank(), " of group '",
                group.getGroupName(), "' across processes failed: ", e.what());
  }
}

}  // namespace tpu::aten
