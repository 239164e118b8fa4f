#include "device_collectives.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

#include <c10/core/DeviceGuard.h>
#include <c10/util/accumulate.h>
#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>

#include "collective_agreement.h"
#include "../common.h"
#include "../../runtime/collective_programs.h"
#include "../../runtime/collective_rendezvous.h"
#include "../../runtime/executor.h"
#include "../../runtime/metrics.h"
#include "../../runtime/p2p_rendezvous.h"
#include "../../runtime/runtime.h"

namespace tpu::aten {
namespace {

using runtime::CollectiveKind;
using runtime::CollectiveReduce;
using runtime::CollectiveSpec;

std::mutex timeouts_mu;
std::map<std::string, double> group_timeouts;  // seconds, by group name: the group's own timeout
std::map<std::string, std::vector<int>> group_world_ranks;  // by group name (empty: the world itself)

}  // namespace

double GroupTimeout(const std::string& group) {
  std::lock_guard<std::mutex> lock(timeouts_mu);
  auto it = group_timeouts.find(group);
  return it != group_timeouts.end() && it->second > 0 ? it->second : 1800;
}

namespace {

// The other ranks are Python threads of this process: a rank that waits for them at the
// rendezvous must not hold the GIL they need to get there. Nothing below the rendezvous calls
// back into Python (the last rank to arrive compiles and runs the program in C++ only).
pjrt::BufferPtr Rendezvous(const runtime::CollectiveArrival& a) {
  std::optional<pybind11::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
  return runtime::RunCollective(a);
}

CollectiveReduce ToReduce(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return CollectiveReduce::kSum;
    case c10d::ReduceOp::AVG: return CollectiveReduce::kAvg;
    case c10d::ReduceOp::PRODUCT: return CollectiveReduce::kProduct;
    case c10d::ReduceOp::MIN: return CollectiveReduce::kMin;
    case c10d::ReduceOp::MAX: return CollectiveReduce::kMax;
    default: break;
  }
  TORCH_CHECK(false, "torch.distributed on tpu: this ReduceOp is not supported (sum, avg, product, min, max are)");
}

}  // namespace

pjrt::BufferPtr Operand(const at::Tensor& t, const std::function<bool(const std::vector<int64_t>&)>& keeps_shape) {
  TORCH_CHECK(t.device().is_privateuseone(), "torch.distributed on tpu: expected a tpu tensor, got one on ",
              t.device());
  shlo::ElemType elem = ToElemType(t.scalar_type());
  at::Tensor flat = t.contiguous();
  runtime::TpuStorage* s = StorageOf(flat);
  if (flat.storage_offset() != 0 || s->nbytes != static_cast<size_t>(flat.numel()) * flat.element_size() ||
      (s->buffer && s->elem != elem)) {
    flat = flat.clone(at::MemoryFormat::Contiguous);
    s = StorageOf(flat);
  }
  auto materialize = [elem](runtime::TpuStorage* st) {
    if (st->pending) runtime::Executor::Get().FlushFor(*st, "collective");
    RaiseChecksOf(st);
    return st->Materialize(elem);
  };
  pjrt::BufferPtr buffer = materialize(s);
  auto keeps = [&](const std::vector<int64_t>& dims) {
    return dims.size() == 1 || (dims.size() > 1 && keeps_shape && keeps_shape(dims));
  };
  if (!keeps(buffer->dims())) {
    // A shaped buffer the program cannot take as it is (a reduce_scatter whose dim 0 does not
    // split over the ranks, a send) is copied out 1-D: on a TPU, a relayout.
    c10::DeviceGuard guard(flat.device());
    at::Tensor one_d = at::empty({flat.numel()}, flat.options());
    one_d.copy_(flat.view({flat.numel()}));
    buffer = materialize(StorageOf(one_d));
  }
  // The program's parameter is typed in this buffer's shape. PJRT checks only byte sizes: a
  // TPU's tiled 2-D buffer passed for another shape would hand the program its tiles' bytes
  // out of order.
  std::vector<int64_t> dims = buffer->dims();
  TORCH_CHECK(keeps(dims) && c10::multiply_integers(dims) == flat.numel(), "tpu: collective operand of shape ",
              c10::IntArrayRef(dims), " for a tensor of ", flat.numel(), " elements");
  return buffer;
}

