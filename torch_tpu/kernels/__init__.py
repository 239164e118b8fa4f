"""Your own kernels on tpu: JAX functions, Pallas kernels and StableHLO modules as PyTorch ops
(DESIGN.md "Custom kernels").

    rms_norm = torch_tpu.kernels.from_jax(jax_rms_norm, static_argnames=("eps",))
    y = rms_norm(x, w, eps=1e-6)          # x, w: tpu tensors

Each kernel is the custom op `torch_tpu::<name>(Tensor..., str statics) -> Tensor[]`. Its fake
(Meta) implementation takes output shapes from `jax.eval_shape` and, for each new set of input
types and static arguments, exports the function (`jax.export`) and hands the module to the
lowering layer (csrc/lowering/custom_kernel.cpp), which imports it into whatever program calls
the op: a strict op's program, a fused graph, a torch.compile graph. The VJP, exported the same
way, is the op's backward. JAX is imported by from_jax only.
"""
import ast
import hashlib
import threading

import torch

from .. import _C
from . import _stablehlo

__all__ = ["from_jax", "from_stablehlo", "Kernel", "KernelError"]

_lib = torch.library.Library("torch_tpu", "FRAGMENT")

_DTYPES = {
    "i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
    "ui8": torch.uint8, "ui16": torch.uint16, "ui32": torch.uint32, "ui64": torch.uint64,
    "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
    "complex<f32>": torch.complex64, "complex<f64>": torch.complex128,
}
_ELEMENTS = {v: k for k, v in _DTYPES.items()}

_kernels = {}
_lock = threading.RLock()


class KernelError(RuntimeError):
    """A kernel that cannot be imported, traced or called as asked; the message names it."""


def _types_text(types):
    return _stablehlo.format_types(types)


def _platform():
    """The platform name jax.export lowers for: our plugin's ("cpu", "cuda", "rocm", "tpu")."""
    platform = _C._platform()
    return {"gpu": "cuda"}.get(platform, platform)


_versions = {}


def plugin_stablehlo_range():
    """(minimum, current) StableHLO versions the plugin reports (PJRT_Plugin_Attributes), as
    tuples; None where it reports none."""
    if "plugin" not in _versions:
        attrs = _C._plugin_attributes()
        _versions["plugin"] = (_stablehlo.parse_version(attrs.get("stablehlo_minimum_version")),
                               _stablehlo.parse_version(attrs.get("stablehlo_current_version")))
    return _versions["plugin"]


def _fmt(v):
    return ".".join(map(str, v))


def _check_jax_version(kernel, text, jax_mod):
    """JAX prints StableHLO of its own version; the plugin parses versions in its range. A module
    newer than the plugin is accepted only if it uses nothing past the plugin's version."""
    low, high = plugin_stablehlo_range()
    ours = _stablehlo.parse_version(jax_mod.stablehlo_version())
    if high is None or ours is None:
        return
    if low is not None and ours < low:
        raise KernelError(
            f"{kernel}: JAX {jax_mod.version()} emits StableHLO {_fmt(ours)}, older than the oldest version the "
            f"PJRT plugin accepts ({_fmt(low)}; it accepts {_fmt(low)} to {_fmt(high)}): upgrade JAX")
    if ours > high:
        why = jax_mod.serializable_at(text, _fmt(high))
        # A module that does not serialize at JAX's own version either fails for another
        # reason (an attribute of a dialect the serializer lacks): not a version mismatch; the
        # plugin's compiler then has the last word.
        if why is not None and jax_mod.serializable_at(text, _fmt(ours)) is None:
            raise KernelError(
                f"{kernel}: JAX {jax_mod.version()} emits StableHLO {_fmt(ours)}, and this kernel uses features the "
                f"PJRT plugin's StableHLO {_fmt(high)} does not have (it accepts {_fmt(low)} to {_fmt(high)}): "
                f"{why}. Use a JAX release whose StableHLO is at most {_fmt(high)}, or a newer plugin")


