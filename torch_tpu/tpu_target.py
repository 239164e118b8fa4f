"""Compiling every program for a TPU topology as well, on a machine with or without a TPU.

``TORCH_TPU_ALSO_COMPILE_FOR=v5e:2x2`` (a comma list is allowed: ``v5e:2x2,v6e:1x1``) or
``torch_tpu.tpu_target.enable("v5e:2x2")``: each program the process compiles or loads from the disk
cache (strict per-op programs, fused graphs, torch.compile graphs, custom kernels) is also compiled by
libtpu for that topology, and :func:`report` gives one row per program: whether it compiled (or the
compiler's error), the cost model's FLOPs, HBM bytes and time, memory and relayout copies. These are
the compiler's estimates, not measurements. The programs compiled are the ones this process builds for
its own platform; on a non-TPU platform set TORCH_TPU_TPU_LOWERINGS=1 as well to build (and run) the
variants a TPU would build (README, "TPU refusals"). A JAX kernel (torch_tpu.kernels.from_jax) is the
exception: the program compiled for the topology calls the kernel exported for TPU, so a Pallas kernel
that runs interpreted on the CPU plugin is compiled as its Mosaic ``tpu_custom_call``.

libtpu aborts the whole process on some programs (a convert from f32 to complex<f64>), so it runs in a
worker process (torch_tpu/_tpu_compile_worker.py) that is restarted after a crash, and the program is
recorded as "the TPU compiler aborted (signal N)". Compiles run on a background thread; ``report()``
waits for those still queued. :func:`compile_module` compiles one StableHLO text synchronously.
"""

import atexit
import importlib.util
import os
import pickle
import re
import signal
import subprocess
import sys
import threading

from ._hlo_proto import count_copies, hlo_text

LIBTPU_REQUIREMENT = "libtpu==0.0.42.*"


class TpuTargetError(RuntimeError):
    """libtpu is missing, or a topology it does not know."""


def _find_libtpu():
    """The path of libtpu.so: TORCH_TPU_LIBTPU_PATH, else the installed libtpu package's."""
    path = os.environ.get("TORCH_TPU_LIBTPU_PATH")
    if not path:
        spec = importlib.util.find_spec("libtpu")
        if spec is None or not spec.submodule_search_locations:
            path = None
        else:
            path = os.path.join(list(spec.submodule_search_locations)[0], "libtpu.so")
    if not path or not os.path.isfile(path):
        where = f" (no file at {path})" if path else ""
        raise TpuTargetError(
            f"compiling for a TPU topology needs libtpu, the TPU compiler{where}: "
            f"pip install 'torch-tpu[tpu]' (or pip install '{LIBTPU_REQUIREMENT}')")
    return path


def _extension_path():
    spec = importlib.util.find_spec("torch_tpu._tpu_compiler")
    if spec is None or not spec.origin:
        raise TpuTargetError("torch_tpu._tpu_compiler is missing: this torch-tpu build has no TPU topology compiler")
    return spec.origin


