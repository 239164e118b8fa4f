#include "compile_notice.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace tpu::runtime {
namespace {

using Clock = std::chrono::steady_clock;

struct NoticeState {
  std::mutex mu;
  std::condition_variable cv;
  int active = 0;            // compiles running now
  int programs = 0;          // compiles finished in this stretch
  std::string op, cache_dir;
  Clock::time_point stretch_start, last_end;
  bool done = false;         // printed, or silenced
  bool watching = false;
  double threshold_s = 5.0;
};

// Never destroyed: the detached watcher may outlive static destruction at exit.
NoticeState& State() {
  static NoticeState* state = [] {
    auto* s = new NoticeState();
    const char* quiet = std::getenv("TORCH_TPU_QUIET");
    s->done = quiet && *quiet && std::string(quiet) != "0";
    if (const char* v = std::getenv("TORCH_TPU_COMPILE_NOTICE_S")) {
      char* end = nullptr;
      double seconds = std::strtod(v, &end);
      if (end != v && *end == '\0' && seconds >= 0) s->threshold_s = seconds;
      else std::fprintf(stderr, "torch_tpu: ignoring TORCH_TPU_COMPILE_NOTICE_S=%s (expected seconds, e.g. 5)\n", v);
    }
    return s;
  }();
  return *state;
}

void Watch() {
  NoticeState& s = State();
  std::unique_lock<std::mutex> lock(s.mu);
  while (!s.done) {
    s.cv.wait(lock, [&] { return s.active > 0 || s.done; });
    if (s.done) break;
    double seconds = std::chrono::duration<double>(Clock::now() - s.stretch_start).count();
    if (seconds >= s.threshold_s) {
      std::fprintf(stderr,
                   "torch_tpu: compiling device programs for %.0f s so far (%d finished, now %s). Each program is "
                   "compiled once per shape and kept in %s, so the next run starts faster. TORCH_TPU_QUIET=1 hides "
                   "this notice.\n",
                   seconds, s.programs, s.op.c_str(), s.cache_dir.empty() ? "memory only" : s.cache_dir.c_str());
      std::fflush(stderr);
      s.done = true;
      break;
    }
    s.cv.wait_for(lock, std::chrono::milliseconds(500));
  }
}

}  // namespace

CompileNotice::CompileNotice(const std::string& op_name, const std::string& cache_dir) {
  NoticeState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.done) return;
  Clock::time_point now = Clock::now();
  if (s.active == 0 && now - s.last_end > std::chrono::seconds(2)) {
    s.stretch_start = now;  // a new stretch: the user's code ran in between
    s.programs = 0;
  }
  s.active++;
  s.op = op_name;
  s.cache_dir = cache_dir;
  if (!s.watching) {
    s.watching = true;
    std::thread(Watch).detach();
  }
  s.cv.notify_all();
}

CompileNotice::~CompileNotice() {
  NoticeState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.done) return;  // printed (or quiet): nothing is counted any more
  s.active--;
  s.programs++;
  s.last_end = Clock::now();
}

}  // namespace tpu::runtime
