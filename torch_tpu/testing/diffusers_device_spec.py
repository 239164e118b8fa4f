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
# The same torch.tpu functions Transformers' spec names; Diffusers reads a subset of them.
from torch_tpu.testing.transformers_device_spec import (  # noqa: F401
    DEVICE_COUNT_FN, DEVICE_NAME, EMPTY_CACHE_FN, MANUAL_SEED_FN, MAX_MEMORY_ALLOCATED_FN, MEMORY_ALLOCATED_FN,
    RESET_MAX_MEMORY_ALLOCATED_FN, RESET_PEAK_MEMORY_STATS_FN, SUPPORTS_TRAINING, SYNCHRONIZE_FN)
