# Two entry points, the same on a laptop and in CI:
#   make demo  - set up, run the whole pipeline on the bundled OpenReg backend, build the dashboard
#   make test  - set up, run the test suite
.PHONY: setup setup-demo demo test
OOTCI := .venv/bin/ootci
TORCH ?= 2.13.0
OUT ?= out

setup:
	@bash scripts/setup.sh test

setup-demo:
	@bash scripts/setup.sh demo

demo: setup-demo
	$(OOTCI) run openreg --torch $(TORCH) --out $(OUT)/runs; \
	status=$$?; \
	$(OOTCI) dashboard build --data $(OUT)/runs --out $(OUT)/site || exit $$?; \
	exit $$status

# Most tests wait on subprocesses (pip, builds, act), so the files run on three workers even
# on two cores, the longest first (tests/conftest.py); PYTEST_WORKERS=0 runs them in one process.
PYTEST_WORKERS ?= 3

test: setup
	.venv/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)
