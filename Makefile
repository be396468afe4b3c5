# `make run` trains the flagship workflow; `make test` runs the test suite. Both set up first.
VENV ?= .venv
WORKFLOW ?= workflows/coder_tester.mas

.PHONY: setup run test check bench
setup:
	./scripts/setup.sh

run: setup
	$(VENV)/bin/masdsl run $(WORKFLOW)

test: setup
	$(VENV)/bin/python -m pytest -q

check: setup
	$(VENV)/bin/masdsl check workflows/*.mas
