// torch.distributed collectives among ranks that are threads of this process, one tpu device
// each (torch_tpu.distributed's in-process groups): each runs as one program replicated over
// the ranks' devices (csrc/runtime/collective_rendezvous.h); nothing crosses to the host.
#pragma once

#include <functional>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/ATen.h>

#include <chrono>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "../../pjrt/pjrt.h"
#include "../../runtime/collective_programs.h"

namespace tpu::aten {

using TensorVec = std::vector<at::Tensor>;

// The backend name of torch_tpu.distributed's groups whose ranks are threads of this process.
constexpr const char* kInProcessBackend = "tpu_threads";
bool InProcess(const c10d::ProcessGroup& group);
// A group of processes whose collectives run on the devices (torch_tpu/distributed.py): each
// process runs its part of one program whose replicas are the group's devices, `device_ids`
// (global PJRT ids, in group rank order); the plugin's client, set up across the processes,
// carries the data between them. The ranks agree on each collective through `store`
// (collective_agreement.h; `checks`: "behind", "before" or "off", TORCH_TPU_COLLECTIVE_CHECKS).
// All collectives and send/recv, but the barrier, which c10d runs on a CPU tensor (the group's
// CPU backend's).
void RegisterCrossProcessGroup(const std::string& name, const std::vector<int64_t>& device_ids,
                               c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds timeout,
                               const std::string& checks, const std::vector<int>& world_ranks);
// Its ranks' ranks in the world, in its rank order.
std::vector<int> CrossProcessWorldRanks(const std::string& name);
void ForgetCrossProcessGroup(const std::string& name);
bool AcrossProcessesOnDevices(const c10d::ProcessGroup& group);
// This process's part of one collective of `spec` (elem, numel and group size set) with its
// rank's `input`, on a registered group (cross_process_collectives.cpp); null for no elements.
pjrt::BufferPtr RunAcrossProcesses(const c10d::ProcessGroup& group, const runtime::CollectiveSpec& spec,
                                   const at::Tensor& input);
// Runs a registered group's first collective, an all_reduce of rank + 1 on `device`: "" when
// every rank compiled it and read the right sum, else what went wrong (every rank returns the
// same verdict, so that all keep the devices or all fall back to the CPU backend together).
std::string CheckAcrossProcesses(const std::string& name, int rank, int device);
// Whether the group's collectives run on the devices: in-process or registered across processes.
inline bool OnDevices(const c10d::ProcessGroup& group) {
  return InProcess(group) || AcrossProcessesOnDevices(group);
}
// A new in-process group: forgets the collectives counted under its name (a new threaded
// world reuses the names of the last one). `world_ranks`: its ranks' ranks in the world, in
// its rank order (empty for the world itself).
void RegisterInProcessGroup(const std::string& name, double timeout_s, const std::vector<int>& world_ranks);
// The calling rank thread's place in the in-process group named `group_name` (a compiled
// graph holding its functional collectives runs replicated over it). Raises when the thread
// has no such group.
struct InProcessMember {
  int rank = 0;
  int size = 1;
  double timeout_s = 1800;
  std::vector<int> world_ranks;  // of the group's ranks, in its rank order
};
InProcessMember MemberOf(const std::string& group_name);

void DeviceAllreduce(const c10d::ProcessGroup& group, const TensorVec& tensors, const c10d::ReduceOp& op,
                     std::chrono::milliseconds timeout);
void DeviceBroadcast(const c10d::ProcessGroup& group, const TensorVec& tensors, int64_t root_rank,
                     std::chrono::milliseconds timeout);
// outputs[i] is the group's list of `inputs[i]`-shaped results (allgather), or `outputs` one
// tensor holding them all along dim 0 (the _into_tensor forms).
void DeviceAllgather(const c10d::ProcessGroup& group, const std::vector<TensorVec>& outputs, const TensorVec& inputs,
                     std::chrono::milliseconds timeout);
void DeviceAllgatherIntoTensor(const c10d::ProcessGroup& group, const at::Tensor& output, const at::Tensor& input,
                               std::chrono::milliseconds timeout);
void DeviceReduceScatter(const c10d::ProcessGroup& group, const TensorVec& outputs,
                         const std::vector<TensorVec>& inputs, const c10d::ReduceOp& op,
                         std::chrono::milliseconds timeout);
void DeviceReduceScatterTensor(const c10d::ProcessGroup& group, const at::Tensor& output, const at::Tensor& input,
                               const c10d::ReduceOp& op, std::chrono::milliseconds timeout);
// Rooted forms, built on the above: every rank computes, the root keeps (reduce, gather) or
// sends its inputs to all, each keeping its part (scatter).
void DeviceReduce(const c10d::ProcessGroup& group, const TensorVec& tensors, const c10d::ReduceOp& op,
                  int64_t root_rank, std::chrono::milliseconds timeout);
void DeviceGather(const c10d::ProcessGroup& group, const std::vector<TensorVec>& outputs, const TensorVec& inputs,
                  int64_t root_rank, std::chrono::milliseconds timeout);
void DeviceScatter(const c10d::ProcessGroup& group, const TensorVec& outputs, const std::vector<TensorVec>& inputs,
                   int64_t root_rank, std::chrono::milliseconds timeout);
// all_to_all_single: dim 0 of `input` in `input_splits` rows (equal parts when empty) goes to
// the ranks in order; `output` receives each rank's part in rank order (`output_splits`).
void DeviceAlltoallBase(const c10d::ProcessGroup& group, const at::Tensor& output, const at::Tensor& input,
                        const std::vector<int64_t>& output_splits, const std::vector<int64_t>& input_splits,
                        std::chrono::milliseconds timeout);
// all_to_all: inputs[j] goes to rank j, outputs[j] comes from rank j.
void DeviceAlltoall(const c10d::ProcessGroup& group, const TensorVec& outputs, const TensorVec& inputs,
                    std::chrono::milliseconds timeout);
// send/recv (and isend/irecv, batch_isend_irecv), in device_p2p.cpp: posted at once, the
// work's wait() waits for the partner rank and, on the recv side, writes the received value.
// Across processes a wait runs the pending transfers in an order all processes share.
c10::intrusive_ptr<c10d::Work> DeviceSend(const c10d::ProcessGroup& group, const TensorVec& tensors, int64_t dst,
                                          int64_t tag);
c10::intrusive_ptr<c10d::Work> DeviceRecv(const c10d::ProcessGroup& group, const TensorVec& tensors, int64_t src,
                                          int64_t tag);
// A group across processes: its pending send/recv run (before a collective, as a device
// stream would order them), or are dropped with the group.
void RunPendingTransfers(const std::string& group);
void ForgetPendingTransfers(const std::string& group);
// The global device ids of a group registered across processes, in rank order.
std::vector<int64_t> CrossProcessDevices(const std::string& group);
// Shared with device_p2p.cpp. The group's timeout in seconds (for a call that sets none:
// c10d passes "unset").
double GroupTimeout(const std::string& group);
// The tensor's value as a whole device buffer of its dtype (a contiguous copy when the tensor
// is a part or a reinterpretation of its storage). A buffer shaped like a tensor (rank >= 2)
// keeps its shape when `keeps_shape` accepts it, else is copied out 1-D.
pjrt::BufferPtr Operand(const at::Tensor& t,
                        const std::function<bool(const std::vector<int64_t>&)>& keeps_shape = nullptr);
// A tensor of `numel` elements holding a result buffer (of any shape with that many elements).
at::Tensor FromResult(pjrt::BufferPtr buffer, int64_t numel, const at::TensorOptions& options);
// Writes a result (of `out`'s element count, any shape) into `out`: its storage takes the
// buffer when `out` is the whole of it, else a device copy lands it.
void WriteResult(const at::Tensor& out, pjrt::BufferPtr buffer);

// Also called from Python (an in-process group's barrier, which c10d would run on a CPU tensor).
void DeviceBarrier(const std::string& group, int rank, int size, int device, double timeout_s);

}  // namespace tpu::aten
