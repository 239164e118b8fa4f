// The process-wide device runtime: the PJRT client, device storages and the compiler.
// No torch headers: csrc/aten adapts at::Tensor to what is here.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../pjrt/pjrt.h"
#include "../stablehlo/builder.h"
#include "compile_effort.h"
#include "device_checks.h"

namespace tpu::runtime {

struct Program;

PJRT_Buffer_Type ToPjrt(shlo::ElemType t);

// The memory behind one PyTorch storage: a device array holding its bytes as elements of
// `elem`, shaped like the tensor that made it or last wrote it whole (`dims`), else 1-D.
// TPUs tile arrays of rank >= 2, so a flat buffer read as a matrix is a relayout copy; a
// buffer in the tensor's shape is read as it is. `buffer` is null until first written
// (reads then see zeros). Swapping the buffer is how writes land: every tensor viewing this
// storage sees the new value.
struct TpuStorage : std::enable_shared_from_this<TpuStorage> {
  uint64_t uid = 0;       // never reused, unlike addresses: identifies the storage in fused graphs
  // Its value is being computed by a fused graph: set when recorded, cleared only when that
  // graph hands over the value (AssignComputed) or fails (MarkFailed), never before. Threads
  // other than the recording one read it (rank threads, autograd's device threads): one that
  // sees it false reads the value, one that sees it true flushes, which waits on the graph lock
  // for a flush already running.
  std::atomic<bool> pending{false};
  int device = 0;
  size_t nbytes = 0;
  uintptr_t address = 0;  // the fake data pointer PyTorch sees (unique, never dereferenced)
  std::mutex mu;
  pjrt::BufferPtr buffer;
  shlo::ElemType elem = shlo::ElemType::U8;
  // The buffer's dims when shaped (rank >= 2, product numel()); empty: 1-D [numel()].
  std::vector<int64_t> dims;
  // Set when the fused graph that was to compute this value failed: reading it raises this
  // (the value never existed), until the storage is wholly overwritten.
  std::string error;
  // The deferred device checks guarding the current value (device_checks.h). Changed only
  // through Assign/SetChecks/Checks, which keep `guarded` equal to !checks.empty().
  CheckSet checks;
  // Read without the lock: most values carry no checks, and every op asks each input
  // (AddChecksTo), so the common case costs one atomic load instead of a lock and a copy.
  std::atomic<bool> guarded{false};

  int64_t numel() const { return static_cast<int64_t>(nbytes / shlo::ByteSize(elem)); }
  // The buffer's dims as a program parameter types it.
  std::vector<int64_t> BufferDims() const { return dims.empty() ? std::vector<int64_t>{numel()} : dims; }
  // What `dims` records for a buffer of these dims: only shapes of rank >= 2 holding elements.
  static std::vector<int64_t> ShapedDims(const std::vector<int64_t>& buffer_dims);
  // The buffer, created as zeros of `elem_if_new` when never written.
  pjrt::BufferPtr Materialize(shlo::ElemType elem_if_new);
  // A new value for the whole storage, guarded by `guards` (none for bytes from the host),
  // a buffer of dims `buffer_dims` (1-D when empty).
  void Assign(pjrt::BufferPtr b, shlo::ElemType e, CheckSet guards = {}, const std::vector<int64_t>& buffer_dims = {});
  // Assign from the fused graph that computed a pending value (no flush); its dims were set
  // when it became pending.
  void AssignComputed(pjrt::BufferPtr b, shlo::ElemType e);
  // The fused graph that was to compute this pending value failed with `message`.
  void MarkFailed(const std::string& message);
  // The checks guarding the current value (pruned of those known to pass), and replacing them.
  CheckSet Checks();
  void SetChecks(CheckSet guards);
  // Merges the checks guarding the current value into `guards` (nothing to do when unguarded).
  void AddChecksTo(CheckSet& guards);
  // Throws CheckFailed if a check guarding the value failed (waits for the checks).
  void RaiseChecks() const;
  // Raw bytes of the storage (zeros if never written), after RaiseChecks: a host read.
  // Waits for pending work.
  void ReadBytes(void* dst) const;
  // The same bytes without raising (a partial write patched on the host keeps the checks).
  void ReadBytesUnchecked(void* dst) const;
};

struct RuntimeConfig {
  std::string plugin_path;
  int num_devices = 1;
  // PJRT_Client_Create options for a plugin other than the CPU one (one process per chip
  // under a launcher: torch_tpu/launch_env.py), and the job's key-value store (null: alone).
  std::vector<pjrt::ClientOption> client_options;
  std::shared_ptr<pjrt::KeyValueStore> kv_store;
};

class Runtime {
 public:
  // Set before first use (from Python); later calls are ignored once the client exists.
  static void Configure(const RuntimeConfig& config);
  // The job's key-value store, for a client not started yet (false once it has started).
  static bool SetKeyValueStore(std::shared_ptr<pjrt::KeyValueStore> store);
  // The configuration the client started with, or will start with.
  static RuntimeConfig CurrentConfig();
  static bool Initialized();
  static Runtime& Get();  // creates the client on first use; throws pjrt::Error

