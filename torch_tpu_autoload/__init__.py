"""The entry point through which `import torch` loads torch_tpu (the "torch.backends" entry point).

It lives outside the torch_tpu package so that deciding *not* to load torch_tpu imports none of
it. On a machine where PyTorch is a CUDA (or ROCm) build and a GPU is present, `import torch`
leaves torch_tpu out: once torch_tpu names the PrivateUse1 backend "tpu", at::getAccelerator()
answers PrivateUse1 instead of CUDA, and every CUDA backward in that process fails on an internal
assert (pytorch/pytorch#161129; torch_tpu/_other_accelerators.py has the details). Installing
torch-tpu must never break CUDA training, so there the user asks for tpu explicitly:
`import torch_tpu` loads it (with a one-time warning), and TORCH_TPU_AUTOLOAD=1 autoloads it
anyway. TORCH_TPU_AUTOLOAD=0 never autoloads; PyTorch's own TORCH_DEVICE_BACKEND_AUTOLOAD=0
turns off every backend's autoload.

Nothing here imports torch at module level: torch calls `autoload()` at the end of its own import.
"""
import os

__all__ = ["autoload", "should_autoload", "gpu_present"]


def _gpu_build_with_device(version, cuda):
    """True when `version` (torch.version) names a CUDA or ROCm build and `cuda` (torch.cuda)
    sees a device. NVML/AMD-SMI are asked first: unlike the CUDA runtime they create no context,
    so a process that forks later is unaffected."""
    if not (getattr(version, "cuda", None) or getattr(version, "hip", None)):
        return False
    for name in ("_device_count_nvml", "_device_count_amdsmi"):
        probe = getattr(cuda, name, None)
        if probe is None:
            continue
        try:
            count = probe()
        except Exception:  # noqa: BLE001 - the library is missing or refuses: ask the runtime
            continue
        if count >= 0:
            return count > 0
    try:
        return cuda.device_count() > 0
    except Exception:  # noqa: BLE001 - a broken driver: there is no CUDA to protect
        return False


def gpu_present():
    """Whether this process's PyTorch is a CUDA/ROCm build on a machine with a GPU."""
    import torch

    return _gpu_build_with_device(torch.version, torch.cuda)


def should_autoload(environ=None):
    """What `import torch` does about torch_tpu: False keeps it out (see the module's doc)."""
    value = (os.environ if environ is None else environ).get("TORCH_TPU_AUTOLOAD", "")
    if value not in ("", "0", "1"):
        raise ValueError(f"TORCH_TPU_AUTOLOAD must be 0 or 1, not {value!r}")
    if value:
        return value == "1"
    return not gpu_present()


def autoload():
    """Called by `import torch`: loads torch_tpu unless should_autoload() says otherwise."""
    if should_autoload():
        import torch_tpu  # noqa: F401
