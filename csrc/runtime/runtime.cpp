#include "runtime.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "../lowering/lowering.h"
#include "compile_notice.h"
#include "disk_cache.h"
#include "dump.h"
#include "executor.h"
#include "env.h"
#include "long_wait.h"
#include "metrics.h"
#include "profiler_events.h"
#include "program.h"
#include "tpu_target.h"

namespace tpu::runtime {
namespace {

RuntimeConfig& PendingConfig() {
  static RuntimeConfig config;
  return config;
}
std::mutex g_runtime_mu;
Runtime* g_runtime = nullptr;

int64_t MicrosecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

PJRT_Buffer_Type ToPjrt(shlo::ElemType t) {
  using shlo::ElemType;
  switch (t) {
    case ElemType::Pred: return PJRT_Buffer_Type_PRED;
    case ElemType::S8: return PJRT_Buffer_Type_S8;
    case ElemType::S16: return PJRT_Buffer_Type_S16;
    case ElemType::S32: return PJRT_Buffer_Type_S32;
    case ElemType::S64: return PJRT_Buffer_Type_S64;
    case ElemType::U8: return PJRT_Buffer_Type_U8;
    case ElemType::U16: return PJRT_Buffer_Type_U16;
    case ElemType::U32: return PJRT_Buffer_Type_U32;
    case ElemType::U64: return PJRT_Buffer_Type_U64;
    case ElemType::F16: return PJRT_Buffer_Type_F16;
    case ElemType::BF16: return PJRT_Buffer_Type_BF16;
    case ElemType::F32: return PJRT_Buffer_Type_F32;
    case ElemType::F64: return PJRT_Buffer_Type_F64;
    case ElemType::C64: return PJRT_Buffer_Type_C64;
    case ElemType::C128: return PJRT_Buffer_Type_C128;
  }
  return PJRT_Buffer_Type_INVALID;
}

pjrt::BufferPtr TpuStorage::Materialize(shlo::ElemType elem_if_new) {
  if (pending) Executor::Get().FlushFor(*this, "read of a pending value");
  std::lock_guard<std::mutex> lock(mu);
  if (!error.empty()) throw std::runtime_error(error);
  if (buffer) return buffer;
  elem = elem_if_new;
  dims.clear();
  std::vector<char> zeros(nbytes, 0);
  buffer = Runtime::Get().client().FromHost(zeros.data(), ToPjrt(elem), {numel()}, device);
  return buffer;
}

std::vector<int64_t> TpuStorage::ShapedDims(const std::vector<int64_t>& buffer_dims) {
  if (buffer_dims.size() < 2) return {};
  for (int64_t d : buffer_dims)
    if (d == 0) return {};
  return buffer_dims;
}

void TpuStorage::Assign(pjrt::BufferPtr b, shlo::ElemType e, CheckSet guards, const std::vector<int64_t>& buffer_dims) {
  // The open graph would later overwrite this value with a stale one: run it first.
  if (pending) Executor::Get().FlushFor(*this, "overwrite of a pending value");
  std::lock_guard<std::mutex> lock(mu);
  buffer = std::move(b);
  elem = e;
  dims = ShapedDims(buffer_dims);
  error.clear();
  checks = std::move(guards);
  guarded.store(!checks.empty(), std::memory_order_release);
}

CheckSet TpuStorage::Checks() {
  std::lock_guard<std::mutex> lock(mu);
  if (!checks.empty()) {
    checks.Prune();
    guarded.store(!checks.empty(), std::memory_order_release);
  }
  return checks;
}

void TpuStorage::SetChecks(CheckSet guards) {
  std::lock_guard<std::mutex> lock(mu);
  checks = std::move(guards);
  guarded.store(!checks.empty(), std::memory_order_release);
}

void TpuStorage::AddChecksTo(CheckSet& guards) {
  if (!guarded.load(std::memory_order_acquire)) return;
  guards.Merge(Checks());  // merged outside the lock: Merge may wait for flags
}

void TpuStorage::RaiseChecks() const {
  if (!guarded.load(std::memory_order_acquire)) return;
  CheckSet guards;
  {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu));
    if (checks.empty()) return;
    guards = checks;
  }
  guards.Raise();  // outside the lock: it may run the open fused graph
}

void TpuStorage::AssignComputed(pjrt::BufferPtr b, shlo::ElemType e) {
  std::lock_guard<std::mutex> lock(mu);
  buffer = std::move(b);
  elem = e;
  pending = false;
  error.clear();
}

