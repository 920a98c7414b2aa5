# Two commands do everything on a fresh clone:  `make train`  and  `make test`.
# Each creates .venv and installs what it needs first (once; again when pyproject.toml changes):
#   make train       the project itself (torch, torchrl, tensorboard, ...)
#   make test        + the dev, peers, pipelines, ray and export extras (pytest, VMAS, PettingZoo, diffusers, transformers, Ray, ONNX)
#   make bench       + the peers, pipelines and ray extras (VMAS, diffusers, transformers, Ray)
# torch is installed first so that pip never swaps in a different build. Which build `torch==2.13.0`
# resolves to depends on pip's indexes: from PyPI it is the CUDA build on Linux x86-64 and the CPU
# build on Windows and macOS. Another build (docs/install.md):
#   make setup TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"     # CPU only, Linux
#   make setup TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cu126"   # CUDA 12.6 (Windows; Linux with older drivers)
# A torch 2.13.0 already installed into .venv is kept. Windows without make: docs/install.md.
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
ifeq ($(OS),Windows_NT)
PYTHON ?= py -3
VENV_PY := $(VENV)/Scripts/python.exe
else
PYTHON ?= python3
VENV_PY := $(VENV)/bin/python
endif
# quoted: cmd.exe (Windows make without sh) reads an unquoted `.venv/Scripts/...` as `.venv` plus options
PY := "$(VENV_PY)"
# a stamp per set of extras, written by Python (no `touch` on Windows)
stamp = $(VENV)/.installed-$(if $(1),$(subst $(comma),-,$(1)),core)
comma := ,

.PHONY: setup train test lint demo bench
setup: $(call stamp,)
train demo: $(call stamp,)
test lint: $(call stamp,dev$(comma)peers$(comma)pipelines$(comma)ray$(comma)export)
bench: $(call stamp,peers$(comma)pipelines$(comma)ray)

$(VENV_PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-%: pyproject.toml | $(VENV_PY)
	$(PY) -m pip install -q "$(TORCH_SPEC)" $(TORCH_PIP_ARGS)
	$(PY) -m pip install -q -e ".$(if $(filter core,$*),,[$(subst -,$(comma),$*)])"
	$(PY) -c "import pathlib; pathlib.Path('$@').touch()"

train:  ## MAPPO with configs/default.yaml; extra overrides: make train ARGS="env.num_envs=256"
	$(PY) -m agents.train_mappo $(ARGS)

test:  ## the whole test suite (what CI runs), on 2 pytest-xdist workers (1.5x faster on 2 cores, measured)
	$(PY) -m pytest -q -n 2 --dist worksteal $(ARGS)

lint:  ## ruff: lint and format check of the whole tree (what CI runs before the tests)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

demo:  ## environment demo: throughput of the batched env vs the NumPy reference
	$(PY) -m benchmarks.env_throughput --quick --backends reference-loop batched-cpu --out-dir runs/demo

bench:  ## all five full benchmarks, results into benchmarks/results/
	$(PY) -m benchmarks.env_throughput
	$(PY) -m benchmarks.train_throughput --profile 3
	$(PY) -m benchmarks.update_matmuls
	$(PY) -m benchmarks.distributed
	$(PY) -m benchmarks.placement
