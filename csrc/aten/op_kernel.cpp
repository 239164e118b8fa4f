// The one boxed kernel every lowered op runs through (DESIGN.md "One op, three ways"):
// signature -> cached program; on a miss, Meta inference gives output types, the op's
// lowering builds StableHLO, the runtime compiles it. Scalars are run-time parameters.
#include "op_kernel.h"

#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "common.h"
#include "../runtime/metrics.h"

namespace tpu::aten {

using lowering::Arg;
using runtime::GetMetrics;
using runtime::Runtime;
using runtime::TpuStorage;

namespace {

enum class Variant { Functional, Inplace, Out };

struct OpEntry {
  std::string name;
  lowering::LowerFn fn = nullptr;
  Variant variant = Variant::Functional;
  std::optional<c10::OperatorHandle> op;
  std::optional<c10::OperatorHandle> functional;  // Meta of this op gives the result types
  size_t num_args = 0;
  size_t num_outs = 0;  // trailing out= arguments
  std::vector<int> arg_class;  // ArgClass of each schema argument
  // A seeded op without a Generator argument (native_dropout): the default generator's state
  // is passed to its lowering as one extra trailing argument.
  bool implicit_rng = false;
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

enum ArgClass { kPlainArg = 0, kScalarArg, kScalarListArg, kGeneratorArg };

ArgClass ClassOf(const c10::Argument& a) {
  c10::TypePtr t = a.type();
  if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
  if (t->kind() == c10::TypeKind::NumberType) return kScalarArg;
  if (t->kind() == c10::TypeKind::GeneratorType) return kGeneratorArg;
  if (t->kind() == c10::TypeKind::ListType &&
      t->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::NumberType)
    return kScalarListArg;
  return kPlainArg;
}

enum Tag : int64_t {
  kNone = 1, kTpuTensor, kCpuScalar, kScalar, kInt, kDouble, kBool, kIntList, kDoubleList, kBoolList,
  kString, kTensorList, kGenerator, kOther, kListEnd
};

struct ParamSource {
  enum Kind { Storage, Scalar, Rng } kind;
  int slot = -1;          // tensor slot (Storage) or scalar slot (Scalar)
  shlo::ElemType elem{};  // element type of the parameter
  int64_t rng_increment = 0;
};

struct WriteTarget {
  int slot;               // tensor slot whose storage receives the output
  shlo::ElemType elem;    // element type of the new storage buffer
};

struct NewTensor {
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype;
  bool defined = true;  // false for outputs masked off (e.g. output_mask of backward ops)
};

struct Program {
  int id = 0;                           // names its function in fused modules: @f<id>
  std::mutex compile_mu;
  pjrt::ExecutablePtr exe;              // compiled on first strict execution
  std::string module_text;              // the op alone, as @main
  std::string function_text;            // the op as a private @f<id>, for fused modules
  std::vector<shlo::TensorType> param_types, result_types;
  std::vector<std::string> check_messages;  // trailing i1 outputs: device-side asserts
  std::string op_name;
  bool fallback = false;
  std::vector<ParamSource> params;
  std::vector<NewTensor> new_tensors;   // program outputs 0..n-1
  std::vector<WriteTarget> writes;      // program outputs n..
  bool returns_list = false;
};

std::mutex g_cache_mu;
std::unordered_map<std::vector<int64_t>, std::shared_ptr<Program>, KeyHash> g_programs;

bool StrictFallback() {
  static bool strict = [] {
    const char* env = std::getenv("TORCH_TPU_STRICT");
    return env && std::strcmp(env, "0") != 0 && *env;
  }();
  return strict;
}

// What one call looks like, gathered once from the stack.
struct Call {
  std::vector<at::Tensor> slots;  // tpu tensors and CPU scalar tensors, in argument order
  std::vector<bool> slot_is_cpu_scalar;
  std::vector<c10::Scalar> scalars;
  std::vector<std::optional<at::Generator>> generators;
  std::vector<int64_t> key;
  int device = -1;
};

std::vector<int64_t> IntsOf(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  std::vector<int64_t> out;
  for (const c10::SymInt& s : v.toSymIntVector()) out.push_back(s.guard_int(__FILE__, __LINE__));
  return out;
}

void AddTensorToKey(Call& call, const at::Tensor& t, std::vector<TpuStorage*>& seen) {
  auto& k = call.key;
  if (t.device().type() != kTpu) {
    TORCH_CHECK(t.dim() == 0 && t.device().is_cpu(),
                "Expected all tensors to be on the same device, but found at least two devices, tpu:",
                call.device < 0 ? 0 : call.device, " and ", t.device(), "!");
    k.push_back(kCpuScalar);
    k.push_back(static_cast<int64_t>(t.scalar_type()));
    call.slots.push_back(t);
    call.slot_is_cpu_scalar.push_back(true);
    return;
  }
  int dev = t.device().index();
  if (call.device < 0) call.device = dev;
  TORCH_CHECK(call.device == dev, "Expected all tensors to be on the same device, but found at least two devices, tpu:",
              call.device, " and tpu:", dev, "!");
  TpuStorage* s = StorageOf(t);
  k.push_back(kTpuTensor);
  k.push_back(static_cast<int64_t>(t.scalar_type()));
  k.push_back(t.dim());
  for (int64_t d : t.sizes()) k.push_back(d);
  for (int64_t d : t.strides()) k.push_back(d);
  k.push_back(StorageOffsetOf(t));
  k.push_back(static_cast<int64_t>(s->nbytes));
  k.push_back((s->buffer || s->pending) ? static_cast<int64_t>(s->elem) : -1);
  int64_t alias = -1;
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] == s) alias = static_cast<int64_t>(i);
  k.push_back(alias);
  seen.push_back(s);
  call.slots.push_back(t);
  call.slot_is_cpu_scalar.push_back(false);
}

void AddScalarToKey(Call& call, const c10::Scalar& s) {
  call.key.push_back(kScalar);
  call.key.push_back(s.isFloatingPoint() ? 1 : s.isIntegral(false) ? 2 : s.isBoolean() ? 3 : 4);
  call.scalars.push_back(s);
}

// Builds the signature and collects tensors, scalars and generators of the call.
void CollectCall(const OpEntry& e, const torch::jit::Stack& stack, size_t first, Call& call) {
  std::vector<TpuStorage*> seen;
  call.key.reserve(64);
  call.key.push_back(reinterpret_cast<int64_t>(&e));
  for (size_t i = 0; i < e.num_args; ++i) {
    const c10::IValue& v = stack[first + i];
    auto& k = call.key;
    if (v.isNone() && e.arg_class[i] != kGeneratorArg) {
      k.push_back(kNone);
    } else if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) k.push_back(kNone);
      else AddTensorToKey(call, t, seen);
    } else if (e.arg_class[i] == kGeneratorArg) {
      k.push_back(kGenerator);
      call.generators.push_back(v.isNone() ? std::nullopt : std::optional<at::Generator>(v.toGenerator()));
      continue;
    } else if (e.arg_class[i] == kScalarArg) {
      AddScalarToKey(call, v.toScalar());
    } else if (v.isInt() || v.isSymInt()) {
      k.push_back(kInt);
      k.push_back(v.isInt() ? v.toInt() : v.toSymInt().guard_int(__FILE__, __LINE__));
    } else if (v.isDouble()) {
      k.push_back(kDouble);
      double d = v.toDouble();
      int64_t bits;
      std::memcpy(&bits, &d, 8);
      k.push_back(bits);
    } else if (v.isBool()) {
      k.push_back(kBool);
      k.push_back(v.toBool());
    } else if (v.isIntList() || v.isSymIntList()) {
      k.push_back(kIntList);
      auto list = IntsOf(v);
      k.push_back(static_cast<int64_t>(list.size()));
      for (int64_t x : list) k.push_back(x);
    } else if (v.isDoubleList()) {
      k.push_back(kDoubleList);
      for (double d : v.toDoubleVector()) {
        int64_t bits;
        std::memcpy(&bits, &d, 8);
        k.push_back(bits);
      }
      k.push_back(kListEnd);
    } else if (v.isBoolList()) {
      k.push_back(kBoolList);
      for (bool b : v.toBoolList()) k.push_back(b);
      k.push_back(kListEnd);
    } else if (v.isString()) {
      k.push_back(kString);
      for (char c : v.toStringRef()) k.push_back(c);
      k.push_back(kListEnd);
    } else if (v.isTensorList() || v.isOptionalTensorList()) {
      k.push_back(kTensorList);
      for (const c10::IValue& item : v.toListRef()) {
        if (item.isNone() || !item.toTensor().defined()) k.push_back(kNone);
        else AddTensorToKey(call, item.toTensor(), seen);
      }
      k.push_back(kListEnd);
    } else if (e.arg_class[i] == kScalarListArg) {
      // Scalar[] (foreach ops): run-time scalars.
      k.push_back(kOther);
      for (const c10::IValue& item : v.toListRef()) AddScalarToKey(call, item.toScalar());
      k.push_back(kListEnd);
    } else {
      k.push_back(kOther);
    }
  }
  if (e.implicit_rng) {
    call.key.push_back(kGenerator);
    call.generators.push_back(std::nullopt);
  }
}

