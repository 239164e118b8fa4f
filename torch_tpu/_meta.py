"""Meta kernels for ops whose PyTorch Meta kernel describes one device's kernel, not the op.

tpu infers every result type with Meta kernels (eager dispatch and torch.compile's fake
tensors alike). PyTorch's Meta kernel of aten::_grouped_mm copies the CUDA kernel's limits
(bf16 only, 16-byte aligned strides), while the op itself (its CPU kernel, and tpu's lowering)
takes float32, bfloat16 and float16. This one checks what the CPU kernel checks, so a call
raises where the CPU raises; on tpu the offsets' values are checked on the device.

The margin losses' Meta kernels are their decompositions, which make a single sample a batch of
one: with reduction='none' they give shape (1,) where the CPU kernel gives a 0-dim loss (for
multi_margin_loss when the target is 0-dim, for multilabel_margin_loss when it is 1-D). These
wrap them and give the CPU's shape.

Some releases lack a Meta kernel that tpu needs (_compat.missing_meta_kernels names them); the
ones here are those of the releases that have them.
"""
import torch

from . import _compat

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


def _multi_margin_loss_meta(input, target, p=1, margin=1, weight=None, reduction=1):
    from torch._decomp import decompositions
    loss = decompositions.multi_margin_loss(input, target, p, margin, weight, reduction)
    return loss.reshape(()) if reduction == 0 and target.dim() == 0 else loss


def _multilabel_margin_loss_forward_meta(input, target, reduction):
    from torch._decomp import decompositions
    loss, is_target = decompositions.multilabel_margin_loss_forward(input, target, reduction)
    return (loss.reshape(()) if reduction == 0 and target.dim() <= 1 else loss), is_target


def _sdpa_overrideable_backward_meta(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                                     cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
                                     philox_offset, *, scale=None):
    """Gradients shaped like the inputs, as 2.12's and 2.13's Meta kernel gives them."""
    return (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value),
            torch.empty_like(attn_bias) if attn_bias is not None else None)


def _bmm_meta(self, mat2):
    """2.11's bmm Meta kernel with the dtype check its CPU kernel (and 2.12's Meta kernel) makes."""
    if self.dtype != mat2.dtype:
        raise RuntimeError(f"expected scalar type {_c10_name(self.dtype)} but found {_c10_name(mat2.dtype)}")
    from torch._meta_registrations import meta_bmm

    return meta_bmm(self, mat2)


def _c10_name(dtype):
    """The name the CPU kernels' messages give a dtype: Float, Double, BFloat16, ..."""
    return torch.empty((), dtype=dtype).type()[len("torch."):-len("Tensor")]


def _transformer_encoder_layer_fwd_meta(src, *args, **kwargs):
    """The layer's output is shaped like its input, as 2.13's Meta kernel gives it."""
    if src.is_nested:
        raise NotImplementedError("_transformer_encoder_layer_fwd has no Meta kernel for nested tensors")
    return src.clone() if src.numel() == 0 else torch.empty_like(src)


_MISSING = {"_scaled_dot_product_fused_attention_overrideable_backward": _sdpa_overrideable_backward_meta,
            "bmm": _bmm_meta, "_transformer_encoder_layer_fwd": _transformer_encoder_layer_fwd_meta}

_lib = None


def install():
    """Replaces the Meta kernel in the three places PyTorch keeps one: the dispatcher (eager
    inference), the Python dispatcher (tracing) and the decomposition table (fake tensors)."""
    global _lib
    if _lib is not None:
        return
    from torch._decomp import global_decomposition_table

    _lib = torch.library.Library("aten", "IMPL")
    replaced = (("_grouped_mm", _grouped_mm_meta), ("multi_margin_loss", _multi_margin_loss_meta),
                ("multilabel_margin_loss_forward", _multilabel_margin_loss_forward_meta))
    added = tuple((name, _MISSING[name]) for name in _compat.missing_meta_kernels())
    for name, meta in replaced + added:
        op = getattr(torch.ops.aten, name).default
        _compat.override_meta_kernel(_lib, name, meta)
        op.py_kernels[torch._C.DispatchKey.Meta] = meta
        op._dispatch_cache.clear()
        global_decomposition_table["meta"][op] = meta
