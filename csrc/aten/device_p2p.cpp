// send/recv between ranks that are threads of this process (csrc/runtime/p2p_rendezvous.h):
// each side posts at once and returns a work whose wait() waits for the partner.
#include <optional>
#include <string>

#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>

#include "common.h"
#include "device_collectives.h"
#include "../runtime/collective_programs.h"
#include "../runtime/p2p_rendezvous.h"

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

c10::intrusive_ptr<c10d::Work> Post(const c10d::ProcessGroup& group, const TensorVec& tensors, int64_t peer,
                                    int64_t tag, bool is_send) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "torch.distributed on tpu: send/recv take one tensor, got ", tensors.size());
  const at::Tensor& t = tensors[0];
  TORCH_CHECK_VALUE(peer >= 0 && peer < group.getSize() && peer != group.getRank(), "torch.distributed on tpu: ",
                    is_send ? "send to" : "recv from", " rank ", peer, " from rank ", group.getRank(), " of a group of ",
                    group.getSize(), " (a rank cannot send to itself)");
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

c10::intrusive_ptr<c10d::Work> DeviceSend(const c10d::ProcessGroup& group, const TensorVec& tensors, int64_t dst,
                                          int64_t tag) {
  return Post(group, tensors, dst, tag, /*is_send=*/true);
}

c10::intrusive_ptr<c10d::Work> DeviceRecv(const c10d::ProcessGroup& group, const TensorVec& tensors, int64_t src,
                                          int64_t tag) {
  return Post(group, tensors, src, tag, /*is_send=*/false);
}

}  // namespace tpu::aten
