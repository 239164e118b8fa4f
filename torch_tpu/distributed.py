"""torch.distributed on tpu tensors.

Collectives on tpu tensors (all_reduce, all_gather, reduce_scatter, broadcast, send/recv, ...)
run through the process group's CPU backend on host copies (csrc/aten/collectives.cpp), so
`init_process_group("gloo")` serves tpu tensors as it serves CPU ones: DDP, DTensor, tensor
parallelism and FSDP work across processes, one tpu device each (`torch.tpu.set_device(rank)`;
`TORCH_TPU_NUM_DEVICES` gives the CPU plugin more than one device). The backend name
"tpu_dist" (what Transformers asks for on tpu) is Gloo for both cpu and tpu tensors."""
import warnings

import torch

from . import _C

_registered = False


def install():
    """Registers the tpu collectives once (at import of torch_tpu when torch.distributed is built)."""
    global _registered
    if _registered or not torch.distributed.is_available():
        return
    _registered = True
    if torch.distributed.is_gloo_available() and "tpu_dist" not in torch.distributed.Backend.backend_list:
        torch.distributed.Backend.register_backend("tpu_dist", _create_tpu_dist, devices=["cpu", "tpu"])
    failed = _C._register_collectives()
    if failed:  # another torch's c10d kernel signatures
        warnings.warn("torch_tpu: these torch.distributed collectives are unavailable on tpu: " + "; ".join(failed))


def _create_tpu_dist(store, rank, size, timeout):
    """init_process_group("tpu_dist"): a Gloo backend serves both devices; the tpu collectives
    find it as the group's CPU backend."""
    return torch.distributed.ProcessGroupGloo(store, rank, size, timeout)
