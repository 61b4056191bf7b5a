# The two commands a newcomer needs (see README.md):
#   make run    set up .venv and execute every notebook headless, printing a summary
#   make test   set up .venv and run lint, structure checks, unit tests and every notebook
# Other targets: make env (only the environment), make smoke (the quick headless run), make sync (regenerate
# derived cells and the README table, strip outputs), make lab (JupyterLab), make check-routes
# (resolve every install route against the package index with pip --dry-run; installs nothing),
# make platforms (compare the routes with what Colab, Kaggle and the index publish),
# make selftest (the TPU self-test, build/self-test/tpu-self-test.md and .json), make release
# VERSION=X.Y.Z (set the version everywhere, regenerate, commit and tag locally; never pushes),
# make hardware PLATFORM=kaggle|colab|local (every lesson on a real TPU host; see CONTRIBUTING.md).
#
# STACK chooses the Python + TensorFlow pair, each standing in for where users run the notebooks:
# tools/stacks.py names them (`python3 tools/stacks.py --names`), the default first, each with its
# requirements file, whose header (`make sync` writes it from tpucheck/routes.py) says what it
# stands in for and gives the Python and the replicas, as many as the platform's TPU has cores;
# the notebooks run with that many. e.g. `make test STACK=colab`; REPLICAS=N runs the notebooks
# with SIMULATED_REPLICAS=N. Each stack has its own virtual environment (.venv for the default,
# .venv-STACK for the others); tools/find_python.py finds its interpreter or says how to install it.

STACKS := $(shell python3 tools/stacks.py --names)
STACK ?= $(firstword $(STACKS))
ifeq ($(filter $(STACK),$(STACKS)),)
  $(error Unknown STACK=$(STACK); use one of: $(or $(STACKS),(python3 tools/stacks.py --names failed)))
endif
REQUIREMENTS ?= $(shell python3 tools/stacks.py --requirements $(STACK))
ifeq ($(STACK),$(firstword $(STACKS)))
  VENV ?= .venv
endif
# Each stack's Python and replica count: its requirements file's header (written by make sync).
STACK_PYTHON := $(shell sed -n 's/^\# python: \([0-9.]*\)$$/\1/p' $(REQUIREMENTS))
STACK_REPLICAS := $(shell sed -n 's/^\# replicas: //p' $(REQUIREMENTS))
# The lessons' own default (requirements.txt's header, from helpers.strategy.SIMULATED_REPLICAS)
# needs no --replicas, so the main stack's run folders keep their names.
DEFAULT_REPLICAS := $(shell sed -n 's/^\# replicas: //p' requirements.txt)
ifneq ($(STACK_REPLICAS),$(DEFAULT_REPLICAS))
  REPLICAS ?= $(STACK_REPLICAS)
endif
VENV ?= .venv-$(STACK)
BIN := $(VENV)/bin
READY := $(VENV)/.ready-$(notdir $(REQUIREMENTS))
BOOK_READY := $(VENV)/.ready-requirements-book.txt
NB ?=
.PHONY: env run smoke test test-unit test-slow test-notebooks lint sync lab check-routes platforms selftest release clean book book-check hardware

# run and smoke skip notebooks unchanged since they last passed (see tools/run_notebooks.py);
# FORCE=1 re-executes them. Each environment and mode has its own folder (build/full,
# build/smoke-kaggle, build/smoke-03-04 for NB="03 04": tools/runner/folders.py; NB takes a lesson's
# number or its name, NB=keras3_on_jax), and make smoke
# shares make test's, so either skips what the other just ran.
RUN_ARGS = --cache $(if $(FORCE),--force) $(foreach n,$(NB),--only $(n)) \
	$(if $(REPLICAS),--replicas $(REPLICAS))
RUN = $(BIN)/python tools/run_notebooks.py
SMOKE_RUN = $(RUN) --smoke --jobs $(JOBS) $(RUN_ARGS)
# make run executes one notebook at a time, so the ratios the lessons measure are not disturbed;
# smoke and test run two at once (a notebook spends much of its time in one busy thread).
JOBS ?= 2

# Only the stack's environment (what every other target first makes sure of).
env: $(READY)