def _check_custom_calls(kernel, module):
    platform = _platform()
    for target in module.custom_calls:
        if platform == "cpu" and target.startswith(_stablehlo.JAXLIB_CPU_CUSTOM_CALL_PREFIXES):
            raise KernelError(
                f"{kernel}: the module calls custom call '{target}', which JAX's own CPU runtime registers "
                f"(jnp.linalg calls LAPACK this way) and the PJRT plugin here, on {platform}, has no handler for: "
                "write the kernel without it, or run that part with PyTorch's own op")
        needs = _stablehlo.PLATFORM_CUSTOM_CALLS.get(target)
        if needs is not None and needs != platform:
            raise KernelError(
                f"{kernel}: the module calls custom call '{target}', compiled for {needs}, and the PJRT plugin here "
                f"runs on {platform}, which cannot run it. A Pallas kernel runs anywhere with "
                "pallas_call(..., interpret=True), which lowers it to plain StableHLO")


def _statics_key(statics):
    """Static arguments as the text that is part of the op's call (and so of every program key)."""
    def norm(v, where):
        if isinstance(v, (bool, int, float, str)) or v is None:
            return v
        if isinstance(v, (tuple, list)):
            return tuple(norm(x, where) for x in v)
        raise TypeError(f"static argument '{where}' is {type(v).__name__}: static arguments are ints, floats, "
                        "bools, strings, None and tuples of them")
    if not statics:
        return ""
    items = tuple(sorted((k, norm(v, k)) for k, v in statics.items()))
    key = repr(items)
    _statics_by_key.setdefault(key, dict(items))
    return key


# Keys made here, read back as values (repr of nan or inf is no literal); other keys (an op
# called directly with its `statics` string) are parsed.
_statics_by_key = {}


def _statics_of(key):
    if not key:
        return {}
    found = _statics_by_key.get(key)
    return dict(found) if found is not None else dict(ast.literal_eval(key))


class _TextSource:
    """A StableHLO module given as text: one fixed signature."""

    def __init__(self, text):
        self.module = _stablehlo.import_module(text, "probe")
        self.text = text
        self.arg_names = [f"arg{i}" for i in range(len(self.module.inputs))]
        self.static_defaults = {}
        self.static_argnames = ()

    def out_types(self, statics, in_types):
        return [tuple(t) for t in self.module.results], len(self.module.results) == 1


