// send/recv on the devices: between ranks that are threads of this process
// (csrc/runtime/p2p_rendezvous.h), each side posts at once and returns a work whose wait() waits
// for the partner; between processes, see CrossTransfer below.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>

#include "collective_agreement.h"
#include "../common.h"
#include "device_collectives.h"
#include "../../runtime/collective_programs.h"
#include "../../runtime/collective_rendezvous.h"
#include "../../runtime/metrics.h"
#include "../../runtime/p2p_rendezvous.h"

namespace tpu::aten {
namespace {

using runtime::CollectiveKind;
using runtime::CollectiveSpec;

// One side of a send/recv, posted; wait() waits for the partner (without the GIL: the partner
// is another Python thread) and lands a received value in the recv's tensor.
class TransferWork : public c10d::Work {
 public:
  TransferWork(runtime::PostedTransfer posted, at::Tensor tensor, double timeout_s)
      : c10d::Work(-1, posted.is_send ? c10d::OpType::SEND : c10d::OpType::RECV),
        posted_(std::move(posted)), tensor_(std::move(tensor)), timeout_s_(timeout_s) {}

  bool isCompleted() override { return finished_; }

  bool wait(std::chrono::milliseconds timeout) override {
    if (finished_) return true;
    pjrt::BufferPtr received;
    {
      std::optional<pybind11::gil_scoped_release> no_gil;
      if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
      try {
        received = runtime::AwaitTransfer(posted_, timeout.count() > 0 ? timeout.count() / 1000.0 : timeout_s_);
      } catch (const std::runtime_error& e) {
        TORCH_CHECK(false, e.what());
      }
    }
    if (received) WriteResult(tensor_, received);
    finished_ = true;
    return true;
  }

 private:
  runtime::PostedTransfer posted_;
  at::Tensor tensor_;
  double timeout_s_;
  bool finished_ = false;
};

std::string ShapeOf(const at::Tensor& t) {
  std::string dims;
  for (int64_t d : t.sizes()) dims += (dims.empty() ? "" : ",") + std::to_string(d);
  return std::string(shlo::MlirName(ToElemType(t.scalar_type()))) + "[" + dims + "]";
}

// send/recv between processes (a group whose collectives run on the devices across processes).
// Posting does nothing yet: both sides of a batch_isend_irecv post before either waits. A wait
// runs this process's pending transfers of the group up to the one waited for, in one order
// that every process shares (by pair of ranks, then direction, then number): each is the pair's
// agreement through the store, then the two-replica collective_permute over the pair's devices.
// As every process runs transfers in that shared order, no two wait for each other's later one.
// A group collective first runs every pending transfer, as a device stream would have.
struct CrossTransfer {
  std::string group;
  int src = 0, dst = 0;
  int64_t number = 0;  // of this direction's transfers (src -> dst) in the group
  int64_t tag = 0;
  bool is_send = false;
  at::Tensor tensor;
  bool done = false;
  std::string error;

  std::tuple<int, int, bool, int64_t> Order() const {
    return {std::min(src, dst), std::max(src, dst), src > dst, number};
  }
};

std::mutex cross_mu;
std::map<std::string, std::vector<std::shared_ptr<CrossTransfer>>> cross_pending;  // by group
std::map<std::tuple<std::string, int, int>, int64_t> cross_numbers;               // (group, src, dst)

void RunCrossTransfer(const CrossTransfer& t) {
  const std::string description = "send " + std::string(shlo::MlirName(ToElemType(t.tensor.scalar_type()))) + "[" +
                                  std::to_string(t.tensor.numel()) + "] from rank " + std::to_string(t.src) +
                                  " to rank " + std::to_string(t.dst) + " (tag " + std::to_string(t.tag) + ")";
  AgreeAcrossProcesses(t.group, description, {}, /*only_a_check=*/true, {std::min(t.src, t.dst), std::max(t.src, t.dst)});
  if (t.tensor.numel() == 0) return;
  const std::vector<int64_t> ids = CrossProcessDevices(t.group);
  CollectiveSpec spec{CollectiveKind::kSendRecv};
  spec.elem = ToElemType(t.tensor.scalar_type());
  spec.numel = t.tensor.numel();
  spec.group_size = 2;
  c10::DeviceGuard guard(t.tensor.device());
  try {
    // Replica 0 is the sender; the receiver's operand only gives the program its shape.
    pjrt::ExecutablePtr exe =
        runtime::CollectiveExecutable(runtime::CollectiveModule(spec), {ids.at(t.src), ids.at(t.dst)}, description);
    pjrt::BufferPtr operand = Operand(t.is_send ? t.tensor : at::zeros({t.tensor.numel()}, t.tensor.options()));
    pjrt::BufferPtr result = exe->ExecuteReplicated({{operand->raw()}}).at(0).at(0);
    runtime::GetMetrics().executions++;
    runtime::GetMetrics().collectives_on_device++;
    if (!t.is_send) WriteResult(t.tensor, result);
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "torch.distributed on tpu: ", description, " of group '", t.group,
                "' across processes failed: ", e.what());
  }
}

// Runs the group's pending transfers in the shared order, through `upto` (all when null).
void RunCrossTransfers(const std::string& group, const CrossTransfer* upto) {
  for (;;) {
    std::shared_ptr<CrossTransfer> next;
    {
      std::lock_guard<std::mutex> lock(cross_mu);
      if (upto && upto->done) return;
      auto& pending = cross_pending[group];
      if (pending.empty()) return;
      auto it = std::min_element(pending.begin(), pending.end(),
                                 [](const auto& a, const auto& b) { return a->Order() < b->Order(); });
      next = *it;
      pending.erase(it);
    }
    try {
      RunCrossTransfer(*next);
    } catch (const std::exception& e) {
      next->error = e.what();
      next->done = true;
      throw;
    }
    next->done = true;
    if (next.get() == upto) return;
  }
}

class CrossTransferWork : public c10d::Work {
 public:
  explicit CrossTransferWork(std::shared_ptr<CrossTransfer> t)
      : c10d::Work(-1, t->is_send ? c10d::OpType::SEND : c10d::OpType::RECV), t_(std::move(t)) {}

