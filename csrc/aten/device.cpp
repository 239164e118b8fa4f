// The device as PyTorch sees it: allocator, guard, hooks, generator.
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_set>
#include <vector>

#include "distributed/collective_agreement.h"
#include "common.h"
#include "dispatch/dispatch.h"
#include "../runtime/env.h"
#include "../runtime/metrics.h"
#include "../runtime/profiler_events.h"

namespace tpu::aten {

using runtime::Runtime;
using runtime::TpuStorage;

namespace {

thread_local c10::DeviceIndex t_current_device = 0;

// What the plugin says about a device's memory; false where it keeps no statistics (the XLA
// CPU plugin). Accelerator plugins do: there the device's own numbers are the honest ones.
bool PluginMemoryStats(int device, pjrt::DeviceMemoryStats* out) {
  if (device < 0) device = CurrentDevice();
  return device < DeviceCount() && Runtime::Get().client().MemoryStats(device, out);
}

// The most a device holds: TORCH_TPU_MEMORY_LIMIT ("100MB", "2GiB", "1e9"), else what the plugin
// reports (a GPU's allocator pool), else the host's physical memory, which is the CPU plugin's
// device memory. Fixed per device once read.
int64_t MemoryLimitBytes(int device) {
  static const std::optional<int64_t> from_env = runtime::EnvBytes("TORCH_TPU_MEMORY_LIMIT");
  if (from_env) return *from_env;
  static std::mutex mu;
  static std::vector<int64_t> limits;
  if (device < 0) device = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<size_t>(device) >= limits.size()) limits.resize(device + 1, -1);
  if (limits[device] < 0) {
    pjrt::DeviceMemoryStats stats;
    limits[device] = PluginMemoryStats(device, &stats) && stats.bytes_limit > 0
                         ? stats.bytes_limit
                         : static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  }
  return limits[device];
}

struct DeviceCounters {
  c10::CachingDeviceAllocator::DeviceStats stats;
};

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    int device = CurrentDevice();
    Runtime& rt = Runtime::Get();
    TORCH_CHECK(device < rt.device_count(), "tpu: invalid device index ", device);
    const int64_t limit = MemoryLimitBytes(device);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& st = Stats(device);
      int64_t in_use = st.allocated_bytes[0].current;
      TORCH_CHECK_WITH(OutOfMemoryError, in_use + static_cast<int64_t>(nbytes) <= limit,
                       "tpu: out of memory: tried to allocate ", nbytes, " bytes on tpu:", device, " with ",
                       in_use, " bytes already allocated and a limit of ", limit, " bytes");
      for (auto* s : {&st.allocated_bytes[0], &st.reserved_bytes[0], &st.active_bytes[0], &st.requested_bytes[0]})
        s->increase(nbytes);
      for (auto* s : {&st.allocation[0], &st.segment[0], &st.active[0]}) s->increase(1);
      st.num_device_alloc++;
    }
    auto storage = std::make_shared<TpuStorage>();
    storage->device = device;
    storage->nbytes = nbytes;
    static std::atomic<uint64_t> next_uid{1};
    storage->uid = next_uid++;
    TpuStorage* context = storage.get();
    context->address = rt.Register(std::move(storage));  // the registry owns it until Delete
    return {reinterpret_cast<void*>(context->address), context, &Delete,
            c10::Device(kTpu, static_cast<c10::DeviceIndex>(device))};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    Runtime& rt = Runtime::Get();
    TpuStorage* d = rt.Lookup(reinterpret_cast<uintptr_t>(dest));
    TpuStorage* s = rt.Lookup(reinterpret_cast<uintptr_t>(src));
    TORCH_CHECK(d && s, "tpu: copy_data on pointers that are not tpu storages");
    std::vector<char> src_bytes(s->nbytes), dst_bytes(d->nbytes);
    s->ReadBytes(src_bytes.data());
    d->ReadBytes(dst_bytes.data());
    std::memcpy(dst_bytes.data(), src_bytes.data(), count);
    shlo::ElemType elem = (d->nbytes % shlo::ByteSize(s->elem) == 0) ? s->elem : shlo::ElemType::U8;
    UploadWholeStorage(d, dst_bytes.data(), elem);
  }

  bool initialized() override { return Runtime::Initialized(); }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Stats(device);
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto& st = Stats(device);
    for (auto* arr : {&st.allocation, &st.segment, &st.active, &st.allocated_bytes, &st.reserved_bytes,
                      &st.active_bytes, &st.requested_bytes})
      for (auto& s : *arr) s.reset_accumulated();
    st.num_device_alloc = st.num_device_free = 0;
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto& st = Stats(device);
    for (auto* arr : {&st.allocation, &st.segment, &st.active, &st.allocated_bytes, &st.reserved_bytes,
                      &st.active_bytes, &st.requested_bytes})
      for (auto& s : *arr) s.reset_peak();
  }
  // Free is the limit less what is in use: on a plugin with statistics, what the device itself
  // holds (XLA's temporaries and other clients' buffers too), else the tensors counted here.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int64_t total = MemoryLimitBytes(device);
    pjrt::DeviceMemoryStats stats;
    int64_t used;
    if (PluginMemoryStats(device, &stats)) {
      used = stats.bytes_in_use;
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      used = Stats(device).allocated_bytes[0].current;
    }
    return {static_cast<size_t>(std::max<int64_t>(total - used, 0)), static_cast<size_t>(total)};
  }

 private:
  static void Delete(void* ctx) {
    auto* storage = static_cast<TpuStorage*>(ctx);
    Instance().Release(storage);
    Runtime::Get().Unregister(storage->address);
  }
  void Release(TpuStorage* storage) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& st = Stats(storage->device);
    for (auto* s : {&st.allocated_bytes[0], &st.reserved_bytes[0], &st.active_bytes[0], &st.requested_bytes[0]})
      s->decrease(storage->nbytes);
    for (auto* s : {&st.allocation[0], &st.segment[0], &st.active[0]}) s->decrease(1);
    st.num_device_free++;
  }
  c10::CachingDeviceAllocator::DeviceStats& Stats(int device) {
    if (device < 0) device = 0;
    if (static_cast<size_t>(device) >= stats_.size()) stats_.resize(device + 1);
    return stats_[device].stats;
  }

 public:
  static TpuAllocator& Instance();
  static bool Owns(const c10::DataPtr& p);  // made by allocate(): the context is a TpuStorage

 private:
  std::mutex mu_;
  std::vector<DeviceCounters> stats_;
};

