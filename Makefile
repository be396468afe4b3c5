# `make run` trains the flagship workflow; `make test` runs the test suite. Both set up first.
VENV ?= .venv
# The main job: Plan-Path 5x5 with the planning helper, the embedded 135M model warm-started on
# the env's demonstrations (masdsl warm-start), then AT-GRPO (docs/performance.md `## main job`).
# Another workflow: make run WORKFLOW=workflows/coder_tester.mas WARM_START=
WORKFLOW ?= workflows/plan_path_helper.mas
WARM_START ?= runs/warm/$(basename $(notdir $(WORKFLOW)))

.PHONY: setup run test typecheck check bench
setup:
	./scripts/setup.sh

run: setup
ifeq ($(WARM_START),)
	$(VENV)/bin/masdsl run $(WORKFLOW)
else
	test -f $(WARM_START)/warm_start.json || $(VENV)/bin/masdsl warm-start $(WORKFLOW) --out $(WARM_START)
	$(VENV)/bin/masdsl run $(WORKFLOW) policy.shared.model=$(WARM_START)
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
