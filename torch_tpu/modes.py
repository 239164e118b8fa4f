"""Eager modes (DESIGN.md "One op, three ways to run it").

- "debug": every op waits for its result; errors surface at the op; with
  TORCH_TPU_CHECK_NANS=1 the first op producing NaN/Inf is named.
- "strict": one program per op, run asynchronously.
- "fused" (default): ops are deferred and run as one program at a sync point (.cpu(),
  .item(), printing, a CPU fallback op, torch.tpu.synchronize(), the end of backward(),
  TORCH_TPU_FUSED_MAX_OPS ops).
All three share one compilation cache.
"""
import contextlib
import os

from . import _C

MODES = ("debug", "strict", "fused")


def set_eager_mode(mode):
    """Switches the eager mode; pending fused work runs first."""
    if mode not in MODES:
        raise ValueError(f"unknown eager mode {mode!r}: expected one of {MODES}")
    _C._set_eager_mode(mode)


def get_eager_mode():
    return _C._get_eager_mode()


@contextlib.contextmanager
def eager_mode(mode):
    """Context manager: `with torch_tpu.eager_mode("fused"): ...`"""
    previous = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(previous)


def _install_backward_sync_point():
    """The end of backward() runs the open fused graph (without waiting for it), so a graph
    holds one forward+backward and the optimizer step starts a new one."""
    import torch

    original = torch.autograd.backward
    if getattr(original, "_torch_tpu_wrapped", False):
        return

    def backward(*args, **kwargs):
        result = original(*args, **kwargs)
        if _C._get_eager_mode() == "fused":
            _C._run_pending_graph("end of backward")
        return result

    backward._torch_tpu_wrapped = True
    backward.__doc__ = original.__doc__
    torch.autograd.backward = backward


def _init_from_env():
    _install_backward_sync_point()
    mode = os.environ.get("TORCH_TPU_EAGER_MODE")
    if mode:
        set_eager_mode(mode)
