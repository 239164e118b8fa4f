// The one boxed kernel every lowered op runs through (DESIGN.md "One op, three ways"):
// signature -> cached program; on a miss, Meta inference gives output types, the op's
// lowering builds StableHLO (op_program.cpp). The call then becomes an executor request,
// run now or recorded into the fused graph by the runtime's Executor.
#include <ATen/Dispatch.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "dispatch.h"
#include "op_program.h"
#include "../storage/overlap.h"
#include "precision.h"
#include "../../lowering/custom_kernel.h"
#include "../../runtime/metrics.h"
#include "../../runtime/profiler_events.h"

namespace tpu::aten {

using runtime::Executor;
using runtime::GetMetrics;

namespace {

std::mutex g_cache_mu;
std::unordered_map<std::vector<int64_t>, std::shared_ptr<OpProgram>, KeyHash> g_programs;

bool CheckNans() {
  static bool on = [] {
    const char* env = std::getenv("TORCH_TPU_CHECK_NANS");
    return env && *env && std::strcmp(env, "0") != 0;
  }();
  return on;
}

// Replaces the arguments with the results, as the schema returns them.
void PushResults(const OpEntry& e, const OpProgram& p, torch::jit::Stack* stack, size_t first,
                 std::vector<at::Tensor> fresh) {
  if (e.variant == Variant::Functional) {
    torch::jit::drop(*stack, e.num_args);
    if (p.returns_list) {
      stack->emplace_back(c10::List<at::Tensor>(fresh));
    } else {
      for (auto& t : fresh) stack->emplace_back(std::move(t));
    }
  } else if (e.variant == Variant::Inplace) {
    c10::IValue self = (*stack)[first];
    torch::jit::drop(*stack, e.num_args);
    if (!e.op->schema().returns().empty()) stack->push_back(std::move(self));  // foreach_x_ returns ()
  } else {
    std::vector<c10::IValue> outs_iv((*stack).begin() + first + (e.num_args - e.num_outs),
                                     (*stack).begin() + first + e.num_args);
    torch::jit::drop(*stack, e.num_args);
    size_t returns = e.op->schema().returns().size();
    for (size_t i = 0; i < std::min(returns, outs_iv.size()); ++i) stack->push_back(outs_iv[i]);
  }
}

// Debug mode (the executor has awaited the op's results): with TORCH_TPU_CHECK_NANS=1 the
// first op producing NaN or Inf is named.
void CheckNaNs(const OpEntry& e, const std::vector<at::Tensor>& fresh, const Call& call) {
  if (!CheckNans()) return;
  auto check = [&](const at::Tensor& t) {
    if (!t.defined() || !at::isFloatingType(t.scalar_type()) || t.numel() == 0) return;
    at::Tensor host = t.cpu();
    TORCH_CHECK(at::isfinite(host).all().item<bool>(), "tpu: ", e.name, " produced NaN or Inf (output shape ",
                t.sizes(), ", ", t.scalar_type(), ")");
  };
  for (const auto& t : fresh) check(t);
  if (e.variant != Variant::Functional)
    for (const auto& t : call.slots) check(t);
}

// arange(start, end, step, out=): its length as the CPU kernel computes it, with the CPU's errors.
// Its Meta kernel is a Python reference (~100 us a call) and an out= factory re-derives its size
// on every call, twice for torch.arange(n) (the empty out, then the hit): that was 15% of a tiny
// Llama's fused forward (Transformers builds masks and positions with arange on every step).
// Dtypes without an arange on the CPU (bool, complex) raise its NotImplementedError.
int64_t ArangeLength(const torch::jit::Stack& stack, size_t first) {
  const at::Tensor& out = stack[first + 3].toTensor();
  c10::Scalar start = stack[first].toScalar(), end = stack[first + 1].toScalar(), step = stack[first + 2].toScalar();
  int64_t n = 0;
  switch (out.scalar_type()) {
#define ARANGE_LENGTH_CASE(cpp_type, name)                                     \
  case at::ScalarType::name:                                                   \
    n = at::native::compute_arange_size<cpp_type>(start, end, step);           \
    break;
    AT_FORALL_SCALAR_TYPES_AND2(Half, BFloat16, ARANGE_LENGTH_CASE)
#undef ARANGE_LENGTH_CASE
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "\"arange\" not implemented for '", c10::toString(out.scalar_type()), "'");
  }
  return n;
}

// Resizes out= tensors as PyTorch's resize_output does (with its warning). True if any changed.
bool ResizeOuts(const OpEntry& e, torch::jit::Stack* stack, size_t first) {
  if (e.arange) {
    int64_t n = ArangeLength(*stack, first);
    at::Tensor out = (*stack)[first + 3].toTensor();
    if (out.dim() == 1 && out.size(0) == n) return false;
    at::native::resize_output(out, {n});
    return true;
  }
  torch::jit::Stack meta;
  RunMeta(*e.op, *stack, first, e.num_args, &meta);
  bool changed = false;
  for (size_t i = e.num_args - e.num_outs; i < e.num_args; ++i) {
    if (!(*stack)[first + i].isTensor()) continue;
    at::Tensor out = (*stack)[first + i].toTensor();
    const at::Tensor& m = meta[i].toTensor();
    if (out.sizes() != m.sizes()) {
      at::native::resize_output(out, m.sizes());
      changed = true;
    }
  }
  return changed;
}

std::string Describe(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return "None";
    std::ostringstream s;
    s << c10::toString(t.scalar_type()) << t.sizes() << " strides " << t.strides() << " offset " << t.storage_offset()
      << (t.device().type() == kTpu ? "" : " on " + t.device().str());
    // The storage's buffer is keyed too (operands.cpp): its element type and shape, or unwritten.
    if (runtime::TpuStorage* st = t.device().type() == kTpu ? StorageOf(t) : nullptr) {
      if (st->buffer || st->pending) s << " in buffer " << shlo::MlirName(st->elem) << c10::IntArrayRef(st->BufferDims());
      else s << " in an unwritten buffer";
    }
    return s.str();
  }
  if (v.isScalar()) return std::string("Scalar ") + v.tagKind();
  if (v.isTensorList() || v.isOptionalTensorList()) {  // never print tensor values: that reads the device
    std::string s = "[";
    for (const c10::IValue& item : v.toListRef()) s += (item.isNone() ? std::string("None") : Describe(item)) + "; ";
    return s + "]";
  }
  std::ostringstream s;
  s << v;
  return s.str();
}

