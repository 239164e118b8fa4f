"""torch.profiler on tpu (docs/profiling.md).

The extension registers a Kineto child profiler, so the usual call records the device too:

    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        step()
    prof.export_chrome_trace("trace.json")

`activities()` is that list (with ProfilerActivity.TPU, the same activity, where the release has
it). `summarize(trace)` reads an exported Chrome trace back into the tables that
`python -m torch_tpu profile script.py` prints: programs by device time, compiles, host syncs
and transfers.
"""
import collections
import json

import torch

from . import _C


def activities():
    """[CPU, the tpu device's activity]: what profile(activities=...) needs to record tpu events."""
    device = getattr(torch.profiler.ProfilerActivity, "TPU", None) or torch.profiler.ProfilerActivity.PrivateUse1
    return [torch.profiler.ProfilerActivity.CPU, device]


def device_profiler():
    """True when the plugin has the PJRT profiler extension (device-side op timing), False when
    it has none (the CPU plugin: program-level events only), None before the device starts."""
    return _C._profiler_device_profiler()


def _events(trace):
    if isinstance(trace, (str, bytes)) or hasattr(trace, "__fspath__"):
        with open(trace) as f:
            trace = json.load(f)
    if not isinstance(trace, dict) or "traceEvents" not in trace:
        raise ValueError("expected a Chrome trace (a path, or the dict of export_chrome_trace's JSON)")
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


def tpu_events(trace, kind=None):
    """The trace's tpu events (args["tpu event"]: program, compile, transfer, sync, flush,
    collective), optionally of one kind."""
    out = [e for e in _events(trace) if "tpu event" in e.get("args", {})]
    return [e for e in out if kind is None or e["args"]["tpu event"] == kind]


def summarize(trace, top=10):
    """Tables of a tpu trace: {"programs": [(name, runs, total_us)], "compiles": [(name, cache, us)],
    "syncs": [(cause, count)], "transfers": {direction: (count, bytes)}, "device_us": total}."""
    programs = collections.defaultdict(lambda: [0, 0.0])
    for e in tpu_events(trace, "program"):
        programs[e["name"]][0] += 1
        programs[e["name"]][1] += float(e.get("dur", 0))
    compiles = sorted(((e["name"], e["args"].get("cache", ""), float(e.get("dur", 0)))
                       for e in tpu_events(trace, "compile")), key=lambda c: -c[2])
    syncs = collections.Counter(e["args"]["cause"] for e in tpu_events(trace, "sync") if "cause" in e["args"])
    transfers = {}
    for e in tpu_events(trace, "transfer"):
        direction = e["name"].split(": ", 1)[-1]
        n, b = transfers.get(direction, (0, 0))
        transfers[direction] = (n + 1, b + int(e["args"].get("bytes", 0)))
    ranked = sorted(((n, r, us) for n, (r, us) in programs.items()), key=lambda p: -p[2])
    return {
        "programs": ranked[:top],
        "compiles": compiles[:top],
        "syncs": syncs.most_common(),
        "transfers": transfers,
        "device_us": sum(us for _, _, us in ranked),
    }


def format_summary(summary):
    lines = [f"device time: {summary['device_us'] / 1e3:.3f} ms in programs", "", "top programs by device time:"]
    for name, runs, us in summary["programs"]:
        lines.append(f"  {us / 1e3:10.3f} ms  {runs:6d} runs  {name}")
    lines += ["", "top compiles (wall time):"]
    for name, cache, us in summary["compiles"]:
        lines.append(f"  {us / 1e3:10.3f} ms  {cache:<14} {name}")
    if not summary["compiles"]:
        lines.append("  (none)")
    lines += ["", "host syncs:"]
    for cause, count in summary["syncs"]:
        lines.append(f"  {count:6d}  {cause}")
    if not summary["syncs"]:
        lines.append("  (none)")
    lines += ["", "transfers:"]
    for direction, (count, nbytes) in sorted(summary["transfers"].items()):
        lines.append(f"  {count:6d}  {nbytes:14d} bytes  {direction}")
    if not summary["transfers"]:
        lines.append("  (none)")
    return "\n".join(lines)
