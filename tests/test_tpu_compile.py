"""Every lowering compiles for TPU: programs torch-tpu builds (with TPU lowerings on,
TORCH_TPU_TPU_LOWERINGS=1) are compiled by libtpu for v5e and v6e without a TPU, in a child
process (libtpu aborts the process on some programs). Covered: the OpInfo entries named after a
lowered op (first sample, float32, plus the dtypes with known TPU problems), a compiled Llama
and Mixtral train step, a Diffusers UNet and DiT step, and _grouped_mm. Each program must
compile; the ops libtpu cannot take raise at the op (README, "TPU refusals"). Skipped when
libtpu is not installed."""
import importlib.util
import json
import os
import subprocess
import sys
import threading

import pytest
import torch

from conftest import run_python

pytestmark = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None or importlib.util.find_spec("jax") is None,
                                reason="libtpu (torch-tpu[tpu]) is not installed")

TOPOLOGIES = ("v5e:1x1", "v6e:1x1")
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tpu_compile_worker.py")
ENV = {"TORCH_TPU_TPU_LOWERINGS": "1", "TORCH_TPU_QUIET": "1"}

# OpInfo entries whose programs had TPU problems: converts to complex128, FFTs, int64 products.
EXTRA_DTYPES = {"float64": ["fft.fft", "fft.rfft", "fft.ifft", "mm", "bmm", "mv", "addmm"],
                "int64": ["mm", "bmm", "mv", "matmul", "addmm", "baddbmm", "dot", "einsum"],
                "complex128": ["mm", "add", "mul", "fft.fft"]}

OPINFO = r"""
import sys, warnings
warnings.filterwarnings("ignore")
import torch, torch_tpu
from torch_tpu.testing import opcheck
extra = %r
bases = {n.split("::")[-1].split(".")[0] for n in torch_tpu.native_ops()}
for op in opcheck.select_ops():
    dtypes = ["float32"] if opcheck.lowered(op, bases) else []
    dtypes += [d for d, names in extra.items() if op.name in names]
    for name in dtypes:
        dtype = getattr(torch, name)
        if dtype not in op.supported_dtypes("cpu"):
            continue
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            try:
                out = opcheck._run(op, sample, "tpu", op.name in opcheck._CPU_ARGS)[0]
                for t in opcheck._tensors(out):
                    t.cpu()
            except Exception as e:
                if "compiles for TPU" not in str(e):  # a documented refusal raises before compiling
                    pass
            break
""" % EXTRA_DTYPES

MODELS = r"""
import warnings
warnings.filterwarnings("ignore")
import torch, torch_tpu, transformers
from torch_tpu.testing import tiny_diffusers
T = transformers
dec = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, max_position_embeddings=64)
for config in (T.LlamaConfig(**dec), T.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **dec)):
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(config).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(3, 96, (2, 8)).to("tpu")
    @torch.compile(backend="tpu")
    def step(ids):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss
    step(ids).cpu()
    opt.step()
for name in ("ddpm", "dit"):
    pipe, kwargs = tiny_diffusers.build(name, steps=1)
    pipe = pipe.to("tpu")
    tiny_diffusers.run(pipe, kwargs, torch.Generator().manual_seed(0))
a, b = torch.randn(16, 8).to("tpu"), torch.randn(3, 8, 4).to("tpu")
torch._grouped_mm(a, b, torch.tensor([5, 9, 16], dtype=torch.int32).to("tpu")).cpu()
"""


def _modules(code, tmp_path):
    """Runs `code` with TPU lowerings on -> the distinct module texts it compiled, as files."""
    dump = tmp_path / "dump"
    r = run_python(code, env={**ENV, "TORCH_TPU_DUMP_DIR": str(dump)}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    texts = {}
    for f in sorted(dump.glob("*.mlir")):
        text = "\n".join(line for line in f.read_text().splitlines() if not line.startswith("//"))
        texts.setdefault(text, f.name)
    files = []
    for i, (text, name) in enumerate(texts.items()):
        path = tmp_path / f"{i:05d}-{name}"
        path.write_text(text)
        files.append(str(path))
    return files


def _compile(paths, topology):
    """{path: error or None}. A module that kills the worker is retried once in a fresh one."""
    results, todo, tries = {}, list(paths), {}
    while todo:
        proc = subprocess.Popen([sys.executable, WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        err = []
        reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
        reader.start()
        while todo:
            proc.stdin.write(json.dumps({"topology": topology, "path": todo[0]}) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                reader.join(5)
                tries[todo[0]] = tries.get(todo[0], 0) + 1
                if tries[todo[0]] >= 2:
                    fatal = [e for e in err if e.startswith("F")]
                    results[todo.pop(0)] = f"worker died ({proc.returncode}): " + (fatal[-1] if fatal else "".join(err[-5:]))
                break
            answer = json.loads(line)
            results[todo.pop(0)] = None if answer["ok"] else answer["error"]
        else:
            proc.stdin.close()
            proc.wait()
    return results


def _assert_all_compile(files):
    assert files
    for topology in TOPOLOGIES:
        failed = {os.path.basename(p): e for p, e in _compile(files, topology).items() if e}
        assert not failed, f"{len(failed)}/{len(files)} programs do not compile for {topology}: " + json.dumps(
            failed, indent=1)[:6000]


def test_opinfo_programs_compile_for_tpu(tmp_path):
    _assert_all_compile(_modules(OPINFO, tmp_path))


def test_model_programs_compile_for_tpu(tmp_path):
    _assert_all_compile(_modules(MODELS, tmp_path))


def test_tpu_lowerings_match_cpu_and_refuse_clearly():
    """With TPU lowerings on (here on the CPU plugin): converts to complex128 built from parts
    and int64 products as sums give PyTorch's values; a float64 FFT raises naming op and dtype."""
    code = r"""
import torch, torch_tpu
a = torch.randn(4, 5) * 3
for dt in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64, torch.float64):
    x = a.to(dt)
    assert torch.equal(x.to("tpu").to(torch.complex128).cpu(), x.to(torch.complex128)), dt
z = torch.randn(3, dtype=torch.complex128)
assert torch.equal(z.to("tpu").to(torch.complex64).cpu(), z.to(torch.complex64))
i, j = torch.randint(-2**40, 2**40, (3, 4, 5)), torch.randint(-2**40, 2**40, (3, 5, 2))
assert torch.equal((i.to("tpu") @ j.to("tpu")).cpu(), i @ j)  # wraps as the CPU does
assert torch.equal(torch.mv(i[0].to("tpu"), j[0, :, 0].to("tpu")).cpu(), torch.mv(i[0], j[0, :, 0]))
for x in (torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.complex128)):
    try:
        torch.fft.fft(x.to("tpu")).cpu()
        raise SystemExit("no error")
    except RuntimeError as e:
        assert "_fft_" in str(e) and "FFT of" in str(e) and "compiles for TPU" in str(e), e
assert torch.fft.fft(torch.randn(8).to("tpu")).cpu().dtype == torch.complex64
try:
    torch.nn.functional.conv1d(torch.ones(1, 1, 4, dtype=torch.long).to("tpu"), torch.ones(1, 1, 2, dtype=torch.long).to("tpu")).cpu()
    raise SystemExit("no error")
except RuntimeError as e:
    assert "convolution of int64" in str(e), e
print("ok")
"""
    r = run_python(code, env=ENV)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr[-3000:]
