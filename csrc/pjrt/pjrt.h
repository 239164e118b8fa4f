// RAII wrapper over the PJRT C API of a dlopen'ed plugin. No torch headers here.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "key_value_store.h"
#include "pjrt_c_api.h"

namespace tpu::pjrt {

// Every PJRT_Error becomes one of these, carrying the plugin's message and its absl code.
class Error : public std::runtime_error {
 public:
  Error(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }
  bool out_of_memory() const { return code_ == 8; }  // absl RESOURCE_EXHAUSTED

 private:
  int code_;
};

// Watches a wait on the device that lasts: called about every 50 ms while a wait that is
// allowed to be abandoned goes on, with the seconds waited so far and what is waited on
// ("device computation"). It may throw to abandon the wait (a Ctrl-C): the computation keeps
// running in the plugin and every buffer it writes stays owned, so a later wait on the same
// value waits again or finds it ready. Waits whose abandonment would let the plugin write into
// memory the caller frees (a transfer into a host buffer) are never abandoned. This is the one
// call that goes up the layers: interrupts and notices belong above (csrc/runtime, csrc/aten).
using WaitObserver = std::function<void(double seconds, const char* what)>;

// A loaded plugin: the dlopen handle and its PJRT_Api table. Never unloaded (plugins
// keep threads and static state that do not survive dlclose).
class Plugin {
 public:
  static std::shared_ptr<Plugin> Load(const std::string& path);
  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int api_major() const { return api_->pjrt_api_version.major_version; }
  int api_minor() const { return api_->pjrt_api_version.minor_version; }
  // Throws Error if `err` is non-null, destroying it; `what` prefixes the message.
  void Check(PJRT_Error* err, const char* what) const;
  // True when device memory is this process's own memory (the CPU plugin): a computed buffer
  // is then read with a plain copy instead of a transfer that the plugin's threads perform.
  bool host_addressable() const { return host_addressable_; }
  void set_host_addressable(bool value) { host_addressable_ = value; }
  // Set once, before the first wait (Runtime's constructor); none: waits block in the plugin.
  void set_wait_observer(WaitObserver observer) { wait_observer_ = std::move(observer); }
  const WaitObserver& wait_observer() const { return wait_observer_; }
  // PJRT_Plugin_Attributes as text: xla_version, stablehlo_current_version and
  // stablehlo_minimum_version ("1.9.3", from [major, minor, patch]), ... Empty when the plugin
  // reports none. Imported kernels are checked against the StableHLO range.
  std::map<std::string, std::string> Attributes() const;
  // The plugin's extension of `type` in its PJRT_Api's extension chain (null: none), e.g.
  // PJRT_Extension_Type_Profiler (libtpu and the CUDA plugin have it; the CPU plugin does not).
  const PJRT_Extension_Base* FindExtension(PJRT_Extension_Type type) const;

 private:
  const PJRT_Api* api_ = nullptr;
  bool host_addressable_ = false;
  WaitObserver wait_observer_;
  std::string path_;
};

class Client;

// An owned device buffer. Destroyed with PJRT_Buffer_Destroy when the last reference goes.
class Buffer {
 public:
  Buffer(std::shared_ptr<Plugin> plugin, PJRT_Buffer* raw) : plugin_(std::move(plugin)), raw_(raw) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  PJRT_Buffer* raw() const { return raw_; }
  std::vector<int64_t> dims() const;
  PJRT_Buffer_Type element_type() const;
  // Copies the whole buffer to `dst` (row-major), waiting for completion.
  void ToHost(void* dst, size_t nbytes) const;
  // Waits until the buffer's value is computed; throws the computation's error if any. The
  // plugin's wait observer may abandon the wait (then it throws what the observer threw).
  void Await() const;
  // Whether the value is computed (or its computation failed), without waiting.
  bool IsReady() const;

 private:
  bool CopyFromHostMemory(void* dst, size_t nbytes) const;

  std::shared_ptr<Plugin> plugin_;
  PJRT_Buffer* raw_;
};
using BufferPtr = std::shared_ptr<Buffer>;

// An owned PJRT_Event (destroyed with the object).
class Event {
 public:
  Event(std::shared_ptr<Plugin> plugin, PJRT_Event* raw) : plugin_(std::move(plugin)), raw_(raw) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  bool IsReady() const;  // also true once it failed
  // Waits; the error it carries, if any, is dropped: whoever reads a value sees it there. The
  // plugin's wait observer may abandon the wait (then it throws what the observer threw).
  void AwaitIgnoringError() const;
  // Calls `fn` on a plugin thread once the event is ready (or failed; at once if it is already),
  // even if this object is destroyed first. False when the plugin cannot notify (fn not called).
  bool OnReady(std::function<void()> fn) const;

