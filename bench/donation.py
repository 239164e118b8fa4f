"""What donating a written storage's buffer to its in-place write (TORCH_TPU_DONATE, default 1) does to
step time on this machine's plugin, against TORCH_TPU_DONATE=0, in one run: each case runs in fresh
processes that alternate between the two settings, and the report gives median times and their ratio.

Cases: a KV-cache slot write per decode step (index_copy_ of one position into a 64 MB static cache,
strict and fused), and an AdamW step over an MLP's parameters (foreach in-place updates, strict and fused).

    python bench/donation.py [--rounds 5] [--steps 30]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def child(case, mode, steps):
    os.environ.setdefault("TORCH_TPU_QUIET", "1")
    import torch
    import torch_tpu
    torch_tpu.set_eager_mode(mode)
    torch.manual_seed(0)
    if case == "cache":
        cache = torch.zeros(8, 8, 2048, 128, device="tpu")  # batch, kv heads, positions, head dim: 64 MB
        new = torch.randn(8, 8, 1, 128, device="tpu")

        def step(i):
            cache.index_copy_(2, torch.tensor([i % 2048], device="tpu"), new)
    else:
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        for p in model.parameters():
            p.grad = torch.randn_like(p)

        def step(i):
            opt.step()
    for i in range(3):  # warm-up: compiles, fused structures switched to their whole programs
        step(i)
        torch.tpu.synchronize()
    torch_tpu.metrics(wait=True)
    times = []
    for i in range(steps):
        start = time.perf_counter()
        step(i)
        torch.tpu.synchronize()  # waits for the step's programs (no host copy of the storage)
        times.append(time.perf_counter() - start)
    return {"ms": 1e3 * statistics.median(times), "donated": torch_tpu.metrics()["donated_buffers"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--child", nargs=2)
    a = p.parse_args()
    if a.child:
        print("RESULT " + json.dumps(child(a.child[0], a.child[1], a.steps)))
        return
    print(f"median ms per step, TORCH_TPU_DONATE=1 vs 0, {a.rounds} alternating rounds of {a.steps} steps "
          f"(plugin: this machine's)")
    for case in ["cache", "adamw"]:
        for mode in ["strict", "fused"]:
            runs = {"1": [], "0": []}
            donated = {}
            for _ in range(a.rounds):
                for donate in ["1", "0"]:
                    env = dict(os.environ, TORCH_TPU_DONATE=donate)
                    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case, mode,
                                          "--steps", str(a.steps)], capture_output=True, text=True, env=env)
                    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
                    if not line:
                        raise RuntimeError(out.stderr[-2000:])
                    r = json.loads(line[-1][7:])
                    runs[donate].append(r["ms"])
                    donated[donate] = r["donated"]
            on, off = statistics.median(runs["1"]), statistics.median(runs["0"])
            print(f"{case:<6} {mode:<7} donate {on:8.3f} ms  no donation {off:8.3f} ms  ratio {on / off:5.2f}  "
                  f"(buffers donated per process: {donated['1']} vs {donated['0']})", flush=True)


if __name__ == "__main__":
    main()
