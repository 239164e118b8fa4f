"""Buckets at Transformers' boundaries: a new prompt or batch length reuses its bucket's programs.

Eager programs are keyed by exact shapes, so every new prompt length in `generate()` and every
new padded batch length in a `Trainer` used to compile a model's worth of programs (issue 47).
Until eager tensors live in bucket-sized buffers (docs/buckets.md, "Not covered yet"), the two
places where Transformers users meet new lengths pad there, with padding the model already
understands: masked positions.

- `GenerationMixin.generate`: the prompt is left-padded to its bucket with masked pad tokens,
  as batched generation pads shorter prompts. Position ids come from the attention mask, so the
  real tokens keep positions 0..n-1; masked keys get a zero attention weight. The returned
  sequences drop the added columns: their shape and tokens are those of the unpadded call.
  Every decode step then has the bucket's shapes, shared by every prompt length of the bucket.
- `Trainer.training_step`: a batch is right-padded to its bucket (input ids with the pad token,
  attention mask 0, labels -100), as `DataCollatorWithPadding(pad_to_multiple_of=...)` would; on
  the device when accelerate's dataloader has already moved it there (a pad program per length).
  The loss counts only labelled tokens, so it is unchanged.

Both start when a second length is seen by the same model or trainer: a workload of one length
keeps its exact programs. They step aside, counted in `torch_tpu.metrics()
["bucket_boundary_skips"]` with the reason, wherever padding could change a result: settings
that read the prompt's tokens (repetition penalties, custom logits processors, streamers),
outputs shaped by the prompt (attentions, hidden states, dict outputs), models whose positions
do not follow the attention mask, or batch keys this module does not know. TORCH_TPU_BUCKETS=0
turns both off.

The hooks are installed when Transformers' modules are imported (or at once if they already
were), and act only on models on a tpu device.
"""
from collections.abc import Mapping
import functools
import importlib.abc
import importlib.util
import inspect
import sys
import weakref

import torch

from . import _C
from . import _compile_stats as _stats
from . import buckets

_first_length = weakref.WeakKeyDictionary()  # model -> its first prompt or batch length, or True once lengths vary
_first_forward_length = weakref.WeakKeyDictionary()  # the same, of a causal LM's padded calls


def _lengths_vary(owner, n, seen=_first_length):
    """Whether `owner` has met more than one length, this call's `n` included."""
    try:
        first = seen.setdefault(owner, n)
    except TypeError:  # not weakly referenceable: never bucketed
        return False
    if first is True:
        return True
    if first != n:
        seen[owner] = True
        return True
    return False


def _skip(reason):
    _stats.count_keyed("bucket_boundary_skips", reason)
    return None


def _token_id(config, names=("pad_token_id", "eos_token_id", "bos_token_id")):
    """The first of `names` that `config` sets, as an int (a list or tensor gives its first); 0
    if none: the padding it fills is masked, so any id serves."""
    for name in names:
        t = getattr(config, name, None)
        if isinstance(t, (list, tuple)):
            t = t[0] if t else None
        if isinstance(t, torch.Tensor):
            t = int(t.reshape(-1)[0])
        if t is not None:
            return int(t)
    return 0


def _pad_last_dim(t, padded_n, fill, left=False):
    """`t` padded along its last dim to `padded_n` with `fill`: one constant_pad_nd, whose fill is
    a run-time scalar, so every padded key of a length shares its program."""
    extra = padded_n - t.shape[-1]
    return torch.nn.functional.pad(t, (extra, 0) if left else (0, extra), value=fill)


# generate() arguments under which padding the prompt could change the result: they read the
# prompt's tokens, stream them, or bring their own cache or positions.
_GENERATE_ARGS_THAT_READ_THE_PROMPT = (
    "logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "assistant_model", "streamer",
    "negative_prompt_ids", "negative_prompt_attention_mask", "custom_generate", "synced_gpus",
    "inputs_embeds", "past_key_values", "position_ids", "cache_position", "token_type_ids",
    "decoder_input_ids", "assistant_tokenizer", "tokenizer", "stop_strings")
