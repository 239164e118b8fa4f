"""Where the fixed time of one compiled call goes (#18): `torch.compile(lambda x: x + 1,
backend="tpu")` on 1000 float32, split into Dynamo, AOTAutograd and our program, with
PyTorch's own CPU baselines (backend="eager" and "aot_eager" on a CPU tensor) in the same
rounds. Medians over alternating rounds; ratios are against backend="eager" on the CPU.

The last lines time the same graph.run after some pure-Python work between calls. The XLA CPU
plugin runs a program on the calling thread only when XLA's cost analysis counts fewer than
1000 flops (add[1000] counts exactly 1000); any other it hands to its thread pool. A pool
thread spins for a few tens of microseconds after its last task and then sleeps, so after a
gap every call wakes it: the whole growth is inside PJRT_LoadedExecutable_Execute (2 -> 34 us
timed around that call, ours stays about 3 us). Where no core is idle the woken thread also
preempts the caller and spins before sleeping again: the "involuntary switches" column then
reads about 1 per call. add[16] runs on the calling thread and barely grows."""
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


def _involuntary_switches():
    """This thread's involuntary context switches so far (Linux; 0 elsewhere)."""
    try:
        with open("/proc/thread-self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("nonvoluntary_ctxt_switches"))
    except (OSError, StopIteration):
        return 0


def main(iters=2000, rounds=7):
    x, xc, x16 = torch.ones(1000, device="tpu"), torch.ones(1000), torch.ones(16, device="tpu")
    captured = []
    call = partition._Program.__call__

    def spy(self, args):
        captured.append(self)
        return call(self, args)

    partition._Program.__call__ = spy
    try:
        torch.compile(lambda x: x + 1, backend="tpu")(x16)  # its own code object: f stays static
        f = torch.compile(lambda x: x + 1, backend="tpu")
        f(x)
    finally:
        partition._Program.__call__ = call
    program = captured[-1]
    run, run16 = program.graph.run, captured[0].graph.run
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
        "20us Python + graph.run, add[16]": lambda: (_busy(800), run16([x16])),
    }
    for fn in cases.values():
        for _ in range(50):
            fn()
    samples = {k: [] for k in cases}
    switches = {k: 0 for k in cases}
    for _ in range(rounds):
        for k, fn in cases.items():
            before = _involuntary_switches()
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            samples[k].append((time.perf_counter() - start) / iters * 1e6)
            switches[k] += _involuntary_switches() - before
    base = statistics.median(samples["CPU backend=eager"])
    print(f"eager mode {torch_tpu.get_eager_mode()} (medians of {rounds} alternating rounds of {iters} calls)")
    for k, v in samples.items():
        m = statistics.median(v)
        print(f"  {k:34s} {m:7.2f} us  {m / base:5.2f}x CPU backend=eager"
              f"  involuntary switches {switches[k] / (rounds * iters):4.2f}/call")


if __name__ == "__main__":
    main()
