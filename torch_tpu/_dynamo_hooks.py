"""How torch.compile finds this device without `import torch_tpu` importing Dynamo.

- The "tpu" DeviceInterface is registered the moment Dynamo's device_interface module is
  imported (an import hook), so every torch.compile, whatever its backend, sees ours.
- torch.compile's default backend on tpu tensors: Inductor has no code generator for this
  device (in torch 2.13 its "tpu" slot holds a Pallas backend that needs JAX), so
  `torch.compile(model)` on a model living on tpu would fail with `No module named 'jax'` deep
  inside Inductor. A graph whose tensors live on tpu is compiled by this package's "tpu" backend
  instead (the same lowerings as eager), with a one-time warning; other graphs are untouched.
"""
import importlib.abc
import importlib.util
import sys
import warnings

import torch

_DEVICE_INTERFACE_MODULE = "torch._dynamo.device_interface"
_warned = False


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Runs torch_tpu._device_interface.register() right after Dynamo's module executes."""

    def find_spec(self, name, path, target=None):
        if name != _DEVICE_INTERFACE_MODULE:
            return None
        sys.meta_path.remove(self)  # one use; also keeps find_spec below from finding us
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            from . import _device_interface

            _device_interface.register()

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

    def __call__(self, model_, inputs_, *, config_patches=None):
        if not _graph_uses_tpu(model_, inputs_):
            return inductor_call(self, model_, inputs_, config_patches=config_patches)
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
    if _DEVICE_INTERFACE_MODULE in sys.modules:
        from . import _device_interface

        _device_interface.register()
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
    _redirect_inductor()