void TpuStorage::MarkFailed(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu);
  error = message;
  pending = false;
}

void TpuStorage::ReadBytes(void* dst) const {
  if (pending) Executor::Get().FlushFor(*this, "device to host");
  RaiseChecks();
  ReadBytesUnchecked(dst);
}

void TpuStorage::ReadBytesUnchecked(void* dst) const {
  CheckBeforeHostRead();
  if (pending) Executor::Get().FlushFor(*this, "device to host");
  pjrt::BufferPtr b;
  {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu));
    if (!error.empty()) throw std::runtime_error(error);
    b = buffer;
  }
  if (!b) {
    std::memset(dst, 0, nbytes);
    return;
  }
  profiler::Scope transfer(profiler::Kind::Transfer, "tpu transfer: device to host");
  transfer.Device(device);
  transfer.Arg("bytes", std::to_string(nbytes));
  b->ToHost(dst, nbytes);  // waits for the program computing the value: a host wait shows here
  GetMetrics().device_to_host_bytes += static_cast<int64_t>(nbytes);
}

void Runtime::Configure(const RuntimeConfig& config) {
  std::lock_guard<std::mutex> lock(g_runtime_mu);
  if (g_runtime == nullptr) PendingConfig() = config;
}

bool Runtime::SetKeyValueStore(std::shared_ptr<pjrt::KeyValueStore> store) {
  std::lock_guard<std::mutex> lock(g_runtime_mu);
  if (g_runtime != nullptr) return false;
  PendingConfig().kv_store = std::move(store);
  return true;
}

RuntimeConfig Runtime::CurrentConfig() {
  std::lock_guard<std::mutex> lock(g_runtime_mu);
  return g_runtime != nullptr ? g_runtime->config_ : PendingConfig();
}

bool Runtime::Initialized() {
  std::lock_guard<std::mutex> lock(g_runtime_mu);
  return g_runtime != nullptr;
}

Runtime& Runtime::Get() {
  // Fast path without the lock once created; creation is guarded.
  Runtime* r = __atomic_load_n(&g_runtime, __ATOMIC_ACQUIRE);
  if (r) return *r;
  std::lock_guard<std::mutex> lock(g_runtime_mu);
  if (g_runtime == nullptr) {
    // Never destroyed: plugin threads and PyTorch tensors may outlive static destructors.
    __atomic_store_n(&g_runtime, new Runtime(PendingConfig()), __ATOMIC_RELEASE);
  }
  return *g_runtime;
}

