"""Runs Hugging Face Diffusers' own fast tests for some test files twice, once with
torch_device = "tpu" and once on the CPU, offline, and prints per file and device how many tests
were collected, passed, failed and skipped, and which tests pass on CPU but fail on tpu.

    python tools/diffusers_tests.py --src /tmp/diffusers --tests pipelines/flux/test_pipeline_flux.py models/...
    make diffusers-tests DIFFUSERS_SRC=/tmp/diffusers TESTS="pipelines/dit/test_dit.py"

--src is a checkout of github.com/huggingface/diffusers matching the installed release (only its
tests/ folder is used); --tests are paths under <src>/tests (files or folders). The tpu run uses
torch_tpu/testing/diffusers_device_spec.py as DIFFUSERS_TEST_DEVICE_SPEC; the CPU run sets
TORCH_DEVICE_BACKEND_AUTOLOAD=0 so that torch_tpu is not loaded at all.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transformers_tests import parse_junit, pytest_config_args, summarize  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SPEC_MODULE = "torch_tpu.testing.diffusers_device_spec"
SHIM = "torch_tpu_diffusers_spec.py"
DEFAULT_TESTS = ["pipelines/ddpm/test_ddpm.py", "pipelines/ddim/test_ddim.py", "pipelines/dit/test_dit.py",
                 "pipelines/stable_diffusion/test_stable_diffusion.py", "pipelines/flux/test_pipeline_flux.py",
                 "models/transformers/test_models_dit_transformer2d.py",
                 "models/transformers/test_models_transformer_flux.py", "models/unets/test_models_unet_2d.py",
                 "models/unets/test_models_unet_2d_condition.py", "models/autoencoders/test_models_autoencoder_kl.py"]


def run_file(src, test, device, workdir, args):
    name = test.replace("/", "_").removesuffix(".py")
    junit = workdir / f"{name}-{device}.xml"
    cmd = [sys.executable, "-m", "pytest", str(src / "tests" / test), "--rootdir", str(src),
           *pytest_config_args(src), "-p", "no:cacheprovider", "-q", "-rN", f"--junitxml={junit}",
           *args.pytest_args]
    if args.k:
        cmd += ["-k", args.k]
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TORCH_TPU_QUIET="1",
               TOKENIZERS_PARALLELISM="false", DIFFUSERS_VERBOSITY="error")
    env.setdefault("RUN_SLOW", "0")
    env.setdefault("RUN_NIGHTLY", "0")
    for var in ("DIFFUSERS_TEST_DEVICE", "DIFFUSERS_TEST_BACKEND", "DIFFUSERS_TEST_DEVICE_SPEC"):
        env.pop(var, None)
    pythonpath = [str(src)]
    if device == "tpu":
        env.update(DIFFUSERS_TEST_DEVICE="tpu", DIFFUSERS_TEST_DEVICE_SPEC=SHIM)
        env.setdefault("TORCH_TPU_NUM_DEVICES", "2")
        pythonpath.append(str(REPO))
    else:
        env.update(DIFFUSERS_TEST_DEVICE="cpu", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env["PYTHONPATH"] = os.pathsep.join(pythonpath + [p for p in [os.environ.get("PYTHONPATH")] if p])
    log = workdir / f"{name}-{device}.log"
    if args.reuse and junit.exists():
        return parse_junit(junit), "reused", 0.0, log
    start = time.perf_counter()
    with open(log, "w") as out:
        try:
            rc = subprocess.run(cmd, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return parse_junit(junit), rc, time.perf_counter() - start, log


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, help="a diffusers checkout (its tests/ folder is used)")
    parser.add_argument("--tests", nargs="+", default=DEFAULT_TESTS,
                        help="paths under <src>/tests (one string with spaces also works)")
    parser.add_argument("--devices", nargs="+", default=["tpu", "cpu"], choices=["tpu", "cpu"])
    parser.add_argument("-k", default=None, help="pytest -k expression")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per file and device")
    parser.add_argument("--keep", default=None, help="folder to keep the junit files and logs in")
    parser.add_argument("--reuse", action="store_true", help="take the results a run left in --keep instead of "
                        "running that file and device again")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()

    src = Path(args.src).expanduser().resolve()
    if not (src / "tests" / "pipelines").is_dir():
        raise SystemExit(f"{src} does not look like a diffusers checkout (no tests/pipelines)")
    tests = [t.removeprefix("tests/") for spec in args.tests for t in spec.split()]
    missing = [t for t in tests if not (src / "tests" / t).exists()]
    if missing:
        raise SystemExit(f"not under {src}/tests: {' '.join(missing)}")

    workdir = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="tt_diffusers_"))
    workdir.mkdir(parents=True, exist_ok=True)
    # Diffusers imports the spec by module name = path minus ".py": a shim in the working directory.
    (workdir / SHIM).write_text(f"from {SPEC_MODULE} import *  # noqa: F401,F403\n"
                                f"from {SPEC_MODULE} import DEVICE_NAME  # noqa: F401\n")

    import diffusers  # only for the version line

    print(f"diffusers {diffusers.__version__} (installed), tests from {src}")
    print(f"logs and junit files: {workdir}\n")
    table, regressions = [], {}
    for test in tests:
        per_device = {}
        for device in args.devices:
            results, rc, seconds, log = run_file(src, test, device, workdir, args)
            per_device[device] = results
            total, counts = summarize(results)
            table.append((test, device, total, counts["passed"], counts["failed"], counts["skipped"]))
            print(f"{test} {device}: collected {total}  passed {counts['passed']}  failed {counts['failed']}  "
                  f"skipped {counts['skipped']}  (pytest rc {rc}, {seconds:.0f} s, log {log.name})", flush=True)
        if "tpu" in per_device and "cpu" in per_device:
            regressions[test] = sorted(t for t, outcome in per_device["tpu"].items()
                                       if outcome != "passed" and per_device["cpu"].get(t) == "passed")

    width = max(len(t) for t in tests)
    print(f"\n{'file':{width}s} device collected passed failed skipped")
    for test, device, total, passed, failed, skipped in table:
        print(f"{test:{width}s} {device:6s} {total:9d} {passed:6d} {failed:6d} {skipped:7d}")
    cpu_passed = sum(p for _, d, _, p, _, _ in table if d == "cpu")
    lost = sum(len(v) for v in regressions.values())
    if "tpu" in args.devices and "cpu" in args.devices and cpu_passed:
        print(f"\nof {cpu_passed} tests passing on CPU, {cpu_passed - lost} pass on tpu "
              f"({100.0 * (cpu_passed - lost) / cpu_passed:.1f}%)")
    for test, ids in regressions.items():
        if ids:
            print(f"\n{test}: {len(ids)} tests pass on CPU but not on tpu")
            for t in ids:
                print(f"  {t}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