class _Worker:
    """One long-lived worker process; started on first use and again after it dies."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc = None

    def _start(self):
        env = dict(os.environ)
        # Without these libtpu asks the GCP metadata server about the TPU it runs on, 30 tries a key.
        env.setdefault("TPU_SKIP_MDS_QUERY", "1")
        # libtpu takes /tmp/libtpu_lockfile to own the TPU; these workers own none, and several
        # (other processes, other users' tests) may run at once.
        env.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        log = os.environ.get("TORCH_TPU_TPU_COMPILER_LOG")  # where libtpu's own messages go
        stderr = open(log, "ab") if log else subprocess.DEVNULL
        worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_tpu_compile_worker.py")
        self._proc = subprocess.Popen(
            [sys.executable, worker, _extension_path(), _find_libtpu()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
        if log:
            stderr.close()

    def compile(self, topology, text, num_replicas, num_partitions):
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            try:
                pickle.dump((topology, text, num_replicas, num_partitions), self._proc.stdin)
                self._proc.stdin.flush()
                return pickle.load(self._proc.stdout)
            except (EOFError, BrokenPipeError, pickle.UnpicklingError):
                code = self._proc.wait()
                self._proc = None
                if code < 0:
                    try:
                        name = signal.Signals(-code).name
                    except ValueError:
                        name = "unknown"
                    why = f"the TPU compiler aborted (signal {-code}, {name})"
                else:
                    why = f"the TPU compiler exited (status {code})"
                return {"compiled": False, "error": why, "crashed": True}

    def close(self):
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.stdin.close()
                self._proc.wait()
            self._proc = None


_worker = _Worker()


def _partitions(text):
    def attr(name):
        m = re.search(rf"mhlo\.{name} = (\d+)", text[:2000])
        return int(m.group(1)) if m else 1
    return attr("num_replicas"), attr("num_partitions")


def _row(name, topology, answer):
    mb = 1e6
    hlo = ""
    if answer.get("optimized_program"):
        hlo = hlo_text(answer["optimized_program"], answer.get("optimized_format", "hlo"))
    ok = bool(answer.get("compiled"))
    flops = answer.get("flops", -1)
    hbm = answer.get("bytes_accessed", -1)
    return {
        "name": name,
        "topology": topology,
        "ok": ok,
        "error": answer.get("error", ""),
        "flops": flops,
        "gflop": flops / 1e9 if ok and flops >= 0 else None,
        "bytes_accessed": hbm,
        "hbm_mb": hbm / mb if ok and hbm >= 0 else None,
        "optimal_seconds": answer.get("optimal_seconds"),
        "modelled_ms": answer["modelled_seconds"] * 1e3 if ok and answer.get("modelled_seconds", -1) >= 0 else None,
        "unmodelled": answer.get("unmodelled_instructions") if ok else None,
        "argument_mb": answer["argument_bytes"] / mb if ok and answer.get("argument_bytes", -1) >= 0 else None,
        "output_mb": answer["output_bytes"] / mb if ok and answer.get("output_bytes", -1) >= 0 else None,
        "temp_mb": answer["temp_bytes"] / mb if ok and answer.get("temp_bytes", -1) >= 0 else None,
        "code_mb": answer["generated_code_bytes"] / mb if ok and answer.get("generated_code_bytes", -1) >= 0 else None,
        "copies": count_copies(hlo) if ok else None,
        "compile_s": answer.get("compile_seconds"),
        "optimized_hlo": hlo,
    }


def compile_module(text, topology, num_partitions=None, num_replicas=None, name="module"):
    """Compiles one StableHLO module text for ``topology`` ("v5e:2x2") in the worker and returns its row
    (a dict: name, topology, ok, error, flops, gflop, bytes_accessed, hbm_mb, optimal_seconds,
    modelled_ms, unmodelled, argument_mb, output_mb, temp_mb, code_mb, copies, compile_s: libtpu's
    compile time in seconds, optimized_hlo).
    The replica and partition counts default to the module's mhlo.num_replicas / mhlo.num_partitions.
    A compiler error or abort is in the row (ok False), never raised; a missing libtpu or an unknown
    topology raises TpuTargetError."""
    replicas, partitions = _partitions(text)
    answer = _worker.compile(topology, text, num_replicas or replicas, num_partitions or partitions)
    if answer.get("setup_error"):
        raise TpuTargetError(answer["error"])
    return _row(name, topology, answer)


# ---- every program of the process -------------------------------------------------------------

_topologies = []
_rows = []
_state_lock = threading.Lock()  # _topologies, _rows
_work_lock = threading.Lock()  # held while a batch of logged programs is compiled
_thread = None


def _dump_beside(dump_path, topology, hlo):
    stem = dump_path[:-5] if dump_path.endswith(".mlir") else dump_path
    path = f"{stem}.tpu-{topology.replace(':', '_')}.hlo"
    try:
        with open(path, "w") as f:
            f.write(f"// TPU-optimised HLO for {topology} (libtpu), of {os.path.basename(dump_path)}\n")
            f.write(hlo)
    except OSError as e:
        print(f"torch_tpu: cannot write {path}: {e}", file=sys.stderr)


_compiled = {}  # (topology, module text) -> its row: a program built twice is compiled once


def _kernels_tpu_form(text, topology):
    """The program with its JAX kernels in their TPU form (torch_tpu.kernels.tpu_form): (text, the
    kernels' op names replaced, errors). Kernels exist only once torch_tpu.kernels is imported."""
    kernels = sys.modules.get("torch_tpu.kernels")
    if kernels is None:
        return text, [], []
    return kernels.tpu_form(text, topology)


def _process(programs):
    with _state_lock:
        topologies = list(_topologies)
    for name, run_text, dump_path, from_disk, program_id in programs:
        for topology in topologies:
            text, tpu_kernels, kernel_errors = _kernels_tpu_form(run_text, topology)
            known = _compiled.get((topology, text))
            if known is not None:
                row = dict(known, name=name)
            elif kernel_errors:
                row = _row(name, topology, {"compiled": False, "error": "; ".join(kernel_errors)})
            else:
                try:
                    row = compile_module(text, topology, name=name)
                    _compiled[(topology, text)] = row
                except TpuTargetError as e:
                    row = _row(name, topology, {"compiled": False, "error": str(e)})
            row["tpu_kernels"] = tpu_kernels
            row["program_id"] = program_id
            row["from_disk"] = from_disk
            row["dump_path"] = dump_path
            row["module_text"] = text
            if dump_path and row["optimized_hlo"]:
                _dump_beside(dump_path, topology, row["optimized_hlo"])
            with _state_lock:
                _rows.append(row)


_stopping = threading.Event()
# The drain thread waits for programs without holding _work_lock (a lock held across the wait and
# taken again at once starved report(), whose waiter Python's unfair lock never woke in time).
# Its takes are numbered (started, finished), so report(wait=True) waits for the ones started
# before it was called, and for no later one: a monotonic count cannot starve the waiter.
_takes = threading.Condition()
_takes_started = 0
_takes_finished = 0


def _drain_forever():
    global _takes_started, _takes_finished
    from . import _C
    while not _stopping.is_set():
        with _takes:
            _takes_started += 1
        try:
            programs = _C._tpu_target_take(0.2)
            if programs:
                with _work_lock:
                    _process(programs)
        finally:
            with _takes:
                _takes_finished += 1
                _takes.notify_all()


def _stop_at_exit():
    # A daemon thread that wakes inside the C++ wait while Python finalizes is killed there, and
    # that ends the process with std::terminate: stop it first.
    _stopping.set()
    if _thread is not None:
        _thread.join(timeout=5)
    _worker.close()


def _parse(topologies):
    if isinstance(topologies, str):
        topologies = topologies.split(",")
    names = [t.strip() for t in topologies if t and t.strip()]
    if not names:
        raise ValueError("no TPU topology given: expected names like 'v5e:2x2' or 'v5e:2x2,v6e:1x1'")
    for t in names:
        if not re.match(r"^[a-zA-Z0-9_ ]+[=_:][0-9x]+$", t):
            raise ValueError(f"'{t}' is not a TPU topology name: expected names like v5e:2x2, v6e:1x1, v4:2x2x1")
    return names


def enable(topologies):
    """Also compiles every program from now on for ``topologies`` ("v5e:2x2", a comma list, or a list).
    Programs compiled before this call are not reported (set TORCH_TPU_ALSO_COMPILE_FOR to have them all).
    Raises TpuTargetError naming the package when libtpu is not installed."""
    global _thread
    names = _parse(topologies)
    _find_libtpu()
    _extension_path()
    from . import _C
    with _state_lock:
        for t in names:
            if t not in _topologies:
                _topologies.append(t)
    _C._tpu_target_set_logging(True)
    if _thread is None:
        _thread = threading.Thread(target=_drain_forever, name="torch_tpu tpu_target", daemon=True)
        _thread.start()
        atexit.register(_stop_at_exit)


def disable():
    """Stops compiling for TPU topologies (the rows so far stay)."""
    from . import _C
    _C._tpu_target_set_logging(False)
    with _state_lock:
        _topologies.clear()


def runs():
    """{program_id of a row: how often this process ran that program while logging was on}: to
    weigh each program by how often one step runs it (runs() after the step minus runs() before)."""
    from . import _C
    return dict(_C._tpu_target_runs())


def topologies():
    with _state_lock:
        return list(_topologies)


def report(wait=True, clear=False):
    """The rows so far (list of dicts, see compile_module, plus program_id (see runs()), from_disk,
    dump_path, module_text: the StableHLO compiled, and tpu_kernels: the custom kernels whose TPU
    form it calls in place of the form that runs here, e.g. a Pallas kernel's Mosaic
    tpu_custom_call). ``wait``: first compiles every program still queued."""
    if wait and topologies():
        from . import _C
        with _work_lock:
            _process(_C._tpu_target_take(0))
        # What this take found no more, a take of the drain thread has: one counted by now (it
        # counts itself before it takes). Wait for those takes (at most a 0.2 s wait, plus that
        # batch's compiles) to finish. Read before the take, the count missed a take that began
        # between the two and took the last programs.
        with _takes:
            started = _takes_started
        if _thread is not None and _thread is not threading.current_thread():
            with _takes:
                _takes.wait_for(lambda: _takes_finished >= started or _stopping.is_set())
    with _state_lock:
        rows = list(_rows)
        if clear:
            _rows.clear()
    return rows


def totals(rows):
    ok = [r for r in rows if r["ok"]]
    return {
        "programs": len(rows),
        "compiled": len(ok),
        "errors": len(rows) - len(ok),
        "gflop": sum(r["gflop"] or 0 for r in ok),
        "hbm_mb": sum(r["hbm_mb"] or 0 for r in ok),
        "modelled_ms": sum(r["modelled_ms"] or 0 for r in ok),
        "unmodelled": sum(r["unmodelled"] or 0 for r in ok),
        "temp_mb": max((r["temp_mb"] or 0 for r in ok), default=0),
        "copies": sum(r["copies"] or 0 for r in ok),
    }


def format_report(rows):
    """A table: one row per program and the totals (temp MB: the largest of any program)."""
    def num(v, fmt):
        width = int(re.match(r"\d+", fmt).group(0))
        return f"{'-':>{width}}" if v is None else format(v, fmt)
    head = f"{'program':<44} {'topology':<9} {'status':<6} {'GFLOP':>9} {'HBM MB':>9} {'model ms':>9} " \
           f"{'unmod':>5} {'temp MB':>8} {'copies':>6}"
    lines = ["TPU compile report (libtpu's cost model: estimates, not measurements)", head, "-" * len(head)]
    for r in rows:
        status = "ok" if r["ok"] else "error"
        lines.append(f"{r['name'][:44]:<44} {r['topology']:<9} {status:<6} {num(r['gflop'], '9.3f')} "
                     f"{num(r['hbm_mb'], '9.3f')} {num(r['modelled_ms'], '9.4f')} {num(r['unmodelled'], '5d')} "
                     f"{num(r['temp_mb'], '8.3f')} {num(r['copies'], '6d')}")
        if not r["ok"]:
            lines.append(f"    error: {r['error'].splitlines()[0][:200] if r['error'] else ''}")
    t = totals(rows)
    lines.append("-" * len(head))
    lines.append(f"{'total: ' + str(t['programs']) + ' programs, ' + str(t['errors']) + ' errors':<44} "
                 f"{'':<9} {'':<6} {t['gflop']:9.3f} {t['hbm_mb']:9.3f} {t['modelled_ms']:9.4f} "
                 f"{t['unmodelled']:5d} {t['temp_mb']:8.3f} {t['copies']:6d}")
    return "\n".join(lines)


def _enable_from_environment():
    value = os.environ.get("TORCH_TPU_ALSO_COMPILE_FOR", "")
    if value.strip():
        enable(value)
