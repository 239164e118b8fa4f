#include "metrics.h"

#include "profiler_events.h"

namespace tpu::runtime {

Metrics& GetMetrics() {
  static Metrics* metrics = new Metrics();  // never destroyed: used during interpreter exit
  return *metrics;
}

void Metrics::CountFallback(const std::string& op) {
  fallback_total++;
  std::lock_guard<std::mutex> lock(mu);
  fallback_by_op[op]++;
}

void Metrics::CountSync(const std::string& cause) {
  host_syncs++;
  if (profiler::Recording()) {
    profiler::Event e;
    e.kind = profiler::Kind::Sync;
    e.name = "tpu sync: " + cause;
    e.start_ns = e.end_ns = profiler::NowNs();
    e.args = {{"cause", cause}};
    profiler::Record(std::move(e));
  }
  std::lock_guard<std::mutex> lock(mu);
  sync_by_cause[cause]++;
}

void Metrics::CountRecompile(const std::string& reason) {
  recompilations++;
  profiler::NoteRecompileReason(reason);
  std::lock_guard<std::mutex> lock(mu);
  auto it = recompile_reasons.find(reason);
  if (it != recompile_reasons.end()) it->second++;
  else if (recompile_reasons.size() < 200) recompile_reasons[reason] = 1;
}

void Metrics::CountFusedSwitch(int64_t op_by_op) {
  std::lock_guard<std::mutex> lock(mu);
  fused_switch_after[op_by_op]++;
}

std::map<int64_t, int64_t> Metrics::fused_switches() const {
  std::lock_guard<std::mutex> lock(mu);
  return fused_switch_after;
}

std::map<std::string, int64_t> Metrics::recompiles() const {
  std::lock_guard<std::mutex> lock(mu);
  return recompile_reasons;
}

std::map<std::string, int64_t> Metrics::fallbacks() const {
  std::lock_guard<std::mutex> lock(mu);
  return fallback_by_op;
}

std::map<std::string, int64_t> Metrics::syncs() const {
  std::lock_guard<std::mutex> lock(mu);
  return sync_by_cause;
}

void Metrics::Reset() {
  for (auto* c : {&ops_dispatched, &signature_hits, &signature_misses, &programs_compiled, &programs_compiled_quick,
                  &compile_cache_hits, &compile_in_flight_waits, &disk_cache_hits, &disk_cache_misses, &compile_time_us, &disk_load_time_us, &slowest_compile_us, &executions, &donated_buffers, &ops_recorded, &fused_graphs_run, &fused_graphs_compiled, &fused_graphs_op_by_op, &fused_ops, &fused_compile_waits,
                  &host_to_device_bytes, &device_to_host_bytes, &host_syncs, &fallback_total,
                  &collectives_on_device, &collectives_via_host, &collective_agreements, &collective_checks_behind, &replicated_graph_runs, &collectives_in_graphs}) {
    c->store(0);
  }
  for (auto& c : ops_by_mode) c.store(0);
  std::lock_guard<std::mutex> lock(mu);
  fallback_by_op.clear();
  sync_by_cause.clear();
  recompile_reasons.clear();
  fused_switch_after.clear();
  recompilations = 0;
  slowest_compile_op.clear();
}

}  // namespace tpu::runtime
