"""The inference fast paths of nn.TransformerEncoderLayer, nn.TransformerEncoder and
nn.MultiheadAttention (eval mode under no_grad) run natively on tpu and match the CPU:
aten::_transformer_encoder_layer_fwd, aten::_native_multi_head_attention, aten::_masked_softmax.
"""
import copy

import pytest
import torch
import torch.nn as nn

import torch_tpu
from conftest import native

TPU = "tpu"




def _fast_path_ops(fn, *args):
    """The aten ops `fn` dispatches on CPU inputs (to see that the fast path is taken)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Record():
        fn(*args)
    return seen


def _compare(module, *inputs, dtype=torch.float32, atol=None, rtol=None, **kwargs):
    module = module.eval()
    cpu_module = copy.deepcopy(module)
    tpu_module = copy.deepcopy(module).to(TPU, dtype)
    if dtype == torch.bfloat16:
        cpu_module = cpu_module.to(torch.bfloat16).float()
        atol, rtol = 3e-2, 3e-2
    cast = lambda x, dev, dt: x.to(dev, dt) if isinstance(x, torch.Tensor) and x.is_floating_point() else (  # noqa: E731
        x.to(dev) if isinstance(x, torch.Tensor) else x)
    tpu_inputs = [cast(x, TPU, dtype) for x in inputs]
    tpu_kwargs = {k: cast(v, TPU, dtype) for k, v in kwargs.items()}
    with torch.no_grad():
        if dtype == torch.bfloat16:
            inputs = [cast(x, "cpu", torch.bfloat16) for x in inputs]
            inputs = [cast(x, "cpu", torch.float32) for x in inputs]
            kwargs = {k: cast(v, "cpu", torch.float32) for k, v in kwargs.items()}
        expected = cpu_module(*inputs, **kwargs)
        with native():
            got = tpu_module(*tpu_inputs, **tpu_kwargs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected):
        if e is None:
            assert g is None
            continue
        assert g.device.type == "tpu"
        torch.testing.assert_close(g.cpu().float(), e.float(), atol=atol, rtol=rtol, equal_nan=True)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_fast_path(activation, norm_first):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, activation=activation, norm_first=norm_first,
                                       batch_first=True)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        assert "_transformer_encoder_layer_fwd" in _fast_path_ops(layer.eval(), x)
    _compare(layer, x)
    _compare(layer, x, dtype=torch.bfloat16)


@pytest.mark.parametrize("mask", ["src_mask", "padding", "both", "bool_padding"])
def test_encoder_layer_masks(mask):
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    x = torch.randn(3, 4, 8)
    causal = nn.Transformer.generate_square_subsequent_mask(4)
    padding = torch.tensor([[False, False, False, False], [False, False, True, True], [False, True, True, True]])
    kwargs = {}
    if mask in ("src_mask", "both"):
        kwargs["src_mask"] = causal
    if mask in ("padding", "both"):
        kwargs["src_key_padding_mask"] = torch.zeros(3, 4).masked_fill(padding, float("-inf"))
    if mask == "bool_padding":
        kwargs["src_key_padding_mask"] = padding
    _compare(layer, x, **kwargs)


def test_encoder_stack():
    torch.manual_seed(2)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    _compare(encoder, torch.randn(2, 6, 8))
    padding = torch.tensor([[False] * 6, [False, False, False, True, True, True]])
    _compare(encoder, torch.randn(2, 6, 8), src_key_padding_mask=padding)


def test_encoder_stack_with_nested_tensor_sparsity_path():
    # On the CPU a left-aligned padding mask turns the batch into a nested tensor, whose padded
    # positions come back as zeros; tpu has no nested tensors and runs the dense fast path with
    # the mask instead: the same values at every unpadded position.
    torch.manual_seed(3)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).eval()
    x = torch.randn(2, 6, 8)
    padding = torch.tensor([[False] * 6, [False, False, False, True, True, True]])
    with torch.no_grad():
        expected = encoder(x, src_key_padding_mask=padding)
        with native():
            got = copy.deepcopy(encoder).to(TPU)(x.to(TPU), src_key_padding_mask=padding.to(TPU)).cpu()
    keep = ~padding
    torch.testing.assert_close(got[keep], expected[keep])


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("average", [True, False])
def test_multihead_attention_fast_path(need_weights, average):
    torch.manual_seed(3)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        assert "_native_multi_head_attention" in _fast_path_ops(
            lambda t: mha.eval()(t, t, t, need_weights=need_weights), x)

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = mha

        def forward(self, x, **kw):
            return self.mha(x, x, x, need_weights=need_weights, average_attn_weights=average, **kw)

    _compare(SelfAttention(), x)
    _compare(SelfAttention(), x, key_padding_mask=torch.tensor([[False] * 5, [False, False, True, True, True]]))
    _compare(SelfAttention(), x, attn_mask=nn.Transformer.generate_square_subsequent_mask(5))
    _compare(SelfAttention(), x, dtype=torch.bfloat16)


@pytest.mark.parametrize("mask_type", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_softmax(mask_type, dtype):
    torch.manual_seed(4)
    x = torch.randn(2, 3, 4, 4).to(dtype)
    shape = {0: (4, 4), 1: (2, 4), 2: (2, 3, 4, 4)}[mask_type]
    mask = torch.rand(shape) > 0.6
    mask[0] = True  # fully masked rows
    for dim in ([3] if mask_type != 2 else [3, 1]):
        expected = torch._masked_softmax(x, mask, dim, mask_type)
        with native():
            got = torch._masked_softmax(x.to(TPU), mask.to(TPU), dim, mask_type)
        torch.testing.assert_close(got.cpu(), expected, equal_nan=True)
    with pytest.raises(RuntimeError, match="Mask should be a boolean tensor"):
        torch._masked_softmax(x.to(TPU), mask.float().to(TPU), 3, mask_type)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_softmax_backward(dtype):
    """The gradient the CPU kernel gives: 0 at masked entries (and in fully masked rows), the
    softmax gradient over the unmasked ones; through autograd and called directly."""
    torch.manual_seed(5)
    x, grad = torch.randn(2, 3, 4, 5).to(dtype), torch.randn(2, 3, 4, 5).to(dtype)
    mask = torch.rand(2, 3, 4, 5) > 0.6
    mask[0, 0] = True  # fully masked rows
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    # A softmax output, and any values: the sum skips masked entries, whatever they hold.
    outputs = [(dim, out) for dim in [3, 1, -2, None] for out in [torch._masked_softmax(x, mask, dim),
                                                                   torch.rand_like(x)]]
    for dim, out in outputs:
        expected = torch.ops.aten._masked_softmax_backward(grad, out, mask, dim)
        with native():
            got = torch.ops.aten._masked_softmax_backward(grad.to(TPU), out.to(TPU), mask.to(TPU), dim)
        torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **tol)
    leaf = x.clone().requires_grad_()
    torch._masked_softmax(leaf, mask, 2).backward(grad)
    on_tpu = x.to(TPU).requires_grad_()
    with native():
        torch._masked_softmax(on_tpu, mask.to(TPU), 2).backward(grad.to(TPU))
    torch.testing.assert_close(on_tpu.grad.cpu(), leaf.grad, **tol)
    with pytest.raises(RuntimeError, match="Mask shape should match grad shape"):
        torch.ops.aten._masked_softmax_backward(grad.to(TPU), out.to(TPU), mask[0].to(TPU), 3)