Runtime::Runtime(const RuntimeConfig& config) : config_(config) {
  if (config_.plugin_path.empty()) {
    throw pjrt::Error("no PJRT plugin configured (set TORCH_TPU_PJRT_PLUGIN or install xla-cpu-pjrt)", 5);
  }
  // Every setting is checked before the client starts, so a bad value fails the first use
  // with an error that names the variable (never a misread number, a hang or a crash).
  // c10::DeviceIndex is 8 bits; the CPU plugin also starts a thread pool per device.
  if (config_.num_devices <= 0) config_.num_devices = static_cast<int>(EnvInt("TORCH_TPU_NUM_DEVICES", 1, 64).value_or(1));
  if (auto v = EnvInt("TORCH_TPU_MAX_PROGRAMS", 1, INT64_MAX)) max_programs_ = static_cast<size_t>(*v);
  std::optional<int64_t> max_mappings = EnvInt("TORCH_TPU_MAX_MAPPINGS", 1, INT64_MAX);
  (void)EnvBytes("TORCH_TPU_MEMORY_LIMIT");
  (void)EnvBytes("TORCH_TPU_CACHE_MAX_BYTES");
  (void)EnvInt("TORCH_TPU_FUSED_MAX_OPS", 1, INT64_MAX);  // read by fused mode, checked in every mode
  (void)EnvInt("TORCH_TPU_FUSED_COMPILE_AFTER", 1, INT64_MAX);
  (void)EnvInt("TORCH_TPU_FUSED_WAIT_AFTER", 0, INT64_MAX);
  (void)EnvInt("TORCH_TPU_FUSED_WAIT_RATIO", 0, INT64_MAX);
  (void)EnvInt("TORCH_TPU_FUSED_COMPILE_THREADS", 1, 64);
  (void)EnvInt("TORCH_TPU_QUICK_OP_COMPILE", 0, 1);  // read by per-op programs (executor.cpp)
  double wait_notice_s = EnvSeconds("TORCH_TPU_WAIT_NOTICE_S").value_or(5.0);
  auto plugin = pjrt::Plugin::Load(config_.plugin_path);
  const char* quiet = std::getenv("TORCH_TPU_QUIET");
  ObserveLongWaits(*plugin, wait_notice_s, quiet && *quiet && std::string(quiet) != "0");
  // Only the CPU plugin knows cpu_device_count; it is the one whose path says so.
  bool is_cpu_plugin = config_.plugin_path.find("cpu") != std::string::npos;
  // The CPU plugin has no collectives across processes, so it gets neither the launcher's
  // options nor the store: each process is alone there (torch.distributed goes through Gloo).
  pjrt::ClientOptions client_options;
  if (is_cpu_plugin) {
    client_options.create_options.push_back({"cpu_device_count", int64_t{config_.num_devices}});
  } else {
    client_options.create_options = config_.client_options;
    client_options.kv_store = config_.kv_store;
  }
  client_ = std::make_unique<pjrt::Client>(plugin, client_options);
  compile_options_ = pjrt::PortableCompileOptions();
  AddPlatformOverrides(compile_options_);
  // Plugins read compiler flags from the environment too (XLA_FLAGS; libtpu's
  // LIBTPU_INIT_ARGS): an executable compiled under other flags is another program on disk.
  disk_key_options_ = compile_options_;
  for (const char* name : {"XLA_FLAGS", "LIBTPU_INIT_ARGS"}) {
    const char* value = std::getenv(name);
    disk_key_options_ += std::string(1, '\0') + name + "=" + (value ? value : "");
  }
  // Quick compiles: LLVM at -O0 without its expensive passes (XLA's HLO passes still run).
  // On the XLA CPU plugin this cuts a small program's compile by more than half.
  quick_compile_options_ = compile_options_;
  pjrt::AppendOptionOverride(quick_compile_options_, "xla_backend_optimization_level", int64_t{0});
  pjrt::AppendOptionOverride(quick_compile_options_, "xla_llvm_disable_expensive_passes", true);
  quick_disk_key_options_ = disk_key_options_ + std::string(1, '\0') + quick_compile_options_;
  if (!DumpDir().empty())
    dump_platform_ = client_->platform_name() + " " + client_->platform_version() + ", PJRT API " +
                     std::to_string(plugin->api_major()) + "." + std::to_string(plugin->api_minor()) + ", plugin " +
                     config_.plugin_path;
  cache_dir_ = DiskCacheDir(client_->platform_name(), client_->platform_version(), plugin->api_major(),
                            plugin->api_minor());
  // Every platform but the XLA CPU plugin compiles chlo.ragged_dot (TORCH_TPU_RAGGED_DOT=0/1 overrides).
  const char* ragged = std::getenv("TORCH_TPU_RAGGED_DOT");
  lowering::SetRaggedDot(ragged && *ragged ? std::string(ragged) != "0" : client_->platform_name() != "cpu");
  // Programs for a TPU avoid what libtpu cannot compile: always on a TPU platform; elsewhere
  // TORCH_TPU_TPU_LOWERINGS=1 builds the TPU variants (they run on any plugin), e.g. so that
  // TORCH_TPU_ALSO_COMPILE_FOR compiles what a TPU would run. Off by default there, because the
  // variants refuse a few ops (README, "TPU refusals") that the platform itself runs.
  lowering::SetTpuTarget(client_->platform_name() == "tpu" || EnvInt("TORCH_TPU_TPU_LOWERINGS", 0, 1).value_or(0) == 1);
  if (client_->platform_name() == "cpu") {
    long long max_maps = 65530;
    if (FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
      if (std::fscanf(f, "%lld", &max_maps) != 1) max_maps = 65530;
      std::fclose(f);
    }
    max_mappings_ = static_cast<size_t>(std::max<long long>(1000, max_maps));
  }
  if (max_mappings) max_mappings_ = static_cast<size_t>(*max_mappings);
}

