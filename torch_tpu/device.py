"""torch.tpu: the device module, mirroring torch.cuda where it makes sense."""
import contextlib
import os
import sys
import threading
from collections import namedtuple

import torch

from . import _C
from . import launch_env as _launch_env

_initialized = False
_init_lock = threading.Lock()
_in_bad_fork = False
_queued_calls = []


def _after_fork_in_child():
    # A forked child cannot use the parent's PJRT client (its threads did not survive the
    # fork): as with CUDA, the device must not be used there; use the 'spawn' start method.
    global _in_bad_fork, _initialized
    if _initialized or _C._initialized():
        _in_bad_fork = True
        _initialized = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def _is_in_bad_fork():
    return _in_bad_fork


def is_initialized():
    return _initialized


def init():
    _lazy_init()


def _lazy_init():
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if _initialized:
            return
        if _in_bad_fork:
            raise RuntimeError("tpu: cannot re-initialize the device in a forked subprocess; use 'spawn'")
        import torch_tpu

        _launch_env.attach_job_store(torch_tpu._plugin_choice.how)
        _C._init()
        _initialized = True
        for fn, _ in _queued_calls:
            fn()
        _queued_calls.clear()
        _notice_platform()


_noticed = False


def _notice_platform():
    """Says once per process which PJRT platform runs the device when it is not a TPU.

    A notice, not a warning: written to stderr as one line, without the source location a
    warning would point at (which read like an error)."""
    global _noticed
    if _noticed or os.environ.get("TORCH_TPU_QUIET"):
        return
    _noticed = True
    name = get_device_name()
    if name != "tpu":
        sys.stderr.write(
            f"torch_tpu: note: the 'tpu' device runs on the PJRT {name} platform, not on a TPU "
            f"(plugin {_C._plugin_path()}; TORCH_TPU_QUIET=1 hides this note)\n"
        )


def is_available():
    try:
        return _C._device_count() > 0
    except Exception:
        return False


def device_count():
    return _C._device_count()


def current_device():
    return _C._current_device()


def _index(device):
    """The index of a tpu device argument (None: the current device); a device that does not
    exist raises, as on CUDA, instead of reading or syncing nothing."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        index = device
    else:
        device = torch.device(device)
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        if device.index is None:
            return current_device()
        index = device.index
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(f"tpu: invalid device index {index}: {count} device(s) available "
                           "(set TORCH_TPU_NUM_DEVICES for more on the CPU plugin)")
    return index


def set_device(device):
    _lazy_init()
    _C._set_device(_index(device))


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device):
        self.idx = _index(device) if device is not None else -1
        self.prev = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev = current_device()
            set_device(self.idx)

    def __exit__(self, *exc):
        if self.prev >= 0:
            set_device(self.prev)
        return False


def synchronize(device=None):
    """Waits for every pending computation on the device (the current device if None, as
    torch.cuda.synchronize): another device's open fused graph is left to its own thread."""
    _lazy_init()
    _C._synchronize(_index(device))


# ---- random numbers ----
def _generator(idx):
    _lazy_init()  # a runtime that cannot start says why, rather than "no such device"
    return _C._get_default_generator(idx)


def __getattr__(name):
    # `torch.tpu.default_generators` is a tuple, as `torch.cuda.default_generators` is; built on
    # first access so that importing the module does not start the runtime.
    if name == "default_generators":
        return tuple(_generator(i) for i in range(device_count()))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def manual_seed(seed):
    seed = int(seed)
    _generator(current_device()).manual_seed(seed)


def manual_seed_all(seed):
    seed = int(seed)
    for i in range(device_count()):
        _generator(i).manual_seed(seed)


def seed():
    _generator(current_device()).seed()


def seed_all():
    s = _generator(0).seed()
    for i in range(1, device_count()):
        _generator(i).manual_seed(s)


def initial_seed():
    return _generator(current_device()).initial_seed()


def get_rng_state(device="tpu"):
    return _generator(_index(device)).get_state()


def set_rng_state(new_state, device="tpu"):
    _generator(_index(device)).set_state(new_state)


def get_rng_state_all():
    return [_generator(i).get_state() for i in range(device_count())]


def set_rng_state_all(states):
    for i, s in enumerate(states):
        _generator(i).set_state(s)


# ---- memory ----
def memory_stats(device=None):
    _lazy_init()
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    _lazy_init()
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None):
    _lazy_init()
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache():
    """Device memory is freed as soon as tensors die: nothing is cached."""


def mem_get_info(device=None):
    """(free, total) bytes of device memory."""
    _lazy_init()
    return torch.accelerator.get_memory_info(_index(device))


# ---- streams and events (synchronous for now, but correct) ----
class Stream(torch.Stream):
    def __new__(cls, device=None, priority=0, **kwargs):
        _lazy_init()
        return super().__new__(cls, device=torch.device("tpu", _index(device)), priority=priority, **kwargs)


class Event(torch.Event):
    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return super().__new__(cls, device=torch.device("tpu", current_device()), enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)

    def elapsed_time(self, end_event):
        """Milliseconds between this event and `end_event` (both recorded)."""
        # torch.Event.elapsed_time only accepts an exact torch.Event as its argument.
        return _C._event_elapsed_time(self, end_event)


def current_stream(device=None):
    _lazy_init()
    return torch.accelerator.current_stream(_index(device))


def default_stream(device=None):
    return current_stream(device)


def set_stream(stream):
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(s):
    if s is None:
        yield
        return
    prev = current_stream(s.device)
    set_stream(s)
    try:
        yield
    finally:
        set_stream(prev)


# ---- properties ----
_Properties = namedtuple(
    "_TpuDeviceProperties", "name platform platform_version device_kind plugin_path total_memory pjrt_api_version"
)


def get_device_name(device=None):
    """The PJRT platform that runs the device: 'tpu', 'cuda' or 'cpu'. Never pretends."""
    _lazy_init()
    _index(device)
    return _C._platform()


def get_device_properties(device=None):
    _lazy_init()
    idx = _index(device)
    return _Properties(
        name=_C._platform(),
        platform=_C._platform(),
        platform_version=_C._platform_version(),
        device_kind=_C._device_kind(idx),
        plugin_path=_C._plugin_path(),
        total_memory=mem_get_info(idx)[1],
        pjrt_api_version=_C._pjrt_api_version(),
    )


def get_device_capability(device=None):
    _index(device)
    return (0, 0)


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation=True):
    return True


def _get_device_index(device, optional=False):
    return _index(device)
