// torch.compile(backend="tpu") programs (DESIGN.md "One op, three ways to run it"): Python
// (torch_tpu/compile.py) describes an FX graph of core ATen ops; every node is lowered by
// the same table eager uses, the module compiles through the runtime's memory and disk
// caches, and the program runs on tpu tensors. Inputs are read from their storages as in
// eager (the view geometry is part of the program's key); inputs the graph copies into
// (functionalized mutations) get their storage buffers replaced, so every view sees them.
#include <ATen/EmptyTensor.h>
#include <ATen/native/TypeProperties.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "../dispatch/arguments.h"
#include "graph_description.h"
#include "../dispatch/operands.h"
#include "../dispatch/precision.h"
#include "replicated_graph.h"
#include "../storage/storage_layout.h"
#include "../torch_compat.h"
#include "../../runtime/background_compile.h"
#include "../../runtime/executor.h"

namespace py = pybind11;

namespace tpu::aten {
namespace {

using lowering::Arg;
using namespace graph;
using runtime::Executor;
using runtime::ParamSource;
using runtime::Runtime;
using runtime::TpuStorage;

// Thrown when a program cannot be built for these inputs; Python runs the graph eagerly.
struct NotLowerable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::atomic<int64_t> g_graph_runs{0}, g_graph_programs{0};
// Programs compiled ahead of their graph's first run, and first runs that found theirs (a
// hit) or built another (a miss: the inputs' layout or aliasing differed from the examples').
std::atomic<int64_t> g_ahead_programs{0}, g_ahead_hits{0}, g_ahead_misses{0};
// Inputs whose storage was laid out in their own shape before a run (ShapeStorageLike).
std::atomic<int64_t> g_input_relayouts{0};

class Graph {
 public:
  explicit Graph(const py::tuple& desc) : replicated_(desc.size() > 4 ? py::object(desc[4]) : py::none()) {
    name_ = desc[0].cast<std::string>();
    for (py::handle h : desc[1]) inputs_.push_back(TypeOf(h));
    int64_t next_id = static_cast<int64_t>(inputs_.size());
    for (const GType& t : inputs_) value_types_.push_back(t);
    for (py::handle h : desc[2]) {
      auto n = h.cast<py::tuple>();
      GNode node;
      node.name = n[0].cast<std::string>();
      node.op = n[1].cast<std::string>();
      node.fn = node.op == "aten::copy_" ? nullptr : lowering::Find(node.op);
      if (node.fn) node.schema = ArgumentsOf(node.op);
      for (py::handle a : n[2]) node.args.push_back(ArgOf(a));
      for (py::handle o : n[3]) node.outs.push_back(TypeOf(o));
      node.first_id = next_id;
      next_id += static_cast<int64_t>(node.outs.size());
      for (const GType& t : node.outs) value_types_.push_back(t);
      nodes_.push_back(std::move(node));
    }
    for (py::handle h : desc[3]) {
      auto o = h.cast<py::tuple>();
      GOutput out;
      out.kind = static_cast<GOutput::Kind>(o[0].cast<int>());
      out.index = o[1].cast<int64_t>();
      outputs_.push_back(out);
    }
    for (const GOutput& o : outputs_) {
      if (o.kind != GOutput::Value) continue;
      bool seen = false;
      for (int64_t id : new_values_) seen |= id == o.index;
      if (!seen) new_values_.push_back(o.index);
    }
  }

  // Lowers every node over parameters of the inputs' logical types; returns the nodes that
  // cannot be lowered as (node index, reason). Nothing is compiled.
  std::vector<std::pair<int64_t, std::string>> Check() const {
    shlo::Builder b;
    lowering::ReplicatedLowering replicated = replicated_.Lowering();
    std::vector<shlo::Value> values(value_types_.size());
    std::vector<std::pair<int64_t, std::string>> bad;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!inputs_[i].defined) continue;  // not a tpu tensor: its users are not lowered
      try {
        values[i] = b.Param(inputs_[i].type());
      } catch (const std::exception& e) {
        bad.emplace_back(-1 - static_cast<int64_t>(i), e.what());
        return bad;
      }
    }
    std::vector<std::pair<size_t, shlo::Value>> mutations;
    std::vector<std::pair<shlo::Value, int64_t>> rng_params;
    for (size_t n = 0; n < nodes_.size(); ++n) {
      try {
        LowerNode(b, nodes_[n], values, mutations, rng_params, MatmulPrecision());
      } catch (const std::exception& e) {
        bad.emplace_back(static_cast<int64_t>(n), e.what());
        for (size_t k = 0; k < nodes_[n].outs.size(); ++k) {
          const GType& t = nodes_[n].outs[k];
          if (!t.defined) continue;
          try {
            values[nodes_[n].first_id + k] = b.Constant(0, t.type());
          } catch (const std::exception&) {
          }
        }
      }
    }
    return bad;
  }