// XLA's CPU JIT maps every kernel of a program into three memory mappings (code, constants,
// data) and keeps them for the life of the process: a per-op program takes about 3, a whole
// training step hundreds. Its unwind tables are never deregistered, so executables cannot be
// freed safely either. Past the kernel's vm.max_map_count (65530 by default) mmap fails inside
// XLA (a thread stack, a JIT section) and the process aborts; so the mappings are counted
// before a program is loaded, optional whole-graph programs stop at half the budget, and past
// 90% a load raises a clear error. TORCH_TPU_MAX_MAPPINGS overrides the budget;
// TORCH_TPU_MAX_PROGRAMS adds a limit on the program count.
size_t Runtime::MappingsInUse() {
  size_t programs;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    programs = executables_.size();
    if (programs < recount_at_programs_) return mappings_seen_;
  }
  size_t lines = 0;
  if (FILE* f = std::fopen("/proc/self/maps", "r")) {
    char chunk[1 << 16];
    size_t n;
    while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0)
      for (size_t i = 0; i < n; ++i) lines += chunk[i] == '\n';
    std::fclose(f);
  }
  // The next count after 1 program per 2000 mappings of headroom below the error threshold:
  // even a 1000-op fused graph maps fewer.
  size_t limit = max_mappings_ / 10 * 9;
  size_t headroom = limit > lines ? limit - lines : 0;
  std::lock_guard<std::mutex> lock(cache_mu_);
  mappings_seen_ = lines;
  recount_at_programs_ = programs + std::max<size_t>(1, headroom / 2000);
  return lines;
}

bool Runtime::MappingsTight() { return max_mappings_ > 0 && MappingsInUse() > max_mappings_ / 2; }

void Runtime::CheckProgramLimit() {
  size_t programs = compiled_programs();
  if (programs >= max_programs_) {
    throw pjrt::Error("tpu: this process already holds " + std::to_string(programs) +
                          " compiled programs, the most it can (TORCH_TPU_MAX_PROGRAMS=" + std::to_string(max_programs_) +
                          "). Use fewer distinct shapes per process, or start a new process.",
                      9);
  }
  if (max_mappings_ == 0) return;
  size_t mappings = MappingsInUse();
  if (mappings <= max_mappings_ / 10 * 9) return;
  throw pjrt::Error("tpu: this process holds " + std::to_string(programs) + " compiled programs in " +
                        std::to_string(mappings) + " memory mappings, near the kernel's vm.max_map_count (" +
                        std::to_string(max_mappings_) +
                        "): XLA's CPU JIT keeps each program's code mapped for the life of the process. Raise the "
                        "limit (sysctl -w vm.max_map_count=262144), use fewer distinct shapes per process, or start "
                        "a new process.",
                    9);
}

std::string Runtime::Dump(const std::string& module_text, const std::string& op_name, const std::string& detail,
                          bool from_disk, const std::string& disk_key, Effort effort) {
  if (DumpDir().empty()) return "";
  bool quick = effort == Effort::kQuick;
  DumpRecord record{op_name, detail, from_disk, dump_platform_, quick ? quick_compile_options_ : compile_options_,
                    disk_key.empty() && !cache_dir_.empty()
                        ? DiskCacheKey(module_text, quick ? quick_disk_key_options_ : disk_key_options_)
                        : disk_key};
  return DumpProgram(record, module_text);
}

std::string Runtime::DumpWithOptions(const std::string& module_text, const std::string& name,
                                     const std::string& compile_options) const {
  if (DumpDir().empty()) return "";
  return DumpProgram(DumpRecord{name, "", false, dump_platform_, compile_options, ""}, module_text);
}

std::string Runtime::MemoryKey(const std::string& module_text, Effort effort) {
  return effort == Effort::kQuick ? "// quick\n" + module_text : module_text;
}

pjrt::ExecutablePtr Runtime::Cached(const std::string& module_text, const std::string& op_name,
                                    const std::string& detail) {
  std::string key;
  return Cached(module_text, op_name, detail, &key, Effort::kFull);
}

