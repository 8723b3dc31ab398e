# Two commands set everything up on a fresh machine:
#   make demo   - create .venv if missing, install, run the pipeline on the embedded default
#   make test   - the same set-up, then the test suite
PYTHON ?= python3
CORES ?= 2
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SNAKEMAKE := $(BIN)/snakemake --cores $(CORES)

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --editable '.[workflow,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(SNAKEMAKE)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet '.[bench]'
	$(BIN)/python benchmarks/bench_calibrators.py
	$(BIN)/python benchmarks/bench_pipeline.py

clean:
	rm -rf results reports .snakemake
