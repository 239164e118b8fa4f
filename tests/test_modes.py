"""Eager modes: debug, strict and fused give the same results; fused defers and caches."""
import copy
import json
import os
import subprocess
import sys

import pytest
import torch

import torch_tpu

from conftest import assert_same, needs_devices


@pytest.fixture(autouse=True)
def restore_mode():
    before = torch_tpu.get_eager_mode()
    yield
    torch_tpu.set_eager_mode(before)


def _train(mode, steps=6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 3))
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    with torch_tpu.eager_mode(mode):
        m = copy.deepcopy(model).to("tpu")
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        xt, yt = x.to("tpu"), y.to("tpu")
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(xt), yt)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        params = [p.detach().cpu() for p in m.parameters()]
    return losses, params


def test_modes_agree_on_a_training_run():
    ref_losses, ref_params = _train("strict")
    for mode in ("debug", "fused"):
        losses, params = _train(mode)
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses))
        for a, b in zip(params, ref_params):
            torch.testing.assert_close(a, b)


def test_fused_defers_until_a_sync_point_and_runs_one_program():
    a = torch.randn(4, 4, device="tpu")
    torch.tpu.synchronize()
    torch_tpu.set_eager_mode("fused")
    torch_tpu.metrics.reset()
    b = (a * 2 + 1).relu().sum(0)
    m = torch_tpu.metrics(wait=True)
    assert m["ops_recorded"] == 4 and m["executions"] == 0  # nothing ran yet
    host = b.cpu()
    m = torch_tpu.metrics(wait=True)
    assert m["fused_graphs_run"] == 1 and m["fused_ops"] == 4
    assert any(k.startswith("fused graph") for k in m["host_syncs_by_cause"])
    torch.testing.assert_close(host, (a.cpu() * 2 + 1).relu().sum(0))


TIERING_CHILD = """
import json, torch, torch_tpu
torch_tpu.set_eager_mode("fused")
x = torch.randn(8, device="tpu")
x.cpu()  # x's own graph (the random fill) runs here
torch_tpu.metrics.reset()
seen = []
for i in range(5):
    y = (x * (i + 1)).exp().sum()  # a different scalar each time: a run-time parameter
    assert abs(y.item() - (x.cpu() * (i + 1)).exp().sum().item()) < 1e-3 * abs(y.item())
    torch_tpu._C._await_background_compiles()  # settle the background compile, for exact counts
    m = torch_tpu.metrics(wait=True)
    seen.append([m["fused_graphs_op_by_op"], m["fused_graphs_compiled"], m["disk_cache_hits"]])
print(json.dumps(seen))
"""


def test_fused_graphs_are_cached_by_structure(tmp_path):
    # First sight of a structure: op by op through per-op programs; second: compiled whole in
    # the background while its ops run one by one once more; then the whole program runs. A
    # new process finds the whole program in the disk cache at first sight (the first process
    # finished the compile before exiting).
    import json

    from conftest import run_python

    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path)}
    out = run_python(TIERING_CHILD, env)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert [s[0] for s in seen] == [1, 2, 2, 2, 2]
    assert [s[1] for s in seen] == [0, 1, 1, 1, 1]
    out = run_python(TIERING_CHILD, env)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert [s[0] for s in seen] == [0] * 5 and [s[1] for s in seen] == [0] * 5
    assert seen[0][2] >= 1  # the whole graph came from the disk cache


def test_fused_compile_in_the_flush_when_asked(tmp_path):
    # TORCH_TPU_FUSED_BACKGROUND_COMPILE=0: the flush that repeats a structure compiles it and
    # runs it whole at once.
    from conftest import run_python

    out = run_python(TIERING_CHILD, {"TORCH_TPU_CACHE_DIR": str(tmp_path), "TORCH_TPU_FUSED_BACKGROUND_COMPILE": "0"})
    assert out.returncode == 0, out.stderr
    seen = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert [s[0] for s in seen] == [1] * 5 and [s[1] for s in seen] == [0, 1, 1, 1, 1]


