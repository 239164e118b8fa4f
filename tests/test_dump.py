"""TORCH_TPU_DUMP_DIR: every program compiled (or loaded from the disk cache) is written as
StableHLO text with a header naming its op or graph and its compile options; file names sort
by time and say what they hold. Each case runs in a fresh process."""
import os
import re
import textwrap

import pytest

from conftest import run_python

pytestmark = pytest.mark.mode_independent("each case runs in a process that sets its own eager mode")

CODE = """
    import torch, torch_tpu
    x = torch.arange(12.0).reshape(3, 4).to("tpu")
    (x + x).cpu()                                   # a per-op program (strict, or fused op by op)
    for _ in range(2):                              # a fused whole graph, compiled at first sight
        with torch_tpu.eager_mode("fused"):
            ((x * 2).relu() @ x.t()).sum().cpu()
    f = torch.compile(lambda a: (a.sin() @ a.t()).exp(), backend="tpu")
    print("OUT", f(x).sum().item())
"""


def _run(dump, cache, **extra):
    env = {"TORCH_TPU_DUMP_DIR": str(dump), "TORCH_TPU_CACHE_DIR": str(cache), "TORCH_TPU_EAGER_MODE": "strict",
           "TORCH_TPU_FUSED_COMPILE_AFTER": "1", "TORCH_TPU_FUSED_BACKGROUND_COMPILE": "0", **extra}
    r = run_python(textwrap.dedent(CODE), env=env, timeout=300)
    assert r.returncode == 0 and "OUT" in r.stdout, r.stdout + r.stderr
    return sorted(os.listdir(dump))


def _read(folder, name):
    with open(os.path.join(folder, name)) as f:
        return f.read()


NAME = re.compile(r"^\d{8}T\d{6}\.\d{3}Z-p\d+-(\d{6})-(op|fused|compiled)(-cached)?-[A-Za-z0-9._-]+\.mlir$")


def test_dump_names_kinds_and_headers(tmp_path):
    dump = tmp_path / "dump"
    files = _run(dump, tmp_path / "cache")
    for f in files:
        assert NAME.match(f), f
    # Names sort by time: the sequence numbers of one process come out in order.
    seqs = [int(NAME.match(f).group(1)) for f in files]
    assert seqs == sorted(seqs) and seqs == list(range(1, len(files) + 1))
    kinds = {NAME.match(f).group(2) for f in files}
    assert kinds == {"op", "fused", "compiled"}, files
    add = [f for f in files if f.endswith("-op-aten__add.Tensor.mlir")]
    assert len(add) == 1, files
    text = _read(dump, add[0])
    assert text.startswith("// torch_tpu program dump\n// op: aten::add.Tensor\n")
    assert "// compile options (CompileOptionsProto, " in text and "3 { 1: -1 4: 1 5: 1 }" in text
    assert "// compile options hex: " in text and "// XLA_FLAGS=" in text and "// platform: cpu " in text
    assert re.search(r"// disk cache key: [0-9a-f]{8,}", text)
    assert re.search(r"^// compiled in \d+\.\d ms$", text, re.M), text
    body = "\n".join(line for line in text.splitlines() if not line.startswith("//"))
    assert body.lstrip().startswith("module") and "stablehlo.add" in body
    fused = _read(dump, next(f for f in files if "-fused-" in f))
    assert "// fused: fused graph of " in fused and "functions (@f<id>: the op, its calls):" in fused
    ids = re.findall(r"^//   @f(\d+): aten::\S+ x\d+$", fused, re.M)
    assert ids and all(f"func.func private @f{i}(" in fused for i in ids), fused
    compiled = _read(dump, next(f for f in files if "-compiled-" in f))
    assert "// compiled: compiled graph " in compiled and "stablehlo.dot_general" in compiled


def test_disk_cache_loads_are_dumped_and_noted(tmp_path):
    cold = _run(tmp_path / "cold", tmp_path / "cache")
    warm = _run(tmp_path / "warm", tmp_path / "cache")
    assert not any("-cached-" in f for f in cold)
    assert warm and all("-cached-" in f for f in warm), warm
    # The same programs, in the same order, with the same text.
    strip = lambda name: name.split("-", 3)[3].replace("-cached", "")  # noqa: E731
    assert [strip(f) for f in warm] == [strip(f) for f in cold]
    text = _read(tmp_path / "warm", warm[0])
    assert "// loaded from the disk cache (compiled by an earlier process), not compiled now" in text
    assert "// compiled in" not in text
    body = lambda t: [line for line in t.splitlines() if not line.startswith("//")]  # noqa: E731
    assert body(text) == body(_read(tmp_path / "cold", cold[0]))


def test_a_dump_dir_that_cannot_be_made_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code = textwrap.dedent("""
        import torch
        try:
            torch.ones(2, device="tpu")
            print("NO ERROR")
        except Exception as e:
            print("RAISED", type(e).__name__, e)
    """)
    r = run_python(code, env={"TORCH_TPU_DUMP_DIR": str(blocker / "sub")})
    assert r.returncode == 0, r.stderr
    assert "RAISED" in r.stdout and "TORCH_TPU_DUMP_DIR" in r.stdout, r.stdout + r.stderr
