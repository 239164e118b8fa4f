#include "custom_kernel.h"

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace tpu::lowering {
namespace {

std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}

std::map<std::string, KernelModule>& Variants() {
  static std::map<std::string, KernelModule> variants;
  return variants;
}

std::string TypesText(const std::vector<TensorType>& types) {
  std::string s;
  for (size_t i = 0; i < types.size(); ++i) s += (i ? ", " : "") + types[i].str();
  return s;
}

std::string VariantKey(const std::string& op, const std::string& statics, const std::vector<TensorType>& inputs) {
  return op + '\0' + statics + '\0' + TypesText(inputs);
}

}  // namespace

void RegisterKernelOp(const std::string& op) {
  // The table keeps the name's storage: a kernel op lives as long as the process.
  static std::mutex mu;
  static std::vector<std::unique_ptr<std::string>> names;
  std::lock_guard<std::mutex> lock(mu);
  names.push_back(std::make_unique<std::string>(op));
  Register(names.back()->c_str(), LowerCustomKernel, __FILE__, __LINE__);
}

void AddKernelVariant(const std::string& op, const std::string& statics, KernelModule module) {
  std::string key = VariantKey(op, statics, module.inputs);
  std::lock_guard<std::mutex> lock(Mu());
  Variants()[key] = std::move(module);
}

size_t KernelVariantCount() {
  std::lock_guard<std::mutex> lock(Mu());
  return Variants().size();
}

ElemType ElemTypeFromMlir(const std::string& name) {
  for (int i = 0; i <= static_cast<int>(ElemType::C128); ++i) {
    auto t = static_cast<ElemType>(i);
    if (name == MlirName(t)) return t;
  }
  throw std::invalid_argument("element type " + name + " has no PyTorch dtype here");
}

std::vector<Value> LowerCustomKernel(Ctx& ctx, const Args& args) {
  std::vector<Value> operands;
  std::vector<TensorType> types;
  std::string statics;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args.raw(i);
    if (a.kind == Arg::Kind::Tensor) {
      operands.push_back(a.value);
      types.push_back(a.value.type);
    } else if (a.kind == Arg::Kind::TensorList) {  // a variadic kernel's Tensor[] args
      for (const Value& v : a.values) {
        operands.push_back(v);
        types.push_back(v.type);
      }
    } else if (a.kind == Arg::Kind::String) {
      statics = a.s;
    }
  }
  KernelModule module;
  {
    std::lock_guard<std::mutex> lock(Mu());
    auto it = Variants().find(VariantKey(ctx.op, statics, types));
    // torch_tpu/kernels registers a variant when the op's fake implementation (which runs
    // before any lowering, in eager and compiled execution alike) first sees its inputs.
    if (it == Variants().end())
      throw std::runtime_error("custom kernel " + ctx.op + " has no module for inputs (" + TypesText(types) +
                               ") and static arguments '" + statics +
                               "': call it through torch_tpu.kernels, which exports one");
    module = it->second;
  }
  if (module.results.size() != ctx.outputs.size())
    throw std::runtime_error("custom kernel " + ctx.op + " returns " + std::to_string(module.results.size()) +
                             " results (" + TypesText(module.results) + "), its fake implementation " +
                             std::to_string(ctx.outputs.size()) + " (" + TypesText(ctx.outputs) + ")");
  ctx.b.Import(module.entry, module.functions);
  return ctx.b.Op("func.call", operands, module.results, "callee = @" + module.entry);
}

}  // namespace tpu::lowering
