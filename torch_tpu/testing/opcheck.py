"""Checks tpu against PyTorch's own OpInfo database (torch.testing._internal).

For every OpInfo and dtype, the op's sample inputs run on tpu and on the CPU: the function
variant, the in-place variant (when the op has one and the result keeps self's dtype and
shape) and the out= variant (when the op supports out=). Each (op, dtype) is classed
`native` (every sample matches, no CPU fallback), `fallback` (every sample matches, some ran
through the CPU fallback) or `fail`. With --grad, gradients of differentiable ops are
compared too (float dtypes), as separate `grad` entries.

Tolerances are PyTorch's for the dtype (torch.testing.assert_close defaults), widened by the
toleranceOverride decorators PyTorch's own OpInfo tests apply to that op and dtype, and by
TOLERANCES below (entries measured against float64). An out= sample whose CPU result differs
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


# Tolerances of our own, (entry name, dtype, kind) -> (atol, rtol), where PyTorch's defaults
# are tighter than float32 arithmetic allows. Each was measured against the float64 result on
# the same inputs: tpu and the CPU are both as far off it as the arithmetic permits, rounded
# differently (which of the two differs more depends on whether fused mode compiled the graph
# whole, so the entry passed in one run and failed in the next).
TOLERANCES = {
    # 1/sqrt(1 - x^2) near |x| = 1 is ill-conditioned: the CPU's gradient is 6.8e-5 off the
    # float64 one at x = 0.9989 (value 21.3), tpu's compiled-whole gradient 1.2e-6; they
    # differ by 2.8e-6 relative.
    ("asin", "float32", "grad"): (1e-5, 1e-5),
    # Each gradient element is a sum of 200 products (|terms| ~ 700 in all): an element of
    # value -0.65 is 2.1e-5 off the float64 one on tpu and 4.5e-6 on the CPU, both within
    # float32 rounding of that sum in a different order (eps * 700 ~ 8e-5).
    ("kron", "float32", "grad"): (1e-4, 1.3e-6),
    # The bias gradient sums the output gradient over every output position (18,392 terms per
    # channel in the largest sample, sum of |terms| 14,600, value 229): tpu's XLA reduction is
    # 5.4e-4 off the float64 sum and the CPU's 3e-5, both within float32 rounding of that sum
    # (2^-24 * 14,600 = 8.7e-4). The input and weight gradients agree to 2e-5.
    ("nn.functional.conv_transpose3d", "float32", "grad"): (1e-3, 1.3e-6),
}


def tolerance(op, dtype, kind="forward"):
    """(atol, rtol) or None: the widest toleranceOverride PyTorch's tests apply to op at dtype
    in device-vs-reference comparisons (TestCommon, the ufunc and reduction tests, and
    TestConsistency, which compares another accelerator with the CPU), widened by ours
    (TOLERANCES) for the entry `kind` (forward or grad)."""
    from torch.testing._internal.common_device_type import toleranceOverride

    best = TOLERANCES.get((entry_name(op), str(dtype).replace("torch.", ""), kind))
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


# ---- known failures ----

# How a known failure fails: the test checks that a listed entry still fails that way.
FAILURE_KINDS = {
    "cpu": "runs on the CPU (the fallback), with the right values",
    "values": "runs, but a result (value, dtype, shape, gradient) differs from the CPU's",
    "raises": "raises on tpu (or times out, or crashes the process) where the CPU does not",
}


def failure_kind(r):
    """The FAILURE_KINDS key a result belongs to; None for a native pass or a skip."""
    if r["status"] == "fallback":
        return "cpu"
    if r["status"] != "fail":
        return None
    return "values" if r["error"].startswith("AssertionError") else "raises"


def parse_known_failures(text, path="<known failures>"):
    """({(op, dtype, kind): (why, reason, line)}, [problem, ...]) from a known-failures file.

    One entry a line, `op dtype kind why | reason`: op as `entry_name` names it, dtype one of
    DTYPES or `*` (every dtype; a line naming the dtype takes precedence), kind forward or
    grad, why one of FAILURE_KINDS. Blank lines and `#` comments are ignored. A malformed line
    or a second line for the same (op, dtype, kind) is a problem; the first line stands."""
    known, problems = {}, []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, sep, reason = line.partition("|")
        fields = head.split()
        if not sep or len(fields) != 4 or not reason.strip():
            problems.append(f"{path}:{n}: expected 'op dtype kind why | reason', got {line!r}")
            continue
        op, dtype, kind, why = fields
        if dtype != "*" and dtype not in DTYPES:
            problems.append(f"{path}:{n}: unknown dtype {dtype!r} (one of {', '.join(DTYPES)} or *)")
        elif kind not in ("forward", "grad"):
            problems.append(f"{path}:{n}: kind must be forward or grad, got {kind!r}")
        elif why not in FAILURE_KINDS:
            problems.append(f"{path}:{n}: the kind of failure must be one of {', '.join(FAILURE_KINDS)}, got {why!r}")
        elif (op, dtype, kind) in known:
            problems.append(f"{path}:{n}: {op} {dtype} {kind} is already listed on line {known[op, dtype, kind][2]}")
        else:
            known[op, dtype, kind] = (why, reason.strip(), n)
    return known, problems


def load_known_failures(path):
    """The entries of a known-failures file (see parse_known_failures); raises on any problem."""
    with open(path) as f:
        known, problems = parse_known_failures(f.read(), path)
    if problems:
        raise ValueError("\n".join(problems))
    return known


def known_entry(known, r):
    """(why, reason) of the line that lists result `r`, or None."""
    for dtype in (r["dtype"], "*"):
        entry = known.get((r["op"], dtype, r["kind"]))
        if entry:
            return entry[:2]
    return None


def known_mismatch(known, r):
    """None when `r` agrees with the known-failures list; otherwise what differs."""
    entry, kind = known_entry(known, r), failure_kind(r)
    detail = r["error"] or "ran on the CPU: " + ", ".join(r["fallback_ops"])
    if entry is None:
        return f"{kind}: {detail}" if kind else None
    if kind is None:
        return "now passes natively: remove it from the known failures" if r["status"] == "native" else None
    if kind != entry[0]:
        return f"listed as {entry[0]} ({entry[1]}), now {kind}: {detail}"
    return None


def _skip_test_fn_lookup():
    """OpInfo sampling looks for the running unittest test by walking the stack with
    inspect.stack(), which reads the source of every frame: under pytest's deep stacks that
    made collecting tests/test_opinfo.py take minutes. opcheck runs inside no unittest
    TestCase, where the lookup finds nothing, so it answers None at once."""
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    for module in (common_utils, core):
        if hasattr(module, "extract_test_fn"):
            module.extract_test_fn = lambda: None


def select_ops(ops=None):
    from torch.testing._internal.common_methods_invocations import op_db

    _skip_test_fn_lookup()

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


# ---- the CI gate (tests/test_opinfo.py) ----

# Every run checks the OpInfos that exercise the native lowerings (`gate_always`): each one's
# first sample(s) in these dtypes (where the CPU supports them) and its float32 gradient (when
# differentiable). The other OpInfos (composites, views, ops that run on the CPU) are dealt to
# GATE_PARTS parts, one checked per run: the whole database is covered every GATE_PARTS runs.
# Entries listed as known failures run 4 samples, as `make opcheck` does when it records them.
# Sized for at most about 5 minutes per eager mode on 2 cores. Measured on the shared 2-core
# machine (load 5 to 9), every part at once (2,585 entries), with a cold compile cache:
# strict 441 s wall / 206 s CPU; fused after it, on the cache strict filled (as in `make
# py-test`), 178 s wall / 100 s CPU. One part checks about 78% of that (the always-checked
# entries are 1,389 of the 2,585).
GATE_DTYPES = ("float32", "bfloat16", "int64", "bool")
GATE_SAMPLES = 1
GATE_PARTS = 3


def lowered(op, native_bases):
    """Whether the OpInfo is named after a lowered op: its aten_name, or its name (dots as
    underscores, or only the last part), is the base name of a native overload."""
    names = {op.aten_name, op.name.replace(".", "_"), op.name.split(".")[-1]}
    return bool(names & native_bases)


def native_reach(ops, native_ops):
    """{entry name: the native ops its first float32 sample dispatches}, forward and (for
    differentiable ops) backward, as seen by a dispatch mode running it on the CPU: the ops
    tpu would get, after PyTorch's implicit decompositions."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.add(func.name())
            return func(*args, **(kwargs or {}))

    native = set(native_ops)
    reach = {}
    for op in ops:
        supported = op.supported_dtypes("cpu")
        dtype = torch.float32 if torch.float32 in supported else next(iter(sorted(supported, key=str)), None)
        grad = op.supports_autograd and dtype is torch.float32
        record = Record()
        try:
            torch.manual_seed(0)
            sample = next(iter(op.sample_inputs("cpu", dtype, requires_grad=grad)))
            with warnings.catch_warnings(), record:
                warnings.simplefilter("ignore")
                out = op(sample.input, *sample.args, **sample.kwargs)
                outs = [t for t in _tensors(out) if t.requires_grad and t.dtype.is_floating_point]
                if grad and outs:
                    torch.autograd.backward([o.sum() for o in outs])
        except Exception:  # noqa: BLE001 - an op whose sample fails on the CPU reaches what it reached
            pass
        reach[entry_name(op)] = record.seen & native
    return reach