at::Tensor ToMeta(const at::Tensor& t) {
  // Tensor?[] lists (index_put's indices) can hold undefined tensors for `:` slices.
  if (!t.defined()) return t;
  if (t.device().type() != kTpu) {
    // A CPU 0-d tensor operand (not a wrapped Python number, which meta functions read as a
    // number) becomes a meta 0-d tensor: Python meta functions such as masked_fill's reject a
    // CPU tensor next to meta ones. A 0-d tensor promotes alike on either device.
    if (t.dim() != 0 || !t.device().is_cpu() || t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
    return at::empty({}, t.options().device(at::kMeta));
  }
  int64_t storage_numel = static_cast<int64_t>(StorageOf(t)->nbytes / t.element_size());
  auto base = at::empty({storage_numel}, t.options().device(at::kMeta));
  return base.as_strided(t.sizes(), t.strides(), t.storage_offset());
}

c10::IValue ToMetaValue(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().defined() ? c10::IValue(ToMeta(v.toTensor())) : v;
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(ToMeta(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& item : v.toListRef()) {
      if (item.isNone()) out.push_back(std::nullopt);
      else out.push_back(ToMeta(item.toTensor()));
    }
    return out;
  }
  if (v.isDevice()) return c10::Device(at::kMeta);
  if (v.isGenerator()) return c10::IValue();
  return v;
}

// CPU zeros with the geometry of a tpu value, to replay a call whose Meta inference failed.
c10::IValue ToCpuValue(const c10::IValue& v) {
  auto cpu = [](const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kTpu) return t;
    auto base = at::zeros({static_cast<int64_t>(StorageOf(t)->nbytes / t.element_size())},
                          t.options().device(at::kCPU));
    return base.as_strided(t.sizes(), t.strides(), t.storage_offset());
  };
  if (v.isTensor()) return cpu(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(cpu(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& item : v.toListRef())
      out.push_back(item.isNone() ? std::nullopt : std::optional<at::Tensor>(cpu(item.toTensor())));
    return out;
  }
  if (v.isDevice()) return c10::Device(at::kCPU);
  if (v.isGenerator()) return c10::IValue();
  return v;
}

// Runs `op` over meta copies of the first `n` stack arguments; returns the meta stack after
// (the op's returns). `args` (optional) receives the meta arguments, e.g. resized out= tensors.
torch::jit::Stack RunMeta(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first, size_t n,
                          torch::jit::Stack* args = nullptr) {
  torch::jit::Stack meta;
  meta.reserve(n);
  for (size_t i = 0; i < n; ++i) meta.push_back(ToMetaValue(stack[first + i]));
  if (args) *args = meta;  // shares the meta tensors, which the call resizes in place
  try {
    op.callBoxed(meta);
  } catch (const std::exception&) {
    // Meta kernels word some errors unlike the CPU's (several are Python decompositions):
    // replay on CPU zeros of the same geometry so the user gets the CPU's exception.
    torch::jit::Stack cpu;
    for (size_t i = 0; i < n; ++i) cpu.push_back(ToCpuValue(stack[first + i]));
    op.callBoxed(cpu);
    throw;  // the CPU accepts the call: the Meta error stands
  }
  return meta;
}

std::vector<at::Tensor> TensorsOf(const torch::jit::Stack& results) {
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : results) {
    if (v.isTensor()) out.push_back(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList()) out.push_back(t);
  }
  return out;
}

