"""The README's promises: two commands at the top, and the examples it shows."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def fenced_blocks(text: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"```[a-z]*\n(.*?)```", text, re.S)]


def test_quick_start_is_the_first_section_with_exactly_two_commands():
    assert README.index("## Quick start") == README.index("## ")
    blocks = fenced_blocks(section("Quick start"))
    assert blocks == ["make demo", "make test"]


def test_ci_runs_exactly_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    test_command = fenced_blocks(section("Quick start"))[1]
    assert f"exec {test_command}\n" in ci


def test_makefile_has_both_targets():
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo: setup-demo$", makefile, re.M)  # no browser, no linter: only the tests use them
    assert re.search(r"^setup-demo:\n\t@bash scripts/setup.sh demo$", makefile, re.M)
    assert re.search(r"^test: setup lint$", makefile, re.M)  # lint first: ruff, mypy, the target side's imports
    assert re.search(r"^setup:\n\t@bash scripts/setup.sh test$", makefile, re.M)
    assert "run openreg" in makefile and "dashboard build" in makefile


def test_quick_start_says_what_make_test_costs_and_how_to_run_a_part():
    text = " ".join(section("Quick start").split())
    for cost in ("20 minutes on a 2-core machine", "all but half a minute of them in pytest", "PYTEST_WORKERS=0",
                 "5.4 GB each", "14 GB", "act", "Chromium"):
        assert cost in text, cost
    # The way to run a part is documented, and works: the Makefile passes PYTEST_ARGS, the marker exists.
    assert "make test-fast" in text and "PYTEST_ARGS=tests/manifests/test_manifest.py" in text
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^\t\.venv/bin/python -m pytest -n \$\(PYTEST_WORKERS\) .*\$\(PYTEST_ARGS\)$", makefile, re.M)
    assert re.search(r"^test-fast: setup lint\n\t\.venv/bin/python -m pytest .*-m \"not slow\" \$\(PYTEST_ARGS\)$",
                     makefile, re.M)
    assert '"slow: ' in (REPO / "pyproject.toml").read_text()


def test_vendor_install_works_before_the_release():
    """`pipx install ootci` needs a release on PyPI: the README keeps it for then and says what works now."""
    text = section("For a backend vendor")
    assert "pipx install ootci         # once ootci is released on PyPI" in text
    assert "pipx install /path/to/ootci" in text and "python -m build --wheel" in text


def test_vendor_example_in_readme_is_the_linted_file():
    example = (REPO / "examples" / "vendor-workflow.yml").read_text()
    shown = next(b for b in fenced_blocks(section("GitHub Actions")) if "uses:" in b)
    assert shown in example


def test_linked_documents_exist():
    for link in re.findall(r"\]\(((?:docs|backends|examples)/[^)#]+)\)", README):
        assert (REPO / link).exists(), link
