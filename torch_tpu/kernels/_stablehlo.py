"""Importing a StableHLO module (MLIR text) as private functions of our own modules.

Torch-free and JAX-free: it works on the text JAX prints (`jax.export`'s `mlir_module()`) and on
text a user writes. What it does to a module, and why:
- drops locations (`loc(...)`, `#loc` aliases): they name the user's files and would make
  two identical kernels print differently (the disk cache keys programs by their text);
- drops the module and its attributes (mhlo.num_partitions, jax.uses_shape_polymorphism, ...):
  the module that imports the functions has its own;
- renames every function `@f` to `@<prefix>_f` and makes it private, so that two kernels, or two
  variants of one, never collide inside one module;
- drops argument and result attributes (jax.result_info, mhlo.sharding, mhlo.layout_mode):
  they describe the exported program's boundary, which no longer exists once it is called;
- refuses what a call in place cannot mean: dynamic shapes, tensor encodings on main, top-level
  operations other than functions (sdy.mesh), no @main.
"""
import re

# MLIR element types with a PyTorch dtype here (csrc/stablehlo/builder.cpp MlirName).
ELEMENT_TYPES = ("i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64", "f16", "bf16", "f32", "f64",
                 "complex<f32>", "complex<f64>")

# Custom calls of Pallas kernels compiled for one platform, and that platform. A plugin of
# another platform cannot run them; interpret=True lowers the same kernel to plain StableHLO.
PLATFORM_CUSTOM_CALLS = {
    "tpu_custom_call": "tpu",                 # Mosaic TPU
    "mosaic_gpu": "cuda",                     # Mosaic GPU
    "mosaic_gpu_v2": "cuda",
    "__gpu$xla.gpu.triton": "cuda",           # Triton
    "triton_kernel_call": "cuda",
}


# Custom calls that jaxlib's own CPU runtime registers (LAPACK for jnp.linalg) and the XLA CPU
# plugin does not: it fails to compile them ("No FFI handler registered for lapack_sgetrf_ffi").
JAXLIB_CPU_CUSTOM_CALL_PREFIXES = ("lapack_",)


class ImportError_(ValueError):
    """A module that cannot be imported; the message says why."""


class Module:
    """An imported module: `functions` (private, renamed) and its entry's signature."""

    def __init__(self, functions, entry, inputs, results, custom_calls):
        self.functions = functions
        self.entry = entry
        self.inputs = inputs          # [(element type, [dims])] of main's arguments
        self.results = results        # [(element type, [dims])] of main's results
        self.custom_calls = custom_calls  # call_target_name of every stablehlo.custom_call


def _skip_string(text, i):
    """Index after the string literal starting at text[i] == '"'."""
    i += 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    raise ImportError_("unterminated string literal")


def _matching(text, i, open_, close):
    """Index after the bracket that closes text[i] == open_ (strings skipped)."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ImportError_(f"unbalanced '{open_}'")


def strip_locations(text):
    """The text without `#loc...` alias lines and `loc(...)` annotations."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#loc")]
    text = "\n".join(lines)
    out, i = [], 0
    for m in re.finditer(r'"|\bloc\(', text):
        if m.start() < i:
            continue
        if m.group() == '"':
            end = _skip_string(text, m.start())
            out.append(text[i:end])
            i = end
            continue
        out.append(text[i:m.start()].rstrip(" "))
        i = _matching(text, m.end() - 1, "(", ")")
    out.append(text[i:])
    return "".join(out)


def _angle_end(text, i):
    """Index after the '>' that closes text[i] == '<' ('->' arrows inside do not close it)."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c == "<":
            depth += 1
        elif c == ">" and text[i - 1] != "-":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ImportError_("unbalanced '<'")


def strip_sharding_rules(text):
    """The text without `sdy.sharding_rule = #sdy.op_sharding_rule<...>` attributes, which JAX
    puts on custom calls: with one partition they say nothing, and they are the only Shardy
    syntax in a module that is not sharded."""
    out, i = [], 0
    for m in re.finditer(r"(,\s*)?sdy\.sharding_rule\s*=\s*#sdy\.op_sharding_rule<", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        i = _angle_end(text, m.end() - 1)
        if m.group(1) is None:  # the first attribute: drop the comma after it instead
            after = re.compile(r"\s*,\s*").match(text, i)
            if after:
                i = after.end()
    out.append(text[i:])
    return "".join(out)


def _parse_type(t):
    """'tensor<2x8xf32>' -> ('f32', [2, 8])."""
    t = t.strip()
    m = re.fullmatch(r"tensor<(.*)>", t)
    if not m:
        raise ImportError_(f"argument or result type {t} is not a tensor")
    if "," in m.group(1):
        raise ImportError_(f"type {t} has an encoding (bounds or sparsity): only plain static tensors are supported")
    shape = re.fullmatch(r"((?:(?:\d+|\?)x)*)(.+)", m.group(1))
    dims = [d for d in shape.group(1).split("x") if d]
    elem = shape.group(2)
    if "?" in dims:
        raise ImportError_(f"type {t} has a dynamic dimension: only static shapes are supported")
    if elem not in ELEMENT_TYPES:
        raise ImportError_(f"element type {elem} (in {t}) has no PyTorch dtype here")
    return elem, [int(d) for d in dims]


def _split_top(text, sep=","):
    """Splits at `sep` outside brackets and strings."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    if text[start:].strip():
        parts.append(text[start:])
    return parts


