"""Counters a user can read: torch_tpu.metrics() and `python -m torch_tpu metrics`."""
from . import _C, _compile_stats


class _Metrics:
    def __call__(self):
        """Returns a dict of counters: ops, compiles, cache hits, executions, syncs, fallbacks.

        Whole fused graphs compile in the background; this waits for the ones queued so far, so
        the compile counters are settled (a compile is counted in the window that asked for it)."""
        _C._await_background_compiles()
        m = _C._metrics()
        m.update(_compile_stats.snapshot())
        m.update(_C._graph_stats())
        return m

    def reset(self):
        _C._await_background_compiles()  # a compile queued before must not count after
        _C._reset_metrics()
        _compile_stats.reset()
        _C._graph_stats(True)

    def report(self):
        m = self()
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
