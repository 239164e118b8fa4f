"""python -m torch_tpu: what a bug report needs, the counters, and the compilation cache."""
import argparse
import os
import platform as _host
import runpy
import sys
import warnings

import torch

import torch_tpu
from torch_tpu import _plugin, cache

# Environment variables that change what the backend does; `info` prints those that are set.
_ENV_PREFIXES = ("TORCH_TPU_", "XLA_", "LIBTPU_", "TPU_", "PJRT_", "TORCH_DEVICE_BACKEND_AUTOLOAD")


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return None  # unreachable


def _info_lines():
    choice = torch_tpu._plugin_choice
    yield "torch_tpu", f"{torch_tpu.__version__} (built for PyTorch {torch_tpu._built_for_torch})"
    yield "PyTorch", str(torch.__version__)
    yield "Python", f"{_host.python_version()} ({sys.executable})"
    yield "plugin", choice.path or "(none found)"
    yield "plugin chosen by", choice.how
    if choice.package:
        yield "plugin package", f"{choice.package} {_plugin.package_version(choice.package) or '(version unknown)'}"
    try:
        with warnings.catch_warnings():  # the platform notice: the lines below say it
            warnings.simplefilter("ignore")
            torch.tpu.init()
    except Exception as e:  # noqa: BLE001 - the report says why the device cannot start
        yield "device", f"cannot start: {type(e).__name__}: {e}"
    else:
        props = torch.tpu.get_device_properties(0)
        yield "PJRT API version", "{}.{}".format(*props.pjrt_api_version)
        yield "platform", f"{props.platform} (platform version {props.platform_version})"
        yield "devices", str(torch.tpu.device_count())
        for i in range(torch.tpu.device_count()):
            free, total = torch.tpu.mem_get_info(i)
            yield f"  tpu:{i}", f"{torch_tpu._C._device_kind(i)}, {_size(total)} memory, {_size(free)} free"
    yield "eager mode", torch_tpu.get_eager_mode()
    yield "matmul precision", torch_tpu._C._matmul_precision() + " (float32 products, README: Float32 matmul precision)"
    root = cache.root()
    if root:
        entries, size = cache.usage(root)
        yield "cache", f"{root} ({entries} programs, {_size(size)})"
        if torch.tpu.is_initialized() and cache.directory():
            entries, size = cache.usage(cache.directory())
            yield "  this plugin", f"{os.path.basename(cache.directory())} ({entries} programs, {_size(size)})"
    else:
        yield "cache", "off (TORCH_TPU_CACHE_DIR is empty)"
    env = sorted(k for k in os.environ if k.startswith(_ENV_PREFIXES))
    yield "environment", ", ".join(f"{k}={os.environ[k]}" for k in env) or "(no TORCH_TPU_*/XLA variables set)"


def info(args):
    for key, value in _info_lines():
        print(f"{key + ':':<18}{value}", flush=True)
    return 0


def _run_then_report(argv, command="metrics", report=None):
    """Runs argv as a script or `-m module`; prints the counters (or `report(target)`) even if it fails or exits."""
    if argv[0] == "-m":
        if len(argv) < 2:
            print(f"python -m torch_tpu {command} -m: a module name is needed", file=sys.stderr)
            return 2
        target, run = argv[1], lambda: runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        sys.argv = argv[1:]
    else:
        target, run = argv[0], lambda: runpy.run_path(argv[0], run_name="__main__")
        sys.argv = list(argv)
    code = 0
    try:
        run()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        if report is not None:
            report(target)
        else:
            print(f"\n---- torch_tpu metrics after {target} ----")
            print(torch_tpu.metrics.report(wait=True))  # the script is done: a settled picture
    return code


def tpu_report(argv):
    """python -m torch_tpu tpu-report [--topology T] script.py [args]: runs the script with every program also
    compiled for TPU topology T (default v5e:2x2; a comma list allowed), then prints a row per program."""
    topology = "v5e:2x2"
    if argv[:1] == ["--topology"] and len(argv) > 1:
        topology, argv = argv[1], argv[2:]
    elif argv[:1] and argv[0].startswith("--topology="):
        topology, argv = argv[0].split("=", 1)[1], argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(tpu_report.__doc__)
        return 0 if argv else 2
    from . import tpu_target
    try:
        tpu_target.enable(topology)
    except (tpu_target.TpuTargetError, ValueError) as e:
        print(f"python -m torch_tpu tpu-report: {e}", file=sys.stderr)
        return 2

    def report(target):
        print(f"\n---- torch_tpu tpu-report after {target} ----")
        print(tpu_target.format_report(tpu_target.report(wait=True)))
    return _run_then_report(argv, "tpu-report", report)


