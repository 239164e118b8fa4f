#include "fused_graph.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "background_compile.h"
#include "dump.h"
#include "env.h"
#include "executor.h"
#include "metrics.h"
#include "profiler_events.h"

namespace tpu::runtime {

// A whole graph's program. One compiling in the background is registered at once, so that
// flushes of its structure meanwhile run op by op instead of queueing it again.
struct FusedProgram {
  enum State { kCompiling, kReady, kFailed };
  std::atomic<int> state{kReady};
  pjrt::ExecutablePtr exe;  // set before state becomes kReady
  CompileTicket ticket;     // while compiling in the background
  // Flushes of this structure that ran op by op (before and while it compiled); reported in
  // torch_tpu.metrics() when its whole program first runs. Each device has its own graph and
  // lock, and the rank threads of a group flush the same structure on their devices at once:
  // `mu` guards these fields and the ticket.
  std::mutex mu;
  int64_t op_by_op_runs = 0;
  int64_t waits_while_compiling = 0;
  double op_by_op_s = 0;  // time those flushes spent running op by op since the compile was queued
  size_t num_ops = 0;
  bool switched = false;
};

namespace {

// How many times a graph structure must be flushed before it is compiled whole
// (TORCH_TPU_FUSED_COMPILE_AFTER; 1 compiles every graph at once).
int64_t FusedCompileAfter() {
  static int64_t after = EnvInt("TORCH_TPU_FUSED_COMPILE_AFTER", 1, INT64_MAX).value_or(2);
  return after;
}

// When a flush stops running its structure op by op and finishes the structure's background
// compile itself: once at least TORCH_TPU_FUSED_WAIT_AFTER (default 3; 0: never) flushes of it
// ran op by op while it compiled, AND those flushes together spent TORCH_TPU_FUSED_WAIT_RATIO
// (default 1; 0: the count alone decides) times the structure's expected compile time running
// op by op. A structure that keeps repeating is a loop's step, whose whole program is what makes
// fused mode pay off, and the worker runs at nice 19: on a fully loaded machine it barely ran (in
// bench/accelerator.py --small none of 90 flushes ever ran a whole program), and on an
// accelerator a hot step op by op is many times slower than its whole program. But a count
// alone made every structure of a call wait together: the 5th generate() of a fresh process
// compiled 49 structures in the flushes (15 s) whose op-by-op runs had cost 2 ms each. Waiting
// once the op-by-op time has paid for a compile (ski rental) bounds what running op by op can
// lose to about twice the compile, and a structure the op-by-op path serves cheaply never
// waits. Only that structure's compile is finished: a job no worker has started compiles in the
// flush, ahead of the queue; one a worker runs is waited for at the caller's priority.
int64_t FusedWaitAfter() {
  static int64_t after = EnvInt("TORCH_TPU_FUSED_WAIT_AFTER", 0, INT64_MAX).value_or(3);
  return after;
}

int64_t FusedWaitRatio() {
  static int64_t ratio = EnvInt("TORCH_TPU_FUSED_WAIT_RATIO", 0, INT64_MAX).value_or(1);
  return ratio;
}

// Whole-graph compiles measured so far (on workers or in flushes), for the expected compile
// time of a structure still compiling.
std::atomic<int64_t> g_fused_compile_us{0};
std::atomic<int64_t> g_fused_compile_ops{0};

// The expected compile time of a whole graph of `num_ops` ops: the measured whole-graph compile
// time per op, or before any whole graph has compiled, the mean compile time of this process's
// programs (a whole graph takes at least as long as one op's program); 0 (the count alone
// decides) in a process that has compiled nothing yet, every program coming from the disk cache.
double ExpectedCompileSeconds(size_t num_ops) {
  int64_t ops = g_fused_compile_ops.load(std::memory_order_relaxed);
  if (ops > 0) return 1e-6 * static_cast<double>(g_fused_compile_us.load(std::memory_order_relaxed)) * num_ops / ops;
  const Metrics& m = GetMetrics();
  int64_t programs = m.programs_compiled.load();
  return programs > 0 ? 1e-6 * static_cast<double>(m.compile_time_us.load()) / programs : 0.0;
}

// Whether this flush finishes `fused`'s compile rather than run its ops one by one again.
bool WaitForCompile(FusedProgram& fused) {
  if (FusedWaitAfter() == 0 || ++fused.waits_while_compiling < FusedWaitAfter()) return false;
  return fused.op_by_op_s >= static_cast<double>(FusedWaitRatio()) * ExpectedCompileSeconds(fused.num_ops);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::mutex g_fused_mu;
std::unordered_map<std::vector<int64_t>, std::shared_ptr<FusedProgram>, KeyHash> g_fused;
std::unordered_map<size_t, int> g_seen;  // structure hash -> flushes seen (not compiled yet)

}  // namespace

void FusedGraph::Record(const Request& request) {
  Program& p = *request.program;
  if (device_ < 0) device_ = request.device;
  // What this op writes is guarded by the checks of what it reads (pending values included:
  // their checks were set when they were recorded) and by its own (device_checks.h).
  CheckSet guards = Executor::InputChecks(request);
  std::vector<CheckPtr> fresh = Executor::NewChecks(p, request.device);
  for (const CheckPtr& c : fresh) guards.Add(c);
  // Arguments: a pending storage's value from the graph, or a new graph parameter.
  std::vector<int> args;
  args.reserve(p.params.size());
  for (size_t i = 0; i < p.params.size(); ++i) {
    const ParamSource& src = p.params[i];
    if (src.kind == ParamSource::Storage) {
      TpuStorage* s = request.storages[src.slot];
      auto it = storage_value_.find(s->uid);
      if (it != storage_value_.end()) {
        args.push_back(it->second);
        continue;
      }
      int id = AddParam(s->Materialize(src.elem), p.param_types[i], static_cast<int64_t>(s->uid));
      storage_value_[s->uid] = id;
      args.push_back(id);
    } else {
      args.push_back(AddParam(request.host_params[i], p.param_types[i]));
    }
  }
  int first_result = static_cast<int>(value_types_.size());
  for (const auto& t : p.result_types) value_types_.push_back(t);
  calls_.push_back({&p, args, first_result});
  programs_.push_back(request.program);
  key_.push_back(p.id);
  key_.push_back(static_cast<int64_t>(args.size()));
  for (int a : args) key_.push_back(a);

  // Results: fresh tensors and written storages now hold values of this graph.
  int r = first_result;
  for (size_t i = 0; i < request.new_storages.size(); ++i, ++r)
    MarkPending(request.new_storages[i], r, p.new_elems[i], value_types_[r].dims, guards);
  for (const WriteTarget& w : p.writes) {
    MarkPending(request.storages[w.slot], r, w.elem, value_types_[r].dims, guards);
    ++r;
  }
  for (const CheckPtr& c : fresh) checks_.push_back({r++, c});
}

void FusedGraph::Flush(const char* cause) {
  if (calls_.empty()) return;
  profiler::Scope flush(profiler::Kind::Flush, "tpu flush: fused graph");
  if (flush.on()) {
    flush.Rename("tpu flush: fused graph of " + std::to_string(calls_.size()) + " ops");
    flush.Arg("cause", cause);
    flush.Device(device_);
  }
  auto& metrics = GetMetrics();
  metrics.CountSync(std::string("fused graph: ") + cause);
  std::vector<int> outputs;
  Targets targets;
  for (auto& [uid, weak] : pending_order_) {
    std::shared_ptr<TpuStorage> s = weak.lock();
    if (!s || !s->pending) continue;  // died before the sync: its value is never needed
    outputs.push_back(storage_value_.at(uid));
    targets.emplace_back(std::move(s), elem_.at(uid));
  }
  key_.push_back(-1);
  for (int o : outputs) key_.push_back(o);
  for (const auto& c : checks_) key_.push_back(c.first);
  std::vector<std::pair<int, int>> aliases = Aliases(targets);
  key_.push_back(-2);  // the module marks them: part of its structure
  for (const auto& [param, output] : aliases) {
    key_.push_back(param);
    key_.push_back(output);
  }

  metrics.fused_graphs_run++;
  metrics.fused_ops += static_cast<int64_t>(calls_.size());
  // A graph of one op is that op's program: a whole-graph compile would only duplicate it.
  if (calls_.size() == 1) {
    metrics.fused_graphs_op_by_op++;
    RunOneByOne(outputs, targets);
    return;
  }
  std::shared_ptr<FusedProgram> fused;
  bool hot = true;
  int64_t seen = 0;
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
      seen = ++g_seen[KeyHash()(key_)];
      hot = seen >= FusedCompileAfter();
    }
  }
  CompileTicket finish;
  if (fused && fused->state.load(std::memory_order_acquire) == FusedProgram::kCompiling) {
    std::lock_guard<std::mutex> lock(fused->mu);
    if (fused->ticket && WaitForCompile(*fused)) finish = std::move(fused->ticket);
  }
  if (finish) {
    metrics.fused_compile_waits++;
    FinishNow(finish);  // sets the state
  }
  if (fused && fused->state.load(std::memory_order_acquire) != FusedProgram::kReady) {
    metrics.fused_graphs_op_by_op++;  // still compiling in the background, or it failed to
    auto start = std::chrono::steady_clock::now();
    RunOneByOne(outputs, targets);
    std::lock_guard<std::mutex> lock(fused->mu);
    fused->op_by_op_runs++;
    fused->op_by_op_s += SecondsSince(start);
    return;
  }
  if (!fused) {
    fused = std::make_shared<FusedProgram>();
    std::string module = ModuleText(outputs, aliases);
    std::string what = "fused graph of " + std::to_string(calls_.size()) + " ops";
    std::string detail = DumpDir().empty() ? "" : Functions();
    bool later = false;
    try {
      // Near the process's mapping budget a whole graph is not loaded at all: its ops run
      // through per-op programs, which other graphs share (Runtime::MappingsTight).
      Runtime& rt = Runtime::Get();
      if (!rt.MappingsTight()) fused->exe = rt.Cached(module, what, detail);
      if (!fused->exe && hot && !rt.MappingsTight()) {
        later = BackgroundCompileEnabled();
        if (!later) fused->exe = rt.Compile(module, what, /*notice=*/true, detail);
      }
    } catch (const std::exception&) {
      // Run the ops one by one instead: those before the culprit compute their values, and
      // the culprit raises its own error, naming it.
      RunOneByOne(outputs, targets);
      return;
    }
    fused->op_by_op_runs = seen - 1;  // the flushes of this structure before this one
    if (later) {
      fused->op_by_op_runs++;  // this one too
      fused->num_ops = calls_.size();
      CompileLater(std::move(module), what, std::move(detail), fused);
      metrics.fused_graphs_compiled++;  // counted when decided, as a compile in the flush was
      metrics.fused_graphs_op_by_op++;
      auto start = std::chrono::steady_clock::now();
      RunOneByOne(outputs, targets);
      std::lock_guard<std::mutex> lock(fused->mu);
      fused->op_by_op_s += SecondsSince(start);
      return;
    }
    if (!fused->exe) {  // seen once, and not in the disk cache
      metrics.fused_graphs_op_by_op++;
      RunOneByOne(outputs, targets);
      return;
    }
    std::lock_guard<std::mutex> lock(g_fused_mu);
    g_fused[key_] = fused;
    if (hot) metrics.fused_graphs_compiled++;
  }
  {
    std::lock_guard<std::mutex> lock(fused->mu);
    if (!fused->switched) {
      fused->switched = true;
      metrics.CountFusedSwitch(fused->op_by_op_runs);
    }
  }
  Runtime& rt = Runtime::Get();
  rt.AwaitRoom(device_);
  std::vector<pjrt::BufferPtr> params = std::move(params_);  // alive until Execute returns
  std::vector<PJRT_Buffer*> raw;
  for (const auto& b : params) raw.push_back(b->raw());
  std::vector<bool> donated =
      Executor::Donations(aliases, params, [&](int, int output) { return targets[output].first.get(); });
  int device = device_;
  std::vector<std::pair<int, CheckPtr>> checks = std::move(checks_);
  Runtime::Label label{programs_.back(), calls_.size()};
  std::string what = "fused graph of " + std::to_string(calls_.size()) + " ops";
  Reset();  // before running: a failure must not leave the graph half-flushed
  std::vector<pjrt::BufferPtr> outs;
  try {
    outs = rt.Execute(*fused->exe, device, raw, std::move(label), donated);
  } catch (const std::exception& ex) {
    std::string message = "tpu: " + what + " failed: " + ex.what();
    for (auto& t : targets) t.first->MarkFailed(message);
    for (auto& c : checks) c.second->Abandon();
    throw;
  }
  metrics.executions++;
  for (size_t i = 0; i < targets.size(); ++i) targets[i].first->AssignComputed(outs[i], targets[i].second);
  for (size_t i = 0; i < checks.size(); ++i) checks[i].second->SetFlag(outs[targets.size() + i]);
}