# Generation settings, with the values under which padding changes nothing.
_NEUTRAL_SETTINGS = {
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "sequence_bias": (None,),
    "prompt_lookup_num_tokens": (None,),
    "assistant_early_exit": (None,),
    "guidance_scale": (None, 1.0),
    "watermarking_config": (None,),
    "output_attentions": (None, False),
    "output_hidden_states": (None, False),
    "return_dict_in_generate": (None, False),
    "stop_strings": (None,),
}


def _setting(config, kwargs, name):
    return kwargs[name] if name in kwargs else getattr(config, name, None)


def _generate_plan(model, args, kwargs):
    """(input_ids, attention_mask, bucket, kwargs for the padded call) when this generate()
    call is bucketed, else None (a skip is counted with its reason)."""
    if not buckets.enabled():
        return None
    if len(args) > 2:
        return _skip("generate: positional arguments after generation_config")
    ids = args[0] if args else kwargs.get("inputs")
    if ids is None:
        ids = kwargs.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype not in (torch.int64, torch.int32):
        return None  # not a prompt of token ids (embeddings, pixels, or none): nothing to pad
    try:
        on_tpu = model.device.type == "tpu"
    except Exception:  # noqa: BLE001 - a model without parameters
        on_tpu = False
    if not on_tpu:
        return None
    n = ids.shape[1]
    if not _lengths_vary(model, n):
        return None
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return _skip("generate: encoder-decoder model")
    if getattr(model, "main_input_name", "input_ids") != "input_ids":
        return _skip("generate: the model's main input is not input_ids")
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return _skip("generate: the model takes no position_ids (its positions ignore the attention mask)")
    for name in _GENERATE_ARGS_THAT_READ_THE_PROMPT:
        if kwargs.get(name) is not None:
            return _skip(f"generate: {name} given")
    gen_config = args[1] if len(args) > 1 else kwargs.get("generation_config")
    if gen_config is None:
        gen_config = model.generation_config
    for name, neutral in _NEUTRAL_SETTINGS.items():
        if _setting(gen_config, kwargs, name) not in neutral:
            return _skip(f"generate: {name}")
    mask = kwargs.get("attention_mask")
    if mask is not None and (not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(ids.shape)):
        return _skip("generate: attention_mask not shaped like the prompt")
    padded_n = buckets.bucket(n)
    if padded_n == n:
        return None  # already a bucket size: nothing to add
    # Lengths counted from the prompt become counts of new tokens, which padding leaves alone.
    call = dict(kwargs)
    for name in ("inputs", "input_ids", "attention_mask", "generation_config"):
        call.pop(name, None)
    new_tokens = _setting(gen_config, kwargs, "max_new_tokens")
    if new_tokens is None:
        max_length = _setting(gen_config, kwargs, "max_length")
        if max_length is None or max_length <= n:
            return _skip("generate: max_length leaves no new tokens")
        new_tokens = max_length - n
    call.pop("max_length", None)
    call["max_new_tokens"] = new_tokens
    min_length = _setting(gen_config, kwargs, "min_length") or 0
    if min_length > 0:
        if _setting(gen_config, kwargs, "min_new_tokens") is None:
            call["min_new_tokens"] = max(0, min_length - n)
        call["min_length"] = 0
    return ids, mask, padded_n, gen_config, call


def _generate(original, self, *args, **kwargs):
    plan = _generate_plan(self, args, kwargs)
    if plan is None:
        return original(self, *args, **kwargs)
    ids, mask, padded_n, gen_config, call = plan
    n = ids.shape[1]
    # Padded on the host and copied whole: a pad on the device would be a program per length.
    mask_cpu = mask.cpu() if mask is not None else torch.ones(ids.shape, dtype=torch.int64)
    padded_ids = _pad_last_dim(ids.cpu(), padded_n, _token_id(gen_config), left=True).to(ids.device)
    padded_mask = _pad_last_dim(mask_cpu, padded_n, 0, left=True).to(ids.device)
    _stats.count("bucket_generate_calls")
    user_config = args[1] if len(args) > 1 else kwargs.get("generation_config")
    out = original(self, padded_ids, user_config, attention_mask=padded_mask, **call)
    if not isinstance(out, torch.Tensor):  # a settings combination _NEUTRAL_SETTINGS missed
        raise RuntimeError("torch_tpu: a bucketed generate() returned "
                           f"{type(out).__name__}; set TORCH_TPU_BUCKETS=0 and report this")
    # The added columns are cut on the host: generate() has already read its tokens back, and a
    # cut on the device would be a program per length. The copy back is whole, without a program.
    return out.cpu()[:, padded_n - n:].contiguous().to(out.device)