def gate_always(ops, native_ops):
    """Entry names every gate run checks: the OpInfos named after a lowered op, and as few
    others as cover every native op that some OpInfo reaches (greedy, ties by name)."""
    bases = {n.split("::")[-1].split(".")[0] for n in native_ops}
    always = {entry_name(op) for op in ops if lowered(op, bases)}
    reach = native_reach(ops, native_ops)
    left = set().union(*reach.values()) - set().union(*(reach.get(n, set()) for n in always))
    while left:
        best = max(sorted(reach), key=lambda name: len(reach[name] & left))
        always.add(best)
        left -= reach[best]
    return always, reach


def gate_part(value, day):
    """The rotating part a run checks: `value` is TORCH_TPU_OPINFO_SHARD (a part number,
    `all`, or unset: the day number modulo GATE_PARTS). Returns (part or None for all,
    a line saying what runs)."""
    if value in (None, ""):
        part, why = day % GATE_PARTS, f"day {day} mod {GATE_PARTS}"
    elif value == "all":
        return None, "OpInfo gate: every part (TORCH_TPU_OPINFO_SHARD=all)"
    else:
        if not value.isdigit() or int(value) >= GATE_PARTS:
            raise ValueError(f"TORCH_TPU_OPINFO_SHARD={value!r}: expected 0..{GATE_PARTS - 1} or 'all'")
        part, why = int(value), f"TORCH_TPU_OPINFO_SHARD={value}"
    return part, (f"OpInfo gate: the lowered ops and part {part} of 0..{GATE_PARTS - 1} of the others ({why}); "
                  f"TORCH_TPU_OPINFO_SHARD=0..{GATE_PARTS - 1} or all picks another")


