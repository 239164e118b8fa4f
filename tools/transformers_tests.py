"""Runs Hugging Face Transformers' own tests for some model families twice, once with
torch_device = "tpu" and once on the CPU, offline, and prints per family and device how many
tests were collected, passed, failed and skipped, and which tests pass on CPU but fail on tpu.

    python tools/transformers_tests.py --src ~/transformers --models llama gpt2 bert
    make transformers-tests TRANSFORMERS_SRC=~/transformers MODELS="llama gpt2 bert"

--src is a checkout of github.com/huggingface/transformers (only its tests/ folder is used;
the library is the installed one unless --use-src puts <src>/src first on PYTHONPATH).
The tpu run uses torch_tpu/testing/transformers_device_spec.py as TRANSFORMERS_TEST_DEVICE_SPEC;
the CPU run sets TORCH_DEVICE_BACKEND_AUTOLOAD=0 so that torch_tpu is not loaded at all.
pytest runs from the checkout's root, as Transformers' tests expect (some relaunch pytest with a
path relative to it, e.g. test_can_load_with_global_device_set); junit files and logs go to a
folder of their own (--keep, else a temporary one).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPEC_MODULE = "torch_tpu.testing.transformers_device_spec"
SHIM = "torch_tpu_transformers_spec.py"


def parse_junit(path):
    """-> {test id: "passed" | "failed" | "skipped"}"""
    results = {}
    if not path.exists():
        return results
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        tags = {child.tag for child in case}
        if "failure" in tags or "error" in tags:
            outcome = "failed"
        elif "skipped" in tags:
            outcome = "skipped"
        else:
            outcome = "passed"
        # a test that passed but errored in teardown appears twice: the failure wins
        if results.get(test_id) != "failed":
            results[test_id] = outcome
    return results


def pytest_config_args(src):
    for name in ("pyproject.toml", "setup.cfg", "pytest.ini", "tox.ini"):
        if (src / name).exists():
            return ["-c", str(src / name)]
    return []


def run_family(src, family, device, workdir, args):
    test_dir = Path("tests") / "models" / family  # relative to src, the working directory
    junit = workdir / f"{family}-{device}.xml"
    cmd = [sys.executable, "-m", "pytest", str(test_dir), "--rootdir", str(src), *pytest_config_args(src),
           "-p", "no:cacheprovider", "-q", "-rN", f"--junitxml={junit}", *args.pytest_args]
    if args.k:
        cmd += ["-k", args.k]
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TORCH_TPU_QUIET="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("RUN_SLOW", "0")
    for var in ("TRANSFORMERS_TEST_DEVICE", "TRANSFORMERS_TEST_BACKEND", "TRANSFORMERS_TEST_DEVICE_SPEC"):
        env.pop(var, None)
    pythonpath = [str(src)]
    if args.use_src and (src / "src").is_dir():
        pythonpath.insert(0, str(src / "src"))
    if device == "tpu":
        env.update(TRANSFORMERS_TEST_BACKEND="torch_tpu", TRANSFORMERS_TEST_DEVICE="tpu",
                   TRANSFORMERS_TEST_DEVICE_SPEC=SHIM)
        # Two devices per process: the tensor-parallel and FSDP tests spawn one process per
        # device (on CPU they use one per core), with torch.distributed on tpu tensors.
        env.setdefault("TORCH_TPU_NUM_DEVICES", "2")
        pythonpath.append(str(REPO))
    else:
        env.update(TRANSFORMERS_TEST_DEVICE="cpu", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env["PYTHONPATH"] = os.pathsep.join(pythonpath + [p for p in [os.environ.get("PYTHONPATH")] if p])
    log = workdir / f"{family}-{device}.log"
    start = time.perf_counter()
    with open(log, "w") as out:
        try:
            rc = subprocess.run(cmd, cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT,
                                timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return parse_junit(junit), rc, time.perf_counter() - start, log


def summarize(results):
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for outcome in results.values():
        counts[outcome] += 1
    return len(results), counts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, help="a transformers checkout (its tests/ folder is used)")
    parser.add_argument("--models", nargs="+", default=["llama", "gpt2", "bert"],
                        help="families: folder names under tests/models (one string with spaces also works)")
    parser.add_argument("--devices", nargs="+", default=["tpu", "cpu"], choices=["tpu", "cpu"])
    parser.add_argument("-k", default=None, help="pytest -k expression")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per family and device")
    parser.add_argument("--use-src", action="store_true", help="import transformers from <src>/src")
    parser.add_argument("--keep", default=None, help="folder to keep the junit files and logs in")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()

    src = Path(args.src).expanduser().resolve()
    if not (src / "tests" / "models").is_dir():
        raise SystemExit(f"{src} does not look like a transformers checkout (no tests/models)")
    families = [m for spec in args.models for m in spec.split()]
    missing = [f for f in families if not (src / "tests" / "models" / f).is_dir()]
    if missing:
        raise SystemExit(f"no tests/models/<family> folder for: {' '.join(missing)}")

    workdir = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="tt_transformers_"))
    workdir.mkdir(parents=True, exist_ok=True)
    # Transformers imports the spec by module name = path minus ".py", so the spec must be a
    # bare file name in the working directory (the checkout's root): a shim that re-exports the
    # packaged spec, removed when the runs end.
    shim = src / SHIM
    shim.write_text(f"from {SPEC_MODULE} import *  # noqa: F401,F403\n"
                    f"from {SPEC_MODULE} import DEVICE_NAME  # noqa: F401\n")
    try:
        return run_families(src, families, workdir, args)
    finally:
        shim.unlink(missing_ok=True)


def run_families(src, families, workdir, args):
    import transformers  # only for the version line

    print(f"transformers {transformers.__version__} (installed){' / tests and src from ' if args.use_src else ', tests from '}{src}")
    print(f"logs and junit files: {workdir}\n")
    table = []
    regressions = {}
    for family in families:
        per_device = {}
        for device in args.devices:
            results, rc, seconds, log = run_family(src, family, device, workdir, args)
            per_device[device] = results
            total, counts = summarize(results)
            table.append((family, device, total, counts["passed"], counts["failed"], counts["skipped"], rc, seconds))
            print(f"{family:12s} {device:4s} collected {total:5d}  passed {counts['passed']:5d}  "
                  f"failed {counts['failed']:5d}  skipped {counts['skipped']:5d}  "
                  f"(pytest rc {rc}, {seconds:.0f} s, log {log.name})", flush=True)
        if "tpu" in per_device and "cpu" in per_device:
            regressions[family] = sorted(t for t, outcome in per_device["tpu"].items()
                                         if outcome == "failed" and per_device["cpu"].get(t) == "passed")

    print("\nfamily       device collected passed failed skipped")
    for family, device, total, passed, failed, skipped, _, _ in table:
        print(f"{family:12s} {device:6s} {total:9d} {passed:6d} {failed:6d} {skipped:7d}")
    for family, tests in regressions.items():
        print(f"\n{family}: {len(tests)} tests pass on CPU but fail on tpu")
        for t in tests:
            print(f"  {t}")
    return 1 if any(regressions.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