class Kernel:
    """A custom op on tpu tensors; call it like the function it came from."""

    def __init__(self, name, source, *, backward=None, is_jax=False, differentiable=True):
        if not name.isidentifier():
            raise ValueError(f"kernel name {name!r} is not an identifier")
        self.name = name
        self.op_name = f"torch_tpu::{name}"
        self._source = source
        self._is_jax = is_jax
        self._backward = backward
        self._signatures = {}   # (statics key, input types) -> (output types, single)
        self._exported = {}     # (statics key, input types) -> imported module
        self._vjps = {}         # (statics key, input types) -> (vjp kernel, diff, cot_of)
        names = source.arg_names
        if names is None:
            self._variadic = True
            schema = f"{name}(Tensor[] args, str statics='') -> Tensor[]"
        else:
            self._variadic = False
            if not names:
                raise TypeError(f"kernel {name}: the function takes no array argument")
            params = [n if n.isidentifier() and n not in ("statics",) else f"arg{i}" for i, n in enumerate(names)]
            schema = f"{name}({', '.join(f'Tensor {p}' for p in params)}, str statics='') -> Tensor[]"
        self.schema = schema
        _lib.define(schema)
        self.op = getattr(getattr(torch.ops, "torch_tpu"), name).default
        torch.library.register_fake(self.op_name, self._fake, lib=_lib)
        # Any other device: the same checks as on tpu, then a refusal that says why.
        _lib.impl(name, self._refuse, "CompositeExplicitAutograd")
        if differentiable:
            torch.library.register_autograd(self.op_name, self._grad, setup_context=self._setup_context, lib=_lib)
        _C._kernel_register_op(self.op_name)

        def call(*args, **kwargs):
            return self._call(*args, **kwargs)

        # Dynamo puts the call into its graph as one node; AOTAutograd then traces it (with
        # fake tensors) down to this op, which torch.compile's program lowers like any other.
        self._graph_call = torch._dynamo.allow_in_graph(call)

    def __repr__(self):
        return f"<torch_tpu kernel {self.op_name}: {self.schema}>"

    def __call__(self, *args, **kwargs):
        return self._graph_call(*args, **kwargs)

    # ---- calling ----
    def _bind(self, args, kwargs):
        names = self._source.arg_names
        statics = dict(self._source.static_defaults)
        kwargs = dict(kwargs)
        for k in list(kwargs):
            if k in self._source.static_argnames:
                statics[k] = kwargs.pop(k)
        if names is None:
            if kwargs:
                raise TypeError(f"{self.op_name}: unexpected keyword arguments {sorted(kwargs)}")
            return list(args), statics
        tensors = list(args)
        if len(tensors) > len(names):
            raise TypeError(f"{self.op_name} takes {len(names)} tensor arguments ({', '.join(names)}), "
                            f"got {len(tensors)}; static arguments go by keyword")
        for n in names[len(tensors):]:
            if n not in kwargs:
                raise TypeError(f"{self.op_name}: missing tensor argument '{n}' (signature: {self.signature_text()})")
            tensors.append(kwargs.pop(n))
        if kwargs:
            raise TypeError(f"{self.op_name}: unexpected keyword arguments {sorted(kwargs)} "
                            f"(static arguments: {list(self._source.static_argnames)})")
        return tensors, statics

    def signature_text(self, in_types=None):
        names = self._source.arg_names or ["args..."]
        if isinstance(self._source, _TextSource):
            ins = ", ".join(f"{n}: {_types_text([t])}" for n, t in zip(names, self._source.module.inputs))
            return f"({ins}) -> ({_types_text(self._source.module.results)})"
        statics = ", ".join(self._source.static_argnames)
        return f"({', '.join(names)}{'; static ' + statics if statics else ''})"

    def _call(self, *args, **kwargs):
        tensors, statics = self._bind(args, kwargs)
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{self.op_name}: argument {i} is {type(t).__name__}, not a tensor")
            if t.device.type != "tpu":
                raise ValueError(f"{self.op_name} runs on tpu tensors; argument {i} is on {t.device}: "
                                 "move it with .to('tpu')")
        key = _statics_key(statics)
        in_types = self._types(tensors)
        _, single = self._signature(key, in_types)
        self._module(key, in_types)  # export errors are raised here, not inside dispatch
        outs = self.op(tensors, key) if self._variadic else self.op(*tensors, key)
        return outs[0] if single else tuple(outs)

    def _types(self, tensors):
        types = []
        for i, t in enumerate(tensors):
            if t.dtype not in _ELEMENTS:
                raise TypeError(f"{self.op_name}: argument {i} has dtype {t.dtype}, which kernels do not take")
            types.append((_ELEMENTS[t.dtype], tuple(int(s) for s in t.shape)))
        return tuple(types)

    def _signature(self, key, in_types):
        """(output types, single) for these inputs; raises KernelError naming the kernel."""
        found = self._signatures.get((key, in_types))
        if found is not None:
            return found
        if isinstance(self._source, _TextSource):
            want = tuple((e, tuple(d)) for e, d in self._source.module.inputs)
            if in_types != want:
                raise KernelError(f"{self.op_name} expects {self.signature_text()}; got ({_types_text(in_types)})")
        try:
            out_types, single = self._source.out_types(_statics_of(key), in_types)
        except Exception as e:
            raise self._trace_error(e, key, in_types) from e
        found = ([tuple((el, tuple(d))) for el, d in out_types], single)
        self._signatures[(key, in_types)] = found
        return found

    def _trace_error(self, e, key, in_types):
        cause = getattr(e, "__cause__", None) if type(e).__name__ == "TraceError" else e
        cause = cause or e
        text = f"{type(cause).__name__}: {cause}".strip()
        hint = ""
        if "interpret" in text and "pallas" in text.lower() or "Only interpret mode" in text:
            hint = (f" (the PJRT plugin runs on {_platform()}: a Pallas kernel runs anywhere with "
                    "pallas_call(..., interpret=True))")
        statics = f" and static arguments {_statics_of(key)}" if key else ""
        return KernelError(f"{self.op_name}: the function does not trace for inputs ({_types_text(in_types)})"
                           f"{statics} (signature {self.signature_text()}): {text}{hint}")

    def _module(self, key, in_types):
        """The imported module of one variant, handed to the lowering layer once."""
        found = self._exported.get((key, in_types))
        if found is not None:
            return found
        with _lock:
            found = self._exported.get((key, in_types))
            if found is not None:
                return found
            # Symbols unique to this kernel (op names are unique) and variant, and the same in
            # every process: the disk cache keys programs by their text.
            digest = hashlib.sha1(repr((key, in_types)).encode()).hexdigest()[:10]
            prefix = f"k_{self.name}_{digest}"
            if isinstance(self._source, _TextSource):
                text = self._source.text
            else:
                from . import _jax
                try:
                    text = self._source.export(_statics_of(key), in_types, _platform())
                except Exception as e:
                    raise self._trace_error(e, key, in_types) from e
            try:
                module = _stablehlo.import_module(text, prefix)
            except _stablehlo.ImportError_ as e:
                raise KernelError(f"{self.op_name}: cannot import its StableHLO module: {e}") from None
            if self._is_jax:
                from . import _jax
                _check_jax_version(self.op_name, "module {\n" + module.functions + "}\n", _jax)
            _check_custom_calls(self.op_name, module)
            out_types, _ = self._signature(key, in_types)
            got_in = tuple((e, tuple(d)) for e, d in module.inputs)
            got_out = [(e, tuple(d)) for e, d in module.results]
            if got_in != in_types or got_out != out_types:
                raise KernelError(
                    f"{self.op_name}: the exported module takes ({_types_text(got_in)}) and returns "
                    f"({_types_text(got_out)}), the call has ({_types_text(in_types)}) -> "
                    f"({_types_text(out_types)})")
            _C._kernel_add_variant(self.op_name, key, module.functions, module.entry,
                                   [(e, list(d)) for e, d in in_types], [(e, list(d)) for e, d in out_types])
            self._exported[(key, in_types)] = module
            if self._is_jax and _platform() != "tpu":
                _run_forms[module.functions] = (self, key, in_types, prefix)
            return module

    def _tpu_form(self, key, in_types, prefix, device_kind):
        """This variant's functions exported for a TPU chip of `device_kind` (Pallas kernels as
        Mosaic tpu_custom_calls), imported under the same symbols as the form this plugin runs;
        raises KernelError."""
        try:
            text = self._source.export(_statics_of(key), in_types, "tpu", device_kind)
        except Exception as e:
            raise self._trace_error(e, key, in_types) from e
        try:
            module = _stablehlo.import_module(text, prefix)
        except _stablehlo.ImportError_ as e:
            raise KernelError(f"{self.op_name}: cannot import its StableHLO module for TPU: {e}") from None
        run = self._exported[(key, in_types)]
        if module.entry != run.entry or module.inputs != run.inputs or module.results != run.results:
            raise KernelError(f"{self.op_name}: exported for TPU it takes ({_types_text(module.inputs)}) and "
                              f"returns ({_types_text(module.results)}), unlike its form here")
        return module.functions

    # ---- the op's implementations ----
    def _flat(self, args, kwargs=None):
        """(tensors, statics key) of an op call; PyTorch leaves out `statics` when it is the
        default '' (or passes it by keyword)."""
        args = list(args)
        key = (kwargs or {}).get("statics", "")
        if args and isinstance(args[-1], str):
            key = args.pop()
        tensors = list(args[0]) if self._variadic else args
        return tensors, key

    def _fake(self, *args, **kwargs):
        tensors, key = self._flat(args, kwargs)
        in_types = self._types(tensors)
        out_types, _ = self._signature(key, in_types)
        # Every execution (eager on a miss, compiled while tracing) runs this before lowering:
        # the module is exported here, where Python is at hand, and found there by its key.
        self._module(key, in_types)
        like = tensors[0]
        return [like.new_empty(d, dtype=_DTYPES[e]) for e, d in out_types]

    def _refuse(self, *args, **kwargs):
        # Also reached when Meta inference of a tpu call failed and is replayed on the CPU to
        # get the CPU's error (csrc/aten/dispatch/op_program.cpp RunMeta): raise the kernel's own error.
        tensors, key = self._flat(args, kwargs)
        in_types = self._types(tensors)
        self._signature(key, in_types)
        self._module(key, in_types)
        devices = sorted({str(t.device) for t in tensors})
        raise ValueError(f"{self.op_name} runs on tpu tensors only; got tensors on {', '.join(devices)}: "
                         "move them with .to('tpu')")

    # ---- autograd ----
    def _setup_context(self, ctx, inputs, output):
        tensors, key = self._flat(inputs)
        ctx.key = key
        ctx.out_meta = [(o.shape, o.dtype) for o in output]
        ctx.n = len(tensors)
        ctx.save_for_backward(*tensors)

    def _grad(self, ctx, *grads):
        if len(grads) == 1 and isinstance(grads[0], (list, tuple)):
            grads = grads[0]
        tensors = list(ctx.saved_tensors)
        grads = [g if g is not None else torch.zeros(s, dtype=d, device=tensors[0].device)
                 for g, (s, d) in zip(grads, ctx.out_meta)]
        statics = _statics_of(ctx.key)
        if self._backward is not None:
            result = self._backward(*tensors, *grads, **statics)
            result = list(result) if isinstance(result, (tuple, list)) else [result]
            if len(result) != len(tensors):
                raise KernelError(f"{self.op_name}: its backward returned {len(result)} gradients for "
                                  f"{len(tensors)} inputs")
        else:
            vjp, diff, cot_of = self._vjp(ctx.key, self._types(tensors))
            try:
                got = vjp._call(*tensors, *[grads[i] for i in cot_of], **statics)
            except KernelError as e:
                # Pallas kernels, for one, have no VJP in JAX.
                raise KernelError(f"{self.op_name} has no backward: JAX cannot differentiate the function, so "
                                  f"give it one with from_jax(..., backward=fn). {e}") from e
            got = list(got) if isinstance(got, tuple) else [got]
            result = [None] * len(tensors)
            for i, g in zip(diff, got):
                result[i] = g
        grads_in = (result,) if self._variadic else tuple(result)
        # One gradient per argument the op was called with: the dispatcher leaves `statics` out
        # when it is the default '' (setup_context sees it filled in; needs_input_grad does not).
        return grads_in + (None,) * (len(ctx.needs_input_grad) - len(grads_in))

    def _vjp(self, key, in_types):
        found = self._vjps.get((key, in_types))
        if found is not None:
            return found
        if not self._is_jax:
            raise KernelError(f"{self.op_name} has no backward: from_stablehlo(..., backward=fn) gives it one")
        out_types, _ = self._signature(key, in_types)
        source, diff, cot_of = self._source.vjp(in_types, out_types)
        with _lock:
            vjp = Kernel(_unique(f"{self.name}_vjp"), source, is_jax=True, differentiable=False)
            _kernels[vjp.name] = vjp
        self._vjps[(key, in_types)] = (vjp, diff, cot_of)
        return self._vjps[(key, in_types)]


