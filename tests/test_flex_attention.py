"""FlexAttention on tpu (torch_tpu/_flex_attention.py), eager and torch.compile(backend="tpu").

The CPU runs flex_attention forward only (PyTorch refuses its backward on the CPU), so the
gradients are checked against the same attention written out in plain ops on the CPU: scores,
score_mod over broadcast index tensors, the mask, softmax, and the weighted sum of values.
"""
import pytest
import torch
import torch_tpu
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention
from torch.testing import assert_close

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

B, H, L, E = 2, 2, 16, 8


def causal(b, h, q, kv):
    return q >= kv


def relative_bias(score, b, h, q, kv):
    return score + (q - kv).to(score.dtype) * 0.1 + h.to(score.dtype) * 0.5


def reference(q, k, v, scale=E ** -0.5):
    """relative_bias + causal attention in plain ops."""
    s = (q @ k.transpose(-2, -1)) * scale
    qi = torch.arange(L).view(L, 1)
    ki = torch.arange(L).view(1, L)
    h = torch.arange(H).view(1, H, 1, 1)
    s = s + (qi - ki).to(s.dtype) * 0.1 + h.to(s.dtype) * 0.5
    s = s.masked_fill(~(qi >= ki), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, L, E, generator=g).to(dtype) for _ in range(3)]


def no_fallbacks():
    """Nothing ran on the CPU, and every compiled node was lowered (none ran eagerly)."""
    m = torch_tpu.metrics()
    return not m["cpu_fallbacks_by_op"] and not m["compile_eager_nodes_by_op"]


def run(fn, dtype, grad):
    """fn(q, k, v, block_mask) on tpu; returns the output and the input gradients (on the CPU)."""
    torch_tpu.metrics.reset()
    q, k, v = (t.to("tpu").requires_grad_(grad) for t in inputs(dtype))
    out = fn(q, k, v, create_block_mask(causal, B, H, L, L, device="tpu"))
    grads = []
    if grad:
        out.float().backward(torch.ones_like(out, dtype=torch.float32))
        grads = [t.grad.cpu().float() for t in (q, k, v)]
    assert no_fallbacks(), torch_tpu.metrics()
    return out.cpu().float(), grads


def expected(grad):
    q, k, v = (t.requires_grad_(grad) for t in inputs())
    out = reference(q, k, v)
    if grad:
        out.backward(torch.ones_like(out))
        return out.detach(), [t.grad for t in (q, k, v)]
    return out, []


def eager(q, k, v, block_mask):
    return flex_attention(q, k, v, score_mod=relative_bias, block_mask=block_mask)


def test_eager_forward_matches_cpu_flex_attention():
    q, k, v = inputs()
    cpu = flex_attention(q, k, v, score_mod=relative_bias, block_mask=create_block_mask(causal, B, H, L, L, device="cpu"))
    out, _ = run(eager, torch.float32, grad=False)
    assert_close(out, cpu)
    assert_close(out, reference(q, k, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_gradients(dtype):
    out, grads = run(eager, dtype, grad=True)
    ref_out, ref_grads = expected(grad=True)
    tol = {} if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    assert_close(out, ref_out, **tol)
    for g, r in zip(grads, ref_grads):
        assert_close(g, r, **tol)


def test_compiled_forward_and_gradients():
    torch._dynamo.reset()
    compiled = torch.compile(eager, backend="tpu", fullgraph=True)
    out, grads = run(compiled, torch.float32, grad=True)
    ref_out, ref_grads = expected(grad=True)
    assert_close(out, ref_out)
    for g, r in zip(grads, ref_grads):
        assert_close(g, r)


def test_lse_and_gqa():
    torch_tpu.metrics.reset()
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, L, E, generator=g)
    k, v = torch.randn(1, 2, L, E, generator=g), torch.randn(1, 2, L, E, generator=g)
    out, aux = flex_attention(q, k, v, enable_gqa=True, return_aux=AuxRequest(lse=True))
    t_out, t_aux = flex_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), enable_gqa=True, return_aux=AuxRequest(lse=True))
    assert_close(t_out.cpu(), out)
    assert_close(t_aux.lse.cpu(), aux.lse)
    assert no_fallbacks()


def test_other_devices_keep_pytorch_check():
    q = torch.randn(1, 1, 4, 8, device="meta")
    with pytest.raises(ValueError, match="only supported on"):
        flex_attention(q, q, q)
