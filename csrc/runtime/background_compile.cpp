#include "background_compile.h"

#include <algorithm>
#include <chrono>
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

struct CompileJob {
  enum State { kQueued, kRunning, kDone };
  std::string module, name, detail;
  CompileDone done;
  State state = kQueued;  // guarded by the worker's mutex
  pid_t tid = 0;          // the worker thread running it (its priority is raised for a waiter)
  const void* worker = nullptr;  // the worker it was queued to (a forked child has another)
};

namespace {

struct Worker {
  std::mutex mu;
  std::condition_variable cv;       // a job arrived
  std::condition_variable idle_cv;  // the queue emptied and no job runs
  std::condition_variable done_cv;  // a job finished
  std::deque<CompileTicket> jobs;
  int running = 0;
  int threads = 0;
  bool exit_hooked = false;
};

// Never destroyed: the detached threads may still wait on it during static destruction.
Worker* g_worker = new Worker();

Worker& GetWorker() { return *g_worker; }

// A forked child has no worker threads, and the parent's mutex may have been held at the fork:
// the child starts from an empty worker (else waiting at its exit would never end).
void ForgetWorkerInChild() { g_worker = new Worker(); }

// How many compiles run at once (TORCH_TPU_FUSED_COMPILE_THREADS): a quarter of the cores, 1 to
// 4. A training step queues its graphs (forward, backward, optimizer) together; one worker
// compiles them one after the other, which on an accelerator (seconds per whole-graph compile)
// kept fused mode op by op for the whole of a benchmark. On a 2-core machine this stays 1.
int CompileThreads() {
  static const int n = static_cast<int>(EnvInt("TORCH_TPU_FUSED_COMPILE_THREADS", 1, 64).value_or(
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4)));
  return n;
}

// The workers compile at the lowest CPU priority (Linux nice 19, these threads only; threads XLA
// starts for a compile inherit it). The per-op programs serve every call meanwhile, so a
// compile is never urgent, and on a machine with few busy cores a worker at normal priority
// took CPU from the very calls it was to speed up: generate() calls 2-5 grew from 0.78 to
// 1.35 s while 67 whole graphs compiled on 2 shared cores. Idle cores still run it at full
// speed; on a fully loaded machine it may barely run, which FinishNow bounds.
void LowerPriority() { (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19); }

pid_t ThisThread() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// For tests only (TORCH_TPU_TEST_COMPILE_DELAY_MS): a worker sleeps this long before it takes
// each job from the queue, as a worker starved of CPU would, so a test can show that no call
// waits for compiles it does not need. The job stays queued meanwhile (FinishNow can take it).
std::chrono::milliseconds TestDelay() {
  static const int64_t ms = EnvInt("TORCH_TPU_TEST_COMPILE_DELAY_MS", 0, 3600000).value_or(0);
  return std::chrono::milliseconds(ms);
}

// Compiles `job` on this thread; the caller has marked it running (and counted it).
void Run(Worker& w, const CompileTicket& job) {
  pjrt::ExecutablePtr exe;
  auto start = std::chrono::steady_clock::now();
  try {
    exe = Runtime::Get().Compile(job->module, job->name, /*notice=*/false, job->detail);
  } catch (const std::exception&) {
    // The graph's ops keep running through their own programs; a bad op raises there.
  }
  job->done(std::move(exe), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  job->done = nullptr;  // it may hold what holds the ticket
  std::lock_guard<std::mutex> lock(w.mu);
  job->state = CompileJob::kDone;
  job->module.clear();
  job->module.shrink_to_fit();
  w.running--;
  w.done_cv.notify_all();
  if (w.jobs.empty() && w.running == 0) w.idle_cv.notify_all();
}

void Loop() {
  LowerPriority();
  Worker& w = GetWorker();
  std::unique_lock<std::mutex> lock(w.mu);
  for (;;) {
    w.cv.wait(lock, [&] { return !w.jobs.empty(); });
    if (TestDelay().count() > 0) {
      lock.unlock();
      std::this_thread::sleep_for(TestDelay());
      lock.lock();
      if (w.jobs.empty()) continue;  // a flush took it meanwhile
    }
    CompileTicket job = std::move(w.jobs.front());
    w.jobs.pop_front();
    job->state = CompileJob::kRunning;
    job->tid = ThisThread();
    w.running++;
    lock.unlock();
    Run(w, job);
    LowerPriority();  // a waiter may have raised it
    lock.lock();
  }
}

// Before the first compile of a worker (under its mutex): finish compiles at exit, and give a
// forked child a worker of its own.
void HookExit(Worker& w) {
  if (w.exit_hooked) return;
  w.exit_hooked = true;
  std::atexit(AwaitBackgroundCompiles);  // also covers exits that skip Python's atexit
  pthread_atfork(nullptr, nullptr, ForgetWorkerInChild);
}

}  // namespace