// Counts a signature miss of an op seen before as a recompilation, with its reason.
void NoteRecompile(OpEntry& e, const torch::jit::Stack& stack, size_t first, shlo::Precision precision) {
  std::vector<std::string> now;
  for (size_t i = 0; i < e.num_args; ++i) {
    const c10::IValue& v = stack[first + i];
    // A special Scalar (pow's exponent 2) is keyed by its value: say which.
    std::optional<double> special = static_cast<int>(i) == e.special_scalar_arg && v.isScalar()
                                        ? SpecialScalarValue(e.special_scalar, v.toScalar()) : std::nullopt;
    now.push_back(Describe(v) + (special ? " " + c10::str(*special) : ""));
  }
  now.push_back(MatmulPrecisionSetting(precision));  // keyed too (precision.h)
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(e.misses.mu);
    if (!e.misses.last.empty()) {
      const auto& args = e.op->schema().arguments();
      for (size_t i = 0; i < now.size() && i < e.misses.last.size(); ++i) {
        if (now[i] != e.misses.last[i]) {
          std::string what = i < e.num_args ? "argument '" + args[i].name() + "'" : "float32 matmul precision";
          reason = e.name + ": " + what + " changed from " + e.misses.last[i] + " to " + now[i];
          break;
        }
      }
      if (reason.empty()) reason = e.name + ": storage layout or value type changed";
    }
    e.misses.last = std::move(now);
  }
  if (!reason.empty()) GetMetrics().CountRecompile(reason);
}

// Index lists (Tensor?[], index_put's and index's indices) may live on the CPU, as on CUDA:
// they are copied to the device of the op's tpu tensors.
void MoveCpuIndicesToDevice(const OpEntry& e, torch::jit::Stack& stack, size_t first) {
  std::optional<c10::Device> device;
  for (size_t i = 0; i < e.num_args && !device; ++i) {
    const c10::IValue& v = stack[first + i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kTpu) device = v.toTensor().device();
  }
  if (!device) return;
  for (size_t i = 0; i < e.num_args; ++i) {
    c10::IValue& v = stack[first + i];
    if (!v.isOptionalTensorList()) continue;
    bool any_cpu = false;
    for (const c10::IValue& item : v.toListRef())
      any_cpu |= item.isTensor() && item.toTensor().defined() && item.toTensor().device().is_cpu();
    if (!any_cpu) continue;
    c10::List<std::optional<at::Tensor>> moved;
    for (const c10::IValue& item : v.toListRef()) {
      if (item.isNone() || !item.toTensor().defined()) moved.push_back(std::nullopt);
      else moved.push_back(item.toTensor().to(*device));
    }
    v = moved;
  }
}

