"""Denoising steps/s of the tiny DiT and Flux pipelines (torch_tpu/testing/tiny_diffusers.py) on tpu
in strict and fused eager mode and with the denoiser under torch.compile(backend="tpu"), next to
PyTorch eager on the CPU, timed in alternating rounds in one process; and the time to the first image
in a fresh process with a cold and a warm compilation cache.

A step's time is the difference between a whole pipeline call of HI and one of LO steps (each ending
with the image on the host), so the VAE decode and the setup cancel: steps/s = (HI - LO) / median over
rounds of (t_HI - t_LO).

    python bench/diffusion.py            # both pipelines, then cold/warm
    python bench/diffusion.py flux       # one pipeline, no cold/warm
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TORCH_TPU_QUIET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")
import torch  # noqa: E402

import torch_tpu  # noqa: E402
from torch_tpu.testing import tiny_diffusers  # noqa: E402

LO, HI = 2, 10
SETUPS = ("strict", "fused", "compiled", "cpu eager")


def image_fn(name, setup):
    """-> fn(steps) that runs the pipeline once and returns when the image is on the host."""
    pipe, kwargs = tiny_diffusers.build(name)
    if setup != "cpu eager":
        pipe.to("tpu")
    if setup == "compiled":
        tiny_diffusers.denoiser(pipe).compile(backend="tpu")
    mode = "fused" if setup in ("compiled", "cpu eager") else setup

    def fn(steps):
        with torch_tpu.eager_mode(mode):
            kw = dict(kwargs, num_inference_steps=steps)
            return tiny_diffusers.run(pipe, kw, torch.Generator().manual_seed(0)).cpu()

    return fn


def step_rates(name, rounds=7):
    fns = {setup: image_fn(name, setup) for setup in SETUPS}
    for fn in fns.values():  # compile everything the timed calls use
        for steps in (LO, HI, LO, HI):
            fn(steps)
    diffs = {setup: [] for setup in SETUPS}
    order = list(fns.items())
    for r in range(rounds):
        # Each round starts one setup later, so no setup always follows the same one.
        for setup, fn in order[r % len(order):] + order[:r % len(order)]:
            fn(LO)  # untimed: the previous setup's threads settle
            start = time.perf_counter()
            fn(LO)
            lo = time.perf_counter() - start
            start = time.perf_counter()
            fn(HI)
            diffs[setup].append(time.perf_counter() - start - lo)
    rates = {s: (HI - LO) / statistics.median(d) for s, d in diffs.items()}
    ratios = {s: statistics.median((HI - LO) / d / ((HI - LO) / c) for d, c in zip(diffs[s], diffs["cpu eager"]))
              for s in SETUPS}
    return rates, ratios


FIRST_IMAGE = r"""
import time, json, warnings
warnings.filterwarnings("ignore")
start = time.perf_counter()
import torch, torch_tpu
from torch_tpu.testing import tiny_diffusers
pipe, kwargs = tiny_diffusers.build({name!r})
pipe.to("tpu")
tiny_diffusers.run(pipe, kwargs, torch.Generator().manual_seed(0)).cpu()
m = torch_tpu.metrics()
print(json.dumps({{"first_image_s": time.perf_counter() - start, "compiles": m["programs_compiled"],
                  "disk_hits": m["disk_cache_hits"]}}))
"""


def cold_warm(name):
    """Time from the start of a fresh process (imports included) to its first image, three processes
    sharing one empty cache folder: the first compiles, the others load from disk."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache, TORCH_TPU_QUIET="1")
        runs = [json.loads(subprocess.run([sys.executable, "-c", FIRST_IMAGE.format(name=name)], env=env,
                                          capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
                for _ in range(3)]
    return runs[0], runs[1:]


def main():
    names = [a for a in sys.argv[1:] if a in tiny_diffusers.PIPELINES] or ["dit", "flux"]
    print(f"platform: {torch.tpu.get_device_name()}; denoising steps/s (medians of {HI}-step minus {LO}-step calls)")
    print(f"{'pipeline':10s} " + " ".join(f"{s:>10s}" for s in SETUPS) + "   " +
          " ".join(f"{s + '/cpu':>13s}" for s in SETUPS[:3]))
    for name in names:
        rates, ratios = step_rates(name)
        print(f"{name:10s} " + " ".join(f"{rates[s]:10.1f}" for s in SETUPS) + "   " +
              " ".join(f"{ratios[s]:12.2f}x" for s in SETUPS[:3]), flush=True)
    print("(setups timed in alternating rounds; ratios are medians of per-round ratios against PyTorch eager on\n"
          " the CPU. On the XLA CPU plugin the device is the same CPU, so these ratios measure dispatch and\n"
          " compilation overheads, not an accelerator's speed)")
    if len(sys.argv) > 1:
        return
    for name in names:
        cold, warm = cold_warm(name)
        warm_s = statistics.median(w["first_image_s"] for w in warm)
        print(f"first {name} image in a fresh process (imports included): cold cache {cold['first_image_s']:.1f} s "
              f"({cold['compiles']} compiles), warm cache {warm_s:.1f} s ({warm[0]['disk_hits']} disk hits): "
              f"{cold['first_image_s'] / warm_s:.1f}x")


if __name__ == "__main__":
    main()
