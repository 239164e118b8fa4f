#pragma once
#include <string>

namespace tpu::runtime {

// A user whose first calls stall on XLA compilation is told, once per process, what is going
// on: which op is compiling, how many programs so far and for how long. A watcher thread
// notices a compile stretch (compiles less than 2 s apart) that lasts past the threshold
// (TORCH_TPU_COMPILE_NOTICE_S, default 5 s), so a single long compile is reported while it
// runs. TORCH_TPU_QUIET=1 silences it.
class CompileNotice {
 public:
  explicit CompileNotice(const std::string& op_name, const std::string& cache_dir);  // a compile starts
  ~CompileNotice();                                                                   // ... and ends
  CompileNotice(const CompileNotice&) = delete;
  CompileNotice& operator=(const CompileNotice&) = delete;
};

}  // namespace tpu::runtime