pjrt::ExecutablePtr Runtime::Cached(const std::string& module_text, const std::string& op_name,
                                    const std::string& detail, std::string* disk_key, Effort effort) {
  const std::string memory_key = MemoryKey(module_text, effort);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = executables_.find(memory_key);
    if (it != executables_.end()) {
      GetMetrics().compile_cache_hits++;
      if (profiler::Recording()) RecordCompile(op_name, "memory", profiler::NowNs(), KeyOfLocked(it->second.get()));
      return it->second;
    }
  }
  if (cache_dir_.empty()) return nullptr;
  *disk_key = DiskCacheKey(module_text, effort == Effort::kQuick ? quick_disk_key_options_ : disk_key_options_);
  const std::string& key = *disk_key;
  auto start = std::chrono::steady_clock::now();
  int64_t start_ns = profiler::Recording() ? profiler::NowNs() : 0;
  std::string bytes;
  if (!DiskCacheRead(cache_dir_, key, &bytes)) return nullptr;
  CheckProgramLimit();
  pjrt::ExecutablePtr exe = client_->Deserialize(bytes);
  if (!exe) return nullptr;  // a file from another plugin build, or damaged: compiling overwrites it
  Metrics& m = GetMetrics();
  m.disk_cache_hits++;
  m.disk_load_time_us +=
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
  std::string dumped = Dump(module_text, op_name, detail, /*from_disk=*/true, key, effort);
  int64_t logged = LogForTpuTarget(op_name, module_text, dumped, /*from_disk=*/true);
  if (start_ns != 0) RecordCompile(op_name, "disk", start_ns, key);
  std::lock_guard<std::mutex> lock(cache_mu_);
  const pjrt::ExecutablePtr& kept = executables_.emplace(memory_key, exe).first->second;
  keys_.emplace(kept.get(), key);
  TrackTpuTargetRuns(kept.get(), logged);
  return kept;
}

pjrt::ExecutablePtr Runtime::Compile(const std::string& module_text, const std::string& op_name, bool notice,
                                     const std::string& detail, Effort effort) {
  std::string key;
  if (pjrt::ExecutablePtr exe = Cached(module_text, op_name, detail, &key, effort)) return exe;
  Metrics& m = GetMetrics();
  std::promise<pjrt::ExecutablePtr> compiled;
  const std::string memory_key = MemoryKey(module_text, effort);
  {
    std::unique_lock<std::mutex> lock(cache_mu_);
    auto done = executables_.find(memory_key);  // finished since Cached looked
    if (done != executables_.end()) return done->second;
    auto running = compiling_.find(memory_key);
    if (running != compiling_.end()) {
      std::shared_future<pjrt::ExecutablePtr> other = running->second;
      lock.unlock();
      m.compile_in_flight_waits++;
      std::optional<CompileNotice> waiting;
      if (notice) waiting.emplace(op_name, cache_dir_);
      profiler::Scope wait(profiler::Kind::Compile, "");
      wait.Rename("tpu compile wait: " + op_name);
      wait.Arg("cache", "compiling on another thread");
      return other.get();
    }
    compiling_.emplace(memory_key, compiled.get_future().share());
  }
  // Whatever happens below, waiters get this thread's result, and the entry goes.
  auto finish = [&](pjrt::ExecutablePtr exe, std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (exe) {
      exe = executables_.emplace(memory_key, exe).first->second;
      keys_.emplace(exe.get(), key.empty() ? TextKey(module_text) : key);
    }
    compiling_.erase(memory_key);
    if (error) {
      compiled.set_exception(error);
    } else {
      compiled.set_value(exe);
    }
    return exe;
  };
  try {
    return finish(CompileUncached(module_text, op_name, notice, detail, key, effort), nullptr);
  } catch (...) {
    finish(nullptr, std::current_exception());
    throw;
  }
}

pjrt::ExecutablePtr Runtime::CompileUncached(const std::string& module_text, const std::string& op_name, bool notice,
                                             const std::string& detail, const std::string& key, Effort effort) {
  Metrics& m = GetMetrics();
  if (!key.empty()) m.disk_cache_misses++;
  CheckProgramLimit();
  std::string dumped = Dump(module_text, op_name, detail, /*from_disk=*/false, key, effort);
  int64_t logged = LogForTpuTarget(op_name, module_text, dumped, /*from_disk=*/false);
  auto start = std::chrono::steady_clock::now();
  int64_t start_ns = profiler::Recording() ? profiler::NowNs() : 0;
  pjrt::ExecutablePtr exe;
  std::optional<CompileNotice> waiting;
  if (notice) waiting.emplace(op_name, cache_dir_);
  try {
    exe = client_->Compile(module_text, effort == Effort::kQuick ? quick_compile_options_ : compile_options_);
  } catch (const pjrt::Error& e) {
    DumpCompileEnd(dumped, MicrosecondsSince(start), e.what());
    throw pjrt::Error("compiling " + op_name + " failed: " + e.what() + "\n" + module_text, e.code());
  }
  DumpCompileEnd(dumped, MicrosecondsSince(start));
  TrackTpuTargetRuns(exe.get(), logged);
  if (!key.empty()) {
    try {
      std::string bytes = exe->Serialize();
      if (!bytes.empty()) DiskCacheWrite(cache_dir_, key, bytes);
    } catch (const std::exception&) {
      // The disk cache is an optimisation: a full disk or a read-only home never fails an op.
    }
  }
  int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
  m.programs_compiled++;
  if (effort == Effort::kQuick) m.programs_compiled_quick++;
  m.compile_time_us += us;
  if (start_ns != 0) RecordCompile(op_name, "miss", start_ns, key.empty() ? TextKey(module_text) : key);
  if (us > m.slowest_compile_us) {
    m.slowest_compile_us = us;
    std::lock_guard<std::mutex> lock(m.mu);
    m.slowest_compile_op = op_name;
  }
  return exe;
}

