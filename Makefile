# servesim: setup and checks. `make demo` and `make test` are the README's quickstart.
# the first Python >= 3.11 that actually runs (pyenv shims may exist for versions not selected)
PY ?= $(or $(shell for p in python3.13 python3.12 python3.11 python3; do \
	$$p -c 'import sys; assert sys.version_info >= (3, 11)' >/dev/null 2>&1 && echo $$p && break; done), python3)
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0

.PHONY: demo test test-slow test-all setup-sim setup-test setup-browser clean wheels gpu-check gpu-check-dry

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# light install: the simulator only
setup-sim: $(BIN)/python
	$(BIN)/pip install -q -e .

# everything the test suite needs (torch from the CPU wheel; see README)
setup-test: $(BIN)/python setup-browser
	$(BIN)/pip install -q $(TORCH_PIN)
	$(BIN)/pip install -q -e '.[all,test]'

# Debian's Chromium for the app's end-to-end test (Playwright drives it; it never downloads a browser).
# Installed when missing and we are root with apt; otherwise that one test skips with its reason.
setup-browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  echo "setup-browser: chromium not installed; the browser test will skip"; }

demo: setup-sim
	$(BIN)/servesim simulate examples/default.toml

# pytest exit 5 = "no tests collected": not a failure (a filtered or fresh checkout)
test: setup-test
	$(BIN)/python -m pytest -n 2 --dist loadfile; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests collected"; else exit $$rc; fi

test-slow: setup-test
	$(BIN)/python -m pytest -m slow

test-all: setup-test
	$(BIN)/python -m pytest -m 'not gpu'

# The prepared GPU check (benchmarks/gpu_check.py): on a CUDA machine with torch and triton but no
# network, `make gpu-check` installs what else it needs from $(WHEELS) and runs the gpu tests, a CUDA
# calibration and two validate runs in <= 8 minutes; report under $(GPU_CHECK_OUT).
# `make wheels` (with network) downloads those wheels for the GPU machine's Python ($(GPU_PYTHON),
# default this one's) and Linux x86-64; `make gpu-check-dry` is the same check on this CPU, tiny.
WHEELS ?= wheels
GPU_CHECK_OUT ?= runs/gpu-check
GPU_PY ?= python3
# distributions the GPU machine already has, left out of $(WHEELS) (e.g. WHEELS_SKIP=numpy: ~68 MB -> ~51 MB)
WHEELS_SKIP ?=
GPU_PYTHON ?= $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
wheels:
	$(PY) -m pip download --quiet --only-binary=:all: --dest $(WHEELS) --python-version $(GPU_PYTHON) \
	  --implementation cp --abi cp$(subst .,,$(GPU_PYTHON)) --platform manylinux_2_28_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -r benchmarks/gpu_check_requirements.txt
	@for d in $(WHEELS_SKIP); do rm -f $(WHEELS)/$$d-*.whl; done
	@echo "wheels for Python $(GPU_PYTHON) in $(WHEELS)/ ($$(du -sh $(WHEELS) | cut -f1)): hand the folder to the GPU machine"

gpu-check:
	$(GPU_PY) benchmarks/gpu_check.py --wheels $(WHEELS) --out $(GPU_CHECK_OUT)

gpu-check-dry: $(BIN)/python
	$(BIN)/python benchmarks/gpu_check.py --dry-run --out runs/gpu-check-dry

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
