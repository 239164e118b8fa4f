// torch.profiler for tpu: a Kineto child profiler (libkineto::IActivityProfiler) that turns the
// runtime's events (csrc/runtime/profiler_events.h) into Kineto activities, so that
// torch.profiler.profile(activities=[CPU, PrivateUse1]) shows
//   * each program execution as a `kernel` on the row of its tpu device ("TPU <d>"), named
//     after its op, fused graph or compiled graph, with its cache key, and linked (correlation
//     id, flow arrow) to the op that dispatched it or whose sync flushed its graph;
//   * compiles, transfers, host syncs, fused-graph flushes and collectives as
//     `privateuse1_runtime` events on the host thread that caused them.
// Kineto pushes each recorded op's correlation id to the session on the op's thread
// (pushCorrelationId); the runtime keeps that thread's innermost id and stamps it on what it
// records. Registration differs by release (torch_compat.h: RegisterKinetoChildProfiler).
#include <torch/csrc/utils/pybind.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "torch_compat.h"
#include "../runtime/profiler_events.h"
#include "../runtime/runtime.h"
#include "../runtime/xspace.h"

#if TPU_HAS_KINETO_CHILD_PROFILER
#include <libkineto.h>
#include <output_base.h>
#endif

namespace py = pybind11;

namespace tpu::aten {
namespace {

namespace rp = runtime::profiler;

// Whether the running plugin has the PJRT profiler extension (device-side op timing); nullopt
// before the client starts. Said once per process when it has none.
std::optional<bool> DeviceProfilerAvailable() {
  if (!runtime::Runtime::Initialized()) return std::nullopt;
  return rp::PluginHasDeviceProfiler(*runtime::Runtime::Get().client().plugin());
}

constexpr const char* kNoDeviceProfiler = "this plugin has no device profiler; program-level events only";

void SayOnceIfNoDeviceProfiler() {
  static std::atomic<bool> said{false};
  std::optional<bool> available = DeviceProfilerAvailable();
  if (!available || *available || said.exchange(true)) return;
  const char* quiet = std::getenv("TORCH_TPU_QUIET");
  if (quiet == nullptr || std::string(quiet) != "1") std::fprintf(stderr, "torch_tpu profiler: %s\n", kNoDeviceProfiler);
}

#if TPU_HAS_KINETO_CHILD_PROFILER

const char* KindName(rp::Kind kind) {
  switch (kind) {
    case rp::Kind::Program: return "program";
    case rp::Kind::Compile: return "compile";
    case rp::Kind::Transfer: return "transfer";
    case rp::Kind::Sync: return "sync";
    case rp::Kind::Flush: return "flush";
    case rp::Kind::Collective: return "collective";
  }
  return "";
}

std::string Quoted(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out;
}

class TpuProfilerSession : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    rp::Start();
    start_ns_ = rp::NowNs();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    events_ = rp::Stop();
    end_ns_ = rp::NowNs();
    SayOnceIfNoDeviceProfiler();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_activity,
                    int64_t /*window_start*/, int64_t /*window_end*/) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_ns_, end_ns_, "tpu");
    buffer_->gpuOpCount = 0;
    const int32_t pid = static_cast<int32_t>(getpid());
    std::set<int> devices;
    for (rp::Event& e : events_) {
      bool kernel = e.kind == rp::Kind::Program;
      buffer_->emplace_activity(buffer_->span,
                                kernel ? libkineto::ActivityType::CONCURRENT_KERNEL
                                       : libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
                                e.name);
      libkineto::GenericTraceActivity& a = *buffer_->activities.back();
      a.startTime = e.start_ns;
      a.endTime = e.end_ns;
      a.id = static_cast<int32_t>(e.correlation);
      a.threadId = static_cast<int32_t>(e.thread);
      if (kernel) {
        // The row of its device (Kineto's chrome trace: pid = device, tid = resource), linked to
        // the op whose correlation id it carries, as a CUDA kernel is to its launch.
        a.device = e.device;
        a.resource = 0;
        devices.insert(e.device);
        buffer_->gpuOpCount++;
        if (e.correlation != 0) {
          a.flow.id = static_cast<uint32_t>(e.correlation);
          a.flow.type = libkineto::kLinkAsyncCpuGpu;
          a.flow.start = false;
        }
      } else {
        a.device = pid;  // the host thread that caused it, next to its ops
        a.resource = static_cast<int32_t>(e.thread);
      }
      if (linked_activity && e.correlation != 0) a.linked = linked_activity(static_cast<int32_t>(e.correlation));
      a.addMetadataQuoted("tpu event", KindName(e.kind));
      if (e.device >= 0) a.addMetadata("tpu device", e.device);
      for (const auto& [key, value] : e.args) a.addMetadataQuoted(key, Quoted(value));
      a.log(logger);
    }
    // Each record_function range around programs, on their device's row over the programs it
    // caused (as Kineto draws gpu_user_annotation spans for CUDA kernels).
    if (linked_activity) {
      std::map<std::pair<int, uint64_t>, std::pair<int64_t, int64_t>> spans;  // (device, range) -> [start, end]
      for (const rp::Event& e : events_) {
        if (e.kind != rp::Kind::Program) continue;
        for (uint64_t range : e.user_correlations) {
          auto [it, fresh] = spans.try_emplace({e.device, range}, e.start_ns, e.end_ns);
          if (!fresh) it->second = {std::min(it->second.first, e.start_ns), std::max(it->second.second, e.end_ns)};
        }
      }
      for (const auto& [where, span] : spans) {
        const libkineto::ITraceActivity* range = linked_activity(static_cast<int32_t>(where.second));
        if (range == nullptr) continue;
        buffer_->emplace_activity(buffer_->span, libkineto::ActivityType::GPU_USER_ANNOTATION, range->name());
        libkineto::GenericTraceActivity& a = *buffer_->activities.back();
        a.startTime = span.first;
        a.endTime = span.second;
        a.id = static_cast<int32_t>(where.second);
        a.device = where.first;
        a.resource = 0;
        a.linked = range;
        a.addMetadataQuoted("tpu event", "range");
        a.log(logger);
      }
    }
    // One row per tpu device: the first is named by getDeviceInfo, the others here.
    for (int d : devices) {
      if (d == 0) continue;
      logger.handleDeviceInfo(DeviceInfo(d), start_ns_);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(DeviceInfo(0));
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override { rp::PushCorrelation(id); }
  void popCorrelationId() override { rp::PopCorrelation(); }
  void pushUserCorrelationId(uint64_t id) override { rp::PushUserCorrelation(id); }
  void popUserCorrelationId() override { rp::PopUserCorrelation(); }

  std::unordered_map<std::string, std::string> getMetadata() override {
    std::optional<bool> available = DeviceProfilerAvailable();
    if (!available) return {};
    return {{"tpu_device_profiler", *available ? "\"available (not yet collected)\"" : std::string("\"") + kNoDeviceProfiler + "\""}};
  }

 private:
  static libkineto::DeviceInfo DeviceInfo(int d) {
    // Sorted after the host's rows, as Kineto sorts GPUs.
    return libkineto::DeviceInfo{d, 0x1000000 + d, "TPU " + std::to_string(d), "TPU " + std::to_string(d)};
  }
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
  std::vector<rp::Event> events_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class TpuActivityProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config&) override {
    // Only when the user asked for device activities (ProfilerActivity.PrivateUse1): then Kineto
    // asks for kernels. Its runtime types (PRIVATEUSE1_RUNTIME among them) come with a CPU-only
    // profile too, once Kineto has started.
    if (types.count(libkineto::ActivityType::CONCURRENT_KERNEL) == 0) return nullptr;
    return std::make_unique<TpuProfilerSession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "torch_tpu";
  std::set<libkineto::ActivityType> activities_ = {libkineto::ActivityType::CONCURRENT_KERNEL,
                                                   libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

#endif  // TPU_HAS_KINETO_CHILD_PROFILER

}  // namespace

void RegisterProfilerBindings(py::module_& m) {
#if TPU_HAS_KINETO_CHILD_PROFILER
  compat::RegisterKinetoChildProfiler([] { return std::make_unique<TpuActivityProfiler>(); });
#endif
  m.def("_profiler_registered", [] { return static_cast<bool>(TPU_HAS_KINETO_CHILD_PROFILER); });
  // True/False: whether the plugin has the PJRT profiler extension; None before the client starts.
  m.def("_profiler_device_profiler", [] { return DeviceProfilerAvailable(); });
  m.def("_profiler_recording", [] { return rp::Recording(); });
  // The runtime's own recorder, without Kineto (the C++ side of the tests and of tools that
  // want the raw events): start, then stop returning (kind, name, device, start_ns, end_ns,
  // correlation, args) tuples.
  // A serialized XSpace (a PJRT profiler session's collect_data) as (plane, line, name, start_ns,
  // end_ns) tuples; ValueError when the bytes are no XSpace.
  m.def("_profiler_xspace_events", [](const py::bytes& data) {
    std::vector<rp::DeviceOp> ops;
    try {
      ops = rp::XSpaceEvents(std::string(data));
    } catch (const std::runtime_error& e) {
      throw py::value_error(e.what());
    }
    py::list out;
    for (const rp::DeviceOp& op : ops) out.append(py::make_tuple(op.plane, op.line, op.name, op.start_ns, op.end_ns));
    return out;
  });
  m.def("_profiler_events_start", [] { rp::Start(); });
  m.def("_profiler_events_stop", [] {
    py::list out;
    for (const rp::Event& e : rp::Stop()) {
      py::dict args;
      for (const auto& [k, v] : e.args) args[py::str(k)] = v;
      out.append(py::make_tuple(static_cast<int>(e.kind), e.name, e.device, e.start_ns, e.end_ns, e.correlation, args));
    }
    return out;
  });
}

}  // namespace tpu::aten
