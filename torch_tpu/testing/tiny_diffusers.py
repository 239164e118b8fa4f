"""Tiny random Diffusers pipelines, built offline (no Hub access), for tests and bench/diffusion.py.

The components follow the dummy components of Diffusers' own fast tests. Text conditioning is passed
as embeddings (`prompt_embeds` ...), so no tokenizer is needed: Stable Diffusion's come from its
tiny CLIP text encoder (`sd_prompt_embeds`), Flux's are random.

    pipe, kwargs = tiny_diffusers.build("flux")
    image = pipe.to("tpu")(generator=torch.Generator().manual_seed(0), output_type="pt",
                           **tiny_diffusers.to_device(kwargs, "tpu")).images
"""
import torch

PIPELINES = ("ddpm", "ddim", "dit", "sd", "flux")


def _uncond_unet():
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    return UNet2DModel(block_out_channels=(4, 8), layers_per_block=1, norm_num_groups=4, sample_size=8,
                       in_channels=3, out_channels=3, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"))


def _ddpm(steps):
    from diffusers import DDPMPipeline, DDPMScheduler

    return DDPMPipeline(unet=_uncond_unet(), scheduler=DDPMScheduler()), dict(num_inference_steps=steps)


def _ddim(steps):
    from diffusers import DDIMPipeline, DDIMScheduler

    return DDIMPipeline(unet=_uncond_unet(), scheduler=DDIMScheduler()), dict(num_inference_steps=steps)


def _dit(steps):
    from diffusers import AutoencoderKL, DDIMScheduler, DiTPipeline, DiTTransformer2DModel

    torch.manual_seed(0)
    transformer = DiTTransformer2DModel(sample_size=16, num_layers=2, patch_size=4, attention_head_dim=8,
                                        num_attention_heads=2, in_channels=4, out_channels=8, attention_bias=True,
                                        activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
                                        norm_type="ada_norm_zero", norm_elementwise_affine=False)
    vae = AutoencoderKL()
    pipe = DiTPipeline(transformer=transformer.eval(), vae=vae.eval(), scheduler=DDIMScheduler())
    return pipe, dict(class_labels=[1], num_inference_steps=steps)


def _sd(steps):
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(block_out_channels=(4, 8), layers_per_block=1, sample_size=32, in_channels=4,
                                out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=8,
                                norm_num_groups=2)
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              set_alpha_to_one=False, steps_offset=1)
    torch.manual_seed(0)
    vae = AutoencoderKL(block_out_channels=[4, 8], in_channels=3, out_channels=3,
                        down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"],
                        up_block_types=["UpDecoderBlock2D", "UpDecoderBlock2D"], latent_channels=4, norm_num_groups=2)
    torch.manual_seed(0)
    text_encoder = CLIPTextModel(CLIPTextConfig(bos_token_id=0, eos_token_id=2, hidden_size=8, intermediate_size=16,
                                                layer_norm_eps=1e-5, num_attention_heads=2, num_hidden_layers=2,
                                                pad_token_id=1, vocab_size=1000))
    pipe = StableDiffusionPipeline(unet=unet, scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=None,
                                   safety_checker=None, feature_extractor=None, image_encoder=None,
                                   requires_safety_checker=False)
    return pipe, dict(num_inference_steps=steps, guidance_scale=6.0, height=32, width=32)


def flux_transformer():
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    return FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                  attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                  pooled_projection_dim=32, axes_dims_rope=[4, 4, 8])


def _flux(steps):
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline

    transformer = flux_transformer()
    torch.manual_seed(0)
    vae = AutoencoderKL(sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,), layers_per_block=1,
                        latent_channels=1, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False,
                        shift_factor=0.0609, scaling_factor=1.5035)
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=None, tokenizer=None,
                        text_encoder_2=None, tokenizer_2=None, transformer=transformer)
    g = torch.Generator().manual_seed(5)
    return pipe, dict(num_inference_steps=steps, guidance_scale=5.0, height=8, width=8,
                      prompt_embeds=torch.randn(1, 12, 32, generator=g),
                      pooled_prompt_embeds=torch.randn(1, 32, generator=g))


def build(name, steps=3):
    """-> (pipeline on the CPU in float32, the keyword arguments of its call but the generator)."""
    import diffusers

    diffusers.utils.logging.set_verbosity_error()
    if name not in PIPELINES:
        raise ValueError(f"unknown tiny pipeline {name!r}: expected one of {PIPELINES}")
    pipe, kwargs = globals()[f"_{name}"](steps)
    pipe.set_progress_bar_config(disable=True)
    return pipe, kwargs


def to_device(kwargs, device, dtype=None):
    return {k: (v.to(device, dtype) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}


def denoiser(pipe):
    """The module a denoising step runs: the UNet or the transformer."""
    return pipe.unet if hasattr(pipe, "unet") else pipe.transformer


def sd_prompt_embeds(pipe):
    """Positive and negative prompt embeddings from the pipeline's own (tiny CLIP) text encoder,
    on the device the pipeline runs on: what a tokenizer plus encode_prompt would hand the UNet."""
    device = pipe._execution_device  # the offload target when the models are offloaded
    ids = torch.tensor([[0, 5, 17, 99, 2, 1, 1]], device=device)
    neg = torch.tensor([[0, 2, 1, 1, 1, 1, 1]], device=device)
    with torch.no_grad():
        return dict(prompt_embeds=pipe.text_encoder(ids)[0], negative_prompt_embeds=pipe.text_encoder(neg)[0])


def run(pipe, kwargs, generator, device=None, dtype=None):
    """Runs the pipeline on its own device with the kwargs moved there -> images (output_type "pt")."""
    device = device or denoiser(pipe).device
    dtype = dtype or denoiser(pipe).dtype
    kwargs = to_device(kwargs, device, dtype)
    if getattr(pipe, "text_encoder", None) is not None and "prompt_embeds" not in kwargs:
        kwargs.update(sd_prompt_embeds(pipe))
    with torch.no_grad():
        return pipe(generator=generator, output_type="pt", **kwargs).images
