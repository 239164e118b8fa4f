"""Checks tpu against PyTorch's own OpInfo database (torch.testing._internal).

For every OpInfo and dtype, the op's sample inputs run on tpu and on the CPU; each
(op, dtype) is classed `native` (all samples match, no CPU fallback), `fallback` (all match,
some ran through the CPU fallback) or `fail`. Gradients are compared for differentiable ops.

    python -m torch_tpu.opcheck [--ops add,mul] [--dtypes float32,bfloat16] [--json out.json]
"""
import argparse
import json
import os
import signal
import sys
import time
import warnings

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402

import torch_tpu  # noqa: E402

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}


# Ops whose values are random or unspecified: only shapes and dtypes are compared (the
# device draws from its own Philox stream, and empty memory holds anything).
_UNCOMPARABLE_PREFIXES = (
    "normal", "uniform", "bernoulli", "rand", "cauchy", "exponential", "geometric", "log_normal",
    "multinomial", "nn.functional.dropout", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
    "nn.functional.rrelu", "empty", "new_empty", "nn.functional.fractional_max_pool",
)


def _uncomparable(op):
    return op.name.startswith(_UNCOMPARABLE_PREFIXES)


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout()


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.detach().to(device).requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, torch.device) or (isinstance(value, str) and value == "cpu"):
        return torch.device(device)
    return value


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _compare(actual, expected, dtype, values=True):
    a, e = _tensors(actual), _tensors(expected)
    if len(a) != len(e):
        raise AssertionError(f"{len(a)} outputs on tpu, {len(e)} on cpu")
    for x, y in zip(a, e):
        if x.device.type != "tpu" and y.numel() > 0 and y.device.type == "cpu":
            pass
        x = x.detach().cpu()
        y = y.detach()
        if x.shape != y.shape:
            raise AssertionError(f"shape {tuple(x.shape)} vs {tuple(y.shape)}")
        if x.dtype != y.dtype:
            raise AssertionError(f"dtype {x.dtype} vs {y.dtype}")
        if values:
            torch.testing.assert_close(x, y, equal_nan=True, check_stride=False)


def _fallbacks():
    return sum(torch_tpu.metrics()["cpu_fallbacks_by_op"].values())


def check_sample(op, sample, dtype, grad):
    """Returns (ok, used_fallback, message)."""
    args = (sample.input, *sample.args)
    kwargs = sample.kwargs
    try:
        expected = op(*args, **kwargs)
    except Exception:
        return None, False, "cpu raised"  # not a valid sample for this op
    before = _fallbacks()
    tpu_args, tpu_kwargs = _to(args, "tpu"), _to(kwargs, "tpu")
    actual = op(*tpu_args, **tpu_kwargs)
    _compare(actual, expected, dtype, values=not _uncomparable(op))
    if grad and not _uncomparable(op):
        outs_c = [t for t in _tensors(expected) if t.requires_grad and t.dtype.is_floating_point]
        outs_t = [t for t in _tensors(actual) if t.requires_grad and t.dtype.is_floating_point]
        if outs_c:
            leaves_c = [t for t in _tensors(args) + _tensors(kwargs) if t.requires_grad]
            leaves_t = [t for t in _tensors(tpu_args) + _tensors(tpu_kwargs) if t.requires_grad]
            gen = torch.Generator().manual_seed(0)
            cot = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs_c]
            gc = torch.autograd.grad(outs_c, leaves_c, cot, allow_unused=True)
            gt = torch.autograd.grad(outs_t, leaves_t, [c.to("tpu") for c in cot], allow_unused=True)
            for x, y in zip(gt, gc):
                if (x is None) != (y is None):
                    raise AssertionError("gradient defined on one device only")
                if x is not None:
                    torch.testing.assert_close(x.cpu(), y, equal_nan=True, check_stride=False)
    return True, _fallbacks() > before, ""


def check_op(op, dtype, max_samples, grad, timeout):
    result = {"op": op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""),
              "dtype": str(dtype).replace("torch.", ""), "samples": 0, "status": "skip", "error": ""}
    used_fallback = False
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout)
    try:
        samples = op.sample_inputs("cpu", dtype, requires_grad=grad)
        for i, sample in enumerate(samples):
            if i >= max_samples:
                break
            ok, fb, msg = check_sample(op, sample, dtype, grad)
            if ok is None:
                continue
            result["samples"] += 1
            used_fallback |= fb
        if result["samples"]:
            result["status"] = "fallback" if used_fallback else "native"
    except _Timeout:
        result["status"], result["error"] = "fail", f"timeout after {timeout}s"
    except Exception as e:  # noqa: BLE001 - every failure is reported, none hides others
        result["status"], result["error"] = "fail", f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    finally:
        signal.alarm(0)
    return result


def run(ops=None, dtypes=("float32",), max_samples=4, grad=False, timeout=60, verbose=False):
    from torch.testing._internal.common_methods_invocations import op_db

    selected = [o for o in op_db if ops is None or o.name in ops]
    results = []
    warnings.simplefilter("ignore")
    for op in selected:
        for name in dtypes:
            dtype = DTYPES[name]
            if dtype not in op.supported_dtypes("cpu"):
                continue
            if grad and not (op.supports_autograd and dtype.is_floating_point):
                continue
            r = check_op(op, dtype, max_samples, grad, timeout)
            r["grad"] = grad
            results.append(r)
            if verbose:
                print(f"{r['op']:40s} {r['dtype']:9s} {r['status']:8s} {r['error']}", flush=True)
    return results


def summarize(results):
    table = {}
    for r in results:
        if r["status"] == "skip":
            continue
        key = (r["dtype"], "grad" if r.get("grad") else "forward")
        t = table.setdefault(key, {"native": 0, "fallback": 0, "fail": 0})
        t[r["status"]] += 1
    return table


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    p.add_argument("--dtypes", default="float32,bfloat16,float16,int64,int32,bool")
    p.add_argument("--samples", type=int, default=4, help="sample inputs per (op, dtype)")
    p.add_argument("--grad", action="store_true", help="also compare gradients (float dtypes)")
    p.add_argument("--timeout", type=int, default=60)
    p.add_argument("--json", help="write every result to this file")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    ops = set(a.ops.split(",")) if a.ops else None
    start = time.time()
    results = run(ops, a.dtypes.split(","), a.samples, False, a.timeout, a.verbose)
    if a.grad:
        results += run(ops, [d for d in a.dtypes.split(",") if d in ("float32", "bfloat16", "float16")],
                       a.samples, True, a.timeout, a.verbose)
    wall = time.time() - start
    print(f"{'dtype':10s} {'kind':8s} {'native':>7s} {'fallback':>9s} {'fail':>6s} {'native %':>9s}")
    for (dtype, kind), t in sorted(summarize(results).items()):
        total = sum(t.values())
        print(f"{dtype:10s} {kind:8s} {t['native']:7d} {t['fallback']:9d} {t['fail']:6d} "
              f"{100.0 * t['native'] / max(total, 1):8.1f}%")
    print(f"wall time {wall:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": results, "wall_s": wall}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
