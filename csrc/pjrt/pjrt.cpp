#include "pjrt.h"

#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <thread>

namespace tpu::pjrt {
namespace {

template <typename T>
T Args() {
  T args;
  std::memset(&args, 0, sizeof(T));
  args.struct_size = sizeof(T);
  return args;
}

// A function is callable only if the plugin's table is long enough to hold it.
#define PJRT_HAS(api, fn) \
  (offsetof(PJRT_Api, fn) < (api)->struct_size && (api)->fn != nullptr)

// Destroys an error nobody needs to see (a best-effort call whose failure has a fallback).
void DropError(const PJRT_Api* api, PJRT_Error* err) {
  if (err == nullptr) return;
  auto d = Args<PJRT_Error_Destroy_Args>();
  d.error = err;
  api->PJRT_Error_Destroy(&d);
}

void DestroyEvent(const PJRT_Api* api, PJRT_Event* event) {
  if (event == nullptr) return;
  auto args = Args<PJRT_Event_Destroy_Args>();
  args.event = event;
  PJRT_Error* err = api->PJRT_Event_Destroy(&args);
  DropError(api, err);
}

bool EventIsReady(const PJRT_Api* api, PJRT_Event* event) {
  auto args = Args<PJRT_Event_IsReady_Args>();
  args.event = event;
  PJRT_Error* err = api->PJRT_Event_IsReady(&args);
  if (err) {
    DropError(api, err);
    return true;  // whoever waits on it sees the error
  }
  return args.is_ready;
}

// Set by an OnReady callback. The callback co-owns it, so it outlives an abandoned wait.
struct Readiness {
  const PJRT_Api* api;
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
};

void OnEventReady(PJRT_Error* error, void* arg) {
  auto* owner = static_cast<std::shared_ptr<Readiness>*>(arg);
  std::shared_ptr<Readiness> r = std::move(*owner);
  delete owner;
  DropError(r->api, error);  // the wait reads the event's status itself once it is ready
  std::lock_guard<std::mutex> lock(r->mu);
  r->ready = true;
  r->cv.notify_all();
}

// Returns once `event` is ready, calling the plugin's wait observer every 50 ms meanwhile; the
// observer may throw, which abandons the wait. Ready at once (most waits): no callback at all.
void WaitUntilReady(const Plugin& plugin, PJRT_Event* event, const char* what) {
  const WaitObserver& observer = plugin.wait_observer();
  const PJRT_Api* api = plugin.api();
  if (!observer || !PJRT_HAS(api, PJRT_Event_IsReady) || EventIsReady(api, event)) return;
  // Most waits (a small op's result) end within microseconds: polling for a while costs less
  // than the hand-over from the plugin's thread that a callback needs.
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::microseconds(200)) {
    std::this_thread::yield();
    if (EventIsReady(api, event)) return;
  }
  constexpr auto kPoll = std::chrono::milliseconds(50);
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (!PJRT_HAS(api, PJRT_Event_OnReady)) {
    for (auto sleep = std::chrono::microseconds(100); !EventIsReady(api, event);) {
      std::this_thread::sleep_for(sleep);
      sleep = std::min<std::chrono::microseconds>(sleep * 2, kPoll);
      if (sleep == kPoll) observer(seconds(), what);
    }
    return;
  }
  auto readiness = std::make_shared<Readiness>();
  readiness->api = api;
  auto on_ready = Args<PJRT_Event_OnReady_Args>();
  on_ready.event = event;
  on_ready.callback = OnEventReady;
  on_ready.user_arg = new std::shared_ptr<Readiness>(readiness);
  if (PJRT_Error* err = api->PJRT_Event_OnReady(&on_ready)) {
    delete static_cast<std::shared_ptr<Readiness>*>(on_ready.user_arg);
    DropError(api, err);
    return;  // the blocking wait that follows still waits
  }
  std::unique_lock<std::mutex> lock(readiness->mu);
  while (!readiness->cv.wait_for(lock, kPoll, [&] { return readiness->ready; })) {
    lock.unlock();
    observer(seconds(), what);
    lock.lock();
  }
}

// Waits for `event` (abandonably when `observed`), destroys it, and throws its error if it
// carries one.
void AwaitEvent(const Plugin& plugin, PJRT_Event* event, const char* what, bool observed = true) {
  if (event == nullptr) return;
  struct Owned {
    const PJRT_Api* api;
    PJRT_Event* event;
    ~Owned() { DestroyEvent(api, event); }
  } owned{plugin.api(), event};
  if (observed) WaitUntilReady(plugin, event, what);
  auto args = Args<PJRT_Event_Await_Args>();
  args.event = event;
  plugin.Check(plugin.api()->PJRT_Event_Await(&args), what);
}

}  // namespace

