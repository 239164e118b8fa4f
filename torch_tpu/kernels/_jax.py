"""The JAX side of custom kernels: output types by `jax.eval_shape`, StableHLO by `jax.export`,
and the VJP as a function of its own. Imported only by torch_tpu.kernels.from_jax, so that JAX
stays an optional dependency (`pip install torch-tpu[jax]`)."""
import contextlib
import functools
import inspect

try:
    import jax
    import jax.numpy as jnp
    from jax import export as jax_export
except ImportError as e:  # pragma: no cover - exercised only without JAX
    raise ImportError(
        "torch_tpu.kernels.from_jax needs JAX: pip install 'torch-tpu[jax]' (or pip install jax)") from e

# StableHLO element type names (as MLIR prints them) of JAX dtypes.
_ELEMENT = {
    "bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "complex64": "complex<f32>", "complex128": "complex<f64>",
}
_JAX_DTYPE = {v: k for k, v in _ELEMENT.items()}
_WIDE = {"i64", "ui64", "f64", "complex<f64>"}


def version():
    return jax.__version__


def stablehlo_version():
    """The StableHLO version JAX's MLIR prints ("1.17.0")."""
    from jaxlib.mlir.dialects import stablehlo
    return stablehlo.get_current_version()


def serializable_at(text, target):
    """Whether `text` only uses StableHLO features of version `target` (a portable artifact
    for that version can be written); the reason otherwise."""
    from jaxlib.mlir.dialects import stablehlo
    try:
        stablehlo.serialize_portable_artifact_str(text, target)
        return None
    except Exception as e:  # the binding raises a plain exception naming the op or version
        return str(e).strip() or type(e).__name__


def element(dtype):
    name = jnp.dtype(dtype).name
    if name not in _ELEMENT:
        raise TypeError(f"JAX dtype {name} has no PyTorch dtype here")
    return _ELEMENT[name]


@contextlib.contextmanager
def _pallas_interpreted(on):
    """Traces every pallas_call under it as if it had interpret=True (thread-local). Pallas's own
    switch, force_tpu_interpret_mode, takes the value pallas_call's `interpret` would: True is the
    plain interpreter (a loop over the grid in StableHLO), not TPU interpret mode's host callbacks."""
    if not on:
        yield
        return
    try:
        from jax.experimental.pallas import tpu as pltpu
        force = pltpu.force_tpu_interpret_mode
    except (ImportError, AttributeError):  # a JAX without it: kernels keep their own `interpret`
        yield
        return
    with force(True):
        yield


@contextlib.contextmanager
def _on_chip(device_kind):
    """Traces as if on one TPU chip of `device_kind`: Pallas's TPU code (tpu_info.get_tpu_info, which
    Mosaic pipelines call while tracing) reads the chip from the abstract mesh's device before the
    default device, which here is a CPU."""
    if device_kind is None:
        yield
        return
    from jax._src.mesh import AbstractDevice  # no public constructor in JAX 0.10
    cores = 2 if device_kind in ("TPU v4", "TPU v5") else 1  # megacore chips
    mesh = jax.sharding.AbstractMesh((1,), ("chip",), abstract_device=AbstractDevice(
        device_kind=device_kind, num_cores=cores, platform="tpu"))
    with jax.sharding.use_abstract_mesh(mesh):
        yield


class TraceError(Exception):
    """JAX could not trace or lower the function; `cause` is JAX's own exception."""


