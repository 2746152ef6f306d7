# Two entry points, the same on a laptop and in CI:
#   make demo  - set up, run the whole pipeline on the bundled OpenReg backend, build the dashboard
#   make test  - set up, run the test suite
#   make test-fast - the tests that build nothing and run no workflow (a few minutes), for the loop
.PHONY: setup setup-demo demo test test-fast
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
# (Four workers, with the long files split into groups, measured slower: 47 against 39 minutes.)
PYTEST_WORKERS ?= 3

test: setup
	.venv/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Everything not marked slow: no backend build, no act run, no CUDA release (about 2 minutes).
test-fast: setup
	.venv/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS)
