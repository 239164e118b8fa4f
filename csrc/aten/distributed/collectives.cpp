// torch.distributed collectives on tpu tensors. Among ranks that are threads of this process
// (one device each), they run on the devices (device_collectives.h), all but recv from any
// source and monitored_barrier. Among processes whose plugin client spans them (a "tpu_dist"
// group registered across processes), they run on the devices too, all but the barrier (c10d
// gives it a CPU tensor).
// Otherwise each runs on host copies through the process group's CPU backend (gloo) and
// writes the results back into the tpu tensors: any PJRT plugin, any number of processes,
// with PyTorch's own group and store machinery, at the price of the host round trip (counted
// in torch_tpu.metrics()["collectives_via_host"], announced once).
// Registered from Python (torch_tpu.distributed), over the generic PrivateUse1 kernels of
// c10d's Ops.cpp, which expect a tpu backend inside the group.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/library.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "device_collectives.h"
#include "../../runtime/metrics.h"

namespace tpu::aten {
namespace {

using c10d::ReduceOp;
using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
using Op = c10::intrusive_ptr<ReduceOp>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using TensorVec = std::vector<at::Tensor>;

bool HasCpuBackend(const Group& group) {
  // getDeviceTypes rather than hasBackendForDeviceType, which torch 2.11 lacks.
  for (const c10::Device& d : group->getDeviceTypes())
    if (d.type() == c10::DeviceType::CPU) return true;
  return false;
}

c10::intrusive_ptr<c10d::Backend> Host(const Group& group) {
  TORCH_CHECK(!InProcess(*group), "torch.distributed on tpu: this collective is not supported yet among ranks that "
              "are threads of one process (all_reduce, broadcast, all_gather, reduce_scatter, reduce, gather, scatter, all_to_all, send/recv "
              "with a source rank and barrier are)");
  TORCH_CHECK(HasCpuBackend(group),
              "torch.distributed on tpu runs collectives through the group's CPU backend; create the group with "
              "a backend that has one (init_process_group(\"gloo\"))");
  runtime::GetMetrics().collectives_via_host++;
  TORCH_WARN_ONCE("torch.distributed on tpu: collectives between processes run on host copies through Gloo; "
                  "torch_tpu.metrics()[\"collectives_via_host\"] counts them (a \"tpu_dist\" group runs them "
                  "on the devices where the plugin's client spans the processes: libtpu, the CUDA plugin)");
  return group->getBackend(c10::DeviceType::CPU);
}

at::Tensor ToHost(const at::Tensor& t) { return t.to(at::kCPU).contiguous(); }
at::Tensor HostLike(const at::Tensor& t) { return at::empty(t.sizes(), t.options().device(at::kCPU)); }
template <typename Fn>
TensorVec Each(const TensorVec& ts, Fn fn) {
  TensorVec out;
  for (const at::Tensor& t : ts) out.push_back(fn(t));
  return out;
}
template <typename Fn>
std::vector<TensorVec> Each(const std::vector<TensorVec>& lists, Fn fn) {
  std::vector<TensorVec> out;
  for (const TensorVec& l : lists) out.push_back(Each(l, fn));
  return out;
}
template <typename List>
List ToHost(const List& ts) {
  return Each(ts, [](const at::Tensor& t) { return ToHost(t); });
}
template <typename List>
List HostLike(const List& ts) {
  return Each(ts, [](const at::Tensor& t) { return HostLike(t); });
}
void Back(const TensorVec& ts, const TensorVec& host) {
  for (size_t i = 0; i < ts.size(); ++i) ts[i].copy_(host[i]);
}
void Back(const std::vector<TensorVec>& lists, const std::vector<TensorVec>& host) {
  for (size_t i = 0; i < lists.size(); ++i) Back(lists[i], host[i]);
}

std::chrono::milliseconds Timeout(int64_t ms) { return std::chrono::milliseconds(ms); }

// A completed work whose future holds the tpu tensors, as DDP's comm hooks and functional
// collectives expect of a device backend. The host work was waited for once already (a
// second wait of gloo's recv waits for another message).
WorkPtr Done(const TensorVec& results = {}) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  future->markCompleted(c10::IValue(results));
  return c10d::Work::create_from_future(future);
}

// Gloo has no AVG: SUM, then divide by the group size. PREMUL_SUM is NCCL's alone.
ReduceOp HostOp(const ReduceOp& op) {
  TORCH_CHECK(op.op_ != ReduceOp::PREMUL_SUM, "torch.distributed on tpu: ReduceOp.PREMUL_SUM is not supported");
  return op.op_ == ReduceOp::AVG ? ReduceOp(ReduceOp::SUM) : op;
}
void Average(const ReduceOp& op, const Group& group, const TensorVec& host) {
  if (op.op_ != ReduceOp::AVG) return;
  for (const at::Tensor& t : host) t.div_(group->getSize());
}

std::tuple<TensorVec, WorkPtr> Broadcast(const at::TensorList tensors, const Group& group, int64_t root_rank,
                                         int64_t root_tensor, bool, int64_t timeout) {
  if (OnDevices(*group)) {
    DeviceBroadcast(*group, tensors.vec(), root_rank, Timeout(timeout));
    return {tensors.vec(), Done(tensors.vec())};
  }
  TensorVec ts = tensors.vec(), host = ToHost(ts);
  c10d::BroadcastOptions opts;
  opts.rootRank = root_rank;
  opts.rootTensor = root_tensor;
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->broadcast(host, opts);
  w->wait();
  Back(ts, host);
  return {ts, Done(ts)};
}

std::tuple<TensorVec, WorkPtr> Allreduce(const at::TensorList tensors, const Group& group, const Op& op,
                                         const std::optional<at::Tensor>& sparse_indices, bool, int64_t timeout) {
  TORCH_CHECK(!sparse_indices.has_value(), "torch.distributed on tpu: sparse all_reduce is not supported");
  if (OnDevices(*group)) {
    DeviceAllreduce(*group, tensors.vec(), *op, Timeout(timeout));
    return {tensors.vec(), Done(tensors.vec())};
  }
  TensorVec ts = tensors.vec(), host = ToHost(ts);
  c10d::AllreduceOptions opts;
  opts.reduceOp = HostOp(*op);
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->allreduce(host, opts);
  w->wait();
  Average(*op, group, host);
  Back(ts, host);
  return {ts, Done(ts)};
}

WorkPtr AllreduceCoalesced(const at::TensorList tensors, const Group& group, const Op& op, bool, int64_t timeout) {
  if (OnDevices(*group)) {
    DeviceAllreduce(*group, tensors.vec(), *op, Timeout(timeout));
    return Done(tensors.vec());
  }
  TensorVec ts = tensors.vec(), host = ToHost(ts);
  c10d::AllreduceCoalescedOptions opts;
  opts.reduceOp = HostOp(*op);
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->allreduce_coalesced(host, opts);
  w->wait();
  Average(*op, group, host);
  Back(ts, host);
  return Done(ts);
}

std::tuple<std::vector<TensorVec>, WorkPtr> Allgather(const std::vector<TensorVec>& outputs,
                                                     const at::TensorList inputs, const Group& group, bool,
                                                     int64_t timeout) {
  TensorVec flat;
  for (const TensorVec& l : outputs) flat.insert(flat.end(), l.begin(), l.end());
  if (OnDevices(*group)) {
    DeviceAllgather(*group, outputs, inputs.vec(), Timeout(timeout));
    return {outputs, Done(flat)};
  }
  std::vector<TensorVec> host_out = HostLike(outputs);
  TensorVec host_in = ToHost(inputs.vec());
  c10d::AllgatherOptions opts;
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->allgather(host_out, host_in, opts);
  w->wait();
  Back(outputs, host_out);
  return {outputs, Done(flat)};
}

std::tuple<at::Tensor, WorkPtr> AllgatherBase(at::Tensor& output, at::Tensor& input, const Group& group, bool,
                                              int64_t timeout) {
  if (OnDevices(*group)) {
    DeviceAllgatherIntoTensor(*group, output, input, Timeout(timeout));
    return {output, Done({output})};
  }
  at::Tensor host_out = HostLike(output), host_in = ToHost(input);
  c10d::AllgatherOptions opts;
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->_allgather_base(host_out, host_in, opts);
  w->wait();
  output.copy_(host_out);
  return {output, Done({output})};
}

WorkPtr AllgatherCoalesced(const std::vector<TensorVec>& outputs, const at::TensorList& inputs, const Group& group,
                           bool) {
  if (OnDevices(*group)) {
    DeviceAllgather(*group, outputs, inputs.vec(), Timeout(0));
    return Done();
  }
  std::vector<TensorVec> host_out = HostLike(outputs);
  TensorVec host_in = ToHost(inputs.vec());
  WorkPtr w = Host(group)->allgather_coalesced(host_out, host_in);
  w->wait();
  Back(outputs, host_out);
  return Done();
}

WorkPtr AllgatherIntoTensorCoalesced(const at::TensorList outputs, const at::TensorList inputs, const Group& group,
                                     bool) {
  TensorVec outs = outputs.vec();
  if (OnDevices(*group)) {
    for (size_t i = 0; i < outs.size(); ++i) DeviceAllgatherIntoTensor(*group, outs[i], inputs[i], Timeout(0));
    return Done(outs);
  }
  TensorVec host_out = HostLike(outs), host_in = ToHost(inputs.vec());
  WorkPtr w = Host(group)->allgather_into_tensor_coalesced(host_out, host_in);
  w->wait();
  Back(outs, host_out);
  return Done(outs);
}

std::tuple<TensorVec, WorkPtr> ReduceScatter(const at::TensorList& outputs, const std::vector<TensorVec>& inputs,
                                             const Group& group, const Op& op, bool, int64_t timeout) {
  if (OnDevices(*group)) {
    DeviceReduceScatter(*group, outputs.vec(), inputs, *op, Timeout(timeout));
    return {outputs.vec(), Done(outputs.vec())};
  }
  TensorVec outs = outputs.vec(), host_out = HostLike(outs);
  std::vector<TensorVec> host_in = ToHost(inputs);
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = HostOp(*op);
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->reduce_scatter(host_out, host_in, opts);
  w->wait();
  Average(*op, group, host_out);
  Back(outs, host_out);
  return {outs, Done(outs)};
}

std::tuple<at::Tensor, WorkPtr> ReduceScatterBase(at::Tensor& output, at::Tensor& input, const Group& group,
                                                  const Op& op, bool, int64_t timeout) {
  if (OnDevices(*group)) {
    DeviceReduceScatterTensor(*group, output, input, *op, Timeout(timeout));
    return {output, Done({output})};
  }
  at::Tensor host_out = HostLike(output), host_in = ToHost(input);
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = HostOp(*op);
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->_reduce_scatter_base(host_out, host_in, opts);
  w->wait();
  Average(*op, group, {host_out});
  output.copy_(host_out);
  return {output, Done({output})};
}

WorkPtr ReduceScatterTensorCoalesced(const at::TensorList outputs, const at::TensorList inputs, const Group& group,
                                     const Op& op, bool, int64_t timeout) {
  TensorVec outs = outputs.vec();
  if (OnDevices(*group)) {
    for (size_t i = 0; i < outs.size(); ++i) DeviceReduceScatterTensor(*group, outs[i], inputs[i], *op, Timeout(timeout));
    return Done(outs);
  }
  TensorVec host_out = HostLike(outs), host_in = ToHost(inputs.vec());
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = HostOp(*op);
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->reduce_scatter_tensor_coalesced(host_out, host_in, opts);
  w->wait();
  Average(*op, group, host_out);
  Back(outs, host_out);
  return Done(outs);
}

WorkPtr Reduce(const at::TensorList tensors, const Group& group, const Op& op, int64_t root_rank, int64_t root_tensor,
               bool, int64_t timeout) {
  if (OnDevices(*group)) {
    DeviceReduce(*group, tensors.vec(), *op, root_rank, Timeout(timeout));
    return Done(tensors.vec());
  }
  TensorVec ts = tensors.vec(), host = ToHost(ts);
  c10d::ReduceOptions opts;
  opts.reduceOp = HostOp(*op);
  opts.rootRank = root_rank;
  opts.rootTensor = root_tensor;
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->reduce(host, opts);
  w->wait();
  if (group->getRank() == root_rank) {
    Average(*op, group, host);
    Back(ts, host);
  }
  return Done(ts);
}

WorkPtr Gather(const std::vector<TensorVec>& outputs, const at::TensorList& inputs, const Group& group,
               int64_t root_rank, bool, int64_t timeout) {
  if (OnDevices(*group)) {
    DeviceGather(*group, outputs, inputs.vec(), root_rank, Timeout(timeout));
    return Done();
  }
  std::vector<TensorVec> host_out = HostLike(outputs);
  TensorVec host_in = ToHost(inputs.vec());
  c10d::GatherOptions opts;
  opts.rootRank = root_rank;
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->gather(host_out, host_in, opts);
  w->wait();
  Back(outputs, host_out);
  return Done();
}

std::tuple<TensorVec, WorkPtr> Scatter(const at::TensorList& outputs, const std::vector<TensorVec>& inputs,
                                       const Group& group, int64_t root_rank, bool, int64_t timeout) {
  if (OnDevices(*group)) {
    DeviceScatter(*group, outputs.vec(), inputs, root_rank, Timeout(timeout));
    return {outputs.vec(), Done(outputs.vec())};
  }
  TensorVec outs = outputs.vec(), host_out = HostLike(outs);
  std::vector<TensorVec> host_in = ToHost(inputs);
  c10d::ScatterOptions opts;
  opts.rootRank = root_rank;
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->scatter(host_out, host_in, opts);
  w->wait();
  Back(outs, host_out);
  return {outs, Done(outs)};
}

std::tuple<TensorVec, WorkPtr> Alltoall(const at::TensorList& outputs, const at::TensorList& inputs, const Group& group,
                                        bool, int64_t timeout) {
  if (OnDevices(*group)) {
    DeviceAlltoall(*group, outputs.vec(), inputs.vec(), Timeout(timeout));
    return {outputs.vec(), Done(outputs.vec())};
  }
  TensorVec outs = outputs.vec(), host_out = HostLike(outs), host_in = ToHost(inputs.vec());
  c10d::AllToAllOptions opts;
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->alltoall(host_out, host_in, opts);
  w->wait();
  Back(outs, host_out);
  return {outs, Done(outs)};
}

WorkPtr AlltoallBase(at::Tensor& output, at::Tensor& input, const Group& group, std::vector<int64_t> output_splits,
                     std::vector<int64_t> input_splits, bool, int64_t timeout) {
  if (OnDevices(*group)) {
    DeviceAlltoallBase(*group, output, input, output_splits, input_splits, Timeout(timeout));
    return Done({output});
  }
  at::Tensor host_out = HostLike(output), host_in = ToHost(input);
  c10d::AllToAllOptions opts;
  opts.timeout = Timeout(timeout);
  WorkPtr w = Host(group)->alltoall_base(host_out, host_in, output_splits, input_splits, opts);
  w->wait();
  output.copy_(host_out);
  return Done({output});
}

WorkPtr Barrier(at::Tensor tensor, const Group& group, const std::vector<int64_t>&, bool, int64_t timeout) {
  if (InProcess(*group)) {
    DeviceBarrier(group->getGroupName(), group->getRank(), group->getSize(), tensor.device().index(), timeout / 1000.0);
    return Done();
  }

  c10d::BarrierOptions opts;
  opts.timeout = Timeout(timeout);
  Host(group)->barrier(opts)->wait();
  return Done();
}

void MonitoredBarrier(at::Tensor, const Group& group, const std::vector<int64_t>&, int64_t timeout,
                      bool wait_all_ranks) {
  c10d::BarrierOptions opts;
  opts.timeout = Timeout(timeout);
  Host(group)->monitoredBarrier(opts, wait_all_ranks);
}

WorkPtr Send(const at::TensorList tensors, const Group& group, int64_t dst, int64_t tag) {
  if (OnDevices(*group)) return DeviceSend(*group, tensors.vec(), dst, tag);
  TensorVec host = ToHost(tensors.vec());
  Host(group)->send(host, static_cast<int>(dst), static_cast<int>(tag))->wait();
  return Done();
}

WorkPtr Recv(const at::TensorList tensors, const Group& group, int64_t src, int64_t tag) {
  if (OnDevices(*group)) return DeviceRecv(*group, tensors.vec(), src, tag);
  TensorVec ts = tensors.vec(), host = HostLike(ts);
  WorkPtr w = Host(group)->recv(host, static_cast<int>(src), static_cast<int>(tag));
  w->wait();
  Back(ts, host);
  return Done(ts);
}

WorkPtr RecvAnySource(const at::TensorList tensors, const Group& group, int64_t tag) {
  TensorVec ts = tensors.vec(), host = HostLike(ts);
  WorkPtr w = Host(group)->recvAnysource(host, static_cast<int>(tag));
  w->wait();
  Back(ts, host);
  return Done(ts);
}

}  // namespace

