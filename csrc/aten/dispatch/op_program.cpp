#include "op_program.h"

#include <ATen/native/TypeProperties.h>
#include <ATen/ops/result_type.h>

#include <cstring>
#include <unordered_map>

#include "precision.h"

namespace tpu::aten {

using lowering::Arg;
using runtime::ParamSource;
using runtime::TpuStorage;

namespace {

std::vector<int64_t> IntsOf(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  std::vector<int64_t> out;
  for (const c10::SymInt& s : v.toSymIntVector()) out.push_back(s.guard_int(__FILE__, __LINE__));
  return out;
}

// add/sub/rsub with alpha 1 (every plain `a + b`) lower without it: `a + b`, not `a + 1 * b`.
// Besides a scalar parameter less, the program has half the flops, and the XLA CPU client runs
// programs under 1000 flops as cheap ones on the calling thread: `a + b` of 500-999 elements
// with a sync took 38-60 us per call on 2 cores with the multiply, 6 us without.
bool UnitAlpha(const OpEntry& e, size_t i, const c10::IValue& v) {
  if (static_cast<int>(i) != e.unit_alpha_arg || !v.isScalar()) return false;
  const c10::Scalar s = v.toScalar();
  if (s.isBoolean()) return s.toBool();
  if (s.isIntegral(false)) return s.toLong() == 1;
  return s.isFloatingPoint() && s.toDouble() == 1.0;
}

// The CPU kernels' alpha check (alpha_check in BinaryOps.cpp), against the op's result type.
// PyTorch 2.13's Python Meta kernels for add/sub let alpha=True through for float results and
// alpha=1.0 for integer ones, so without it those calls returned a value where the CPU raises.
void CheckAlpha(const OpEntry& e, const torch::jit::Stack& stack, size_t first) {
  const c10::IValue& alpha = stack[first + e.unit_alpha_arg];
  if (!alpha.isScalar() || alpha.isInt()) return;  // an integer alpha suits every result type
  const c10::IValue& self = stack[first];
  const c10::IValue& other = stack[first + 1];
  if (!self.isTensor()) return;
  const c10::Scalar a = alpha.toScalar();
  const at::ScalarType self_type = self.toTensor().scalar_type();
  if (a.isFloatingPoint() && (at::isFloatingType(self_type) || at::isComplexType(self_type))) return;
  const at::ScalarType result = other.isTensor() ? at::result_type(self.toTensor(), other.toTensor())
                                : other.isScalar() ? at::result_type(self.toTensor(), other.toScalar())
                                                   : self_type;
  TORCH_CHECK(!a.isBoolean() || result == at::ScalarType::Bool,
              "Boolean alpha only supported for Boolean results.");
  TORCH_CHECK(at::isFloatingType(result) || at::isComplexType(result) || a.isIntegral(/*includeBool=*/true),
              "For integral input tensors, argument alpha must not be a floating point number.");
  TORCH_CHECK(at::isComplexType(result) || !a.isComplex(),
              "For non-complex input tensors, argument alpha must not be a complex number.");
}

// The CPU's check of pow(Tensor, Scalar) (pow's structured Meta function): an integer tensor
// to a negative integer power raises. The Meta kernel the dispatcher runs for pow is PyTorch's
// Python reference, which lacks it, and the exponent is a run-time value: checked on every call.
void CheckIntegerPower(const OpEntry& e, const torch::jit::Stack& stack, size_t first) {
  const c10::IValue& base = stack[first];
  const c10::IValue& exponent = stack[first + e.integer_power_arg];
  if (!base.isTensor() || !exponent.isScalar()) return;
  const c10::Scalar s = exponent.toScalar();
  TORCH_CHECK(!(at::isIntegralType(base.toTensor().scalar_type(), /*includeBool=*/true) &&
                s.isIntegral(/*includeBool=*/true) && s.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
}

// The value of the op's special Scalar (OpEntry::special_scalar_arg) when its lowering
// specialises on it: keyed and passed as a static Double instead of a run-time operand.
std::optional<double> SpecialValue(const OpEntry& e, size_t i, const c10::IValue& v) {
  if (static_cast<int>(i) != e.special_scalar_arg || !v.isScalar()) return std::nullopt;
  return SpecialScalarValue(e.special_scalar, v.toScalar());
}

}  // namespace

// Builds the signature and collects tensors, scalars and generators of the call.
void CollectCall(const OpEntry& e, const torch::jit::Stack& stack, size_t first, Call& call) {
  if (e.unit_alpha_arg >= 0) CheckAlpha(e, stack, first);
  if (e.integer_power_arg >= 0) CheckIntegerPower(e, stack, first);
  std::vector<TpuStorage*> seen;
  // One allocation each on the per-op path (tensor lists may still grow them).
  seen.reserve(e.num_args);
  call.slots.reserve(e.num_args);
  call.slot_is_cpu_scalar.reserve(e.num_args);
  call.key.reserve(64);
  call.key.push_back(reinterpret_cast<int64_t>(&e));
  call.precision = MatmulPrecision();
  call.key.push_back(static_cast<int64_t>(call.precision));
  for (size_t i = 0; i < e.num_args; ++i) {
    const c10::IValue& v = stack[first + i];
    auto& k = call.key;
    if (v.isNone() && e.role(i) != ArgRole::kGenerator) {
      k.push_back(kNone);
    } else if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) k.push_back(kNone);
      else AddTensor(call, call.key, t, seen);
    } else if (e.role(i) == ArgRole::kGenerator) {
      k.push_back(kGenerator);
      call.generators.push_back(v.isNone() ? std::nullopt : std::optional<at::Generator>(v.toGenerator()));
      continue;
    } else if (UnitAlpha(e, i, v)) {
      // Keyed by its type (1, 1.0, True) as every scalar is; whether that type suits the
      // result is CheckAlpha's job, on hits and misses alike (PyTorch's Meta kernel lets
      // alpha=1.0 on integers through).
      k.push_back(kNone);
      k.push_back(v.isBool() ? 3 : v.isInt() ? 2 : 1);
    } else if (auto special = SpecialValue(e, i, v)) {
      AddSpecialScalar(call.key, v.toScalar(), *special);
      call.special_scalars.push_back(v.toScalar());
    } else if (e.role(i) == ArgRole::kScalar) {
      AddScalar(call, call.key, v.toScalar());
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
        else AddTensor(call, call.key, item.toTensor(), seen);
      }
      k.push_back(kListEnd);
    } else if (e.role(i) == ArgRole::kScalarList) {
      // Scalar[] (foreach ops): run-time scalars.
      k.push_back(kOther);
      for (const c10::IValue& item : v.toListRef()) AddScalar(call, call.key, item.toScalar());
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

namespace {

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

}  // namespace

torch::jit::Stack RunMeta(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first, size_t n,
                          torch::jit::Stack* args) {
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

namespace {

std::vector<at::Tensor> TensorsOf(const torch::jit::Stack& results) {
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : results) {
    if (v.isTensor()) out.push_back(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList()) out.push_back(t);
  }
  return out;
}

shlo::TensorType TypeOf(const at::Tensor& t) { return {ToElemType(t.scalar_type()), t.sizes().vec()}; }

}  // namespace

std::shared_ptr<OpProgram> BuildProgram(const OpEntry& e, torch::jit::Stack& stack, size_t first, const Call& call) {
  auto op = std::make_shared<OpProgram>();
  auto program = std::make_shared<runtime::Program>();
  op->program = program;
  // Meta inference: validation of the exact variant, result types from the functional op.
  torch::jit::Stack variant_meta, variant_args;
  if (e.variant != Variant::Functional) variant_meta = RunMeta(*e.op, stack, first, e.num_args, &variant_args);
  std::vector<at::Tensor> result_meta;
  size_t num_inputs = e.num_args - e.num_outs;
  if (e.functional) {
    auto fm = RunMeta(*e.functional, stack, first, num_inputs);
    op->returns_list = !fm.empty() && fm[0].isTensorList();
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
  for (const c10::Scalar& s : call.special_scalars) state = at::native::update_result_type_state(s, state);
  at::ScalarType common = at::native::result_type(state);
  shlo::ElemType common_elem = common == at::ScalarType::Undefined ? shlo::ElemType::F32
                               : IsSupportedDtype(common)          ? ToElemType(common)
                                                                   : shlo::ElemType::F32;

  shlo::Builder b;
  lowering::Ctx ctx{b, {}, common_elem};
  ctx.op = e.name;
  ctx.precision = call.precision;
  for (const at::Tensor& m : result_meta) {
    if (!m.defined()) {
      ctx.outputs.push_back({shlo::ElemType::F32, {}});
      continue;
    }
    if (!IsSupportedDtype(m.scalar_type())) {
      op->fallback = true;
      return op;
    }
    ctx.outputs.push_back(TypeOf(m));
  }

  // Parameters: one per distinct storage read, then run-time scalars and RNG states.
  std::unordered_map<TpuStorage*, shlo::Value> storage_values;  // 1-D, as views read them
  std::unordered_map<TpuStorage*, std::vector<int64_t>> storage_dims;  // of the parameters' buffers
  std::vector<shlo::Value> slot_values(call.slots.size());
  size_t out_slot_begin = call.slots.size();
  if (e.variant == Variant::Out) {
    size_t count = 0;
    for (size_t i = num_inputs; i < e.num_args; ++i) count += stack[first + i].isTensor() ? 1 : 0;
    out_slot_begin = call.slots.size() - count;
  }
  std::unordered_map<TpuStorage*, int> storage_params;  // the parameter index of each storage read
  auto storage_value = [&](size_t slot) -> shlo::Value {
    const at::Tensor& t = call.slots[slot];
    TpuStorage* s = StorageOf(t);
    auto it = storage_values.find(s);
    if (it != storage_values.end()) return it->second;
    bool typed = s->buffer || s->pending;
    shlo::ElemType elem = typed ? s->elem : ToElemType(t.scalar_type());
    storage_params[s] = static_cast<int>(program->params.size());
    program->params.push_back({ParamSource::Storage, static_cast<int>(slot), elem});
    std::vector<int64_t> dims = typed ? s->BufferDims() : std::vector<int64_t>{};
    if (dims.empty()) dims = {static_cast<int64_t>(s->nbytes / shlo::ByteSize(elem))};
    shlo::Value v = lowering::StorageParam(b, elem, dims);
    storage_dims[s] = dims;
    storage_values[s] = v;
    return v;
  };
  std::unordered_map<size_t, shlo::Value> offset_values;  // by slot: run-time view offsets
  auto offset_value = [&](size_t slot) -> shlo::Value {
    auto it = offset_values.find(slot);
    if (it != offset_values.end()) return it->second;
    program->params.push_back({ParamSource::Offset, static_cast<int>(slot), shlo::ElemType::S64});
    return offset_values[slot] = b.Param({shlo::ElemType::S64, {}});
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
    slot_values[slot] = lowering::ReadViewOf(b, storage, ToElemType(t.scalar_type()), GeometryWithBufferOf(t),
                                             [&] { return offset_value(slot); });
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
    if (e.role(i) == ArgRole::kGenerator) {
      a.kind = Arg::Kind::Tensor;
      a.value = rng_values[gen_i++];
    } else if (v.isNone() || UnitAlpha(e, i, v)) {
      a.kind = Arg::Kind::None;
    } else if (v.isTensor()) {
      if (v.toTensor().defined()) {
        a.kind = Arg::Kind::Tensor;
        arg_slot[i] = static_cast<int>(slot);
        a.value = slot_values[slot++];
      }
    } else if (auto special = SpecialValue(e, i, v)) {
      a.kind = Arg::Kind::Double;
      a.d = *special;
    } else if (e.role(i) == ArgRole::kScalar) {
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
    } else if (e.role(i) == ArgRole::kScalarList) {
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
  std::vector<shlo::Value> results = e.fn(ctx, lowering::Args(args, &e.lowering_names));
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
    auto g = GeometryWithBufferOf(t);
    TpuStorage* s = StorageOf(t);
    shlo::Value updated, buffer;
    if (lowering::IsWholeStorage(g) && !storage_values.count(s)) {
      updated = b.Reshape(v, {g.storage_numel});
      buffer = lowering::AsBuffer(b, v);
    } else {
      shlo::Value storage = storage_value(target);
      // A box write needs the buffer still in the shape the key saw (an earlier write of this
      // op into the same storage may have left it 1-D).
      if (g.buffer_dims != storage_dims.at(s)) g.buffer_dims.clear();
      updated = lowering::WriteViewOf(b, storage, g, v, [&] { return offset_value(target); });
      buffer = lowering::WrittenBuffer(b, g, v, updated, storage_dims.at(s));
    }
    storage_values[s] = updated;
    storage_dims[s] = buffer.type.dims;
    for (size_t w = 0; w < written.size(); ++w) {
      if (written[w] == s) {
        outputs[first_write + w] = buffer;
        program->writes[w].elem = buffer.type.elem;
        return;
      }
    }
    written.push_back(s);
    outputs.push_back(buffer);
    program->writes.push_back({static_cast<int>(target), buffer.type.elem});
  };
  if (e.variant == Variant::Functional) {
    for (size_t i = 0; i < results.size(); ++i) {
      const at::Tensor& m = result_meta[i];
      if (!m.defined()) {
        op->new_tensors.push_back({{}, {}, at::kFloat, false});
        continue;
      }
      shlo::Value v = lowering::CastTo(ctx, results[i], ctx.outputs[i]);
      std::vector<int64_t> strides = DenseStrides(m.sizes(), m.strides());
      outputs.push_back(lowering::LayOut(b, v, strides));
      op->new_tensors.push_back({m.sizes().vec(), strides, m.scalar_type()});
      program->new_elems.push_back(ToElemType(m.scalar_type()));
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
  // A failed check names the op and its operands' shapes (the values are on the device).
  std::string where;
  for (size_t s = 0; s < call.slots.size() && !ctx.checks.empty(); ++s) {
    std::ostringstream d;
    d << c10::toString(call.slots[s].scalar_type()) << call.slots[s].sizes();
    where += (s ? ", " : "") + d.str();
  }
  for (const auto& check : ctx.checks) {
    outputs.push_back(b.Reshape(b.Convert(check.failed, shlo::ElemType::Pred), {}));
    program->check_messages.push_back(check.message + " (in " + e.name + " on " + where + ")");
    // lowering::Ctx::ErrorKind and runtime::CheckKind list the same kinds in the same order.
    program->check_kinds.push_back(static_cast<runtime::CheckKind>(check.kind));
  }
  // A write into a storage the op also reads may reuse its buffer (an in-place update).
  TORCH_CHECK(b.params().size() == program->params.size(), "tpu: ", e.name, ": parameters out of step");
  for (size_t w = 0; w < written.size(); ++w) {
    auto param = storage_params.find(written[w]);
    size_t result = first_write + w;
    if (param != storage_params.end() && b.params().at(param->second).type == outputs[result].type)
      program->aliases.emplace_back(param->second, static_cast<int>(result));
  }
  program->id = runtime::Program::NextId();
  program->name = e.name;
  for (const auto& p : b.params()) program->param_types.push_back(p.type);
  for (const auto& o : outputs) program->result_types.push_back(o.type);
  program->module_text = b.Module(outputs, program->aliases);
  program->function_text = b.Function("f" + std::to_string(program->id), outputs, false);
  program->imports = b.imports();
  return op;
}

}  // namespace tpu::aten
