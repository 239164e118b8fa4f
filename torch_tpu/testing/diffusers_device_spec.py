"""Device spec for Hugging Face Diffusers' test suite: point DIFFUSERS_TEST_DEVICE_SPEC at this file
(through a shim, see below) and the tests run with torch_device = "tpu".

Diffusers' tests/testing_utils.py requires DEVICE_NAME. Releases up to 0.41 read the per-device
functions MANUAL_SEED_FN, EMPTY_CACHE_FN, DEVICE_COUNT_FN and the memory statistics hooks from the
spec; 0.42 reads only SUPPORTS_TRAINING and reaches the rest through torch.tpu (its
TorchDeviceBackend). Both sets are here; names a release does not read are harmless.

Diffusers imports the spec by turning the path into a module name (path minus ".py"), so the path
it is given must be a bare file name in the working directory: tools/diffusers_tests.py writes a
one-line shim that re-exports this module.
"""
import torch
import torch_tpu  # noqa: F401  (registers the "tpu" device and torch.tpu)

DEVICE_NAME = "tpu"

MANUAL_SEED_FN = torch.tpu.manual_seed
EMPTY_CACHE_FN = torch.tpu.empty_cache
DEVICE_COUNT_FN = torch.tpu.device_count
SYNCHRONIZE_FN = torch.tpu.synchronize
MEMORY_ALLOCATED_FN = torch.tpu.memory_allocated
MAX_MEMORY_ALLOCATED_FN = torch.tpu.max_memory_allocated
RESET_MAX_MEMORY_ALLOCATED_FN = torch.tpu.reset_peak_memory_stats
RESET_PEAK_MEMORY_STATS_FN = torch.tpu.reset_peak_memory_stats

# Training tests (backward, optimizer steps) run on tpu.
SUPPORTS_TRAINING = True