# Batch keys a Trainer pads, with their fill: positions beyond the sequence are masked (0) or
# unlabelled (-100). Another key with the sequence's length leaves the batch exact.
_BATCH_FILLS = {"attention_mask": 0, "labels": -100, "token_type_ids": 0, "special_tokens_mask": 1}


def _batch_plan(trainer, inputs):
    """(length, bucket) when this batch is padded, else None."""
    if not buckets.enabled() or not isinstance(inputs, Mapping):
        return None
    ids = inputs.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return None
    try:
        if trainer.args.device.type != "tpu":
            return None
    except Exception:  # noqa: BLE001
        return None
    n = ids.shape[1]
    # Keyed by the model: a Trainer made per epoch or per run meets the same programs.
    if not _lengths_vary(trainer.model, n):
        return None
    model = trainer.model
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return _skip("trainer: encoder-decoder model")
    causal = type(model).__name__.endswith("ForCausalLM")
    if not causal and "attention_mask" not in inputs:
        return _skip("trainer: no attention_mask to mask the padding (and not a causal LM)")
    for key, value in inputs.items():
        if key == "input_ids" or not isinstance(value, torch.Tensor) or value.dim() < 2 or value.shape[1] != n:
            continue
        if key not in _BATCH_FILLS or value.dim() != 2:
            return _skip(f"trainer: batch key {key!r} has the sequence length")
    padded_n = buckets.bucket(n)
    return (n, padded_n) if padded_n != n else None


def _pad_batch(trainer, inputs, n, padded_n):
    fills = dict(_BATCH_FILLS, input_ids=_token_id(trainer.model.config, ("pad_token_id",)))
    padded = dict(inputs)
    if "attention_mask" not in padded:
        # A causal LM needs no mask for its real tokens (they never see later positions), but
        # the mask tells the model the added positions are padding.
        padded["attention_mask"] = torch.ones(inputs["input_ids"].shape, dtype=torch.int64,
                                              device=inputs["input_ids"].device)
    for key, value in padded.items():
        if key in fills and isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[1] == n:
            # Where the batch is: on the host, the copy to the device is then whole; on the device
            # (accelerate's dataloader moved it), one pad program per new length.
            padded[key] = _pad_last_dim(value, padded_n, fills[key])
    try:
        return type(inputs)(padded)  # a BatchEncoding stays one
    except Exception:  # noqa: BLE001 - a mapping type that takes no dict: a plain dict then
        return padded


def _training_step(original, self, model, inputs, *args, **kwargs):
    plan = _batch_plan(self, inputs)
    if plan is not None:
        inputs = _pad_batch(self, inputs, *plan)
        _stats.count("bucket_trainer_batches")
    return original(self, model, inputs, *args, **kwargs)


# Forward arguments, with the fill of the added positions: masked, unlabelled, or any position.
_FORWARD_FILLS = {"attention_mask": 0, "labels": -100, "position_ids": 0}
# Forward arguments under which the added positions could reach a result.
_FORWARD_ARGS_THAT_SEE_PADDING = ("inputs_embeds", "past_key_values", "cache_position", "token_type_ids",
                                  "output_attentions", "output_hidden_states", "logits_to_keep",
                                  "num_logits_to_keep")


