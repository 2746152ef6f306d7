"""Expected failures, xpassed, unmatched entries (runner/suite_runs/classify.py), and the plugin's
view of the manifest vocabulary."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

from ootci.runner import models
from ootci.runner.core.errors import ManifestError
from ootci.runner.manifests import manifest
from ootci.runner.models import Outcome
from ootci.runner.suite_runs import classify
from ootci.runner.suite_runs.suite_runner import SUITES_DIR, first_failing_test


def _manifest(tmp_path: Path, extra: str) -> manifest.Manifest:
    path = tmp_path / "backend.toml"
    path.write_text(textwrap.dedent("""
        name = "m"
        device = "cpu"
        distribution = "torch"
        import_name = "torch"
        entry_point = "cpu = torch:cpu"
    """) + textwrap.dedent(extra) + '\n[source]\nrequirement = "torch==2.13.0"\n[build]\nrecipe = "prebuilt"\n')
    return manifest.load(path)


@pytest.fixture
def m(tmp_path):
    return _manifest(tmp_path, """
        [[expected_failures]]
        test = "test_opinfo.py::test_compare_cpu[add-float32]"
        reason = "exact id with brackets"
        [[expected_failures]]
        test = "*test_compare_cpu?linalg.*"
        reason = "linalg is not implemented"
        link = "https://example.invalid/1"
        [[expected_failures]]
        test = "vendor::test_x.py::*"
        reason = "only in suite vendor"
    """)


def _result(test_id, outcome, suite="integration", message="boom"):
    return models.TestResult(id=test_id, suite=suite, outcome=outcome, message=message)


def test_matching_exact_ids_patterns_and_suite_prefixes(m):
    assert classify.expected_failure(m, "integration", "test_opinfo.py::test_compare_cpu[add-float32]").reason \
        == "exact id with brackets"
    assert classify.expected_failure(m, "integration", "test_opinfo.py::test_compare_cpu[add-float16]") is None
    assert classify.expected_failure(m, "integration", "test_opinfo.py::test_compare_cpu[linalg.lu-float32]").link
    assert classify.expected_failure(m, "vendor", "test_x.py::test_y") is not None
    assert classify.expected_failure(m, "smoke", "test_x.py::test_y") is None


def test_expected_failure_that_fails_is_xfailed_and_one_that_passes_is_xpassed(m):
    entry = m.expected_failures[1]
    for outcome in (Outcome.failed, Outcome.error, Outcome.timeout, Outcome.crashed):
        result = classify.apply_expected(_result("t", outcome), entry)
        assert result.outcome is Outcome.xfailed
        assert "linalg is not implemented (https://example.invalid/1)" in result.message and "boom" in result.message
    for outcome in (Outcome.passed, Outcome.flaky):
        result = classify.apply_expected(_result("t", outcome), entry)
        assert result.outcome is Outcome.xpassed and "remove the entry" in result.message
    assert classify.apply_expected(_result("t", Outcome.skipped), entry).outcome is Outcome.skipped
    assert classify.apply_expected(_result("t", Outcome.failed), None).outcome is Outcome.failed


def test_xpassed_fails_the_stage_and_flaky_does_not():
    # A suite stage fails on any outcome that is not ok, and names the first such test (suite_runner).
    assert first_failing_test([_result("a", Outcome.flaky), _result("b", Outcome.xfailed)]) is None
    assert first_failing_test([_result("a", Outcome.passed), _result("b", Outcome.xpassed)]).culprit == "b"
    assert first_failing_test([_result("a", Outcome.crashed)]).culprit == "a"


def test_unmatched_entries_are_named(m):
    results = [_result("test_opinfo.py::test_compare_cpu[add-float32]", Outcome.xfailed)]
    problems = classify.unmatched_expected_failures(m, results, ["integration"])
    assert len(problems) == 2
    assert "expected_failures[1].test '*test_compare_cpu?linalg.*' matched no test" in problems[0]
    assert str(m.path) in problems[0] and "(integration)" in problems[0]


def test_entries_of_a_suite_that_did_not_run_are_not_problems(tmp_path):
    m = _manifest(tmp_path, """
        [[expected_failures]]
        test = "integration::test_opinfo.py::*sparse*"
        reason = "no sparse"
        [[expected_failures]]
        test = "smoke::test_nothing_like_this"
        reason = "stale"
    """)
    smoke_only = [_result("test_tensors.py::test_ones", Outcome.passed, suite="smoke")]
    problems = classify.unmatched_expected_failures(m, smoke_only, ["smoke"])
    assert len(problems) == 1 and "expected_failures[1]" in problems[0]
    assert len(classify.unmatched_expected_failures(m, smoke_only, ["smoke", "integration"])) == 2


def test_unknown_capability_is_rejected_with_file_and_field(tmp_path):
    with pytest.raises(ManifestError) as err:
        _manifest(tmp_path, 'capabilities = ["streams", "teleport"]\n')
    message = err.value.message
    assert str(tmp_path / "backend.toml") in message and "field 'capabilities.1'" in message
    assert "'teleport'" in message


def test_plugin_knows_exactly_the_manifest_capabilities():
    spec = importlib.util.spec_from_file_location("ootci_plugin_under_test", SUITES_DIR / "ootci_plugin.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    assert set(plugin.CAPABILITIES) == {c.value for c in manifest.Capability}


def test_suites_are_not_part_of_the_runner_package():
    """No __init__.py from runner/suites down: pytest's importlib mode then imports the
    suites as standalone modules, never through `runner` (whose imports need pydantic)."""
    assert not list(SUITES_DIR.rglob("__init__.py"))
    assert not (SUITES_DIR / "__init__.py").exists()
