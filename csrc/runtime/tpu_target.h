// TORCH_TPU_ALSO_COMPILE_FOR: every program this process compiles, or loads from the disk cache,
// is also compiled for a TPU topology by torch_tpu/tpu_target.py. The runtime only logs the
// programs here; the Python side takes them and feeds them to a worker process that runs libtpu.
// Why not spawn the worker from here: libtpu aborts the process on some programs, so the worker
// must be restartable and its death recorded per program; Python owns process management and the
// report, and the runtime stays torch-free and free of process handling. Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tpu::runtime {

struct TpuTargetProgram {
  std::string name;         // the op or graph, as the dump names it ("aten::mm", "compiled graph 3")
  std::string module_text;  // the StableHLO handed to the running plugin
  std::string dump_path;    // its TORCH_TPU_DUMP_DIR file, "" when not dumped
  bool from_disk = false;   // loaded from the disk cache instead of compiled now
  int64_t id = 0;           // names the program in TpuTargetRuns()
};

// On from the start when TORCH_TPU_ALSO_COMPILE_FOR is set and non-empty; the Python API turns it
// on later (programs already compiled by then are not logged).
bool TpuTargetLogging();
void SetTpuTargetLogging(bool on);
// Appends a program to the log when logging is on; a no-op otherwise. Called by Runtime for
// each compile and each disk cache load. Returns the program's id (0 when logging is off).
int64_t LogForTpuTarget(const std::string& name, const std::string& module_text, const std::string& dump_path,
                        bool from_disk);
// Runs of logged programs, so that a report can weigh each program by how often a step runs it
// (two layers of one shape run one program twice): the executable compiled (or loaded) for logged
// program `id`, and each run of an executable. Both are no-ops while logging is off.
void TrackTpuTargetRuns(const void* executable, int64_t id);
void CountTpuTargetRun(const void* executable);
// Logged program id -> its runs while logging was on.
std::map<int64_t, int64_t> TpuTargetRuns();
// Takes every logged program, waiting up to `wait_s` seconds for one when the log is empty.
std::vector<TpuTargetProgram> TakeTpuTargetPrograms(double wait_s);

}  // namespace tpu::runtime
