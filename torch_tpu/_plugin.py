"""Which PJRT plugin runs the device (DESIGN.md "Device = a PJRT plugin")."""
import importlib.util
import os


def _cpu_plugin_path():
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "xla_cpu_pjrt.so")
    return path if os.path.exists(path) else None


def _libtpu_path():
    if importlib.util.find_spec("libtpu") is None:
        return None
    # A TPU VM exposes its chips as /dev/accel* or /dev/vfio devices.
    if not any(os.path.exists(p) for p in ("/dev/accel0", "/dev/vfio/0")):
        return None
    import libtpu

    return libtpu.get_library_path()


def discover():
    """Returns the plugin path: TORCH_TPU_PJRT_PLUGIN, then libtpu on a TPU VM, then the
    CPU plugin from xla-cpu-pjrt (the embedded default)."""
    explicit = os.environ.get("TORCH_TPU_PJRT_PLUGIN")
    if explicit:
        return explicit
    return _libtpu_path() or _cpu_plugin_path() or ""
