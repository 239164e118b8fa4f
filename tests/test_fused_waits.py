"""Fused mode waits only for the compiles it needs, and reading the counters never waits.

TORCH_TPU_TEST_COMPILE_DELAY_MS makes the background compile worker sleep before each job, as
a worker starved of CPU would."""
import json

from conftest import run_python

# Rounds of several graph structures, each seen once a round, like generate() calls over the
# graphs of a decode loop: round 2 queues every structure's whole-program compile, later rounds
# run op by op cheaply while the (slow) worker has not got to them.
ROUNDS_CHILD = """
import json, time, torch, torch_tpu
torch_tpu.set_eager_mode("fused")
x = torch.randn(64)
xt = x.to("tpu")
def round_(r):
    for n in range(2, 2 + STRUCTURES):  # a structure of 2n ops each
        y, z = xt, x
        for _ in range(n):
            y, z = y * 1.5 + r, z * 1.5 + r
        torch.testing.assert_close(y.cpu(), z, rtol=1e-4, atol=1e-3)
seconds = []
for r in range(ROUNDS):
    start = time.perf_counter()
    round_(r)
    seconds.append(time.perf_counter() - start)
start = time.perf_counter()
m = torch_tpu.metrics()
metrics_s = time.perf_counter() - start
settled = torch_tpu.metrics(wait=True)
print(json.dumps({"rounds": seconds, "metrics_s": metrics_s, "pending": m["background_compiles_pending"],
                  "waits": m["fused_compile_waits"], "compiled": m["fused_graphs_compiled"],
                  "settled_pending": settled["background_compiles_pending"],
                  "settled_programs": settled["programs_compiled"], "programs": m["programs_compiled"]}))
"""


def _rounds(tmp_path, structures=10, rounds=6, delay_ms=250, **env):
    code = ROUNDS_CHILD.replace("STRUCTURES", str(structures)).replace("ROUNDS", str(rounds))
    out = run_python(code, {"TORCH_TPU_CACHE_DIR": str(tmp_path), "TORCH_TPU_TEST_COMPILE_DELAY_MS": str(delay_ms),
                            "TORCH_TPU_FUSED_COMPILE_THREADS": "1", **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_no_round_after_the_first_waits_for_compiles_it_does_not_need(tmp_path):
    # Each structure's op-by-op flushes cost far less than its compile: no flush finishes a
    # compile (before, the 5th round compiled all ten in its flushes: 0.36 s for six, against
    # 9 ms for the 2nd round), and no round after the first is much slower than the second.
    seen = _rounds(tmp_path)
    assert seen["compiled"] == 10 and seen["waits"] == 0, seen
    rounds = seen["rounds"]
    assert max(rounds[2:]) < 10 * rounds[1] + 0.25, rounds
    # The counters came at once while the compiles waited for the worker, and say so.
    assert seen["pending"] >= 1 and seen["metrics_s"] < 0.5, seen
    # wait=True: settled, and the whole programs' compiles are counted.
    assert seen["settled_pending"] == 0 and seen["settled_programs"] >= seen["programs"] + seen["pending"], seen


def test_count_alone_still_waits_when_asked(tmp_path):
    # TORCH_TPU_FUSED_WAIT_RATIO=0: the count decides, as before; each structure's 5th flush
    # (COMPILE_AFTER 2 + WAIT_AFTER 3) finishes its own compile, ahead of the queue.
    seen = _rounds(tmp_path, structures=3, delay_ms=60000, TORCH_TPU_FUSED_WAIT_RATIO="0")
    assert seen["waits"] == 3 and seen["pending"] == 0, seen


HOT_CHILD = """
import json, torch, torch_tpu
torch_tpu.set_eager_mode("fused")
x = torch.randn(384, 384) / 20
xt = x.to("tpu")
torch_tpu.metrics.reset()
for i in range(20):  # a hot step whose op-by-op runs soon cost more than its compile
    y, z = xt * (i + 1), x * (i + 1)
    for _ in range(12):
        y, z = (y @ xt).tanh() + y, (z @ x).tanh() + z
    torch.testing.assert_close(y.cpu(), z, rtol=1e-3, atol=1e-3)
m = torch_tpu.metrics()
print(json.dumps([m["fused_switches"], m["fused_compile_waits"]]))
"""


def test_hot_structure_waits_once_op_by_op_has_paid_for_its_compile(tmp_path):
    # The worker never gets to it (a minute's delay); the structure's op-by-op flushes are slow
    # (big matmuls), so once they have cost about its compile time a flush finishes the compile
    # and the structure runs whole: op by op stays bounded on a starved worker.
    out = run_python(HOT_CHILD, {"TORCH_TPU_CACHE_DIR": str(tmp_path), "TORCH_TPU_TEST_COMPILE_DELAY_MS": "60000"})
    assert out.returncode == 0, out.stderr
    switches, waits = json.loads(out.stdout.strip().splitlines()[-1])
    assert waits == 1 and sum(switches.values()) == 1, (switches, waits)
    assert all(int(k) <= 12 for k in switches), switches