# TORCH_TPU_ALSO_COMPILE_FOR (torch_tpu.tpu_target): a program compiled for a TPU topology must call
# each JAX kernel's TPU form, which on another plugin differs from the form that runs here (a Pallas
# kernel is interpreted on the CPU plugin, a Mosaic kernel on TPU). The run form's functions text,
# imported verbatim into every program that calls the variant, identifies it.
_run_forms = {}  # run form's functions -> (kernel, statics key, input types, symbol prefix)
_tpu_forms = {}  # (run form's functions, device kind) -> (TPU form's functions, None) or (None, error)

# JAX's device kinds of the chips in libtpu's topology names ("v5e:2x2").
_DEVICE_KINDS = {"v4": "TPU v4", "v5e": "TPU v5 lite", "v5p": "TPU v5", "v6e": "TPU v6 lite", "tpu7x": "TPU7x"}


def tpu_form(text, topology):
    """`text`, a program this process compiled, with every JAX kernel's functions replaced by their
    form for `topology`'s chips (exported for TPU on first use): (new text, op names of the kernels
    replaced, errors). An error (a kernel that does not export for TPU) names the kernel and JAX's
    reason."""
    if "func.func private @k_" not in text:
        return text, [], []
    chip = topology.split(":")[0].split("_")[0]
    device_kind = _DEVICE_KINDS.get(chip)
    if device_kind is None:
        return text, [], [f"custom kernels: no JAX device kind known for TPU chip '{chip}' of {topology} "
                          f"(known: {', '.join(_DEVICE_KINDS)})"]
    replaced, errors = [], []
    with _lock:
        found = [(f, v) for f, v in _run_forms.items() if f in text]
    for functions, (kernel, key, in_types, prefix) in found:
        with _lock:
            form = _tpu_forms.get((functions, device_kind))
            if form is None:
                try:
                    form = (kernel._tpu_form(key, in_types, prefix, device_kind), None)
                except KernelError as e:
                    form = (None, str(e))
                _tpu_forms[(functions, device_kind)] = form
        tpu_functions, error = form
        if error is not None:
            errors.append(error)
        elif tpu_functions != functions:
            text = text.replace(functions, tpu_functions)
            replaced.append(kernel.op_name)
    return text, replaced, errors


