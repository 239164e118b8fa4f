"""Counters of torch.compile(backend="tpu"), merged into torch_tpu.metrics(). Kept apart from
torch_tpu.compile so that reading metrics never imports Dynamo."""
import collections
import threading

_lock = threading.Lock()
_counts = collections.Counter()
_by_key = collections.defaultdict(collections.Counter)

# name -> description (the keys torch_tpu.metrics() shows)
COUNTERS = {
    "compile_graphs": "Dynamo graphs given to the tpu backend",
    "compile_recompiles": "of those, recompilations of a frame already compiled",
    "compile_programs": "FX graphs (forward, backward, inference, or pieces of them) lowered to one program",
    "compile_partitioned_graphs": "FX graphs split because some nodes have no lowering",
    "compile_eager_graph_calls": "calls of a compiled graph that ran eagerly instead",
    "compile_zero_dropouts_dropped": "dropout calls with p=0 left out of Dynamo graphs (they return their input)",
    "bucket_programs": "graphs with symbolic sizes specialized to a bucket of their sizes (docs/buckets.md)",
    "bucket_exact_programs": "graphs with symbolic sizes specialized to exact sizes (an op not bucket-aware, or buckets off)",
    "bucket_pads": "inputs padded to their bucket before a bucketed program (a small program per size)",
    "bucket_generate_calls": "Transformers generate() calls whose prompt was left-padded to its bucket",
    "bucket_trainer_batches": "Trainer batches right-padded to their bucket",
    "bucket_forward_calls": "causal LM training calls whose batch was right-padded to its bucket on the device",
}
KEYED = {
    "compile_recompile_reasons": "why Dynamo recompiled (its first failed guard)",
    "compile_eager_nodes_by_op": "FX nodes left to run eagerly, by op and reason",
    "bucket_boundary_skips": "generate() calls and Trainer batches left exact where padding could change a result, by reason",
    "bucket_fallbacks_by_op": "bucket specializations that ran at exact sizes instead, by the op not bucket-aware",
}


def count(name, n=1):
    with _lock:
        _counts[name] += n


def count_keyed(name, key, n=1):
    with _lock:
        _by_key[name][key] += n


def snapshot():
    with _lock:
        d = {k: _counts[k] for k in COUNTERS}
        d.update({k: dict(_by_key[k]) for k in KEYED})
    return d


def reset():
    with _lock:
        _counts.clear()
        _by_key.clear()
