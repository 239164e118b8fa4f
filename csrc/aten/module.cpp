// torch_tpu._C: the Python face of the C++ layers.
#include <torch/csrc/Event.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>

#include "distributed/collective_agreement.h"
#include "common.h"
#include "distributed/device_collectives.h"
#include "dispatch/dispatch.h"
#include "dispatch/precision.h"
#include "../lowering/lowering.h"
#include "../runtime/background_compile.h"
#include "../runtime/collective_rendezvous.h"
#include "../runtime/disk_cache.h"
#include "../runtime/metrics.h"
#include "../runtime/tpu_target.h"

namespace py = pybind11;

namespace tpu::aten {
void RegisterGraphBindings(py::module_& m);  // compiled_graph.cpp: torch.compile programs
void RegisterKernelBindings(py::module_& m);  // custom_kernels.cpp: torch_tpu.kernels
void RegisterJobStoreBindings(py::module_& m);  // job_store.cpp: the PJRT client's key-value store
void RegisterProfilerBindings(py::module_& m);  // profiler.cpp: torch.profiler's tpu events
}

namespace tpu::aten {

void RegisterCompositeKernels();  // kernels.cpp
std::vector<std::string> RegisterCollectives();  // collectives.cpp: torch.distributed on tpu tensors

namespace {

py::dict MetricsDict() {
  auto& m = runtime::GetMetrics();
  py::dict d;
  d["ops_dispatched"] = m.ops_dispatched.load();
  py::dict by_mode;
  const char* mode_names[] = {"debug", "strict", "fused"};  // EagerMode's order
  for (int i = 0; i < 3; ++i) by_mode[mode_names[i]] = m.ops_by_mode[i].load();
  d["ops_dispatched_by_mode"] = by_mode;
  d["signature_cache_hits"] = m.signature_hits.load();
  d["signature_cache_misses"] = m.signature_misses.load();
  d["programs_compiled"] = m.programs_compiled.load();
  d["programs_compiled_quick"] = m.programs_compiled_quick.load();
  d["compile_cache_hits"] = m.compile_cache_hits.load();
  d["compile_in_flight_waits"] = m.compile_in_flight_waits.load();
  d["disk_cache_hits"] = m.disk_cache_hits.load();
  d["disk_cache_misses"] = m.disk_cache_misses.load();
  d["compile_time_s"] = m.compile_time_us.load() / 1e6;
  d["disk_load_time_s"] = m.disk_load_time_us.load() / 1e6;
  d["slowest_compile_s"] = m.slowest_compile_us.load() / 1e6;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    d["slowest_compile_op"] = m.slowest_compile_op;
  }
  d["executions"] = m.executions.load();
  d["donated_buffers"] = m.donated_buffers.load();
  d["ops_recorded"] = m.ops_recorded.load();
  d["fused_graphs_run"] = m.fused_graphs_run.load();
  d["fused_graphs_compiled"] = m.fused_graphs_compiled.load();
  d["fused_graphs_op_by_op"] = m.fused_graphs_op_by_op.load();
  d["fused_ops"] = m.fused_ops.load();
  d["fused_compile_waits"] = m.fused_compile_waits.load();
  d["background_compiles_pending"] = runtime::PendingBackgroundCompiles();
  d["fused_switches"] = m.fused_switches();
  d["host_to_device_bytes"] = m.host_to_device_bytes.load();
  d["device_to_host_bytes"] = m.device_to_host_bytes.load();
  d["host_syncs"] = m.host_syncs.load();
  d["host_syncs_by_cause"] = m.syncs();
  d["recompilations"] = m.recompilations.load();
  d["recompile_reasons"] = m.recompiles();
  d["cpu_fallbacks"] = m.fallback_total.load();
  d["cpu_fallbacks_by_op"] = m.fallbacks();
  d["collectives_on_device"] = m.collectives_on_device.load();
  d["collectives_via_host"] = m.collectives_via_host.load();
  d["collective_agreements"] = m.collective_agreements.load();
  d["collective_checks_behind"] = m.collective_checks_behind.load();
  d["replicated_graph_runs"] = m.replicated_graph_runs.load();
  d["collectives_in_graphs"] = m.collectives_in_graphs.load();
  // Which formulation aten::_grouped_mm lowers to here, and how many programs took each.
  d["grouped_mm_path"] = lowering::RaggedDotInUse() ? "ragged_dot" : "tiled";
  d["grouped_mm_lowerings"] = lowering::GroupedMmLowerings();
  return d;
}

}  // namespace
}  // namespace tpu::aten

