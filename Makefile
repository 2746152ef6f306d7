# Two entry points, the same on a laptop and in CI:
#   make demo  - set up, run the whole pipeline on the bundled OpenReg backend, build the dashboard
#   make test  - set up, run the test suite
#   make test-fast - the tests that build nothing and run no workflow (a few minutes), for the loop
#   make lint  - ruff and mypy (configured in pyproject.toml), and what the target side may import;
#                make test and make test-fast run it first
.PHONY: setup setup-demo demo test test-fast lint
OOTCI := .venv/bin/ootci
VENV ?= .venv
# mypy checks the packages as installed (ootci.runner, ootci.dashboard): a farm of links names the
# repository's folders so (the editable install's import hook is invisible to mypy). Absolute links:
# .cache may itself be a link, to a cache shared between checkouts.
TYPECHECK ?= .cache/typecheck
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

test: setup lint
	.venv/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Everything not marked slow: no backend build, no act run, no CUDA release (about 2 minutes).
test-fast: setup lint
	.venv/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check runner dashboard tests bench setup.py
	@mkdir -p $(TYPECHECK)/ootci
	@for d in runner dashboard backends; do ln -sfn "$(CURDIR)/$$d" $(TYPECHECK)/ootci/$$d; done
	MYPYPATH=$(TYPECHECK) $(VENV)/bin/mypy -p ootci.runner -p ootci.dashboard
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/test_dependencies.py::test_target_side_code_needs_only_torch_pytest_and_the_stdlib
