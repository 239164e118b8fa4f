"""Hugging Face Diffusers pipelines on the tpu device, built from tiny random components
(torch_tpu/testing/tiny_diffusers.py, offline): DDPM and DDIM with a UNet2DModel, DiT, Stable
Diffusion (UNet2DConditionModel, AutoencoderKL, CLIP text encoder) and Flux. With the same initial
noise (a seeded CPU generator) the images equal the CPU run's, in float32 and in bfloat16; a seeded
tpu generator gives the same images run to run; no op falls back to the CPU; after the first
denoising steps no step compiles a new program, in eager mode and with the denoiser under
torch.compile(backend="tpu"); a training step of a tiny UNet matches the CPU; model and sequential
CPU offload run the models on tpu."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
import torch_tpu  # noqa: E402

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("transformers")
from torch_tpu.testing import tiny_diffusers  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
PIPELINES = tiny_diffusers.PIPELINES
# The suite runs once per eager mode (make py-test). To keep it short, the checks whose outcome
# does not hang on the eager mode run in one of the two: bfloat16 and training under strict,
# the compiled denoiser (whose eager remainder runs fused) under fused.
_MODE = torch_tpu.get_eager_mode()


def only_in(mode):
    return pytest.mark.skipif(_MODE != mode, reason=f"runs in the {mode} eager-mode pass of the suite only")


def cpu_and_tpu(name, dtype=torch.float32, steps=3):
    """Runs pipeline `name` on the CPU and on tpu with the same seeded CPU generator (so the same
    initial latents and step noise) -> (cpu images, tpu images)."""
    pipe, kwargs = tiny_diffusers.build(name, steps)
    pipe.to(dtype=dtype)
    expected = tiny_diffusers.run(pipe, kwargs, torch.Generator().manual_seed(0))
    pipe.to("tpu")
    got = tiny_diffusers.run(pipe, kwargs, torch.Generator().manual_seed(0))
    return expected, got


@pytest.mark.parametrize("name", PIPELINES)
def test_images_match_cpu_float32(name):
    torch_tpu.reset_metrics()
    expected, got = cpu_and_tpu(name)
    assert got.device.type == "tpu" and got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), expected, atol=1e-4, rtol=1e-4)
    assert torch_tpu.metrics(wait=True)["cpu_fallbacks"] == 0, torch_tpu.metrics(wait=True)["cpu_fallbacks_by_op"]


@only_in("strict")
@pytest.mark.parametrize("name", ["dit", "sd", "flux"])
def test_images_match_cpu_bfloat16(name):
    expected, got = cpu_and_tpu(name, torch.bfloat16)
    assert got.dtype == torch.bfloat16
    # PyTorch's bf16 tolerance (rtol 1.6e-2) on pixels in [0, 1]; atol covers the near-zero ones.
    torch.testing.assert_close(got.cpu().float(), expected.float(), atol=2e-2, rtol=1.6e-2)


@pytest.mark.parametrize("name", ["ddpm", "flux"])
def test_tpu_generator_reproducible(name):
    pipe, kwargs = tiny_diffusers.build(name)
    pipe.to("tpu")
    first = tiny_diffusers.run(pipe, kwargs, torch.Generator("tpu").manual_seed(7)).cpu()
    again = tiny_diffusers.run(pipe, kwargs, torch.Generator("tpu").manual_seed(7)).cpu()
    other = tiny_diffusers.run(pipe, kwargs, torch.Generator("tpu").manual_seed(8)).cpu()
    # Same noise, same images. In fused mode the first run executes its ops one by one and the
    # second the whole graph compiled, whose fusions may round the last bits differently.
    torch.testing.assert_close(again, first, atol=1e-5, rtol=1e-5)
    assert (first - other).abs().max() > 1e-2
    assert torch.isfinite(first).all()


def _built_at_dispatch():
    """Counters that move when a call needs a program it has not got: per-op signatures missed
    (eager, both modes) and graphs dynamo hands the compile backend."""
    m = torch_tpu.metrics(wait=True)
    return m["signature_cache_misses"], m["compile_programs_built"], m["compile_graphs"]


def _compiled_anything():
    m = torch_tpu.metrics(wait=True)
    return _built_at_dispatch() + (m["programs_compiled"], m["fused_graphs_compiled"])


@pytest.mark.parametrize("name,compiled", [
    ("ddim", False), ("dit", False), ("sd", False), ("flux", False),
    *[pytest.param(name, True, marks=only_in("fused")) for name in ("dit", "sd", "flux")]])
def test_no_new_program_per_step(name, compiled):
    """Read before each denoiser call, the dispatch counters stop moving after the first step
    (the pipeline's setup and the first step build every program the loop needs). Whole fused
    graphs compile at their second sighting, at a sync point, so the third run of the pipeline
    must compile nothing at all."""
    steps = 4
    pipe, kwargs = tiny_diffusers.build(name, steps=steps)
    pipe.to("tpu")
    den = tiny_diffusers.denoiser(pipe)
    seen = []
    den.register_forward_pre_hook(lambda *_: seen.append(_built_at_dispatch()))
    if compiled:
        den.compile(backend="tpu")
    tiny_diffusers.run(pipe, kwargs, torch.Generator().manual_seed(0)).cpu()
    assert len(seen) in (steps, 2 * steps), len(seen)  # classifier-free guidance may call it twice a step
    settled = seen[len(seen) // steps:]  # from the second step's call on
    assert all(s == settled[0] for s in settled), seen
    tiny_diffusers.run(pipe, kwargs, torch.Generator().manual_seed(0)).cpu()
    before = _compiled_anything()
    tiny_diffusers.run(pipe, kwargs, torch.Generator().manual_seed(0)).cpu()
    assert _compiled_anything() == before, (before, _compiled_anything())
    assert torch_tpu.metrics(wait=True)["cpu_fallbacks"] == 0


@only_in("strict")
def test_unet_training_step_matches_cpu():
    """Noise-prediction MSE on a tiny UNet2DConditionModel, two AdamW steps."""
    from diffusers import DDPMScheduler

    pipe, _ = tiny_diffusers.build("sd")
    cpu_unet = pipe.unet.train()
    tpu_unet = tiny_diffusers.build("sd")[0].unet.train().to("tpu")
    scheduler = DDPMScheduler()
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (cpu_unet, tpu_unet)]
    g = torch.Generator().manual_seed(3)
    for _ in range(2):
        latents = torch.randn(2, 4, 16, 16, generator=g)
        noise = torch.randn(latents.shape, generator=g)
        timesteps = torch.randint(0, 1000, (2,), generator=g)
        context = torch.randn(2, 7, 8, generator=g)
        noisy = scheduler.add_noise(latents, noise, timesteps)
        losses = []
        for unet, opt, dev in zip((cpu_unet, tpu_unet), opts, ("cpu", "tpu")):
            pred = unet(noisy.to(dev), timesteps.to(dev), context.to(dev)).sample
            loss = torch.nn.functional.mse_loss(pred, noise.to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
        torch.testing.assert_close(losses[1], losses[0], atol=1e-5, rtol=1e-4)
    for (n, a), b in zip(cpu_unet.named_parameters(), tpu_unet.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=1e-5, rtol=1e-4, msg=n)


@pytest.mark.parametrize("offload", ["model", "sequential"])
def test_cpu_offload_runs_on_tpu(offload):
    """enable_model_cpu_offload / enable_sequential_cpu_offload(device="tpu"): the weights live
    on the CPU (or meta, sequential) between uses and each model runs on tpu."""
    pipe, kwargs = tiny_diffusers.build("sd")
    expected = tiny_diffusers.run(pipe, kwargs, torch.Generator().manual_seed(0))
    getattr(pipe, f"enable_{offload}_cpu_offload")(device="tpu")
    ran_on = []
    pipe.unet.register_forward_pre_hook(lambda m, args: ran_on.append(args[0].device.type))
    got = tiny_diffusers.run(pipe, kwargs, torch.Generator().manual_seed(0), device="tpu")
    assert ran_on and set(ran_on) == {"tpu"}
    assert next(pipe.unet.parameters()).device.type in ("cpu", "meta")
    torch.testing.assert_close(got.cpu(), expected, atol=1e-4, rtol=1e-4)
