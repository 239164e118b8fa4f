#include "background_compile.h"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>

#include "env.h"
#include "runtime.h"

namespace tpu::runtime {
namespace {

struct Job {
  std::string module, name;
  std::function<void(pjrt::ExecutablePtr)> done;
  std::string detail;
};

struct Worker {
  std::mutex mu;
  std::condition_variable cv;       // a job arrived
  std::condition_variable idle_cv;  // the queue emptied and no job runs
  std::deque<Job> jobs;
  bool busy = false;
  bool started = false;
};

// Never destroyed: the detached thread may still wait on it during static destruction.
Worker* g_worker = new Worker();

Worker& GetWorker() { return *g_worker; }

// A forked child has no worker thread, and the parent's mutex may have been held at the fork:
// the child starts from an empty worker (else waiting at its exit would never end).
void ForgetWorkerInChild() { g_worker = new Worker(); }

// The worker compiles at the lowest CPU priority (Linux nice 19, this thread only; threads XLA
// starts for a compile inherit it). The per-op programs serve every call meanwhile, so a
// compile is never urgent, and on a machine with few busy cores a worker at normal priority
// took CPU from the very calls it was to speed up: generate() calls 2-5 grew from 0.78 to
// 1.35 s while 67 whole graphs compiled on 2 shared cores. Idle cores still run it at full speed.
void LowerPriority() { (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19); }

void Loop() {
  LowerPriority();
  Worker& w = GetWorker();
  std::unique_lock<std::mutex> lock(w.mu);
  for (;;) {
    w.cv.wait(lock, [&] { return !w.jobs.empty(); });
    Job job = std::move(w.jobs.front());
    w.jobs.pop_front();
    w.busy = true;
    lock.unlock();
    pjrt::ExecutablePtr exe;
    try {
      exe = Runtime::Get().Compile(job.module, job.name, /*notice=*/false, job.detail);
    } catch (const std::exception&) {
      // The graph's ops keep running through their own programs; a bad op raises there.
    }
    job.done(std::move(exe));
    lock.lock();
    w.busy = false;
    if (w.jobs.empty()) w.idle_cv.notify_all();
  }
}

}  // namespace

bool BackgroundCompileEnabled() {
  static const bool enabled = EnvInt("TORCH_TPU_FUSED_BACKGROUND_COMPILE", 0, 1).value_or(1) == 1;
  return enabled;
}

void CompileInBackground(std::string module, std::string name, std::function<void(pjrt::ExecutablePtr)> done,
                         std::string detail) {
  Worker& w = GetWorker();
  std::lock_guard<std::mutex> lock(w.mu);
  if (!w.started) {
    std::thread(Loop).detach();
    std::atexit(AwaitBackgroundCompiles);  // also covers exits that skip Python's atexit
    pthread_atfork(nullptr, nullptr, ForgetWorkerInChild);
    w.started = true;
  }
  w.jobs.push_back({std::move(module), std::move(name), std::move(done), std::move(detail)});
  w.cv.notify_one();
}

void AwaitBackgroundCompiles() {
  Worker& w = GetWorker();
  std::unique_lock<std::mutex> lock(w.mu);
  w.idle_cv.wait(lock, [&] { return w.jobs.empty() && !w.busy; });
}

}  // namespace tpu::runtime
