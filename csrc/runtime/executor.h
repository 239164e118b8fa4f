// The Executor runs Programs (DESIGN.md "One op, three ways to run it"): debug waits after
// every op; strict runs one program per op asynchronously; fused records requests into the
// open graph of their device and runs it as one program at a sync point. It owns those graphs,
// the device buffers of scalar parameters, and the device-side asserts waiting for a sync.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "program.h"

namespace tpu::runtime {

enum class Mode { kDebug = 0, kStrict = 1, kFused = 2 };

// Identifies the value of a scalar parameter: the source's type and bytes, the parameter's
// element type and the device.
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

class FusedGraph;

class Executor {
 public:
  static Executor& Get();

  Mode mode() const { return static_cast<Mode>(mode_.load(std::memory_order_relaxed)); }
  // Runs the open graph first when the mode changes.
  void SetMode(Mode mode);

  // Runs the request now (debug, strict) or records it into the open graph (fused).
  void Submit(const Request& request);
  // Runs the request now, whatever the mode; returns the program's results (awaited in
  // debug mode). The caller's storages receive the new values.
  std::vector<pjrt::BufferPtr> Run(const Request& request);
  // Starts every device's open fused graph (asynchronously; the host does not wait).
  void Flush(const char* cause);
  // Starts the open graph that computes `s`'s pending value (its device's), and only that one:
  // a rank thread reading its own value must not cut the graphs the other ranks are recording.
  void FlushFor(const TpuStorage& s, const char* cause);
  // A synchronisation point: runs the open graph of `device` (every device's when -1). Failed
  // device checks are not raised here: they belong to the values they guard (device_checks.h),
  // raised when those are read.
  void Sync(const char* cause, int device = -1);
  // The checks guarding the values a request reads (the union over its storage parameters).
  static CheckSet InputChecks(const Request& request);
  // One new check per check result of the program (flags not yet computed).
  static std::vector<CheckPtr> NewChecks(const Program& p, int device);

  // Scalar parameters (add's alpha, an optimizer's lr, a 0-d CPU tensor) repeat from op to op
  // and step to step: their device buffers are read-only, so one upload per distinct value
  // serves every program that takes it. `upload` makes the buffer on a miss.
  pjrt::BufferPtr ScalarBuffer(const ScalarKey& key, const std::function<pjrt::BufferPtr()>& upload);

  // Whether this thread holds an open graph's lock (recording or flushing). A wait then is not
  // interrupted (long_wait.h): the interrupt check takes the GIL, which a thread blocked on this
  // lock may hold.
  static bool HoldsGraph();

  // Which of a run's arguments `args` it donates, of the (parameter, result) pairs its program
  // aliases (Program::aliases): the buffer of the storage the result is written into
  // (`storage_of(parameter, result)`), when nothing but that storage and `args` holds it.
  // Empty: none. TORCH_TPU_DONATE=0 donates none.
  static bool DonationEnabled();  // TORCH_TPU_DONATE (default 1)
  static std::vector<bool> Donations(const std::vector<std::pair<int, int>>& aliases,
                                     const std::vector<pjrt::BufferPtr>& args,
                                     const std::function<TpuStorage*(int, int)>& storage_of);

 private:
  Executor();
  // Run's path for a program replicated over an in-process group (Program::replicas).
  std::vector<pjrt::BufferPtr> RunReplicatedProgram(const Request& request);
  // Hands a run's results to the request's storages, guarded by `guards` and the program's checks.
  std::vector<pjrt::BufferPtr> Land(const Request& request, std::vector<pjrt::BufferPtr> outs, CheckSet guards);
  // One open graph per device, each with its lock. One graph for the whole process made the rank
  // threads of an in-process group (one device each) cut each other's graphs at every switch
  // of device ("another device"), so a tensor-parallel step's flush points, and hence its graph
  // structures, depended on thread timing: structures rarely repeated and ran op by op.
  struct DeviceGraph {
    std::recursive_mutex mu;
    std::unique_ptr<FusedGraph> graph;
  };
  DeviceGraph& GraphOf(int device);
  std::vector<DeviceGraph*> Graphs();
  void FlushDevice(int device, const char* cause);
  std::atomic<int> mode_{static_cast<int>(Mode::kFused)};  // the default: passes the suite, fastest
  std::mutex graphs_mu_;  // guards the map; each graph has its own lock
  std::map<int, std::unique_ptr<DeviceGraph>> graphs_;
  std::mutex scalar_mu_;
  std::unordered_map<ScalarKey, pjrt::BufferPtr, ScalarKeyHash> scalar_buffers_;
};

}  // namespace tpu::runtime
