"""A backward over another accelerator's tensors (CUDA) in a process that has loaded torch_tpu.

PyTorch 2.9 and later keep the autograd engine's stream bookkeeping for one accelerator per
process. `at::accelerator::getAccelerator()` (aten/src/ATen/DeviceAccelerator.cpp) returns
PrivateUse1 as soon as a PrivateUse1 backend is named, ahead of CUDA; `Node::stream()`
(torch/csrc/autograd/function.h) returns a stream only for a node's inputs on that device type.
So every node of a CUDA graph has no stream, and `Engine::evaluate_function`
(torch/csrc/autograd/engine.cpp) fails `TORCH_INTERNAL_ASSERT(opt_ready_stream &&
opt_parent_stream)` at the first CUDA gradient it reads (InputBuffer::add has already given that
gradient a "ready stream", taken from the PrivateUse1 guard through
`at::accelerator::getCurrentStream`). Nothing the tpu guard, its streams or its events do reaches
that check: the parent stream is empty because the node holds no tpu input. The same holds for
AOTAutograd tracing a CUDA training graph for Inductor (it runs the engine on fake CUDA tensors).
Upstream: pytorch/pytorch#161129 (the fix proposed in #161130 was not taken).

Until PyTorch changes, a CUDA backward cannot run in such a process; this module turns PyTorch's
internal assert into an error that says why and what to do, and warns once when torch_tpu loads
where a GPU is present. `import torch` alone does not load torch_tpu there (torch_tpu_autoload), so
merely installing torch-tpu never breaks CUDA. Forward passes (eager and Inductor) on CUDA tensors
are unaffected.
"""
import functools
import warnings

_ASSERT = "opt_ready_stream && opt_parent_stream"
MESSAGE = (
    "torch_tpu: a backward over cuda (or another accelerator's) tensors cannot run in a process that has "
    "loaded torch_tpu: PyTorch keeps autograd's stream bookkeeping for one accelerator per process, and a "
    "named PrivateUse1 backend ('tpu') takes that place from CUDA (pytorch/pytorch#161129). Forward passes "
    "on CUDA work; train on CUDA in a process that does not `import torch_tpu` (where a GPU is present, "
    "`import torch` alone no longer loads it unless TORCH_TPU_AUTOLOAD=1) (the failure PyTorch reported is "
    "chained below)")
LOADED_BESIDE_GPU = (
    "torch_tpu: loaded in a process where PyTorch has a CUDA device: while 'tpu' is registered, a backward "
    "over cuda tensors cannot run in this process (pytorch/pytorch#161129; forward passes work). `import torch` "
    "alone does not load torch_tpu on GPU machines; import it only in processes that use the tpu device")


def warn_if_gpu_present():
    """The one-time warning of an explicit `import torch_tpu` (or TORCH_TPU_AUTOLOAD=1) where a
    CUDA/ROCm device is present."""
    import torch_tpu_autoload

    if torch_tpu_autoload.gpu_present():
        warnings.warn(LOADED_BESIDE_GPU, stacklevel=3)


def _explained(run_backward):
    @functools.wraps(run_backward)
    def run(*args, **kwargs):
        try:
            return run_backward(*args, **kwargs)
        except RuntimeError as e:
            if _ASSERT not in str(e):
                raise
            raise RuntimeError(MESSAGE) from e

    run._torch_tpu_explained = True
    return run


def install():
    """Wraps the one function every Python backward goes through (Tensor.backward,
    torch.autograd.backward/grad); PyTorch rebinds the same two names in torch.compiler."""
    import torch.autograd
    import torch.autograd.graph

    original = torch.autograd.graph._engine_run_backward
    if getattr(original, "_torch_tpu_explained", False):
        return
    wrapped = _explained(original)
    torch.autograd.graph._engine_run_backward = wrapped
    if getattr(torch.autograd, "_engine_run_backward", None) is original:
        torch.autograd._engine_run_backward = wrapped
