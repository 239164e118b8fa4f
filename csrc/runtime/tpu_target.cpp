#include "tpu_target.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace tpu::runtime {
namespace {

std::atomic<bool>& Logging() {
  static std::atomic<bool> on([] {
    const char* topologies = std::getenv("TORCH_TPU_ALSO_COMPILE_FOR");
    return topologies != nullptr && *topologies != '\0';
  }());
  return on;
}

struct Log {
  std::mutex mu;
  std::condition_variable added;
  std::deque<TpuTargetProgram> programs;
  int64_t last_id = 0;
};

struct Runs {
  std::mutex mu;
  std::unordered_map<const void*, int64_t> id_of;  // executable -> logged program
  std::map<int64_t, int64_t> runs;                  // logged program -> runs
};

Runs& GetRuns() {
  static Runs* runs = new Runs();  // never destroyed, as the log
  return *runs;
}

Log& GetLog() {
  static Log* log = new Log();  // never destroyed: a compile thread may log during exit
  return *log;
}

}  // namespace

bool TpuTargetLogging() { return Logging().load(std::memory_order_relaxed); }

void SetTpuTargetLogging(bool on) { Logging().store(on); }

int64_t LogForTpuTarget(const std::string& name, const std::string& module_text, const std::string& dump_path,
                        bool from_disk) {
  if (!TpuTargetLogging()) return 0;
  Log& log = GetLog();
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(log.mu);
    id = ++log.last_id;
    log.programs.push_back({name, module_text, dump_path, from_disk, id});
  }
  log.added.notify_all();
  return id;
}

void TrackTpuTargetRuns(const void* executable, int64_t id) {
  if (id == 0 || !TpuTargetLogging()) return;
  Runs& r = GetRuns();
  std::lock_guard<std::mutex> lock(r.mu);
  r.id_of[executable] = id;
}

void CountTpuTargetRun(const void* executable) {
  if (!TpuTargetLogging()) return;
  Runs& r = GetRuns();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.id_of.find(executable);
  if (it != r.id_of.end()) r.runs[it->second]++;
}

std::map<int64_t, int64_t> TpuTargetRuns() {
  Runs& r = GetRuns();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.runs;
}

std::vector<TpuTargetProgram> TakeTpuTargetPrograms(double wait_s) {
  Log& log = GetLog();
  std::unique_lock<std::mutex> lock(log.mu);
  if (log.programs.empty() && wait_s > 0)
    log.added.wait_for(lock, std::chrono::duration<double>(wait_s), [&] { return !log.programs.empty(); });
  std::vector<TpuTargetProgram> taken(std::make_move_iterator(log.programs.begin()),
                                      std::make_move_iterator(log.programs.end()));
  log.programs.clear();
  return taken;
}

}  // namespace tpu::runtime
