#include "executor.h"

#include <cstdlib>
#include <optional>

#include "collective_rendezvous.h"
#include "env.h"
#include "fused_graph.h"
#include "metrics.h"
#include "runtime.h"

namespace tpu::runtime {
namespace {

// Fused mode runs the open graph once it holds this many ops (TORCH_TPU_FUSED_MAX_OPS).
int64_t FusedOpLimit() {
  static int64_t limit = EnvInt("TORCH_TPU_FUSED_MAX_OPS", 1, INT64_MAX).value_or(1000);
  return limit;
}

thread_local int t_graph_locks = 0;


// graph_mu_, counted per thread for HoldsGraph.
class GraphLock {
 public:
  explicit GraphLock(std::recursive_mutex& mu) : lock_(mu) { ++t_graph_locks; }
  ~GraphLock() { --t_graph_locks; }

 private:
  std::lock_guard<std::recursive_mutex> lock_;
};

}  // namespace

bool Executor::HoldsGraph() { return t_graph_locks > 0; }

bool Executor::DonationEnabled() {
  static bool enabled = EnvInt("TORCH_TPU_DONATE", 0, 1).value_or(1) != 0;
  return enabled;
}

int Program::NextId() {
  static std::atomic<int> next_id{0};
  return next_id++;
}

// A per-op program compiled in fused mode mostly runs a graph's first flushes, until the whole
// graph's program is ready, or ops whose shapes change every step (a growing sequence): it is
// compiled quickly where that gives the same values (compile_effort.h). In strict and debug
// modes per-op programs are the steady state and get the full effort.
// TORCH_TPU_QUICK_OP_COMPILE=1 compiles exact per-op programs quickly in every mode, =0 never.
static Runtime::Effort PerOpEffort(const std::string& module_text) {
  static std::optional<int64_t> setting = EnvInt("TORCH_TPU_QUICK_OP_COMPILE", 0, 1);
  bool wanted = setting ? *setting == 1 : Executor::Get().mode() == Mode::kFused;
  return wanted && ExactAtAnyEffort(module_text) ? Runtime::Effort::kQuick : Runtime::Effort::kFull;
}

const pjrt::ExecutablePtr& Program::Compiled() {
  std::lock_guard<std::mutex> lock(compile_mu_);
  if (!exe_) exe_ = Runtime::Get().Compile(module_text, name, /*notice=*/true, /*detail=*/"", PerOpEffort(module_text));
  return exe_;
}

Executor::Executor() = default;

Executor& Executor::Get() {
  static Executor* executor = new Executor();  // never destroyed: storages may outlive statics
  return *executor;
}

void Executor::SetMode(Mode mode) {
  if (mode != this->mode()) Flush("eager mode change");
  mode_ = static_cast<int>(mode);
}

Executor::DeviceGraph& Executor::GraphOf(int device) {
  std::lock_guard<std::mutex> lock(graphs_mu_);
  std::unique_ptr<DeviceGraph>& g = graphs_[device];
  if (!g) {
    g = std::make_unique<DeviceGraph>();
    g->graph = std::make_unique<FusedGraph>();
  }
  return *g;
}

std::vector<Executor::DeviceGraph*> Executor::Graphs() {
  std::lock_guard<std::mutex> lock(graphs_mu_);
  std::vector<DeviceGraph*> all;
  for (auto& [device, g] : graphs_) all.push_back(g.get());
  return all;
}

void Executor::Submit(const Request& request) {
  if (mode() != Mode::kFused) {
    Run(request);
    return;
  }
  // A value this op reads that another device's graph computes is computed first, before this
  // graph's lock is taken: recording must never hold one graph's lock while waiting for another's.
  for (const ParamSource& src : request.program->params)
    if (src.kind == ParamSource::Storage) {
      const TpuStorage* s = request.storages[src.slot];
      if (s->pending && s->device != request.device) FlushFor(*s, "read of another device's value");
    }
  DeviceGraph& g = GraphOf(request.device);
  GraphLock lock(g.mu);
  g.graph->Record(request);
  GetMetrics().ops_recorded++;
  if (static_cast<int64_t>(g.graph->num_ops()) >= FusedOpLimit()) g.graph->Flush("op limit");
}

CheckSet Executor::InputChecks(const Request& request) {
  CheckSet guards;
  for (const ParamSource& src : request.program->params)
    if (src.kind == ParamSource::Storage) request.storages[src.slot]->AddChecksTo(guards);
  return guards;
}

std::vector<CheckPtr> Executor::NewChecks(const Program& p, int device) {
  std::vector<CheckPtr> checks;
  for (size_t i = 0; i < p.check_messages.size(); ++i)
    checks.push_back(std::make_shared<DeviceCheck>(
        p.check_messages[i], i < p.check_kinds.size() ? p.check_kinds[i] : CheckKind::Index, device));
  return checks;
}

std::vector<pjrt::BufferPtr> Executor::Run(const Request& request) {
  Program& p = *request.program;
  if (p.replicas > 0) return RunReplicatedProgram(request);
  const pjrt::ExecutablePtr& exe = p.Compiled();
  Runtime::Get().AwaitRoom(request.device);  // an interrupt here leaves nothing half done
  CheckSet guards = InputChecks(request);  // before the writes replace what they read
  std::vector<pjrt::BufferPtr> keep;
  keep.reserve(p.params.size());
  for (size_t i = 0; i < p.params.size(); ++i) {
    const ParamSource& src = p.params[i];
    keep.push_back(src.kind == ParamSource::Storage ? request.storages[src.slot]->Materialize(src.elem)
                                                    : request.host_params[i]);
  }
  std::vector<PJRT_Buffer*> raw;
  raw.reserve(keep.size());
  for (const auto& b : keep) raw.push_back(b->raw());
  std::vector<bool> donated =
      Donations(p.aliases, keep, [&](int param, int) { return request.storages[p.params[param].slot]; });
  std::vector<pjrt::BufferPtr> outs;
  try {
    outs = Runtime::Get().Execute(*exe, request.device, raw, {request.program}, donated);
  } catch (const std::exception& e) {
    // A failed run may have consumed a donated buffer: its storage's value is gone, and
    // reading it raises this rather than PJRT's "buffer deleted or donated".
    for (size_t i = 0; i < donated.size(); ++i)
      if (donated[i])
        request.storages[p.params[i].slot]->MarkFailed("tpu: " + p.name + " failed while writing this tensor in place: " +
                                                       e.what());
    throw;
  }
  GetMetrics().executions++;
  return Land(request, std::move(outs), guards);
}

std::vector<bool> Executor::Donations(const std::vector<std::pair<int, int>>& aliases,
                                      const std::vector<pjrt::BufferPtr>& args,
                                      const std::function<TpuStorage*(int, int)>& storage_of) {
  std::vector<bool> donated;
  if (aliases.empty() || !DonationEnabled()) return donated;
  for (const auto& [param, result] : aliases) {
    TpuStorage* s = storage_of(param, result);
    // Held by its storage and by `args` once: no other storage, tensor, host read or graph
    // sees this buffer, and the write replaces it in the storage (Land). Executions already
    // queued that read it keep their order: PJRT starts this one after them.
    bool sole = false;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      sole = s->buffer == args[param] && args[param].use_count() == 2;
    }
    if (!sole) continue;
    if (donated.empty()) donated.resize(args.size(), false);
    donated[param] = true;
    GetMetrics().donated_buffers++;
  }
  return donated;
}

