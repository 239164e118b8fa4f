"""One command that checks torch-tpu on an accelerator machine and writes one report file.

    python tools/device_check.py [--wheels DIR] [--report FILE] [--budget-s 360] [--allow-cpu]

On a machine with a non-CPU PJRT plugin (a GPU image with jax-cuda13-pjrt, a TPU VM with libtpu):
1. uses the machine's own PyTorch (this interpreter's), and installs every wheel in --wheels
   (default .whl/ when present: the torch_tpu wheel built for this PyTorch and Python, and what else
   the image lacks, e.g. transformers 5.24) into a folder put first on PYTHONPATH, without touching
   the image; with no torch_tpu wheel and no installed torch_tpu it builds from source (--build;
   needs scikit-build-core, cmake, ninja, and pjrt_c_api.h: --pjrt-include DIR);
2. prints `python -m torch_tpu info`;
3. runs a curated part of the suite (SELECTION, sized for about 6 minutes on a 16-core H200 host),
   each file in its own pytest process, starting no new file once --budget-s has passed;
4. runs bench/accelerator.py when the checkout has it;
5. writes one report: platform, versions, info, per-file pass/fail/skip counts and times, the
   failures' short tracebacks, the benchmark's output.
On the XLA CPU plugin it refuses unless --allow-cpu is given (which `tests/test_device_check.py`
uses so that the script keeps working). Standard library only: it runs before anything is installed.
"""
import argparse
import atexit
import datetime
import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (file, -k expression or None, why it is here). Chosen by what an accelerator shows first; -k keeps
# the files whose full run compiles hundreds of programs (about 1 s each on the CUDA plugin) short.
SELECTION = [
    ("tests/test_device_module.py", None, "torch.tpu: devices, RNG, memory statistics, streams, properties"),
    ("tests/test_views.py", None, "views and in-place writes through every view kind"),
    ("tests/test_cuda_coexistence.py", None, "torch.cuda and Inductor on CUDA tensors beside torch_tpu"),
    ("tests/test_errors.py", None, "errors: shapes, devices, out of memory, a bad plugin"),
    ("tests/test_training.py", None, "MLP training steps (AdamW, SGD) against the CPU's"),
    ("tests/test_grouped_mm.py", None, "_grouped_mm through chlo.ragged_dot"),
    ("tests/test_compile.py", "mlp or llama", "torch.compile(backend='tpu'): MLP and Llama, forward and training"),
    ("tests/test_hf_models.py", "logits or placements or (greedy and (llama or gpt2)) or adamw or trainer",
     "Hugging Face models: logits of 9 families, placement, generate, AdamW, Trainer"),
    ("tests/test_moe_models.py", "logits or training", "mixture-of-experts models through grouped_mm"),
]
BENCH = "bench/accelerator.py"


def _env(site):
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


_NEUTRAL = []


