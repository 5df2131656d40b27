# tweepy: `make run` serves the app, `make test` checks it, `make bench` measures the ladder.
# Every target sets up what it needs first (Debian packages when root, .venv, requirements/).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The single-machine stage that serves the most QPS under the bar in the published run
# (results/LATEST.md); on a branch made by stages/branches, that branch's stage.
STAGE  ?= $(shell cat stages/CURRENT 2>/dev/null || echo 6)

.PHONY: help setup run stop test lint format bench cold profile mix explain soak locust compare clean
.DEFAULT_GOAL := help

help:
	@echo "make run [STAGE=N]   serve stage N (default $(STAGE)) on 127.0.0.1, seeding a database if there is none"
	@echo "                     (PART=name: one part of a step, stages/N-name/part-<name>.env)"
	@echo "make stop            stop servers left running (pid files under var/)"
	@echo "make test            lint, then the whole test suite, browser and real servers included"
	@echo "make lint            ruff: the style the code is checked against (pyproject.toml)"
	@echo "make bench           measure the stages with the locust protocol (STAGES=\"4 5 6\", QUICK=1, KEEP_FROM=results/<run>);"
	@echo "                     only a run that measures every stage rewrites results/LATEST.md and the READMEs"
	@echo "                     (SPLIT=1/2: half the ladder, and stage 4's capacity as a control; python -m tools.bench --compose"
	@echo "                     FOLDERS makes one ladder of the parts, each stage a ratio to its own part's control)"
	@echo "make cold STAGES=\"6 4\" USERS=500     cold starts and herds of the stages at equal users, interleaved"
	@echo "                     (REPEAT=2 turns): results/<run>-cold-ab-<stages>/; QUICK=1 a smoke run into var/bench/"
	@echo "make profile STAGE=N a py-spy flame graph and CPU a request of stage N under load (USERS=, SECONDS=, PART=)"
	@echo "make mix STAGE=N     the protocol's requests that do not hash, in one process: CPU a request, by type (PROFILE=1)"
	@echo "make explain STAGE=N how stage N's database runs each read the pages make (EXPLAIN, timings)"
	@echo "make soak            the default stage under the protocol for minutes, memory sampled (USERS=, MINUTES=)"
	@echo "make locust          locust's web UI against the stage make run serves"
	@echo "make compare A=3 B=4 what step B changes over stage A: settings, and the code they switch on"

# One stamp per purpose: `make run` needs less than `make test`.
define install
	@test -x $(PY) || { echo "==> creating $(VENV)"; $(PYTHON) -m venv $(VENV); $(PY) -m pip install -q --upgrade pip; }
	@echo "==> installing requirements/$(1).txt into $(VENV)"
	@$(PY) -m pip install -q -r requirements/$(1).txt
	@touch $@
endef

$(VENV)/.installed-run: requirements/app.txt requirements/serve.txt requirements/scale-out.txt scripts/system-deps
	@scripts/system-deps
	$(call install,scale-out)

$(VENV)/.installed-bench: $(VENV)/.installed-run requirements/bench.txt
	$(call install,bench)

$(VENV)/.installed-test: $(VENV)/.installed-bench requirements/test.txt
	@scripts/system-deps --browser
	$(call install,test)

setup: $(VENV)/.installed-test

run: $(VENV)/.installed-run
	@$(PY) -m tools.stages run $(STAGE) $(if $(PART),--part $(PART)) $(if $(PORT),--port $(PORT))

stop:
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m tools.stages stop

lint: $(VENV)/.installed-test
	@echo "==> ruff check and ruff format --check"
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed-test
	@$(VENV)/bin/ruff format .
	@$(VENV)/bin/ruff check --fix .

test: lint
	@$(PY) -m pytest

profile: $(VENV)/.installed-bench
	@$(PY) -m tools.profile $(STAGE) $(if $(PART),--part $(PART)) $(if $(USERS),--users $(USERS)) $(if $(SECONDS),--seconds $(SECONDS))

mix: $(VENV)/.installed-run
	@$(PY) -m tools.mix $(STAGE) $(if $(PROFILE),--profile)

explain: $(VENV)/.installed-run
	@$(PY) -m tools.stages explain $(STAGE) $(if $(PART),--part $(PART))

soak: $(VENV)/.installed-bench
	@$(PY) -m tools.soak $(STAGE) $(if $(USERS),--users $(USERS)) $(if $(MINUTES),--minutes $(MINUTES))

compare: $(VENV)/.installed-run
	@$(PY) -m tools.compare $(or $(A),$(error A=stage before, B=stage after)) $(or $(B),$(error B=stage after)) $(if $(PART),--part $(PART))

bench: $(VENV)/.installed-bench
	@$(PY) -m tools.bench $(if $(STAGES),--stages "$(STAGES)") $(if $(QUICK),--quick) $(if $(KEEP_FROM),--keep-from $(KEEP_FROM)) \
		$(if $(SPLIT),--split $(SPLIT))

cold: $(VENV)/.installed-bench
	@$(PY) -m tools.bench.cold_ab --stages "$(or $(STAGES),$(error STAGES="6 4", in the order run))" \
		--users $(or $(USERS),$(error USERS=N for every cold start)) $(if $(REPEAT),--repeat $(REPEAT)) $(if $(QUICK),--quick)

clean: stop
	rm -rf var .pytest_cache

# The locust web UI on http://127.0.0.1:8089/ (WEB_PORT=), loading the stage `make run` serves (run that
# first, in another terminal; PORT= if you gave it one). The locustfile asks the server how many
# users were seeded; SEED_USERS=N tells it instead.
locust: $(VENV)/.installed-bench
	@port=$(or $(PORT),$$($(PY) -c "from tools import stages; print(stages.get_stage($(STAGE)).default_port)")) && \
	echo "==> locust web UI on http://127.0.0.1:$(or $(WEB_PORT),8089)/ against stage $(STAGE) at http://127.0.0.1:$$port" && \
	$(if $(SEED_USERS),TWEEPY_SEED_USERS=$(SEED_USERS)) exec $(VENV)/bin/locust -f locustfile.py --web-host 127.0.0.1 \
		--web-port $(or $(WEB_PORT),8089) -H http://127.0.0.1:$$port
