// One lowering-table call as csrc/aten makes it, for the C++ tests: parameters are added as
// arguments are made, then Lower runs the rule in a module on the plugin.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lowering/lowering.h"
#include "test_util.h"

namespace tpu::test {

class LoweringCall {
 public:
  using Arg = lowering::Arg;

  Arg Tensor(const HostTensor& h) {
    Arg a;
    a.kind = Arg::Kind::Tensor;
    a.value = b_.Param(h.type);
    inputs_.push_back(h);
    return a;
  }
  // A Tensor?[] list: `present[i]` false is a None entry.
  Arg Tensors(const std::vector<HostTensor>& hs, const std::vector<bool>& present) {
    Arg a;
    a.kind = Arg::Kind::TensorList;
    size_t next = 0;
    for (bool p : present) a.values.push_back(p ? Tensor(hs[next++]).value : shlo::Value{});
    return a;
  }
  static Arg Int(int64_t v) {
    Arg a;
    a.kind = Arg::Kind::Int;
    a.i = v;
    return a;
  }
  static Arg Bool(bool v) {
    Arg a;
    a.kind = Arg::Kind::Bool;
    a.b = v;
    return a;
  }
  static Arg Ints(std::vector<int64_t> v, Arg::Kind kind = Arg::Kind::IntList) {
    Arg a;
    a.kind = kind;
    a.ints = std::move(v);
    return a;
  }
  static Arg Str(std::string s) {
    Arg a;
    a.kind = Arg::Kind::String;
    a.s = std::move(s);
    return a;
  }
  static Arg None() { return Arg{}; }

  // The results; each must have the type the caller set.
  std::vector<HostTensor> Lower(const std::string& op, const std::vector<Arg>& args,
                                const std::vector<shlo::TensorType>& outputs,
                                shlo::ElemType common = shlo::ElemType::F32) {
    return Run(op, args, outputs, common, false);
  }
  // The same, naming the arguments as the op's schema does: for lowerings that read them by name.
  std::vector<HostTensor> LowerNamed(const std::string& op, const std::vector<Arg>& args,
                                     const std::vector<std::string>& names,
                                     const std::vector<shlo::TensorType>& outputs) {
    names_ = names;
    return Run(op, args, outputs, shlo::ElemType::F32, false);
  }
  // The results, then one i1 per device-side check (true: the check failed); `checks` counts them.
  std::vector<HostTensor> LowerWithChecks(const std::string& op, const std::vector<Arg>& args,
                                          const std::vector<shlo::TensorType>& outputs,
                                          shlo::ElemType common = shlo::ElemType::F32) {
    return Run(op, args, outputs, common, true);
  }
  size_t checks = 0;

 private:
  std::vector<HostTensor> Run(const std::string& op, const std::vector<Arg>& args,
                              const std::vector<shlo::TensorType>& outputs, shlo::ElemType common, bool with_checks) {
    lowering::LowerFn fn = lowering::Find(op);
    EXPECT_NE(fn, nullptr) << op << " is not in the lowering table";
    if (fn == nullptr) return {};
    lowering::Ctx ctx{b_, outputs, common};
    std::vector<shlo::Value> results = fn(ctx, lowering::Args(args, names_.empty() ? nullptr : &names_));
    EXPECT_EQ(results.size(), outputs.size()) << op;
    for (size_t i = 0; i < results.size() && i < outputs.size(); ++i) EXPECT_EQ(results[i].type, outputs[i]) << op;
    if (with_checks) {
      checks = ctx.checks.size();
      for (const auto& c : ctx.checks) results.push_back(c.failed);
    }
    return RunModule(b_, results, inputs_);
  }

  shlo::Builder b_;
  std::vector<HostTensor> inputs_;
  std::vector<std::string> names_;
};

}  // namespace tpu::test