void WriteResult(const at::Tensor& out, pjrt::BufferPtr buffer) {
  shlo::ElemType elem = ToElemType(out.scalar_type());
  runtime::TpuStorage* s = StorageOf(out);
  std::vector<int64_t> dims = buffer->dims();
  if (out.is_contiguous() && out.storage_offset() == 0 &&
      s->nbytes == static_cast<size_t>(out.numel()) * out.element_size() && !s->pending) {
    s->Assign(std::move(buffer), elem, {}, dims);
    return;
  }
  c10::DeviceGuard guard(out.device());
  at::Tensor fresh = at::empty(dims, out.options().memory_format(at::MemoryFormat::Contiguous));
  StorageOf(fresh)->Assign(std::move(buffer), elem, {}, dims);
  out.copy_(fresh.view(out.sizes()));
}

at::Tensor FromResult(pjrt::BufferPtr buffer, int64_t numel, const at::TensorOptions& options) {
  at::Tensor t = at::empty({numel}, options.memory_format(at::MemoryFormat::Contiguous));
  std::vector<int64_t> dims = buffer->dims();
  StorageOf(t)->Assign(std::move(buffer), ToElemType(options.dtype().toScalarType()), {}, dims);
  return t;
}

namespace {

// Runs one collective of `spec` with this rank's `input`; the rank's result, in the shape of the
// operand's buffer (dim 0 gathered or scattered) or 1-D.
pjrt::BufferPtr Run(const c10d::ProcessGroup& group, CollectiveSpec spec, const at::Tensor& input,
                    std::chrono::milliseconds timeout) {
  spec.elem = ToElemType(input.scalar_type());
  spec.numel = input.numel();
  spec.group_size = group.getSize();
  if (!InProcess(group)) return RunAcrossProcesses(group, spec, input);
  runtime::CollectiveArrival a;
  a.group = group.getGroupName();
  a.rank = group.getRank();
  a.group_size = group.getSize();
  a.device = input.device().index();
  a.description = spec.Describe();
  a.timeout_seconds = timeout.count() > 0 ? timeout.count() / 1000.0 : GroupTimeout(a.group);
  try {
    if (spec.numel > 0) {
      a.operands = {Operand(input, [&](const std::vector<int64_t>& dims) {
        return runtime::KeepsShape(spec.kind, dims, spec.group_size);
      })};
      spec.dims = a.operands[0]->dims();
      a.module_text = runtime::CollectiveModule(spec);
      if (spec.dims.size() != 1) {
        a.flat_module_text = runtime::CollectiveModule(CollectiveSpec{spec.kind, spec.reduce, spec.elem, spec.numel,
                                                                      {}, spec.group_size, spec.root});
        a.flatten_text = runtime::FlattenModule(spec);
      }
    }
    return Rendezvous(a);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "torch.distributed on tpu: ", e.what());
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
}

// Every rank's split sizes, exchanged on the host (they are host integers already): rank r's
// row is its input splits, then its output splits, then its row length.
std::vector<std::vector<int64_t>> ShareSplits(const c10d::ProcessGroup& group, const std::vector<int64_t>& in_splits,
                                              const std::vector<int64_t>& out_splits, int64_t row, int device,
                                              std::chrono::milliseconds timeout) {
  std::vector<int64_t> mine = in_splits;
  mine.insert(mine.end(), out_splits.begin(), out_splits.end());
  mine.push_back(row);
  const std::string description = "all_to_all (split sizes) over " + std::to_string(group.getSize()) + " ranks";
  if (!InProcess(group)) {
    RunPendingTransfers(group.getGroupName());
    return AgreeAcrossProcesses(group.getGroupName(), description, mine);
  }
  runtime::CollectiveArrival a;
  a.group = group.getGroupName();
  a.rank = group.getRank();
  a.group_size = group.getSize();
  a.device = device;
  a.description = description;
  a.timeout_seconds = timeout.count() > 0 ? timeout.count() / 1000.0 : GroupTimeout(a.group);
  a.host_values = mine;
  std::optional<pybind11::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
  try {
    return runtime::ShareHostValues(a);
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
}

std::vector<int64_t> SplitsOrEqual(const std::vector<int64_t>& splits, int64_t rows, int n, const char* what) {
  if (!splits.empty()) {
    TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == n, "torch.distributed on tpu: all_to_all_single: ",
                      splits.size(), " ", what, " split sizes for a group of ", n);
    int64_t sum = 0;
    for (int64_t s : splits) {
      TORCH_CHECK_VALUE(s >= 0, "torch.distributed on tpu: all_to_all_single: a negative ", what, " split size");
      sum += s;
    }
    TORCH_CHECK_VALUE(sum == rows, "torch.distributed on tpu: all_to_all_single: the ", what, " split sizes add up to ",
                      sum, ", the ", what, " has ", rows, " rows");
    return splits;
  }
  TORCH_CHECK_VALUE(rows % n == 0, "torch.distributed on tpu: all_to_all_single: the ", what, "'s ", rows,
                    " rows do not split evenly over ", n, " ranks");
  return std::vector<int64_t>(n, rows / n);
}

// The sizes of `n` copies of `t` stacked along dim 0 (what an all_gather's program returns).
std::vector<int64_t> GatheredSizes(const at::Tensor& t, int n) {
  std::vector<int64_t> sizes = t.sizes().vec();
  if (sizes.empty()) return {n};
  sizes[0] *= n;
  return sizes;
}

void CheckSameDtype(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "torch.distributed on tpu: ", what,
              ": output and input dtypes differ (", a.scalar_type(), " vs ", b.scalar_type(), ")");
}

}  // namespace

