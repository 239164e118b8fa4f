// A Program: one compiled module and where each of its parameters and results comes from
// and goes to at run time. Eager ops (csrc/aten/dispatch/op_program.cpp) and torch.compile graphs
// (csrc/aten/compiled/compiled_graph.cpp) both build one; the Executor runs it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../pjrt/pjrt.h"
#include "../stablehlo/builder.h"
#include "device_checks.h"

namespace tpu::runtime {

struct TpuStorage;

// Where one parameter's buffer comes from at run time.
struct ParamSource {
  enum Kind { Storage, Scalar, Rng, Offset } kind;
  // Storage: the operand slot whose storage is read. Scalar: an operand slot holding a 0-d
  // host tensor (>= 0), or -1 - index of a host Scalar. Rng: the index of the generator.
  // Offset: the operand slot whose storage offset (an s64 scalar) the program reads at run
  // time (lowering::HasRunTimeOffset); like Scalar and Rng, a host parameter.
  int slot = -1;
  shlo::ElemType elem{};      // element type of the parameter
  int64_t rng_increment = 0;  // Rng: how far the generator's offset advances per run
};

// A storage the program writes (an in-place or out= target, a mutated graph input).
struct WriteTarget {
  int slot;             // operand slot whose storage receives the output
  shlo::ElemType elem;  // element type of the new storage buffer
};

struct Program {
  int id = 0;                // names its function in fused modules: @f<id>
  std::string name;          // the ATen op or graph, for errors and metrics
  std::string module_text;   // the program alone, as @main
  std::string function_text; // the program as a private @f<id>, for fused modules (eager ops only)
  // Functions function_text calls besides its own (custom kernels, shlo::Builder::Import),
  // by name: a fused module holds each name once, however many programs call it.
  std::vector<std::pair<std::string, std::string>> imports;
  std::vector<shlo::TensorType> param_types, result_types;
  std::vector<ParamSource> params;
  // Results, in order: one per new tensor (`new_elems`), one per write, one i1 per check.
  std::vector<shlo::ElemType> new_elems;
  std::vector<WriteTarget> writes;
  // (parameter, result) pairs where a write's result may take over the buffer of the storage
  // parameter it updates (tf.aliasing_output): an in-place write then moves only what it
  // changes, not the whole storage (a KV cache slot, a dynamic_update_slice). The executor
  // donates the parameter only when its storage alone holds that buffer (Executor::Donations).
  std::vector<std::pair<int, int>> aliases;
  std::vector<std::string> check_messages;  // device-side asserts (device_checks.h)
  std::vector<CheckKind> check_kinds;       // the exception each raises, by check
  // A compiled graph holding collectives: the program runs replicated over the devices of
  // the in-process group `replica_group` (replica i = rank i), one run per group, meeting at
  // the group's rendezvous (collective_rendezvous.h), which also compiles it.
  int replicas = 0;
  std::string replica_group;
  int collectives = 0;  // the collective ops it holds

  // The executable, compiled on first use.
  const pjrt::ExecutablePtr& Compiled();
  // A fresh id for a program whose text names functions by it.
  static int NextId();

 private:
  std::mutex compile_mu_;
  pjrt::ExecutablePtr exe_;
};

// One run of a program over concrete operands, as the executor receives it.
struct Request {
  std::shared_ptr<Program> program;
  int device = 0;
  // Operand slots: the storage of each tensor operand (null for host operands).
  std::vector<TpuStorage*> storages;
  // By parameter: the uploaded buffer of each Scalar and Rng parameter (null for storages).
  std::vector<pjrt::BufferPtr> host_params;
  // Where each new-tensor result lands (the storages of the fresh output tensors).
  std::vector<TpuStorage*> new_storages;
  // A replicated program (Program::replicas): this thread's rank in its group, and how long
  // it waits for the others.
  int rank = -1;
  double timeout_seconds = 1800;
  // And this rank's own group of each collective group the program's text marks
  // (lowering::ReplicaGroupsMarker), as replicas in its ranks' order: the rendezvous fills each
  // marker with the groups of every rank.
  std::vector<std::vector<int>> member_groups;
};

// FNV-1a over a program signature (the keys of the per-op, fused and compiled caches).
struct KeyHash {
  size_t operator()(const std::vector<int64_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : v) {
      h ^= static_cast<uint64_t>(x);
      h *= 1099511628211ull;
    }
    return h;
  }
};

}  // namespace tpu::runtime
