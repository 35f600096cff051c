# The README's commands: `make demo`, `make fleet-demo` and `make test`. Each sets everything up on a fresh machine.
VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo fleet-demo fleet-demo-stop fleet-demo-check test lint format bench eval clean

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/aiops demo --db out/demo.duckdb

# The cluster path on loopback (scripts/fleet_demo.py): Ctrl-C or `make fleet-demo-stop` stops it, FLEET_DEMO_S=240 after 240 s; it leaves the
# fleet's workspace at out/fleet-demo/fleet.duckdb.
fleet-demo: $(STAMP)
	$(PY) scripts/fleet_demo.py --out out/fleet-demo

# The fleet demo for FLEET_DEMO_S (default 240) s and, while it runs, the browser check of it
# (scripts/fleet_demo_browser.py: headless Chromium signs in, finds the incident, its plot and plan, approves the step
# with a pasted `ssh-keygen -Y sign` signature); fails if either fails.
fleet-demo-check: $(STAMP)
	$(PY) scripts/fleet_demo_browser.py --run-demo --out out/fleet-demo

# From another terminal: stops the fleet demo that runs in out/fleet-demo (as Ctrl-C does), its workspace kept.
fleet-demo-stop:
	$(PY) scripts/fleet_demo.py --stop --out out/fleet-demo

SOURCES := aiops collectors guardrails evals playbooks bpf tests bench

# CI (.ci/run) enforces ruff and mypy through `make test`: lint runs beside the tests (mypy takes about 25 s of one
# core from a fresh clone, while the suite's first tests leave the other core idle) and its output is shown after
# theirs; either failing fails `make test`.
# Workers: two per core plus one. Most of a worker's time is waiting (servers, scrapes, sleeps), so the cores stay
# busy only with more workers than cores, but more workers mean more load and longer waits. Fresh clones on 2 cores,
# nothing else running (2026-12-05): -n 5, 1,002 CPU-s of tests, 2,872 worker-s, `.ci/run` 600 s; -n 6, 1,075 CPU-s,
# 3,569 worker-s, 627 s (its model, `python -m tests.times_report TIMES 0 --workers 5,6`, had said 547 s). Past -n 5
# only cuts in CPU and in waiting help (2026-12-06, with the collection below: -n 5 10:05, -n 6 10:34).
# One collection alone first (its output dropped: the run after it reports the same errors): it writes the test
# modules' assertion-rewritten bytecode, which the workers then read; else all of them, started together, rewrite
# all ~400 modules at once (a worker's collection 8.5 CPU-s cold, 3.7 warm). From a fresh clone, 2 cores
# (2026-12-06): `.ci/run` 10:29 and 1,155 CPU-s without it, 10:05 and 1,105 CPU-s with it.
test: $(STAMP)
	@lint_log=$$(mktemp); $(MAKE) --no-print-directory lint > $$lint_log 2>&1 & lint=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider --collect-only > /dev/null 2>&1; \
	$(PY) -m pytest -q -p no:cacheprovider -n $$(( 2 * $$(nproc) + 1 )) --dist loadgroup --durations=25; tests=$$?; \
	wait $$lint; linted=$$?; cat $$lint_log; rm -f $$lint_log; \
	if [ $$linted -ne 0 ]; then echo "make test: lint failed" >&2; fi; \
	[ $$tests -eq 0 ] && [ $$linted -eq 0 ]

lint: $(STAMP)
	$(VENV)/bin/ruff check $(SOURCES)
	$(VENV)/bin/ruff format --check $(SOURCES)
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format $(SOURCES)
	$(VENV)/bin/ruff check --fix $(SOURCES)

eval: $(STAMP)
	$(VENV)/bin/aiops eval

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b" >&2; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) out .mypy_cache .ruff_cache .pytest_cache
