// Fused eager mode's open graph: requests are recorded, not run; at a sync point the whole
// graph runs as one program that calls each op's program as a function. Storages written by
// recorded ops are "pending" until then.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "program.h"
#include "runtime.h"

namespace tpu::runtime {

struct FusedProgram;

class FusedGraph {
 public:
  bool empty() const { return calls_.empty(); }
  int device() const { return device_; }
  size_t num_ops() const { return calls_.size(); }

  void Record(const Request& request);
  // Runs the recorded ops as one program and hands every live pending storage its value.
  void Flush(const char* cause);

 private:
  struct Call {
    Program* program;
    std::vector<int> args;
    int first_result;
  };
  using Targets = std::vector<std::pair<std::shared_ptr<TpuStorage>, shlo::ElemType>>;

  void RunOneByOne(const std::vector<int>& outputs, const Targets& targets);
  void CompileLater(std::string module, const std::string& what, std::string detail,
                    const std::shared_ptr<FusedProgram>& fused);
  // For the dump (TORCH_TPU_DUMP_DIR): which op each @f<id> of the module is, and how often it is called.
  std::string Functions() const;
  // `uid`: the storage whose buffer it is (-1: a host parameter).
  int AddParam(pjrt::BufferPtr buffer, const shlo::TensorType& type, int64_t uid = -1);
  void MarkPending(TpuStorage* s, int value, shlo::ElemType elem, const std::vector<int64_t>& dims,
                   const CheckSet& guards);
  // The (parameter, output) pairs where an output is the new value of the storage whose
  // buffer the parameter is, of the same type: the program may write it in place.
  std::vector<std::pair<int, int>> Aliases(const Targets& targets) const;
  std::string ModuleText(const std::vector<int>& outputs, const std::vector<std::pair<int, int>>& aliases);
  void Reset();

  int device_ = -1;
  std::vector<Call> calls_;
  std::vector<std::shared_ptr<Program>> programs_;  // keeps every recorded program alive
  std::vector<pjrt::BufferPtr> params_;
  std::vector<int> param_ids_;
  std::unordered_map<uint64_t, int> param_of_storage_;  // storage uid -> index in params_
  std::vector<shlo::TensorType> value_types_;        // by value id: params and call results
  std::unordered_map<uint64_t, int> storage_value_;  // storage uid -> its current value id
  std::unordered_map<uint64_t, shlo::ElemType> elem_;
  std::vector<std::pair<uint64_t, std::weak_ptr<TpuStorage>>> pending_order_;
  std::unordered_set<uint64_t> pending_uids_;  // the uids in pending_order_
  std::vector<std::pair<int, CheckPtr>> checks_;  // value id of each check's flag
  std::vector<int64_t> key_;
  std::unordered_map<int, std::string> refs_;
};

}  // namespace tpu::runtime