// Registers `fused` as compiling under the current key and queues its module; flushes of the
// structure run op by op until the worker marks it ready (or failed: then always op by op).
std::string FusedGraph::Functions() const {
  std::vector<int> order;
  std::unordered_map<int, std::pair<const Program*, int>> seen;  // by id: the program, its calls
  for (const Call& call : calls_) {
    auto [it, fresh] = seen.try_emplace(call.program->id, call.program, 0);
    if (fresh) order.push_back(call.program->id);
    it->second.second++;
  }
  std::string text = "functions (@f<id>: the op, its calls):";
  for (int id : order)
    text += "\n@f" + std::to_string(id) + ": " + seen[id].first->name + " x" + std::to_string(seen[id].second);
  return text;
}

void FusedGraph::CompileLater(std::string module, const std::string& what, std::string detail,
                              const std::shared_ptr<FusedProgram>& fused) {
  fused->state.store(FusedProgram::kCompiling, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(g_fused_mu);
    g_fused[key_] = fused;
  }
  CompileTicket ticket = CompileInBackground(
      std::move(module), what,
      [fused](pjrt::ExecutablePtr exe, double seconds) {
        bool ok = static_cast<bool>(exe);
        if (ok) {
          g_fused_compile_us += static_cast<int64_t>(seconds * 1e6);
          g_fused_compile_ops += static_cast<int64_t>(fused->num_ops);
        }
        fused->exe = std::move(exe);
        fused->state.store(ok ? FusedProgram::kReady : FusedProgram::kFailed, std::memory_order_release);
      },
      std::move(detail));
  std::lock_guard<std::mutex> lock(fused->mu);
  fused->ticket = std::move(ticket);
}