def test_fused_background_compile_serves_while_compiling(tmp_path):
    # A structure repeated many times while its whole program compiles: every result is right
    # (the per-op programs serve meanwhile), and the switch to the whole program happens.
    from conftest import run_python

    code = """
import torch, torch_tpu
torch_tpu.set_eager_mode("fused")
x = torch.randn(64, 64)
w = torch.randn(64, 64)
xt, wt = x.to("tpu"), w.to("tpu")
def step(i):  # one structure; the scale is a run-time parameter
    torch.testing.assert_close(torch.tanh((xt * (i + 1)) @ wt).add(xt * 0.5).cpu(),
                               torch.tanh((x * (i + 1)) @ w).add(x * 0.5), rtol=1e-4, atol=1e-4)
for i in range(30):
    step(i)
torch_tpu._C._await_background_compiles()
for i in range(3):
    step(i)
m = torch_tpu.metrics(wait=True)
print("COUNTS", m["fused_graphs_run"], m["fused_graphs_op_by_op"], m["fused_graphs_compiled"])
"""
    out = run_python(code, {"TORCH_TPU_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    run, op_by_op, compiled = map(int, out.stdout.split("COUNTS")[1].split())
    assert compiled >= 1 and op_by_op < run  # some flushes ran the whole program
    assert op_by_op >= 2  # the first sight, and the flush that queued the compile


def test_forked_child_exits_while_parent_compiles():
    # The child has no compile worker: waiting for the parent's queued compiles at its exit
    # would never end.
    from conftest import run_python

    code = """
import os, sys, torch, torch_tpu
torch_tpu.set_eager_mode("fused")
x = torch.randn(128, 128, device="tpu")
for i in range(2):
    (x @ x * (i + 1)).tanh().sum().item()  # the repeat queues a whole-graph compile
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: Python's and C's atexit handlers run
_, status = os.waitpid(pid, 0)
print("CHILD", status)
"""
    out = run_python(code, {}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "CHILD 0" in out.stdout


@pytest.mark.parametrize("background", ["1", "0"])
def test_fused_compile_at_first_sight_when_asked(tmp_path, background):
    # The first sight queues the compile (its ops run one by one meanwhile), or with background
    # compiles off, compiles in the flush and runs whole at once.
    from conftest import run_python

    out = run_python(TIERING_CHILD, {"TORCH_TPU_CACHE_DIR": str(tmp_path), "TORCH_TPU_FUSED_COMPILE_AFTER": "1",
                                     "TORCH_TPU_FUSED_BACKGROUND_COMPILE": background})
    assert out.returncode == 0, out.stderr
    seen = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert [s[0] for s in seen] == [int(background)] * 5 and [s[1] for s in seen] == [1] * 5


def test_fused_in_place_and_views_see_each_other():
    torch_tpu.set_eager_mode("fused")
    base_c = torch.arange(12.0).reshape(3, 4)
    base = base_c.to("tpu")
    view, view_c = base.t()[1:3], base_c.t()[1:3]
    view.mul_(10)
    view_c.mul_(10)
    other, other_c = base[:, 2], base_c[:, 2]
    other.add_(1)
    other_c.add_(1)
    assert_same(base, base_c)
    assert_same(view, view_c)


def test_fused_shape_errors_raise_at_the_op():
    torch_tpu.set_eager_mode("fused")
    a, b = torch.ones(3, device="tpu"), torch.ones(4, device="tpu")
    with pytest.raises(RuntimeError, match="must match the size"):
        a + b
    assert (a + 1).sum().item() == 6.0  # the graph is still usable


def test_fused_op_limit_flushes():
    torch_tpu.set_eager_mode("fused")
    x = torch.zeros(2, device="tpu")
    torch.tpu.synchronize()
    torch_tpu.metrics.reset()
    code = (
        "import torch, torch_tpu\n"
        "torch_tpu.set_eager_mode('fused')\n"
        "x = torch.zeros(2, device='tpu')\n"
        "for _ in range(25): x = x + 1\n"
        # 26 ops (zeros and 25 adds), at most 10 a graph: two full graphs run before the read,
        # the last 6 ops run at the read.
        "m = torch_tpu.metrics(wait=True); assert (m['fused_graphs_run'], m['fused_ops']) == (2, 20), m\n"
        "assert x.cpu().tolist() == [25.0, 25.0]\n"
        "m = torch_tpu.metrics(wait=True); assert (m['fused_graphs_run'], m['fused_ops']) == (3, 26), m\n"
    )
    env = dict(os.environ, TORCH_TPU_FUSED_MAX_OPS="10")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def test_fallback_op_is_a_sync_point():
    torch_tpu.set_eager_mode("fused")
    x = torch.tensor([1.0, -2.0, 3.0], device="tpu")
    y = x * 2
    picked = torch.masked_select(y, y > 0)  # data-dependent: needs y's values
    assert picked.cpu().tolist() == [2.0, 6.0]


def test_mode_context_manager_and_env():
    torch_tpu.set_eager_mode("strict")
    with torch_tpu.eager_mode("fused"):
        assert torch_tpu.get_eager_mode() == "fused"
    assert torch_tpu.get_eager_mode() == "strict"
    with pytest.raises(ValueError, match="unknown eager mode"):
        torch_tpu.set_eager_mode("lazy")
    out = subprocess.run([sys.executable, "-c", "import torch, torch_tpu; print(torch_tpu.get_eager_mode())"],
                         env=dict(os.environ, TORCH_TPU_EAGER_MODE="debug"), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "debug"
    env = {k: v for k, v in os.environ.items() if k != "TORCH_TPU_EAGER_MODE"}
    out = subprocess.run([sys.executable, "-c", "import torch, torch_tpu; print(torch_tpu.get_eager_mode())"],
                         env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "fused"  # the default


def test_debug_mode_names_the_op_producing_nan():
    code = (
        "import torch, torch_tpu\n"
        "torch_tpu.set_eager_mode('debug')\n"
        "x = torch.tensor([1.0, -1.0], device='tpu')\n"
        "y = x.exp()\n"
        "try:\n"
        "    z = y.log() * 0 + (x).sqrt()\n"
        "except RuntimeError as e:\n"
        "    print('ERR', e)\n"
    )
    env = dict(os.environ, TORCH_TPU_CHECK_NANS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "ERR" in out.stdout and "aten::sqrt" in out.stdout, out.stdout + out.stderr


def _backward_threads(run):
    """Thread ids that ran the backward nodes of x * 3 (a tensor hook fires on the engine's thread)."""
    import threading

    x = torch.randn(4, device="tpu", requires_grad=True)
    y = x * 3
    seen = []
    y.register_hook(lambda g: seen.append(threading.get_ident()))
    grads = run(y.sum(), x)
    return seen, grads


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("entry", ["backward", "grad"])
def test_backward_over_tpu_runs_on_the_calling_thread(mode, entry):
    import threading

    torch_tpu.set_eager_mode(mode)

    def run(loss, x):
        if entry == "backward":
            loss.backward()
            return x.grad
        return torch.autograd.grad(loss, x)[0]

    assert torch.autograd.is_multithreading_enabled()
    seen, grad = _backward_threads(run)
    assert seen == [threading.get_ident()]  # not one of the engine's device threads
    assert torch.autograd.is_multithreading_enabled()  # the caller's setting is back
    assert_same(grad, torch.full((4,), 3.0))


def test_fused_grad_ends_with_a_sync_point():
    torch_tpu.set_eager_mode("fused")
    x = torch.randn(4, device="tpu", requires_grad=True)
    torch.tpu.synchronize()
    torch_tpu.metrics.reset()
    (g,) = torch.autograd.grad((x * x).sum(), x)
    m = torch_tpu.metrics(wait=True)
    assert m["host_syncs_by_cause"].get("fused graph: end of grad") == 1 and m["fused_graphs_run"] == 1
    torch.testing.assert_close(g.cpu(), 2 * x.detach().cpu())


def test_reentrant_checkpoint_backward_on_the_calling_thread():
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(3, 8)
    ref = checkpoint(lambda t: lin(t).tanh(), x.requires_grad_(), use_reentrant=True).sum()
    ref.backward()
    lin_t = copy.deepcopy(lin).to("tpu")
    lin_t.zero_grad()
    xt = x.detach().to("tpu").requires_grad_()
    out = checkpoint(lambda t: lin_t(t).tanh(), xt, use_reentrant=True).sum()
    out.backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
    torch.testing.assert_close(lin_t.weight.grad.cpu(), lin.weight.grad)


@needs_devices(2)
def test_backward_over_two_devices_on_the_calling_thread():
    # Without the engine's per-device threads, one pass still reaches both devices' nodes.
    torch.manual_seed(0)
    first, second = torch.nn.Linear(8, 8), torch.nn.Linear(8, 3)
    x = torch.randn(4, 8)
    second(first(x).relu()).sum().backward()
    first_t, second_t = copy.deepcopy(first).to("tpu:0"), copy.deepcopy(second).to("tpu:1")
    first_t.zero_grad()
    second_t.zero_grad()
    second_t(first_t(x.to("tpu:0")).relu().to("tpu:1")).sum().backward()
    assert first_t.weight.grad.device == torch.device("tpu:0")
    assert second_t.weight.grad.device == torch.device("tpu:1")
    torch.testing.assert_close(first_t.weight.grad.cpu(), first.weight.grad)
    torch.testing.assert_close(second_t.weight.grad.cpu(), second.weight.grad)


SWITCH_CHILD = """
import json, torch, torch_tpu
torch_tpu.set_eager_mode("fused")
x = torch.randn(32, 32)
xt = x.to("tpu")
torch_tpu.metrics.reset()
def step(i):  # one structure of ~40 ops; the scale is a run-time parameter
    y, z = xt * (i + 1), x * (i + 1)
    for _ in range(10):
        y, z = (y @ xt).tanh() * 0.5 + y, (z @ x).tanh() * 0.5 + z
    torch.testing.assert_close(y.cpu(), z, rtol=1e-4, atol=1e-4)
for i in range(12):
    step(i)
m = torch_tpu._C._metrics()  # not torch_tpu.metrics(wait=True): that would settle the compiles first
print(json.dumps([m["fused_switches"], m["fused_compile_waits"], m["fused_graphs_compiled"]]))
"""


def test_fused_hot_structure_switches_within_a_bound(tmp_path):
    # TORCH_TPU_FUSED_WAIT_AFTER=1 and WAIT_RATIO=0 (the count alone decides): the third flush of
    # a structure runs its whole program, even though its compile (hundreds of ms at nice 19) is
    # far from done after one step of a few ms: that flush finishes it.
    from conftest import run_python

    out = run_python(SWITCH_CHILD, {"TORCH_TPU_CACHE_DIR": str(tmp_path), "TORCH_TPU_FUSED_WAIT_AFTER": "1",
                                     "TORCH_TPU_FUSED_WAIT_RATIO": "0"})
    assert out.returncode == 0, out.stderr
    switches, waits, compiled = json.loads(out.stdout.strip().splitlines()[-1])
    assert switches == {"2": 1} and compiled == 1, (switches, waits, compiled)
    assert waits in (0, 1)


def test_fused_several_compile_threads(tmp_path):
    # Two workers compile two structures at once; every result is right and both switch.
    from conftest import run_python

    code = SWITCH_CHILD.replace("for i in range(12):\n    step(i)",
                                "for i in range(12):\n    step(i)\n    (xt.sin() * i).exp().sum().item()")
    out = run_python(code, {"TORCH_TPU_CACHE_DIR": str(tmp_path), "TORCH_TPU_FUSED_COMPILE_THREADS": "2",
                                 "TORCH_TPU_FUSED_WAIT_RATIO": "0"})
    assert out.returncode == 0, out.stderr
    switches, waits, compiled = json.loads(out.stdout.strip().splitlines()[-1])
    assert compiled == 2 and sum(switches.values()) == 2, (switches, waits, compiled)
    assert all(int(k) <= 4 for k in switches), switches  # COMPILE_AFTER 2 + WAIT_AFTER 3 - 1 (WAIT_RATIO 0)


def test_fused_one_op_graph_runs_its_own_program(tmp_path):
    # A graph of one op is that op's program: it is never compiled whole.
    from conftest import run_python

    code = """
import json, torch, torch_tpu
torch_tpu.set_eager_mode("fused")
x = torch.randn(64)
xt = x.to("tpu")
torch_tpu.metrics.reset()
for i in range(5):
    torch.testing.assert_close((xt * (i + 2)).cpu(), x * (i + 2))
m = torch_tpu.metrics(wait=True)
print(json.dumps([m["fused_graphs_run"], m["fused_graphs_compiled"], m["fused_switches"]]))
"""
    out = run_python(code, {"TORCH_TPU_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [5, 0, {}]
