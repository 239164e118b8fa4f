"""Checks tpu against PyTorch's own OpInfo database (torch.testing._internal).

For every OpInfo and dtype, the op's sample inputs run on tpu and on the CPU: the function
variant, the in-place variant (when the op has one and the result keeps self's dtype and
shape) and the out= variant (when the op supports out=). Each (op, dtype) is classed
`native` (every sample matches, no CPU fallback), `fallback` (every sample matches, some ran
through the CPU fallback) or `fail`. With --grad, gradients of differentiable ops are
compared too (float dtypes), as separate `grad` entries.

Tolerances are PyTorch's for the dtype (torch.testing.assert_close defaults), widened by the
toleranceOverride decorators PyTorch's own OpInfo tests apply to that op and dtype, and by
TOLERANCES in opcompare.py (entries measured against float64). An out= sample whose CPU result differs
from the CPU's function result is skipped.

    python -m torch_tpu.testing.opcheck [--ops add,mul] [--dtypes float32,bfloat16] [--grad]
                                        [--workers 2] [--json out.json] [--check-known FILE]

A known-failures file (the repository's is tests/opinfo_known_failures.txt) lists the entries
known not to run natively, each with the kind of failure and the reason; --check-known FILE
reports unlisted failures, listed entries that now pass, and listed entries that now fail
in another way.

`gate` chooses the part of the database a CI run checks (tests/test_opinfo.py): every OpInfo
whose ATen op has a native lowering on every run, the rest in rotation.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402

import torch_tpu  # noqa: E402

from .opcompare import (  # noqa: E402,F401 - part of opcheck's interface
    ALL_DTYPES, DTYPES, TOLERANCES, _CPU_ARGS, _compare, _assert_close, _random_sample, _resolve_ties, _same_layout_on,
    _tensors, _to, _uncomparable, entry_name, tolerance)
from .opknown import (  # noqa: E402,F401
    FAILURE_KINDS, check_known, failure_kind, known_entry, known_mismatch, load_known_failures, parse_known_failures)
from .opselect import (  # noqa: E402,F401
    GATE_DTYPES, GATE_PARTS, GATE_SAMPLES, entries, gate_always, gate_entries, gate_part, gate_part_of, lowered,
    native_reach, select_ops)


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout()


# ---- one sample ----


def _fallback_ops():
    return dict(torch_tpu.metrics()["cpu_fallbacks_by_op"])


def _run(fn, sample, device, cpu_args):
    args = (sample.input, *sample.args)
    kwargs = sample.kwargs
    if device != "cpu":
        if cpu_args:
            args = (_to(sample.input, device), *sample.args)
        else:
            args, kwargs = _to(args, device), _to(kwargs, device)
    return fn(*args, **kwargs), args, kwargs


def _process(sample, out):
    fn = getattr(sample, "output_process_fn_grad", None)
    return fn(out) if fn is not None else out


def check_function(op, sample, tol, grad, values):
    """The function variant (and its gradient when `grad`). None when CPU rejects the sample."""
    try:
        expected, cargs, ckwargs = _run(op, sample, "cpu", False)
    except Exception:
        return None
    actual, targs, tkwargs = _run(op, sample, "tpu", op.name in _CPU_ARGS)
    expected, actual = _process(sample, expected), _process(sample, actual)
    _compare(_resolve_ties(op, sample, actual), _resolve_ties(op, sample, expected), tol, values)
    if grad and values:
        outs_c = [t for t in _tensors(expected) if t.requires_grad and t.dtype.is_floating_point]
        outs_t = [t for t in _tensors(actual) if t.requires_grad and t.dtype.is_floating_point]
        leaves_c = [t for t in _tensors(cargs) + _tensors(ckwargs) if t.requires_grad]
        leaves_t = [t for t in _tensors(targs) + _tensors(tkwargs) if t.requires_grad]
        if outs_c and leaves_c:
            gen = torch.Generator().manual_seed(0)
            cot = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs_c]
            gc = torch.autograd.grad(outs_c, leaves_c, cot, allow_unused=True)
            gt = torch.autograd.grad(outs_t, leaves_t, [c.to("tpu") for c in cot], allow_unused=True)
            for x, y in zip(gt, gc):
                if (x is None) != (y is None):
                    raise AssertionError("gradient defined on one device only")
                if x is not None:
                    if x.device.type != "tpu":
                        raise AssertionError(f"gradient on {x.device}")
                    _assert_close(x.cpu(), y, tol)
    return True


def check_inplace(op, sample, tol, values):
    fn = op.inplace_variant
    if fn is None or not isinstance(sample.input, torch.Tensor):
        return None
    cpu_self = sample.input.detach().clone()
    try:
        expected = fn(cpu_self, *sample.args, **sample.kwargs)
    except Exception:
        return None
    if cpu_self.shape != sample.input.shape:
        return None  # the CPU kernel resized self (addbmm_ and friends): not an in-place sample
    tpu_self = _same_layout_on(sample.input.detach(), "tpu")
    args = sample.args if op.name in _CPU_ARGS else _to(sample.args, "tpu")
    actual = fn(tpu_self, *args, **_to(sample.kwargs, "tpu"))
    if actual is not tpu_self and isinstance(expected, torch.Tensor) and expected is cpu_self:
        raise AssertionError("in-place variant did not return self")
    _compare(tpu_self, cpu_self, tol, values)
    return True


def check_out(op, sample, tol, values):
    if not op.supports_out:
        return None
    try:
        expected = op(sample.input, *sample.args, **sample.kwargs)
    except Exception:
        return None
    if isinstance(expected, torch.Tensor):
        out_c, out_t = torch.empty_like(expected), torch.empty_like(expected, device="tpu")
    elif isinstance(expected, (tuple, list)) and expected and all(isinstance(t, torch.Tensor) for t in expected):
        out_c = tuple(torch.empty_like(t) for t in expected)
        out_t = tuple(torch.empty_like(t, device="tpu") for t in expected)
    else:
        return None
    try:
        op(sample.input, *sample.args, **sample.kwargs, out=out_c)
        # An out= call whose CPU result differs from the CPU's own function result is no
        # reference: PyTorch's composite out= path of ihfft2/ihfftn with an int `dim` leaves
        # `out` unwritten on every device, so both sides would hold whatever fresh memory held.
        _compare(_process(sample, out_c), _process(sample, expected), tol, values)
    except Exception:
        return None
    args = (_to(sample.input, "tpu"), *(sample.args if op.name in _CPU_ARGS else _to(sample.args, "tpu")))
    op(*args, **_to(sample.kwargs, "tpu"), out=out_t)
    actual, expected = _process(sample, out_t), _process(sample, out_c)
    _compare(_resolve_ties(op, sample, actual), _resolve_ties(op, sample, expected), tol, values)
    return True


def check_op(op, dtype, max_samples, grad, timeout, variants=("function", "inplace", "out")):
    result = {"op": entry_name(op), "dtype": str(dtype).replace("torch.", ""), "kind": "grad" if grad else "forward",
              "samples": 0, "status": "skip", "error": "", "variants": [], "fallback_ops": [], "seconds": 0.0,
              "compile_s": 0.0}
    values = not _uncomparable(op)
    tol = tolerance(op, dtype, result["kind"])
    before = _fallback_ops()
    m0 = torch_tpu.metrics()
    start = time.time()
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout)
    tested = set()
    try:
        torch.manual_seed(0)
        samples = op.sample_inputs("cpu", dtype, requires_grad=grad)
        for i, sample in enumerate(samples):
            if i >= max_samples:
                break
            ran = False
            sample_values = values and not _random_sample(op, sample)
            if check_function(op, sample, tol, grad, sample_values):
                tested.add("function")
                ran = True
            if not grad and ran:
                if "inplace" in variants and check_inplace(op, sample, tol, sample_values):
                    tested.add("inplace")
                if "out" in variants and check_out(op, sample, tol, sample_values):
                    tested.add("out")
            result["samples"] += ran
        torch.tpu.synchronize()  # deferred work and device-side checks belong to this entry
        if result["samples"]:
            result["status"] = "native"
    except _Timeout:
        result["status"], result["error"] = "fail", f"timeout after {timeout}s"
    except Exception as e:  # noqa: BLE001 - every failure is reported, none hides others
        msg = str(e).strip().splitlines()
        result["status"], result["error"] = "fail", f"{type(e).__name__}: {' '.join(msg[:3])[:300] if msg else ''}"
        try:
            torch.tpu.synchronize()  # leave nothing of this entry for the next one
        except Exception:  # noqa: BLE001 - already reported above
            pass
    finally:
        signal.alarm(0)
    after = _fallback_ops()
    result["fallback_ops"] = sorted(k for k, v in after.items() if v > before.get(k, 0))
    if result["status"] == "native" and result["fallback_ops"]:
        result["status"] = "fallback"
    result["variants"] = sorted(tested)
    m1 = torch_tpu.metrics()
    result["seconds"] = round(time.time() - start, 3)
    result["compile_s"] = round(m1["compile_time_s"] - m0["compile_time_s"], 3)
    return result


def _print(r):
    fb = f" [{', '.join(r['fallback_ops'])}]" if r["fallback_ops"] else ""
    print(f"{r['op']:40s} {r['dtype']:9s} {r['kind']:7s} {r['status']:8s} {r['error']}{fb}", flush=True)


def run(ops=None, dtypes=("float32",), max_samples=4, grad=False, timeout=120, verbose=False, shard=(0, 1)):
    """Checks the entries in this process; returns their results."""
    warnings.simplefilter("ignore")
    results = []
    for op, dtype, g in entries(ops, [] if grad else dtypes, dtypes if grad else [], shard):
        results.append(check_op(op, dtype, max_samples, g, timeout))
        if verbose:
            _print(results[-1])
    return results


def _worker(a):
    """One shard, from entry `--skip` on, each result appended to the --jsonl file as it ends
    (after a {"start": i} record), so a crash loses only the entry that crashed."""
    warnings.simplefilter("ignore")
    ops = set(a.ops.split(",")) if a.ops else None
    shard = tuple(int(x) for x in a.shard.split("/"))
    dtypes = a.dtypes.split(",")
    grad_dtypes = [d for d in a.grad_dtypes.split(",") if d in dtypes] if a.grad else []
    todo = entries(ops, dtypes, grad_dtypes, shard)
    with open(a.jsonl, "a") as f:
        for i in range(a.skip, len(todo)):
            op, dtype, grad = todo[i]
            f.write(json.dumps({"start": i, "op": entry_name(op), "dtype": str(dtype).replace("torch.", ""),
                                "kind": "grad" if grad else "forward"}) + "\n")
            f.flush()
            r = check_op(op, dtype, a.samples, grad, a.timeout)
            f.write(json.dumps(r) + "\n")
            f.flush()
            if a.verbose:
                _print(r)
    return 0


def summarize(results):
    table = {}
    for r in results:
        if r["status"] == "skip":
            continue
        key = (r["dtype"], r["kind"])
        t = table.setdefault(key, {"native": 0, "fallback": 0, "fail": 0})
        t[r["status"]] += 1
    return table


def print_table(results, wall, file=sys.stdout):
    print(f"{'dtype':10s} {'kind':8s} {'native':>7s} {'fallback':>9s} {'fail':>6s} {'native %':>9s}", file=file)
    totals = {"native": 0, "fallback": 0, "fail": 0}
    for (dtype, kind), t in sorted(summarize(results).items()):
        total = sum(t.values())
        for k in totals:
            totals[k] += t[k]
        print(f"{dtype:10s} {kind:8s} {t['native']:7d} {t['fallback']:9d} {t['fail']:6d} "
              f"{100.0 * t['native'] / max(total, 1):8.1f}%", file=file)
    total = sum(totals.values())
    print(f"{'total':10s} {'':8s} {totals['native']:7d} {totals['fallback']:9d} {totals['fail']:6d} "
          f"{100.0 * totals['native'] / max(total, 1):8.1f}%", file=file)
    slow = sorted((r for r in results if r.get("compile_s")), key=lambda r: -r["compile_s"])[:10]
    if slow:
        print("slowest to compile: " + ", ".join(f"{r['op']}/{r['dtype']}/{r['kind']} {r['compile_s']:.1f}s"
                                                  for r in slow), file=file)
    print(f"wall time {wall:.0f} s", file=file)


def _run_workers(argv, workers):
    """Runs the sweep in `workers` processes (ops dealt round-robin) and merges their results.
    A worker that crashes (a fatal error in native code) is restarted after the entry it was
    running, which is recorded as a failure."""
    results = []

    def shard(i):
        path = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
        skip, out = 0, []
        try:
            while True:
                cmd = [sys.executable, "-m", "torch_tpu.testing.opcheck", *argv, "--shard", f"{i}/{workers}", "--jsonl", path,
                       "--skip", str(skip)]
                code = subprocess.call(cmd)
                started, done = None, []
                with open(path) as fh:
                    for line in fh:
                        rec = json.loads(line)
                        if "start" in rec:
                            started = rec
                        else:
                            done.append(rec)
                            started = None
                out = done
                if code == 0 or started is None:
                    if code != 0:
                        print(f"opcheck: shard {i} exited with {code}", file=sys.stderr)
                    return out
                crashed = dict(started, status="fail", samples=0, variants=[], fallback_ops=[], seconds=0.0,
                               compile_s=0.0, error=f"crashed the process (exit {code})")
                del crashed["start"]
                with open(path, "a") as fh:
                    fh.write(json.dumps(crashed) + "\n")
                skip = started["start"] + 1
        finally:
            os.unlink(path)

    import threading

    shards = [None] * workers
    threads = [threading.Thread(target=lambda i=i: shards.__setitem__(i, shard(i))) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in shards:
        results += s or []
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    p.add_argument("--dtypes", default=ALL_DTYPES)
    p.add_argument("--samples", type=int, default=4, help="sample inputs per (op, dtype)")
    p.add_argument("--grad", action="store_true", help="also compare gradients")
    p.add_argument("--grad-dtypes", default="float32", help="dtypes whose gradients --grad compares")
    p.add_argument("--timeout", type=int, default=120, help="seconds per (op, dtype) entry")
    p.add_argument("--workers", type=int, default=1, help="processes to spread the ops over")
    p.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    p.add_argument("--jsonl", help=argparse.SUPPRESS)  # worker mode: results as JSON lines
    p.add_argument("--skip", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--json", help="write every result to this file")
    p.add_argument("--check-known", metavar="FILE",
                   help="compare with this known-failures file; exit 1 on any discrepancy")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    if a.jsonl:
        return _worker(a)
    start = time.time()
    forward, skip = [], False
    for x in (argv if argv is not None else sys.argv[1:]):  # what the workers get: no --workers/--json
        if skip:
            skip = False
            continue
        if x in ("--workers", "--json", "--check-known"):
            skip = True
            continue
        if x.startswith(("--workers=", "--json=", "--check-known=")):
            continue
        forward.append(x)
    results = _run_workers(forward, max(a.workers, 1))
    wall = time.time() - start
    print_table(results, wall)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": results, "wall_s": wall}, f, indent=1)
    if a.check_known:
        return 1 if check_known(results, load_known_failures(a.check_known), a.check_known) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
