"""Eager modes (DESIGN.md "One op, three ways to run it").

- "debug": every op waits for its result; errors surface at the op; with
  TORCH_TPU_CHECK_NANS=1 the first op producing NaN/Inf is named.
- "strict": one program per op, run asynchronously.
- "fused" (default): ops are deferred and run as one program at a sync point (.cpu(),
  .item(), printing, a CPU fallback op, torch.tpu.synchronize(), the end of backward() or autograd.grad(),
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


def _has_tpu_root(roots):
    import torch

    if isinstance(roots, (torch.Tensor, torch.autograd.graph.GradientEdge)):
        roots = (roots,)
    return any(isinstance(t, torch.Tensor) and t.device.type == "tpu" for t in roots)


def _wrap_autograd_entry(original, name):
    """Runs a backward pass over tpu tensors on the calling thread, and, in fused mode, ends it
    with a sync point.

    - Calling thread: PyTorch's engine hands every device other than CPU, Meta and Lazy to a
      worker thread of its own, and the caller sleeps until that thread is done. Our ops only
      enqueue work, so the worker gains nothing; the two hand-offs cost more than the rest of
      a small step's backward (measured: strict MLP step 1.24x, tiny Llama 1.35x faster).
      `set_multithreading_enabled(False)` is PyTorch's own switch for this.
    - Sync point: the open fused graph runs (without waiting for it), so a graph holds one
      forward+backward and the optimizer step starts a new one that records while it runs."""
    import torch

    is_enabled, set_enabled = torch._C._is_multithreading_enabled, torch._C._set_multithreading_enabled

    def entry(*args, **kwargs):
        roots = args[0] if args else kwargs.get("tensors", kwargs.get("outputs", ()))
        if not _has_tpu_root(roots):
            return original(*args, **kwargs)
        previous = is_enabled()
        set_enabled(False)
        try:
            result = original(*args, **kwargs)
        finally:
            set_enabled(previous)
        if _C._get_eager_mode() == "fused":
            _C._run_pending_graph(f"end of {name}")
        return result

    entry._torch_tpu_wrapped = True
    entry.__doc__, entry.__name__, entry.__wrapped__ = original.__doc__, original.__name__, original
    return entry


def _install_backward_hooks():
    import torch

    for name in ("backward", "grad"):
        original = getattr(torch.autograd, name)
        if not getattr(original, "_torch_tpu_wrapped", False):
            setattr(torch.autograd, name, _wrap_autograd_entry(original, name))


def _init_from_env():
    _install_backward_hooks()
    mode = os.environ.get("TORCH_TPU_EAGER_MODE")
    if mode:
        set_eager_mode(mode)
