"""Meta kernels for ops whose PyTorch Meta kernel describes one device's kernel, not the op.

tpu infers every result type with Meta kernels (eager dispatch and torch.compile's fake
tensors alike). PyTorch's Meta kernel of aten::_grouped_mm copies the CUDA kernel's limits
(bf16 only, 16-byte aligned strides), while the op itself (its CPU kernel, and tpu's lowering)
takes float32, bfloat16 and float16. This one checks what the CPU kernel checks, so a call
raises where the CPU raises; on tpu the offsets' values are checked on the device.
"""
import torch

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _grouped_mm_meta(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    check = torch._check
    check(mat_a.dim() in (2, 3), lambda: "mat_a has to be 2 or 3d")
    check(mat_b.dim() in (2, 3), lambda: "mat_b has to be 2 or 3d")
    a_2d, b_2d = mat_a.dim() == 2, mat_b.dim() == 2
    check(mat_a.dtype in _FLOATS, lambda: f"Expected mat_a to be Float32, BFloat16 or Float16 matrix, got {mat_a.dtype}")
    check(mat_b.dtype in _FLOATS, lambda: f"Expected mat_b to be Float32, BFloat16 or Float16 matrix, got {mat_b.dtype}")
    check(mat_a.dtype == mat_b.dtype,
          lambda: f"expected mat_a and mat_b to have the same dtype, but got: {mat_a.dtype} != {mat_b.dtype}")
    check(mat_a.size(-1) == mat_b.size(-2), lambda: "contraction dimension of mat_a and mat_b must match")
    check((offs is not None) == (a_2d or b_2d),
          lambda: "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d")
    if offs is not None:
        check(offs.dim() == 1, lambda: "offs has to be 1D")
        check(offs.dtype == torch.int32, lambda: "Offsets have to be int32")
    check(bias is None, lambda: "Bias not supported yet")
    check(out_dtype is None or out_dtype == mat_a.dtype, lambda: "Grouped gemm output dtype must match `mat_a` dtype")
    if a_2d and b_2d:
        size = [offs.size(0), mat_a.size(0), mat_b.size(1)]
    elif a_2d:
        check(offs.size(0) == mat_b.size(0), lambda: "matrix batch sizes have to match")
        size = [mat_a.size(0), mat_b.size(-1)]
    elif b_2d:
        check(offs.size(0) == mat_a.size(0), lambda: "matrix batch sizes have to match")
        size = [mat_a.size(1), mat_b.size(1)]
    else:
        check(mat_a.size(0) == mat_b.size(0), lambda: "batched dimension has to match")
        size = [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    return mat_a.new_empty(size, dtype=out_dtype or mat_a.dtype)


_lib = None


def install():
    """Replaces the Meta kernel in the three places PyTorch keeps one: the dispatcher (eager
    inference), the Python dispatcher (tracing) and the decomposition table (fake tensors)."""
    global _lib
    if _lib is not None:
        return
    from torch._decomp import global_decomposition_table

    op = torch.ops.aten._grouped_mm.default
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("_grouped_mm", _grouped_mm_meta, "Meta")
    op.py_kernels[torch._C.DispatchKey.Meta] = _grouped_mm_meta
    op._dispatch_cache.clear()
    global_decomposition_table["meta"][op] = _grouped_mm_meta
