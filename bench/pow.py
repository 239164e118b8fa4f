"""x ** e on tpu next to x * x in the same process: how much a power costs over a multiply, per
exponent and mode (issue 29: exponents PyTorch's CPU kernel specialises, 2 -> x*x, 3, -2, -1,
0.5, -0.5, lower to the same arithmetic; others stay stablehlo.power, libm's powf per element on
the XLA CPU plugin). Rounds alternate the cases; each cell is the median over rounds of
(median time of x ** e) / (median time of x * x) from the same round, with the median time
per call beside it (each sample: 5 calls, then a device sync).

    python bench/pow.py [--rounds 7] [--iters 20] [--size 256x1024]
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402

import torch_tpu  # noqa: E402

EXPONENTS = [2, 3, -2, 0.5, -0.5, 2.5]


def median_time(fn, x, iters, calls=5):
    """Median over `iters` samples of the time per call, `calls` calls then a device sync."""
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        outs = [fn(x) for _ in range(calls)]  # kept alive: fused mode computes only live values
        torch.tpu.synchronize()
        del outs
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--size", default="256x1024")
    args = parser.parse_args()
    shape = [int(d) for d in args.size.split("x")]
    x = (torch.rand(shape) + 0.5).to("tpu")
    cases = {"x * x": lambda v: v * v}
    cases.update({f"x ** {e}": (lambda v, e=e: v ** e) for e in EXPONENTS})
    setups = {"strict": ("strict", False), "fused": ("fused", False), "compiled": ("strict", True)}
    fns = {(s, c): (torch.compile(f, backend="tpu") if compiled else f, mode)
           for s, (mode, compiled) in setups.items() for c, f in cases.items()}
    for (s, c), (fn, mode) in fns.items():  # warm: compiles everything
        with torch_tpu.eager_mode(mode):
            median_time(fn, x, 3)
    ratios = {key: [] for key in fns}
    absolute = {key: [] for key in fns}
    for r in range(args.rounds):
        for s in setups:
            times = {}
            keys = list(cases)[r % len(cases):] + list(cases)[:r % len(cases)]
            for c in keys:
                fn, mode = fns[(s, c)]
                with torch_tpu.eager_mode(mode):
                    times[c] = median_time(fn, x, args.iters)
            for c in cases:
                ratios[(s, c)].append(times[c] / times["x * x"])
                absolute[(s, c)].append(times[c])
    print(f"platform: {torch.tpu.get_device_name()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; x {args.size} f32, {args.rounds} rounds; time / time of x * x")
    print(f"{'case':10s}" + "".join(f"{s:>18s}" for s in setups))
    for c in cases:
        print(f"{c:10s}" + "".join(f"{statistics.median(ratios[(s, c)]):7.2f}x {statistics.median(absolute[(s, c)]) * 1e6:7.0f}us"
                                   for s in setups))


if __name__ == "__main__":
    main()
