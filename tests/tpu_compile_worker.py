"""Compiles StableHLO module files for TPU topologies through JAX's compile-only libtpu client (no
TPU needed). Reads JSON lines {"topology": "v5e:1x1", "path": file}, answers {"ok", "error"} per
line. libtpu aborts the process on some programs, so tests/test_tpu_compile.py runs it as a
child and restarts it past a module that killed it."""
import sys, json, os
from jax._src.lib import xla_client as xc
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir
from jax.experimental import topologies
clients = {}
def devices(name):
    if name not in clients:
        clients[name] = topologies.get_topology_desc(platform="tpu", topology_name=name, chips_per_host_bounds=(1,1,1)).devices
    return clients[name]
ctx = mlir.make_ir_context()
for line in sys.stdin:
    req = json.loads(line)
    devs = devices(req["topology"])
    text = open(req["path"]).read()
    try:
        with ctx:
            module = ir.Module.parse(text)
            devs[0].client.compile(module, xc.DeviceList((devs[0],)), xc.CompileOptions())
        out = {"ok": True}
    except Exception as e:
        out = {"ok": False, "error": str(e)[-600:]}
    sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush()