def _drop_attr_dict(text):
    """`tensor<...> {attrs}` -> `tensor<...>`."""
    i = 0
    while i < len(text):
        if text[i] == '"':
            i = _skip_string(text, i)
            continue
        if text[i] == "<":
            i = _matching(text, i, "<", ">")
            continue
        if text[i] == "{":
            return text[:i].strip()
        i += 1
    return text.strip()


class _Func:
    def __init__(self, name, args, results, body):
        self.name = name
        self.args = args          # [(ssa name, type text)]
        self.results = results    # [type text]
        self.body = body          # "{ ... }" including braces


def _parse_funcs(text):
    """The top-level func.func operations of a module's text; refuses anything else."""
    text = text.strip()
    m = re.match(r"module\b", text)
    if m:
        open_at = text.find("{", m.end())
        # `module @name attributes {...} {`: the body is the last brace group at top level.
        i = m.end()
        while True:
            open_at = text.find("{", i)
            if open_at < 0:
                raise ImportError_("a module without a body")
            end = _matching(text, open_at, "{", "}")
            if text[i:open_at].rstrip().endswith("attributes"):
                i = end
                continue
            body = text[open_at + 1:end - 1]
            break
    else:
        body = text
    funcs, i = [], 0
    while True:
        while i < len(body) and body[i].isspace():
            i += 1
        if i >= len(body):
            return funcs
        m = re.compile(r"func\.func\s+(?:(public|private|nested)\s+)?@([\w$.]+|\"[^\"]*\")\s*").match(body, i)
        if not m:
            op = body[i:i + 60].split("\n")[0]
            raise ImportError_(f"the module holds an operation other than a function at top level: {op}")
        name = m.group(2).strip('"')
        i = m.end()
        if body[i] != "(":
            raise ImportError_(f"function @{name}: expected '('")
        args_end = _matching(body, i, "(", ")")
        args = []
        for a in _split_top(body[i + 1:args_end - 1]):
            ssa, _, rest = a.partition(":")
            args.append((ssa.strip(), _drop_attr_dict(rest)))
        i = args_end
        results = []
        rest = body[i:]
        arrow = re.match(r"\s*->\s*", rest)
        if arrow:
            i += arrow.end()
            if body[i] == "(":
                end = _matching(body, i, "(", ")")
                results = [_drop_attr_dict(r) for r in _split_top(body[i + 1:end - 1])]
                i = end
            else:
                t = re.compile(r"[\w]+<").match(body, i)
                if not t:
                    raise ImportError_(f"function @{name}: cannot read its result type")
                end = _matching(body, t.end() - 1, "<", ">")
                results = [body[i:end]]
                i = end
        attrs = re.compile(r"\s*attributes\s*").match(body, i)
        if attrs:
            i = _matching(body, attrs.end(), "{", "}")
        while body[i].isspace():
            i += 1
        if body[i] != "{":
            raise ImportError_(f"function @{name} has no body (a declaration): not supported")
        end = _matching(body, i, "{", "}")
        funcs.append(_Func(name, args, results, body[i:end]))
        i = end


def import_module(text, prefix, entry="main"):
    """Imports `text` (a StableHLO module) with every function renamed `<prefix>_<name>`."""
    text = strip_sharding_rules(strip_locations(text))
    funcs = _parse_funcs(text)
    names = {f.name for f in funcs}
    if entry not in names:
        raise ImportError_(f"the module has no @{entry} function (it has {', '.join('@' + n for n in sorted(names))})")
    if not re.fullmatch(r"[A-Za-z_][\w]*", prefix):
        raise ImportError_(f"bad symbol prefix {prefix!r}")

    def rename(m):
        name = m.group(1) if m.group(1) is not None else m.group(2)
        if name is None:  # a string literal: its text is data (backend_config), never a symbol
            return m.group(0)
        return sym(name) if name in names else m.group(0)

    def sym(name):
        renamed = f"{prefix}_{name}"
        return f"@{renamed}" if re.fullmatch(r"[\w$.]+", renamed) else f'@"{renamed}"'

    symbol = re.compile(r'@"([^"]*)"|@([A-Za-z_][\w$.]*)|"(?:[^"\\]|\\.)*"')
    out = []
    custom_calls = []
    main = None
    for f in funcs:
        body = symbol.sub(rename, f.body)
        custom_calls += re.findall(r'call_target_name\s*=\s*"([^"]*)"', body)
        custom_calls += [t.strip('"') for t in re.findall(r'stablehlo\.custom_call\s+@([\w$.]+|"[^"]*")', f.body)]
        args = ", ".join(f"{ssa}: {t}" for ssa, t in f.args)
        results = ", ".join(f.results)
        out.append(f"  func.func private {sym(f.name)}({args}) -> ({results}) {body}\n")
        if f.name == entry:
            main = f
    inputs = [_parse_type(t) for _, t in main.args]
    results = [_parse_type(t) for t in main.results]
    if not results:
        raise ImportError_(f"@{entry} returns nothing: a kernel returns at least one tensor")
    # custom_call's pretty form names its target as a symbol (`stablehlo.custom_call @foo`):
    # targets are not functions, so an accidental rename is undone.
    text_out = "".join(out)
    for target in set(custom_calls):
        if target in names:
            raise ImportError_(f"custom call target {target} has the name of a function of the module")
    return Module(text_out, f"{prefix}_{entry}", inputs, results, sorted(set(custom_calls)))


def format_types(types):
    return ", ".join(f"{e}[{', '.join(map(str, d))}]" for e, d in types)


def parse_version(v):
    """'1.9.3' -> (1, 9, 3); None for text that is not a version."""
    try:
        return tuple(int(x) for x in str(v).split("."))
    except ValueError:
        return None
