#include "long_wait.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

#include "executor.h"
#include "runtime.h"

namespace tpu::runtime {
namespace {

std::mutex g_check_mu;
std::shared_ptr<const std::function<void()>> g_check;  // copied out under the lock, called outside
std::atomic<bool> g_noticed{false};
std::atomic<void (*)()> g_host_read_check{nullptr};

void PrintNotice(double waited_s, const char* what) {
  Runtime::Running running;
  std::string doing = std::string("a ") + what;
  if (Runtime::Get().OldestRunning(&running)) {
    char line[160];
    std::snprintf(line, sizeof line, " (started on tpu:%d %.1f s ago", running.device, running.seconds);
    doing = running.name + line +
            (running.others > 0 ? ", " + std::to_string(running.others) + " more queued after it)" : ")");
  }
  std::fprintf(stderr,
               "torch_tpu: waiting for the device for %.1f s so far: %s. Ctrl-C stops waiting (the program keeps "
               "running; its results stay readable). TORCH_TPU_QUIET=1 hides this notice.\n",
               waited_s, doing.c_str());
  std::fflush(stderr);
}

}  // namespace

void ObserveLongWaits(pjrt::Plugin& plugin, double notice_after_s, bool quiet) {
  g_noticed = quiet;
  plugin.set_wait_observer([notice_after_s](double seconds, const char* what) {
    if (seconds >= notice_after_s && !g_noticed.load(std::memory_order_relaxed) && !g_noticed.exchange(true))
      PrintNotice(seconds, what);
    if (Executor::HoldsGraph()) return;  // a flush submitting its programs: not interrupted
    std::shared_ptr<const std::function<void()>> check;
    {
      std::lock_guard<std::mutex> lock(g_check_mu);
      check = g_check;
    }
    if (check) (*check)();
  });
}

void SetWaitInterruptCheck(std::function<void()> check) {
  auto shared = check ? std::make_shared<const std::function<void()>>(std::move(check)) : nullptr;
  std::lock_guard<std::mutex> lock(g_check_mu);
  g_check = std::move(shared);
}

void SetHostReadCheck(void (*check)()) { g_host_read_check = check; }

void CheckBeforeHostRead() {
  if (auto* check = g_host_read_check.load(std::memory_order_acquire)) check();
}

}  // namespace tpu::runtime