// The recorded calls, each through its own op's program; on a failure every value not yet
// computed is marked failed (reading it raises the error) and the error propagates.
void FusedGraph::RunOneByOne(const std::vector<int>& outputs, const Targets& targets) {
  std::vector<pjrt::BufferPtr> values(value_types_.size());
  for (size_t i = 0; i < param_ids_.size(); ++i) values[param_ids_[i]] = params_[i];
  std::vector<Call> calls = std::move(calls_);
  std::vector<std::shared_ptr<Program>> programs = std::move(programs_);
  std::vector<std::pair<int, CheckPtr>> checks = std::move(checks_);
  int device = device_;
  Reset();
  Runtime& rt = Runtime::Get();
  auto assign_computed = [&] {
    for (size_t i = 0; i < targets.size(); ++i)
      if (values[outputs[i]]) targets[i].first->AssignComputed(values[outputs[i]], targets[i].second);
  };
  // A value neither kept nor checked is dropped after its last use, as XLA would.
  std::vector<size_t> last_use(values.size(), calls.size());
  for (size_t k = 0; k < calls.size(); ++k)
    for (int a : calls[k].args) last_use[a] = k;
  for (int o : outputs) last_use[o] = calls.size();
  for (const auto& ch : checks) last_use[ch.first] = calls.size();
  // The old buffers of the storages this graph writes: once the graph's last read of one is
  // done nobody reads it again (a reader of a pending storage waits for this flush).
  std::unordered_set<const pjrt::Buffer*> replaced;
  for (const auto& t : targets) {
    std::lock_guard<std::mutex> lock(t.first->mu);
    if (t.first->buffer) replaced.insert(t.first->buffer.get());
  }
  // An op's write may take over the buffer of the value it updates (Program::aliases) at that
  // value's last use, when only `values` (and for a parameter, its replaced storage) holds it.
  auto donations = [&](const Call& c, size_t k) {
    std::vector<bool> donated;
    if (!Executor::DonationEnabled()) return donated;
    for (const auto& [param, result] : c.program->aliases) {
      int a = c.args[param];
      if (last_use[a] != k || std::count(c.args.begin(), c.args.end(), a) != 1) continue;
      long holders = values[a].use_count();
      if (holders != 1 && !(holders == 2 && replaced.count(values[a].get()))) continue;
      if (donated.empty()) donated.resize(c.args.size(), false);
      donated[param] = true;
      GetMetrics().donated_buffers++;
    }
    return donated;
  };
  for (size_t k = 0; k < calls.size(); ++k) {
    const Call& c = calls[k];
    try {
      rt.AwaitRoom(device);
      std::vector<PJRT_Buffer*> raw;
      for (int a : c.args) raw.push_back(values[a]->raw());
      std::vector<pjrt::BufferPtr> outs =
          rt.Execute(*c.program->Compiled(), device, raw, {programs[k]}, donations(c, k));
      GetMetrics().executions++;
      for (size_t i = 0; i < outs.size(); ++i) values[c.first_result + static_cast<int>(i)] = std::move(outs[i]);
      for (int a : c.args)
        if (last_use[a] == k) values[a].reset();
    } catch (const std::exception& ex) {
      assign_computed();
      std::string message = std::string("tpu: ") + c.program->name + " (deferred in a fused graph) failed: " + ex.what();
      for (size_t i = 0; i < targets.size(); ++i)
        if (!values[outputs[i]]) targets[i].first->MarkFailed(message);
      for (auto& [id, check] : checks) {
        if (values[id]) check->SetFlag(values[id]);
        else check->Abandon();
      }
      throw std::runtime_error(message);
    }
  }
  assign_computed();
  for (auto& [id, check] : checks) check->SetFlag(values[id]);
}

