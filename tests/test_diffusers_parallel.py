"""A tiny Flux transformer split across two processes, one tpu device each, with Diffusers'
enable_parallelism: tensor parallel (TensorParallelConfig(tp_degree=2): sharded Linear weights,
DTensor and all-reduces) and Ulysses context parallel (ContextParallelConfig(ulysses_degree=2):
the sequence split, all-to-all around attention). Both give the single-device output, step after
step of a short flow-matching loop, on every rank."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import needs_devices

pytest.importorskip("diffusers")

WORKER = textwrap.dedent('''
    import os, sys, tempfile, warnings
    warnings.simplefilter("ignore")
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    import torch_tpu
    from torch_tpu.testing import tiny_diffusers

    def inputs():
        g = torch.Generator().manual_seed(1)
        return dict(hidden_states=torch.randn(1, 16, 4, generator=g),
                    encoder_hidden_states=torch.randn(1, 12, 32, generator=g),
                    pooled_projections=torch.randn(1, 32, generator=g),
                    img_ids=torch.randn(16, 3, generator=g), txt_ids=torch.zeros(12, 3))

    def denoise(model, kw, device, steps=3):
        """A short Euler flow-matching loop: latents <- latents + (s_next - s) * v. (return_dict=False:
        the context-parallel output hook splits tensors and tuples, not output classes)"""
        kw = {k: v.to(device) for k, v in kw.items()}
        latents = kw.pop("hidden_states")
        sigmas = torch.linspace(1.0, 0.0, steps + 1, device=device)
        with torch.no_grad():
            for i in range(steps):
                v = model(hidden_states=latents, timestep=sigmas[i].expand(1), return_dict=False, **kw)[0]
                latents = latents + (sigmas[i + 1] - sigmas[i]) * v
        return latents.cpu()

    def split(kind, dev, kw, single):
        from diffusers import ContextParallelConfig, ParallelConfig, TensorParallelConfig
        if kind == "tp":
            config = ParallelConfig(tensor_parallel_config=TensorParallelConfig(tp_degree=2))
        else:
            config = ParallelConfig(context_parallel_config=ContextParallelConfig(ulysses_degree=2))
        model = tiny_diffusers.flux_transformer().eval().to(dev)
        model.enable_parallelism(config=config)
        if kind == "tp":
            from torch.distributed.tensor import DTensor
            sharded = [p for p in model.parameters() if isinstance(p, DTensor)]
            assert sharded, "no parameter was sharded"
            assert all(p.to_local().device == dev for p in sharded)
        out = denoise(model, kw, dev)
        torch.testing.assert_close(out, single, atol=1e-5, rtol=1e-5)
        return (out - single).abs().max().item()

    def run(rank, world, init, kinds):
        dist.init_process_group("tpu_dist", init_method=init, rank=rank, world_size=world)
        torch.tpu.set_device(rank)
        dev = torch.device("tpu", rank)
        kw = inputs()
        expected = denoise(tiny_diffusers.flux_transformer().eval(), kw, "cpu")
        single = denoise(tiny_diffusers.flux_transformer().eval().to(dev), kw, dev)
        torch.testing.assert_close(single, expected, atol=1e-5, rtol=1e-5)
        for kind in kinds:
            diff = split(kind, dev, kw, single)
            print(f"rank {rank} {kind} OK (max diff {diff:.1e})", flush=True)
        print(f"rank {rank} fallbacks {torch_tpu.metrics()['cpu_fallbacks_by_op']}", flush=True)
        dist.destroy_process_group()

    if __name__ == "__main__":
        with tempfile.TemporaryDirectory() as store:  # the FileStore file is left behind otherwise
            mp.spawn(run, args=(2, "file://" + os.path.join(store, "init"), sys.argv[1:]), nprocs=2)
        print("ALL OK")
''')


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built")
@pytest.mark.skipif(os.environ.get("TORCH_TPU_EAGER_MODE", "fused") != "fused",
                    reason="two processes cost a minute: run in the suite's fused (default) pass only")
@needs_devices(2)
def test_flux_transformer_split_across_two_processes(tmp_path):
    """One pair of processes checks both splits (a process pair costs more than the checks)."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, TORCH_TPU_NUM_DEVICES="2", TORCH_TPU_QUIET="1", HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, str(script), "tp", "ulysses"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    for rank in (0, 1):
        for kind in ("tp", "ulysses"):
            assert f"rank {rank} {kind} OK" in out.stdout, out.stdout
    assert "fallbacks {}" in out.stdout and "ALL OK" in out.stdout, out.stdout