def _scratch(prefix):
    """A temporary folder, removed when this script exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _neutral_dir():
    """Where every child process runs: never the checkout, whose torch_tpu/ (no compiled extension
    there on a device machine) would shadow the installed one, as `python -c` and `-m` put the
    working directory first on sys.path."""
    if not _NEUTRAL:
        _NEUTRAL.append(_scratch("device_check_cwd_"))
    return _NEUTRAL[0]


def _run(cmd, env, timeout, cwd=None):
    """(exit status, output); 124 and what was printed when it ran past `timeout` seconds."""
    cwd = cwd or _neutral_dir()
    try:
        r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        return 124, (out.decode(errors="replace") if isinstance(out, bytes) else out) + f"\n[timed out after {timeout} s]"


def install(args, log):
    """Installs the carried wheels (or builds); returns the folder put on PYTHONPATH ('' for none)."""
    wheels = sorted(glob.glob(os.path.join(args.wheels, "*.whl"))) if args.wheels else []
    site = ""
    if wheels:
        site = args.site or _scratch("torch_tpu_site_")
        # --no-deps: a wheel's requirements are the image's or carried beside it; pip must not
        # replace the image's torch. --target leaves the image untouched.
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
               "--upgrade", "--target", site] + wheels
        rc, out = _run(cmd, dict(os.environ), 600)
        log(f"installed {len(wheels)} wheel(s) into {site}: " + ", ".join(os.path.basename(w) for w in wheels))
        if rc != 0:
            raise SystemExit(f"device_check: pip could not install the wheels:\n{out}")
    rc, out = _run([sys.executable, "-c", "import torch_tpu"], _env(site), 300)
    if rc == 0:
        return site
    if not args.build:
        raise SystemExit("device_check: torch_tpu does not import with this Python and PyTorch:\n" + out[-3000:] +
                         "\nCarry a wheel built for them (README: 'Checking an accelerator machine'), "
                         "or pass --build (with --pjrt-include DIR) to build from this checkout.")
    site = site or args.site or _scratch("torch_tpu_site_")
    env = dict(os.environ)
    if args.pjrt_include:
        env["CMAKE_ARGS"] = (env.get("CMAKE_ARGS", "") + f" -DPJRT_INCLUDE_DIR={args.pjrt_include}").strip()
    log(f"building torch_tpu from {ROOT} (CMAKE_ARGS={env.get('CMAKE_ARGS', '')})")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation",
           "--target", site, ROOT]
    rc, out = _run(cmd, env, 1800)
    if rc != 0:
        raise SystemExit(f"device_check: the build failed:\n{out[-6000:]}")
    return site


def _has(program):
    return any(os.access(os.path.join(d, program), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep))


def platform_of(env):
    code = ("import torch, torch_tpu; print('PLATFORM', torch_tpu.platform(), torch.tpu.device_count(), "
            "torch.__version__, torch_tpu.__version__); print('TORCH', torch.__file__)")
    rc, out = _run([sys.executable, "-c", code], env, 300)
    print("\n".join(line for line in out.splitlines() if line.startswith("TORCH ")), flush=True)
    for line in out.splitlines():
        if line.startswith("PLATFORM "):
            _, platform, count, torch_version, tpu_version = line.split()
            return platform, int(count), torch_version, tpu_version
    raise SystemExit(f"device_check: the device does not start:\n{out[-3000:]}")


def run_file(path, expr, env, timeout, workdir):
    """Runs one test file in its own pytest process; returns its counts, failures and time."""
    xml = os.path.join(workdir, os.path.basename(path) + ".xml")
    cmd = [sys.executable, "-m", "pytest", os.path.join(ROOT, path), "-q", "-p", "no:cacheprovider", "--tb=short", f"--junitxml={xml}"]
    if expr:
        cmd += ["-k", expr]
    start = time.monotonic()
    rc, out = _run(cmd, env, timeout)
    result = {"file": path, "k": expr, "rc": rc, "seconds": time.monotonic() - start, "passed": 0, "failed": 0,
              "skipped": 0, "errors": 0, "failures": [], "skip_reasons": {}}
    if not os.path.exists(xml):  # a crash or a timeout before pytest wrote anything
        result["errors"] = 1
        result["failures"].append((path, "exit status %d, no report:\n%s" % (rc, "\n".join(out.splitlines()[-40:]))))
        return result
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            result["failed" if bad.tag == "failure" else "errors"] += 1
            text = (bad.text or bad.get("message") or "").strip().splitlines()
            result["failures"].append((name, "\n".join(text[-25:])))
        elif skip is not None:
            result["skipped"] += 1
            reason = (skip.get("message") or "").strip()[:200]
            result["skip_reasons"][reason] = result["skip_reasons"].get(reason, 0) + 1
        else:
            result["passed"] += 1
    if rc in (124, -9) or (rc not in (0, 1, 5) and not result["failures"]):
        # Killed mid-file (timeout, crash): say so; the counts above are what finished.
        result["errors"] += 1
        result["failures"].append((path, "exit status %d:\n%s" % (rc, "\n".join(out.splitlines()[-40:]))))
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheels", default=os.path.join(ROOT, ".whl") if os.path.isdir(os.path.join(ROOT, ".whl")) else "",
                   help="folder of wheels to install first (default: .whl/ when present)")
    p.add_argument("--site", default="", help="where to install them (default: a fresh temporary folder)")
    p.add_argument("--build", action="store_true", help="build torch_tpu from this checkout when it does not import")
    p.add_argument("--pjrt-include", default="", help="folder holding pjrt_c_api.h, for --build")
    p.add_argument("--report", default="", help="report file (default: $OUT/device_check.md, else build/device_check.md)")
    p.add_argument("--budget-s", type=float, default=360, help="start no new test file after this many seconds")
    p.add_argument("--file-timeout-s", type=float, default=240, help="the most one test file may take")
    p.add_argument("--bench-timeout-s", type=float, default=180, help="the most the benchmark may take")
    p.add_argument("--time-limit-s", type=float, default=560,
                   help="the whole check ends by then (the device machine's run tool allows 600 s a command)")
    p.add_argument("--no-bench", action="store_true", help="skip bench/accelerator.py")
    p.add_argument("--bench", default=BENCH, help="the benchmark script (default: %(default)s)")
    p.add_argument("--no-tests", action="store_true", help="run only the benchmark (a second command, when both "
                   "do not fit one run: --no-tests --bench-timeout-s 540)")
    p.add_argument("--bench-args", default="", help="arguments for bench/accelerator.py, as --bench-args=\"--setups 'tpu "
                   "compiled,cuda eager'\" (split like a shell line)")
    p.add_argument("--select", nargs="*", default=None,
                   help="test files (optionally FILE::-kEXPR) to run instead of the curated selection")
    p.add_argument("--allow-cpu", action="store_true", help="run on the XLA CPU plugin too (to test this script)")
    p.add_argument("--list", action="store_true", help="print the plan and exit")
    args = p.parse_args(argv)

    selection = SELECTION
    if args.no_tests:
        selection = []
    elif args.select is not None:
        selection = [(s.split("::-k", 1)[0], s.split("::-k", 1)[1] if "::-k" in s else None, "chosen by --select")
                     for s in args.select]
    if args.list:
        print(f"python: {sys.executable} ({sys.version.split()[0]})")
        print(f"wheels: {args.wheels or '(none: the installed torch_tpu, or --build)'}")
        for path, expr, why in selection:
            print(f"test: {path}" + (f" -k '{expr}'" if expr else "") + f"  # {why}")
        bench = os.path.join(ROOT, args.bench)
        print(f"bench: {args.bench} {args.bench_args}".rstrip() + ("" if os.path.exists(bench) else " (not in this checkout: skipped)"))
        return 0

    out_dir = os.environ.get("OUT") or os.path.join(ROOT, "build")
    report_path = args.report or os.path.join(out_dir, "device_check.md")
    os.makedirs(os.path.dirname(os.path.abspath(report_path)), exist_ok=True)
    began = time.monotonic()
    lines = []

    def log(msg):
        print(f"[device_check {time.monotonic() - began:6.1f}s] {msg}", flush=True)

    site = install(args, log)
    env = _env(site)
    platform, count, torch_version, tpu_version = platform_of(env)
    log(f"platform {platform}, {count} device(s), PyTorch {torch_version}, torch_tpu {tpu_version}")
    if platform == "cpu" and not args.allow_cpu:
        print("device_check: the device runs on the XLA CPU plugin here, so this is no accelerator check. "
              "Run it on a GPU or TPU machine (README: 'Checking an accelerator machine'), or pass --allow-cpu "
              "to exercise the script itself.", file=sys.stderr)
        return 2

    rc, info = _run([sys.executable, "-m", "torch_tpu", "info"], env, 300)
    print(info, flush=True)
    rc, gpus = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                    env, 60) if _has("nvidia-smi") else (1, "")
    lines += [f"# torch-tpu device check ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
              f"- platform: **{platform}**, {count} device(s)",
              f"- Python {sys.version.split()[0]} ({sys.executable}), PyTorch {torch_version}, torch_tpu {tpu_version}",
              f"- installed from: {site or '(already installed)'}"] + \
             ([f"- nvidia-smi: {g.strip()}" for g in gpus.splitlines() if g.strip()] if rc == 0 else []) + \
             ["", "## python -m torch_tpu info", "", "```",
              info.rstrip(), "```", "", "## Tests", "",
              "| file | -k | passed | failed | errors | skipped | seconds |", "|---|---|---|---|---|---|---|"]
    results, not_run = [], []
    with tempfile.TemporaryDirectory(prefix="device_check_") as work:
        for path, expr, _ in selection:
            if not os.path.exists(os.path.join(ROOT, path.split("::")[0])):
                not_run.append((path, "not in this checkout"))
                continue
            if time.monotonic() - began > args.budget_s:
                not_run.append((path, f"over the {args.budget_s:.0f} s budget"))
                continue
            log(f"pytest {path}" + (f" -k '{expr}'" if expr else ""))
            # A file may run past the budget by a minute, never into the benchmark's time.
            timeout = max(30.0, min(args.file_timeout_s, args.budget_s + 60 - (time.monotonic() - began)))
            r = run_file(path, expr, env, timeout, work)
            log(f"  {r['passed']} passed, {r['failed']} failed, {r['errors']} errors, {r['skipped']} skipped "
                f"in {r['seconds']:.0f} s")
            results.append(r)
    for r in results:
        lines.append(f"| {r['file']} | {r['k'] or ''} | {r['passed']} | {r['failed']} | {r['errors']} | "
                     f"{r['skipped']} | {r['seconds']:.0f} |")
    total = {k: sum(r[k] for r in results) for k in ("passed", "failed", "errors", "skipped")}
    lines.append(f"| **all** | | {total['passed']} | {total['failed']} | {total['errors']} | {total['skipped']} | "
                 f"{sum(r['seconds'] for r in results):.0f} |")
    for path, why in not_run:
        lines.append(f"\nNot run: {path} ({why})")
    failures = [f for r in results for f in r["failures"]]
    if failures:
        lines += ["", "## Failures", ""]
        for name, text in failures:
            lines += [f"### {name}", "```", text, "```"]
    skips = {}
    for r in results:
        for reason, n in r["skip_reasons"].items():
            skips[reason] = skips.get(reason, 0) + n
    if skips:
        lines += ["", "## Skip reasons", ""] + [f"- {n} x {reason}" for reason, n in sorted(skips.items())]

    lines += ["", "## Benchmark", ""]
    bench = os.path.join(ROOT, args.bench)
    bench_rc = None
    if args.no_bench:
        lines.append("skipped (--no-bench)")
    elif not os.path.exists(bench):
        lines.append(f"{args.bench} is not in this checkout: no benchmark ran.")
        log(f"{args.bench} is not in this checkout: no benchmark")
    else:
        log(f"python {args.bench} {args.bench_args}".rstrip())
        start = time.monotonic()
        timeout = max(30.0, min(args.bench_timeout_s, args.time_limit_s - (time.monotonic() - began)))
        cmd = [sys.executable, bench] + shlex.split(args.bench_args)
        bench_rc, out = _run(cmd, env, timeout)
        lines += [f"exit status {bench_rc} after {time.monotonic() - start:.0f} s", "", "```", out.rstrip()[-12000:], "```"]
    elapsed = time.monotonic() - began
    lines += ["", f"Whole check: {elapsed:.0f} s."]
    with open(report_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    log(f"report: {report_path}")
    print("\n".join(line for line in lines if line.startswith("|") or line.startswith("Not run")), flush=True)
    return 0 if not failures and bench_rc in (0, None) else 1


if __name__ == "__main__":
    sys.exit(main())
