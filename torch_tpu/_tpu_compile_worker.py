"""The TPU compile worker: compiles StableHLO modules for TPU topologies with libtpu, no TPU needed.

Started by torch_tpu/tpu_target.py as ``python _tpu_compile_worker.py EXTENSION PLUGIN`` (run by path,
so neither torch nor torch_tpu is imported here). It reads pickled requests
``(topology, text, num_replicas, num_partitions)`` on stdin and writes one pickled dict per request.
libtpu aborts the process on some programs; the parent then records the signal and starts a new one.
"""

import importlib.util
import os
import pickle
import sys
import time


def main():
    extension_path, plugin_path = sys.argv[1], sys.argv[2]
    # libtpu and its logging write to fd 1 too: answers go out on a private copy of it, and fd 1
    # becomes stderr.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    spec = importlib.util.spec_from_file_location("_tpu_compiler", extension_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compilers = {}
    while True:
        try:
            topology, text, num_replicas, num_partitions = pickle.load(requests)
        except EOFError:
            return
        try:
            if topology not in compilers:
                compilers[topology] = module.TopologyCompiler(plugin_path, topology)
            start = time.perf_counter()
            answer = compilers[topology].compile(text, num_replicas, num_partitions)
            answer["compile_seconds"] = time.perf_counter() - start
        except Exception as e:  # a topology libtpu does not know, a plugin that cannot load
            answer = {"compiled": False, "error": str(e), "setup_error": True}
        pickle.dump(answer, answers)
        answers.flush()


if __name__ == "__main__":
    main()