std::vector<pjrt::BufferPtr> Executor::RunReplicatedProgram(const Request& request) {
  Program& p = *request.program;
  if (request.rank < 0 || request.rank >= p.replicas)
    throw std::runtime_error(p.name + ": rank " + std::to_string(request.rank) + " outside a group of " +
                             std::to_string(p.replicas));
  CheckSet guards = InputChecks(request);
  CollectiveArrival a;
  a.group = p.replica_group;
  a.rank = request.rank;
  a.group_size = p.replicas;
  a.device = request.device;
  a.description = "a compiled graph's program with " + std::to_string(p.collectives) + " collective(s) over " +
                  std::to_string(p.replicas) + " ranks";
  a.module_text = p.module_text;
  a.timeout_seconds = request.timeout_seconds;
  a.collectives = p.collectives;
  a.compiled_graph = true;
  a.member_groups = request.member_groups;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const ParamSource& src = p.params[i];
    a.operands.push_back(src.kind == ParamSource::Storage ? request.storages[src.slot]->Materialize(src.elem)
                                                          : request.host_params[i]);
  }
  // Every rank's program runs as one replicated execution (the last rank to arrive starts it).
  return Land(request, RunReplicated(a), guards);
}

std::vector<pjrt::BufferPtr> Executor::Land(const Request& request, std::vector<pjrt::BufferPtr> outs,
                                            CheckSet guards) {
  Program& p = *request.program;
  std::vector<CheckPtr> fresh = NewChecks(p, request.device);
  size_t first_check = request.new_storages.size() + p.writes.size();
  for (size_t i = 0; i < fresh.size(); ++i) {
    fresh[i]->SetFlag(outs[first_check + i]);
    guards.Add(fresh[i]);
  }
  // Every value the program writes is guarded by its own checks and by those of its inputs
  // (a compiled graph's outputs too: a failed check anywhere in it taints all its writes).
  size_t next = 0;
  for (size_t i = 0; i < request.new_storages.size(); ++i, ++next)
    request.new_storages[i]->Assign(outs[next], p.new_elems[i], guards, p.result_types[next].dims);
  for (const WriteTarget& w : p.writes) {
    request.storages[w.slot]->Assign(outs[next], w.elem, guards, p.result_types[next].dims);
    ++next;
  }
  if (mode() == Mode::kDebug) {
    // Debug mode: the op's results are computed before it returns, and its checks raise here.
    for (const auto& b : outs) b->Await();
    for (const CheckPtr& c : fresh)
      if (c->Poll(true) == DeviceCheck::State::Failed) throw CheckFailed(c->message(), c->kind());
  }
  return outs;
}

