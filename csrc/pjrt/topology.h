// Compiling for a TPU topology with no TPU present: a PJRT plugin (libtpu) loaded on its own,
// beside whichever plugin the process runs on, creates a topology by name ("v5e:2x2") and
// compiles programs for it without a client. The result is never run: what it is for is the
// compiler's verdict, its cost model and its optimised program. No torch headers here.
//
// libtpu aborts the whole process on some programs (a convert from f32 to complex<f64>), so
// torch-tpu calls this from a worker process (torch_tpu/_tpu_compile_worker.py), never from
// the process that runs tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pjrt.h"

namespace tpu::pjrt {

// What compiling one program for a topology gave.
struct TopologyProgram {
  bool compiled = false;
  std::string error;  // the compiler's message when !compiled
  // The cost model (PJRT_Executable_GetCostAnalysis); -1 when the plugin gives no such value.
  double flops = -1;
  double bytes_accessed = -1;  // HBM traffic, "bytes accessed"
  double transcendentals = -1;
  // "optimal_seconds" is -1 s for each instruction the model cannot estimate plus its estimate
  // of the rest: -12.9967 is 13 unmodelled instructions and 3.3 ms modelled. Split here.
  double optimal_seconds = 0;  // as the plugin gave it
  double modelled_seconds = -1;
  int64_t unmodelled_instructions = -1;
  // PJRT_Executable_GetCompiledMemoryStats (device memory); -1 when unavailable.
  int64_t argument_bytes = -1, output_bytes = -1, alias_bytes = -1, temp_bytes = -1, generated_code_bytes = -1,
          peak_bytes = -1;
  // PJRT_Executable_OptimizedProgram: the compiled HLO as the plugin serializes it
  // (optimized_format "hlo": a serialized HloModuleProto).
  std::string optimized_program;
  std::string optimized_format;
};

// Splits optimal_seconds into (modelled seconds, unmodelled instructions): the integer count
// of -1 s terms is the largest n with value + n >= 0.
void SplitOptimalSeconds(double optimal_seconds, double* modelled_seconds, int64_t* unmodelled_instructions);

class TopologyCompiler {
 public:
  // Loads the plugin at `plugin_path` (a second dlopen when another plugin runs) and creates the
  // named topology ("v5e:2x2", "v6e:1x1"). Throws Error naming the path or the topology.
  TopologyCompiler(const std::string& plugin_path, const std::string& topology_name);
  ~TopologyCompiler();
  TopologyCompiler(const TopologyCompiler&) = delete;
  TopologyCompiler& operator=(const TopologyCompiler&) = delete;

  const std::string& topology_name() const { return topology_name_; }
  // Compiles StableHLO text; a compiler error is returned in the result, never thrown.
  TopologyProgram Compile(const std::string& mlir_text, int64_t num_replicas = 1, int64_t num_partitions = 1) const;

 private:
  std::shared_ptr<Plugin> plugin_;
  std::string topology_name_;
  PJRT_TopologyDescription* topology_ = nullptr;
};

}  // namespace tpu::pjrt