std::string Runtime::TextKey(const std::string& module_text) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: the key of a program outside the disk cache
  for (unsigned char c : module_text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char out[20];
  snprintf(out, sizeof(out), "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string Runtime::KeyOf(const pjrt::Executable* exe) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return KeyOfLocked(exe);
}

std::string Runtime::KeyOfLocked(const pjrt::Executable* exe) const {
  auto it = keys_.find(exe);
  return it == keys_.end() ? "" : it->second;
}

void Runtime::RecordCompile(const std::string& op_name, const char* cache, int64_t start_ns, const std::string& key) {
  profiler::Event e;
  e.kind = profiler::Kind::Compile;
  e.name = std::string(cache[0] == 'm' && cache[1] == 'i' ? "tpu compile: " : "tpu program load: ") + op_name;
  e.start_ns = start_ns;
  e.end_ns = profiler::NowNs();
  e.args = {{"cache", cache[0] == 'm' && cache[1] == 'i' ? "miss" : std::string("hit (") + cache + ")"}, {"cache key", key}};
  std::string reason = profiler::TakeRecompileReason();
  if (!reason.empty()) e.args.emplace_back("recompile reason", std::move(reason));
  profiler::Record(std::move(e));
}

size_t Runtime::compiled_programs() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return executables_.size();
}

uintptr_t Runtime::Register(std::shared_ptr<TpuStorage> s) {
  std::lock_guard<std::mutex> lock(address_mu_);
  uintptr_t address = next_address_;
  // Keep addresses distinct and 64-byte aligned even for empty storages.
  next_address_ += ((s->nbytes + 63) / 64 + 1) * 64;
  storages_[address] = std::move(s);
  return address;
}

TpuStorage* Runtime::LookupContaining(uintptr_t address, int64_t* byte_offset) {
  std::lock_guard<std::mutex> lock(address_mu_);
  auto it = storages_.upper_bound(address);
  if (it == storages_.begin()) return nullptr;
  --it;
  uintptr_t offset = address - it->first;
  if (offset > it->second->nbytes) return nullptr;
  *byte_offset = static_cast<int64_t>(offset);
  return it->second.get();
}

void Runtime::Unregister(uintptr_t address) {
  std::shared_ptr<TpuStorage> dropped;  // destroyed outside the lock
  std::lock_guard<std::mutex> lock(address_mu_);
  auto it = storages_.find(address);
  if (it == storages_.end()) return;
  dropped = std::move(it->second);
  storages_.erase(it);
}

TpuStorage* Runtime::Lookup(uintptr_t address) {
  std::lock_guard<std::mutex> lock(address_mu_);
  auto it = storages_.find(address);
  return it == storages_.end() ? nullptr : it->second.get();
}

std::string Runtime::Label::Describe() const {
  if (!program) return "a program";
  if (fused_ops == 0) return program->name;
  return "fused graph of " + std::to_string(fused_ops) + (fused_ops > 1 ? " ops" : " op") + " ending in " +
         program->name;
}

void Runtime::AddPlatformOverrides(std::string& options) const {
  // XLA CPU's XNNPACK dots keep operands they have packed, keyed by the buffer's address, as
  // if a parameter's memory never changed. A donated in-place write (an optimizer step on a
  // weight) changes it at the same address, and a later dot read the stale packing: gradients
  // off by up to 50% (tests/test_donation.py). Its Eigen dots read the memory.
  // TORCH_TPU_CPU_XNNPACK=1 keeps XNNPACK (to compare speed, or to see the bug).
  if (client_->platform_name() == "cpu" && EnvInt("TORCH_TPU_CPU_XNNPACK", 0, 1).value_or(0) == 0)
    pjrt::AppendOptionOverride(options, "xla_cpu_use_xnnpack", false);
}

