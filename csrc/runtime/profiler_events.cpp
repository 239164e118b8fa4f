#include "profiler_events.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace tpu::runtime::profiler {
namespace {

struct Sink {
  std::mutex mu;
  std::vector<Event> events;
  uint64_t generation = 0;             // one per Start: callbacks of an older recording are dropped
  // By device: the end time of the program enqueued last (0 until it finishes). Each program
  // starts no earlier than the end of the one enqueued before it on its device.
  std::map<int, std::shared_ptr<std::atomic<int64_t>>> last_end;
  std::atomic<int64_t> in_flight{0};   // programs whose completion has not been recorded yet
};

Sink& GetSink() {
  static Sink* sink = new Sink();  // never destroyed: plugin threads may call back during exit
  return *sink;
}

thread_local std::vector<uint64_t> t_correlation;
thread_local std::vector<uint64_t> t_user_correlation;
thread_local std::string t_recompile_reason;

}  // namespace

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t ThreadId() {
  thread_local int64_t tid = static_cast<int64_t>(syscall(SYS_gettid));
  return tid;
}

void Start() {
  Sink& s = GetSink();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.clear();
  s.last_end.clear();
  s.generation++;
  g_recording.store(true, std::memory_order_relaxed);
}

std::vector<Event> Stop(double wait_s) {
  Sink& s = GetSink();
  // Programs started while recording report on a plugin thread; give them a moment (the caller
  // has usually synchronized the device already, so their callbacks are about to run).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (s.in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  g_recording.store(false, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(s.mu);
  s.generation++;
  std::vector<Event> out = std::move(s.events);
  s.events.clear();
  return out;
}

void Record(Event e) {
  if (!Recording()) return;
  if (e.thread == 0) e.thread = ThreadId();
  if (e.correlation == 0) e.correlation = CurrentCorrelation();
  Sink& s = GetSink();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.push_back(std::move(e));
}

void PushCorrelation(uint64_t id) { t_correlation.push_back(id); }

void PopCorrelation() {
  if (!t_correlation.empty()) t_correlation.pop_back();
}

uint64_t CurrentCorrelation() { return t_correlation.empty() ? 0 : t_correlation.back(); }

void PushUserCorrelation(uint64_t id) { t_user_correlation.push_back(id); }

void PopUserCorrelation() {
  if (!t_user_correlation.empty()) t_user_correlation.pop_back();
}

void ProgramEnqueued(const pjrt::Event& done, std::string name, std::string key, int device, int64_t enqueue_ns,
                     size_t fused_ops) {
  Sink& s = GetSink();
  Event e;
  e.kind = Kind::Program;
  e.name = std::move(name);
  e.device = device;
  e.start_ns = enqueue_ns;
  e.thread = ThreadId();
  e.correlation = CurrentCorrelation();
  e.user_correlations = t_user_correlation;
  if (!key.empty()) e.args.emplace_back("cache key", std::move(key));
  if (fused_ops > 0) e.args.emplace_back("fused ops", std::to_string(fused_ops));
  uint64_t generation;
  std::shared_ptr<std::atomic<int64_t>> previous, mine = std::make_shared<std::atomic<int64_t>>(0);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    generation = s.generation;
    std::shared_ptr<std::atomic<int64_t>>& last = s.last_end[device];
    previous = std::move(last);
    last = mine;
  }
  s.in_flight++;
  bool notified = done.OnReady([e = std::move(e), generation, previous, mine]() mutable {
    Sink& s = GetSink();
    int64_t end = NowNs();
    mine->store(end);
    // The previous program's end when its callback already ran and it ended before this one's;
    // otherwise (not reported yet, or reported out of order) this program's own enqueue time.
    int64_t before = previous ? previous->load() : 0;
    e.args.emplace_back("enqueue to end (us)", std::to_string((end - e.start_ns) / 1000));
    if (before > e.start_ns && before <= end) e.start_ns = before;
    e.end_ns = end;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (generation == s.generation) s.events.push_back(std::move(e));
    }
    s.in_flight--;
  });
  if (!notified) s.in_flight--;  // this plugin cannot say when it finished: no device event
}

void NoteRecompileReason(const std::string& reason) {
  if (Recording()) t_recompile_reason = reason;
}

std::string TakeRecompileReason() {
  std::string reason;
  reason.swap(t_recompile_reason);
  return reason;
}

void Scope::Begin(Kind kind, const char* name) {
  event_.kind = kind;
  event_.name = name;
  event_.start_ns = NowNs();
  event_.thread = ThreadId();
  event_.correlation = CurrentCorrelation();
}

void Scope::End() {
  event_.end_ns = NowNs();
  Record(std::move(event_));
}

bool PluginHasDeviceProfiler(const pjrt::Plugin& plugin) {
  return plugin.FindExtension(PJRT_Extension_Type_Profiler) != nullptr;
}

}  // namespace tpu::runtime::profiler