// Ops dispatched, in all and in the eager mode they ran in.
void CountDispatch(int delta) {
  runtime::Metrics& m = GetMetrics();
  m.ops_dispatched += delta;
  m.ops_by_mode[static_cast<int>(Executor::Get().mode())] += delta;
}

class GenericKernel final : public c10::OperatorKernel {
 public:
  explicit GenericKernel(std::shared_ptr<OpEntry> entry) : e_(std::move(entry)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    CountDispatch(1);
    size_t first = stack->size() - e_->num_args;
    MoveCpuIndicesToDevice(*e_, *stack, first);
    Call call;
    CollectCall(*e_, *stack, first, call);
    std::shared_ptr<OpProgram> program;
    {
      std::lock_guard<std::mutex> lock(g_cache_mu);
      auto it = g_programs.find(call.key);
      if (it != g_programs.end()) program = it->second;
    }
    if (program) {
      GetMetrics().signature_hits++;
      if (program->recheck_overlap)
        CheckWriteOverlap(op, *stack, first, e_->num_args, e_->num_outs, e_->variant == Variant::Inplace);
      // A factory's out= size can depend on Scalar values, which the signature leaves out
      // (arange(0, n, out=...)): for out= ops whose only tensors are the outs, out sizes are
      // re-derived on hits too.
      bool factory = call.slots.size() <= e_->num_outs;
      if (e_->variant == Variant::Out && e_->num_outs > 0 && factory && !call.scalars.empty() &&
          ResizeOuts(*e_, stack, first)) {
        CountDispatch(-1);  // counted again by the call below
        return (*this)(op, {}, stack);
      }
    } else {
      // out= tensors of the wrong shape (torch.arange(a, b) hands an empty one) are resized
      // first, then the call is looked up again: not a miss of its own.
      if (e_->variant == Variant::Out && e_->num_outs > 0 && ResizeOuts(*e_, stack, first)) {
        CountDispatch(-1);
        return (*this)(op, {}, stack);
      }
      GetMetrics().signature_misses++;
      NoteRecompile(*e_, *stack, first, call.precision);
      // A write overlapping its own inputs is refused before a program that would compute
      // something else exists: once per signature, or on every call where a run-time view
      // offset can change the overlap (recheck_overlap, overlap.cpp).
      if (e_->variant != Variant::Functional)
        CheckWriteOverlap(op, *stack, first, e_->num_args, e_->num_outs, e_->variant == Variant::Inplace);
      try {
        program = BuildProgram(*e_, *stack, first, call);
      } catch (const lowering::Unsupported&) {
        program = std::make_shared<OpProgram>();
        program->fallback = true;
      } catch (const c10::Error&) {
        throw;
      } catch (const std::exception& ex) {
        RethrowAsTorchError(ex, e_->name);
      }
      program->recheck_overlap = e_->variant != Variant::Functional &&
          WritesIntoAnAliasedStorage(*stack, first, e_->num_args, e_->num_outs, e_->variant == Variant::Inplace);
      std::lock_guard<std::mutex> lock(g_cache_mu);
      g_programs[call.key] = program;
    }
    if (program->fallback) {
      CpuFallback(op, stack);
      return;
    }
    try {
      Run(*program, stack, first, call);
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& ex) {
      RethrowAsTorchError(ex, e_->name);
    }
  }

 private:
  // Hands the call to the executor, which runs it now or records it into the fused graph.
  void Run(const OpProgram& p, torch::jit::Stack* stack, size_t first, const Call& call) {
    int device = call.device < 0 ? CurrentDevice() : call.device;
    std::vector<at::Tensor> fresh = NewTensors(p.new_tensors, device);
    Executor& executor = Executor::Get();
    executor.Submit(MakeRequest(p.program, call, device, fresh));
    if (executor.mode() == EagerMode::kDebug) CheckNaNs(*e_, fresh, call);
    PushResults(*e_, p, stack, first, std::move(fresh));
  }