std::vector<pjrt::BufferPtr> Runtime::Execute(const pjrt::Executable& exe, int device,
                                              const std::vector<PJRT_Buffer*>& args, Label label,
                                              const std::vector<bool>& donated) {
  pjrt::EventPtr done;
  auto start = std::chrono::steady_clock::now();
  int64_t enqueue_ns = profiler::Recording() ? profiler::NowNs() : 0;
  std::vector<pjrt::BufferPtr> outputs = exe.Execute(client_->device(device), args, &done, donated);
  CountTpuTargetRun(&exe);
  if (done == nullptr) return outputs;
  if (enqueue_ns != 0) {
    std::string name = label.fused_ops > 0 ? "fused graph of " + std::to_string(label.fused_ops) + " ops"
                                           : (label.program ? label.program->name : "a program");
    profiler::ProgramEnqueued(*done, std::move(name), KeyOf(&exe), device, enqueue_ns, label.fused_ops);
  }
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  if (in_flight_.size() <= static_cast<size_t>(device)) in_flight_.resize(device + 1);
  auto& queue = in_flight_[device];
  // Finished executions are dropped from the front, which keeps the queue short.
  PruneFinished(queue);
  queue.push_back({std::move(done), std::move(label), start});
  queued_.fetch_add(1, std::memory_order_relaxed);
  return outputs;
}

void Runtime::PruneFinished(std::deque<Execution>& queue) {
  while (!queue.empty() && queue.front().done->IsReady()) {
    queue.pop_front();
    queued_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void Runtime::AwaitRoom(int device) {
  // Fewer queued on all devices together: room on this one (no lock on the common path).
  if (queued_.load(std::memory_order_relaxed) < kMaxRunning) return;
  for (;;) {
    pjrt::EventPtr oldest;
    {
      std::lock_guard<std::mutex> lock(in_flight_mu_);
      if (in_flight_.size() <= static_cast<size_t>(device)) return;
      auto& queue = in_flight_[device];
      PruneFinished(queue);
      if (queue.size() < kMaxRunning) return;
      oldest = queue.front().done;
    }
    oldest->AwaitIgnoringError();
  }
}

void Runtime::AwaitExecutions(int device) {
  std::vector<pjrt::EventPtr> pending;
  {
    std::lock_guard<std::mutex> lock(in_flight_mu_);
    for (size_t d = 0; d < in_flight_.size(); ++d) {
      if (device >= 0 && static_cast<size_t>(device) != d) continue;
      for (const Execution& e : in_flight_[d]) pending.push_back(e.done);
    }
  }
  for (auto& event : pending) event->AwaitIgnoringError();  // may be abandoned: they stay queued
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  for (size_t d = 0; d < in_flight_.size(); ++d) {
    auto& queue = in_flight_[d];
    PruneFinished(queue);
  }
}

int Runtime::ExecutionsInFlight(int device) {
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  if (device < 0 || static_cast<size_t>(device) >= in_flight_.size()) return 0;
  int count = 0;
  for (const Execution& e : in_flight_[device]) count += e.done->IsReady() ? 0 : 1;
  return count;
}

bool Runtime::OldestRunning(Running* out) {
  std::lock_guard<std::mutex> lock(in_flight_mu_);
  const Execution* oldest = nullptr;
  int running = 0;
  for (size_t d = 0; d < in_flight_.size(); ++d) {
    for (const Execution& e : in_flight_[d]) {
      if (e.done->IsReady()) continue;
      running++;
      if (oldest == nullptr || e.start < oldest->start) {
        oldest = &e;
        out->device = static_cast<int>(d);
      }
    }
  }
  if (oldest == nullptr) return false;
  out->name = oldest->label.Describe();
  out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - oldest->start).count();
  out->others = running - 1;
  return true;
}

void Runtime::ForEachStorage(const std::function<void(TpuStorage*)>& fn) {
  std::lock_guard<std::mutex> lock(address_mu_);
  for (auto& [address, storage] : storages_) fn(storage.get());
}

void ForEachStorage(const std::function<void(TpuStorage*)>& fn) { Runtime::Get().ForEachStorage(fn); }

}  // namespace tpu::runtime