bool InProcess(const c10d::ProcessGroup& group) { return group.getBackendName() == kInProcessBackend; }

void RegisterInProcessGroup(const std::string& name, double timeout_s, const std::vector<int>& world_ranks) {
  runtime::ForgetCollectiveGroup(name);
  runtime::ForgetTransfers(name);
  std::lock_guard<std::mutex> lock(timeouts_mu);
  group_timeouts[name] = timeout_s;
  group_world_ranks[name] = world_ranks;
}

InProcessMember MemberOf(const std::string& group_name) {
  c10::intrusive_ptr<c10d::ProcessGroup> group = c10d::resolve_process_group(group_name);
  TORCH_CHECK(InProcess(*group), "tpu: torch.compile: a graph compiled with the collectives of the in-process group '",
              group_name, "' runs on a rank of a ", group->getBackendName(), " group");
  InProcessMember member{static_cast<int>(group->getRank()), static_cast<int>(group->getSize()),
                         GroupTimeout(group_name), {}};
  std::lock_guard<std::mutex> lock(timeouts_mu);
  auto it = group_world_ranks.find(group_name);
  if (it != group_world_ranks.end()) member.world_ranks = it->second;
  if (member.world_ranks.empty())  // the world (c10d passes no ranks for it)
    for (int r = 0; r < member.size; ++r) member.world_ranks.push_back(r);
  TORCH_CHECK(static_cast<int>(member.world_ranks.size()) == member.size, "tpu: in-process group '", group_name,
              "' has ", member.size, " ranks and was registered with ", member.world_ranks.size());
  return member;
}

void DeviceAllreduce(const c10d::ProcessGroup& group, const TensorVec& tensors, const c10d::ReduceOp& op,
                     std::chrono::milliseconds timeout) {
  for (const at::Tensor& t : tensors) {
    CollectiveSpec spec{CollectiveKind::kAllReduce, ToReduce(op)};
    pjrt::BufferPtr r = Run(group, spec, t, timeout);
    if (r) WriteResult(t, r);
  }
}

