"""A sync that waits on a long device program (csrc/runtime/long_wait.h): other Python threads
keep running, Ctrl-C raises KeyboardInterrupt within about 50 ms while the program keeps running
(its result is read correctly afterwards, and the process stays usable), and a wait past
TORCH_TPU_WAIT_NOTICE_S prints one notice naming the program. Each case runs in a fresh process
in the suite's eager mode (TORCH_TPU_EAGER_MODE)."""
import os
import textwrap

import pytest

from conftest import cpu_plugin_only, run_python

# y @ I, K times: each product costs a full 2048x2048 matmul (the identity is a run-time input)
# and leaves y exact, so the value read after the interrupt is checked against x itself. K is
# chosen so that the program runs about 1.5 s on this machine; at most 14 products keep every
# execution in flight at once (no submission waits).
LONG_PROGRAM = """
    import os, signal, sys, threading, time
    # Ctrl-C's usual Python handler is what these tests exercise; a child inherits SIGINT ignored
    # when pytest runs with it ignored (a background job, or a library an earlier test loaded).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    import torch, torch_tpu
    N = 2048
    x = torch.randn(N, N, generator=torch.Generator().manual_seed(0))
    xt, eye = x.to("tpu"), torch.eye(N).to("tpu")

    def products(k):
        y = xt
        for _ in range(k):
            y = y @ eye
        return y

    products(1).cpu()  # compiles
    start = time.perf_counter(); products(1).cpu(); step = time.perf_counter() - start
    K = max(3, min(14, int(1.5 / step) + 1))
"""


def child(code, **env):
    env.setdefault("TORCH_TPU_QUIET", "0")
    r = run_python(textwrap.dedent(LONG_PROGRAM) + textwrap.dedent(code), env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@cpu_plugin_only("the program is sized to run about 1.5 s on the CPU (at most 14 matmuls of 2048x2048); "
                 "an accelerator finishes it before the interrupt arrives")
def test_ctrl_c_interrupts_a_long_wait_and_the_values_stay_readable():
    # One process (a fresh interpreter costs seconds): each sync waits on its own long program,
    # is interrupted 0.3 s in, and the value is read afterwards. The first wait passes the
    # notice threshold, and later ones do not print it again.
    r = child("""
        SYNCS = {"cpu": lambda: y.cpu(), "item": lambda: y[0, 0].item(), "synchronize": torch.tpu.synchronize,
                 "print": lambda: print(y)}
        for sync, wait in SYNCS.items():
            y = products(K)
            ticks, sent = [], []
            def interrupt():
                sent.append(time.perf_counter())
                os.kill(os.getpid(), signal.SIGINT)
            def tick():  # another Python thread: runs while the main thread waits
                while not sent:
                    ticks.append(1)
                    time.sleep(0.01)
            threading.Timer(0.3, interrupt).start()
            ticker = threading.Thread(target=tick)
            ticker.start()
            try:
                wait()
                print(sync, "NOT INTERRUPTED")
            except KeyboardInterrupt:
                latency, running = time.perf_counter() - sent[0], torch_tpu._C._executions_in_flight(0)
                print(sync, "LATENCY %.3f RUNNING %d" % (latency, running))
                assert latency < 1.0 and running > 0, (latency, running)  # about 0.05 s; the program runs on
            ticker.join()
            assert len(ticks) >= 10, ticks  # about 30
            assert (xt[0, :3] + 1).cpu().tolist() == (x[0, :3] + 1).tolist()  # usable
            assert torch.equal(y.cpu(), x)  # the abandoned program's value
        print("ALL OK")
    """, TORCH_TPU_WAIT_NOTICE_S="0.15")
    assert "ALL OK" in r.stdout and "NOT INTERRUPTED" not in r.stdout, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if "waiting for the device" in line]
    assert len(lines) == 1, r.stderr  # eight long waits, one notice
    assert "aten::mm" in lines[0] and "Ctrl-C" in lines[0], lines[0]


def test_quiet_silences_the_wait_notice():
    r = child("""
        print("VALUE", torch.equal(products(K).cpu(), x))
    """, TORCH_TPU_WAIT_NOTICE_S="0", TORCH_TPU_QUIET="1")
    assert "VALUE True" in r.stdout, r.stdout
    assert "waiting for the device" not in r.stderr, r.stderr


@pytest.mark.parametrize("value", ["abc", "-1", "5s"])
def test_wait_notice_threshold_is_parsed_strictly(value):
    code = """
        import torch
        try:
            torch.ones(2, device="tpu")
            print("STARTED")
        except Exception as e:
            print("RAISED", type(e).__name__, e)
    """
    r = run_python(textwrap.dedent(code), env={"TORCH_TPU_WAIT_NOTICE_S": value})
    assert r.returncode == 0, r.stderr
    assert "RAISED" in r.stdout and "TORCH_TPU_WAIT_NOTICE_S" in r.stdout, r.stdout + r.stderr
