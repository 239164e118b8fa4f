#include "tpu_target.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>

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
};

Log& GetLog() {
  static Log* log = new Log();  // never destroyed: a compile thread may log during exit
  return *log;
}

}  // namespace

bool TpuTargetLogging() { return Logging().load(std::memory_order_relaxed); }

void SetTpuTargetLogging(bool on) { Logging().store(on); }

void LogForTpuTarget(const std::string& name, const std::string& module_text, const std::string& dump_path,
                     bool from_disk) {
  if (!TpuTargetLogging()) return;
  Log& log = GetLog();
  {
    std::lock_guard<std::mutex> lock(log.mu);
    log.programs.push_back({name, module_text, dump_path, from_disk});
  }
  log.added.notify_all();
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