def profile(argv):
    """python -m torch_tpu profile [--out trace.json] script.py [args]: runs the script under
    torch.profiler (host ops and tpu events), writes a Chrome/Perfetto trace, then prints the top
    programs by device time, the top compiles, the host syncs and the transfers."""
    out = "torch_tpu_trace.json"
    if argv[:1] == ["--out"] and len(argv) > 1:
        out, argv = argv[1], argv[2:]
    elif argv[:1] and argv[0].startswith("--out="):
        out, argv = argv[0].split("=", 1)[1], argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(profile.__doc__)
        return 0 if argv else 2
    from . import profiler as tpu_profiler
    prof = torch.profiler.profile(activities=tpu_profiler.activities())
    prof.start()

    def report(target):
        prof.stop()
        prof.export_chrome_trace(out)
        print(f"\n---- torch_tpu profile of {target}: trace in {out} (chrome://tracing, ui.perfetto.dev) ----")
        print(tpu_profiler.format_summary(tpu_profiler.summarize(out)))
    return _run_then_report(argv, "profile", report)


def metrics(args):
    if args.script:
        return _run_then_report(args.script)
    print(torch_tpu.metrics.report())
    return 0


def cache_info(args):
    root = cache.root()
    if not root:
        print("the disk cache is off (TORCH_TPU_CACHE_DIR is empty)")
        return 0
    limit = int(os.environ.get("TORCH_TPU_CACHE_MAX_BYTES", 4 << 30))
    entries, size = cache.usage(root)
    print(f"{root}: {entries} programs, {_size(size)} (limit {_size(limit)} per plugin folder)")
    for name, (n, b) in cache.folders().items():
        print(f"  {name}: {n} programs, {_size(b)}")
    return 0


def cache_clear(args):
    root = cache.root()
    print(f"removed {cache.clear()} files from {root}" if root else "the disk cache is off")
    return 0


def _parser():
    parser = argparse.ArgumentParser(prog="python -m torch_tpu", description=__doc__)
    commands = parser.add_subparsers(title="commands", metavar="{info,metrics,profile,tpu-report,cache}")
    p = commands.add_parser("info", help="versions, plugin, platform, devices, cache and environment (the default)")
    p.set_defaults(run=info)
    p = commands.add_parser(
        "metrics", help="print the counters; with a script, run it first (python -m torch_tpu metrics train.py args)",
        description="Runs a script (or a module, with -m) as `python script.py args` would, then prints the "
        "counters it left: ops per eager mode, compilations, cache hits, executions, host syncs and their "
        "causes, CPU fallbacks, recompilations and their reasons. Without a script it prints this process's "
        "counters, which start at zero.")
    p.add_argument("script", nargs=argparse.REMAINDER, help="script.py [args...] or -m module [args...]")
    p.set_defaults(run=metrics)
    commands.add_parser("profile", help="run a script under torch.profiler, write a Chrome trace and print the top "
                        "programs, compiles and host syncs: python -m torch_tpu profile [--out trace.json] train.py args")
    commands.add_parser("tpu-report", help="run a script with every program also compiled for a TPU topology "
                        "(libtpu, no TPU needed), then print each program's cost model: "
                        "python -m torch_tpu tpu-report [--topology v5e:2x2] train.py args")
    p = commands.add_parser("cache", help="the compilation cache on disk: cache info, cache clear")
    actions = p.add_subparsers(title="actions", metavar="{info,clear}", required=True)
    actions.add_parser("info", help="where the cache is, its programs and size per plugin").set_defaults(run=cache_info)
    actions.add_parser("clear", help="remove every cached program").set_defaults(run=cache_clear)
    return parser


def main(argv):
    if argv[:1] == ["metrics"] and argv[1:2] not in (["-h"], ["--help"]):
        # The script's own arguments pass through untouched (argparse would read "-m" as an option).
        return metrics(argparse.Namespace(script=argv[1:]))
    if argv[:1] == ["tpu-report"]:
        return tpu_report(argv[1:])
    if argv[:1] == ["profile"]:
        return profile(argv[1:])
    args = _parser().parse_args(argv or ["info"])
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
