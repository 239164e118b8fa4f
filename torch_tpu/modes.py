"""Eager modes (DESIGN.md "One op, three ways to run it").

- "debug": every op waits for its result; errors surface at the op; with
  TORCH_TPU_CHECK_NANS=1 the first op producing NaN/Inf is named.
- "strict" (default): one program per op, run asynchronously.
- "fused": ops are deferred and run as one program at a sync point (.cpu(), .item(),
  printing, a CPU fallback op, torch.tpu.synchronize(), TORCH_TPU_FUSED_MAX_OPS ops).
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


def _init_from_env():
    mode = os.environ.get("TORCH_TPU_EAGER_MODE")
    if mode:
        set_eager_mode(mode)