  pjrt::Client& client() { return *client_; }
  int device_count() const { return static_cast<int>(client_->devices().size()); }
  const std::string& platform() const { return client_->platform_name(); }
  const RuntimeConfig& config() const { return config_; }

  // Compiles a module, or finds it in the memory cache, or loads it from the disk cache
  // ($TORCH_TPU_CACHE_DIR); `op_name` is for errors and metrics. `notice`: a caller waits on it
  // (compile_notice.h); background compiles keep quiet. `detail` only goes into the dump
  // (TORCH_TPU_DUMP_DIR, dump.h), as does `op_name`. A module another thread is compiling
  // (a compiled graph's program compiled ahead of its first run, a fused graph's background
  // compile) is waited for, not compiled a second time; its failure is rethrown here too.
  // `effort`: kQuick compiles with the compiler's optimisation effort lowered, for programs
  // that mostly run a few times and give the same values either way (compile_effort.h). Both
  // kinds are kept apart in memory and on disk.
  using Effort = runtime::Effort;
  pjrt::ExecutablePtr Compile(const std::string& module_text, const std::string& op_name, bool notice = true,
                              const std::string& detail = "", Effort effort = Effort::kFull);
  // The executable of a module compiled before (memory cache, then disk cache); null if none.
  pjrt::ExecutablePtr Cached(const std::string& module_text, const std::string& op_name = "",
                             const std::string& detail = "");
  // Folder of this plugin's disk cache ("" when disabled).
  const std::string& cache_dir() const { return cache_dir_; }
  size_t compiled_programs() const;
  // The cache key of a loaded executable: its disk-cache key, or a hash of its module text
  // when the disk cache is off ("" for one compiled outside the caches).
  std::string KeyOf(const pjrt::Executable* exe) const;
  static std::string TextKey(const std::string& module_text);
  // True once the process's memory mappings pass half of vm.max_map_count (CPU platform):
  // optional programs (whole fused graphs, which each map dozens of kernels) are not loaded
  // then, and their ops run through the shared per-op programs instead.
  bool MappingsTight();

  // What an execution runs, named only when a wait on it lasts (long_wait.h): keeping the
  // program costs one reference per execution, where its name would cost a string copy.
  struct Label {
    std::shared_ptr<const Program> program;  // the op or graph; of a fused graph, its last op
    size_t fused_ops = 0;                    // > 0: a fused graph of this many ops
    std::string Describe() const;
  };
  // Runs `exe` on `device` (asynchronously) and remembers the execution until it finishes, so
  // that AwaitExecutions can wait for programs whose outputs nobody kept.
  // `donated`: as pjrt::Executable::Execute.
  std::vector<pjrt::BufferPtr> Execute(const pjrt::Executable& exe, int device, const std::vector<PJRT_Buffer*>& args,
                                       Label label, const std::vector<bool>& donated = {});
  // Waits (abandonably, long_wait.h) until fewer than kMaxRunning executions run on `device`.
  // Call before Execute: past their own limit plugins block inside Execute (the CPU plugin at
  // 32), a wait nobody can observe or interrupt.
  static constexpr size_t kMaxRunning = 16;
  void AwaitRoom(int device);
  // Waits for every execution started on `device` (all devices when negative). An abandoned
  // wait (long_wait.h) forgets none of them: the next call waits for them again.
  void AwaitExecutions(int device);
  // Executions started on `device` that have not finished yet.
  int ExecutionsInFlight(int device);
  // The oldest execution still running on any device: false when none is.
  struct Running {
    std::string name;
    int device = 0;
    double seconds = 0;  // since it was started
    int others = 0;      // started after it and still running, on every device
  };
  bool OldestRunning(Running* out);

