# The two commands: `make run` (default pipeline) and `make test` (test suite).
# Both set up their own virtual environment on a fresh machine (Debian, Python 3.11).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
DVC := $(VENV)/bin/dvc
# dvc.yaml commands call `python`: make it the venv's.
export PATH := $(abspath $(VENV))/bin:$(PATH)
# Prefect: the project's own home (.prefect/, git-ignored), a startup timeout fit for a loaded
# machine, analytics off. flows/__init__.py sets the same when Prefect is started without make.
export PREFECT_HOME ?= $(abspath .prefect)
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 180
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export DVC_NO_ANALYTICS := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup run test profile check report costs push pull flow schedule bench clean-venv

setup: $(VENV)/.installed $(VENV)/.dvc-lock-hook

$(VENV)/.installed: pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "paperworks needs Python 3.11, found " + sys.version' 
	@# Debian ships venv/ensurepip separately: install it when we can, else say what is missing.
	@$(PYTHON) -m venv --help >/dev/null 2>&1 && $(PYTHON) -c 'import ensurepip' 2>/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq python3-venv; } || \
	  { echo "error: Python's venv module is missing: apt-get install python3-venv" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=68"
	@# Byte-compile on both cores instead of pip's one (≈ 26,000 files: 79 s of CPU, 47 s of wall on 2 cores,
	@# measured 2026-12-07). Needed where PYTHONDONTWRITEBYTECODE is set (this machine and CI): a module left
	@# uncompiled here would be compiled again by every process that imports it. Files meant for newer
	@# Pythons fail to compile, as under pip; compileall lists them in .venv/compileall.log.
	$(PY) -m pip install -q --no-compile -r requirements.lock
	$(PY) -m compileall -q -j 0 $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') > $(VENV)/compileall.log 2>&1 || true
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# dvc.lock writes ≈ 3 s faster per stage on this project's lock (paperworks/dvc_lock_speedup.py says why and how):
# the module is copied into the venv under its own top-level name, so that the .pth that imports it at interpreter
# start never imports the paperworks package (a test copy's stages must import their own copy's code).
$(VENV)/.dvc-lock-hook: $(VENV)/.installed paperworks/dvc_lock_speedup.py
	site=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	  cp paperworks/dvc_lock_speedup.py "$$site/paperworks_dvc_lock_speedup.py" && \
	  echo "import paperworks_dvc_lock_speedup" > "$$site/paperworks_dvc_lock_speedup.pth"
	touch $@

# Validate params.yaml first (fails before any work), then reproduce the DAG through the Prefect flow:
# DVC still decides what is stale and writes dvc.lock (each task is `dvc repro --single-item`); the
# flow runs RUN_LANES independent stages at a time with cores/RUN_LANES torch threads each — measured
# faster than serial `dvc repro` (benchmarks/results/run_modes.txt). The flow holds the project lock
# from the profile switch (P=…) to the last dvc.lock write. RUN_LANES=1 runs one stage at a time;
# `dvc repro` itself works as always.
RUN_LANES ?= 2
run: setup
	$(if $(P),,$(PY) -m paperworks.core.params &&) $(PY) -m flows.pipeline $(if $(P),--profile $(P)) --max-parallel $(RUN_LANES)
	$(PY) -m flows.report_guard
	$(PY) -m paperworks.core.report --recompute --readme README.md

# Three workers (pytest-xdist) on two cores: the smoke-copy tests run as two ordered groups, one per
# worker (tests/conftest.py), the third takes the unit and frame tests. A worker waiting on a stage's
# process start, a Prefect server or a schedule leaves a core idle (user+sys was 1.54 cores of 2 in a
# two-worker run); the third fills it. PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= 3
test: setup
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist load $(PYTEST_ARGS)

# make profile P=smoke|default|paper
profile: setup
	$(PY) -m flows.project_lock -- $(PY) -m paperworks.core.profile $(P)

check: setup
	$(PY) -m paperworks.core.params

# Refuses when an output under metrics/ or plots/ differs from dvc.lock (an interrupted run).
report: setup
	$(PY) -m flows.report_guard
	$(PY) -m paperworks.core.report --recompute --readme README.md

# Wall/CPU time, peak memory and load of the latest run of every stage, per track, with the critical path.
costs: setup
	$(PY) -m flows.costs

# The shared artifact store (a DVC remote: $$PAPERWORKS_REMOTE, a directory or s3://…, ssh://…;
# default ~/paperworks-dvc-store): push after a run, pull on a fresh clone instead of retraining.
# T='control_*' moves only the stages matching it (and their upstream stages)
push: setup
	$(PY) -m flows.store push $(if $(T),--glob '$(T)')

pull: setup
	$(PY) -m flows.store pull $(if $(T),--glob '$(T)')

# Run the DAG through Prefect (local ephemeral API, no server needed).
flow: setup
	$(PY) -m flows.pipeline $(FLOW_ARGS)

# Start a local Prefect server (loopback, SQLite) and serve the scheduled deployment.
schedule: setup
	$(PY) -m flows.schedule $(SCHEDULE_ARGS)

bench: setup
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done
