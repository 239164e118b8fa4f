// StableHLO text of the collectives that ranks living on the devices of this process run
// together: one program replicated over the group's devices (replica i = rank i). Operands keep
// the shape of their storage's buffer, so that a TPU's tiled 2-D buffer reaches the collective
// without a relayout; gathers, scatters and all_to_all work on dim 0, which for a contiguous
// tensor is the same as on its flat array. No torch headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../stablehlo/builder.h"

namespace tpu::runtime {

// kAllToAll: each rank's operand is group_size equal chunks, chunk j goes to rank j, which
// keeps them in rank order. kSendRecv: two replicas, the first's operand lands on the second
// (collective_permute; the sender's own result is zeros).
enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll, kSendRecv };
enum class CollectiveReduce { kSum, kAvg, kProduct, kMin, kMax, kNone };

struct CollectiveSpec {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  CollectiveReduce reduce = CollectiveReduce::kNone;
  shlo::ElemType elem = shlo::ElemType::F32;
  int64_t numel = 0;  // of each rank's operand
  // The shape of each rank's operand array (empty: 1-D of numel). Not part of what ranks must
  // agree on: ranks whose buffers differ in shape run the 1-D program (collective_rendezvous).
  std::vector<int64_t> dims;
  int group_size = 1;
  int root = 0;  // broadcast's source rank
  // "all_reduce(sum) f32[16] over 4 ranks": what every rank of the group must agree on.
  std::string Describe() const;
};

// The replicated program (throws std::invalid_argument for a combination it cannot express).
std::string CollectiveModule(const CollectiveSpec& spec);
// The one-replica program reshaping a rank's operand of shape `spec.dims` to 1-D.
std::string FlattenModule(const CollectiveSpec& spec);
// Whether an operand of shape `dims` can keep it: reduce_scatter and all_to_all split dim 0
// into group_size equal parts.
bool KeepsShape(CollectiveKind kind, const std::vector<int64_t>& dims, int group_size);

}  // namespace tpu::runtime