std::shared_ptr<Plugin> Plugin::Load(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw Error("cannot load PJRT plugin '" + path + "': " + (why ? why : "unknown dlopen error"), 5);
  }
  using GetApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    throw Error("PJRT plugin '" + path + "' does not export GetPjrtApi", 5);
  }
  auto plugin = std::make_shared<Plugin>();
  plugin->api_ = get_api();
  plugin->path_ = path;
  if (plugin->api_ == nullptr) throw Error("PJRT plugin '" + path + "': GetPjrtApi returned NULL", 9);
  // A table too short or missing a call every use needs would crash at that call instead.
  const PJRT_Api* api = plugin->api_;
  if (api->struct_size < offsetof(PJRT_Api, PJRT_Client_Create) + sizeof(api->PJRT_Client_Create)) {
    throw Error("PJRT plugin '" + path + "': GetPjrtApi returned a table of " + std::to_string(api->struct_size) +
                    " bytes, too short to be a PJRT API",
                9);
  }
  if (plugin->api_major() != PJRT_API_MAJOR) {
    throw Error("PJRT plugin '" + path + "' has PJRT API major version " + std::to_string(plugin->api_major()) +
                    ", this build supports " + std::to_string(PJRT_API_MAJOR),
                9);
  }
  const char* missing = !PJRT_HAS(api, PJRT_Error_Destroy)     ? "PJRT_Error_Destroy"
                        : !PJRT_HAS(api, PJRT_Error_Message)   ? "PJRT_Error_Message"
                        : !PJRT_HAS(api, PJRT_Error_GetCode)   ? "PJRT_Error_GetCode"
                        : !PJRT_HAS(api, PJRT_Client_Create)   ? "PJRT_Client_Create"
                        : !PJRT_HAS(api, PJRT_Client_Destroy)  ? "PJRT_Client_Destroy"
                        : !PJRT_HAS(api, PJRT_Client_Compile)  ? "PJRT_Client_Compile"
                        : !PJRT_HAS(api, PJRT_Buffer_Destroy)  ? "PJRT_Buffer_Destroy"
                        : !PJRT_HAS(api, PJRT_LoadedExecutable_Execute) ? "PJRT_LoadedExecutable_Execute"
                                                                        : nullptr;
  if (missing) throw Error("PJRT plugin '" + path + "': its API table has no " + missing, 9);
  if (PJRT_HAS(plugin->api_, PJRT_Plugin_Initialize)) {
    auto args = Args<PJRT_Plugin_Initialize_Args>();
    plugin->Check(plugin->api_->PJRT_Plugin_Initialize(&args), "PJRT_Plugin_Initialize");
  }
  return plugin;
}

const PJRT_Extension_Base* Plugin::FindExtension(PJRT_Extension_Type type) const {
  for (const PJRT_Extension_Base* e = api_->extension_start; e != nullptr; e = e->next)
    if (e->type == type) return e;
  return nullptr;
}

std::map<std::string, std::string> Plugin::Attributes() const {
  std::map<std::string, std::string> out;
  if (!PJRT_HAS(api_, PJRT_Plugin_Attributes)) return out;
  auto args = Args<PJRT_Plugin_Attributes_Args>();
  Check(api_->PJRT_Plugin_Attributes(&args), "PJRT_Plugin_Attributes");
  for (size_t i = 0; i < args.num_attributes; ++i) {
    const PJRT_NamedValue& a = args.attributes[i];
    std::string value;
    switch (a.type) {
      case PJRT_NamedValue_kString: value.assign(a.string_value, a.value_size); break;
      case PJRT_NamedValue_kInt64: value = std::to_string(a.int64_value); break;
      case PJRT_NamedValue_kInt64List:
        for (size_t k = 0; k < a.value_size; ++k) value += (k ? "." : "") + std::to_string(a.int64_array_value[k]);
        break;
      case PJRT_NamedValue_kFloat: value = std::to_string(a.float_value); break;
      case PJRT_NamedValue_kBool: value = a.bool_value ? "true" : "false"; break;
      default: continue;
    }
    out[std::string(a.name, a.name_size)] = value;
  }
  return out;
}

