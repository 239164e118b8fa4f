"""Device spec for Hugging Face Transformers' test suite (and diffusers', which reads the same
kind of file): point TRANSFORMERS_TEST_DEVICE_SPEC (or DIFFUSERS_TEST_DEVICE_SPEC) at this file
and the tests run with torch_device = "tpu".

Transformers (testing_utils.py) requires DEVICE_NAME and reads MANUAL_SEED_FN, EMPTY_CACHE_FN,
DEVICE_COUNT_FN and SINGLE_PROCESS_DEVICE; diffusers also reads SUPPORTS_TRAINING and the memory
statistic hooks. Names a project does not read are harmless.

Transformers imports the spec by turning the path into a module name (path minus ".py"), so the
path it is given must be a bare file name in the working directory; tools/transformers_tests.py
writes a one-line shim that re-exports this module for that reason.
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

# Tests decorated with run_test_using_subprocess run in-process on tpu (one PJRT client per process).
SINGLE_PROCESS_DEVICE = True
SUPPORTS_TRAINING = True
