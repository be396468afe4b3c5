# `make run` trains the flagship workflow; `make test` runs the test suite. Both set up first.
VENV ?= .venv
# The main job: the untrained Qwen2.5-Coder-0.5B (built in) learns a skill with AT-GRPO, with no
# warm start and no helper that computes the answer: workflows/math_arith_check.mas (the tool writes
# a program, the reasoner reads what it printed and answers) under configs/first_run.yaml (8 steps),
# 64 held-out problems evaluated before and after (docs/performance.md `## main job`). The side-by-side
# math workflow with its own recipe (5 steps, about 32 min): make run WORKFLOW=workflows/math_arith.mas
# The Plan-Path pipeline check (a planning helper, a supervised warm start first):
#   make run WORKFLOW=workflows/plan_path_helper.mas
# Any other workflow runs with its own defaults: make run WORKFLOW=workflows/coder_tester.mas
WORKFLOW ?= workflows/math_arith_check.mas
SKILL_CONFIGS = workflows/math_arith_check.mas=configs/first_run.yaml workflows/math_arith.mas=configs/skill_cpu_quick.yaml
CONFIG ?= $(patsubst $(WORKFLOW)=%,%,$(filter $(WORKFLOW)=%,$(SKILL_CONFIGS)))
WARM_START ?= $(if $(filter workflows/plan_path_helper.mas,$(WORKFLOW)),runs/warm/plan_path_helper)
# MLflow records the main job (the skill configs turn it off for sweeps of many trials)
RUN_ARGS = $(if $(CONFIG),--config $(CONFIG) tracking.enabled=true)

.PHONY: setup run test typecheck check bench
setup:
	./scripts/setup.sh

run: setup
ifeq ($(WARM_START),)
	$(VENV)/bin/masdsl run $(WORKFLOW) $(RUN_ARGS)
else
	test -f $(WARM_START)/warm_start.json || $(VENV)/bin/masdsl warm-start $(WORKFLOW) --out $(WARM_START)
	$(VENV)/bin/masdsl run $(WORKFLOW) $(RUN_ARGS) policy.shared.model=$(WARM_START)
endif

# Two pytest workers (pytest-xdist): the suite keeps both cores busy (measured 99% from start to
# end), so a third worker gains nothing and more starved Ray's raylets here. Work stealing: a
# worker that runs out takes half of the other's queue, where xdist's default `load` left one
# worker running the last ~100 s of slow tests alone (docs/performance.md `## test suite`).
TEST_WORKERS ?= 2
test: setup
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# mypy over masdsl/models, plan, runtime, learner, training and sweep, strict there ([tool.mypy] in pyproject.toml)
typecheck: setup
	$(VENV)/bin/mypy masdsl/models masdsl/plan masdsl/runtime masdsl/learner masdsl/training masdsl/sweep

check: setup
	$(VENV)/bin/masdsl check workflows/*.mas
