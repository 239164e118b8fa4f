"""Warm per-op latency of a small `add` on tpu next to CPU eager, in the same run, and the
first-call compile time. Reports medians and the tpu/cpu ratio, in strict mode (one program
per op: the dispatch path) and in fused mode (the default: ops recorded into a graph)."""
import os
import statistics
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402

import torch_tpu  # noqa: E402


def per_op_us(fn, iters=2000, repeats=7):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        samples.append((time.perf_counter() - start) / iters * 1e6)
    return statistics.median(samples)


def main():
    torch_tpu.set_eager_mode("strict")
    shape = (16,)
    a_cpu, b_cpu = torch.randn(shape), torch.randn(shape)
    a, b = a_cpu.to("tpu"), b_cpu.to("tpu")
    torch.tpu.synchronize()

    torch_tpu.metrics.reset()
    start = time.perf_counter()
    first = a * b  # a signature never seen before: Meta inference, lowering, compile
    first.cpu()
    first_call_ms = (time.perf_counter() - start) * 1e3
    compile_s = torch_tpu.metrics()["compile_time_s"]

    a + b
    torch.tpu.synchronize()
    cpu_us = per_op_us(lambda: a_cpu + b_cpu)

    def tpu_add():
        a + b

    tpu_us = per_op_us(tpu_add)
    torch.tpu.synchronize()
    # The same ops including the wait for the result: a true round trip per op.
    sync_us = per_op_us(lambda: (a + b).cpu(), iters=300)
    cpu_sync_us = per_op_us(lambda: (a_cpu + b_cpu).clone(), iters=300)

    print(f"platform: {torch.tpu.get_device_name()}")
    print(f"first call of a new op (compile included): {first_call_ms:.1f} ms (compile {compile_s * 1e3:.1f} ms)")
    print(f"warm add{list(shape)} dispatch, strict mode: tpu {tpu_us:.1f} us/op, cpu eager {cpu_us:.1f} us/op, "
          f"ratio tpu/cpu {tpu_us / cpu_us:.1f}x")
    print(f"warm add + copy to host: tpu {sync_us:.1f} us/op, cpu {cpu_sync_us:.1f} us/op")
    graph_ops = int(os.environ.get("TORCH_TPU_FUSED_MAX_OPS", "1000"))
    with torch_tpu.eager_mode("fused"):
        # Warm means the whole-graph program exists: a graph's structure is compiled once it
        # repeats, in the background, and its ops run one by one until then (#18). Three graphs,
        # then metrics() waits for queued compiles. The first timings show the wait too.
        start = time.perf_counter()
        for _ in range(3 * graph_ops):
            tpu_add()
        torch.tpu.synchronize()
        torch_tpu.metrics(wait=True)
        warmup_us = (time.perf_counter() - start) / (3 * graph_ops) * 1e6
        fused_us = per_op_us(tpu_add)
        torch.tpu.synchronize()
    print(f"warm add{list(shape)} in fused mode (recorded, run as graphs of {graph_ops} ops): "
          f"{fused_us:.1f} us/op, ratio tpu/cpu {fused_us / cpu_us:.1f}x "
          f"(first {3 * graph_ops} ops, compile included: {warmup_us:.1f} us/op)")
    m = torch_tpu.metrics()
    print(f"ops dispatched {m['ops_dispatched']}, programs compiled {m['programs_compiled']}, "
          f"cpu fallbacks {m['cpu_fallbacks']}")


if __name__ == "__main__":
    main()
