"""What torch.profiler with tpu events costs a small training step: the median step time with
the profiler recording (CPU + PrivateUse1 activities) next to the same steps without it, in the
same run, in strict and fused mode, and next to a profile of host ops only (what torch's own
recording costs). Export time is not counted (it runs after the steps)."""
import os
import statistics
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402
from torch.profiler import profile  # noqa: E402

import torch_tpu  # noqa: E402
from torch_tpu import profiler as tpu_profiler  # noqa: E402


def make():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64).to("tpu"), torch.randint(0, 10, (32,)).to("tpu")

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def step_ms(step, steps, profiled):
    samples = []
    for _ in range(5):
        if profiled:
            prof = profile(activities=profiled)
            prof.start()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        samples.append((time.perf_counter() - start) / steps * 1e3)
        if profiled:
            prof.stop()
    return statistics.median(samples)


def main():
    for mode in ("strict", "fused"):
        torch_tpu.set_eager_mode(mode)
        step = make()
        for _ in range(5):
            step()  # compiles, fused graphs compiled and switched to
        torch_tpu.metrics(wait=True)
        off = step_ms(step, 20, None)
        cpu = step_ms(step, 20, [torch.profiler.ProfilerActivity.CPU])
        on = step_ms(step, 20, tpu_profiler.activities())
        off2 = step_ms(step, 20, None)
        base = min(off, off2)
        print(f"{mode}: step {base:.3f} ms without the profiler; {cpu:.3f} ms profiling host ops only "
              f"(ratio {cpu / base:.2f}x); {on:.3f} ms with tpu events too (ratio {on / base:.2f}x, "
              f"{on / cpu:.2f}x the host-only profile)")


if __name__ == "__main__":
    main()
