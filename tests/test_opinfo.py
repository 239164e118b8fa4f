"""PyTorch's OpInfo database on tpu against the CPU.

The rule (torch_tpu.testing.opcheck.gate_always / gate_entries): every run checks the OpInfos
named after a lowered op and as few others as reach every native op (torch_tpu.native_ops())
that some OpInfo reaches, each in float32, bfloat16, int64 and bool where the CPU supports
them (first sample) and its float32 gradient when differentiable; the other OpInfos are dealt
to opcheck.GATE_PARTS parts, one checked per run (the day number picks it;
TORCH_TPU_OPINFO_SHARD=<part> or =all overrides), so the whole database is covered every
GATE_PARTS days. The run prints which part it checked (tests/conftest.py).

Each entry goes through opcheck.check_op: the function, in-place and out= variants against the
CPU with PyTorch's tolerances, and the gradients for `grad` entries. It must pass natively (no
CPU fallback) unless tests/opinfo_known_failures.txt lists it; a listed entry must still fail
the way the file says (runs on the CPU / wrong values / raises), and fails the test when it
passes or fails another way.

The whole database in six dtypes is `make opcheck`.
"""
import os
import time

import pytest
import torch
import torch_tpu
from torch_tpu import _compat
from torch_tpu.testing import opcheck

pytestmark = [pytest.mark.filterwarnings("ignore")]

KNOWN_FAILURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "opinfo_known_failures.txt")
with open(KNOWN_FAILURES) as _f:
    KNOWN, KNOWN_PROBLEMS = opcheck.parse_known_failures(_f.read(), KNOWN_FAILURES)
OPS = {opcheck.entry_name(o): o for o in opcheck.select_ops()}
ALWAYS, REACH = opcheck.gate_always(OPS.values(), torch_tpu.native_ops())
# The known-failures file is kept for the release `make test` uses. An older one (make
# compat-test) has another OpInfo database and other CPU references: a listed entry may be
# absent there, or pass; every other check holds on every release.
KNOWN_FOR_THIS_RELEASE = _compat.release(torch.__version__) >= (2, 13)

