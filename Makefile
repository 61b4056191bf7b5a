# The two commands a newcomer needs (see README.md):
#   make run    set up .venv and execute every notebook headless, printing a summary
#   make test   set up .venv and run lint, structure checks, unit tests and every notebook
# Other targets: make smoke (the quick headless run), make bench (the performance report,
# build/benchmark.md; make bench-quick for the reduced mode the tests run), make sync (regenerate
# derived cells and the README table, strip outputs), make lab (JupyterLab).
# VENV and REQUIREMENTS choose the environment, e.g. the TensorFlow 2.19.1 one that CI also tests:
#   make test VENV=.venv-tf219 REQUIREMENTS=requirements-tf219.txt

PYTHON ?= python3
VENV ?= .venv
REQUIREMENTS ?= requirements.txt
BIN := $(VENV)/bin
READY := $(VENV)/.ready-$(notdir $(REQUIREMENTS))
NB ?=
# One folder per environment (and per NB selection), so parallel runs never clobber each other.
SMOKE_DIR := build/smoke$(subst .venv,,$(notdir $(VENV)))$(if $(NB),-$(subst $(eval) ,-,$(strip $(NB))))

.PHONY: run smoke test test-unit test-notebooks lint sync lab bench bench-quick clean

run: $(READY)
	$(BIN)/python tools/run_notebooks.py

smoke: $(READY)
	$(BIN)/python tools/run_notebooks.py --smoke

test: $(READY) lint
	$(BIN)/python tools/prepare_notebooks.py $(SMOKE_DIR) $(NB)
	$(BIN)/python -m pytest tests $(SMOKE_DIR) --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=900 -p no:cacheprovider

test-unit: $(READY)
	$(BIN)/python -m pytest tests -p no:cacheprovider

test-notebooks: $(READY)
	$(BIN)/python tools/prepare_notebooks.py $(SMOKE_DIR) $(NB)
	$(BIN)/python -m pytest $(SMOKE_DIR) --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=900 -p no:cacheprovider

lint: $(READY)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/sync_notebooks.py --check

sync: $(READY)
	$(BIN)/nbstripout notebooks/*.ipynb
	$(BIN)/python tools/sync_notebooks.py
	$(BIN)/ruff format notebooks helpers tools tests

bench: $(READY)
	$(BIN)/python tools/benchmark.py

bench-quick: $(READY)
	$(BIN)/python tools/benchmark.py --quick

lab: $(READY)
	$(BIN)/jupyter lab notebooks

$(READY): $(REQUIREMENTS) requirements-tools.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r $(REQUIREMENTS)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

clean:
	rm -rf build
