"""Checks tpu against PyTorch's own OpInfo database (torch.testing._internal).

For every OpInfo and dtype, the op's sample inputs run on tpu and on the CPU: the function
variant, the in-place variant (when the op has one and the result keeps self's dtype and
shape) and the out= variant (when the op supports out=). Each (op, dtype) is classed
`native` (every sample matches, no CPU fallback), `fallback` (every sample matches, some ran
through the CPU fallback) or `fail`. With --grad, gradients of differentiable ops are
compared too (float dtypes), as separate `grad` entries.

Tolerances are PyTorch's for the dtype (torch.testing.assert_close defaults), widened by the
toleranceOverride decorators PyTorch's own OpInfo tests apply to that op and dtype.

    python -m torch_tpu.testing.opcheck [--ops add,mul] [--dtypes float32,bfloat16] [--grad]
                                [--workers 2] [--json out.json] [--check-known]

tests/opinfo_known_failures.txt lists the entries known not to run natively, with reasons;
--check-known reports unlisted failures and listed entries that now pass.
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

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}
ALL_DTYPES = ",".join(DTYPES)

# Ops whose values are random or unspecified: only shapes and dtypes are compared (the
# device draws from its own Philox stream, and empty memory holds anything). Their
# distributions are checked by tests/test_random.py.
_UNCOMPARABLE_PREFIXES = (
    "normal", "uniform", "bernoulli", "rand", "cauchy", "exponential", "geometric", "log_normal",
    "multinomial", "nn.functional.dropout", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
    "nn.functional.rrelu", "empty", "new_empty", "nn.functional.fractional_max_pool", "torch.empty",
)

# Ops that take index tensors on the CPU whatever the device of self (as on CUDA): only the
# sample's input moves to tpu.
_CPU_ARGS = {"tensor_split"}


# Ops whose index outputs are implementation-defined among equal values (PyTorch's CPU
# kernels use unstable selection): (position of `dim`, position of `keepdim`) in the sample
# args. Their indices are compared through the input values they point at.
_TIE_INDEX_OPS = {"sort": (0, None), "argsort": (0, None), "topk": (1, None), "kthvalue": (1, 2), "mode": (0, 1),
                  "median": (0, 1), "nanmedian": (0, 1)}


def _resolve_ties(op, sample, result):
    """The result with index outputs replaced by the input values they select."""
    spec = _TIE_INDEX_OPS.get(op.name)
    if spec is None or not isinstance(sample.input, torch.Tensor):
        return result
    args, kwargs = sample.args, sample.kwargs

    def arg(pos, name, default):
        if name in kwargs:
            return kwargs[name]
        return args[pos] if pos is not None and pos < len(args) else default

    default_dim = None if op.name in ("median", "nanmedian") else -1
    dim = arg(spec[0], "dim", default_dim)
    keepdim = arg(spec[1], "keepdim", False)
    if dim is None:
        return result
    x = sample.input.detach()

    def values_at(idx):
        idx, src = idx.detach().cpu(), x.cpu()
        if src.dim() == 0:
            return src.expand_as(idx).clone()
        i = idx if (keepdim or op.name in ("sort", "argsort", "topk")) else idx.unsqueeze(dim)
        v = torch.take_along_dim(src, i, dim)
        return v if (keepdim or op.name in ("sort", "argsort", "topk")) else v.squeeze(dim)

    if isinstance(result, torch.Tensor):
        return values_at(result) if result.dtype == torch.int64 else result
    if isinstance(result, (tuple, list)) and len(result) == 2 and result[1].dtype == torch.int64:
        return (result[0], values_at(result[1]))
    return result


def _uncomparable(op):
    return op.name.startswith(_UNCOMPARABLE_PREFIXES)


def _random_sample(op, sample):
    """A sample of a deterministic op that asks for dropout (attention with dropout_p > 0;
    multi_head_attention_forward with training=True, which it sets when dropout_p > 0): random
    like the ops above, so only its shapes and dtypes are compared. PyTorch's own
    test_compare_cpu skips such ops whole; their dropout-free samples are still compared here."""
    p = sample.kwargs.get("dropout_p", 0.0)
    if isinstance(p, (int, float)) and p > 0:
        return True
    return op.name == "nn.functional.multi_head_attention_forward" and sample.kwargs.get("training") is True


def entry_name(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout()


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return _same_layout_on(value.detach(), device).requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, torch.device) or (isinstance(value, str) and value == "cpu"):
        return torch.device(device)
    return value


def _same_layout_on(t, device):
    """`t` on `device` with the same storage, offset and strides, as PyTorch's device tests
    create samples (as_strided and friends address the storage, not the view)."""
    plain = t.layout != torch.strided or t.device.type != "cpu" or t.is_conj() or t.is_neg()
    if plain or t.numel() == 0 or t.dim() == 0:
        return t.to(device)
    storage = t.untyped_storage()
    numel = storage.nbytes() // t.element_size()
    if t.storage_offset() == 0 and t.is_contiguous() and numel == t.numel():
        return t.to(device)
    base = torch.empty(0, dtype=t.dtype).set_(storage, 0, (numel,), (1,))
    return base.to(device).as_strided(t.size(), t.stride(), t.storage_offset())


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


# ---- tolerances ----

_TOL_CLASSES = {None, "TestCommon", "TestUnaryUfuncs", "TestBinaryUfuncs", "TestBinaryUfuncsDevice", "TestReductions",
                "TestConsistency"}
_TOL_SKIP_TESTS = {"test_complex_half_reference_testing"}


def tolerance(op, dtype):
    """(atol, rtol) or None: the widest toleranceOverride PyTorch's tests apply to op at dtype
    in device-vs-reference comparisons (TestCommon, the ufunc and reduction tests, and
    TestConsistency, which compares another accelerator with the CPU)."""
    from torch.testing._internal.common_device_type import toleranceOverride

    best = None
    for info in getattr(op, "decorators", ()) or ():
        if getattr(info, "cls_name", None) not in _TOL_CLASSES or getattr(info, "test_name", None) in _TOL_SKIP_TESTS:
            continue
        if getattr(info, "dtypes", None) and dtype not in info.dtypes:
            continue
        for dec in getattr(info, "decorators", ()):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                t = dec.d[dtype]
                best = (t.atol, t.rtol) if best is None else (max(best[0], t.atol), max(best[1], t.rtol))
    return best


def _assert_close(x, y, tol):
    if tol is None or not (x.dtype.is_floating_point or x.dtype.is_complex):
        torch.testing.assert_close(x, y, equal_nan=True, check_stride=False)
        return
    try:
        torch.testing.assert_close(x, y, equal_nan=True, check_stride=False)
    except AssertionError:
        torch.testing.assert_close(x, y, equal_nan=True, check_stride=False, atol=tol[0], rtol=tol[1])


def _compare(actual, expected, tol, values=True):
    a, e = _tensors(actual), _tensors(expected)
    if len(a) != len(e):
        raise AssertionError(f"{len(a)} outputs on tpu, {len(e)} on cpu")
    if not a and not isinstance(expected, (list, tuple, dict)):
        if values and actual != expected and not (actual != actual and expected != expected):
            raise AssertionError(f"{actual!r} vs {expected!r}")
        return
    for x, y in zip(a, e):
        if x.device.type != "tpu" and not (y.device.type == "cpu" and x.device.type == "cpu"):
            raise AssertionError(f"result on {x.device}")
        x = x.detach().cpu()
        y = y.detach()
        if x.shape != y.shape:
            raise AssertionError(f"shape {tuple(x.shape)} vs {tuple(y.shape)}")
        if x.dtype != y.dtype:
            raise AssertionError(f"dtype {x.dtype} vs {y.dtype}")
        if values:
            _assert_close(x, y, tol)


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
    tol = tolerance(op, dtype)
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


# ---- known failures ----

KNOWN_FAILURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                              "tests", "opinfo_known_failures.txt")


def load_known_failures(path=KNOWN_FAILURES):
    """{(op, dtype, kind): reason} from the known-failures file: one entry a line,
    `op dtype kind | reason` (kind is forward or grad; `*` as dtype matches every dtype)."""
    known = {}
    if not os.path.exists(path):
        return known
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            head, sep, reason = line.partition("|")
            fields = head.split()
            if not sep or len(fields) != 3 or not reason.strip():
                raise ValueError(f"{path}:{n}: expected 'op dtype kind | reason', got {line!r}")
            known[tuple(fields)] = reason.strip()
    return known


def known_reason(known, r):
    for dtype in (r["dtype"], "*"):
        reason = known.get((r["op"], dtype, r["kind"]))
        if reason:
            return reason
    return None


def select_ops(ops=None):
    from torch.testing._internal.common_methods_invocations import op_db

    return [o for o in op_db if ops is None or o.name in ops or entry_name(o) in ops]


def entries(ops=None, dtypes=("float32",), grad_dtypes=(), shard=(0, 1)):
    """The (OpInfo, dtype, grad) entries of a sweep in a fixed order: every op's forward
    entries, then the gradient entries; ops are dealt round-robin to `shard[1]` shards."""
    selected = [op for i, op in enumerate(select_ops(ops)) if i % shard[1] == shard[0]]
    out = []
    for grad, names in ((False, dtypes), (True, grad_dtypes)):
        for op in selected:
            for name in names:
                dtype = DTYPES[name]
                if dtype not in op.supported_dtypes("cpu"):
                    continue
                if grad and not (op.supports_autograd and dtype.is_floating_point):
                    continue
                out.append((op, dtype, grad))
    return out


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


def check_known(results, known, file=sys.stdout):
    """Prints entries that are not native but not listed, and listed entries that now pass.
    Returns the number of such discrepancies."""
    unexpected = [r for r in results if r["status"] in ("fail", "fallback") and not known_reason(known, r)]
    fixed = [r for r in results if r["status"] == "native" and known_reason(known, r)]
    for r in unexpected:
        detail = r["error"] or "fell back: " + ", ".join(r["fallback_ops"])
        print(f"UNEXPECTED {r['op']} {r['dtype']} {r['kind']}: {r['status']}: {detail}", file=file)
    for r in fixed:
        print(f"NOW PASSES {r['op']} {r['dtype']} {r['kind']}: remove it from {KNOWN_FAILURES}", file=file)
    print(f"{len(unexpected)} unexpected failures, {len(fixed)} listed failures that now pass", file=file)
    return len(unexpected) + len(fixed)


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
    p.add_argument("--check-known", action="store_true",
                   help="compare with tests/opinfo_known_failures.txt; exit 1 on any discrepancy")
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
            skip = x != "--check-known"
            continue
        if x.startswith(("--workers=", "--json=")):
            continue
        forward.append(x)
    results = _run_workers(forward, max(a.workers, 1))
    wall = time.time() - start
    print_table(results, wall)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": results, "wall_s": wall}, f, indent=1)
    if a.check_known:
        return 1 if check_known(results, load_known_failures()) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
