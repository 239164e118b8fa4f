"""Everything that depends on the PyTorch release, on the Python side.

First, the release check that runs before the compiled extension loads. torch_tpu/_C links
against libtorch's C++ ABI, which changes between PyTorch releases: loaded under another
release it fails with an undefined symbol, or worse, loads and crashes later. So the version _C
was compiled against (recorded in _build_info.py at build time) is compared with the running
PyTorch first. Patch releases of one major.minor keep the ABI, which is also what the wheel's
`torch==X.Y.*` requirement allows (tools/packaging/torch_requirement.py writes it).

Then the differences between the releases torch_tpu builds against (2.11 to 2.13), each named
with the release that needs it; csrc/aten/torch_compat.h holds the C++ ones.

2.11's compiled FlexAttention backward holds aten::as_strided_scatter, which later releases
decompose; its graph lowering (csrc/lowering/view_ops.cpp) keeps it in the program
(test_flex_attention::test_compiled_forward_and_gradients).
"""
import re

import torch


def release(version):
    """(major, minor) of a PyTorch version string such as "2.13.0+cpu" or "2.14.0a0+git1234"."""
    match = re.match(r"(\d+)\.(\d+)", str(version))
    if not match:
        raise ValueError(f"not a PyTorch version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def mismatch_message(torch_tpu_version, built_for, running):
    """The error text for an extension built for PyTorch `built_for` under PyTorch `running`,
    or None when the two releases match."""
    if release(built_for) == release(running):
        return None
    major, minor = release(built_for)
    return (
        f"torch_tpu {torch_tpu_version} was built for PyTorch {built_for}, but PyTorch {running} is "
        f"installed; its compiled extension works only with PyTorch {major}.{minor}.x. Either install "
        f"the PyTorch it was built for (pip install \"torch=={major}.{minor}.*\"), or install a torch_tpu "
        f"built for PyTorch {running} (from a source checkout: make wheel, then pip install dist/*.whl). "
        "To import torch without torch_tpu meanwhile, set TORCH_DEVICE_BACKEND_AUTOLOAD=0.")


def check_torch(torch_tpu_version, built_for, running):
    """Raises ImportError when `running` is not the PyTorch release `built_for` names."""
    message = mismatch_message(torch_tpu_version, built_for, running)
    if message:
        raise ImportError(message)


# ---- Differences between the PyTorch releases torch_tpu supports (2.11 to 2.13, pyproject.toml),
# each named with the release that needs it. csrc/aten/torch_compat.h holds the C++ ones.

def override_meta_kernel(lib, name, fn):
    """Registers `fn` as aten::`name`'s Meta kernel in the torch.library.Library `lib`, replacing
    PyTorch's own. 2.11: Library.impl refuses to replace a kernel PyTorch registered from Python
    (_grouped_mm's Meta kernel is one) unless told to with allow_override=True, 2.13's default;
    the keyword exists in every supported release."""
    lib.impl(name, fn, "Meta", allow_override=True)


def missing_meta_kernels(running=None):
    """ATen ops (names) whose Meta kernel the running release lacks, or has without a check the
    CPU kernel makes, and tpu needs: the generic kernel infers every result's type, and raises
    the op's errors, with Meta. torch_tpu/_meta.py adds them."""
    missing = []
    if release(running or torch.__version__) < (2, 12):
        # 2.11: no Meta kernel for SDPA's overrideable backward (2.12 and 2.13 have one), so
        # every backward through F.scaled_dot_product_attention on tpu raised "not implemented".
        missing.append("_scaled_dot_product_fused_attention_overrideable_backward")
        # 2.11: bmm's Meta kernel does not compare the two dtypes (2.12's does), so a bmm of
        # float32 and float64 returned a promoted result on tpu where the CPU raises.
        missing.append("bmm")
    if release(running or torch.__version__) < (2, 13):
        # 2.11, 2.12: no Meta kernel for the encoder layer's fast path (2.13 has one), which
        # nn.TransformerEncoderLayer takes in inference on tpu: it raised NotImplementedError.
        missing.append("_transformer_encoder_layer_fwd")
    return missing


def fold_host_constants_moved_to_tpu(gm):
    """2.11: Dynamo records a tensor constant that Python builds on the host and indexing moves to
    the device (x[:, [0, 2]] on a tpu x) as get_attr (a CPU tensor) -> lift_fresh_copy ->
    _to_copy(device=tpu), nodes a tpu program cannot hold, so the graph ran in pieces; 2.12 and 2.13
    record the constant on the device. Replaces each such chain by a get_attr of the constant
    moved once, here, to tpu (as later releases have it). Returns whether the graph changed."""
    if release(torch.__version__) >= (2, 12):
        return False
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    aten = torch.ops.aten
    changed = False
    for node in list(gm.graph.find_nodes(op="call_function", target=aten._to_copy.default)):
        src = node.args[0]
        if getattr(src, "target", None) is aten.lift_fresh_copy.default:
            src = src.args[0]
        if getattr(src, "op", None) != "get_attr":
            continue
        const = getattr(gm, src.target, None)
        val = node.meta.get("val")
        if not (isinstance(const, torch.Tensor) and const.device.type == "cpu" and isinstance(val, torch.Tensor)
                and val.device.type == "tpu" and val.layout == torch.strided):
            continue
        name = f"_torch_tpu_constant_{node.name}"
        with unset_fake_temporarily():  # the compiler runs under the tracing FakeTensorMode
            gm.register_buffer(name, const.to(device=val.device, dtype=val.dtype))
        with gm.graph.inserting_before(node):
            moved = gm.graph.get_attr(name)
        moved.meta["val"] = val
        node.replace_all_uses_with(moved)
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed
