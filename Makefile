# Two commands do all the set-up: `make demo` (the main job end to end) and `make test` (the test suite).
# Both create the virtual environment in .venv and install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.costlab-installed
DEMO_DIR ?= demo_out

.PHONY: venv test test-fast demo bench clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch first, pinned: the CPU build; a looser spec would pull CUDA packages.
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

test: venv
	$(PY) -m pytest -q -ra --durations=10

test-fast: venv
	$(PY) -m pytest -q -ra -m "not slow"

demo: venv
	$(VENV)/bin/costlab --version
	bash scripts/demo.sh $(DEMO_DIR)

clean:
	rm -rf $(VENV) build dist *.egg-info $(DEMO_DIR)
