"""Where the fixed time of one compiled call goes (#18): `torch.compile(lambda x: x + 1,
backend="tpu")` on 1000 float32, split into Dynamo, AOTAutograd and our program, with
PyTorch's own CPU baselines (backend="eager" and "aot_eager" on a CPU tensor) in the same
rounds. Medians over alternating rounds; ratios are against backend="eager" on the CPU.

The last two lines time the same graph.run after some pure-Python work between calls: the
program's own cost grows with the gap (the plugin's execution path runs cold), which is why
graph.run costs far more inside a compiled call than in a tight loop."""
import os
import statistics
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402

import torch_tpu  # noqa: E402,F401
from torch_tpu.compile import partition  # noqa: E402


def _busy(n):
    s = 0
    for i in range(n):
        s += i
    return s


def main(iters=2000, rounds=7):
    x, xc = torch.ones(1000, device="tpu"), torch.ones(1000)
    captured = []
    call = partition._Program.__call__

    def spy(self, args):
        captured.append(self)
        return call(self, args)

    partition._Program.__call__ = spy
    try:
        f = torch.compile(lambda x: x + 1, backend="tpu")
        f(x)
    finally:
        partition._Program.__call__ = call
    program = captured[-1]
    run = program.graph.run
    aot_only = torch.compile(lambda x: x + 1, backend=aot_autograd(
        fw_compiler=lambda gm, ex: program, inference_compiler=lambda gm, ex: program,
        keep_inference_input_mutations=True))
    dynamo_only = torch.compile(lambda x: x + 1, backend=lambda gm, ex: (lambda *a: program(list(a))))
    eager_cpu = torch.compile(lambda x: x + 1, backend="eager")
    aot_eager_cpu = torch.compile(lambda x: x + 1, backend="aot_eager")
    cases = {
        "compiled tpu f(x)": lambda: f(x),
        "AOTAutograd -> our program": lambda: aot_only(x),
        "Dynamo -> our program (no AOT)": lambda: dynamo_only(x),
        "our _Program([x])": lambda: program([x]),
        "our graph.run([x]) (C++)": lambda: run([x]),
        "CPU backend=eager": lambda: eager_cpu(xc),
        "CPU backend=aot_eager": lambda: aot_eager_cpu(xc),
        "CPU x + 1": lambda: xc + 1,
        "20us Python": lambda: _busy(800),
        "20us Python + graph.run": lambda: (_busy(800), run([x])),
    }
    for fn in cases.values():
        for _ in range(50):
            fn()
    samples = {k: [] for k in cases}
    for _ in range(rounds):
        for k, fn in cases.items():
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            samples[k].append((time.perf_counter() - start) / iters * 1e6)
    base = statistics.median(samples["CPU backend=eager"])
    print(f"eager mode {torch_tpu.get_eager_mode()} (medians of {rounds} alternating rounds of {iters} calls)")
    for k, v in samples.items():
        m = statistics.median(v)
        print(f"  {k:34s} {m:7.2f} us  {m / base:5.2f}x CPU backend=eager")


if __name__ == "__main__":
    main()