void DeviceBroadcast(const c10d::ProcessGroup& group, const TensorVec& tensors, int64_t root_rank,
                     std::chrono::milliseconds timeout) {
  for (const at::Tensor& t : tensors) {
    CollectiveSpec spec{CollectiveKind::kBroadcast};
    spec.root = static_cast<int>(root_rank);
    pjrt::BufferPtr r = Run(group, spec, t, timeout);
    if (r) WriteResult(t, r);
  }
}

void DeviceAllgatherIntoTensor(const c10d::ProcessGroup& group, const at::Tensor& output, const at::Tensor& input,
                               std::chrono::milliseconds timeout) {
  CheckSameDtype(output, input, "all_gather_into_tensor");
  TORCH_CHECK_VALUE(output.numel() == input.numel() * group.getSize(), "torch.distributed on tpu: all_gather: the "
                    "output holds ", output.numel(), " elements, not the group's ", group.getSize(), " x ",
                    input.numel());
  pjrt::BufferPtr r = Run(group, CollectiveSpec{CollectiveKind::kAllGather}, input, timeout);
  if (r) WriteResult(output, r);
}

void DeviceAllgather(const c10d::ProcessGroup& group, const std::vector<TensorVec>& outputs, const TensorVec& inputs,
                     std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "torch.distributed on tpu: all_gather: ", outputs.size(),
                    " output lists for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& in = inputs[i];
    TORCH_CHECK_VALUE(static_cast<int>(outputs[i].size()) == group.getSize(), "torch.distributed on tpu: "
                      "all_gather: ", outputs[i].size(), " outputs for a group of ", group.getSize());
    c10::DeviceGuard guard(in.device());
    at::Tensor all = at::empty(GatheredSizes(in, group.getSize()), in.options());
    DeviceAllgatherIntoTensor(group, all, in, timeout);
    for (size_t r = 0; r < outputs[i].size(); ++r)
      outputs[i][r].copy_(all.narrow(0, static_cast<int64_t>(r) * all.size(0) / group.getSize(),
                                     all.size(0) / group.getSize()).view(outputs[i][r].sizes()));
  }
}

void DeviceReduceScatterTensor(const c10d::ProcessGroup& group, const at::Tensor& output, const at::Tensor& input,
                               const c10d::ReduceOp& op, std::chrono::milliseconds timeout) {
  CheckSameDtype(output, input, "reduce_scatter_tensor");
  TORCH_CHECK_VALUE(input.numel() == output.numel() * group.getSize(), "torch.distributed on tpu: reduce_scatter: "
                    "the input holds ", input.numel(), " elements, not the group's ", group.getSize(), " x ",
                    output.numel());
  pjrt::BufferPtr r = Run(group, CollectiveSpec{CollectiveKind::kReduceScatter, ToReduce(op)}, input, timeout);
  if (r) WriteResult(output, r);
}

void DeviceReduceScatter(const c10d::ProcessGroup& group, const TensorVec& outputs,
                         const std::vector<TensorVec>& inputs, const c10d::ReduceOp& op,
                         std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "torch.distributed on tpu: reduce_scatter: ", outputs.size(),
                    " outputs for ", inputs.size(), " input lists");
  for (size_t i = 0; i < outputs.size(); ++i) {
    TensorVec flat;
    for (const at::Tensor& t : inputs[i]) flat.push_back(t.reshape({-1}));
    c10::DeviceGuard guard(outputs[i].device());
    DeviceReduceScatterTensor(group, outputs[i], at::cat(flat), op, timeout);
  }
}