// Called once from Python (torch_tpu.distributed). Returns the ops whose registration
// failed (c10d's kernel signatures differ between torch versions), each with its error.
std::vector<std::string> RegisterCollectives() {
  static std::vector<std::string> errors = [] {
    std::vector<std::string> failed;
    // The dispatcher notes that these replace c10d's generic PrivateUse1 kernels (which look
    // for a tpu backend inside the group): expected, so not printed.
    struct Quiet : c10::WarningHandler {
      void process(const c10::Warning&) override {}
    } quiet;
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    auto* lib = new torch::Library(torch::Library::IMPL, "c10d", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    auto add = [&](const char* name, auto&& fn) {
      try {
        lib->impl(name, std::forward<decltype(fn)>(fn));
      } catch (const std::exception& e) {
        failed.push_back(std::string(name) + ": " + e.what());
      }
    };
    add("broadcast_", TORCH_FN(Broadcast));
    add("allreduce_", TORCH_FN(Allreduce));
    add("allreduce_coalesced_", TORCH_FN(AllreduceCoalesced));
    add("allgather_", TORCH_FN(Allgather));
    add("_allgather_base_", TORCH_FN(AllgatherBase));
    add("allgather_coalesced_", TORCH_FN(AllgatherCoalesced));
    add("allgather_into_tensor_coalesced_", TORCH_FN(AllgatherIntoTensorCoalesced));
    add("reduce_scatter_", TORCH_FN(ReduceScatter));
    add("_reduce_scatter_base_", TORCH_FN(ReduceScatterBase));
    add("reduce_scatter_tensor_coalesced_", TORCH_FN(ReduceScatterTensorCoalesced));
    add("reduce_", TORCH_FN(Reduce));
    add("gather_", TORCH_FN(Gather));
    add("scatter_", TORCH_FN(Scatter));
    add("alltoall_", TORCH_FN(Alltoall));
    add("alltoall_base_", TORCH_FN(AlltoallBase));
    add("barrier", TORCH_FN(Barrier));
    add("monitored_barrier_", TORCH_FN(MonitoredBarrier));
    add("send", TORCH_FN(Send));
    add("recv_", TORCH_FN(Recv));
    add("recv_any_source_", TORCH_FN(RecvAnySource));
    return failed;
  }();
  return errors;
}

}  // namespace tpu::aten