void Executor::Flush(const char* cause) {
  for (DeviceGraph* g : Graphs()) {
    GraphLock lock(g->mu);
    g->graph->Flush(cause);
  }
}

void Executor::FlushDevice(int device, const char* cause) {
  DeviceGraph& g = GraphOf(device);
  GraphLock lock(g.mu);
  g.graph->Flush(cause);
}

void Executor::FlushFor(const TpuStorage& s, const char* cause) {
  FlushDevice(s.device, cause);
  // A pending value is recorded by a program of its storage's device; should one ever come
  // from another device's graph, every graph runs rather than a stale value being read.
  if (s.pending) Flush(cause);
}

void Executor::Sync(const char* cause, int device) {
  if (device < 0)
    Flush(cause);
  else
    FlushDevice(device, cause);
}

pjrt::BufferPtr Executor::ScalarBuffer(const ScalarKey& key, const std::function<pjrt::BufferPtr()>& upload) {
  {
    std::lock_guard<std::mutex> lock(scalar_mu_);
    auto it = scalar_buffers_.find(key);
    if (it != scalar_buffers_.end()) return it->second;
  }
  pjrt::BufferPtr buffer = upload();
  std::lock_guard<std::mutex> lock(scalar_mu_);
  if (scalar_buffers_.size() >= 4096) scalar_buffers_.clear();  // many distinct values: start over
  scalar_buffers_.emplace(key, buffer);
  return buffer;
}

}  // namespace tpu::runtime
