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
# Workers: three per core. Most of a worker's time is waiting (servers, scrapes, sleeps), so the cores stay busy only
# with more workers than cores. The fresh-clone run of 2026-12-05 22:11 (-n 5, 2 cores, nothing else running):
# 1,002 CPU-s in the tests, 2,872 worker-s, pytest 600 s; its units modelled (`python -m tests.times_report TIMES 0
# --workers 4,5,6,7`) take 694 s at -n 4, 583 s at -n 5, 547 s at -n 6 and 530 s at -n 7 (the CPU floor 501 s);
# collection and start-up add about 20 s, and the waits grow with the load (an earlier -n 7 run measured 36 s over
# its model). Past -n 6 only CPU cuts help.
test: $(STAMP)
	@lint_log=$$(mktemp); $(MAKE) --no-print-directory lint > $$lint_log 2>&1 & lint=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider -n $$(( 3 * $$(nproc) )) --dist loadgroup --durations=25; tests=$$?; \
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