run: $(READY)
	$(RUN) $(RUN_ARGS)

smoke: $(READY)
	$(SMOKE_RUN)

# Two pytest workers: much of a test's time is a fresh process importing TensorFlow or waiting
# for a worker process, which overlaps well on 2 cores. A module's tests stay on one worker
# (tests/conftest.py says which modules' tests are spread instead).
# --durations: every run's log names its slowest tests, so a test that grows is seen.
PYTEST = $(BIN)/python -m pytest -p no:cacheprovider -n 2 --durations=8
# nbval runs the stored lessons that finish in full mode within about 20 s (`nbval = true` in
# notebooks/manifest.toml), as a contributor would: `pytest --nbval-lax notebooks/NN_name.ipynb`.
# It runs on the main stack, where contributors work (the runner below runs every lesson on every
# stack); nbval cannot pass parameters, so on colab's stack it would be a run no user makes.
# Each notebook is executed once, by run_notebooks; pytest then checks the executed copies
# (tests/test_executed_notebooks.py: passed, no stderr outside cells tagged expected-stderr).
# make test executes what users run: every lesson's full version (make run's, two at a time, in
# make run's folder, so either skips what the other just passed), on the main stack and on
# colab's (one replica: the many-steps-per-call branches a TPU takes). The kaggle stack runs the
# quick versions: its full run differs from main's only in Python and TensorFlow (8 replicas both),
# and at 1bcb152 it passed and failed the same lessons as main's full run (12 of 13, lesson
# scaling_out_to_pods on both).
# On the main stack, make test then runs the slow end-to-end tests and the browser checks (the
# book built from that run, and JupyterLab), as one more pytest run: much of it waits on
# child processes and the browser, so it takes three workers: 322 s instead of 342 s with two
# (one run each; two kept the CPU 161% busy, three 180%). One run for unit and slow tests was
# tried and saved about 10 s, but JupyterLab and the book's server then start beside the
# runner's kernels, and a kernel once lost its port to them.
# The helpers' unit tests run on the main stack. The kaggle and colab stacks run every lesson (what
# users run there) and the tests marked stacks: the checks of the executed lessons, the reference
# script's tests, and the probes of what the helpers rely on in TensorFlow and Keras (Keras' fit
# rules, dtype policies, TensorFlow's logging and internals). The rest took 68-71 s a stack.
MAIN_ONLY = $(filter main,$(STACK))
TEST_RUN = $(if $(filter kaggle,$(STACK)),$(SMOKE_RUN),$(RUN) --jobs $(JOBS) $(RUN_ARGS))
test: $(READY) lint $(if $(MAIN_ONLY),$(BOOK_READY))
	$(if $(MAIN_ONLY),$(BIN)/python -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env \
		$$($(BIN)/python tools/manifest.py --nbval))
	$(TEST_RUN) --cell-timeout 1200 || true
	FIELD_GUIDE_EXECUTED=$$($(TEST_RUN) --where) $(PYTEST) tests \
		-m "$(if $(MAIN_ONLY),,stacks and )not slow and not browser"
	$(if $(MAIN_ONLY),FIELD_GUIDE_EXECUTED=$$($(TEST_RUN) --where) \
		$(PYTEST) -n 3 --durations=20 tests -m "slow or browser")

# The quick loop while working: everything but the slow end-to-end tests (make test-slow).
test-unit: $(READY)
	$(PYTEST) tests -m "not slow and not browser"

test-slow: $(READY)
	$(PYTEST) tests -m slow

test-notebooks: $(READY)
	$(TEST_RUN) --cell-timeout 1200 || true
	FIELD_GUIDE_EXECUTED=$$($(TEST_RUN) --where) $(BIN)/python -m pytest \
		tests/test_executed_notebooks.py -p no:cacheprovider

