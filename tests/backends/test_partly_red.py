"""A real backend that is partly red, from `ootci init` and its baseline to a planted regression.

The backend is OpenReg's C++ runtime under another name, with the bugs real backends
have (tests/fixtures/partly-red/README.md): a circular import, `abs` only for floating
dtypes, FFTs that segfault on 2-d inputs, no `synchronize()`, a vendor test that needs
a package nobody declared. init claims every dtype the device holds (int64 too, where `abs`
fails), verifies autoload, runs the suites once and writes their failures as the baseline; it
says the first run would be red only for what no baseline holds (the circular import), with every
result; once that is fixed the run is green; a new failure turns it red alone.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ootci.runner.manifests import manifest
from ootci.runner.models import Outcome, Status
from ootci.runner.records import record_files
from tests.support import partly_red
from tests.support.cli import ootci
from tests.support.records import only_record

# A few OpInfos keep the run short: the crashing FFT, the float-only abs, and one to break later.
ENV = {"OOTCI_OPS": "abs,add,trunc,fft.rfft"}
# PyTorch's own test files are not this test's subject (tests/onboarding/test_init.py proposes them).
SUITES = ("--suites", "smoke,integration")
MEMORY_STATS = "tests/test_memory_stats.py::test_allocation_shows_in_the_process_memory"
RFFT_CRASHES = tuple(f"test_opinfo.py::test_compare_cpu[fft.rfft-{dtype}]" for dtype in ("float32", "float64", "bool"))
ABS_INT64 = "test_opinfo.py::test_compare_cpu[abs-int64]"
NOT_PASSING = (Outcome.failed, Outcome.error, Outcome.crashed, Outcome.timeout)


def by_id(record):
    return {t.id: t for t in record.tests}


def init_record(stdout: str):
    found = re.search(r"init's run of the suites: .* \(every result: (\S+)\)$", stdout, re.M)
    assert found, stdout[-3000:]
    return record_files.read(Path(found.group(1)))


@pytest.mark.slow
def test_partly_red_backend_from_init_and_its_baseline_to_a_planted_regression(tmp_path):
    repo = partly_red.assemble(tmp_path / "partreg")
    out = tmp_path / "runs"

    # ootci init claims what the device supports at all, and says what the smoke suite will skip.
    init = ootci("init", str(repo), "--torch", "2.13.0", *SUITES, env=ENV)
    # Red for what no baseline holds, the circular import, and said by init rather than by the first nightly.
    assert init.returncode == 1, init.stdout[-3000:] + init.stderr[-3000:]
    assert ("the first run failed where a baseline of tests cannot help; `ootci run` stays red until this is "
            "fixed:\n  autoload failed: ") in init.stderr
    assert "partially initialized module 'torch_partreg'" in init.stderr
    assert "--suites smoke,integration      # red until what is said above is fixed" in init.stdout
    assert ("test_device_api.py::test_synchronize: capability 'synchronize' not claimed "
            "(torch.partreg has no synchronize())") in init.stdout
    path = repo / "ci" / "backend.toml"
    m = manifest.load(path)
    # int64 too: the device holds it, and its abs failures are known failures, not a reason to test less.
    assert {"float32", "float64", "int64", "bool"} <= set(m.dtypes)
    assert "synchronize" not in {c.value for c in m.capabilities}
    assert [v.name for v in m.suites.vendor] == ["tests"]
    # A fork of a process that imported torch uses the device: a crash will cost a fork.
    assert m.suites.crash_isolation == "fork"
    assert ("# probed: a child forked after `import torch` uses the device\ncrash_isolation = \"fork\""
            in path.read_text())

    # init ran the suites once, through the stages `ootci run` uses, and every failure kept its root cause.
    first_look = init_record(init.stdout)
    tests = by_id(first_look)
    for crash in RFFT_CRASHES:
        assert tests[crash].outcome is Outcome.crashed, tests[crash]
        assert tests[crash].message.startswith("crashed: the test process was killed by SIGSEGV at "
                                               "test_opinfo.py:"), tests[crash].message
        assert tests[crash].attempts <= 2  # a crash is re-run at most once
    assert "only implemented for floating dtypes, got torch.int64" in tests[ABS_INT64].message
    assert tests["test_opinfo.py::test_compare_cpu[abs-float32]"].outcome is Outcome.passed
    assert tests["test_opinfo.py::test_compare_cpu[trunc-float64]"].outcome is Outcome.passed
    missing = tests[MEMORY_STATS]
    assert missing.suite == "tests" and missing.outcome is Outcome.failed and missing.attempts == 2
    assert "No module named 'psutil'" in missing.message
    assert "`requirements` of [[suites.vendor]] 'tests'" in missing.message
    assert tests["tests/test_partreg.py::test_tensor_lands_on_partreg"].outcome is Outcome.passed
    integration = first_look.stage("integration")
    failing = [t for t in first_look.tests if t.suite == "integration" and t.outcome in NOT_PASSING]
    retries = integration.data["suites"]["integration"]["retries"]
    # Each re-run was judged deterministic: the same error twice, or a crash. The retries' budget is a
    # share of the first attempt's time, so how many fit in it depends on the machine's load: the rest
    # are counted as left out, never lost.
    assert retries["rerun"] == retries["deterministic"] > 0
    assert retries["rerun"] + retries["left_out_by_budget"] == len(failing), retries

    # Its failures are the baseline: every one, and only those.
    baseline = tomllib.loads((repo / "ci" / "known-failures.toml").read_text())
    assert {(suite, test_id) for suite, entries in baseline.items() for test_id in entries} == {
        (t.suite, t.id) for t in first_look.tests if t.outcome in NOT_PASSING}
    assert set(RFFT_CRASHES) | {ABS_INT64} <= set(baseline["integration"]) and set(baseline["tests"]) == {MEMORY_STATS}
    assert "test_tensors.py::test_in_place[int64]" in baseline["smoke"]
    assert re.search(r"^    dtype int64 +\d+  smoke test_in_place, .*\babs\b", init.stdout, re.M), init.stdout[-3000:]
    known = sum(len(entries) for entries in baseline.values())
    # ... and by cause: the crashing FFTs are one, whichever dtype; each entry keeps its cause.
    assert re.search(r"^ +\d+  SIGSEGV in `fft`  \(e\.g\. integration::test_opinfo\.py::test_compare_cpu\[fft\.rfft-",
                     init.stdout, re.M), init.stdout[-3000:]
    assert {baseline["integration"][crash]["cause"] for crash in RFFT_CRASHES} == {"SIGSEGV in `fft`"}
    integration_causes = {c.text: c for c in first_look.stage("integration").causes}
    assert integration_causes["SIGSEGV in `fft`"].count == len([t for t in failing if t.outcome is Outcome.crashed])

    # init's run verified autoload as `ootci run` does, and every suite still ran: a failure hides nothing.
    status = {s.name: s.status for s in first_look.stages[3:]}
    assert status == {"autoload": Status.failed, "smoke": Status.failed, "integration": Status.failed}, status
    autoload = first_look.stage("autoload")
    assert "partially initialized module 'torch_partreg'" in autoload.root_cause.summary
    assert autoload.root_cause.hint.endswith("torch_partreg/__init__.py:8 imports torch first)")
    smoke = first_look.stage("smoke")
    assert first_look.stage("integration").data["ran_despite"] == [f"autoload: {autoload.root_cause.summary}",
                                                                   f"smoke: {smoke.root_cause.summary}"]

    # The vendor follows the hints: the hook before `import torch`, psutil declared.
    partly_red.fix_circular_import(repo)
    path.write_text(path.read_text().replace('path = "tests"', 'path = "tests"\nrequirements = ["psutil"]'))

    # Green: only known failures fail; the one psutil fixed is reported fixed.
    second = ootci("run", "ci/backend.toml", "--torch", "2.13.0", "--out", str(out / "second"), cwd=repo, env=ENV)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    record = only_record(out / "second")
    assert record.status is Status.passed and record.stage("autoload").status is Status.passed
    tests = by_id(record)
    # Every result of init's run is reported again, each known failure as expected.
    assert set(tests) == set(by_id(first_look))
    for crash in RFFT_CRASHES:
        assert tests[crash].outcome is Outcome.xfailed, tests[crash]
        assert "it crashed: crashed: the test process was killed by SIGSEGV at test_opinfo.py:" in tests[crash].message
    assert tests[ABS_INT64].outcome is Outcome.xfailed
    assert tests[MEMORY_STATS].outcome is Outcome.fixed
    assert [t.id for t in record.tests if t.outcome in NOT_PASSING] == []
    assert f"{known - 1} known failures failed as expected; 1 fixed" in second.stderr, second.stderr[-2000:]

    # A planted regression: trunc is now wrong in float64. Red, naming that test alone.
    faults = repo / "torch_partreg" / "_faults.py"
    faults.write_text(faults.read_text().replace('_names("PARTREG_WRONG", "")', '_names("PARTREG_WRONG", "trunc")'))
    third = ootci("run", "ci/backend.toml", "--torch", "2.13.0", "--suites", "integration", "--out", str(out / "third"),
                  cwd=repo, env=ENV)
    assert third.returncode == 1
    record = only_record(out / "third")
    new = [t.id for t in record.tests if t.outcome in NOT_PASSING]
    assert new == ["test_opinfo.py::test_compare_cpu[trunc-float64]"], new
    assert record.stage("integration").root_cause.culprit == new[0]
    # By cause: the one new cause is the line the terminal reads, and the known ones stayed known
    # (each failed with the cause its baseline entry lists, so none was re-run as new).
    causes = record.stage("integration").causes
    assert [(c.novelty, c.count) for c in causes if c.novelty != "known"] == [("new", 1)]
    assert f"1 new failures in 1 cause: 1 `{causes[0].text}` (trunc; float64)" in third.stderr, third.stderr[-2000:]
    assert "SIGSEGV in `fft`" in {c.text for c in causes if c.novelty == "known"}