void DeviceReduce(const c10d::ProcessGroup& group, const TensorVec& tensors, const c10d::ReduceOp& op,
                  int64_t root_rank, std::chrono::milliseconds timeout) {
  for (const at::Tensor& t : tensors) {
    pjrt::BufferPtr r = Run(group, CollectiveSpec{CollectiveKind::kAllReduce, ToReduce(op)}, t, timeout);
    if (r && group.getRank() == root_rank) WriteResult(t, r);
  }
}

void DeviceGather(const c10d::ProcessGroup& group, const std::vector<TensorVec>& outputs, const TensorVec& inputs,
                  int64_t root_rank, std::chrono::milliseconds timeout) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& in = inputs[i];
    c10::DeviceGuard guard(in.device());
    at::Tensor all = at::empty(GatheredSizes(in, group.getSize()), in.options());
    DeviceAllgatherIntoTensor(group, all, in, timeout);
    if (group.getRank() != root_rank) continue;
    TORCH_CHECK_VALUE(i < outputs.size() && static_cast<int>(outputs[i].size()) == group.getSize(),
                      "torch.distributed on tpu: gather: the root needs ", group.getSize(), " outputs");
    for (size_t r = 0; r < outputs[i].size(); ++r)
      outputs[i][r].copy_(all.narrow(0, static_cast<int64_t>(r) * all.size(0) / group.getSize(),
                                     all.size(0) / group.getSize()).view(outputs[i][r].sizes()));
  }
}

void DeviceScatter(const c10d::ProcessGroup& group, const TensorVec& outputs, const std::vector<TensorVec>& inputs,
                   int64_t root_rank, std::chrono::milliseconds timeout) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& out = outputs[i];
    c10::DeviceGuard guard(out.device());
    int64_t n = out.numel();
    at::Tensor all;
    if (group.getRank() == root_rank) {
      TORCH_CHECK_VALUE(i < inputs.size() && static_cast<int>(inputs[i].size()) == group.getSize(),
                        "torch.distributed on tpu: scatter: the root needs ", group.getSize(), " inputs");
      TensorVec flat;
      for (const at::Tensor& t : inputs[i]) flat.push_back(t.to(out.device()).reshape({-1}));
      all = at::cat(flat);
      TORCH_CHECK_VALUE(all.numel() == n * group.getSize(), "torch.distributed on tpu: scatter: inputs of ",
                        all.numel(), " elements in all for outputs of ", n);
    } else {
      all = at::empty({n * group.getSize()}, out.options());
    }
    DeviceBroadcast(group, {all}, root_rank, timeout);
    out.copy_(all.narrow(0, group.getRank() * n, n).view(out.sizes()));
  }
}