void Plugin::Check(PJRT_Error* err, const char* what) const {
  if (err == nullptr) return;
  auto msg = Args<PJRT_Error_Message_Args>();
  msg.error = err;
  api_->PJRT_Error_Message(&msg);
  std::string text = std::string(what) + ": " + std::string(msg.message, msg.message_size);
  int code = 2;  // UNKNOWN
  auto code_args = Args<PJRT_Error_GetCode_Args>();
  code_args.error = err;
  if (api_->PJRT_Error_GetCode(&code_args) == nullptr) code = static_cast<int>(code_args.code);
  DropError(api_, err);
  throw Error(text, code);
}

Buffer::~Buffer() {
  auto args = Args<PJRT_Buffer_Destroy_Args>();
  args.buffer = raw_;
  PJRT_Error* err = plugin_->api()->PJRT_Buffer_Destroy(&args);
  DropError(plugin_->api(), err);
}

std::vector<int64_t> Buffer::dims() const {
  auto args = Args<PJRT_Buffer_Dimensions_Args>();
  args.buffer = raw_;
  plugin_->Check(plugin_->api()->PJRT_Buffer_Dimensions(&args), "PJRT_Buffer_Dimensions");
  return std::vector<int64_t>(args.dims, args.dims + args.num_dims);
}

PJRT_Buffer_Type Buffer::element_type() const {
  auto args = Args<PJRT_Buffer_ElementType_Args>();
  args.buffer = raw_;
  plugin_->Check(plugin_->api()->PJRT_Buffer_ElementType(&args), "PJRT_Buffer_ElementType");
  return args.type;
}

