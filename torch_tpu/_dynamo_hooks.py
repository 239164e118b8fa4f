"""How torch.compile finds this device without `import torch_tpu` importing Dynamo.

- The "tpu" DeviceInterface is registered the moment Dynamo's device_interface module is
  imported (an import hook), so every torch.compile, whatever its backend, sees ours.
- torch.compile's default backend on tpu tensors: Inductor has no code generator for this
  device (in torch 2.13 its "tpu" slot holds a Pallas backend that needs JAX), so
  `torch.compile(model)` on a model living on tpu would fail with `No module named 'jax'` deep
  inside Inductor. A graph whose tensors live on tpu is compiled by this package's "tpu" backend
  instead (the same lowerings as eager), with a one-time warning; other graphs are untouched.
- Compiled optimizers keep their step counters on tpu: Dynamo turns `capturable` on only for
  CUDA/XPU parameters, so on tpu AdamW's `step` stayed a CPU tensor and every compiled
  optimizer step split into device pieces around host `_foreach_add`/`copy_` nodes. With
  `capturable` the bias corrections are tensor ops on the device and the step is one program.
- FlexAttention's device check lets tpu through when its module is imported (_flex_attention.py).
"""
import importlib.abc
import importlib.util
import sys
import warnings

import torch

_DEVICE_INTERFACE_MODULE = "torch._dynamo.device_interface"
_OPTIMIZER_VARIABLE_MODULE = "torch._dynamo.variables.optimizer"
_warned = False


def _register_device_interface(module):
    from . import _device_interface

    _device_interface.register()


def _capturable_on_tpu(module):
    """Wraps OptimizerVariable._set_capturable so that groups whose parameters all live on tpu
    (and have no state yet, Dynamo's own condition) become capturable too."""
    cls = module.OptimizerVariable
    original = cls._set_capturable
    if getattr(original, "_torch_tpu_capturable", False):
        return

    def _set_capturable(self, tx):
        for group in self.value.param_groups:
            params = group.get("params", [])
            if ("capturable" in group and params and all(p.device.type == "tpu" for p in params)
                    and all(p not in self.value.state for p in params)):
                group["capturable"] = True
        return original(self, tx)

    _set_capturable._torch_tpu_capturable = True
    cls._set_capturable = _set_capturable


def _flex_attention_on_tpu(module):
    from . import _flex_attention

    _flex_attention.allow_tpu(module)


_AFTER_IMPORT = {_DEVICE_INTERFACE_MODULE: _register_device_interface,
                 _OPTIMIZER_VARIABLE_MODULE: _capturable_on_tpu,
                 "torch.nn.attention.flex_attention": _flex_attention_on_tpu}


class _RunAfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback of _AFTER_IMPORT right after its Dynamo module executes."""

    def __init__(self):
        self.pending = {name: fn for name, fn in _AFTER_IMPORT.items() if name not in sys.modules}
        self.loading = set()

    def find_spec(self, name, path, target=None):
        if name not in self.pending or name in self.loading:
            return None
        self.loading.add(name)  # keeps find_spec below from finding us
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.loading.discard(name)
        if spec is None or spec.loader is None:
            return spec
        callback = self.pending.pop(name)
        if not self.pending:
            sys.meta_path.remove(self)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            callback(module)

        spec.loader.exec_module = exec_module
        return spec


def _on_tpu(value):
    return isinstance(value, torch.Tensor) and value.device.type == "tpu"


def _graph_uses_tpu(model, inputs):
    if any(_on_tpu(x) for x in inputs):
        return True
    # A graph without tpu inputs may still create tpu tensors (factories with device="tpu").
    for node in getattr(getattr(model, "graph", None), "nodes", ()):
        for key in ("example_value", "val"):
            value = node.meta.get(key)
            if any(_on_tpu(v) for v in (value if isinstance(value, (tuple, list)) else (value,))):
                return True
    return False


def _redirect_inductor():
    wrapper = torch._TorchCompileInductorWrapper
    if getattr(wrapper.__call__, "_torch_tpu_redirect", False):
        return
    inductor_call = wrapper.__call__

    # Whatever else the release's wrapper takes is passed through untouched (2.13 adds a
    # keyword-only config_patches that 2.11 lacks).
    def __call__(self, model_, inputs_, *args, **kwargs):
        if not _graph_uses_tpu(model_, inputs_):
            return inductor_call(self, model_, inputs_, *args, **kwargs)
        global _warned
        if not _warned:
            _warned = True
            warnings.warn(
                "torch.compile: Inductor cannot generate code for tpu tensors; this graph is compiled by "
                "torch_tpu's 'tpu' backend instead (pass backend='tpu' to choose it explicitly). Inductor "
                "options and modes such as 'reduce-overhead' do not apply to it.", stacklevel=2)
        from . import compile as tpu_compile

        return tpu_compile.backend(model_, inputs_)

    __call__._torch_tpu_redirect = True
    wrapper.__call__ = __call__


def install():
    for name, callback in _AFTER_IMPORT.items():
        if name in sys.modules:
            callback(sys.modules[name])
    if (any(name not in sys.modules for name in _AFTER_IMPORT)
            and not any(isinstance(f, _RunAfterImport) for f in sys.meta_path)):
        sys.meta_path.insert(0, _RunAfterImport())
    _redirect_inductor()