TpuAllocator g_allocator;
TpuAllocator& TpuAllocator::Instance() { return g_allocator; }
bool TpuAllocator::Owns(const c10::DataPtr& p) { return p.get_deleter() == &Delete; }

// Pinned host memory: ordinary aligned host memory, remembered so is_pinned() can answer.
class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nullptr;
    if (nbytes > 0) {
      TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&p, 64, nbytes) == 0, "pinned allocation of ", nbytes,
                       " bytes failed");
      std::lock_guard<std::mutex> lock(mu_);
      live_.insert(p);
    }
    return {p, p, &Delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  bool IsPinned(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.count(const_cast<void*>(p)) > 0;
  }
  static void Delete(void* p) {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(Instance().mu_);
      Instance().live_.erase(p);
    }
    std::free(p);
  }
  static PinnedAllocator& Instance() {
    static PinnedAllocator* a = new PinnedAllocator();
    return *a;
  }

 private:
  std::mutex mu_;
  std::unordered_set<void*> live_;
};

// Philox-style state, as DTensor's RNG tracker expects: 16 bytes, seed then offset.
class TpuGenerator final : public c10::GeneratorImpl {
 public:
  explicit TpuGenerator(c10::DeviceIndex device)
      : c10::GeneratorImpl(c10::Device(kTpu, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    auto s = c10::detail::getNonDeterministicRandom(true);
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl& state) override {
    // The CPU and CUDA generators' checks and messages: the bytes are read on the host, so a
    // state on tpu (or any device) is refused, not dereferenced (that was a segfault).
    at::detail::check_rng_state(state);
    TORCH_CHECK(state.numel() == 16, "tpu generator state must be a uint8 tensor of 16 bytes");
    const auto* bytes = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, bytes, 8);
    std::memcpy(&offset_, bytes + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto t = at::empty({16}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr(), &seed_, 8);
    std::memcpy(static_cast<uint8_t*>(t.data_ptr()) + 8, &offset_, 8);
    return t.getIntrusivePtr();
  }
  static c10::DeviceType device_type() { return kTpu; }
  // The caller holds the generator's mutex (GeneratorImpl::mutex_), as CPU/CUDA kernels do.
  std::pair<uint64_t, uint64_t> Advance(uint64_t increment) {
    auto state = std::make_pair(seed_, offset_);
    offset_ += (increment + 3) / 4 * 4;  // Philox draws four 32-bit words per counter step
    return state;
  }

 private:
  TpuGenerator* clone_impl() const override {
    auto* g = new TpuGenerator(device().index());
    g->seed_ = seed_;
    g->offset_ = offset_;
    return g;
  }
  uint64_t seed_ = c10::default_rng_seed_val;
  uint64_t offset_ = 0;
};

std::vector<at::Generator>& DefaultGenerators() {
  static std::vector<at::Generator>* gens = [] {
    auto* v = new std::vector<at::Generator>();
    for (int i = 0; i < DeviceCount(); ++i)
      v->push_back(at::make_generator<TpuGenerator>(static_cast<c10::DeviceIndex>(i)));
    return v;
  }();
  return *gens;
}

const at::Generator& DefaultGenerator(c10::DeviceIndex device) {
  auto& gens = DefaultGenerators();
  if (device < 0) device = CurrentDevice();
  TORCH_CHECK(device >= 0 && static_cast<size_t>(device) < gens.size(), "tpu: invalid device index ",
              static_cast<int>(device), ": ", gens.size(), " device(s) available");
  return gens[device];
}

class TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kTpu; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kTpu, CurrentDevice()); }
  void setDevice(c10::Device d) const override { SetCurrentDevice(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override { t_current_device = d.index(); }
  // Any index is answered, as the one default stream: with a tpu backend named, PyTorch's autograd
  // (InputBuffer::add) asks this guard for the current stream of a CUDA gradient's device index
  // (torch_tpu/_other_accelerators.py says what happens next).
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kTpu, d.index() < 0 ? CurrentDevice() : d.index()));
  }
  c10::Stream getNewStream(c10::Device d, int) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return static_cast<c10::DeviceIndex>(DeviceCount()); }
  // Events are host timestamps taken after the device drained: synchronous, but exact.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex, const c10::EventFlag) const override {
    SynchronizeDevice(stream.device_index());
    if (*event == nullptr) *event = new std::chrono::steady_clock::time_point();
    *static_cast<std::chrono::steady_clock::time_point*>(*event) = std::chrono::steady_clock::now();
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<std::chrono::steady_clock::time_point*>(event);
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream& s) const override { SynchronizeDevice(s.device_index()); }
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex d) const override { SynchronizeDevice(d); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "tpu: both events must be recorded before measuring elapsed time");
    auto* a = static_cast<std::chrono::steady_clock::time_point*>(start);
    auto* b = static_cast<std::chrono::steady_clock::time_point*>(end);
    return std::chrono::duration<double, std::milli>(*b - *a).count();
  }
};

class TpuHooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return DeviceCount() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return Runtime::Initialized(); }
  void init() const override { (void)DeviceCount(); }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(DeviceCount()); }
  void setCurrentDevice(c10::DeviceIndex d) const override { SetCurrentDevice(d); }
  c10::DeviceIndex getCurrentDevice() const override { return CurrentDevice(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = CurrentDevice();
    SetCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override { return DefaultGenerator(d); }
  at::Generator getNewGenerator(c10::DeviceIndex d) const override {
    return at::make_generator<TpuGenerator>(d < 0 ? CurrentDevice() : d);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    TpuStorage* s = Runtime::Get().Lookup(reinterpret_cast<uintptr_t>(data));
    return c10::Device(kTpu, s ? static_cast<c10::DeviceIndex>(s->device) : CurrentDevice());
  }
  bool isPinnedPtr(const void* data) const override { return PinnedAllocator::Instance().IsPinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &PinnedAllocator::Instance(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    // Keep the storage object (FSDP relies on its identity); swap in a new allocation.
    c10::DeviceGuard guard(storage.device());
    c10::DataPtr fresh = g_allocator.allocate(new_bytes);
    size_t keep = std::min(new_bytes, storage.nbytes());
    if (keep > 0) g_allocator.copy_data(fresh.get(), storage.data(), keep);
    const_cast<c10::Storage&>(storage).set_data_ptr_noswap(std::move(fresh));
    const_cast<c10::Storage&>(storage).set_nbytes(new_bytes);
  }
};

TpuHooks* g_hooks = new TpuHooks();

}  // namespace

bool IsTpuAllocation(const c10::DataPtr& p) { return TpuAllocator::Owns(p); }

c10::DeviceIndex CurrentDevice() { return t_current_device; }

void SetCurrentDevice(c10::DeviceIndex index) {
  int n = DeviceCount();
  TORCH_CHECK(index >= 0 && index < n, "tpu: invalid device index ", static_cast<int>(index), ": ", n,
              " device(s) available (set TORCH_TPU_NUM_DEVICES for more on the CPU plugin)");
  t_current_device = index;
}

int DeviceCount() noexcept {
  try {
    return Runtime::Get().device_count();
  } catch (...) {
    return 0;
  }
}

void SynchronizeDevice(int device) {
  // Only this device's open graph runs: a rank thread synchronizing its device must not cut the
  // graph another rank thread is recording on its own (as torch.cuda.synchronize(d) waits for d).
  SyncPoint("synchronize", device);
  runtime::GetMetrics().CountSync("synchronize");
  SettleCollectiveChecks(/*wait=*/true);  // a diverged collective raises instead of waiting on it
  runtime::profiler::Scope wait(runtime::profiler::Kind::Sync, "tpu wait: synchronize");
  // Every pending value lives in some storage: waiting for all of them drains the device.
  std::vector<pjrt::BufferPtr> pending;
  runtime::ForEachStorage([&](TpuStorage* s) {
    if (device >= 0 && s->device != device) return;
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->buffer) pending.push_back(s->buffer);
  });
  for (auto& b : pending) b->Await();
  // Programs whose outputs were all dropped are in no storage; they finish here too.
  Runtime::Get().AwaitExecutions(device);
}

