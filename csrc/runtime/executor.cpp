#include "executor.h"

#include <cstdlib>

#include "fused_graph.h"
#include "metrics.h"
#include "runtime.h"

namespace tpu::runtime {
namespace {

// Fused mode runs the open graph once it holds this many ops (TORCH_TPU_FUSED_MAX_OPS).
int64_t FusedOpLimit() {
  static int64_t limit = [] {
    const char* env = std::getenv("TORCH_TPU_FUSED_MAX_OPS");
    return env ? std::max<int64_t>(1, std::atoll(env)) : int64_t{1000};
  }();
  return limit;
}

}  // namespace

int Program::NextId() {
  static std::atomic<int> next_id{0};
  return next_id++;
}

const pjrt::ExecutablePtr& Program::Compiled() {
  std::lock_guard<std::mutex> lock(compile_mu_);
  if (!exe_) exe_ = Runtime::Get().Compile(module_text, name);
  return exe_;
}

Executor::Executor() : graph_(new FusedGraph()) {}

Executor& Executor::Get() {
  static Executor* executor = new Executor();  // never destroyed: storages may outlive statics
  return *executor;
}

void Executor::SetMode(Mode mode) {
  if (mode != this->mode()) Flush("eager mode change");
  mode_ = static_cast<int>(mode);
}

void Executor::Submit(const Request& request) {
  if (mode() != Mode::kFused) {
    Run(request);
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(graph_mu_);
  if (!graph_->empty() && graph_->device() != request.device) graph_->Flush("another device");
  graph_->Record(request);
  GetMetrics().ops_recorded++;
  if (static_cast<int64_t>(graph_->num_ops()) >= FusedOpLimit()) graph_->Flush("op limit");
}

std::vector<pjrt::BufferPtr> Executor::Run(const Request& request) {
  Program& p = *request.program;
  const pjrt::ExecutablePtr& exe = p.Compiled();
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
  std::vector<pjrt::BufferPtr> outs = Runtime::Get().Execute(*exe, request.device, raw);
  GetMetrics().executions++;

  size_t next = 0;
  for (size_t i = 0; i < request.new_storages.size(); ++i) request.new_storages[i]->Assign(outs[next++], p.new_elems[i]);
  for (const WriteTarget& w : p.writes) request.storages[w.slot]->Assign(outs[next++], w.elem);
  DeferChecks(p.check_messages, outs, next);
  // Debug mode: the op's results are computed before it returns.
  if (mode() == Mode::kDebug)
    for (const auto& b : outs) b->Await();
  return outs;
}

void Executor::Flush(const char* cause) {
  std::lock_guard<std::recursive_mutex> lock(graph_mu_);
  graph_->Flush(cause);
}

void Executor::Sync(const char* cause) {
  Flush(cause);
  VerifyChecks();
}

void Executor::VerifyChecks() {
  std::vector<DeferredCheck> checks;
  {
    std::lock_guard<std::mutex> lock(checks_mu_);
    checks.swap(checks_);
  }
  for (const auto& c : checks) {
    uint8_t failed = 0;
    c.failed->ToHost(&failed, 1);
    if (failed) throw DeviceAssertFailed(c.message);
  }
}

void Executor::DeferChecks(const std::vector<std::string>& messages, const std::vector<pjrt::BufferPtr>& outs,
                           size_t first) {
  if (messages.empty()) return;
  size_t pending;
  {
    std::lock_guard<std::mutex> lock(checks_mu_);
    for (size_t i = 0; i < messages.size(); ++i) checks_.push_back({outs[first + i], messages[i]});
    pending = checks_.size();
  }
  // Debug mode raises at the op; otherwise at the next sync, or when too many are waiting.
  if (mode() == Mode::kDebug || pending > 1024) VerifyChecks();
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
