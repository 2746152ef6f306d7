"""The CPU report (tests/support/cpu_report.py): its sums, and its yardstick measured for real."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import cpu_report


def write_report(path, *lines: dict) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_report_counts_the_whole_in_imports_of_torch_beside_the_budget(tmp_path, capsys):
    report = tmp_path / "cpu.jsonl"
    write_report(report,
                 {"test": "tests/a.py::test_one", "cpu_s": 30.0, "children_s": 29.0, "wall_s": 20.0},
                 {"test": "tests/a.py::test_two", "cpu_s": 10.0, "children_s": 9.0, "wall_s": 8.0},
                 {"test": "tests/b.py::test_three", "cpu_s": 8.0, "children_s": 0.0, "wall_s": 9.0},
                 {"yardstick": "import torch", "python": "/layer/bin/python", "cpu_s": 1.6},
                 {"yardstick": "import torch", "python": "/layer/bin/python", "cpu_s": 1.2})
    assert cpu_report.main([str(report)]) == 0
    out = capsys.readouterr().out.splitlines()
    # The yardstick lines are not tests; the least of them is the unit (48 / 1.2 = 40, 2400 / 1.2 = 2000).
    assert out[0] == "3 tests, 48 s of CPU"
    assert out[1] == "  = 40 imports of torch at 1.20 s of CPU each; the budget (2400 s) is 2000 of them"
    assert out[2:4] == ["    40.0  tests/a.py", "     8.0  tests/b.py"]


def test_a_report_without_a_yardstick_says_only_seconds(tmp_path, capsys):
    report = tmp_path / "cpu.jsonl"
    write_report(report, {"test": "tests/a.py::test_one", "cpu_s": 3.0, "children_s": 0.0, "wall_s": 3.0})
    cpu_report.main([str(report)])
    assert "imports of torch" not in capsys.readouterr().out


@pytest.mark.slow
def test_the_yardstick_is_the_cpu_of_a_real_import_of_torch(torch_layer):
    once = cpu_report.import_torch_cpu(torch_layer.python, runs=1)
    # At least what the interpreter's start costs, and nowhere near a stuck import's limit.
    assert 0.05 < once < 60, once
    assert cpu_report.layer_python() == torch_layer.python


def test_an_interpreter_that_cannot_import_torch_is_no_yardstick():
    # The orchestrator's interpreter: it never has torch (the two environments never mix).
    with pytest.raises(subprocess.CalledProcessError) as raised:
        cpu_report.import_torch_cpu(sys.executable, runs=1)
    assert "No module named 'torch'" in raised.value.stderr
