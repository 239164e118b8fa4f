"""torch-tpu: a native PyTorch device backend for TPUs and other XLA devices.

`import torch` autoloads this package (the `torch.backends` entry point, torch_tpu_autoload),
except where PyTorch is a CUDA build and a GPU is present (see torch_tpu_autoload); then
`torch.device("tpu")` runs PyTorch eagerly through a PJRT plugin.
"""
import atexit
import os


def _autoload():
    """The entry point of releases before torch_tpu_autoload (an install whose metadata still
    names it): importing this module does the work. torch_tpu_autoload.autoload decides now."""


# The plugin logs INFO lines at client creation; keep warnings and errors only.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import torch  # noqa: E402

from . import _compat, _plugin  # noqa: E402

try:
    from ._build_info import torch_version as _built_for_torch, version as __version__
except ImportError:
    raise ImportError("torch_tpu's compiled extension is not built: run `make build` in the source "
                      "checkout, or install the wheel (pip install torch-tpu)") from None
# Before _C loads: under another PyTorch release it would fail with an undefined symbol.
_compat.check_torch(__version__, _built_for_torch, torch.__version__)

from . import _C  # noqa: E402

__all__ = ["metrics", "reset_metrics", "native_ops", "platform", "set_eager_mode", "get_eager_mode", "eager_mode"]

_plugin_choice = _plugin.choose()
from . import launch_env as _launch_env  # noqa: E402

_launch_env.apply(_plugin_choice.how)  # one chip per process under torchrun (libtpu reads these at start)
# The device count (TORCH_TPU_NUM_DEVICES) is read and checked when the runtime starts, so a
# bad value fails the first use with an error naming it, not `import torch`.
_C._configure(_plugin_choice.path, 0, _launch_env.client_options(_plugin_choice.how))
torch.utils.rename_privateuse1_backend("tpu")

from . import device as _device_module  # noqa: E402

torch._register_device_module("tpu", _device_module)
torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
_C._register_ops()

from ._metrics import metrics, reset_metrics  # noqa: E402
from . import _meta  # noqa: E402

_meta.install()
from . import _printing  # noqa: E402

_printing.install()
from . import cache  # noqa: E402,F401
from .modes import eager_mode, get_eager_mode, set_eager_mode  # noqa: E402
from . import modes as _modes  # noqa: E402

_modes._init_from_env()
from . import _dynamo_hooks  # noqa: E402

_dynamo_hooks.install()
from . import distributed as _distributed  # noqa: E402

_distributed.install()
from . import _other_accelerators  # noqa: E402

_other_accelerators.install()  # a CUDA backward here fails; say why (see the module)
_other_accelerators.warn_if_gpu_present()

# TORCH_TPU_ALSO_COMPILE_FOR=v5e:2x2: every program is also compiled for a TPU topology (tpu_target.py).
from . import tpu_target  # noqa: E402
from . import transformers_buckets as _transformers_buckets  # noqa: E402

_transformers_buckets.install()  # prompt and batch buckets for Transformers (docs/buckets.md)
tpu_target._enable_from_environment()


def _autograd_threads_started():
    """Whether PyTorch's autograd engine has started its device threads (named pt_autograd_N)."""
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().startswith("pt_autograd_"):
                    return True
    except OSError:
        return True  # cannot tell: quiescing is harmless
    return False


_runtime_inherited = False  # this process is a fork of one whose runtime had started


def _after_fork_in_child():
    global _runtime_inherited
    _runtime_inherited = _runtime_inherited or _C._initialized()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _drain_at_exit():
    # Programs still running when the interpreter exits would outlive the PJRT client's
    # threads (an abort at exit): wait for them first. A forked child has none of the client's
    # threads: waiting on the parent's executions would never end.
    if _C._initialized() and not _runtime_inherited:
        try:
            _C._await_background_compiles()  # whole fused graphs still compiling
            _C._synchronize(-1)
            if _autograd_threads_started():
                _C._quiesce_autograd_threads()  # see csrc/aten/module.cpp
        except Exception:  # noqa: BLE001 - exiting anyway; the error was or will be reported
            pass


atexit.register(_drain_at_exit)


def native_ops():
    """ATen overloads with a native tpu kernel (everything else falls back to the CPU)."""
    return sorted(_C._native_ops())


def platform():
    """The PJRT platform that runs the device: 'tpu', 'cuda' or 'cpu'."""
    return _device_module.get_device_name()


def __getattr__(name):
    # torch_tpu.kernels (custom kernels from JAX or StableHLO) loads on first use: importing torch
    # does not pay for it, and JAX stays unimported until from_jax.
    if name == "kernels":
        import importlib

        return importlib.import_module(".kernels", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