  py::list Run(const py::list& args) {
    size_t n = inputs_.size();
    TORCH_CHECK(args.size() == n, "tpu: compiled graph ", name_, " takes ", n, " inputs, got ", args.size());
    std::vector<at::Tensor> tensors;
    tensors.reserve(n);
    int device = -1;
    for (size_t i = 0; i < n; ++i) {
      at::Tensor t = args[i].cast<at::Tensor>();
      if (inputs_[i].cpu_scalar && !t.device().is_privateuseone()) {
        TORCH_CHECK(t.dim() == 0 && t.device().is_cpu(), "tpu: compiled graph ", name_, ": input ", i,
                    " should be a 0-d CPU tensor");
        tensors.push_back(std::move(t));
        continue;
      }
      TORCH_CHECK(t.device().type() == kTpu, "tpu: compiled graph ", name_, ": input ", i, " is on ", t.device());
      if (device < 0) device = t.device().index();
      TORCH_CHECK(t.device().index() == device, "tpu: compiled graph ", name_,
                  ": inputs are on several devices (tpu:", device, " and ", t.device(), ")");
      tensors.push_back(std::move(t));
    }
    if (device < 0) device = CurrentDevice();

    // Operands: the inputs as slots (a value the open fused graph computes is needed now).
    Operands ops;
    std::vector<int64_t> key;
    auto collect = [&] {
      ops = Operands();
      key.clear();
      key.reserve(n * 8);
      std::vector<TpuStorage*> seen;
      ops.precision = MatmulPrecision();
      key.push_back(static_cast<int64_t>(ops.precision));
      for (const at::Tensor& t : tensors) {
        if (t.device().is_privateuseone() && StorageOf(t)->pending) Executor::Get().Flush("compiled graph input");
        AddTensor(ops, key, t, seen);
      }
    };
    auto find = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = programs_.find(key);
      return it != programs_.end() ? it->second : nullptr;
    };
    collect();
    std::shared_ptr<GraphProgram> program = find();
    // Programs are built for dense inputs in buffers of their own shape: an input whose
    // storage is shaped otherwise (the first step's latents, packed by a reshape of a permuted
    // tensor) is laid out so once, on the device, rather than compiling the graph again.
    if (!program && ShapeDenseInputs(tensors)) {
      collect();
      program = find();
    }
    if (!program) {
      std::vector<Slot> slots;
      slots.reserve(ops.slots.size());
      for (size_t i = 0; i < ops.slots.size(); ++i) slots.push_back(SlotOf(ops.slots[i], ops.slot_is_cpu_scalar[i]));
      py::gil_scoped_release release;  // lowering and compiling take no Python objects
      program = Build(slots, ops.precision);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!ahead_module_.empty()) (ahead_module_ == program->program->module_text ? g_ahead_hits : g_ahead_misses)++;
        ahead_module_.clear();
      }
      Compile(*program, ops.precision);
      std::lock_guard<std::mutex> lock(mu_);
      programs_[key] = program;
    }
    ops.generators.resize(program->num_rng);  // the default generator's, drawn at each run

    std::vector<at::Tensor> fresh = NewTensors(program->new_tensors, device);
    try {
      runtime::Request request = MakeRequest(program->program, ops, device, fresh);
      if (replicated_.replicated()) replicated_.Join(request, name_);
      py::gil_scoped_release release;  // a plugin may run the program on this thread
      Executor::Get().Run(request);
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& e) {
      RethrowAsTorchError(e, "compiled graph " + name_);
    }
    g_graph_runs++;

    py::list result;
    for (const GOutput& o : outputs_) {
      if (o.kind == GOutput::None) {
        result.append(py::none());
      } else if (o.kind == GOutput::Input) {
        result.append(args[o.index]);
      } else {
        for (size_t k = 0; k < new_values_.size(); ++k)
          if (new_values_[k] == o.index) result.append(py::cast(fresh[k]));
      }
    }
    return result;
  }

  // Builds the program for example inputs (AOTAutograd's fake tensors: their dtypes, sizes,
  // strides, offsets and storages) and compiles it on another thread, so that the first run,
  // whose real inputs usually have that layout, finds it compiled or compiling. Each example is
  // (cpu_scalar, dtype, sizes, strides, storage_offset, storage id, storage nbytes[, buffer dims]).
  // Returns false, compiling nothing, when the examples can't describe the inputs.
  bool CompileAhead(const py::list& examples) {
    // A replicated program compiles for its group's devices, at its first run (the rendezvous).
    if (examples.size() != inputs_.size() || replicated_.replicated()) return false;
    std::vector<Slot> slots;
    for (py::handle h : examples) {
      auto e = h.cast<py::tuple>();
      Slot slot;
      slot.cpu_scalar = e[0].cast<bool>();
      slot.dtype = e[1].cast<at::ScalarType>();
      if (!IsSupportedDtype(slot.dtype)) return false;
      slot.geometry.sizes = e[2].cast<std::vector<int64_t>>();
      slot.geometry.strides = e[3].cast<std::vector<int64_t>>();
      slot.geometry.offset = e[4].cast<int64_t>();
      slot.storage = reinterpret_cast<const void*>(e[5].cast<uintptr_t>());
      slot.storage_nbytes = e[6].cast<int64_t>();
      slot.storage_elem = ToElemType(slot.dtype);
      slot.geometry.storage_numel = slot.storage_nbytes / static_cast<int64_t>(c10::elementSize(slot.dtype));
      // Without the buffer's dims, a dense input was most likely made in its memory order, and
      // Run lays out those that were not so (ShapeStorageLike); a part of a storage most likely
      // of the tensor its strides nest in (a guess that is wrong costs a compile at the first run).
      slot.storage_dims = e.size() > 7 ? runtime::TpuStorage::ShapedDims(e[7].cast<std::vector<int64_t>>())
                                       : DenseBufferDims(slot.geometry);
      if (e.size() <= 7 && slot.storage_dims.empty())
        slot.storage_dims = NestedBufferDims(slot.geometry);
      // As Run's GeometryWithBufferOf: a view at a run-time offset that is a box of the buffer.
      if (lowering::HasRunTimeOffset(slot.geometry)) {
        slot.geometry.buffer_dims = slot.storage_dims;
        if (!lowering::IsBufferBoxAt(slot.geometry)) slot.geometry.buffer_dims.clear();
      }
      slots.push_back(std::move(slot));
    }
    shlo::Precision precision = MatmulPrecision();
    std::string module;
    {
      py::gil_scoped_release release;
      try {
        module = Build(slots, precision)->program->module_text;
      } catch (const std::exception&) {
        return false;  // the first run lowers again and reports it
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ahead_module_ = module;
    }
    g_ahead_programs++;
    runtime::CompileAhead(std::move(module), "compiled graph " + name_, "compiled ahead of its first run");
    return true;
  }

  std::string last_module() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_module_;
  }

  size_t num_programs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return programs_.size();
  }

 private:
  // What a program is built from, per input: a real tensor's geometry (Run) or an example's
  // (CompileAhead). Inputs with equal `storage` are views of one storage.
  struct Slot {
    bool cpu_scalar = false;
    at::ScalarType dtype = at::ScalarType::Float;
    const void* storage = nullptr;
    shlo::ElemType storage_elem = shlo::ElemType::F32;  // of the storage's buffer (else of the dtype)
    std::vector<int64_t> storage_dims;                   // of the storage's buffer (empty: 1-D)
    int64_t storage_nbytes = 0;
    lowering::ViewGeometry geometry;
  };

  // ShapeStorageLike on each dense input whose storage no other input views; whether any
  // storage was relaid.
  static bool ShapeDenseInputs(const std::vector<at::Tensor>& tensors) {
    std::unordered_map<const void*, int> views;
    for (const at::Tensor& t : tensors)
      if (t.device().is_privateuseone()) views[StorageOf(t)]++;
    bool relaid = false;
    for (const at::Tensor& t : tensors)
      if (t.device().is_privateuseone() && views[StorageOf(t)] == 1 && ShapeStorageLike(t)) {
        g_input_relayouts++;
        relaid = true;
      }
    return relaid;
  }

  static Slot SlotOf(const at::Tensor& t, bool cpu_scalar) {
    Slot slot;
    slot.cpu_scalar = cpu_scalar;
    slot.dtype = t.scalar_type();
    if (cpu_scalar) return slot;
    TpuStorage* s = StorageOf(t);
    slot.storage = s;
    slot.storage_elem = s->buffer ? s->elem : ToElemType(t.scalar_type());
    if (s->buffer) slot.storage_dims = s->dims;
    slot.storage_nbytes = static_cast<int64_t>(s->nbytes);
    slot.geometry = GeometryWithBufferOf(t);  // a box view at a run-time offset: its buffer's dims
    return slot;
  }

  // The graph's program for one set of input geometries; operand slots are the inputs.
  struct GraphProgram {
    std::shared_ptr<runtime::Program> program;
    std::vector<NewTensor> new_tensors;  // one per new value
    size_t num_rng = 0;                  // Rng parameters (generator slots)
  };

  // PyTorch's result_type over a node's tensor operands and Scalars (as eager computes it).
  // The operands' stand-ins are built without the dispatcher: a graph is lowered inside
  // AOTAutograd's fake mode, where each at::empty would be a call into Python.
  at::ScalarType Common(const GNode& node) const {
    at::native::ResultTypeState state;
    for (const GArg& g : node.args) {
      if (g.kind == kTensorArg) {
        const GType& t = value_types_.at(g.id);
        at::Tensor meta = at::detail::empty_meta(t.sizes.empty() ? at::IntArrayRef{} : at::IntArrayRef{1}, t.dtype);
        state = at::native::update_result_type_state(meta, state);
      }
      for (const c10::Scalar& s : g.scalars) state = at::native::update_result_type_state(s, state);
    }
    return at::native::result_type(state);
  }

  shlo::Value ScalarValue(shlo::Builder& b, const c10::Scalar& s, shlo::ElemType elem) const {
    if (s.isComplex() || shlo::IsComplex(elem)) throw lowering::Unsupported("complex scalar");
    shlo::TensorType t{elem, {}};
    if (s.isBoolean()) return b.ConstantInt(s.toBool() ? 1 : 0, t);
    if (s.isIntegral(false)) return b.ConstantInt(s.toLong(), t);
    return b.Constant(s.toDouble(), t);
  }

  // Lowers one node into `values`; a copy_ into an input records a mutation instead.
  // The node's device checks go to `checks` (when given), their messages naming the node.
  // A random node's generator argument becomes a parameter holding a Philox state (seed,
  // offset) drawn from the device's default generator at each run, as eager draws one per op;
  // `rng_params` receives the parameter and how far the generator's offset advances.
  void LowerNode(shlo::Builder& b, const GNode& node, std::vector<shlo::Value>& values,
                 std::vector<std::pair<size_t, shlo::Value>>& mutations,
                 std::vector<std::pair<shlo::Value, int64_t>>& rng_params, shlo::Precision precision,
                 std::vector<lowering::Ctx::Check>* checks = nullptr) const {
    if (node.op == "aten::copy_") {
      int64_t target = node.args.at(0).id, src = node.args.at(1).id;
      if (target < 0 || target >= static_cast<int64_t>(inputs_.size()))
        throw lowering::Unsupported("copy_ into a value that is not a graph input");
      lowering::Ctx ctx{b, {inputs_[target].type()}, shlo::ElemType::F32};
      shlo::Value v = lowering::CastTo(ctx, values.at(src), inputs_[target].type());
      mutations.emplace_back(static_cast<size_t>(target), v);
      values[node.first_id] = v;
      return;
    }
    if (!node.fn) throw lowering::Unsupported("no lowering for " + node.op);
    lowering::Ctx ctx{b, {}, shlo::ElemType::F32};
    ctx.op = node.op;
    ctx.precision = precision;
    for (const GType& t : node.outs) {
      if (!t.defined) {
        ctx.outputs.push_back({shlo::ElemType::F32, {}});
        continue;
      }
      if (!IsSupportedDtype(t.dtype)) throw lowering::Unsupported("unsupported dtype");
      ctx.outputs.push_back(t.type());
    }
    at::ScalarType common = Common(node);
    bool has_tensor = false;
    for (const GArg& g : node.args) has_tensor |= g.kind == kTensorArg || g.kind == kTensorsArg;
    if (common != at::ScalarType::Undefined && IsSupportedDtype(common)) ctx.common = ToElemType(common);
    // Scalars enter as constants of the promoted type, as eager feeds them at run time;
    // factories (no tensor operands) take the output's (computation) type: no early rounding.
    auto scalar_elem = [&](const c10::Scalar& s) {
      if (!has_tensor && !ctx.outputs.empty() && node.outs[0].defined)
        return lowering::AccumulatorType(ctx.outputs[0].elem);
      if (common != at::ScalarType::Undefined && IsSupportedDtype(common)) return ToElemType(common);
      return ToElemType(s.type());
    };
    // A Scalar the lowering specialises on (pow's exponent 2) reaches it as a static value, as
    // in eager. Scalars are constants of a compiled graph anyway: the graph (one per FX graph)
    // and its text, which keys the disk cache, hold what the lowering made of the value.
    const lowering::SpecialScalar* special = lowering::FindSpecialScalar(node.op);
    std::vector<Arg> args;
    args.reserve(node.args.size());
    for (const GArg& g : node.args) {
      Arg a = g.arg;
      std::optional<double> special_value;
      if (special && g.kind == kScalarArg && node.schema && args.size() < node.schema->names.size() &&
          node.schema->names[args.size()] == special->arg)
        special_value = SpecialScalarValue(special->special, g.scalars[0]);
      if (g.kind == kTensorArg) {
        a.value = values.at(g.id);
        if (!a.value.valid()) throw lowering::Unsupported("operand has no value");
      } else if (special_value) {
        a.kind = Arg::Kind::Double;
        a.d = *special_value;
      } else if (g.kind == kScalarArg) {
        a.value = ScalarValue(b, g.scalars[0], scalar_elem(g.scalars[0]));
      } else if (g.kind == kTensorsArg) {
        for (int64_t id : g.ids) a.values.push_back(id < 0 ? shlo::Value{} : values.at(id));
      } else if (g.kind == kScalarsArg) {
        for (const c10::Scalar& s : g.scalars) a.values.push_back(ScalarValue(b, s, scalar_elem(s)));
      } else if (g.kind == kGeneratorArg) {
        int64_t increment = 0;
        for (const GType& t : node.outs)
          if (t.defined) increment += c10::multiply_integers(t.sizes);
        a.value = b.Param({shlo::ElemType::U64, {2}});
        rng_params.emplace_back(a.value, increment);
      }
      args.push_back(std::move(a));
    }
    std::vector<shlo::Value> results = node.fn(ctx, lowering::Args(args, node.schema ? &node.schema->names : nullptr));
    if (results.size() != node.outs.size()) {
      throw std::runtime_error("lowering returned " + std::to_string(results.size()) + " results, expected " +
                               std::to_string(node.outs.size()));
    }
    for (size_t k = 0; k < results.size(); ++k) {
      if (!node.outs[k].defined) continue;
      values[node.first_id + k] = lowering::CastTo(ctx, results[k], ctx.outputs[k]);
    }
    if (!checks || ctx.checks.empty()) return;
    std::string where;
    for (const GArg& g : node.args) {
      if (g.kind != kTensorArg || g.id < 0) continue;
      const GType& t = value_types_[g.id];
      std::ostringstream d;
      d << c10::toString(t.dtype) << c10::IntArrayRef(t.sizes);
      where += (where.empty() ? "" : ", ") + d.str();
    }
    for (lowering::Ctx::Check& c : ctx.checks) {
      c.message += " (in " + node.op + " on " + where + ", node '" + node.name + "' of compiled graph " + name_ + ")";
      checks->push_back(std::move(c));
    }
  }

  // After a failed compile: compiles node after node alone to name the first one the plugin
  // rejects (within a time budget; this runs only on the error path).
  std::string LocateCompileFailure(shlo::Precision precision) const {
    auto start = std::chrono::steady_clock::now();
    for (const GNode& node : nodes_) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) break;
      if (!node.fn) continue;
      shlo::Builder b;
      std::vector<shlo::Value> values(value_types_.size());
      auto param = [&](int64_t id) {
        if (id >= 0 && !values[id].valid() && value_types_[id].defined) values[id] = b.Param(value_types_[id].type());
      };
      std::vector<std::pair<size_t, shlo::Value>> mutations;
      std::vector<std::pair<shlo::Value, int64_t>> rng_params;
      std::vector<shlo::Value> results;
      try {
        for (const GArg& g : node.args) {
          param(g.id);
          for (int64_t id : g.ids) param(id);
        }
        LowerNode(b, node, values, mutations, rng_params, precision);
        for (size_t k = 0; k < node.outs.size(); ++k)
          if (node.outs[k].defined) results.push_back(values[node.first_id + k]);
        if (results.empty()) continue;
        Runtime::Get().Compile(b.Module(results), node.op);
      } catch (const std::exception&) {
        return ", first failing node '" + node.name + "' (" + node.op + ")";
      }
    }
    return "";
  }

  // Lowers the graph over inputs laid out as `slots`; the program is not compiled yet.
  std::shared_ptr<GraphProgram> Build(const std::vector<Slot>& slots, shlo::Precision precision) const {
    auto gp = std::make_shared<GraphProgram>();
    auto program = std::make_shared<runtime::Program>();
    gp->program = program;
    program->name = "compiled graph " + name_;
    shlo::Builder b;
    lowering::ReplicatedLowering replicated = replicated_.Lowering();
    std::vector<shlo::Value> values(value_types_.size());
    std::unordered_map<const void*, shlo::Value> storage_values;  // 1-D, as views read them
    std::unordered_map<const void*, std::vector<int64_t>> storage_dims;  // of their buffers
    std::unordered_map<size_t, shlo::Value> offset_values;  // by input: run-time view offsets
    auto offset_value = [&](size_t input) -> shlo::Value {
      auto it = offset_values.find(input);
      if (it != offset_values.end()) return it->second;
      program->params.push_back({ParamSource::Offset, static_cast<int>(input), shlo::ElemType::S64});
      return offset_values[input] = b.Param({shlo::ElemType::S64, {}});
    };
    // Inputs that share a storage the graph writes share its parameter, so each view sees the
    // writes. Any other input has a parameter of its own, the same buffer passed twice where
    // two inputs are views of one storage: the program then does not depend on which inputs
    // alias, which a program compiled ahead from example inputs cannot know.
    std::unordered_set<const void*> written_storages;
    std::unordered_map<const void*, int> storage_params;  // by parameter key: its parameter index
    for (const GNode& node : nodes_)
      if (node.op == "aten::copy_") {
        int64_t target = node.args.at(0).id;
        if (target >= 0 && target < static_cast<int64_t>(slots.size())) written_storages.insert(slots[target].storage);
      }
    for (size_t i = 0; i < slots.size(); ++i) {
      const Slot& slot = slots[i];
      shlo::ElemType want = ToElemType(slot.dtype);
      if (slot.cpu_scalar) {
        program->params.push_back({ParamSource::Scalar, static_cast<int>(i), want});
        values[i] = b.Param({want, {}});
        continue;
      }
      const void* param_key = written_storages.count(slot.storage) ? slot.storage : &slot;
      auto it = storage_values.find(param_key);
      shlo::Value storage;
      if (it != storage_values.end()) {
        storage = it->second;
      } else {
        shlo::ElemType elem = slot.storage_elem;
        storage_params[param_key] = static_cast<int>(program->params.size());
        program->params.push_back({ParamSource::Storage, static_cast<int>(i), elem});
        std::vector<int64_t> dims = slot.storage_dims;
        if (dims.empty()) dims = {slot.storage_nbytes / static_cast<int64_t>(shlo::ByteSize(elem))};
        storage = lowering::StorageParam(b, elem, dims);
        storage_values[param_key] = storage;
        storage_dims[param_key] = dims;
      }
      values[i] = lowering::ReadViewOf(b, storage, want, slot.geometry, [&] { return offset_value(i); });
    }
    std::vector<std::pair<size_t, shlo::Value>> mutations;
    std::vector<std::pair<shlo::Value, int64_t>> rng_params;
    std::vector<lowering::Ctx::Check> checks;
    for (const GNode& node : nodes_) {
      try {
        size_t rng_before = rng_params.size();
        LowerNode(b, node, values, mutations, rng_params, precision, &checks);
        for (size_t r = rng_before; r < rng_params.size(); ++r) {
          // A state the node's lowering never read leaves the generator where it was.
          int64_t increment = b.Uses(rng_params[r].first) ? rng_params[r].second : 0;
          program->params.push_back({ParamSource::Rng, static_cast<int>(r), shlo::ElemType::U64, increment});
        }
      } catch (const lowering::Unsupported& e) {
        throw NotLowerable("node '" + node.name + "' (" + node.op + "): " + e.what());
      } catch (const c10::Error& e) {
        TORCH_CHECK(false, "tpu: torch.compile: lowering node '", node.name, "' (", node.op, ") failed: ",
                    e.what_without_backtrace());
      } catch (const std::exception& e) {
        TORCH_CHECK(false, "tpu: torch.compile: lowering node '", node.name, "' (", node.op, ") failed: ", e.what());
      }
    }
    gp->num_rng = rng_params.size();
    std::vector<shlo::Value> results;
    for (int64_t id : new_values_) {
      const GType& t = value_types_[id];
      std::vector<int64_t> strides = DenseStrides(t.sizes, t.strides);
      if (!values[id].valid()) throw NotLowerable("graph output has no value");
      results.push_back(lowering::LayOut(b, values[id], strides));
      gp->new_tensors.push_back({t.sizes, strides, t.dtype});
      program->new_elems.push_back(ToElemType(t.dtype));
    }
    // Mutated inputs: write each new value into its storage (views write in place).
    std::vector<const void*> written;
    for (const auto& [input, value] : mutations) {
      const void* s = slots[input].storage;
      lowering::ViewGeometry g = slots[input].geometry;
      shlo::Value v = value;
      shlo::Value updated, buffer;
      if (lowering::IsWholeStorage(g) && !storage_values.count(s)) {
        updated = b.Reshape(v, {g.storage_numel});
        buffer = lowering::AsBuffer(b, v);
      } else {
        // A box write needs the buffer in the shape the key saw (not left 1-D by another write).
        if (g.buffer_dims != storage_dims.at(s)) g.buffer_dims.clear();
        updated = lowering::WriteViewOf(b, storage_values.at(s), g, v, [&] { return offset_value(input); });
        buffer = lowering::WrittenBuffer(b, g, v, updated, storage_dims.at(s));
      }
      storage_values[s] = updated;
      storage_dims[s] = buffer.type.dims;
      size_t w = 0;
      while (w < written.size() && written[w] != s) ++w;
      if (w == written.size()) {
        written.push_back(s);
        program->writes.push_back({static_cast<int>(input), buffer.type.elem});
        results.push_back(buffer);
      } else {
        results[new_values_.size() + w] = buffer;
        program->writes[w].elem = buffer.type.elem;
      }
    }
    // One i1 result per device check, after the writes (device_checks.h): a failed check
    // guards every value the graph writes.
    for (const lowering::Ctx::Check& c : checks) {
      results.push_back(b.Reshape(b.Convert(c.failed, shlo::ElemType::Pred), {}));
      program->check_messages.push_back(c.message);
      program->check_kinds.push_back(static_cast<runtime::CheckKind>(c.kind));
    }
    // A mutated input's new value may reuse its storage's buffer (an optimizer step, a cache
    // slot). Inputs' parameters are made before any node's (Rng), each in step with
    // program->params, so a storage parameter's index is the module's too.
    for (size_t w = 0; w < written.size(); ++w) {
      auto param = storage_params.find(written[w]);
      size_t result = new_values_.size() + w;
      if (param != storage_params.end() && b.params().at(param->second).type == results[result].type)
        program->aliases.emplace_back(param->second, static_cast<int>(result));
    }
    program->id = runtime::Program::NextId();
    for (const auto& p : b.params()) program->param_types.push_back(p.type);
    for (const auto& r : results) program->result_types.push_back(r.type);
    std::vector<std::string> ops;
    for (const GNode& node : nodes_) ops.push_back(node.op);
    replicated_.Declare(*program, b.Module(results, program->aliases), ops);
    return gp;
  }

  void Compile(GraphProgram& gp, shlo::Precision precision) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_module_ = gp.program->module_text;
    }
    try {
      if (!gp.program->replicas) gp.program->Compiled();  // else at the group's rendezvous
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& e) {
      RethrowAsTorchError(e, "tpu: torch.compile: compiling graph " + name_ + LocateCompileFailure(precision));
    }
    g_graph_programs++;
  }

  std::string name_;
  std::vector<GType> inputs_;
  std::vector<GNode> nodes_;
  std::vector<GOutput> outputs_;
  std::vector<GType> value_types_;
  std::vector<int64_t> new_values_;  // distinct value ids returned as new tensors
  ReplicatedGraph replicated_;  // over the in-process groups whose collectives the graph holds
  mutable std::mutex mu_;
  std::string last_module_;  // the text of the latest program built (for debugging)
  std::string ahead_module_;  // compiled ahead (CompileAhead) and not yet compared with a first run's
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<GraphProgram>, KeyHash> programs_;
};

}  // namespace