  std::shared_ptr<OpEntry> e_;
};

size_t CountOuts(const c10::FunctionSchema& schema) {
  size_t n = 0;
  for (const auto& a : schema.arguments())
    if (a.is_out()) n++;
  return n;
}

// out= arguments that are lists (Tensor(a!)[] out of the foreach ops).
bool HasListOut(const c10::FunctionSchema& schema) {
  for (const auto& a : schema.arguments())
    if (a.is_out() && a.type()->kind() == c10::TypeKind::ListType) return true;
  return false;
}

bool SameInputs(const c10::FunctionSchema& functional, const c10::FunctionSchema& other, size_t n) {
  const auto& fa = functional.arguments();
  const auto& oa = other.arguments();
  if (fa.size() != n || oa.size() < n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (fa[i].name() != oa[i].name() || fa[i].type()->str() != oa[i].type()->str()) return false;
  }
  return true;
}

std::vector<std::string>& NativeOpNames() {
  static std::vector<std::string> names;
  return names;
}

}  // namespace

void SetEagerMode(EagerMode mode) { Executor::Get().SetMode(mode); }

EagerMode GetEagerMode() { return Executor::Get().mode(); }

namespace {
// Profiled outside any op (the end of backward): a sync becomes a host op of its own, "tpu::sync",
// which the programs it runs link to (csrc/aten/profiler.cpp).
void HostOpWhenProfiled(std::optional<at::RecordFunction>& op) {
  if (!runtime::profiler::Recording() || runtime::profiler::CurrentCorrelation() != 0) return;
  op.emplace(at::RecordScope::FUNCTION);
  if (op->isActive()) op->before("tpu::sync");
}
}  // namespace

void RunPendingGraph(const char* cause) {
  std::optional<at::RecordFunction> op;
  HostOpWhenProfiled(op);
  Executor::Get().Flush(cause);
}

void SyncPoint(const char* cause, int device) {
  std::optional<at::RecordFunction> op;
  HostOpWhenProfiled(op);
  try {
    Executor::Get().Sync(cause, device);
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    RethrowAsTorchError(e, cause);
  }
}

std::vector<std::string> NativeOps() { return NativeOpNames(); }

