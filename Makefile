# Two commands set everything up on a fresh machine:
#   make demo   - create .venv if missing, install, run the pipeline on the embedded default
#   make test   - the same set-up, then the test suite
# Options (make demo VAR=value):
#   TORCH_INDEX  - install torch/torchvision from this index first, e.g. the CPU-only build:
#                  make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu
#   PIP_OPTIONS  - extra options for every pip install (a proxy, --extra-index-url, --no-cache-dir)
#   CORES        - cores Snakemake may use (default 2)
#   TEST_WORKERS - pytest processes for `make test` (default auto: one per core, at most 4; 0: none)
PYTHON ?= python3
CORES ?= 2
TEST_WORKERS ?= auto
PIP_OPTIONS ?=
TORCH_INDEX ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip install --quiet $(PIP_OPTIONS)
SNAKEMAKE := $(BIN)/snakemake --cores $(CORES)

.PHONY: demo test bench unlock clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(if $(TORCH_INDEX),$(PIP) --index-url $(TORCH_INDEX) torch torchvision)
	$(PIP) --editable '.[workflow,test]'
	touch $(STAMP)

# A killed run leaves Snakemake's lock behind: say so (and how to remove it) instead of Snakemake's error.
demo: $(STAMP)
	@$(BIN)/python tools/snakemake_lock.py
	$(SNAKEMAKE)

# Remove the lock of a killed run; refused while a Snakemake still runs in this directory.
unlock: $(STAMP)
	$(BIN)/python tools/snakemake_lock.py --unlock

# The suite runs in TEST_WORKERS pytest processes (pytest-xdist; at most 4 for `auto`), a test module
# at a time in each: the Slurm tests share one cluster, so they must stay in one process (--dist loadfile).
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: $(STAMP)
	$(PIP) '.[bench]'
	$(BIN)/python benchmarks/bench_calibrators.py
	$(BIN)/python benchmarks/bench_pipeline.py

clean:
	rm -rf results reports .snakemake