void RegisterGraphBindings(py::module_& m) {
  py::register_exception<NotLowerable>(m, "GraphNotLowerable", PyExc_NotImplementedError);
  py::class_<Graph, std::shared_ptr<Graph>>(m, "_Graph")
      .def(py::init<const py::tuple&>())
      .def("check", &Graph::Check)
      .def("run", &Graph::Run)
      .def("compile_ahead", &Graph::CompileAhead)
      .def_property_readonly("num_programs", &Graph::num_programs)
      .def_property_readonly("module_text", &Graph::last_module);
  m.def(
      "_graph_stats",
      [](bool reset) {
        py::dict d;
        d["compile_graph_runs"] = reset ? g_graph_runs.exchange(0) : g_graph_runs.load();
        d["compile_programs_built"] = reset ? g_graph_programs.exchange(0) : g_graph_programs.load();
        d["compile_ahead_programs"] = reset ? g_ahead_programs.exchange(0) : g_ahead_programs.load();
        d["compile_ahead_hits"] = reset ? g_ahead_hits.exchange(0) : g_ahead_hits.load();
        d["compile_ahead_misses"] = reset ? g_ahead_misses.exchange(0) : g_ahead_misses.load();
        d["compile_input_relayouts"] = reset ? g_input_relayouts.exchange(0) : g_input_relayouts.load();
        return d;
      },
      py::arg("reset") = false);
  m.def("_graph_only_ops", &lowering::GraphOnlyOps);
  // The argument model (arguments.h) as torch_tpu/compile.py reads it: each argument's name
  // and role, and the kinds of the description it sends back, by name.
  m.def("_op_arguments", [](const std::string& op) -> py::object {
    auto args = ArgumentsOf(op);
    if (!args) return py::none();
    py::list roles;
    for (ArgRole r : args->roles) roles.append(RoleName(r));
    return py::make_tuple(args->names, roles);
  });
  m.def("_arg_kinds", [] {
    py::dict d;
    const char* names[] = {"none", "tensor", "scalar", "int", "double", "bool", "ints", "doubles", "bools",
                           "str", "tensors", "scalars", "dtype", "layout", "memory_format", "generator"};
    for (int i = 0; i <= kGeneratorArg; ++i) d[names[i]] = i;
    return d;
  });
}

}  // namespace tpu::aten
