"""Which OpInfo entries opcheck runs: the sweep's entries, and the CI gate's choice
(tests/test_opinfo.py): the OpInfos of the native lowerings every run, the rest in rotation."""
import warnings

import torch

from .opcompare import DTYPES, _tensors, entry_name

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
