# tweepy: `make run` serves the app, `make test` checks it, `make bench` measures the ladder.
# Every target sets up what it needs first (Debian packages when root, .venv, requirements).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The best single-machine stage; on a branch made by stages/branches, that branch's stage.
STAGE  ?= $(shell cat stages/CURRENT 2>/dev/null || echo 6)

.PHONY: help setup run stop test bench clean
.DEFAULT_GOAL := help

help:
	@echo "make run [STAGE=N]   serve stage N (default $(STAGE)) on 127.0.0.1, seeding a database if there is none"
	@echo "make stop            stop servers left running (pid files under var/)"
	@echo "make test            the whole test suite, browser and real servers included"
	@echo "make bench           measure the stages with the locust protocol (STAGES=\"4 5 6\", QUICK=1)"

$(VENV)/.installed: requirements.txt scripts/system-deps
	@scripts/system-deps --browser
	@echo "==> creating $(VENV) and installing requirements.txt"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -r requirements.txt
	@touch $@

setup: $(VENV)/.installed

run: setup
	@$(PY) -m tools.stages run $(STAGE)

stop:
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m tools.stages stop

test: setup
	@$(PY) -m pytest

bench: setup
	@$(PY) -m tools.bench $(if $(STAGES),--stages "$(STAGES)") $(if $(QUICK),--quick)

clean: stop
	rm -rf var .pytest_cache
