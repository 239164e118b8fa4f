// The replicas of the program being lowered on this thread: a compiled graph holding the
// functional collectives of in-process groups is one program replicated over the devices of a
// span group's ranks (replica i = rank i of the span: the collectives' one group, or the world
// when the graph holds collectives of several groups, as a 2-D DeviceMesh's "dp" and "tp").
// Each collective lowering (collective.cpp) finds its group by the group_name it names, and
// takes that group's size and replica groups from here. No replicas: a collective cannot be
// lowered.
#pragma once

#include <string>
#include <vector>

namespace tpu::lowering {

// A group whose collectives a replicated program holds.
struct CollectiveGroup {
  std::string name;  // the c10d group name the functional collectives pass
  int size = 0;      // its ranks
};

// The program's replication: how many replicas, and the groups of its collectives. A group as
// large as the program is the span itself: its replica group is every replica, in order. Any
// other group's replica groups (one per group like it, as [[0, 1], [2, 3]] for a 2x2 mesh's
// "tp") are not known while one rank lowers, since each rank knows only its own group: the
// program holds a marker for them (ReplicaGroupsMarker), filled in when every rank has
// arrived at the rendezvous (FillReplicaGroups), so all ranks lower the same text.
struct Replication {
  int replicas = 0;  // 0: not replicated
  std::vector<CollectiveGroup> groups;
};

// Sets the replication for the lowerings this thread runs while it lives.
class ReplicatedLowering {
 public:
  explicit ReplicatedLowering(Replication replication);
  ~ReplicatedLowering();
  ReplicatedLowering(const ReplicatedLowering&) = delete;
  ReplicatedLowering& operator=(const ReplicatedLowering&) = delete;

 private:
  const Replication* outer_;
  Replication replication_;
};

// `module_text` (shlo::Builder::Module's, one replica) declared as `replicas` replicas.
std::string WithReplicas(const std::string& module_text, int replicas);

// The replica_groups attribute of a collective over disjoint groups of replicas (each group in
// its ranks' order: the order all_gather concatenates in).
std::string ReplicaGroupsAttr(const std::vector<std::vector<int>>& groups);
// What a collective of Replication::groups[group] holds in place of its replica_groups
// attribute until FillReplicaGroups writes it.
std::string ReplicaGroupsMarker(size_t group);
// `module_text` with the marker of each group k replaced by ReplicaGroupsAttr(partitions[k]).
// Throws std::invalid_argument when a marker has no partition.
std::string FillReplicaGroups(const std::string& module_text,
                              const std::vector<std::vector<std::vector<int>>>& partitions);

}  // namespace tpu::lowering