void RegisterKernelOp(const std::string& name) {
  static auto* lib =
      new torch::Library(torch::Library::IMPL, "torch_tpu", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto handle = c10::Dispatcher::singleton().findOp(c10::OperatorName(name, ""));
  TORCH_CHECK(handle, "tpu: custom kernel ", name, " is not defined");
  lowering::RegisterKernelOp(name);
  auto entry = std::make_shared<OpEntry>();
  entry->name = name;
  entry->fn = lowering::Find(name);
  entry->op = *handle;
  entry->functional = *handle;
  entry->num_args = handle->schema().arguments().size();
  entry->args = ClassifyArguments(*handle);
  entry->lowering_names = entry->args.names;
  lib->impl(name.substr(name.find("::") + 2).c_str(),
            torch::CppFunction::makeFromBoxedFunctor(std::make_unique<GenericKernel>(entry)));
  NativeOpNames().push_back(name);
}

void RegisterLoweredOps() {
  static bool done = false;
  if (done) return;
  done = true;
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  static auto* tpu_lib =
      new torch::Library(torch::Library::IMPL, "torch_tpu", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  std::unordered_map<std::string, std::vector<c10::OperatorName>> overloads;
  for (const c10::OperatorName& n : dispatcher.getAllOpNames()) overloads[n.name].push_back(n);

  auto add = [&](std::shared_ptr<OpEntry> entry) {
    // The lowering receives the inputs (not the out= tensors), then an implicit RNG state.
    entry->lowering_names.assign(entry->args.names.begin(), entry->args.names.begin() + (entry->num_args - entry->num_outs));
    if (entry->implicit_rng) entry->lowering_names.push_back("generator");
    const auto& on = entry->op->operator_name();
    std::string qualified = on.overload_name.empty() ? on.name : on.name + "." + on.overload_name;
    std::string unqualified = qualified.substr(qualified.find("::") + 2);
    torch::Library* target = on.name.rfind("aten::", 0) == 0 ? lib : tpu_lib;
    target->impl(unqualified.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<GenericKernel>(entry)));
    NativeOpNames().push_back(qualified);
  };

  for (const std::string& name : lowering::RegisteredOps()) {
    auto dot = name.find('.');
    c10::OperatorName on(name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1));
    auto handle = dispatcher.findOp(on);
    if (!handle) continue;  // an op this PyTorch version does not have
    const auto& schema = handle->schema();
    auto entry = std::make_shared<OpEntry>();
    entry->name = name;
    entry->fn = lowering::Find(name);
    entry->op = *handle;
    entry->num_args = schema.arguments().size();
    entry->args = ClassifyArguments(*handle);
    entry->num_outs = entry->args.num_outs;
    entry->implicit_rng = entry->args.implicit_rng;
    if (on.name == "aten::add" || on.name == "aten::sub" || on.name == "aten::rsub") {
      const auto& names = entry->args.names;
      auto alpha = std::find(names.begin(), names.end(), "alpha");
      if (alpha != names.end()) entry->unit_alpha_arg = static_cast<int>(alpha - names.begin());
    }
    entry->arange = name == "aten::arange.start_out";
    if (const lowering::SpecialScalar* special = lowering::FindSpecialScalar(name)) {
      const auto& names = entry->args.names;
      auto arg = std::find(names.begin(), names.end(), special->arg);
      TORCH_CHECK(arg != names.end() && entry->role(arg - names.begin()) == ArgRole::kScalar, "tpu: ", name,
                  " has no Scalar argument '", special->arg, "' to specialise on");
      entry->special_scalar_arg = static_cast<int>(arg - names.begin());
      entry->special_scalar = special->special;
    }
    if (name == "aten::pow.Tensor_Scalar" || name == "aten::pow_.Scalar") entry->integer_power_arg = 1;
    if (entry->num_outs > 0) {
      entry->variant = Variant::Out;  // lowered directly as an out= op: results typed like the outs
      add(entry);
      continue;
    }
    const auto& first_arg = schema.arguments().empty() ? nullptr : &schema.arguments()[0];
    if (first_arg && first_arg->alias_info() && first_arg->alias_info()->isWrite()) {
      entry->variant = Variant::Inplace;  // lowered directly as an in-place op (random fills)
      add(entry);
      continue;
    }
    entry->functional = *handle;
    add(entry);
    // In-place twin: same overload of "name_".
    auto inplace = dispatcher.findOp(c10::OperatorName(on.name + "_", on.overload_name));
    if (inplace && inplace->schema().arguments().size() == entry->num_args && !lowering::Find(
            on.name + "_" + (on.overload_name.empty() ? "" : "." + on.overload_name))) {
      auto ie = std::make_shared<OpEntry>(*entry);
      ie->name = on.name + "_." + on.overload_name;
      ie->variant = Variant::Inplace;
      ie->op = *inplace;
      ie->args = ClassifyArguments(*inplace);
      add(ie);
    }
    // out= twins: overloads of the same name whose inputs match and that end in out args.
    for (const c10::OperatorName& other : overloads[on.name]) {
      if (other.overload_name == on.overload_name) continue;
      auto oh = dispatcher.findOp(other);
      if (!oh) continue;
      size_t outs = CountOuts(oh->schema());
      if (outs == 0 || oh->schema().arguments().size() != entry->num_args + outs) continue;
      if (HasListOut(oh->schema())) continue;  // foreach out= ops keep PyTorch's composite kernels
      if (!SameInputs(schema, oh->schema(), entry->num_args)) continue;
      std::string other_name = other.name + "." + other.overload_name;
      if (lowering::Find(other_name)) continue;
      // The generic kernel validates and resizes out= tensors through the variant's Meta kernel;
      // without one (_native_batch_norm_legit.out) the variant keeps the CPU fallback.
      if (!oh->hasKernelForDispatchKey(c10::DispatchKey::Meta) &&
          !oh->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
          !oh->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))
        continue;
      auto oe = std::make_shared<OpEntry>(*entry);
      oe->name = other_name;
      oe->variant = Variant::Out;
      oe->op = *oh;
      oe->num_args = oh->schema().arguments().size();
      oe->num_outs = outs;
      oe->args = ClassifyArguments(*oh);
      add(oe);
    }
  }
}

}  // namespace tpu::aten
