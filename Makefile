# Two commands do everything on a fresh clone:  `make train`  and  `make test`.
# Both create .venv and install the project first (once; again when pyproject.toml changes).
# torch is installed first so pip never swaps in a different build. Which build `torch==2.13.0`
# resolves to depends on pip's indexes: this project's machines carry the CPU wheel locally; from
# PyPI on Linux x86-64 it is the CUDA build. For the CPU build elsewhere:
#   make setup TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
# GPU users may also install their CUDA build of torch 2.13.0 into .venv first (pip then keeps it).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
EXTRAS ?= dev,peers,pipelines
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(EXTRAS)

.PHONY: setup train test demo bench
setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" $(TORCH_PIP_ARGS)
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

train: setup  ## MAPPO with configs/default.yaml; extra overrides: make train ARGS="env.num_envs=256"
	$(BIN)/python -m agents.train_mappo $(ARGS)

test: setup  ## the whole test suite (what CI runs)
	$(BIN)/python -m pytest -q $(ARGS)

demo: setup  ## environment demo: throughput of the batched env vs the NumPy reference
	$(BIN)/python -m benchmarks.env_throughput --quick --backends reference-loop batched-cpu --out-dir runs/demo

bench: setup  ## all five full benchmarks, results into benchmarks/results/
	$(BIN)/python -m benchmarks.env_throughput
	$(BIN)/python -m benchmarks.train_throughput --profile 3
	$(BIN)/python -m benchmarks.update_matmuls
	$(BIN)/python -m benchmarks.distributed
	$(BIN)/python -m benchmarks.placement
