"""Which PJRT plugin runs the device (DESIGN.md "Device = a PJRT plugin").

First that applies: TORCH_TPU_PJRT_PLUGIN; libtpu when the `libtpu` package is installed and
a TPU is attached; the CUDA plugin when `jax-cuda13-pjrt` (or `jax-cuda12-pjrt`) is installed
and an NVIDIA GPU is attached; the CPU plugin from `xla-cpu-pjrt` (the embedded default).
A plugin package alone is not enough: a wheel installed on a machine without the hardware
must leave the CPU default in place rather than fail at first use.
"""
import glob
import importlib.metadata
import importlib.util
import os
from typing import NamedTuple


class Choice(NamedTuple):
    path: str  # the plugin .so ("" when none was found)
    how: str  # why this one: "TORCH_TPU_PJRT_PLUGIN", "libtpu", "CUDA plugin" or "CPU default"
    package: str  # the pip distribution that ships it ("" for an explicit path)


# Device nodes that show the hardware is attached (a TPU VM exposes its chips as /dev/accel*
# or vfio devices; the NVIDIA driver creates /dev/nvidia<N> per GPU). Patterns for glob.
TPU_DEVICE_NODES = ("/dev/accel[0-9]*", "/dev/vfio/[0-9]*")
GPU_DEVICE_NODES = ("/dev/nvidia[0-9]*",)

# (distribution, module whose folder holds the plugin, file name); newest CUDA first.
CUDA_PLUGINS = (
    ("jax-cuda13-pjrt", "jax_plugins.xla_cuda13", "xla_cuda_plugin.so"),
    ("jax-cuda12-pjrt", "jax_plugins.xla_cuda12", "xla_cuda_plugin.so"),
)
CPU_PLUGIN = ("xla-cpu-pjrt", "xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so")


def _present(patterns):
    return any(glob.glob(p) for p in patterns)


def _file_in_module(module, filename):
    """The file beside `module`'s __init__, without importing the module itself."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent package is missing or broken
        return None
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), filename)
    return path if os.path.exists(path) else None


def _libtpu():
    if importlib.util.find_spec("libtpu") is None or not _present(TPU_DEVICE_NODES):
        return None
    import libtpu

    return Choice(libtpu.get_library_path(), "libtpu", "libtpu")


def _cuda():
    if not _present(GPU_DEVICE_NODES):
        return None
    for dist, module, filename in CUDA_PLUGINS:
        path = _file_in_module(module, filename)
        if path:
            return Choice(path, "CUDA plugin", dist)
    return None


def _cpu():
    dist, module, filename = CPU_PLUGIN
    path = _file_in_module(module, filename)
    return Choice(path, "CPU default", dist) if path else None


def choose():
    """The plugin to load and how it was chosen (see the module docstring for the order)."""
    explicit = os.environ.get("TORCH_TPU_PJRT_PLUGIN")
    if explicit:
        return Choice(explicit, "TORCH_TPU_PJRT_PLUGIN", "")
    return _libtpu() or _cuda() or _cpu() or Choice("", "none found", "")


def package_version(dist):
    """The installed version of a distribution, or "" when it is not installed."""
    if not dist:
        return ""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""