def gate_part_of(name):
    """The rotating part an OpInfo outside the always-checked set belongs to (stable across runs)."""
    import zlib

    return zlib.crc32(name.encode()) % GATE_PARTS


def gate_entries(ops, always, part):
    """[(entry name, dtype name, 'forward' or 'grad')] a gate run checks, in a fixed order:
    the OpInfos in `always`, and the others in `part` (every one when `part` is None)."""
    out = []
    for op in sorted(ops, key=entry_name):
        name = entry_name(op)
        if name not in always and part is not None and gate_part_of(name) != part:
            continue
        supported = op.supported_dtypes("cpu")
        out += [(name, d, "forward") for d in GATE_DTYPES if DTYPES[d] in supported]
        if op.supports_autograd and torch.float32 in supported:
            out.append((name, "float32", "grad"))
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


def check_known(results, known, path, file=sys.stdout):
    """Prints entries that fail without a line in the known failures, listed entries that now
    pass, and listed entries that now fail another way. Returns how many there are."""
    count = 0
    for r in results:
        mismatch = known_mismatch(known, r)
        if mismatch:
            count += 1
            print(f"{r['op']} {r['dtype']} {r['kind']}: {mismatch} ({path})", file=file)
    print(f"{count} entries differ from {path}", file=file)
    return count


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
