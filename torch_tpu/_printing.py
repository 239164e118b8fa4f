"""Printing a tpu tensor formats a host copy of it.

torch._tensor_str formats with a dozen tensor ops (slices, isfinite, masked_select, abs,
min/max, ...). On tpu each is a program compiled for that shape (or a CPU fallback), so a
first print of a new shape would compile a handful of programs. PyTorch moves xla, lazy, ipu
and mtia tensors to the CPU before formatting for the same reason; this does it for tpu.
The device suffix (device='tpu:0') is computed from the original tensor, before this runs.
"""
import torch._tensor_str as _tensor_str_module

_format_contents = getattr(_tensor_str_module, "_tensor_str", None)


def _tensor_str(self, indent):
    if self.device.type == "tpu":
        self = self.to("cpu")
    return _format_contents(self, indent)


def install():
    if _format_contents is not None and _tensor_str_module._tensor_str is _format_contents:
        _tensor_str_module._tensor_str = _tensor_str