bool IsDense(at::IntArrayRef sizes, at::IntArrayRef strides) {
  std::vector<int64_t> perm(sizes.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  int64_t expected = 1;
  for (auto it = perm.rbegin(); it != perm.rend(); ++it) {
    if (sizes[*it] != 1 && strides[*it] != expected) return false;
    expected *= sizes[*it];
  }
  return true;
}

shlo::TensorType TypeOf(const at::Tensor& t) { return {ToElemType(t.scalar_type()), t.sizes().vec()}; }

// Builds and compiles the program for one signature.
std::shared_ptr<Program> BuildProgram(const OpEntry& e, torch::jit::Stack& stack, size_t first, const Call& call) {
  auto program = std::make_shared<Program>();
  // Meta inference: validation of the exact variant, result types from the functional op.
  torch::jit::Stack variant_meta, variant_args;
  if (e.variant != Variant::Functional) variant_meta = RunMeta(*e.op, stack, first, e.num_args, &variant_args);
  std::vector<at::Tensor> result_meta;
  size_t num_inputs = e.num_args - e.num_outs;
  if (e.functional) {
    auto fm = RunMeta(*e.functional, stack, first, num_inputs);
    program->returns_list = !fm.empty() && fm[0].isTensorList();
    result_meta = TensorsOf(fm);
  } else if (e.variant == Variant::Inplace) {
    // The op's result, or (ops returning nothing, like _amp_foreach_non_finite_check_and_unscale_)
    // the types of the self tensors it writes.
    if (!variant_meta.empty() && variant_meta[0].isTensor()) result_meta.push_back(variant_meta[0].toTensor());
    else result_meta = TensorsOf({variant_args[0]});
  } else {
    for (size_t i = num_inputs; i < e.num_args; ++i) result_meta.push_back(variant_args[i].toTensor());
  }

  // PyTorch's promotion over the inputs (not the out= tensors).
  at::native::ResultTypeState state;
  for (size_t i = 0; i < num_inputs; ++i) {
    const c10::IValue& v = stack[first + i];
    if (v.isTensor() && v.toTensor().defined()) state = at::native::update_result_type_state(v.toTensor(), state);
  }
  for (const c10::Scalar& s : call.scalars) state = at::native::update_result_type_state(s, state);
  at::ScalarType common = at::native::result_type(state);
  shlo::ElemType common_elem = common == at::ScalarType::Undefined ? shlo::ElemType::F32
                               : IsSupportedDtype(common)          ? ToElemType(common)
                                                                   : shlo::ElemType::F32;

  shlo::Builder b;
  lowering::Ctx ctx{b, {}, common_elem};
  for (const at::Tensor& m : result_meta) {
    if (!m.defined()) {
      ctx.outputs.push_back({shlo::ElemType::F32, {}});
      continue;
    }
    if (!IsSupportedDtype(m.scalar_type())) {
      program->fallback = true;
      return program;
    }
    ctx.outputs.push_back(TypeOf(m));
  }

  // Parameters: one per distinct storage read, then run-time scalars and RNG states.
  std::unordered_map<TpuStorage*, shlo::Value> storage_values;
  std::vector<shlo::Value> slot_values(call.slots.size());
  size_t out_slot_begin = call.slots.size();
  if (e.variant == Variant::Out) {
    size_t count = 0;
    for (size_t i = num_inputs; i < e.num_args; ++i) count += stack[first + i].isTensor() ? 1 : 0;
    out_slot_begin = call.slots.size() - count;
  }
  auto storage_value = [&](size_t slot) -> shlo::Value {
    const at::Tensor& t = call.slots[slot];
    TpuStorage* s = StorageOf(t);
    auto it = storage_values.find(s);
    if (it != storage_values.end()) return it->second;
    shlo::ElemType elem = (s->buffer || s->pending) ? s->elem : ToElemType(t.scalar_type());
    program->params.push_back({ParamSource::Storage, static_cast<int>(slot), elem});
    shlo::Value v = b.Param({elem, {static_cast<int64_t>(s->nbytes / shlo::ByteSize(elem))}});
    storage_values[s] = v;
    return v;
  };
  size_t scalar_index = 0;
  for (size_t slot = 0; slot < out_slot_begin; ++slot) {
    const at::Tensor& t = call.slots[slot];
    if (call.slot_is_cpu_scalar[slot]) {
      at::ScalarType st = common != at::ScalarType::Undefined ? common : t.scalar_type();
      // A Python number enters half-precision ops at opmath (f32) precision, as PyTorch's CPU
      // kernels read it (lerp(x, y, 0.4) uses 0.4f, not bf16(0.4)).
      if ((st == at::kBFloat16 || st == at::kHalf) && t.unsafeGetTensorImpl()->is_wrapped_number()) st = at::kFloat;
      program->params.push_back({ParamSource::Scalar, static_cast<int>(slot), ToElemType(st)});
      slot_values[slot] = b.Param({ToElemType(st), {}});
      continue;
    }
    shlo::Value storage = storage_value(slot);
    shlo::ElemType want = ToElemType(t.scalar_type());
    storage = lowering::Reinterpret(b, storage, want);  // a view(dtype), an untyped storage
    slot_values[slot] = lowering::ReadView(b, storage, GeometryOf(t));
  }
  std::vector<shlo::Value> scalar_values;
  for (const c10::Scalar& s : call.scalars) {
    if (s.isComplex()) throw lowering::Unsupported("complex scalar");
    at::ScalarType st = common != at::ScalarType::Undefined ? common : s.type();
    if (st == at::kBFloat16 || st == at::kHalf) st = at::kFloat;  // opmath, as above
    if (!IsSupportedDtype(st)) throw lowering::Unsupported("scalar dtype");
    program->params.push_back({ParamSource::Scalar, -1 - static_cast<int>(scalar_index++), ToElemType(st)});
    scalar_values.push_back(b.Param({ToElemType(st), {}}));
  }
  int64_t total_out = 0;
  for (const auto& t : ctx.outputs) total_out += t.numel();
  std::vector<shlo::Value> rng_values;
  for (size_t g = 0; g < call.generators.size(); ++g) {
    program->params.push_back({ParamSource::Rng, static_cast<int>(g), shlo::ElemType::U64, total_out});
    rng_values.push_back(b.Param({shlo::ElemType::U64, {2}}));
  }

  // Lowering arguments in schema order (out= arguments excluded).
  std::vector<Arg> args(num_inputs);
  std::vector<int> arg_slot(num_inputs, -1);  // the tensor slot of each plain tensor argument
  size_t slot = 0, scalar_i = 0, gen_i = 0;
  for (size_t i = 0; i < num_inputs; ++i) {
    const c10::IValue& v = stack[first + i];
    Arg& a = args[i];
    if (e.arg_class[i] == kGeneratorArg) {
      a.kind = Arg::Kind::Tensor;
      a.value = rng_values[gen_i++];
    } else if (v.isNone()) {
      a.kind = Arg::Kind::None;
    } else if (v.isTensor()) {
      if (v.toTensor().defined()) {
        a.kind = Arg::Kind::Tensor;
        arg_slot[i] = static_cast<int>(slot);
        a.value = slot_values[slot++];
      }
    } else if (e.arg_class[i] == kScalarArg) {
      a.kind = Arg::Kind::Tensor;
      a.value = scalar_values[scalar_i++];
    } else if (v.isInt() || v.isSymInt()) {
      a.kind = Arg::Kind::Int;
      a.i = v.isInt() ? v.toInt() : v.toSymInt().guard_int(__FILE__, __LINE__);
    } else if (v.isDouble()) {
      a.kind = Arg::Kind::Double;
      a.d = v.toDouble();
    } else if (v.isBool()) {
      a.kind = Arg::Kind::Bool;
      a.b = v.toBool();
    } else if (v.isIntList() || v.isSymIntList()) {
      a.kind = Arg::Kind::IntList;
      a.ints = IntsOf(v);
    } else if (v.isDoubleList()) {
      a.kind = Arg::Kind::DoubleList;
      a.doubles = v.toDoubleVector();
    } else if (v.isBoolList()) {
      a.kind = Arg::Kind::BoolList;
      for (bool x : v.toBoolList()) a.ints.push_back(x);
    } else if (v.isString()) {
      a.kind = Arg::Kind::String;
      a.s = v.toStringRef();
    } else if (v.isTensorList() || v.isOptionalTensorList()) {
      a.kind = Arg::Kind::TensorList;
      for (const c10::IValue& item : v.toListRef()) {
        if (item.isNone() || !item.toTensor().defined()) a.values.push_back({});
        else a.values.push_back(slot_values[slot++]);
      }
    } else if (e.arg_class[i] == kScalarListArg) {
      a.kind = Arg::Kind::TensorList;
      for (size_t j = 0; j < v.toListRef().size(); ++j) a.values.push_back(scalar_values[scalar_i++]);
    }
  }

  if (e.implicit_rng) {
    args.emplace_back();
    args.back().kind = Arg::Kind::Tensor;
    args.back().value = rng_values.at(gen_i++);
  }

  ctx.can_write_args = true;
  std::vector<shlo::Value> results = e.fn(ctx, lowering::Args(args));
  // A generator state the lowering never read (attention without dropout, dropout in eval)
  // leaves the generator where it was, as on CPU and CUDA.
  for (ParamSource& src : program->params)
    if (src.kind == ParamSource::Rng && !b.Uses(rng_values[src.slot])) src.rng_increment = 0;
  TORCH_CHECK(results.size() == ctx.outputs.size(), "tpu: lowering of ", e.name, " returned ", results.size(),
              " results, expected ", ctx.outputs.size());

  std::vector<shlo::Value> outputs;
  // Writes `result` into the storage of tensor slot `target` (outputs after the new tensors).
  std::vector<TpuStorage*> written;
  size_t first_write = 0;
  auto write = [&](size_t target, const shlo::Value& result) {
    const at::Tensor& t = call.slots[target];
    if (call.slot_is_cpu_scalar[target]) throw lowering::Unsupported("write into a CPU tensor");
    if (written.empty()) first_write = outputs.size();
    shlo::Value v = lowering::CastTo(ctx, result, TypeOf(t));
    auto g = GeometryOf(t);
    TpuStorage* s = StorageOf(t);
    shlo::Value updated;
    if (lowering::IsWholeStorage(g) && !storage_values.count(s)) {
      updated = b.Reshape(v, {g.storage_numel});
    } else {
      shlo::Value base = storage_value(target);
      base = lowering::Reinterpret(b, base, v.type.elem);  // the storage then holds v's type
      g.storage_numel = base.type.dims[0];
      updated = lowering::WriteView(b, base, g, v);
    }
    storage_values[s] = updated;
    for (size_t w = 0; w < written.size(); ++w) {
      if (written[w] == s) {
        outputs[first_write + w] = updated;
        program->writes[w].elem = updated.type.elem;
        return;
      }
    }
    written.push_back(s);
    outputs.push_back(updated);
    program->writes.push_back({static_cast<int>(target), updated.type.elem});
  };
  if (e.variant == Variant::Functional) {
    for (size_t i = 0; i < results.size(); ++i) {
      const at::Tensor& m = result_meta[i];
      if (!m.defined()) {
        program->new_tensors.push_back({{}, {}, at::kFloat, false});
        continue;
      }
      shlo::Value v = lowering::CastTo(ctx, results[i], ctx.outputs[i]);
      std::vector<int64_t> strides = m.strides().vec();
      if (!IsDense(m.sizes(), m.strides())) {
        auto contiguous = c10::contiguous_strides(m.sizes());
        strides.assign(contiguous.begin(), contiguous.end());
      }
      outputs.push_back(lowering::LayOut(b, v, strides));
      program->new_tensors.push_back({m.sizes().vec(), strides, m.scalar_type()});
    }
  } else {
    std::vector<size_t> targets;
    if (e.variant == Variant::Inplace) {
      // self is one tensor, or every tensor of a Tensor(a!)[] (the foreach ops): slots 0..n-1.
      const c10::IValue& self = stack[first];
      size_t n = self.isTensorList() ? self.toTensorList().size() : 1;
      for (size_t s = 0; s < n; ++s) {
        if (call.slot_is_cpu_scalar[s]) throw lowering::Unsupported("in-place write into a CPU tensor");
        targets.push_back(s);
      }
    } else {
      for (size_t s = out_slot_begin; s < call.slots.size(); ++s) targets.push_back(s);
    }
    TORCH_CHECK(targets.size() == results.size(), "tpu: ", e.name, ": ", results.size(), " results for ",
                targets.size(), " outputs");
    for (size_t i = 0; i < targets.size(); ++i) write(targets[i], results[i]);
  }
  // Arguments the op mutates besides its results (Ctx::WriteArg).
  for (const auto& [arg, value] : ctx.arg_writes) {
    TORCH_CHECK(arg < arg_slot.size() && arg_slot[arg] >= 0, "tpu: ", e.name, " writes into argument ", arg,
                ", which is not a tensor");
    write(static_cast<size_t>(arg_slot[arg]), value);
  }
  for (const auto& check : ctx.checks) {
    outputs.push_back(b.Reshape(b.Convert(check.failed, shlo::ElemType::Pred), {}));
    program->check_messages.push_back(check.message);
  }
  static std::atomic<int> next_id{0};
  program->id = next_id++;
  program->op_name = e.name;
  for (const auto& p : b.params()) program->param_types.push_back(p.type);
  for (const auto& o : outputs) program->result_types.push_back(o.type);
  program->module_text = b.Module(outputs);
  program->function_text = b.Function("f" + std::to_string(program->id), outputs, false);
  return program;
}

pjrt::BufferPtr UploadScalar(const at::Tensor& cpu_value, shlo::ElemType elem, int device) {
  at::Tensor v = cpu_value.to(ToScalarType(elem));
  return Runtime::Get().client().FromHost(v.data_ptr(), runtime::ToPjrt(elem), {}, device);
}

// Scalar parameters (add's alpha, an optimizer's lr, a 0-d CPU tensor) repeat from op to op and
// step to step: their device buffers are read-only, so one upload per distinct value serves
// every program that takes it. Keyed by the source value's type and bytes, the parameter's
// element type and the device; conversion on a miss is the tensor cast the uncached path uses.
struct ScalarKey {
  int source_type;
  int elem;
  int device;
  uint64_t bits[2];
  bool operator==(const ScalarKey& o) const {
    return source_type == o.source_type && elem == o.elem && device == o.device && bits[0] == o.bits[0] &&
           bits[1] == o.bits[1];
  }
};
struct ScalarKeyHash {
  size_t operator()(const ScalarKey& k) const {
    size_t h = std::hash<uint64_t>()(k.bits[0]) ^ (std::hash<uint64_t>()(k.bits[1]) * 31);
    return h ^ (static_cast<size_t>(k.source_type) << 40) ^ (static_cast<size_t>(k.elem) << 48) ^
           (static_cast<size_t>(k.device) << 56);
  }
};
std::mutex g_scalar_mu;
std::unordered_map<ScalarKey, pjrt::BufferPtr, ScalarKeyHash> g_scalar_buffers;

pjrt::BufferPtr CachedScalar(const ScalarKey& key, const std::function<at::Tensor()>& cpu_value,
                             shlo::ElemType elem, int device) {
  {
    std::lock_guard<std::mutex> lock(g_scalar_mu);
    auto it = g_scalar_buffers.find(key);
    if (it != g_scalar_buffers.end()) return it->second;
  }
  pjrt::BufferPtr buffer = UploadScalar(cpu_value(), elem, device);
  std::lock_guard<std::mutex> lock(g_scalar_mu);
  if (g_scalar_buffers.size() >= 4096) g_scalar_buffers.clear();  // many distinct values: start over
  g_scalar_buffers.emplace(key, buffer);
  return buffer;
}

pjrt::BufferPtr ScalarBuffer(const c10::Scalar& s, shlo::ElemType elem, int device) {
  ScalarKey key{static_cast<int>(s.type()), static_cast<int>(elem), device, {0, 0}};
  if (s.isComplex()) {
    auto c = s.toComplexDouble();
    double re = c.real(), im = c.imag();
    std::memcpy(&key.bits[0], &re, 8);
    std::memcpy(&key.bits[1], &im, 8);
  } else if (s.isFloatingPoint()) {
    double d = s.toDouble();
    std::memcpy(&key.bits[0], &d, 8);
  } else if (s.isBoolean()) {
    key.bits[0] = s.toBool();
  } else if (s.isIntegral(false) && !s.isSymbolic()) {
    int64_t v = s.toLong();
    std::memcpy(&key.bits[0], &v, 8);
  } else {
    return UploadScalar(at::scalar_tensor(s, at::TensorOptions().dtype(s.type())), elem, device);
  }
  return CachedScalar(key, [&] { return at::scalar_tensor(s, at::TensorOptions().dtype(s.type())); }, elem, device);
}

pjrt::BufferPtr ScalarBuffer(const at::Tensor& cpu_value, shlo::ElemType elem, int device) {
  size_t size = cpu_value.element_size();
  if (cpu_value.numel() != 1 || size > 16 || !cpu_value.device().is_cpu()) return UploadScalar(cpu_value, elem, device);
  ScalarKey key{100 + static_cast<int>(cpu_value.scalar_type()), static_cast<int>(elem), device, {0, 0}};
  std::memcpy(key.bits, cpu_value.data_ptr(), size);
  return CachedScalar(key, [&] { return cpu_value; }, elem, device);
}

// ---- eager modes ----
std::atomic<int> g_mode{static_cast<int>(EagerMode::kFused)};  // the default: passes the suite, fastest

bool CheckNans() {
  static bool on = [] {
    const char* env = std::getenv("TORCH_TPU_CHECK_NANS");
    return env && *env && std::strcmp(env, "0") != 0;
  }();
  return on;
}

// Device-side asserts waiting for the next synchronisation.
struct DeferredCheck {
  pjrt::BufferPtr failed;
  std::string message;
};
std::mutex g_checks_mu;
std::vector<DeferredCheck> g_checks;

void VerifyChecks() {
  std::vector<DeferredCheck> checks;
  {
    std::lock_guard<std::mutex> lock(g_checks_mu);
    checks.swap(g_checks);
  }
  for (const auto& c : checks) {
    uint8_t failed = 0;
    c.failed->ToHost(&failed, 1);
    TORCH_CHECK_INDEX(!failed, c.message);
  }
}

void DeferChecks(const std::vector<std::string>& messages, const std::vector<pjrt::BufferPtr>& outs, size_t first) {
  if (messages.empty()) return;
  size_t pending;
  {
    std::lock_guard<std::mutex> lock(g_checks_mu);
    for (size_t i = 0; i < messages.size(); ++i) g_checks.push_back({outs[first + i], messages[i]});
    pending = g_checks.size();
  }
  // Debug mode raises at the op; otherwise at the next sync, or when too many are waiting.
  if (static_cast<EagerMode>(g_mode.load()) == EagerMode::kDebug || pending > 1024) VerifyChecks();
}

// The parameters of one op's program, in order.
// With `storages` false, storage parameters are left null (fused mode maps them itself).
std::vector<pjrt::BufferPtr> Inputs(const Program& p, const Call& call, int device, bool storages = true) {
  std::vector<pjrt::BufferPtr> keep;
  keep.reserve(p.params.size());
  for (const ParamSource& src : p.params) {
    if (src.kind == ParamSource::Storage) {
      keep.push_back(storages ? StorageOf(call.slots[src.slot])->Materialize(src.elem) : nullptr);
    } else if (src.kind == ParamSource::Scalar) {
      if (src.slot >= 0) {
        keep.push_back(ScalarBuffer(call.slots[src.slot], src.elem, device));
      } else {
        keep.push_back(ScalarBuffer(call.scalars[-1 - src.slot], src.elem, device));
      }
    } else {
      auto [seed, offset] = NextPhiloxState(call.generators[src.slot], device, src.rng_increment);
      uint64_t state[2] = {seed, offset};
      keep.push_back(Runtime::Get().client().FromHost(state, PJRT_Buffer_Type_U64, {2}, device));
    }
  }
  return keep;
}

std::vector<at::Tensor> NewTensors(const Program& p, int device) {
  std::vector<at::Tensor> fresh;
  c10::DeviceGuard guard(c10::Device(kTpu, static_cast<c10::DeviceIndex>(device)));
  for (const NewTensor& nt : p.new_tensors) {
    if (!nt.defined) {
      fresh.emplace_back();
      continue;
    }
    fresh.push_back(at::empty_strided(nt.sizes, nt.strides, at::TensorOptions().dtype(nt.dtype).device(kTpu, device)));
  }
  return fresh;
}

// Replaces the arguments with the results, as the schema returns them.
void PushResults(const OpEntry& e, const Program& p, torch::jit::Stack* stack, size_t first,
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

const pjrt::ExecutablePtr& Compiled(Program& p) {
  std::lock_guard<std::mutex> lock(p.compile_mu);
  if (!p.exe) p.exe = Runtime::Get().Compile(p.module_text, p.op_name);
  return p.exe;
}

// Debug mode: the op's results are computed before it returns; with TORCH_TPU_CHECK_NANS=1
// the first op producing NaN or Inf is named.
void DebugCheck(const OpEntry& e, const std::vector<at::Tensor>& fresh, const Call& call,
                const std::vector<pjrt::BufferPtr>& outs) {
  for (const auto& b : outs) b->Await();
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

void Execute(const OpEntry& e, Program& p, torch::jit::Stack* stack, size_t first, Call& call) {
  Runtime& rt = Runtime::Get();
  int device = call.device < 0 ? CurrentDevice() : call.device;
  const pjrt::ExecutablePtr& exe = Compiled(p);
  std::vector<pjrt::BufferPtr> keep = Inputs(p, call, device);
  std::vector<PJRT_Buffer*> raw;
  raw.reserve(keep.size());
  for (const auto& b : keep) raw.push_back(b->raw());
  std::vector<pjrt::BufferPtr> outs = rt.Execute(*exe, device, raw);
  GetMetrics().executions++;

  std::vector<at::Tensor> fresh = NewTensors(p, device);
  size_t next = 0;
  for (size_t i = 0; i < fresh.size(); ++i)
    if (fresh[i].defined()) StorageOf(fresh[i])->Assign(outs[next++], ToElemType(p.new_tensors[i].dtype));
  for (size_t w = 0; w < p.writes.size(); ++w) {
    StorageOf(call.slots[p.writes[w].slot])->Assign(outs[next + w], p.writes[w].elem);
  }
  DeferChecks(p.check_messages, outs, next + p.writes.size());
  if (static_cast<EagerMode>(g_mode.load()) == EagerMode::kDebug) DebugCheck(e, fresh, call, outs);
  PushResults(e, p, stack, first, std::move(fresh));
}

// ---- fused mode: ops are recorded and run as one program at a sync point ----
int64_t FusedOpLimit() {
  static int64_t limit = [] {
    const char* env = std::getenv("TORCH_TPU_FUSED_MAX_OPS");
    return env ? std::max<int64_t>(1, std::atoll(env)) : int64_t{1000};
  }();
  return limit;
}

// How many times a graph structure must be flushed before it is compiled whole
// (TORCH_TPU_FUSED_COMPILE_AFTER; 1 compiles every graph at once).
int64_t FusedCompileAfter() {
  static int64_t after = [] {
    const char* env = std::getenv("TORCH_TPU_FUSED_COMPILE_AFTER");
    return env ? std::max<int64_t>(1, std::atoll(env)) : int64_t{2};
  }();
  return after;
}

struct FusedProgram {
  pjrt::ExecutablePtr exe;
  std::vector<std::string> check_messages;
};

class FusedGraph {
 public:
  bool empty() const { return calls_.empty(); }
  int device() const { return device_; }

  size_t num_ops() const { return calls_.size(); }

  void Record(const std::shared_ptr<Program>& program, const Call& call, int device,
              const std::vector<at::Tensor>& fresh) {
    Program& p = *program;
    if (device_ < 0) device_ = device;
    // Arguments: a pending storage's value from the graph, or a new graph parameter.
    std::vector<int> args;
    args.reserve(p.params.size());
    std::vector<pjrt::BufferPtr> uploads;
    for (size_t i = 0; i < p.params.size(); ++i) {
      const ParamSource& src = p.params[i];
      if (src.kind == ParamSource::Storage) {
        TpuStorage* s = StorageOf(call.slots[src.slot]);
        auto it = storage_value_.find(s->uid);
        if (it != storage_value_.end()) {
          args.push_back(it->second);
          continue;
        }
        int id = AddParam(s->Materialize(src.elem), p.param_types[i]);
        storage_value_[s->uid] = id;
        args.push_back(id);
      } else {
        if (uploads.empty()) uploads = Inputs(p, call, device, false);  // scalars and RNG states, now
        args.push_back(AddParam(uploads[i], p.param_types[i]));
      }
    }
    int first_result = static_cast<int>(value_types_.size());
    for (const auto& t : p.result_types) value_types_.push_back(t);
    calls_.push_back({&p, args, first_result});
    programs_.push_back(program);
    key_.push_back(p.id);
    key_.push_back(static_cast<int64_t>(args.size()));
    for (int a : args) key_.push_back(a);

    // Results: fresh tensors and written storages now hold values of this graph.
    int r = first_result;
    for (size_t i = 0; i < fresh.size(); ++i) {
      if (!fresh[i].defined()) continue;
      MarkPending(fresh[i], r++, ToElemType(p.new_tensors[i].dtype));
    }
    for (const WriteTarget& w : p.writes) MarkPending(call.slots[w.slot], r++, w.elem);
    for (const std::string& m : p.check_messages) checks_.push_back({r++, m});
  }

  // Runs the recorded ops as one program and hands every live pending storage its value.
  void Flush(const char* cause) {
    if (calls_.empty()) return;
    auto& metrics = GetMetrics();
    metrics.CountSync(std::string("fused graph: ") + cause);
    std::vector<int> outputs;
    std::vector<std::pair<c10::intrusive_ptr<c10::StorageImpl>, shlo::ElemType>> targets;
    for (auto& [uid, pend] : pending_order_) {
      auto impl = pend.storage.lock();
      if (!impl) continue;  // died before the sync: its value is never needed
      auto* s = StorageOf(*impl);
      if (!s || s->uid != uid || !s->pending) continue;
      outputs.push_back(storage_value_.at(uid));
      targets.emplace_back(std::move(impl), elem_.at(uid));
    }
    key_.push_back(-1);
    for (int o : outputs) key_.push_back(o);
    for (const auto& c : checks_) key_.push_back(c.first);

    metrics.fused_graphs_run++;
    metrics.fused_ops += static_cast<int64_t>(calls_.size());
    std::shared_ptr<FusedProgram> fused;
    bool hot = true;
    {
      std::lock_guard<std::mutex> lock(g_fused_mu);
      auto it = g_fused.find(key_);
      if (it != g_fused.end()) {
        fused = it->second;
      } else {
        // Compile a structure only once it repeats (a training step, a static-shape decode
        // step). Graphs seen once (a decode step over a growing cache, one test's forward)
        // run op by op through the per-op programs, which every graph shares: compiling each
        // of those whole would cost far more than it saves.
        if (g_seen.size() > 100000) g_seen.clear();
        hot = ++g_seen[KeyHash()(key_)] >= FusedCompileAfter();
      }
    }
    if (!fused) {
      fused = std::make_shared<FusedProgram>();
      std::string module = ModuleText(outputs);
      std::string what = "fused graph of " + std::to_string(calls_.size()) + " ops";
      try {
        // Near the process's mapping budget a whole graph is not loaded at all: its ops run
        // through per-op programs, which other graphs share (Runtime::MappingsTight).
        Runtime& rt = Runtime::Get();
        if (!rt.MappingsTight()) fused->exe = hot ? rt.Compile(module, what) : rt.Cached(module);
      } catch (const std::exception&) {
        // Run the ops one by one instead: those before the culprit compute their values, and
        // the culprit raises its own error, naming it.
        RunOneByOne(outputs, targets);
        return;
      }
      if (!fused->exe) {  // seen once, and not in the disk cache
        metrics.fused_graphs_op_by_op++;
        RunOneByOne(outputs, targets);
        return;
      }
      for (const auto& c : checks_) fused->check_messages.push_back(c.second);
      std::lock_guard<std::mutex> lock(g_fused_mu);
      g_fused[key_] = fused;
      if (hot) metrics.fused_graphs_compiled++;
    }
    std::vector<pjrt::BufferPtr> params = std::move(params_);  // alive until Execute returns
    std::vector<PJRT_Buffer*> raw;
    for (const auto& b : params) raw.push_back(b->raw());
    Runtime& rt = Runtime::Get();
    int device = device_;
    Reset();  // before running: a failure must not leave the graph half-flushed
    std::vector<pjrt::BufferPtr> outs = rt.Execute(*fused->exe, device, raw);
    metrics.executions++;
    for (size_t i = 0; i < targets.size(); ++i) {
      StorageOf(*targets[i].first)->AssignComputed(outs[i], targets[i].second);
    }
    DeferChecks(fused->check_messages, outs, targets.size());
  }

 private:
  // The recorded calls, each through its own op's program; on a failure every value not yet
  // computed is marked failed (reading it raises the error) and the error propagates.
  void RunOneByOne(const std::vector<int>& outputs,
                   const std::vector<std::pair<c10::intrusive_ptr<c10::StorageImpl>, shlo::ElemType>>& targets) {
    std::vector<pjrt::BufferPtr> values(value_types_.size());
    for (size_t i = 0; i < param_ids_.size(); ++i) values[param_ids_[i]] = params_[i];
    std::vector<Call> calls = std::move(calls_);
    std::vector<std::shared_ptr<Program>> programs = std::move(programs_);
    std::vector<std::pair<int, std::string>> checks = std::move(checks_);
    int device = device_;
    Reset();
    Runtime& rt = Runtime::Get();
    auto assign_computed = [&] {
      for (size_t i = 0; i < targets.size(); ++i) {
        auto* s = StorageOf(*targets[i].first);
        if (values[outputs[i]]) s->AssignComputed(values[outputs[i]], targets[i].second);
      }
    };
    // A value neither kept nor checked is dropped after its last use, as XLA would.
    std::vector<size_t> last_use(values.size(), calls.size());
    for (size_t k = 0; k < calls.size(); ++k)
      for (int a : calls[k].args) last_use[a] = k;
    for (int o : outputs) last_use[o] = calls.size();
    for (const auto& ch : checks) last_use[ch.first] = calls.size();
    for (size_t k = 0; k < calls.size(); ++k) {
      const Call& c = calls[k];
      try {
        std::vector<PJRT_Buffer*> raw;
        for (int a : c.args) raw.push_back(values[a]->raw());
        std::vector<pjrt::BufferPtr> outs = rt.Execute(*Compiled(*c.program), device, raw);
        GetMetrics().executions++;
        for (size_t i = 0; i < outs.size(); ++i) values[c.first_result + static_cast<int>(i)] = std::move(outs[i]);
        for (int a : c.args)
          if (last_use[a] == k) values[a].reset();
      } catch (const std::exception& ex) {
        assign_computed();
        std::string message = std::string("tpu: ") + c.program->op_name + " (deferred in a fused graph) failed: " + ex.what();
        for (size_t i = 0; i < targets.size(); ++i)
          if (!values[outputs[i]])
            StorageOf(*targets[i].first)->MarkFailed(message);
        throw std::runtime_error(message);
      }
    }
    assign_computed();
    std::vector<std::string> messages;
    std::vector<pjrt::BufferPtr> flags;
    for (const auto& [id, m] : checks) {
      messages.push_back(m);
      flags.push_back(values[id]);
    }
    DeferChecks(messages, flags, 0);
  }

  struct PendingStorage {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;
    c10::intrusive_ptr<c10::StorageImpl> keep;  // a storage slice: its TpuStorage may outlive it
  };

  int AddParam(pjrt::BufferPtr buffer, const shlo::TensorType& type) {
    int id = static_cast<int>(value_types_.size());
    value_types_.push_back(type);
    param_ids_.push_back(id);
    params_.push_back(std::move(buffer));
    return id;
  }

  void MarkPending(const at::Tensor& t, int value, shlo::ElemType elem) {
    TpuStorage* s = StorageOf(t);
    s->pending = true;
    s->elem = elem;
    storage_value_[s->uid] = value;
    elem_[s->uid] = elem;
    if (pending_uids_.insert(s->uid).second) {
      auto impl = c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(t.storage().unsafeGetStorageImpl());
      bool slice = !IsTpuAllocation(impl->data_ptr());
      pending_order_.emplace_back(s->uid, PendingStorage{c10::weak_intrusive_ptr<c10::StorageImpl>(impl),
                                                         slice ? impl : c10::intrusive_ptr<c10::StorageImpl>()});
    }
  }

  std::string Ref(int id) const {
    auto it = refs_.find(id);
    return it->second;
  }

  std::string ModuleText(const std::vector<int>& outputs) {
    refs_.clear();
    std::string functions, body;
    std::unordered_set<int> emitted;
    std::string params;
    for (size_t i = 0; i < param_ids_.size(); ++i) {
      refs_[param_ids_[i]] = "%p" + std::to_string(i);
      params += (i ? ", " : "") + refs_[param_ids_[i]] + ": " + value_types_[param_ids_[i]].str();
    }
    for (size_t c = 0; c < calls_.size(); ++c) {
      const Call& call = calls_[c];
      const Program& p = *call.program;
      if (emitted.insert(p.id).second) functions += p.function_text;
      std::string name = "%c" + std::to_string(c);
      size_t n = p.result_types.size();
      std::string line = "    ";
      if (n == 1) line += name + " = ";
      else if (n > 1) line += name + ":" + std::to_string(n) + " = ";
      line += "\"func.call\"(";
      std::string arg_types;
      for (size_t i = 0; i < call.args.size(); ++i) {
        line += (i ? ", " : "") + Ref(call.args[i]);
        arg_types += (i ? ", " : "") + value_types_[call.args[i]].str();
      }
      std::string result_types;
      for (size_t i = 0; i < n; ++i) {
        result_types += (i ? ", " : "") + p.result_types[i].str();
        refs_[call.first_result + static_cast<int>(i)] = n == 1 ? name : name + "#" + std::to_string(i);
      }
      line += ") {callee = @f" + std::to_string(p.id) + "} : (" + arg_types + ") -> (" + result_types + ")\n";
      body += line;
    }
    std::vector<int> results = outputs;
    for (const auto& ch : checks_) results.push_back(ch.first);
    std::string types, refs;
    for (size_t i = 0; i < results.size(); ++i) {
      types += (i ? ", " : "") + value_types_[results[i]].str();
      refs += (i ? ", " : "") + Ref(results[i]);
    }
    std::string main = "  func.func public @main(" + params + ") -> (" + types + ") {\n" + body +
                       "    \"func.return\"(" + refs + ") : (" + types + ") -> ()\n  }\n";
    return shlo::WrapModule(functions + main);
  }

  void Reset() {
    for (auto& [uid, pend] : pending_order_) {
      auto impl = pend.storage.lock();
      if (!impl) continue;
      auto* s = StorageOf(*impl);
      if (s && s->uid == uid) s->pending = false;
    }
    device_ = -1;
    calls_.clear();
    programs_.clear();
    params_.clear();
    param_ids_.clear();
    value_types_.clear();
    storage_value_.clear();
    elem_.clear();
    pending_order_.clear();
    pending_uids_.clear();
    checks_.clear();
    key_.clear();
  }

  struct Call {
    Program* program;
    std::vector<int> args;
    int first_result;
  };

  int device_ = -1;
  std::vector<Call> calls_;
  std::vector<std::shared_ptr<Program>> programs_;  // keeps every recorded program alive
  std::vector<pjrt::BufferPtr> params_;
  std::vector<int> param_ids_;
  std::vector<shlo::TensorType> value_types_;        // by value id: params and call results
  std::unordered_map<uint64_t, int> storage_value_;  // storage uid -> its current value id
  std::unordered_map<uint64_t, shlo::ElemType> elem_;
  std::vector<std::pair<uint64_t, PendingStorage>> pending_order_;
  std::unordered_set<uint64_t> pending_uids_;  // the uids in pending_order_
  std::vector<std::pair<int, std::string>> checks_;
  std::vector<int64_t> key_;
  std::unordered_map<int, std::string> refs_;

  static std::mutex g_fused_mu;
  static std::unordered_map<std::vector<int64_t>, std::shared_ptr<FusedProgram>, KeyHash> g_fused;
  static std::unordered_map<size_t, int> g_seen;  // structure hash -> flushes seen (not compiled yet)
};

std::mutex FusedGraph::g_fused_mu;
std::unordered_map<std::vector<int64_t>, std::shared_ptr<FusedProgram>, KeyHash> FusedGraph::g_fused;
std::unordered_map<size_t, int> FusedGraph::g_seen;

// One open graph per process; eager dispatch holds the GIL, the lock covers other threads.
std::recursive_mutex g_graph_mu;
FusedGraph& Graph() {
  static FusedGraph* graph = new FusedGraph();
  return *graph;
}

void FlushGraph(const char* cause) {
  std::lock_guard<std::recursive_mutex> lock(g_graph_mu);
  Graph().Flush(cause);
}

void Record(const OpEntry& e, std::shared_ptr<Program> p, torch::jit::Stack* stack, size_t first, Call& call) {
  int device = call.device < 0 ? CurrentDevice() : call.device;
  std::lock_guard<std::recursive_mutex> lock(g_graph_mu);
  FusedGraph& graph = Graph();
  if (!graph.empty() && graph.device() != device) graph.Flush("another device");
  std::vector<at::Tensor> fresh = NewTensors(*p, device);
  graph.Record(p, call, device, fresh);
  GetMetrics().ops_recorded++;
  PushResults(e, *p, stack, first, std::move(fresh));
  if (graph.num_ops() >= FusedOpLimit()) graph.Flush("op limit");
}

// Resizes out= tensors as PyTorch's resize_output does (with its warning). True if any changed.
bool ResizeOuts(const OpEntry& e, torch::jit::Stack* stack, size_t first) {
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
void NoteRecompile(OpEntry& e, const torch::jit::Stack& stack, size_t first) {
  std::vector<std::string> now;
  for (size_t i = 0; i < e.num_args; ++i) now.push_back(Describe(stack[first + i]));
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(e.misses.mu);
    if (!e.misses.last.empty()) {
      const auto& args = e.op->schema().arguments();
      for (size_t i = 0; i < now.size() && i < e.misses.last.size(); ++i) {
        if (now[i] != e.misses.last[i]) {
          reason = e.name + ": argument '" + args[i].name() + "' changed from " + e.misses.last[i] + " to " + now[i];
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
  m.ops_by_mode[g_mode.load()] += delta;
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
    std::shared_ptr<Program> program;
    {
      std::lock_guard<std::mutex> lock(g_cache_mu);
      auto it = g_programs.find(call.key);
      if (it != g_programs.end()) program = it->second;
    }
    if (program) {
      GetMetrics().signature_hits++;
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
      NoteRecompile(*e_, *stack, first);
      try {
        program = BuildProgram(*e_, *stack, first, call);
      } catch (const lowering::Unsupported&) {
        program = std::make_shared<Program>();
        program->fallback = true;
      } catch (const c10::Error&) {
        throw;
      } catch (const std::exception& ex) {
        RethrowAsTorchError(ex, e_->name);
      }
      std::lock_guard<std::mutex> lock(g_cache_mu);
      g_programs[call.key] = program;
    }
    if (program->fallback) {
      CpuFallback(op, stack);
      return;
    }
    try {
      if (static_cast<EagerMode>(g_mode.load()) == EagerMode::kFused) {
        Record(*e_, program, stack, first, call);
      } else {
        Execute(*e_, *program, stack, first, call);
      }
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& ex) {
      RethrowAsTorchError(ex, e_->name);
    }
  }

 private:
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

void SetEagerMode(EagerMode mode) {
  if (mode != static_cast<EagerMode>(g_mode.load())) FlushGraph("eager mode change");
  g_mode = static_cast<int>(mode);
}

EagerMode GetEagerMode() { return static_cast<EagerMode>(g_mode.load()); }

void RunPendingGraph(const char* cause) { FlushGraph(cause); }

void SyncPoint(const char* cause) {
  FlushGraph(cause);
  VerifyChecks();
}

void CpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = c10::toString(op.operator_name());
  TORCH_CHECK(!StrictFallback(), "tpu: ", name,
              " has no native tpu kernel and TORCH_TPU_STRICT=1 forbids running it on the CPU");
  static std::mutex mu;
  static std::unordered_set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(name).second) {
      TORCH_WARN("tpu: ", name, " has no native tpu kernel; it runs on the CPU (slow). ",
                 "Set TORCH_TPU_STRICT=1 to make this an error.");
    }
  }
  GetMetrics().CountFallback(name);
  // PyTorch's cpu_fallback moves Tensor and Tensor[] arguments but not Tensor?[] (index_put's
  // indices): move those here; they are read-only inputs.
  const size_t num_args = op.schema().arguments().size();
  for (size_t i = stack->size() - num_args; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (!v.isOptionalTensorList()) continue;
    c10::List<std::optional<at::Tensor>> moved;
    for (const c10::IValue& item : v.toListRef()) {
      if (item.isNone() || !item.toTensor().defined()) moved.push_back(std::nullopt);
      else moved.push_back(item.toTensor().cpu());
    }
    v = moved;
  }
  at::native::cpu_fallback(op, stack, false, c10::DispatchKey::CPU);
}

std::vector<std::string> NativeOps() { return NativeOpNames(); }

void RegisterLoweredOps() {
  static bool done = false;
  if (done) return;
  done = true;
  runtime::SetFlushHook(&FlushGraph);
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  static auto* tpu_lib =
      new torch::Library(torch::Library::IMPL, "torch_tpu", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  std::unordered_map<std::string, std::vector<c10::OperatorName>> overloads;
  for (const c10::OperatorName& n : dispatcher.getAllOpNames()) overloads[n.name].push_back(n);

  auto add = [&](std::shared_ptr<OpEntry> entry) {
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
    entry->num_outs = CountOuts(schema);
    for (const auto& a : schema.arguments()) entry->arg_class.push_back(ClassOf(a));
    entry->implicit_rng = handle->hasTag(at::Tag::nondeterministic_seeded) &&
                          std::find(entry->arg_class.begin(), entry->arg_class.end(), kGeneratorArg) ==
                              entry->arg_class.end();
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
      ie->arg_class.clear();
      for (const auto& a : inplace->schema().arguments()) ie->arg_class.push_back(ClassOf(a));
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
      oe->arg_class.clear();
      for (const auto& a : oh->schema().arguments()) oe->arg_class.push_back(ClassOf(a));
      add(oe);
    }
  }
}

}  // namespace tpu::aten