 private:
  std::shared_ptr<Plugin> plugin_;
  PJRT_Event* raw_;
};
using EventPtr = std::shared_ptr<Event>;

class Executable {
 public:
  Executable(std::shared_ptr<Plugin> plugin, PJRT_LoadedExecutable* raw);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;
  size_t num_outputs() const { return num_outputs_; }
  // Runs on one device; outputs are returned in result order. Asynchronous: the
  // outputs' values become ready later (Buffer::Await / ToHost wait for them). `done`, when
  // given, receives an event that is ready once the whole execution has finished (outputs
  // nobody keeps included).
  // `donated`: the arguments whose buffers the execution may take over for an output the
  // program aliases to them (their buffers are invalid afterwards); no others are donated.
  std::vector<BufferPtr> Execute(PJRT_Device* device, const std::vector<PJRT_Buffer*>& args,
                                 EventPtr* done = nullptr, const std::vector<bool>& donated = {}) const;
  // Runs a replicated executable once over all its devices: `args[i]` are replica i's
  // arguments, and the result's [i] its outputs (asynchronous, as Execute).
  std::vector<std::vector<BufferPtr>> ExecuteReplicated(const std::vector<std::vector<PJRT_Buffer*>>& args) const;
  // Empty when the plugin cannot serialize this executable (never throws for that).
  std::string Serialize() const;
  PJRT_LoadedExecutable* raw() const { return raw_; }

 private:
  std::shared_ptr<Plugin> plugin_;
  PJRT_LoadedExecutable* raw_;
  size_t num_outputs_ = 0;
};
using ExecutablePtr = std::shared_ptr<Executable>;

struct DeviceMemoryStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = -1;
  int64_t bytes_limit = -1;
};

// A PJRT_Client_Create option (PJRT_NamedValue): the CPU plugin's cpu_device_count, the
// CUDA plugin's node_id / num_nodes / visible_devices, ...
struct ClientOption {
  std::string name;
  std::variant<int64_t, std::vector<int64_t>, std::string, bool> value;
};

struct ClientOptions {
  std::vector<ClientOption> create_options;
  // Shared with the job's other processes; null: this process is alone. Kept alive by the
  // client, whose plugin may call it for as long as the client lives.
  std::shared_ptr<KeyValueStore> kv_store;
};

class Client {
 public:
  Client(std::shared_ptr<Plugin> plugin, const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::shared_ptr<Plugin>& plugin() const { return plugin_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  const std::vector<PJRT_Device*>& devices() const { return devices_; }  // this process's
  // Every process's devices: more than devices() where the client spans a job's processes.
  size_t global_device_count() const;
  PJRT_Device* device(size_t index) const;
  std::string device_kind(size_t index) const;
  int64_t device_id(size_t index) const;  // the PJRT global id (replica device assignments name these)

  BufferPtr FromHost(const void* data, PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                     size_t device_index) const;
  BufferPtr CopyToDevice(const Buffer& src, size_t device_index) const;
  ExecutablePtr Compile(const std::string& mlir_text, const std::string& compile_options) const;
  // Null when the plugin cannot load these bytes (another build's file, a damaged one).
  ExecutablePtr Deserialize(const std::string& bytes) const;
  // Plugins without memory statistics (the CPU plugin) return nullopt-like: bytes_limit < 0.
  bool MemoryStats(size_t device_index, DeviceMemoryStats* out) const;

 private:
  std::shared_ptr<Plugin> plugin_;
  std::shared_ptr<KeyValueStore> kv_store_;
  PJRT_Client* raw_ = nullptr;
  std::string platform_name_, platform_version_;
  std::vector<PJRT_Device*> devices_;
};

// CompileOptionsProto for a portable single-device executable (run on any device through
// execute_device). Hand-encoded protobuf wire format; never empty (the CPU plugin aborts
// on an empty one).
std::string PortableCompileOptions();

// Appends a compiler debug option by name (CompileOptionsProto's env_option_overrides, which XLA
// applies as it does XLA_FLAGS) to encoded compile options.
void AppendOptionOverride(std::string& options, const std::string& name, int64_t value);
void AppendOptionOverride(std::string& options, const std::string& name, bool value);

// The CompileOptionsProto for a program over num_replicas x num_partitions devices: the runtime's
// portable single-device options for 1 x 1, otherwise the same build options with those counts,
// SPMD partitioning when num_partitions > 1, and a device assignment of devices 0..n-1.
std::string CompileOptionsFor(int64_t num_replicas, int64_t num_partitions);

// CompileOptionsProto for a program replicated over `device_ids` (PJRT global ids, one
// replica each, in replica order): cross-replica collectives run between them.
std::string ReplicatedCompileOptions(const std::vector<int64_t>& device_ids);

size_t ElementSize(PJRT_Buffer_Type type);

}  // namespace tpu::pjrt
