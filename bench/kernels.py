"""Tokamax kernels through torch_tpu.kernels against our native lowering of the same op, in the
same run: attention (tokamax.dot_product_attention, XLA implementation) against
F.scaled_dot_product_attention, and ragged dot (tokamax.ragged_dot) against torch._grouped_mm,
forward and forward+backward, in strict eager mode and inside torch.compile(backend="tpu").
Each setup is timed in alternating rounds (a noisy machine slows all alike); reported: the
median time per call of each and the median of per-round ratios kernel/native (< 1: the
kernel is faster). Results are checked equal first.

    python bench/kernels.py [--rounds 7] [--small]
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_tpu  # noqa: E402
from torch_tpu import kernels  # noqa: E402

try:
    import tokamax
    from absl import flags
except ImportError:
    sys.exit("bench/kernels.py needs Tokamax: pip install tokamax (it brings JAX)")
if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()  # Tokamax reads absl flags; ours are not absl's


def tokamax_attention(q, k, v, is_causal=False):
    return tokamax.dot_product_attention(q, k, v, is_causal=is_causal, implementation="xla")


def tokamax_ragged_dot(lhs, rhs, group_sizes):
    return tokamax.ragged_dot(lhs, rhs, group_sizes, implementation="xla")


attention = kernels.from_jax(tokamax_attention, static_argnames=("is_causal",))
ragged_dot = kernels.from_jax(tokamax_ragged_dot)


def sdpa(q, k, v):
    # Tokamax's layout is [batch, seq, heads, dim]; SDPA's [batch, heads, seq, dim].
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          is_causal=True).transpose(1, 2)


def workloads(small):
    b, t, n, h = (2, 64, 4, 32) if small else (4, 256, 8, 64)
    m, kdim, ndim, groups = (128, 64, 64, 4) if small else (1024, 256, 256, 8)
    qkv = [torch.randn(b, t, n, h) for _ in range(3)]
    sizes = torch.full((groups,), m // groups, dtype=torch.int32)
    mm = [torch.randn(m, kdim), torch.randn(groups, kdim, ndim)]
    return {
        f"attention [{b},{t},{n},{h}] causal": (
            qkv, lambda q, k, v: attention(q, k, v, is_causal=True), sdpa, ()),
        f"ragged dot [{m},{kdim}]x[{groups},{kdim},{ndim}]": (
            mm, lambda a, w, s: ragged_dot(a, w, s), lambda a, w, s: torch._grouped_mm(a, w, offs=s.cumsum(0, dtype=torch.int32)),
            (sizes,)),
    }


def timed(fn, iters):
    torch.tpu.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.tpu.synchronize()
    return (time.perf_counter() - start) / iters


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--small", action="store_true", help="small shapes (a quick check)")
    args = p.parse_args()
    torch_tpu.set_eager_mode("strict")
    print(f"platform: {torch.tpu.get_device_name()}; tokamax {getattr(tokamax, '__version__', '?')}, "
          f"jax {__import__('jax').__version__}; medians of {args.rounds} alternating rounds")
    print(f"{'workload':44s} {'setup':22s} {'kernel ms':>10s} {'native ms':>10s} {'kernel/native':>14s}")
    for name, (inputs, kernel_fn, native_fn, extra) in workloads(args.small).items():
        dev = [x.to("tpu").requires_grad_() for x in inputs]
        extra_dev = [x.to("tpu") for x in extra]
        torch.testing.assert_close(kernel_fn(*dev, *extra_dev).detach().cpu(),
                                   native_fn(*inputs, *extra).detach(), atol=1e-4, rtol=1e-4)
        compiled_kernel = torch.compile(kernel_fn, backend="tpu")
        compiled_native = torch.compile(native_fn, backend="tpu")

        def fwd(fn):
            def step():
                with torch.no_grad():
                    fn(*dev, *extra_dev)
            return step

        def fwd_bwd(fn):
            def step():
                out = fn(*dev, *extra_dev)
                torch.autograd.grad(out.sum(), dev)
            return step

        setups = {
            "strict forward": (fwd(kernel_fn), fwd(native_fn)),
            "strict fwd+bwd": (fwd_bwd(kernel_fn), fwd_bwd(native_fn)),
            "compiled forward": (fwd(compiled_kernel), fwd(compiled_native)),
            "compiled fwd+bwd": (fwd_bwd(compiled_kernel), fwd_bwd(compiled_native)),
        }
        for setup, (k_step, n_step) in setups.items():
            k_step(), n_step()  # compile outside the timing
            k_times, n_times, ratios = [], [], []
            for _ in range(args.rounds):
                kt = timed(k_step, args.iters)
                nt = timed(n_step, args.iters)
                k_times.append(kt)
                n_times.append(nt)
                ratios.append(kt / nt)
            print(f"{name:44s} {setup:22s} {statistics.median(k_times) * 1e3:10.2f} "
                  f"{statistics.median(n_times) * 1e3:10.2f} {statistics.median(ratios):13.2f}x")
    m = torch_tpu.metrics()
    print(f"cpu fallbacks {m['cpu_fallbacks']}")


if __name__ == "__main__":
    main()