void Buffer::ToHost(void* dst, size_t nbytes) const {
  if (plugin_->host_addressable() && CopyFromHostMemory(dst, nbytes)) return;
  auto args = Args<PJRT_Buffer_ToHostBuffer_Args>();
  args.src = raw_;
  args.dst = dst;
  args.dst_size = nbytes;
  // The value is computed first (a wait that may be abandoned); the transfer writes into `dst`
  // from a plugin thread, so its own wait never is.
  Await();
  plugin_->Check(plugin_->api()->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer");
  AwaitEvent(*plugin_, args.event, "device to host transfer", false);
}

// A transfer through the plugin hands the copy to one of its threads and waits for it: tens of
// microseconds for a scalar. Where device memory is host memory, the bytes of a computed buffer
// are final (buffers are immutable and never donated), so they are copied here directly.
bool Buffer::CopyFromHostMemory(void* dst, size_t nbytes) const {
  const PJRT_Api* api = plugin_->api();
  if (!PJRT_HAS(api, PJRT_Buffer_UnsafePointer) || !PJRT_HAS(api, PJRT_Buffer_OnDeviceSizeInBytes)) return false;
  auto size = Args<PJRT_Buffer_OnDeviceSizeInBytes_Args>();
  size.buffer = raw_;
  plugin_->Check(api->PJRT_Buffer_OnDeviceSizeInBytes(&size), "PJRT_Buffer_OnDeviceSizeInBytes");
  if (size.on_device_size_in_bytes != nbytes) return false;  // a padded or packed layout
  Await();
  auto ptr = Args<PJRT_Buffer_UnsafePointer_Args>();
  ptr.buffer = raw_;
  plugin_->Check(api->PJRT_Buffer_UnsafePointer(&ptr), "PJRT_Buffer_UnsafePointer");
  if (nbytes > 0) std::memcpy(dst, reinterpret_cast<const void*>(ptr.buffer_pointer), nbytes);
  return true;
}

void Buffer::Await() const {
  auto args = Args<PJRT_Buffer_ReadyEvent_Args>();
  args.buffer = raw_;
  plugin_->Check(plugin_->api()->PJRT_Buffer_ReadyEvent(&args), "PJRT_Buffer_ReadyEvent");
  AwaitEvent(*plugin_, args.event, "device computation");
}

bool Buffer::IsReady() const {
  auto args = Args<PJRT_Buffer_ReadyEvent_Args>();
  args.buffer = raw_;
  PJRT_Error* err = plugin_->api()->PJRT_Buffer_ReadyEvent(&args);
  if (err) {
    DropError(plugin_->api(), err);
    return true;  // whoever reads it sees the error
  }
  Event event(plugin_, args.event);
  return event.IsReady();
}

Executable::Executable(std::shared_ptr<Plugin> plugin, PJRT_LoadedExecutable* raw)
    : plugin_(std::move(plugin)), raw_(raw) {
  const PJRT_Api* api = plugin_->api();
  auto get = Args<PJRT_LoadedExecutable_GetExecutable_Args>();
  get.loaded_executable = raw_;
  plugin_->Check(api->PJRT_LoadedExecutable_GetExecutable(&get), "GetExecutable");
  auto n = Args<PJRT_Executable_NumOutputs_Args>();
  n.executable = get.executable;
  PJRT_Error* err = api->PJRT_Executable_NumOutputs(&n);
  auto destroy = Args<PJRT_Executable_Destroy_Args>();
  destroy.executable = get.executable;
  api->PJRT_Executable_Destroy(&destroy);
  plugin_->Check(err, "PJRT_Executable_NumOutputs");
  num_outputs_ = n.num_outputs;
}

Executable::~Executable() {
  auto args = Args<PJRT_LoadedExecutable_Destroy_Args>();
  args.executable = raw_;
  PJRT_Error* err = plugin_->api()->PJRT_LoadedExecutable_Destroy(&args);
  DropError(plugin_->api(), err);
}

Event::~Event() { DestroyEvent(plugin_->api(), raw_); }

bool Event::IsReady() const { return EventIsReady(plugin_->api(), raw_); }

namespace {
void OnReadyCall(PJRT_Error* error, void* arg) {
  auto* owned = static_cast<std::pair<const PJRT_Api*, std::function<void()>>*>(arg);
  DropError(owned->first, error);
  owned->second();
  delete owned;
}
}  // namespace

bool Event::OnReady(std::function<void()> fn) const {
  const PJRT_Api* api = plugin_->api();
  if (!PJRT_HAS(api, PJRT_Event_OnReady)) return false;
  auto args = Args<PJRT_Event_OnReady_Args>();
  args.event = raw_;
  args.callback = OnReadyCall;
  args.user_arg = new std::pair<const PJRT_Api*, std::function<void()>>(api, std::move(fn));
  if (PJRT_Error* err = api->PJRT_Event_OnReady(&args)) {
    delete static_cast<std::pair<const PJRT_Api*, std::function<void()>>*>(args.user_arg);
    DropError(api, err);
    return false;
  }
  return true;
}

void Event::AwaitIgnoringError() const {
  WaitUntilReady(*plugin_, raw_, "device computation");
  auto args = Args<PJRT_Event_Await_Args>();
  args.event = raw_;
  PJRT_Error* err = plugin_->api()->PJRT_Event_Await(&args);
  DropError(plugin_->api(), err);
}

std::vector<BufferPtr> Executable::Execute(PJRT_Device* device, const std::vector<PJRT_Buffer*>& args,
                                           EventPtr* done, const std::vector<bool>& donated) const {
  auto options = Args<PJRT_ExecuteOptions>();
  // Our buffers may be shared between tensors: nothing is donated unless the caller says so.
  std::vector<int64_t> non_donatable;
  for (size_t i = 0; i < args.size(); ++i)
    if (i >= donated.size() || !donated[i]) non_donatable.push_back(static_cast<int64_t>(i));
  options.non_donatable_input_indices = non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();

  std::vector<PJRT_Buffer*> outputs(num_outputs_, nullptr);
  PJRT_Buffer* const* arg_list = args.data();
  PJRT_Buffer** output_list = outputs.data();
  auto exec = Args<PJRT_LoadedExecutable_Execute_Args>();
  exec.executable = raw_;
  exec.options = &options;
  exec.argument_lists = &arg_list;
  exec.num_devices = 1;
  exec.num_args = args.size();
  exec.output_lists = &output_list;
  exec.execute_device = device;
  PJRT_Event* complete = nullptr;
  if (done != nullptr) exec.device_complete_events = &complete;
  plugin_->Check(plugin_->api()->PJRT_LoadedExecutable_Execute(&exec), "PJRT_LoadedExecutable_Execute");
  if (complete != nullptr) *done = std::make_shared<Event>(plugin_, complete);
  std::vector<BufferPtr> result;
  result.reserve(num_outputs_);
  for (PJRT_Buffer* b : outputs) result.push_back(std::make_shared<Buffer>(plugin_, b));
  return result;
}

std::vector<std::vector<BufferPtr>> Executable::ExecuteReplicated(
    const std::vector<std::vector<PJRT_Buffer*>>& args) const {
  size_t replicas = args.size(), num_args = replicas ? args[0].size() : 0;
  auto options = Args<PJRT_ExecuteOptions>();
  std::vector<int64_t> non_donatable(num_args);
  for (size_t i = 0; i < num_args; ++i) non_donatable[i] = static_cast<int64_t>(i);
  options.non_donatable_input_indices = non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();
  std::vector<PJRT_Buffer* const*> arg_lists(replicas);
  std::vector<std::vector<PJRT_Buffer*>> outputs(replicas, std::vector<PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<PJRT_Buffer**> output_lists(replicas);
  for (size_t r = 0; r < replicas; ++r) {
    arg_lists[r] = args[r].data();
    output_lists[r] = outputs[r].data();
  }
  auto exec = Args<PJRT_LoadedExecutable_Execute_Args>();
  exec.executable = raw_;
  exec.options = &options;
  exec.argument_lists = arg_lists.data();
  exec.num_devices = replicas;
  exec.num_args = num_args;
  exec.output_lists = output_lists.data();
  plugin_->Check(plugin_->api()->PJRT_LoadedExecutable_Execute(&exec), "PJRT_LoadedExecutable_Execute");
  std::vector<std::vector<BufferPtr>> result(replicas);
  for (size_t r = 0; r < replicas; ++r)
    for (PJRT_Buffer* b : outputs[r]) result[r].push_back(std::make_shared<Buffer>(plugin_, b));
  return result;
}

std::string Executable::Serialize() const {
  const PJRT_Api* api = plugin_->api();
  auto get = Args<PJRT_LoadedExecutable_GetExecutable_Args>();
  get.loaded_executable = raw_;
  plugin_->Check(api->PJRT_LoadedExecutable_GetExecutable(&get), "GetExecutable");
  auto ser = Args<PJRT_Executable_Serialize_Args>();
  ser.executable = get.executable;
  PJRT_Error* err = api->PJRT_Executable_Serialize(&ser);
  auto destroy = Args<PJRT_Executable_Destroy_Args>();
  destroy.executable = get.executable;
  api->PJRT_Executable_Destroy(&destroy);
  if (err != nullptr) {
    // No exception here: the only use is the disk cache, and a C++ throw at this point was
    // seen to crash in the unwinder after many XLA-CPU JIT compilations (a long Transformers
    // test run). An executable that cannot be serialized is just not cached on disk.
    DropError(api, err);
    return {};
  }
  std::string bytes(ser.serialized_bytes, ser.serialized_bytes_size);
  if (ser.serialized_executable_deleter) ser.serialized_executable_deleter(ser.serialized_executable);
  return bytes;
}

Client::Client(std::shared_ptr<Plugin> plugin, const ClientOptions& options)
    : plugin_(std::move(plugin)), kv_store_(options.kv_store) {
  const PJRT_Api* api = plugin_->api();
  auto create = Args<PJRT_Client_Create_Args>();
  // PJRT_NamedValue points into `options`, which outlives the call.
  std::vector<PJRT_NamedValue> named(options.create_options.size());
  for (size_t i = 0; i < named.size(); ++i) {
    const ClientOption& option = options.create_options[i];
    PJRT_NamedValue& value = named[i];
    std::memset(&value, 0, sizeof(value));
    value.struct_size = sizeof(value);
    value.name = option.name.data();
    value.name_size = option.name.size();
    if (auto* n = std::get_if<int64_t>(&option.value)) {
      value.type = PJRT_NamedValue_kInt64;
      value.int64_value = *n;
      value.value_size = 1;
    } else if (auto* list = std::get_if<std::vector<int64_t>>(&option.value)) {
      value.type = PJRT_NamedValue_kInt64List;
      value.int64_array_value = list->data();
      value.value_size = list->size();
    } else if (auto* text = std::get_if<std::string>(&option.value)) {
      value.type = PJRT_NamedValue_kString;
      value.string_value = text->data();
      value.value_size = text->size();
    } else {
      value.type = PJRT_NamedValue_kBool;
      value.bool_value = std::get<bool>(option.value);
      value.value_size = 1;
    }
  }
  create.create_options = named.data();
  create.num_options = named.size();
  if (kv_store_) AttachKeyValueStore(create, kv_store_.get());
  plugin_->Check(api->PJRT_Client_Create(&create), "PJRT_Client_Create");
  raw_ = create.client;

  auto name = Args<PJRT_Client_PlatformName_Args>();
  name.client = raw_;
  plugin_->Check(api->PJRT_Client_PlatformName(&name), "PJRT_Client_PlatformName");
  platform_name_.assign(name.platform_name, name.platform_name_size);
  plugin_->set_host_addressable(platform_name_ == "cpu");
  auto version = Args<PJRT_Client_PlatformVersion_Args>();
  version.client = raw_;
  plugin_->Check(api->PJRT_Client_PlatformVersion(&version), "PJRT_Client_PlatformVersion");
  platform_version_.assign(version.platform_version, version.platform_version_size);

  auto devs = Args<PJRT_Client_AddressableDevices_Args>();
  devs.client = raw_;
  plugin_->Check(api->PJRT_Client_AddressableDevices(&devs), "PJRT_Client_AddressableDevices");
  devices_.assign(devs.addressable_devices, devs.addressable_devices + devs.num_addressable_devices);
}

size_t Client::global_device_count() const {
  auto devs = Args<PJRT_Client_Devices_Args>();
  devs.client = raw_;
  plugin_->Check(plugin_->api()->PJRT_Client_Devices(&devs), "PJRT_Client_Devices");
  return devs.num_devices;
}

Client::~Client() {
  auto args = Args<PJRT_Client_Destroy_Args>();
  args.client = raw_;
  PJRT_Error* err = plugin_->api()->PJRT_Client_Destroy(&args);
  DropError(plugin_->api(), err);
}

PJRT_Device* Client::device(size_t index) const {
  if (index >= devices_.size()) {
    throw Error("device index " + std::to_string(index) + " out of range (" +
                    std::to_string(devices_.size()) + " devices)", 3);
  }
  return devices_[index];
}

std::string Client::device_kind(size_t index) const {
  const PJRT_Api* api = plugin_->api();
  auto desc = Args<PJRT_Device_GetDescription_Args>();
  desc.device = device(index);
  plugin_->Check(api->PJRT_Device_GetDescription(&desc), "PJRT_Device_GetDescription");
  auto kind = Args<PJRT_DeviceDescription_Kind_Args>();
  kind.device_description = desc.device_description;
  plugin_->Check(api->PJRT_DeviceDescription_Kind(&kind), "PJRT_DeviceDescription_Kind");
  return std::string(kind.device_kind, kind.device_kind_size);
}

int64_t Client::device_id(size_t index) const {
  const PJRT_Api* api = plugin_->api();
  auto desc = Args<PJRT_Device_GetDescription_Args>();
  desc.device = device(index);
  plugin_->Check(api->PJRT_Device_GetDescription(&desc), "PJRT_Device_GetDescription");
  auto id = Args<PJRT_DeviceDescription_Id_Args>();
  id.device_description = desc.device_description;
  plugin_->Check(api->PJRT_DeviceDescription_Id(&id), "PJRT_DeviceDescription_Id");
  return id.id;
}

BufferPtr Client::FromHost(const void* data, PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                           size_t device_index) const {
  auto args = Args<PJRT_Client_BufferFromHostBuffer_Args>();
  args.client = raw_;
  args.data = data;
  args.type = type;
  args.dims = dims.data();
  args.num_dims = dims.size();
  // The plugin copies before returning, so the caller's memory is free to change after.
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  args.device = device(device_index);
  plugin_->Check(plugin_->api()->PJRT_Client_BufferFromHostBuffer(&args), "host to device transfer");
  DestroyEvent(plugin_->api(), args.done_with_host_buffer);
  return std::make_shared<Buffer>(plugin_, args.buffer);
}

BufferPtr Client::CopyToDevice(const Buffer& src, size_t device_index) const {
  auto args = Args<PJRT_Buffer_CopyToDevice_Args>();
  args.buffer = src.raw();
  args.dst_device = device(device_index);
  plugin_->Check(plugin_->api()->PJRT_Buffer_CopyToDevice(&args), "device to device copy");
  return std::make_shared<Buffer>(plugin_, args.dst_buffer);
}

ExecutablePtr Client::Compile(const std::string& mlir_text, const std::string& compile_options) const {
  auto program = Args<PJRT_Program>();
  program.code = const_cast<char*>(mlir_text.data());
  program.code_size = mlir_text.size();
  static const char kFormat[] = "mlir";
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  auto args = Args<PJRT_Client_Compile_Args>();
  args.client = raw_;
  args.program = &program;
  args.compile_options = compile_options.data();
  args.compile_options_size = compile_options.size();
  plugin_->Check(plugin_->api()->PJRT_Client_Compile(&args), "PJRT_Client_Compile");
  return std::make_shared<Executable>(plugin_, args.executable);
}

ExecutablePtr Client::Deserialize(const std::string& bytes) const {
  auto args = Args<PJRT_Executable_DeserializeAndLoad_Args>();
  args.client = raw_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  PJRT_Error* err = plugin_->api()->PJRT_Executable_DeserializeAndLoad(&args);
  if (err != nullptr) {
    // No exception, as in Serialize: the caller compiles instead (and a throw right after a
    // failed load was seen to crash in the unwinder, see Serialize).
    DropError(plugin_->api(), err);
    return nullptr;
  }
  return std::make_shared<Executable>(plugin_, args.loaded_executable);
}

bool Client::MemoryStats(size_t device_index, DeviceMemoryStats* out) const {
  const PJRT_Api* api = plugin_->api();
  if (!PJRT_HAS(api, PJRT_Device_MemoryStats)) return false;
  auto args = Args<PJRT_Device_MemoryStats_Args>();
  args.device = device(device_index);
  PJRT_Error* err = api->PJRT_Device_MemoryStats(&args);
  if (err) {
    DropError(api, err);
    return false;  // Unimplemented on the CPU plugin.
  }
  out->bytes_in_use = args.bytes_in_use;
  out->peak_bytes_in_use = args.peak_bytes_in_use_is_set ? args.peak_bytes_in_use : -1;
  out->bytes_limit = args.bytes_limit_is_set ? args.bytes_limit : -1;
  return true;
}

size_t ElementSize(PJRT_Buffer_Type type) {
  switch (type) {
    case PJRT_Buffer_Type_PRED:
    case PJRT_Buffer_Type_S8:
    case PJRT_Buffer_Type_U8:
    case PJRT_Buffer_Type_F8E5M2:
    case PJRT_Buffer_Type_F8E4M3FN:
      return 1;
    case PJRT_Buffer_Type_S16:
    case PJRT_Buffer_Type_U16:
    case PJRT_Buffer_Type_F16:
    case PJRT_Buffer_Type_BF16:
      return 2;
    case PJRT_Buffer_Type_S32:
    case PJRT_Buffer_Type_U32:
    case PJRT_Buffer_Type_F32:
      return 4;
    case PJRT_Buffer_Type_S64:
    case PJRT_Buffer_Type_U64:
    case PJRT_Buffer_Type_F64:
    case PJRT_Buffer_Type_C64:
      return 8;
    case PJRT_Buffer_Type_C128:
      return 16;
    default:
      return 0;
  }
}

}  // namespace tpu::pjrt