int FusedGraph::AddParam(pjrt::BufferPtr buffer, const shlo::TensorType& type, int64_t uid) {
  if (uid >= 0) param_of_storage_[static_cast<uint64_t>(uid)] = static_cast<int>(params_.size());
  int id = static_cast<int>(value_types_.size());
  value_types_.push_back(type);
  param_ids_.push_back(id);
  params_.push_back(std::move(buffer));
  return id;
}

void FusedGraph::MarkPending(TpuStorage* s, int value, shlo::ElemType elem, const std::vector<int64_t>& dims,
                             const CheckSet& guards) {
  s->pending = true;
  s->elem = elem;
  s->dims = TpuStorage::ShapedDims(dims);
  s->SetChecks(guards);
  storage_value_[s->uid] = value;
  elem_[s->uid] = elem;
  if (pending_uids_.insert(s->uid).second) pending_order_.emplace_back(s->uid, s->weak_from_this());
}

std::vector<std::pair<int, int>> FusedGraph::Aliases(const Targets& targets) const {
  std::vector<std::pair<int, int>> aliases;
  for (size_t i = 0; i < targets.size(); ++i) {
    auto param = param_of_storage_.find(targets[i].first->uid);
    if (param == param_of_storage_.end()) continue;
    int value = storage_value_.at(targets[i].first->uid);
    if (value_types_[param_ids_[param->second]] == value_types_[value])
      aliases.emplace_back(param->second, static_cast<int>(i));
  }
  return aliases;
}