# TORCH_TPU_OPINFO_SHARD=<part> or =all picks the rotating part; unset, the day number does (the
# day the run started, TORCH_TPU_OPINFO_DAY, set by tests/conftest.py for every xdist worker).
PART, PART_LINE = opcheck.gate_part(os.environ.get("TORCH_TPU_OPINFO_SHARD"),
                                    int(os.environ.get("TORCH_TPU_OPINFO_DAY") or time.time() // 86400))
ENTRIES = opcheck.gate_entries(OPS.values(), ALWAYS, PART)


@pytest.mark.parametrize("name,dtype,kind", ENTRIES, ids=["-".join(e) for e in ENTRIES])
def test_opinfo(name, dtype, kind):
    listed = opcheck.known_entry(KNOWN, {"op": name, "dtype": dtype, "kind": kind})
    samples = 4 if listed else opcheck.GATE_SAMPLES  # a listed entry runs the samples it was recorded with
    r = opcheck.check_op(OPS[name], opcheck.DTYPES[dtype], max_samples=samples, grad=kind == "grad", timeout=120)
    if r["status"] == "skip":
        pytest.skip("no valid sample")
    mismatch = opcheck.known_mismatch(KNOWN, r)
    if mismatch and listed and not KNOWN_FOR_THIS_RELEASE and r["status"] == "native":
        pytest.skip(f"listed for PyTorch 2.13 ({listed[0]}), passes natively on {torch.__version__}")
    if mismatch:
        pytest.fail(f"{name} {dtype} {kind}: {mismatch} (tests/opinfo_known_failures.txt)")
    if listed:
        pytest.xfail(f"{listed[0]}: {listed[1]}")


def test_known_failures_file_is_well_formed():
    assert not KNOWN_PROBLEMS, "\n".join(KNOWN_PROBLEMS)
    assert KNOWN, "tests/opinfo_known_failures.txt is empty"
    for (name, dtype, kind), (why, reason, line) in KNOWN.items():
        assert name in OPS or not KNOWN_FOR_THIS_RELEASE, f"line {line}: {name}: no such OpInfo"
        assert len(reason) > 10, f"line {line}: {name}: give a reason"


def test_gate_covers_every_lowered_op_and_rotates_the_rest():
    parts = [set(opcheck.gate_entries(OPS.values(), ALWAYS, p)) for p in range(opcheck.GATE_PARTS)]
    every = set(opcheck.gate_entries(OPS.values(), ALWAYS, None))
    assert set().union(*parts) == every  # the parts together are the whole database
    always = set.intersection(*parts)
    assert {e[0] for e in always} == {e[0] for e in every if e[0] in ALWAYS}
    bases = {n.split("::")[-1].split(".")[0] for n in torch_tpu.native_ops()}
    for name, op in OPS.items():
        supported = op.supported_dtypes("cpu")
        forward = {d for n, d, k in every if n == name and k == "forward"}
        assert forward == {d for d in opcheck.GATE_DTYPES if opcheck.DTYPES[d] in supported}, name
        if op.supports_autograd and torch.float32 in supported:
            assert (name, "float32", "grad") in every, name
        if opcheck.lowered(op, bases):
            assert name in ALWAYS, f"{name} is named after a lowered op: it runs every time"
    # Every native op some OpInfo reaches is reached by one that runs every time.
    reached = set().union(*REACH.values())
    assert reached == set().union(*(REACH[n] for n in ALWAYS))
    # The rule finds the families: a rule that matched nothing would not pass.
    assert len(reached) > 300 and len(ALWAYS) > 300
    for native in ("aten::add.Tensor", "aten::convolution", "aten::convolution_backward", "aten::_softmax",
                   "aten::embedding_dense_backward", "aten::max_pool2d_with_indices", "aten::_fft_r2c",
                   "aten::native_layer_norm", "aten::mm"):
        assert native in reached, native
    for name in ("add", "sum", "mm", "gather", "cumsum", "sort"):
        assert (name, "float32", "forward") in always and (name, "bfloat16", "forward") in always, name
    assert ("add", "int64", "forward") in always and ("add", "bool", "forward") in always
    assert ("mm", "float32", "grad") in always


def test_gate_part_follows_the_day_and_the_environment():
    n = opcheck.GATE_PARTS
    assert [opcheck.gate_part(None, day)[0] for day in range(n + 1)] == list(range(n)) + [0]
    assert opcheck.gate_part("", 7)[0] == 7 % n
    part, line = opcheck.gate_part("1", 0)
    assert part == 1 and "part 1" in line and "TORCH_TPU_OPINFO_SHARD=1" in line
    assert opcheck.gate_part("all", 5)[0] is None
    for bad in (str(n), "-1", "x"):
        with pytest.raises(ValueError, match="TORCH_TPU_OPINFO_SHARD"):
            opcheck.gate_part(bad, 0)


KNOWN_TEXT = """\
# a comment, then a blank line

add * forward cpu | every dtype runs on the CPU in this made-up file
add int64 forward values | int64 gives wrong values here, which the line for * does not say
mul float32 grad raises | the backward raises
mul float32 grad values | a second line for mul float32 grad
sub float32 forward | no kind of failure
sub float99 forward cpu | no such dtype
sub float32 sideways cpu | no such kind
sub float32 forward slow | no such kind of failure
"""


def test_known_failures_wildcards_and_duplicates():
    known, problems = opcheck.parse_known_failures(KNOWN_TEXT, "k.txt")
    assert set(known) == {("add", "*", "forward"), ("add", "int64", "forward"), ("mul", "float32", "grad")}
    assert known["mul", "float32", "grad"][0] == "raises"  # the first of two lines stands
    assert len(problems) == 5, problems
    assert "k.txt:6: mul float32 grad is already listed on line 5" in problems[0]
    assert "k.txt:7: expected 'op dtype kind why | reason'" in problems[1]
    assert "unknown dtype 'float99'" in problems[2] and "kind must be forward or grad" in problems[3]
    assert "must be one of cpu, values, raises, got 'slow'" in problems[4]
    # `*` matches every dtype; a line naming the dtype takes precedence.
    assert opcheck.known_entry(known, {"op": "add", "dtype": "bfloat16", "kind": "forward"})[0] == "cpu"
    assert opcheck.known_entry(known, {"op": "add", "dtype": "int64", "kind": "forward"})[0] == "values"
    assert opcheck.known_entry(known, {"op": "add", "dtype": "bfloat16", "kind": "grad"}) is None
    with pytest.raises(ValueError, match="already listed on line 5"):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"known_{os.getpid()}.txt")
        with open(path, "w") as f:
            f.write(KNOWN_TEXT)
        try:
            opcheck.load_known_failures(path)
        finally:
            os.remove(path)


def _result(op, dtype, status, error="", fallback_ops=()):
    return {"op": op, "dtype": dtype, "kind": "forward", "status": status, "error": error,
            "fallback_ops": list(fallback_ops)}


def test_a_known_failure_must_still_fail_its_way():
    known, _ = opcheck.parse_known_failures(KNOWN_TEXT)
    on_cpu = _result("add", "float32", "fallback", fallback_ops=["aten::add.Tensor"])
    wrong = _result("add", "float32", "fail", "AssertionError: Tensor-likes are not close!")
    raises = _result("add", "float32", "fail", "RuntimeError: tpu: no")
    native = _result("add", "float32", "native")
    assert opcheck.known_mismatch(known, on_cpu) is None  # listed as cpu, runs on the CPU
    assert "listed as cpu" in opcheck.known_mismatch(known, wrong) and "now values" in opcheck.known_mismatch(known, wrong)
    assert "now raises" in opcheck.known_mismatch(known, raises)
    assert "now passes natively" in opcheck.known_mismatch(known, native)
    assert opcheck.known_mismatch(known, dict(wrong, dtype="int64")) is None
    # Unlisted: any failure is reported with its kind; a pass or a skip is fine.
    assert opcheck.known_mismatch(known, dict(raises, op="sub")).startswith("raises: RuntimeError")
    assert opcheck.known_mismatch(known, dict(on_cpu, op="sub")) == "cpu: ran on the CPU: aten::add.Tensor"
    assert opcheck.known_mismatch(known, dict(native, op="sub")) is None
    assert opcheck.known_mismatch(known, _result("sub", "float32", "skip")) is None


def test_check_op_tells_wrong_values_from_raising():
    """The classification the known failures rely on, on a real op broken on purpose."""
    op = OPS["abs"]
    r = opcheck.check_op(op, torch.float32, 1, False, 60)
    assert r["status"] == "native" and r["variants"] == ["function", "inplace", "out"], r
    with torch.library._scoped_library("aten", "IMPL") as lib:
        lib.impl("abs", lambda x: torch.neg(x), "PrivateUse1")
        r = opcheck.check_op(op, torch.float32, 1, False, 60)
    assert opcheck.failure_kind(r) == "values", r
    with torch.library._scoped_library("aten", "IMPL") as lib:
        lib.impl("abs", lambda x: (_ for _ in ()).throw(RuntimeError("tpu: broken on purpose")), "PrivateUse1")
        r = opcheck.check_op(op, torch.float32, 1, False, 60)
    assert opcheck.failure_kind(r) == "raises" and "broken on purpose" in r["error"], r
    assert opcheck.check_op(op, torch.float32, 1, False, 60)["status"] == "native"  # restored