lint: $(READY)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/sync_notebooks.py --check
	$(BIN)/python tools/check_references.py
	$(BIN)/nbstripout --keep-id --verify notebooks/*.ipynb  # stored as `make sync` leaves them

# Ruff's UP036 removes the code kept for a Python older than requires-python (pyproject.toml), so
# dropping the oldest Python is that one edit and `make sync`.
sync: $(READY)
	$(BIN)/nbstripout --keep-id notebooks/*.ipynb
	$(BIN)/python tools/sync_notebooks.py
	$(BIN)/ruff check --quiet --select UP036,F401,I001 --fix --unsafe-fixes .
	$(BIN)/ruff format notebooks helpers tpucheck tools tests

# Jupyter refuses to run as root (Docker images, many cloud VMs) unless told it may.
LAB_DIR ?= notebooks
# The book: every lesson as a run executed it, as a static site in build/book/html (build/book-smoke
# with SMOKE=1, from the quick run). It executes nothing: `make run` (or smoke) skips what is cached.
$(BOOK_READY): requirements-book.txt $(READY)
	$(UV_PIP) -r requirements-book.txt
	touch $@

book: $(BOOK_READY) $(if $(SMOKE),smoke,run)
	$(BIN)/python tools/book/build.py $(if $(SMOKE),--smoke)

book-check: book
	$(BIN)/python tools/book/check.py $(if $(SMOKE),--smoke)

lab: $(READY)
	$(BIN)/jupyter lab $(LAB_DIR) $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

check-routes: $(READY)
	$(BIN)/python tools/check_routes.py

# The platform watch: tpucheck/routes.py against what Colab, Kaggle and the package index publish
# (online; RECORDED=today reads the saved copies that stand for today, as the tests do:
# tools/platforms.py's TODAY names them; RECORDED=DIR reads another folder).
platforms: $(READY)
	$(BIN)/python tools/platforms.py $(if $(RECORDED),--recorded $(RECORDED))

selftest: $(READY)
	$(BIN)/python -m tpucheck selftest --out build/self-test

# The hardware lane (tools/hardware): every lesson and the self-test on a TPU host, and a record in
# hardware/records/. PLATFORM=kaggle (needs a Kaggle token) or colab (a signed-in colab CLI);
# PLATFORM=local runs the driver here on the simulated TPU: it installs nothing, and its record
# (build/hardware/records/) is a dry run that verifies nothing. QUICK=1: the first light (the
# route, the self-test and lesson 01_tpu_detection_and_connection; it can verify the route only); SMOKE=1: the lessons' quick
# versions; NB="01 03": only those lessons; LIMIT_HOURS: the run's wall-clock limit (default 9).
hardware: $(READY)
	$(if $(filter kaggle colab local,$(PLATFORM)),,$(error make hardware PLATFORM=kaggle|colab|local))
	$(BIN)/python -m tools.hardware $(PLATFORM) $(if $(QUICK),--quick) $(if $(SMOKE),--smoke) \
		$(foreach n,$(NB),--only $(n)) \
		$(if $(LIMIT_HOURS),--limit-hours $(LIMIT_HOURS))

release: $(READY)
	$(if $(VERSION),,$(error make release VERSION=X.Y.Z))
	$(BIN)/python tools/release.py $(VERSION)

# The environment is built with uv (pinned here, installed into the venv by pip): it installs the
# same pinned requirements as pip would, several times faster (under a minute instead of about 3
# for a stack's ~600 MB of wheels), which matters because CI builds three environments from scratch.
UV_VERSION := 0.13.9
# --compile-bytecode where PYTHONDONTWRITEBYTECODE is set (as on some CI machines): there an
# uncompiled TensorFlow takes 21 s instead of 8 to import, in every kernel and child process.
# Elsewhere Python compiles each module on its first import and keeps it: compiling all three
# CI environments ahead took 100 CPU-s of the 124 their builds took (.ci/run unsets the variable).
UV_PIP = $(BIN)/uv pip install --quiet $(if $(PYTHONDONTWRITEBYTECODE),--compile-bytecode) \
	--python $(BIN)/python

$(READY): $(REQUIREMENTS) requirements-tools.txt pyproject.toml
	$(if $(STACK_PYTHON),python3 tools/find_python.py $(STACK_PYTHON) >/dev/null)
	$(if $(STACK_PYTHON),$$(python3 tools/find_python.py $(STACK_PYTHON)),python3) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(UV_PIP) -r $(REQUIREMENTS)
	$(UV_PIP) --no-deps -e .
	touch $@

clean:
	rm -rf build
