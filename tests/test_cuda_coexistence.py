"""torch.cuda beside torch_tpu (issue #27). Where CUDA is present (a CUDA build of PyTorch and an
NVIDIA GPU, as on the device-check machine): eager and Inductor forward passes on CUDA tensors
match the CPU in a process that has loaded torch_tpu; a CUDA backward there either works or fails
with torch_tpu's explanation, never PyTorch's internal assert (torch_tpu/_other_accelerators.py
says why it cannot work on PyTorch 2.9-2.13); and CUDA training, eager and with Inductor, works in
a process that keeps torch_tpu out (TORCH_DEVICE_BACKEND_AUTOLOAD=0), the advice that error gives.
Everywhere: the explanation replaces exactly that assert and nothing else."""
import textwrap

import pytest
import torch

import torch_tpu
from torch_tpu import _other_accelerators

from conftest import run_python

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs torch.cuda (a CUDA build of PyTorch and an NVIDIA GPU); make device-check runs it on a GPU machine")


def _mlp_step(device, compile_it=False):
    """Loss and first-layer gradient of one training step of a small MLP, from fixed weights."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    model, x, y = model.to(device), x.to(device), y.to(device)
    fn = torch.compile(model) if compile_it else model
    loss = torch.nn.functional.mse_loss(fn(x), y)
    loss.backward()
    return loss.detach().cpu(), model[0].weight.grad.cpu()


def test_the_explanation_replaces_only_that_assert():
    def engine(fail):
        raise RuntimeError(fail)

    run = _other_accelerators._explained(engine)
    with pytest.raises(RuntimeError, match="cannot run in a process that has loaded torch_tpu") as e:
        run("opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED at engine.cpp:1085")
    assert "INTERNAL ASSERT" in str(e.value.__cause__)
    with pytest.raises(RuntimeError, match="^element 0 of tensors does not require grad$"):
        run("element 0 of tensors does not require grad")
    # Installed where every backward goes, once, and backward on CPU and tpu tensors still works.
    assert torch.autograd.graph._engine_run_backward._torch_tpu_explained
    assert torch.autograd._engine_run_backward is torch.autograd.graph._engine_run_backward
    _other_accelerators.install()
    assert not hasattr(torch.autograd.graph._engine_run_backward.__wrapped__, "_torch_tpu_explained")
    loss, grad = _mlp_step("tpu")
    cpu_loss, cpu_grad = _mlp_step("cpu")
    torch.testing.assert_close(loss, cpu_loss)
    torch.testing.assert_close(grad, cpu_grad, atol=1e-5, rtol=1e-4)


@needs_cuda
def test_cuda_and_inductor_forward_with_torch_tpu_loaded():
    torch.manual_seed(0)
    a, b = torch.randn(64, 128), torch.randn(128, 32)
    ac, bc = a.cuda(), b.cuda()
    torch.testing.assert_close((ac @ bc).relu().cpu(), (a @ b).relu(), atol=1e-2, rtol=1e-3)  # TF32 may be on
    fn = torch.compile(lambda x, y: torch.nn.functional.gelu(x @ y).sum(-1))  # Inductor: cuda tensors
    torch.testing.assert_close(fn(ac, bc).cpu(), torch.nn.functional.gelu(a @ b).sum(-1), atol=1e-2, rtol=1e-3)
    # The tpu device works in the same process.
    torch.testing.assert_close((a.to("tpu") @ b.to("tpu")).cpu(), a @ b, atol=1e-4, rtol=1e-4)


@needs_cuda
@pytest.mark.parametrize("compile_it", [False, True], ids=["eager", "inductor"])
def test_cuda_backward_with_torch_tpu_loaded_works_or_says_why(compile_it):
    cpu_loss, cpu_grad = _mlp_step("cpu")
    try:
        loss, grad = _mlp_step("cuda", compile_it)
    except Exception as e:  # noqa: BLE001 - Dynamo wraps what Inductor's AOTAutograd trace raised
        chain = []
        while e is not None:
            chain.append(e)
            e = e.__cause__ or e.__context__
        assert any(str(c) == _other_accelerators.MESSAGE for c in chain), chain
        assert any("opt_ready_stream" in str(c) for c in chain), chain
        return
    # A PyTorch that keeps CUDA's streams beside PrivateUse1 runs it: then it must be right.
    torch.testing.assert_close(loss, cpu_loss, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(grad, cpu_grad, atol=1e-3, rtol=1e-3)


@needs_cuda
def test_cuda_training_in_a_process_without_torch_tpu():
    code = textwrap.dedent("""
        import sys, torch
        assert "torch_tpu" not in sys.modules and torch.accelerator.current_accelerator().type == "cuda"
        torch.manual_seed(0)
        for compile_it in (False, True):
            model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
            x, y = torch.randn(8, 16), torch.randn(8, 4)
            ref = torch.nn.functional.mse_loss(model(x), y)
            ref.backward()
            cpu_grad = model[0].weight.grad.clone()
            model.zero_grad()
            model.cuda()
            fn = torch.compile(model) if compile_it else model
            loss = torch.nn.functional.mse_loss(fn(x.cuda()), y.cuda())
            loss.backward()
            torch.testing.assert_close(model[0].weight.grad.cpu(), cpu_grad, atol=1e-3, rtol=1e-3)
            model.cpu()
        print("CUDA TRAINING OK")
    """)
    # torch-tpu is installed, and plain `import torch` leaves it out where a GPU is present.
    r = run_python(code, env={"TORCH_TPU_AUTOLOAD": ""}, timeout=600)
    assert r.returncode == 0 and "CUDA TRAINING OK" in r.stdout, r.stdout + r.stderr[-4000:]


# Installing torch-tpu never breaks CUDA (issue #35): where PyTorch is a CUDA build and a GPU is
# present, `import torch` does not load torch_tpu. Checked here without a GPU by making
# torch_tpu_autoload see one, in a fresh interpreter (autoload runs inside `import torch`).
_PRETEND_GPU = "import torch_tpu_autoload; torch_tpu_autoload.gpu_present = lambda: True\n"


class _Version:
    def __init__(self, cuda=None, hip=None):
        self.cuda, self.hip = cuda, hip


class _Cuda:
    def __init__(self, nvml=None, runtime=0):
        if nvml is not None:
            self._device_count_nvml = lambda: nvml
        self._runtime = runtime

    def device_count(self):
        if isinstance(self._runtime, Exception):
            raise self._runtime
        return self._runtime


def test_what_counts_as_a_gpu_present():
    from torch_tpu_autoload import _gpu_build_with_device as present

    assert not present(_Version(), _Cuda(nvml=2, runtime=2))  # a CPU build: no CUDA to protect
    assert present(_Version(cuda="13.0"), _Cuda(nvml=1))
    assert not present(_Version(cuda="13.0"), _Cuda(nvml=0, runtime=1))  # NVML answers first
    assert present(_Version(cuda="13.0"), _Cuda(nvml=-1, runtime=1))  # NVML unusable: the runtime
    assert not present(_Version(cuda="13.0"), _Cuda(runtime=0))
    assert not present(_Version(cuda="13.0"), _Cuda(runtime=RuntimeError("no driver")))
    assert present(_Version(hip="6.4"), _Cuda(runtime=1))  # ROCm is PyTorch's "cuda" device too
    # This machine's PyTorch: a CPU build, so tpu autoloads (the suite runs on it).
    assert not torch_tpu_autoload_module().gpu_present() or torch.cuda.is_available()


def torch_tpu_autoload_module():
    import torch_tpu_autoload

    return torch_tpu_autoload


def test_the_autoload_setting():
    should = torch_tpu_autoload_module().should_autoload
    assert should({"TORCH_TPU_AUTOLOAD": "1"}) and not should({"TORCH_TPU_AUTOLOAD": "0"})
    assert should({}) == (not torch_tpu_autoload_module().gpu_present())
    with pytest.raises(ValueError, match="TORCH_TPU_AUTOLOAD must be 0 or 1, not 'yes'"):
        should({"TORCH_TPU_AUTOLOAD": "yes"})


def test_import_torch_leaves_torch_tpu_out_where_a_gpu_is_present():
    code = _PRETEND_GPU + textwrap.dedent("""
        import sys, warnings, torch
        assert "torch_tpu" not in sys.modules, "import torch loaded torch_tpu beside a GPU"
        assert torch._C._get_privateuse1_backend_name() == "privateuseone"  # not renamed: CUDA keeps the accelerator
        assert not hasattr(torch, "tpu")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch_tpu  # explicit: loads, and says what it costs
        from torch_tpu._other_accelerators import LOADED_BESIDE_GPU
        assert [str(w.message) for w in caught].count(LOADED_BESIDE_GPU) == 1, [str(w.message) for w in caught]
        x = torch.arange(6.0).reshape(2, 3)
        torch.testing.assert_close((x.to("tpu") * 2).sum(0).cpu(), (x * 2).sum(0))
        print("EXPLICIT IMPORT OK")
    """)
    r = run_python(code, env={"TORCH_TPU_AUTOLOAD": ""})
    assert r.returncode == 0 and "EXPLICIT IMPORT OK" in r.stdout, r.stdout + r.stderr[-4000:]


@pytest.mark.parametrize("setting,pretend_gpu,loaded", [("1", True, True), ("0", False, False), ("", False, True)])
def test_autoload_can_be_forced_either_way(setting, pretend_gpu, loaded):
    code = (_PRETEND_GPU if pretend_gpu else "") + textwrap.dedent("""
        import sys, warnings
        warnings.simplefilter("always")
        import torch
        print("LOADED" if "torch_tpu" in sys.modules else "NOT LOADED")
        if "torch_tpu" in sys.modules:
            print(torch.ones(3, device="tpu").sum().item())
    """)
    r = run_python(code, env={"TORCH_TPU_AUTOLOAD": setting})
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.splitlines()[0] == ("LOADED" if loaded else "NOT LOADED"), r.stdout
    if loaded:
        assert r.stdout.splitlines()[1] == "3.0"
        assert ("cannot run in this process" in r.stderr) == pretend_gpu  # the warning, where forced
