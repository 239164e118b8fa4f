"""python -m torch_tpu [info | metrics [script.py [args...]] | metrics -m module [args...]]

info     the platform, devices and plugin the device runs on.
metrics  runs a script (or a module, with -m) as `python script.py args` would, then prints the
         counters it left: ops per eager mode, compilations, cache hits, executions, host
         syncs and their causes, CPU fallbacks, recompilations and their reasons. Without a
         script it prints this process's counters, which start at zero."""
import runpy
import sys

import torch

import torch_tpu


def _run_then_report(argv):
    """Runs argv as a script or `-m module`; prints the counters even if it fails or exits."""
    if argv[0] == "-m":
        if len(argv) < 2:
            print("python -m torch_tpu metrics -m: a module name is needed", file=sys.stderr)
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
        print(f"\n---- torch_tpu metrics after {target} ----")
        print(torch_tpu.metrics.report())
    return code


def main(argv):
    cmd = argv[0] if argv else "info"
    if cmd == "metrics":
        if len(argv) > 1:
            return _run_then_report(argv[1:])
        print(torch_tpu.metrics.report())
    elif cmd == "info":
        print(f"platform: {torch.tpu.get_device_name()}")
        print(f"devices: {torch.tpu.device_count()}")
        print(f"plugin: {torch.tpu.get_device_properties().plugin_path}")
        print(f"native ops: {len(torch_tpu.native_ops())}")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
