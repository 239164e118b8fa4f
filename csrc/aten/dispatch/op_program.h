// One eager ATen call as a runtime Program: its signature, Meta inference of its results,
// and the StableHLO its lowering builds over the call's storages, scalars and RNG states.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "arguments.h"
#include "operands.h"

namespace tpu::aten {

enum class Variant { Functional, Inplace, Out };


// One registered overload and what its schema says about execution.
struct OpEntry {
  std::string name;
  lowering::LowerFn fn = nullptr;
  Variant variant = Variant::Functional;
  std::optional<c10::OperatorHandle> op;
  std::optional<c10::OperatorHandle> functional;  // Meta of this op gives the result types
  size_t num_args = 0;
  size_t num_outs = 0;  // trailing out= arguments
  OpArguments args;  // the classification of this overload's schema arguments
  // A seeded op without a Generator argument (native_dropout): the default generator's state
  // is passed to its lowering as one extra trailing argument (as the functional op has it).
  bool implicit_rng = false;
  std::vector<std::string> lowering_names;  // names of the arguments the lowering receives
  // add/sub/rsub: the index of `alpha`, left out of the program when it is 1 (UnitAlpha).
  int unit_alpha_arg = -1;
  bool arange = false;  // aten::arange.start_out: its out= size comes from ArangeLength, not Meta
  // A Scalar the lowering specialises on for some values (lowering::SpecialScalar, pow's
  // exponent): its index, and the lowering's test of a value.
  int special_scalar_arg = -1;
  lowering::SpecialScalarFn special_scalar = nullptr;
  // pow(Tensor, Scalar exponent) and its in-place and out= forms: the index of the exponent
  // (CheckIntegerPower).
  int integer_power_arg = -1;
  ArgRole role(size_t i) const { return args.roles[i]; }
  // What the last signature miss looked like, argument by argument: a new miss of the same
  // op is a recompilation, reported with the argument that changed.
  struct MissLog {
    std::mutex mu;
    std::vector<std::string> last;
    MissLog() = default;
    MissLog(const MissLog&) {}  // each derived variant keeps its own log
    MissLog& operator=(const MissLog&) { return *this; }
  } misses;
};

// What one call looks like, gathered once from the stack.
struct Call : Operands {
  std::vector<int64_t> key;
  // Scalars keyed by value and handed to the lowering as static Doubles (OpEntry's special
  // scalar); PyTorch's promotion still counts them.
  std::vector<c10::Scalar> special_scalars;
};

// The program of one signature, with what the boxed kernel needs to return its results.
struct OpProgram {
  std::shared_ptr<runtime::Program> program;
  std::vector<NewTensor> new_tensors;  // program outputs 0..n-1 (undefined ones have none)
  bool returns_list = false;
  bool fallback = false;  // the CPU runs this signature
  // A write into a storage the call also reads through another view: with run-time offsets
  // (outside the signature) overlap can differ from call to call, so it is checked on each.
  bool recheck_overlap = false;
};

// Builds the signature and collects tensors, scalars and generators of the call.
void CollectCall(const OpEntry& e, const torch::jit::Stack& stack, size_t first, Call& call);
// Builds the program for one signature (Meta inference, lowering); not compiled yet.
std::shared_ptr<OpProgram> BuildProgram(const OpEntry& e, torch::jit::Stack& stack, size_t first, const Call& call);
// Runs `op` over meta copies of the first `n` stack arguments; returns the meta stack after
// (the op's returns). `args` (optional) receives the meta arguments, e.g. resized out= tensors.
torch::jit::Stack RunMeta(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first, size_t n,
                          torch::jit::Stack* args = nullptr);

}  // namespace tpu::aten