def _forward_plan(model, args, kwargs):
    """(length, bucket) when this causal LM call is padded, else None."""
    # Under Dynamo (a compiled model, generate()'s compiled decode step) the call is traced as it is.
    if torch.compiler.is_compiling() or not type(model).__name__.endswith("ForCausalLM"):
        return None
    if len(args) > 1 or not buckets.enabled():
        return None
    ids = args[0] if args else kwargs.get("input_ids")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.device.type != "tpu":
        return None
    n = ids.shape[1]
    if not _lengths_vary(model, n, _first_forward_length):
        return None
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return _skip("forward: encoder-decoder model")
    # Only calls that return no cache: a cache would hold the added positions for the next call.
    if kwargs.get("use_cache") is not False and not (model.training and "use_cache" not in kwargs):
        return _skip("forward: returns a cache (eval mode without use_cache=False)")
    for name in _FORWARD_ARGS_THAT_SEE_PADDING:
        if kwargs.get(name) not in (None, False, 0):
            return _skip(f"forward: {name} given")
    if kwargs.get("return_dict") is False or getattr(config, "output_hidden_states", False) \
            or getattr(config, "output_attentions", False):
        return _skip("forward: tuple, hidden-state or attention outputs")
    for key, value in kwargs.items():
        if isinstance(value, torch.Tensor) and key != "input_ids" and value.dim() >= 2 and value.shape[-1] == n \
                and key not in _FORWARD_FILLS:
            return _skip(f"forward: argument {key!r} has the sequence length")
    padded_n = buckets.bucket(n)
    return (n, padded_n) if padded_n != n else None


def _causal_lm_call(original, self, *args, **kwargs):
    """A causal LM's call in training (or with use_cache=False), its batch right-padded to the
    bucket: real tokens never attend to later positions, the added ones are unlabelled (-100), so
    the loss is unchanged; the logits are cut back to the real length (a view, no program)."""
    plan = _forward_plan(self, args, kwargs)
    if plan is None:
        return original(self, *args, **kwargs)
    n, padded_n = plan
    ids = args[0] if args else kwargs["input_ids"]
    call = dict(kwargs)
    call.pop("input_ids", None)
    if self.training and "use_cache" not in call:
        call["use_cache"] = False
    pad_id = _token_id(self.config, ("pad_token_id",))
    fused = _C._get_eager_mode() == "fused"
    if fused:
        # The pads are the only programs of a new length: alone in their graph, they leave the
        # graphs before (an optimizer step) and after (forward, backward) keyed by the bucket.
        _C._run_pending_graph("bucket pad (transformers_buckets)")
    call["input_ids"] = _pad_last_dim(ids, padded_n, pad_id)
    for key, fill in _FORWARD_FILLS.items():
        value = call.get(key)
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[-1] == n:
            call[key] = _pad_last_dim(value, padded_n, fill)
    if fused:
        _C._run_pending_graph("bucket pad (transformers_buckets)")
    _stats.count("bucket_forward_calls")
    out = original(self, **call)
    if getattr(out, "logits", None) is not None and out.logits.dim() >= 2 and out.logits.shape[1] == padded_n:
        out.logits = out.logits[:, :n]
    return out


def _wrap(cls, name, hook):
    original = getattr(cls, name, None)
    if original is None or getattr(original, "_torch_tpu_buckets", False):
        return

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        return hook(original, *args, **kwargs)

    wrapper._torch_tpu_buckets = True
    setattr(cls, name, wrapper)


def _patch(module):
    if module.__name__ == "transformers.generation.utils" and hasattr(module, "GenerationMixin"):
        _wrap(module.GenerationMixin, "generate", _generate)
    elif module.__name__ == "transformers.modeling_utils" and hasattr(module, "PreTrainedModel"):
        _wrap(module.PreTrainedModel, "__call__", _causal_lm_call)
    elif module.__name__ == "transformers.trainer" and hasattr(module, "Trainer"):
        _wrap(module.Trainer, "training_step", _training_step)


_TARGETS = ("transformers.generation.utils", "transformers.modeling_utils", "transformers.trainer")


class _PatchAfterLoad(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds nothing itself: wraps the loader of a target module so it is patched once executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _TARGETS:
            return None
        sys.meta_path.remove(self)  # find the real spec without finding ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                _patch(module)

        spec.loader = _Loader()
        return spec


def install():
    for name in _TARGETS:
        if name in sys.modules:
            _patch(sys.modules[name])
    if not any(isinstance(f, _PatchAfterLoad) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterLoad())
