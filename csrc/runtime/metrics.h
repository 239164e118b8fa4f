// Counters a user can read (torch_tpu.metrics()). Plain atomics: cheap on the dispatch path.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace tpu::runtime {

struct Metrics {
  std::atomic<int64_t> ops_dispatched{0};
  std::atomic<int64_t> ops_by_mode[3] = {};  // indexed by eager mode: debug, strict, fused
  std::atomic<int64_t> signature_hits{0};
  std::atomic<int64_t> signature_misses{0};
  std::atomic<int64_t> programs_compiled{0};
  std::atomic<int64_t> programs_compiled_quick{0};  // of those, at lowered effort (compile_effort.h)
  std::atomic<int64_t> compile_cache_hits{0};  // same module text compiled before
  std::atomic<int64_t> compile_in_flight_waits{0};  // the same module was compiling on another thread
  std::atomic<int64_t> disk_cache_hits{0};
  std::atomic<int64_t> disk_cache_misses{0};
  std::atomic<int64_t> compile_time_us{0};
  std::atomic<int64_t> disk_load_time_us{0};  // reading and deserialising disk cache hits
  std::atomic<int64_t> slowest_compile_us{0};
  std::atomic<int64_t> executions{0};
  std::atomic<int64_t> donated_buffers{0};  // storage buffers an in-place write took over (no copy)
  std::atomic<int64_t> ops_recorded{0};           // fused mode: ops deferred into graphs
  std::atomic<int64_t> fused_graphs_run{0};
  std::atomic<int64_t> fused_graphs_compiled{0};
  std::atomic<int64_t> fused_graphs_op_by_op{0};  // first sightings run through per-op programs
  std::atomic<int64_t> fused_ops{0};              // ops run inside fused graphs
  std::atomic<int64_t> fused_compile_waits{0};    // flushes that finished their structure's compile
  std::atomic<int64_t> host_to_device_bytes{0};
  std::atomic<int64_t> device_to_host_bytes{0};
  std::atomic<int64_t> host_syncs{0};
  std::atomic<int64_t> fallback_total{0};
  std::atomic<int64_t> collectives_on_device{0};  // run as one program over in-process ranks' devices
  std::atomic<int64_t> collectives_via_host{0};   // run on host copies through the group's CPU backend
  // Collectives across processes whose ranks agreed through the store before running them.
  std::atomic<int64_t> collective_agreements{0};
  // Of those, the ones checked after they ran (TORCH_TPU_COLLECTIVE_CHECKS=behind, the default).
  std::atomic<int64_t> collective_checks_behind{0};
  // torch.compile programs replicated over in-process ranks' devices: runs (once per group,
  // not per rank) and the collective ops those runs held, which never leave the program.
  std::atomic<int64_t> replicated_graph_runs{0};
  std::atomic<int64_t> collectives_in_graphs{0};

  void CountFallback(const std::string& op);
  void CountSync(const std::string& cause);
  void CountRecompile(const std::string& reason);
  // A fused graph structure ran its whole program for the first time, after `op_by_op` flushes
  // of it had run op by op (0: compiled, or found in the disk cache, at first sight).
  void CountFusedSwitch(int64_t op_by_op);
  std::map<int64_t, int64_t> fused_switches() const;
  std::map<std::string, int64_t> recompiles() const;
  std::map<std::string, int64_t> fallbacks() const;
  std::map<std::string, int64_t> syncs() const;
  void Reset();

  std::string slowest_compile_op;
  mutable std::mutex mu;
  std::map<std::string, int64_t> fallback_by_op;
  std::map<std::string, int64_t> sync_by_cause;
  std::map<std::string, int64_t> recompile_reasons;  // bounded: the first 200 distinct reasons
  std::map<int64_t, int64_t> fused_switch_after;     // op-by-op flushes before the switch -> structures
  std::atomic<int64_t> recompilations{0};
};

Metrics& GetMetrics();

}  // namespace tpu::runtime
