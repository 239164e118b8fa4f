// The differences between the PyTorch releases torch_tpu builds against (2.11 to 2.13), each
// named with the release that needs it; torch_tpu/_compat.py holds the Python side. Code
// elsewhere in csrc/aten calls what is here instead of testing versions itself, so supporting
// a new release, or dropping an old one, is one reading of this file.
#pragma once

#include <torch/csrc/Layout.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/headeronly/version.h>

#define TPU_TORCH_BEFORE(major, minor) \
  (TORCH_VERSION_MAJOR < (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR < (minor)))

#if TPU_TORCH_BEFORE(2, 11)
#error "torch_tpu supports PyTorch 2.11 to 2.13 (pyproject.toml)"
#endif

namespace tpu::aten {

namespace compat {

// torch.layout from Python. 2.11: torch/csrc/utils/pybind.h has no pybind11 caster for
// c10::Layout (2.13 has), so the object is read as the THPLayout it is, in every release.
inline c10::Layout LayoutFromPython(pybind11::handle h) {
  if (!THPLayout_Check(h.ptr()))
    throw pybind11::type_error(std::string("expected a torch.layout, got ") +
                               pybind11::str(pybind11::type::of(h)).cast<std::string>());
  return reinterpret_cast<THPLayout*>(h.ptr())->layout;
}

}  // namespace compat

namespace autocast_policies {
#if TPU_TORCH_BEFORE(2, 13)
// 2.11, 2.12: ATen/autocast_mode.h's op lists name norm's named-dimension overloads with an
// unqualified DimnameList.
using at::DimnameList;
#endif
}  // namespace autocast_policies

}  // namespace tpu::aten

// Kineto child profilers (csrc/aten/profiler.cpp, the one file built with USE_KINETO and the
// bundled kineto headers; elsewhere TPU_HAS_KINETO_CHILD_PROFILER is 0).
// 2.12+: PrivateUse1ProfilerRegistry (torch/csrc/profiler/standalone/privateuse1_profiler.h)
// forwards the factory to Kineto when Kineto starts. 2.11 has no registry: the factory goes to
// libkineto directly. The 2.11 branch compiles only where a 2.11 build is made (make
// compat-test TORCH=2.11.0); it has not been run.
#if defined(USE_KINETO)
#include <libkineto.h>
#if !TPU_TORCH_BEFORE(2, 12)
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#endif
#define TPU_HAS_KINETO_CHILD_PROFILER 1
namespace tpu::aten::compat {
inline void RegisterKinetoChildProfiler(std::function<std::unique_ptr<libkineto::IActivityProfiler>()> factory) {
#if TPU_TORCH_BEFORE(2, 12)
  libkineto::api().registerProfilerFactory(std::move(factory));
#else
  torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(std::move(factory));
#endif
}
}  // namespace tpu::aten::compat
#else
#define TPU_HAS_KINETO_CHILD_PROFILER 0
#endif
