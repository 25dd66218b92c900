# Two commands do all the set-up:  `make run`  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# GPU=auto installs the vLLM engine when an NVIDIA GPU answers; GPU=0 never, GPU=1 always.
GPU    ?= auto

.PHONY: run test lint venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The tray extra builds PyGObject against the system's GTK (see README): when its
# packages are missing the daemon still runs, with a warning and without a tray menu.
$(VENV)/.run-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	-$(BIN)/pip install -q -e '.[tray]' || echo "ocrwatch: tray extra not installed (see README: system packages for the tray)"
	@if [ "$(GPU)" = 1 ] || { [ "$(GPU)" = auto ] && nvidia-smi >/dev/null 2>&1; }; then \
		echo "installing the GPU engine (vLLM)"; $(BIN)/pip install -q -e '.[gpu]'; fi
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	-$(BIN)/pip install -q -e '.[dev,tray]' || echo "ocrwatch: tray extra not installed: tray tests will be skipped"
	touch $@

run: $(VENV)/.run-installed
	$(BIN)/ocrwatch run

lint: $(VENV)/.test-installed
	$(BIN)/ruff check ocrwatch tests benchmarks
	$(BIN)/mypy ocrwatch

test: lint
	$(BIN)/pytest -ra $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
