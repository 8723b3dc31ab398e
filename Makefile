# Two commands set everything up on a fresh machine:
#   make demo   - create .venv if missing, install, run the pipeline on the embedded default
#   make test   - the same set-up, then the test suite
# Both install the locked environment: requirements/lock.txt, exact versions with their sha256 hashes,
# for CPython >= 3.11.5 (docs/reproducibility.md; `make lock` refreshes it). `make verify` then checks
# that this machine gives the published bytes.
# Options (make demo VAR=value):
#   TORCH_INDEX  - install torch/torchvision from this index first, e.g. the CPU-only build:
#                  make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu
#                  (locked: requirements/torch-cpu.txt, then requirements/lock-cpu.txt)
#   LOCK         - the lock file to install (default: the one above); LOCK= (empty) installs
#                  pyproject.toml's ranges unlocked, as `pip install -e '.[workflow,test]'` does
#   PIP_OPTIONS  - extra options for every pip install (a proxy, --extra-index-url, --no-cache-dir)
#   CORES        - cores Snakemake may use (default 2)
#   TEST_WORKERS - pytest processes for `make test` (default auto: one per core, at most 4; 0: none)
PYTHON ?= python3
CORES ?= 2
TEST_WORKERS ?= auto
PIP_OPTIONS ?=
TORCH_INDEX ?=
LOCK ?= requirements/$(if $(TORCH_INDEX),lock-cpu,lock).txt
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip install --quiet $(PIP_OPTIONS)
SNAKEMAKE := $(BIN)/snakemake --cores $(CORES)

.PHONY: demo verify test bench unlock clean lock

# Locked: torch first where TORCH_INDEX names its index, then every package of the lock with its
# hash checked, then this checkout itself (no dependency resolved: the lock has them all).
$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
ifeq ($(strip $(LOCK)),)
	$(PIP) --upgrade pip
	$(if $(TORCH_INDEX),$(PIP) --index-url $(TORCH_INDEX) torch torchvision)
	$(PIP) --editable '.[workflow,test]'
else
	@$(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11, 5) and "$(LOCK) is for Python >= 3.11.5, not " + sys.version.split()[0] + ": use a newer python3 (make PYTHON=python3.12 after rm -r $(VENV)), or install unlocked with make LOCK=")'
	$(if $(TORCH_INDEX),$(PIP) --no-deps --index-url $(TORCH_INDEX) -r requirements/torch-cpu.txt)
	$(PIP) --require-hashes --no-deps -r $(LOCK)
	$(PIP) --no-deps --no-build-isolation --editable .
endif
	touch $(STAMP)

# Refresh the lock (needs PyPI): the pinned versions where they still fit pyproject.toml, or with
# UPGRADE=1 the newest releases; then regenerate the README's demo numbers (docs/reproducibility.md).
lock: $(STAMP)
	$(PIP) uv==0.13.8
	$(BIN)/python tools/lock.py $(if $(UPGRADE),--upgrade)

# A killed run leaves Snakemake's lock behind: say so (and how to remove it) instead of Snakemake's error.
demo: $(STAMP)
	@$(BIN)/python tools/snakemake_lock.py
	$(SNAKEMAKE)

# The demo in a temporary folder, its tables and CSVs against docs/demo-sha256.json: "identical", or what
# differs and the machine's facts to report (tools/verify_demo.py; exit status 1 on a difference).
verify: $(STAMP)
	$(BIN)/python tools/verify_demo.py --cores $(CORES)

# Remove the lock of a killed run; refused while a Snakemake still runs in this directory.
unlock: $(STAMP)
	$(BIN)/python tools/snakemake_lock.py --unlock

# The suite runs in TEST_WORKERS pytest processes (pytest-xdist; at most 4 for `auto`), a test module
# at a time in each: the Slurm tests share one cluster, so they must stay in one process (--dist loadfile).
# PYTHONUTF8: the tests read the UTF-8 files the pipeline writes (Russian captions) whatever the locale.
test: $(STAMP)
	PYTHONUTF8=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: $(STAMP)
	$(PIP) '.[bench]'
	$(BIN)/python benchmarks/bench_calibrators.py
	$(BIN)/python benchmarks/bench_pipeline.py

clean:
	rm -rf results reports .snakemake
