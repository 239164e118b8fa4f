// The replicas of the program being lowered on this thread: a compiled graph holding the
// functional collectives of an in-process group is one program replicated over the group's
// devices (replica i = rank i), and its collective lowerings (collective.cpp) take their
// replica groups from this count. 0: not replicated, where a collective cannot be lowered.
#pragma once

#include <string>

namespace tpu::lowering {

// Sets the count for the lowerings this thread runs while it lives.
class ReplicatedLowering {
 public:
  explicit ReplicatedLowering(int replicas);
  ~ReplicatedLowering();
  ReplicatedLowering(const ReplicatedLowering&) = delete;
  ReplicatedLowering& operator=(const ReplicatedLowering&) = delete;

 private:
  int outer_;
};

int LoweringReplicas();

// `module_text` (shlo::Builder::Module's, one replica) declared as `replicas` replicas.
std::string WithReplicas(const std::string& module_text, int replicas);

}  // namespace tpu::lowering
