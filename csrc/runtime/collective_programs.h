// StableHLO text of the collectives that ranks living on the devices of this process run
// together: one program replicated over the group's devices (replica i = rank i), operands
// and results flat 1-D arrays (a dim-0 gather or scatter of a contiguous tensor is one of its
// flat array). No torch headers.
#pragma once

#include <cstdint>
#include <string>

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
  int group_size = 1;
  int root = 0;  // broadcast's source rank
  // "all_reduce(sum) f32[16] over 4 ranks": what every rank of the group must agree on.
  std::string Describe() const;
};

// The replicated program (throws std::invalid_argument for a combination it cannot express).
std::string CollectiveModule(const CollectiveSpec& spec);

}  // namespace tpu::runtime