def _unique(name):
    base, n = name, 2
    while name in _kernels or hasattr(torch.ops.torch_tpu, name):
        name = f"{base}_{n}"
        n += 1
    return name


def from_jax(fn, *, name=None, static_argnames=(), backward=None, tpu_fn=None):
    """A JAX function (jax.numpy, lax, a Pallas kernel: interpreted on the CPU plugin, Mosaic on
    TPU) as a PyTorch op on tpu tensors: `torch_tpu::<name>`. Array parameters are positional
    tensors; `static_argnames` are Python values (ints, floats, bools, tuples) given by keyword,
    part of the kernel's identity. It returns a tensor or a tuple of tensors. Its backward is
    the function's VJP (exported the same way), or `backward(*inputs, *grad_outputs, **statics)`
    returning one gradient (or None) per input. `tpu_fn`, with fn's parameters and result types,
    is what a TPU runs instead of fn (and what TORCH_TPU_ALSO_COMPILE_FOR compiles): a Mosaic
    kernel that cannot run elsewhere, not even interpreted; the backward stays fn's."""
    from . import _jax

    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    source = _jax.JaxSource(fn, static_argnames, tpu_fn)
    with _lock:
        if name is None:
            name = _unique(getattr(fn, "__name__", "kernel").strip("<>").replace("-", "_") or "kernel")
        elif name in _kernels or hasattr(torch.ops.torch_tpu, name):
            raise KernelError(f"a kernel or op named torch_tpu::{name} exists already: choose another name")
        k = Kernel(name, source, backward=backward, is_jax=True)
        _kernels[name] = k
    return k


def from_stablehlo(text, name, *, backward=None):
    """A StableHLO module's public @main (MLIR text) as a PyTorch op on tpu tensors of exactly
    main's argument types: `torch_tpu::<name>`. Without `backward` it is not differentiable."""
    try:
        source = _TextSource(text)
    except _stablehlo.ImportError_ as e:
        raise KernelError(f"torch_tpu::{name}: cannot import its StableHLO module: {e}") from None
    _check_custom_calls(f"torch_tpu::{name}", source.module)
    with _lock:
        if name in _kernels or hasattr(torch.ops.torch_tpu, name):
            raise KernelError(f"a kernel or op named torch_tpu::{name} exists already: choose another name")
        k = Kernel(name, source, backward=backward, differentiable=backward is not None)
        _kernels[name] = k
    return k