PYBIND11_MODULE(_C, m) {
  using namespace tpu;
  aten::InstallWaitInterruptCheck();
  // client_options: {name: int | [int] | str | bool}, PJRT_Client_Create options for a plugin
  // other than the CPU one (torch_tpu.launch_env.client_options).
  m.def("_configure", [](const std::string& plugin_path, int num_devices, const py::dict& client_options) {
    runtime::RuntimeConfig config{plugin_path, num_devices};
    for (auto item : client_options) {
      pjrt::ClientOption option{py::cast<std::string>(item.first), int64_t{0}};
      py::handle v = item.second;
      if (py::isinstance<py::bool_>(v)) option.value = v.cast<bool>();
      else if (py::isinstance<py::int_>(v)) option.value = v.cast<int64_t>();
      else if (py::isinstance<py::str>(v)) option.value = v.cast<std::string>();
      else option.value = v.cast<std::vector<int64_t>>();
      config.client_options.push_back(std::move(option));
    }
    runtime::Runtime::Configure(config);
  }, py::arg("plugin_path"), py::arg("num_devices"), py::arg("client_options") = py::dict());
  m.def("_client_setup", [] {
    runtime::RuntimeConfig config = runtime::Runtime::CurrentConfig();
    py::dict options;
    for (const auto& option : config.client_options)
      std::visit([&](const auto& v) { options[py::str(option.name)] = py::cast(v); }, option.value);
    py::dict d;
    d["client_options"] = options;
    d["job_store"] = config.kv_store ? py::object(py::str(config.kv_store->Describe())) : py::object(py::none());
    return d;
  });
  m.def("_register_ops", [] {
    aten::RegisterLoweredOps();
    aten::RegisterCompositeKernels();
  });
  m.def("_register_collectives", &aten::RegisterCollectives);
  aten::RegisterJobStoreBindings(m);
  m.def("_register_in_process_group", &aten::RegisterInProcessGroup);
  m.def("_register_cross_process_group", [](const std::string& name, const std::vector<int64_t>& device_ids,
                                             const py::object& store, int rank, double timeout_s,
                                             const std::string& checks, std::vector<int> world_ranks) {
    if (world_ranks.empty())  // the world itself
      for (size_t r = 0; r < device_ids.size(); ++r) world_ranks.push_back(static_cast<int>(r));
    aten::RegisterCrossProcessGroup(name, device_ids, py::cast<c10::intrusive_ptr<c10d::Store>>(store), rank,
                                    std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), checks,
                                    world_ranks);
  }, py::arg("name"), py::arg("device_ids"), py::arg("store"), py::arg("rank"), py::arg("timeout_s"),
     py::arg("checks") = "behind", py::arg("world_ranks") = std::vector<int>{});
  m.def("_forget_cross_process_group", &aten::ForgetCrossProcessGroup);
  m.def("_runs_across_processes", &runtime::RunsAcrossProcesses);
  m.def("_check_cross_process_group", &aten::CheckAcrossProcesses);
  // What every collective of a group across processes does first; called directly by the tests,
  // which have no plugin with collectives across processes.
  m.def("_agree_across_processes", &aten::AgreeAcrossProcesses, py::arg("group"), py::arg("description"),
        py::arg("host_values") = std::vector<int64_t>{}, py::arg("only_a_check") = false,
        py::arg("members") = std::vector<int>{}, py::arg("values_repeat") = false);
  m.def("_settle_collective_checks", &aten::SettleCollectiveChecks, py::arg("wait") = true);
  m.def("_global_device_id", [](int index) { return runtime::Runtime::Get().client().device_id(index); });
  m.def("_global_device_count", [] { return runtime::Runtime::Get().client().global_device_count(); });
  m.def("_in_process_barrier", &aten::DeviceBarrier, py::call_guard<py::gil_scoped_release>());
  m.def("_initialized", &runtime::Runtime::Initialized);
  m.def("_init", [] {
    // A forked child re-runs torch.tpu._lazy_init, which refuses to start there.
    torch::utils::register_fork_handler_for_device_init(aten::kTpu);
    try {
      runtime::Runtime::Get();
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("torch_tpu: cannot start the device runtime: ") + e.what());
    }
  });
  m.def("_device_count", [] { return aten::DeviceCount(); });
  m.def("_platform", [] { return runtime::Runtime::Get().platform(); });
  m.def("_platform_version", [] { return runtime::Runtime::Get().client().platform_version(); });
  // The float32 matmul precision programs built now take (precision.h), as PyTorch names it.
  m.def("_matmul_precision", [] { return std::string(tpu::aten::MatmulPrecisionSetting(tpu::aten::MatmulPrecision())); });
  m.def("_plugin_path", [] { return runtime::Runtime::Get().config().plugin_path; });
  m.def("_pjrt_api_version", [] {
    auto& p = *runtime::Runtime::Get().client().plugin();
    return py::make_tuple(p.api_major(), p.api_minor());
  });
  m.def("_device_kind", [](int index) { return runtime::Runtime::Get().client().device_kind(index); });
  // The plugin's own memory statistics (None where it keeps none, as the XLA CPU plugin).
  m.def("_plugin_memory_stats", [](int index) -> py::object {
    pjrt::DeviceMemoryStats s;
    if (!runtime::Runtime::Get().client().MemoryStats(index, &s)) return py::none();
    py::dict d;
    d["bytes_in_use"] = s.bytes_in_use;
    d["peak_bytes_in_use"] = s.peak_bytes_in_use;
    d["bytes_limit"] = s.bytes_limit;
    return d;
  });
  m.def("_current_device", [] { return static_cast<int>(aten::CurrentDevice()); });
  m.def("_set_device", [](int index) { aten::SetCurrentDevice(static_cast<c10::DeviceIndex>(index)); });
  m.def("_executions_in_flight", [](int device) { return runtime::Runtime::Get().ExecutionsInFlight(device); });
  // Whole fused graphs compiling in the background (csrc/runtime/background_compile.h).
  m.def("_await_background_compiles", [] {
    py::gil_scoped_release release;
    runtime::AwaitBackgroundCompiles();
  });
  m.def("_synchronize", [](int device) {
    py::gil_scoped_release release;
    aten::SynchronizeDevice(device);
  });
  // PyTorch runs tpu backward passes on one autograd thread per device. That thread drops its
  // references to the last backward's tensors after the caller has resumed; a Python-owned
  // tensor then needs the GIL, and a thread taking the GIL while the interpreter finalizes is
  // ended by a forced unwind that aborts the process ("terminate called without an active
  // exception"). A backward queued behind that work, over tensors Python never saw (a view:
  // no program runs), returns only once the thread has finished it.
  m.def("_quiesce_autograd_threads", [] {
    py::gil_scoped_release release;
    for (int i = 0; i < aten::DeviceCount(); ++i) {
      auto options = at::TensorOptions().dtype(at::kFloat).device(aten::kTpu, static_cast<c10::DeviceIndex>(i));
      at::Tensor x = at::empty({1}, options).set_requires_grad(true);
      torch::autograd::grad({x.view({1})}, {x}, {at::empty({1}, options)});
    }
  });
  m.def("_get_default_generator", [](int index) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(
        at::globalContext().defaultGenerator(c10::Device(aten::kTpu, static_cast<c10::DeviceIndex>(index)))));
  });
  // torch.Event.elapsed_time rejects subclasses such as torch.tpu.Event as its argument.
  m.def("_event_elapsed_time", [](py::handle start, py::handle end) {
    for (py::handle h : {start, end})
      TORCH_CHECK_TYPE(PyObject_IsInstance(h.ptr(), reinterpret_cast<PyObject*>(&THPEventType)) == 1,
                       "expected a torch.Event, got ", py::str(py::type::of(h)).cast<std::string>());
    const c10::Event& a = reinterpret_cast<THPEvent*>(start.ptr())->event;
    const c10::Event& b = reinterpret_cast<THPEvent*>(end.ptr())->event;
    return a.elapsedTime(b);
  });
  m.def("_metrics", &aten::MetricsDict);
  m.def("_tpu_target_set_logging", &runtime::SetTpuTargetLogging);
  m.def("_tpu_target_logging", &runtime::TpuTargetLogging);
  m.def("_tpu_target_take", [](double wait_s) {
    std::vector<runtime::TpuTargetProgram> taken;
    {
      py::gil_scoped_release release;
      taken = runtime::TakeTpuTargetPrograms(wait_s);
    }
    py::list out;
    for (const auto& p : taken) out.append(py::make_tuple(p.name, p.module_text, p.dump_path, p.from_disk, p.id));
    return out;
  });
  m.def("_tpu_target_runs", &runtime::TpuTargetRuns);
  m.def("_set_eager_mode", [](const std::string& mode) {
    if (mode == "debug") aten::SetEagerMode(aten::EagerMode::kDebug);
    else if (mode == "strict") aten::SetEagerMode(aten::EagerMode::kStrict);
    else if (mode == "fused") aten::SetEagerMode(aten::EagerMode::kFused);
    else throw py::value_error("unknown eager mode '" + mode + "': expected 'debug', 'strict' or 'fused'");
  });
  m.def("_get_eager_mode", [] {
    switch (aten::GetEagerMode()) {
      case aten::EagerMode::kDebug: return std::string("debug");
      case aten::EagerMode::kFused: return std::string("fused");
      default: return std::string("strict");
    }
  });
  m.def("_run_pending_graph", [](const std::string& cause) { aten::RunPendingGraph(cause.c_str()); });
  m.def("_sync_point", [](const std::string& cause) { aten::SyncPoint(cause.c_str()); });
  m.def("_cache_dir", [] { return runtime::Runtime::Get().cache_dir(); });
  m.def("_cache_root", &runtime::DiskCacheRoot);
  m.def("_cache_clear", [] { return runtime::DiskCacheClear(runtime::DiskCacheRoot()); });
  m.def("_reset_metrics", [] { runtime::GetMetrics().Reset(); });
  m.def("_native_ops", &aten::NativeOps);
  m.def("_lowered_ops", &lowering::RegisteredOps);
  aten::RegisterGraphBindings(m);
  aten::RegisterKernelBindings(m);
  aten::RegisterProfilerBindings(m);
  m.def("_compiled_programs", [] { return runtime::Runtime::Get().compiled_programs(); });
  m.def("_storage_elem_type", [](const at::Tensor& t) {
    auto* s = aten::StorageOf(t);
    return std::string(s->buffer ? shlo::MlirName(s->elem) : "none");
  });
}
