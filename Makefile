PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test test-slow lint format typecheck bench bench-learning clean

$(STAMP): setup.py pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,plot]"
	touch $(STAMP)

# The tests also cover the Ray runtime, PettingZoo envs, W&B (offline), videos, the built docs site and (slow) LunarLander, so they install those extras.
$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[test,plot,ray,pettingzoo,docs,wandb,video,box2d,atari,minatar,mujoco]"
	touch $(TEST_STAMP)

demo: $(STAMP)
	$(PY) -m parl.examples.demo

test: $(TEST_STAMP)
	$(PY) -m ruff check parl tests benchmarks setup.py
	$(PY) -m mypy
	$(PY) -m pytest -q

test-slow: $(TEST_STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(PY) -m ruff check parl tests benchmarks setup.py

format: $(STAMP)
	$(PY) -m ruff format parl tests benchmarks setup.py

typecheck: $(STAMP)
	$(PY) -m mypy

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test,plot,bench,box2d,atari,minatar,mujoco]"
	touch $(BENCH_STAMP)

bench: $(TEST_STAMP)
	$(PY) -m benchmarks.throughput
	$(PY) -m benchmarks.storing --n 64 256
	$(PY) -m benchmarks.env_processes
	$(PY) -m benchmarks.multitask

# Time to solve, `parl train` against SB3 (hours on 2 cores; results resume per problem, library and seed):
# make bench-learning LEARNING_ARGS="--problems lunar_ppo" runs one problem into the same table.
LEARNING_ARGS ?=

bench-learning: $(BENCH_STAMP)
	$(PY) -m benchmarks.learning $(LEARNING_ARGS)

# Return at a fixed budget and wall time on MinAtar and MuJoCo, `parl train` against SB3 (MuJoCo about an hour
# per problem, MinAtar DQN over an hour per run; resumes per problem, library and seed):
# make bench-budget BUDGET_ARGS="--problems halfcheetah_sac".
BUDGET_ARGS ?=
PIXELS_ARGS ?=

.PHONY: bench-budget
bench-budget: $(BENCH_STAMP)
	$(PY) -m benchmarks.budget $(BUDGET_ARGS)

# Pong with the Nature CNN: acting throughput of the agent path against loops without a framework (about
# 5 minutes), and frames per second with learning on, parl PPO and IMPALA against SB3 PPO (about an hour).
.PHONY: bench-pixels
bench-pixels: $(BENCH_STAMP)
	$(PY) -m benchmarks.pixels_acting
	$(PY) -m benchmarks.pixels_training $(PIXELS_ARGS)

# Processes and Ray at P = 1 and 2 (acting, and CartPole PPO learning), and a cost model fitted from P = 1
# that predicts P = 2 and 16 and 64 cores (about 5 minutes; the test extras install Ray).
SCALING_ARGS ?=

.PHONY: bench-scaling
bench-scaling: $(TEST_STAMP)
	$(PY) -m benchmarks.scaling $(SCALING_ARGS)

# The documentation site (mkdocs.yml): an API reference from the docstrings plus docs/*.md, built
# strictly, so a broken link or a docstring mkdocstrings cannot read fails the build.
DOCS_STAMP := $(VENV)/.installed-docs

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

.PHONY: docs
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build site *.egg-info
