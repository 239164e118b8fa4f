"""torch-tpu demo: train a small MLP on the `tpu` device with autograd and AdamW, next to
the same run on the CPU, and show what the device did."""
import copy
import os
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402  (torch autoloads torch_tpu: the "tpu" device exists from here on)

import torch_tpu  # noqa: E402


def make_data(n=256, features=16, classes=4):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, classes, generator=g)
    y = (x @ w).argmax(dim=1)
    return x, y


def train(model, x, y, device, steps=30):
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def main():
    print(f"torch {torch.__version__}; 'tpu' device runs on PJRT platform: {torch.tpu.get_device_name()}")
    props = torch.tpu.get_device_properties()
    print(f"plugin: {props.plugin_path} ({props.device_kind}, PJRT API {props.pjrt_api_version})")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 4)
    )
    x, y = make_data()

    torch_tpu.metrics.reset()
    start = time.perf_counter()
    tpu_losses, tpu_model = train(model, x, y, "tpu")
    tpu_s = time.perf_counter() - start
    start = time.perf_counter()
    cpu_losses, _ = train(model, x, y, "cpu")
    cpu_s = time.perf_counter() - start

    print("step   loss(tpu)   loss(cpu)")
    for i in range(0, len(tpu_losses), 5):
        print(f"{i:4d}   {tpu_losses[i]:.6f}    {cpu_losses[i]:.6f}")
    diff = max(abs(a - b) for a, b in zip(tpu_losses, cpu_losses))
    acc = (tpu_model(x.to("tpu")).argmax(1).cpu() == y).float().mean().item()
    print(f"max |loss(tpu) - loss(cpu)| = {diff:.2e}; final accuracy on tpu {acc:.3f}")
    print(f"30 steps: tpu {tpu_s:.2f} s (compiles included), cpu {cpu_s:.2f} s")
    m = torch_tpu.metrics()
    print(f"ops dispatched {m['ops_dispatched']}, programs compiled {m['programs_compiled']} "
          f"({m['compile_time_s']:.2f} s), executions {m['executions']}, "
          f"signature cache hits {m['signature_cache_hits']}, cpu fallbacks {m['cpu_fallbacks']} "
          f"{m['cpu_fallbacks_by_op'] or ''}")
    if diff > 1e-3:
        raise SystemExit("tpu and cpu losses diverged")


if __name__ == "__main__":
    main()