std::pair<uint64_t, uint64_t> NextPhiloxState(const std::optional<at::Generator>& gen, int device,
                                              uint64_t increment) {
  at::Generator g = (gen.has_value() && gen->defined()) ? *gen : DefaultGenerator(static_cast<c10::DeviceIndex>(device));
  TORCH_CHECK(g.device().type() == kTpu, "tpu: expected a tpu generator, got one for ", g.device());
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get<TpuGenerator>()->Advance(increment);
}

void UploadWholeStorage(TpuStorage* storage, const void* data, shlo::ElemType elem, const std::vector<int64_t>& dims) {
  int64_t numel = static_cast<int64_t>(storage->nbytes / shlo::ByteSize(elem));
  std::vector<int64_t> buffer_dims = TpuStorage::ShapedDims(dims);
  if (buffer_dims.empty()) buffer_dims = {numel};
  runtime::profiler::Scope transfer(runtime::profiler::Kind::Transfer, "tpu transfer: host to device");
  transfer.Device(storage->device);
  transfer.Arg("bytes", std::to_string(storage->nbytes));
  auto buffer = Runtime::Get().client().FromHost(data, runtime::ToPjrt(elem), buffer_dims, storage->device);
  runtime::GetMetrics().host_to_device_bytes += static_cast<int64_t>(storage->nbytes);
  storage->Assign(std::move(buffer), elem, {}, buffer_dims);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

static const bool kHooksRegistered = [] {
  at::RegisterPrivateUse1HooksInterface(g_hooks);
  return true;
}();

}  // namespace tpu::aten