std::string FusedGraph::ModuleText(const std::vector<int>& outputs, const std::vector<std::pair<int, int>>& aliases) {
  refs_.clear();
  std::string functions, body;
  std::unordered_set<int> emitted;
  std::unordered_set<std::string> imported;
  std::string params;
  for (size_t i = 0; i < param_ids_.size(); ++i) {
    refs_[param_ids_[i]] = "%p" + std::to_string(i);
    params += (i ? ", " : "") + refs_[param_ids_[i]] + ": " + value_types_[param_ids_[i]].str();
    for (const auto& [param, output] : aliases)
      if (param == static_cast<int>(i)) params += " {tf.aliasing_output = " + std::to_string(output) + " : i32}";
  }
  for (size_t c = 0; c < calls_.size(); ++c) {
    const Call& call = calls_[c];
    const Program& p = *call.program;
    if (emitted.insert(p.id).second) {
      functions += p.function_text;
      for (const auto& [import_name, text] : p.imports)
        if (imported.insert(import_name).second) functions += text;
    }
    std::string name = "%c" + std::to_string(c);
    size_t n = p.result_types.size();
    std::string line = "    ";
    if (n == 1) line += name + " = ";
    else if (n > 1) line += name + ":" + std::to_string(n) + " = ";
    line += "\"func.call\"(";
    std::string arg_types;
    for (size_t i = 0; i < call.args.size(); ++i) {
      line += (i ? ", " : "") + refs_.at(call.args[i]);
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
    refs += (i ? ", " : "") + refs_.at(results[i]);
  }
  std::string main = "  func.func public @main(" + params + ") -> (" + types + ") {\n" + body +
                     "    \"func.return\"(" + refs + ") : (" + types + ") -> ()\n  }\n";
  return shlo::WrapModule(functions + main);
}

// Empties the graph. Its storages stay pending: the flush that called this hands each its
// value or its failure (a reader on another thread that saw `pending` cleared before the value
// landed would read the previous buffer).
void FusedGraph::Reset() {
  device_ = -1;
  calls_.clear();
  programs_.clear();
  params_.clear();
  param_ids_.clear();
  param_of_storage_.clear();
  value_types_.clear();
  storage_value_.clear();
  elem_.clear();
  pending_order_.clear();
  pending_uids_.clear();
  checks_.clear();
  key_.clear();
}

}  // namespace tpu::runtime