class JaxSource:
    """A JAX function: positional array parameters, static parameters by name."""

    def __init__(self, fn, static_argnames, tpu_fn=None):
        self.fn = fn
        self.tpu_fn = tpu_fn  # what is exported for TPU, when given
        self.static_argnames = tuple(static_argnames)
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        self.arg_names = None  # variadic: any number of arrays
        self.static_defaults = {}
        if sig is not None:
            names = []
            for p in sig.parameters.values():
                if p.kind is p.VAR_POSITIONAL:
                    names = None
                    break
                if p.kind is p.VAR_KEYWORD:
                    continue
                if p.name in self.static_argnames:
                    if p.default is not p.empty:
                        self.static_defaults[p.name] = p.default
                    continue
                if p.kind is p.KEYWORD_ONLY:
                    if p.default is p.empty:
                        raise TypeError(f"from_jax: keyword-only parameter '{p.name}' of {fn.__name__} must be "
                                        "listed in static_argnames (array arguments are positional)")
                    continue
                names.append(p.name)
            self.arg_names = names
        unknown = [n for n in self.static_argnames if sig is not None and n not in sig.parameters
                   and not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())]
        if unknown:
            raise TypeError(f"from_jax: static_argnames {unknown} are not parameters of {fn.__name__}")

    def _avals(self, in_types):
        avals = []
        for elem, dims in in_types:
            if elem in _WIDE and not jax.config.jax_enable_x64:
                raise TypeError(
                    f"an input is {elem} and JAX has 64-bit types off: call "
                    "jax.config.update('jax_enable_x64', True) before using the kernel, or pass 32-bit tensors")
            avals.append(jax.ShapeDtypeStruct(tuple(dims), jnp.dtype(_JAX_DTYPE[elem])))
        return avals

    def _bound(self, statics):
        return functools.partial(self.fn, **statics) if statics else self.fn

    def out_types(self, statics, in_types):
        """([(element, dims)] of the results, whether the function returns one array)."""
        avals = self._avals(in_types)
        try:
            out = jax.eval_shape(self._bound(statics), *avals)
        except Exception as e:
            raise TraceError(e) from e
        leaves, tree = jax.tree_util.tree_flatten(out)
        single = jax.tree_util.treedef_is_leaf(tree)
        if not single and not isinstance(out, (tuple, list)):
            raise TypeError(f"the function returns {type(out).__name__}: a kernel returns an array or a tuple of arrays")
        if not leaves:
            raise TypeError("the function returns no array")
        return [(element(o.dtype), list(o.shape)) for o in leaves], single

    def export(self, statics, in_types, platform, device_kind=None):
        """The function's StableHLO text for `platform` ("cpu", "cuda", "tpu"). On "cpu" every
        pallas_call is lowered in interpret mode (plain StableHLO: the CPU plugin cannot run a
        compiled Pallas kernel), so one kernel written for TPU runs here and, exported for "tpu",
        is its Mosaic form there. `device_kind` ("TPU v5 lite"): the chip a TPU export is for,
        when it is not this process's device (Mosaic kernels ask for the chip while tracing)."""
        avals = self._avals(in_types)
        fn = self.tpu_fn if platform == "tpu" and self.tpu_fn is not None else self.fn
        bound = functools.partial(fn, **statics) if statics else fn
        try:
            with _pallas_interpreted(platform == "cpu"), _on_chip(device_kind):
                # keep_unused: the module takes every tensor the op passes, used or not.
                exported = jax_export.export(jax.jit(bound, keep_unused=True), platforms=[platform])(*avals)
        except Exception as e:
            raise TraceError(e) from e
        return exported.mlir_module()

    def vjp(self, in_types, out_types):
        """The VJP as a JaxSource over (primals..., cotangents of the floating results...),
        returning the cotangents of the floating primals; (that source, the indices of the
        primals it differentiates, the indices of the results whose cotangents it takes)."""
        diff = [i for i, (e, _) in enumerate(in_types) if jnp.issubdtype(jnp.dtype(_JAX_DTYPE[e]), jnp.inexact)]
        cot_of = [i for i, (e, _) in enumerate(out_types) if jnp.issubdtype(jnp.dtype(_JAX_DTYPE[e]), jnp.inexact)]
        fn, n = self.fn, len(in_types)

        def vjp(*args, **statics):
            primals, cots = list(args[:n]), args[n:]

            def f(*d):
                full = list(primals)
                for i, x in zip(diff, d):
                    full[i] = x
                return fn(*full, **statics)

            out, pull = jax.vjp(f, *[primals[i] for i in diff])
            leaves, tree = jax.tree_util.tree_flatten(out)
            given = iter(cots)
            ct = [next(given) if i in cot_of else jnp.zeros(o.shape, jax.dtypes.float0)
                  for i, o in enumerate(leaves)]
            return tuple(pull(jax.tree_util.tree_unflatten(tree, ct)))

        vjp.__name__ = f"{getattr(fn, '__name__', 'kernel')}_vjp"
        source = JaxSource(vjp, self.static_argnames)
        return source, diff, cot_of