  bool isCompleted() override { return t_->done; }

  bool wait(std::chrono::milliseconds) override {
    if (!t_->done) RunCrossTransfers(t_->group, t_.get());
    TORCH_CHECK(t_->error.empty(), t_->error);
    return true;
  }

 private:
  std::shared_ptr<CrossTransfer> t_;
};

void CheckPeer(const c10d::ProcessGroup& group, int64_t peer, bool is_send) {
  TORCH_CHECK_VALUE(peer >= 0 && peer < group.getSize() && peer != group.getRank(), "torch.distributed on tpu: ",
                    is_send ? "send to" : "recv from", " rank ", peer, " from rank ", group.getRank(), " of a group of ",
                    group.getSize(), " (a rank cannot send to itself)");
}

c10::intrusive_ptr<c10d::Work> PostAcrossProcesses(const c10d::ProcessGroup& group, const at::Tensor& t, int64_t peer,
                                                   int64_t tag, bool is_send) {
  auto transfer = std::make_shared<CrossTransfer>();
  transfer->group = group.getGroupName();
  transfer->src = is_send ? group.getRank() : static_cast<int>(peer);
  transfer->dst = is_send ? static_cast<int>(peer) : group.getRank();
  transfer->tag = tag;
  transfer->is_send = is_send;
  transfer->tensor = t;
  std::lock_guard<std::mutex> lock(cross_mu);
  transfer->number = cross_numbers[{transfer->group, transfer->src, transfer->dst}]++;
  cross_pending[transfer->group].push_back(transfer);
  return c10::make_intrusive<CrossTransferWork>(std::move(transfer));
}

c10::intrusive_ptr<c10d::Work> Post(const c10d::ProcessGroup& group, const TensorVec& tensors, int64_t peer,
                                    int64_t tag, bool is_send) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "torch.distributed on tpu: send/recv take one tensor, got ", tensors.size());
  const at::Tensor& t = tensors[0];
  CheckPeer(group, peer, is_send);
  if (!InProcess(group)) return PostAcrossProcesses(group, t, peer, tag, is_send);
  runtime::P2PArrival a;
  a.group = group.getGroupName();
  a.src = is_send ? group.getRank() : static_cast<int>(peer);
  a.dst = is_send ? static_cast<int>(peer) : group.getRank();
  a.tag = tag;
  a.is_send = is_send;
  a.device = t.device().index();
  a.description = ShapeOf(t);
  if (t.numel() > 0) {
    CollectiveSpec spec{CollectiveKind::kSendRecv};
    spec.elem = ToElemType(t.scalar_type());
    spec.numel = t.numel();
    spec.group_size = 2;
    a.module_text = runtime::CollectiveModule(spec);
    a.operand = Operand(t);
  }
  runtime::PostedTransfer posted;
  {
    std::optional<pybind11::gil_scoped_release> no_gil;  // the partner may be running the program
    if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
    posted = runtime::PostTransfer(a);
  }
  return c10::make_intrusive<TransferWork>(std::move(posted), t, GroupTimeout(a.group));
}

}  // namespace

void RunPendingTransfers(const std::string& group) { RunCrossTransfers(group, nullptr); }

void ForgetPendingTransfers(const std::string& group) {
  std::lock_guard<std::mutex> lock(cross_mu);
  cross_pending.erase(group);
  for (auto it = cross_numbers.begin(); it != cross_numbers.end();)
    it = std::get<0>(it->first) == group ? cross_numbers.erase(it) : std::next(it);
}

c10::intrusive_ptr<c10d::Work> DeviceSend(const c10d::ProcessGroup& group, const TensorVec& tensors, int64_t dst,
                                          int64_t tag) {
  return Post(group, tensors, dst, tag, /*is_send=*/true);
}

c10::intrusive_ptr<c10d::Work> DeviceRecv(const c10d::ProcessGroup& group, const TensorVec& tensors, int64_t src,
                                          int64_t tag) {
  return Post(group, tensors, src, tag, /*is_send=*/false);
}

}  // namespace tpu::aten