bool BackgroundCompileEnabled() {
  static const bool enabled = EnvInt("TORCH_TPU_FUSED_BACKGROUND_COMPILE", 0, 1).value_or(1) == 1;
  return enabled;
}

CompileTicket CompileInBackground(std::string module, std::string name, CompileDone done, std::string detail) {
  Worker& w = GetWorker();
  auto job = std::make_shared<CompileJob>();
  job->module = std::move(module);
  job->name = std::move(name);
  job->detail = std::move(detail);
  job->done = std::move(done);
  job->worker = &w;
  std::lock_guard<std::mutex> lock(w.mu);
  HookExit(w);
  // One more thread while every one is busy, up to the limit.
  if (w.threads < CompileThreads() && w.running + static_cast<int>(w.jobs.size()) >= w.threads) {
    std::thread(Loop).detach();
    w.threads++;
  }
  w.jobs.push_back(job);
  w.cv.notify_one();
  return job;
}

void CompileAhead(std::string module, std::string name, std::string detail) {
  Worker& w = GetWorker();
  auto job = std::make_shared<CompileJob>();
  job->module = std::move(module);
  job->name = std::move(name);
  job->detail = std::move(detail);
  job->done = [](pjrt::ExecutablePtr, double) {};
  job->worker = &w;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    HookExit(w);
    job->state = CompileJob::kRunning;
    w.running++;  // AwaitBackgroundCompiles waits for it
  }
  std::thread([&w, job] { Run(w, job); }).detach();
}

void FinishNow(const CompileTicket& ticket) {
  Worker& w = GetWorker();
  std::unique_lock<std::mutex> lock(w.mu);
  // Not started, or queued in the parent of this forked child (whose workers are gone): here.
  bool orphan = ticket->worker != &w && ticket->state != CompileJob::kDone;
  if (ticket->state == CompileJob::kQueued || orphan) {
    auto it = std::find(w.jobs.begin(), w.jobs.end(), ticket);
    if (it != w.jobs.end()) w.jobs.erase(it);
    ticket->state = CompileJob::kRunning;
    ticket->worker = &w;
    w.running++;
    lock.unlock();
    Run(w, ticket);
    return;
  }
  // A worker compiles it at nice 19: at the waiter's urgency from now on (a process without
  // CAP_SYS_NICE may not lower a nice value; it then keeps waiting at 19).
  if (ticket->state == CompileJob::kRunning && ticket->tid != 0)
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(ticket->tid), getpriority(PRIO_PROCESS, 0));
  w.done_cv.wait(lock, [&] { return ticket->state == CompileJob::kDone; });
}

int64_t PendingBackgroundCompiles() {
  Worker& w = GetWorker();
  std::lock_guard<std::mutex> lock(w.mu);
  return static_cast<int64_t>(w.jobs.size()) + w.running;
}

void AwaitBackgroundCompiles() {
  Worker& w = GetWorker();
  std::unique_lock<std::mutex> lock(w.mu);
  w.idle_cv.wait(lock, [&] { return w.jobs.empty() && w.running == 0; });
}

}  // namespace tpu::runtime
