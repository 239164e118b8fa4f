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
