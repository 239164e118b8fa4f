"""Counters a user can read: torch_tpu.metrics() and `python -m torch_tpu metrics`."""
from . import _C, _compile_stats


class _Metrics:
    def __call__(self, wait=False):
        """Returns a dict of counters: ops, compiles, cache hits, executions, syncs, fallbacks.

        Never waits by default: whole fused graphs (and torch.compile programs compiled ahead)
        compile in the background, and the counters say what is known now;
        `background_compiles_pending` counts the compiles still queued or running, whose
        programs_compiled and compile time are not in yet. wait=True first waits for them, for a
        settled picture (a compile is then counted in the window that asked for it)."""
        if wait:
            _C._await_background_compiles()
        m = _C._metrics()
        m.update(_compile_stats.snapshot())
        m.update(_C._graph_stats())
        return m

    def reset(self):
        """Zeroes the counters. Waits for the background compiles queued so far, so that a
        compile asked for before the reset is not counted after it."""
        _C._await_background_compiles()
        _C._reset_metrics()
        _compile_stats.reset()
        _C._graph_stats(True)

    def report(self, wait=False):
        m = self(wait=wait)
        lines = []
        for key, value in m.items():
            if isinstance(value, dict):
                lines.append(f"{key}:")
                lines.extend(f"    {k}: {v}" for k, v in sorted(value.items()))
            else:
                lines.append(f"{key}: {value}")
        return "\n".join(lines)


metrics = _Metrics()


def reset_metrics():
    metrics.reset()
