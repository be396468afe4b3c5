# `make run` trains the flagship workflow; `make test` runs the test suite. Both set up first.
VENV ?= .venv
# The main job: Plan-Path 5x5 with the planning helper, the embedded 135M model warm-started on
# the env's demonstrations (masdsl warm-start), then AT-GRPO (docs/performance.md `## main job`).
# Another workflow: make run WORKFLOW=workflows/coder_tester.mas WARM_START=
WORKFLOW ?= workflows/plan_path_helper.mas
WARM_START ?= runs/warm/$(basename $(notdir $(WORKFLOW)))

.PHONY: setup run test check bench
setup:
	./scripts/setup.sh

run: setup
ifeq ($(WARM_START),)
	$(VENV)/bin/masdsl run $(WORKFLOW)
else
	test -f $(WARM_START)/warm_start.json || $(VENV)/bin/masdsl warm-start $(WORKFLOW) --out $(WARM_START)
	$(VENV)/bin/masdsl run $(WORKFLOW) policy.shared.model=$(WARM_START)
endif

# Two pytest workers (pytest-xdist): most slow tests wait on processes starting (Ray, vLLM,
# subprocess runs), so two share this 2-core machine well; more starved Ray's raylets here.
TEST_WORKERS ?= 2
test: setup
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS)

check: setup
	$(VENV)/bin/masdsl check workflows/*.mas
