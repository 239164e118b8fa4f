"""torch.compile(backend="tpu"): whole graphs through the eager lowering table.

Dynamo hands the backend an FX graph; AOTAutograd (core ATen decompositions) turns it into
a forward and a backward graph (or one inference graph) of ATen ops; each becomes one
StableHLO program, built in csrc/aten/compiled/compiled_graph.cpp by calling every node's lowering from the
table eager uses, and compiled through the runtime's memory and disk caches. Nodes that have
no lowering run eagerly on tpu between compiled pieces of the graph.

Shapes are static: every new input shape is a Dynamo recompilation (counted, with its
reason, in torch_tpu.metrics()) and a new program. dynamic=True is refused.

Nodes left to run eagerly are counted in torch_tpu.metrics()["compile_eager_nodes_by_op"] and
warned about once per op; TORCH_TPU_STRICT=1 makes such a node an error that names it.
The backward recomputes cheap elementwise work rather than saving it (AOTAutograd's min_cut
partition, as Inductor's); TORCH_TPU_COMPILE_PARTITION=default saves every intermediate instead.

Loaded lazily: the "tpu" name reaches Dynamo through the `torch_dynamo_backends` entry point,
so `import torch_tpu` does not import Dynamo.

The package, by concern: describe.py turns an FX graph into the description the C++ side
lowers (reading each argument's role from the one argument model in csrc/aten/dispatch/arguments.h);
partition.py lowers a whole graph or the lowerable pieces of it; decompositions.py is the
table AOTAutograd decomposes with; backend.py is the Dynamo backend.
"""
from .backend import backend

__all__ = ["backend"]
