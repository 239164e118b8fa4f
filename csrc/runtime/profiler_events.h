// What the runtime tells a profiler: program executions, compiles, host<->device transfers,
// host syncs, fused-graph flushes and collectives, as plain events (torch-free). csrc/aten
// turns them into Kineto activities (csrc/aten/profiler.cpp) while torch.profiler records.
//
// Off (the default), each place that could record costs one relaxed atomic load and nothing
// else: no clock read, no string, no lock. On, events go into one process-wide list under a
// lock; a program's event is completed from the plugin's completion callback.
//
// Times are nanoseconds since the Unix epoch from CLOCK_REALTIME, the clock of c10::getTime(),
// which Kineto's other events use. A program's device time is not measured on the device (no
// plugin timestamps reach us without the PJRT profiler extension): it ends when the plugin's
// completion callback (PJRT_Event_OnReady) runs, and starts at the later of its enqueue and
// the end of the program enqueued before it on the same device, when that one was reported
// first. So a program queued behind another is not charged the other's time; one that waited
// on inputs from the host or another device is charged that wait. The end is late by the
// callback's hand-over: microseconds when the plugin is idle, but on the CPU plugin callbacks
// of programs that finish close together can run late and out of order (docs/profiling.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../pjrt/pjrt.h"

namespace tpu::runtime::profiler {

inline std::atomic<bool> g_recording{false};
// The only check on the dispatch path.
inline bool Recording() { return g_recording.load(std::memory_order_relaxed); }

enum class Kind {
  Program,     // a program's execution on a device (a kernel row per device)
  Compile,     // a compile, a disk-cache load or a memory-cache hit of a new signature
  Transfer,    // bytes between the host and a device
  Sync,        // a host synchronisation point, with its cause
  Flush,       // a fused graph started (compiled whole or op by op)
  Collective,  // a collective over a group
};

struct Event {
  Kind kind = Kind::Sync;
  std::string name;
  int device = -1;         // Program, Transfer: the device; -1 for host-only events
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t thread = 0;      // the host thread that caused it (its system thread id)
  uint64_t correlation = 0;  // the profiler's correlation id of that thread's current op (0: none)
  // Program: the correlation ids of the record_function ranges open on that thread, outermost first.
  std::vector<uint64_t> user_correlations;
  std::vector<std::pair<std::string, std::string>> args;  // shown as the event's args
};

int64_t NowNs();
int64_t ThreadId();

// Begins a recording (clears what a previous one left).
void Start();
// Ends it: waits up to `wait_s` for the completion of programs still running, then returns
// every event recorded since Start, in the order recorded.
std::vector<Event> Stop(double wait_s = 2.0);

// Appends `e` (while recording), filling thread and correlation from the calling thread.
void Record(Event e);

// The correlation ids of the ops the profiler sees this thread run (innermost last); csrc/aten
// pushes and pops them for Kineto.
void PushCorrelation(uint64_t id);
void PopCorrelation();
uint64_t CurrentCorrelation();
// The same for record_function ranges (Kineto's user correlation ids).
void PushUserCorrelation(uint64_t id);
void PopUserCorrelation();

// A program enqueued on `device` at `enqueue_ns`: its event is recorded when `done` is ready.
void ProgramEnqueued(const pjrt::Event& done, std::string name, std::string key, int device, int64_t enqueue_ns,
                     size_t fused_ops);

// The reason the next compile on this thread happens (the signature that changed), if known.
void NoteRecompileReason(const std::string& reason);
std::string TakeRecompileReason();

// Records a Kind event from construction to destruction, when recording at construction.
class Scope {
 public:
  Scope(Kind kind, const char* name) : on_(Recording()) {
    if (on_) Begin(kind, name);
  }
  ~Scope() {
    if (on_) End();
  }
  void Arg(const std::string& key, std::string value) {
    if (on_) event_.args.emplace_back(key, std::move(value));
  }
  void Rename(std::string name) {
    if (on_) event_.name = std::move(name);
  }
  void Device(int device) { event_.device = device; }
  bool on() const { return on_; }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void Begin(Kind kind, const char* name);
  void End();
  bool on_;
  Event event_;
};

// Whether the plugin offers device-side profiling (the PJRT profiler extension); the CPU
// plugin does not, and then traces hold program-level events only.
bool PluginHasDeviceProfiler(const pjrt::Plugin& plugin);

}  // namespace tpu::runtime::profiler