void DeviceAlltoallBase(const c10d::ProcessGroup& group, const at::Tensor& output, const at::Tensor& input,
                        const std::vector<int64_t>& output_splits, const std::vector<int64_t>& input_splits,
                        std::chrono::milliseconds timeout) {
  CheckSameDtype(output, input, "all_to_all_single");
  const int n = group.getSize();
  const int64_t in_rows = input.dim() ? input.size(0) : 1, out_rows = output.dim() ? output.size(0) : 1;
  const int64_t row = in_rows ? input.numel() / in_rows : 0;
  std::vector<int64_t> in_splits = SplitsOrEqual(input_splits, in_rows, n, "input");
  std::vector<int64_t> out_splits = SplitsOrEqual(output_splits, out_rows, n, "output");
  TORCH_CHECK_VALUE(output.numel() == out_rows * row, "torch.distributed on tpu: all_to_all_single: the output's rows "
                    "hold ", out_rows ? output.numel() / out_rows : 0, " elements, the input's ", row);
  c10::DeviceGuard guard(input.device());
  if (input_splits.empty() && output_splits.empty()) {  // equal parts on every rank: one all_to_all
    TORCH_CHECK_VALUE(output.numel() == input.numel(), "torch.distributed on tpu: all_to_all_single: output and "
                      "input sizes differ (", output.numel(), " vs ", input.numel(), " elements)");
    pjrt::BufferPtr r = Run(group, CollectiveSpec{CollectiveKind::kAllToAll}, input, timeout);
    if (r) WriteResult(output, r);
    return;
  }
  // Uneven parts. One replicated program needs the same operand shape on every rank, so each
  // rank pads each of its parts to the largest part sent anywhere in the group, the padded
  // parts cross in one stablehlo.all_to_all, and each rank slices its parts out on the device.
  // That moves group_size x largest rows per rank (an all_gather formulation would move every
  // rank's whole input to every rank). The largest part needs the others' split sizes: host
  // integers already, so they are exchanged on the host, with no device round trip.
  auto all = ShareSplits(group, in_splits, out_splits, row, input.device().index(), timeout);
  int64_t largest = 0;
  for (int s = 0; s < n; ++s) {
    TORCH_CHECK_VALUE(all[s][2 * n] == row, "torch.distributed on tpu: all_to_all_single: rank ", s, "'s rows hold ",
                      all[s][2 * n], " elements, rank ", group.getRank(), "'s ", row);
    for (int d = 0; d < n; ++d) {
      TORCH_CHECK_VALUE(all[s][d] == all[d][n + s], "torch.distributed on tpu: all_to_all_single: rank ", s,
                        " sends ", all[s][d], " rows to rank ", d, ", which expects ", all[d][n + s], " from it");
      largest = std::max(largest, all[s][d]);
    }
  }
  if (largest == 0 || row == 0) return;
  at::Tensor rows = input.reshape({in_rows, row});
  TensorVec padded;
  int64_t at_row = 0;
  for (int64_t s : in_splits) {
    padded.push_back(at::constant_pad_nd(rows.narrow(0, at_row, s), {0, 0, 0, largest - s}).reshape({-1}));
    at_row += s;
  }
  at::Tensor send = at::cat(padded);
  pjrt::BufferPtr r = Run(group, CollectiveSpec{CollectiveKind::kAllToAll}, send, timeout);
  if (!r) return;
  at::Tensor got = FromResult(r, send.numel(), send.options()).view({n, largest, row});
  TensorVec parts;
  for (int j = 0; j < n; ++j) parts.push_back(got[j].narrow(0, 0, out_splits[j]));
  output.copy_(at::cat(parts).view(output.sizes()));
}

void DeviceAlltoall(const c10d::ProcessGroup& group, const TensorVec& outputs, const TensorVec& inputs,
                    std::chrono::milliseconds timeout) {
  const int n = group.getSize();
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == n && static_cast<int>(inputs.size()) == n,
                    "torch.distributed on tpu: all_to_all: ", inputs.size(), " inputs and ", outputs.size(),
                    " outputs for a group of ", n);
  std::vector<int64_t> in_splits, out_splits;
  TensorVec flat;
  for (const at::Tensor& t : inputs) {
    CheckSameDtype(outputs[0], t, "all_to_all");
    in_splits.push_back(t.numel());
    flat.push_back(t.to(outputs[0].device()).reshape({-1}));
  }
  for (const at::Tensor& t : outputs) out_splits.push_back(t.numel());
  c10::DeviceGuard guard(outputs[0].device());
  at::Tensor send = at::cat(flat);
  at::Tensor received = at::empty({std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0})}, send.options());
  DeviceAlltoallBase(group, received, send, out_splits, in_splits, timeout);
  int64_t at_elem = 0;
  for (size_t j = 0; j < outputs.size(); ++j) {
    outputs[j].copy_(received.narrow(0, at_elem, out_splits[j]).view(outputs[j].sizes()));
    at_elem += out_splits[j];
  }
}

void DeviceBarrier(const std::string& group, int rank, int size, int device, double timeout_s) {
  runtime::CollectiveArrival a;
  a.group = group;
  a.rank = rank;
  a.group_size = size;
  a.device = device;
  a.description = "barrier";
  a.timeout_seconds = timeout_s > 0 ? timeout_s : GroupTimeout(group);
  try {
    Rendezvous(a);
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
}

}  // namespace tpu::aten
