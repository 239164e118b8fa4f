// Whole fused graphs compile off the thread that runs them. The flush that first repeats a
// graph structure queues its module here and runs its ops through the per-op programs, which
// every graph shares; a later flush of the same structure runs the whole program once it is
// ready. So the call that decides to compile does not stall on XLA (a second generate() call
// used to be slower than the first), and no call is slower than the one before it.
// Several workers compile at once (a training step queues a few graphs together, and an
// accelerator's compiles take seconds each); a structure that keeps repeating while its compile
// waits can have it finished at once (FinishNow). Torch-free.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "../pjrt/pjrt.h"

namespace tpu::runtime {

struct CompileJob;
using CompileTicket = std::shared_ptr<CompileJob>;

// True unless TORCH_TPU_FUSED_BACKGROUND_COMPILE=0 (then a fused graph compiles in the flush
// that decides to compile it, as before).
bool BackgroundCompileEnabled();

// Queues `module` to compile on a worker thread (through Runtime::Compile, so the memory and
// disk caches and the metrics see it); `done` runs there with the executable, or null when the
// compile failed (the graph's ops then keep running one by one, where a failing op raises),
// and the seconds the compile took (on whichever thread ran it). `detail` is for the dump only
// (Runtime::Compile).
using CompileDone = std::function<void(pjrt::ExecutablePtr, double seconds)>;
CompileTicket CompileInBackground(std::string module, std::string name, CompileDone done, std::string detail = "");

// Compiles `module` now on a thread of its own, at normal priority: a compiled graph's program,
// built from the graph's example inputs before its first run, so that XLA works while PyTorch
// is still tracing or running the step (a training step's backward compiles during its
// forward). Its first run finds the executable, or waits for this compile (Runtime::Compile)
// instead of starting another. A failure is dropped: the first run compiles again and raises.
void CompileAhead(std::string module, std::string name, std::string detail = "");

// Returns once the ticket's compile is done (its `done` has run): a job no worker has started is
// taken from the queue and compiled on the calling thread, at its priority, ahead of every other
// queued job; one a worker runs is waited for, and that worker is raised to normal priority
// (where the OS lets a process do so) for the rest of that compile.
void FinishNow(const CompileTicket& ticket);

// Compiles queued or running now (the background_compiles_pending counter). Never waits.
int64_t PendingBackgroundCompiles();

// Waits until every queued compile has finished: at exit (a compile still running when the
// PJRT client's threads are torn down would abort the process; finishing also fills the disk
// cache for the next run), and where a test or benchmark needs a settled state.
void AwaitBackgroundCompiles();

}  // namespace tpu::runtime
