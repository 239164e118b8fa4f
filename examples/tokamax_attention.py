"""Tokamax's attention kernel as a PyTorch op on tpu tensors (torch_tpu.kernels.from_jax).

A small causal self-attention block runs its attention through Tokamax
(`tokamax.dot_product_attention`; the XLA implementation on the CPU plugin, Pallas ones where an
accelerator's plugin runs them), trains for a few steps on tpu, and checks its outputs and
gradients against the same block with PyTorch's SDPA on the CPU.

    pip install tokamax      # brings JAX
    python examples/tokamax_attention.py
"""
import copy
import os

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_tpu  # noqa: E402,F401
from torch_tpu import kernels  # noqa: E402

import tokamax  # noqa: E402
from absl import flags  # noqa: E402

if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()  # Tokamax reads absl flags; this script's argv is not for absl

IMPLEMENTATION = {"cpu": "xla"}.get(torch_tpu.platform())  # None: Tokamax picks (Pallas on TPU/GPU)


def tokamax_attention(q, k, v, is_causal=False):
    return tokamax.dot_product_attention(q, k, v, is_causal=is_causal, implementation=IMPLEMENTATION)


# torch_tpu::tokamax_attention; its backward is Tokamax's VJP, exported the same way.
attention = kernels.from_jax(tokamax_attention, static_argnames=("is_causal",))


class SelfAttention(torch.nn.Module):
    def __init__(self, dim=64, heads=4, use_tokamax=True):
        super().__init__()
        self.heads, self.use_tokamax = heads, use_tokamax
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)  # [b, t, heads, dim]
        if self.use_tokamax:
            y = attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True).transpose(1, 2)
        return self.out(y.reshape(b, t, d))


def main():
    torch.manual_seed(0)
    cpu = SelfAttention(use_tokamax=False)
    tpu = copy.deepcopy(cpu).to("tpu")
    tpu.use_tokamax = True
    x = torch.randn(2, 32, 64)

    # One step checked against the CPU: outputs and every gradient.
    ref = cpu(x)
    ref.square().mean().backward()
    out = tpu(x.to("tpu"))
    out.square().mean().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(cpu.named_parameters(), tpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, atol=1e-5, rtol=1e-4, msg=name)
    print(f"tokamax attention on tpu ({torch.tpu.get_device_name()}) matches SDPA on the CPU, forward and backward")

    # A few training steps, compiled: the kernel is lowered inside the graph's one program.
    step_fn = torch.compile(lambda x: tpu(x).square().mean(), backend="tpu")
    opt = torch.optim.AdamW(tpu.parameters(), lr=1e-2)
    xt = x.to("tpu")
    for step in range(5):
        opt.zero_grad()
        loss = step_fn(xt)
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.5f}")
    m = torch_tpu.metrics()
    print(f"programs compiled {m['programs_compiled']}, cpu fallbacks {m['cpu_fallbacks']}")


if __name__ == "__main__":
    main()