  // Address registry: PyTorch hands us data pointers (e.g. Allocator::copy_data). The
  // registry owns each storage until Unregister (its PyTorch storage died); the fused graph
  // holds weak references to the storages it will write.
  uintptr_t Register(std::shared_ptr<TpuStorage> s);
  void Unregister(uintptr_t address);
  TpuStorage* Lookup(uintptr_t address);
  // The storage whose bytes hold `address` (a pointer into one: an untyped_storage()[a:b]
  // slice, from_blob over tpu memory), and the address's byte offset in it; null when none.
  TpuStorage* LookupContaining(uintptr_t address, int64_t* byte_offset);
  void ForEachStorage(const std::function<void(TpuStorage*)>& fn);

  // Appends the compiler options every program of this platform needs (runtime.cpp says why).
  void AddPlatformOverrides(std::string& options) const;
  // Writes a program compiled with `compile_options` outside the runtime's caches (a collective
  // replicated over several devices) to TORCH_TPU_DUMP_DIR when set; returns the file ("" if none).
  std::string DumpWithOptions(const std::string& module_text, const std::string& name,
                              const std::string& compile_options) const;

 private:
  explicit Runtime(const RuntimeConfig& config);
  void CheckProgramLimit();  // throws pjrt::Error when no more programs can be loaded
  // Cached, setting *disk_key when it hashed the module for the disk cache: Compile reuses the
  // key instead of hashing the module text a second time.
  pjrt::ExecutablePtr Cached(const std::string& module_text, const std::string& op_name, const std::string& detail,
                             std::string* disk_key, Effort effort);
  // Compile's work once no cache holds the module and no other thread compiles it.
  pjrt::ExecutablePtr CompileUncached(const std::string& module_text, const std::string& op_name, bool notice,
                                      const std::string& detail, const std::string& disk_key, Effort effort);
  // The memory cache's key: the module text, marked for a quick compile.
  static std::string MemoryKey(const std::string& module_text, Effort effort);
  // Writes the module to TORCH_TPU_DUMP_DIR when set (dump.h); returns the file ("" if none).
  std::string Dump(const std::string& module_text, const std::string& op_name, const std::string& detail,
                   bool from_disk, const std::string& disk_key, Effort effort);
  size_t MappingsInUse();    // this process's memory mappings, recounted at adaptive intervals
  std::string KeyOfLocked(const pjrt::Executable* exe) const;  // cache_mu_ held
  // A compile event (profiler_events.h): `cache` is "miss", "disk" or "memory".
  static void RecordCompile(const std::string& op_name, const char* cache, int64_t start_ns, const std::string& key);
  RuntimeConfig config_;
  std::unique_ptr<pjrt::Client> client_;
  std::string compile_options_;
  std::string disk_key_options_;  // compile options and the compiler flags read from the environment
  std::string quick_compile_options_;  // compile_options_ with lowered optimisation effort
  std::string quick_disk_key_options_;
  std::string dump_platform_;     // the platform line of dump headers
  std::string cache_dir_;
  size_t max_programs_ = static_cast<size_t>(-1);  // TORCH_TPU_MAX_PROGRAMS
  size_t max_mappings_ = 0;                         // vm.max_map_count on the CPU platform, else 0 (no limit)
  size_t mappings_seen_ = 0;                        // at the last count
  size_t recount_at_programs_ = 0;                  // count again once this many programs are loaded
  mutable std::mutex cache_mu_;
  std::unordered_map<std::string, pjrt::ExecutablePtr> executables_;
  std::unordered_map<const pjrt::Executable*, std::string> keys_;  // of executables_' entries
  std::unordered_map<std::string, std::shared_future<pjrt::ExecutablePtr>> compiling_;  // by module text
  std::mutex address_mu_;
  uintptr_t next_address_ = uintptr_t{1} << 44;
  std::map<uintptr_t, std::shared_ptr<TpuStorage>> storages_;  // ordered: LookupContaining finds the one below
  struct Execution {
    pjrt::EventPtr done;
    Label label;
    std::chrono::steady_clock::time_point start;
  };
  std::mutex in_flight_mu_;
  std::vector<std::deque<Execution>> in_flight_;  // per device, oldest first
  std::atomic<size_t> queued_{0};                 // entries of in_flight_, all devices
  void PruneFinished(std::deque<Execution>& queue);  // drops finished ones at the front (lock held)
};

// Calls `fn` on every live storage (while holding the registry lock).
void ForEachStorage(const std::function<void(TpuStorage*)>& fn);

}  // namespace tpu::runtime
