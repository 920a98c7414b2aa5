# Two commands do everything on a fresh clone:  `make train`  and  `make test`.
# Both create .venv and install the project first (once; again when pyproject.toml changes).
# torch is installed first so pip never swaps in a different build: the default takes the CPU
# wheel; GPU users install their CUDA build of torch 2.13.0 into .venv first (pip then keeps it).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,peers,pipelines
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(EXTRAS)

.PHONY: setup train test demo bench
setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

train: setup  ## MAPPO with configs/default.yaml; extra overrides: make train ARGS="env.num_envs=256"
	$(BIN)/python -m agents.train_mappo $(ARGS)

test: setup  ## the whole test suite (what CI runs)
	$(BIN)/python -m pytest -q $(ARGS)

demo: setup  ## environment demo: throughput of the batched env vs the NumPy reference
	$(BIN)/python -m benchmarks.env_throughput --quick --backends reference-loop batched-cpu --out-dir runs/demo

bench: setup  ## all four full benchmarks, results into benchmarks/results/
	$(BIN)/python -m benchmarks.env_throughput
	$(BIN)/python -m benchmarks.train_throughput
	$(BIN)/python -m benchmarks.distributed
	$(BIN)/python -m benchmarks.placement
