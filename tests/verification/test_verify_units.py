"""The pieces of the verification that need no environment: root causes from probe output, packaging."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ootci.runner.core import rootcause
from ootci.runner.models import Status
from ootci.runner.verification.verify import CHECK_ORDER, PROBES, Target, _Verifier

REPO = Path(__file__).resolve().parents[2]


def test_innermost_exception_of_a_chain_wins_and_names_the_wrapped_entry_point():
    chain = [
        {"type": "RuntimeError", "message": "Failed to load the backend extension: torch_npu. You can disable "
                                            "extension auto-loading with TORCH_DEVICE_BACKEND_AUTOLOAD=0.",
         "frames": ["/x/torch/__init__.py:3034 in _import_device_backends"]},
        {"type": "ImportError", "message": "libhccl.so: cannot open shared object file: No such file or directory",
         "frames": ["/site/torch_npu/npu/utils.py:8 in <module>"]},
    ]
    cause = rootcause.from_chain(chain, what="import torch")
    assert cause.kind == "exception"
    assert cause.summary == "ImportError: libhccl.so: cannot open shared object file: No such file or directory"
    assert cause.culprit == "torch_npu"
    assert cause.hint == "a shared library is missing: the vendor runtime is not installed on this machine"


def test_an_exception_without_a_message_says_where_it_was_raised():
    """`StopIteration:` alone, as a vendor saw it, names nothing: the frame does."""
    chain = [{"type": "StopIteration", "message": "",
              "frames": ["/x/torch/__init__.py:3034 in _import_device_backends",
                         "/src/torch_foo/__init__.py:12 in _autoload"]}]
    cause = rootcause.from_chain(chain, what="import torch")
    assert cause.summary == "StopIteration (no message) raised at /src/torch_foo/__init__.py:12 in _autoload"
    assert rootcause.from_chain([{"type": "StopIteration", "message": ""}]).summary == "StopIteration (no message)"


def test_system_exit_is_an_exit_code_with_where():
    chain = [{"type": "SystemExit", "message": "3", "exit_code": 3,
              "frames": ["<frozen importlib._bootstrap>:241 in _call_with_frames_removed",
                         "/site/torch_exits/__init__.py:3 in <module>"]}]
    cause = rootcause.from_chain(chain, what="import torch")
    assert (cause.kind, cause.exit_code) == ("exit_code", 3)
    assert cause.summary == ("the interpreter exited with code 3 during import torch (sys.exit) at "
                             "/site/torch_exits/__init__.py:3 in <module>")
    assert cause.hint.startswith("the backend calls sys.exit()")


FAULT_DUMP = """\
Fatal Python error: Aborted

Current thread 0x00007f0a (most recent call first):
  File "/site/torch_aborts/__init__.py", line 5 in _autoload
  File "/site/torch/__init__.py", line 3030 in _import_device_backends
  File "/site/torch/__init__.py", line 3077 in <module>
  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed
"""


def test_stack_dump_says_where_a_process_died():
    assert rootcause.stack_frames(FAULT_DUMP) == [[
        "/site/torch_aborts/__init__.py:5 in _autoload",
        "/site/torch/__init__.py:3030 in _import_device_backends",
        "/site/torch/__init__.py:3077 in <module>",
        "<frozen importlib._bootstrap>:241 in _call_with_frames_removed",
    ]]
    assert rootcause.where_stuck(FAULT_DUMP) == "/site/torch_aborts/__init__.py:5 in _autoload"
    # A frame inside a backend's own package is preferred to torch's.
    assert (rootcause.where_stuck(FAULT_DUMP, ["/site/torch/"])
            == "/site/torch/__init__.py:3030 in _import_device_backends")
    assert rootcause.where_stuck("no dump here") is None


@pytest.mark.parametrize("text, hint", [
    ("RuntimeError: PyTorch is not linked with support for foo devices", "no tensor support"),
    ("RuntimeError: Expected one of cpu, cuda device type at start of device string: bar",
     "the device name is not registered"),
    ("torch_noep declares no entry point in group torch.backends", "declare `<name> = <module>:<function>`"),
])
def test_hints_for_autoload_failures(text, hint):
    assert rootcause.hint_for(text).startswith(hint)


def test_probes_never_import_the_runner_package():
    scripts = sorted(PROBES.glob("*.py"))
    assert {p.name for p in scripts} >= {"entry_points.py", "autoload_on.py", "autoload_off.py", "imports.py",
                                         "_probe.py"}
    for script in scripts:
        text = script.read_text()
        imported = set(re.findall(r"^\s*(?:from|import) ([\w.]+)", text, re.M))
        assert not {m for m in imported if m.split(".")[0] in {"ootci", "runner", "dashboard", "pydantic"}}, script


def test_entry_points_probe_runs_without_torch(tmp_path):
    # The orchestrator's interpreter has no torch: the probe still answers, saying so.
    out = subprocess.run([sys.executable, "-X", "utf8", str(PROBES / "entry_points.py")], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, OOTCI_PROBE_NONCE="n1"))
    line = next(text for text in out.stdout.splitlines() if text.startswith("@@OOTCI-PROBE:n1@@ "))
    assert '"torch_found": false' in line and '"phase": "entry_points"' in line


@pytest.mark.slow
def test_tensor_round_trip_covers_complex_float8_and_wide_unsigned_dtypes(torch_layer):
    # The host tensor of a complex dtype cannot come from arange (no complex kernel), nor one of uint64; float8,
    # complex32 and uint64 have no `equal` on the CPU: they are compared in a wider dtype.
    dtypes = ("complex64", "complex128", "complex32", "float8_e4m3fn", "uint64", "float16", "bool")
    code = ("import json, autoload_on; "
            f"print(json.dumps(autoload_on.round_trip('cpu', {list(dtypes)!r})))")
    out = subprocess.run([str(torch_layer.python), "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=PROBES, env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout.splitlines()[-1])
    assert results == {d: {"device_type": "cpu", "equal": True, "literal_ok": True} for d in dtypes}


def test_import_cost_runs_come_from_the_environment_and_a_bad_value_is_one_line(monkeypatch, tmp_path):
    from ootci.runner.verification.verify import DEFAULT_RUNS, RUNS_VARIABLE, import_cost_runs
    from tests.support.cli import ootci

    monkeypatch.delenv(RUNS_VARIABLE, raising=False)
    assert import_cost_runs() == DEFAULT_RUNS == 5
    monkeypatch.setenv(RUNS_VARIABLE, "2")
    assert import_cost_runs() == 2
    # Refused before anything runs or is written, by run, bisect and verify alike.
    for argv in (["run", "openreg", "--torch", "2.13.0", "--out", str(tmp_path / "out")],
                 ["bisect", "openreg", "--good", "2.13.0", "--bad", "2.14.0", "--out", str(tmp_path / "b")],
                 ["verify", "--python", sys.executable]):
        result = ootci(*argv, env={RUNS_VARIABLE: "0"})
        assert result.returncode == 2, (argv, result.stderr)
        assert result.stderr.strip() == (f"ootci: {RUNS_VARIABLE}='0': must be a whole number of at least 1 "
                                         "(timed imports for the import cost; default 5)"), result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "b").exists()


def test_blocking_only_skips_every_other_check_of_check_order_once_per_backend():
    """The skipped checks come from CHECK_ORDER, not from a list of their own: a check added there
    is skipped by name too, and one made per backend is named for each entry point."""
    targets = [Target(ep_name=name, module=name, attr="autoload", import_name=name, device=name.removeprefix("torch_"),
                      dtypes=[], tensors_required=False) for name in ("torch_a", "torch_b")]
    verifier = _Verifier(None, {"entry_points": []}, targets, runs=1, jobs=1, blocking_only=True)
    left_out = verifier._not_blocking()
    assert [c.name for c in left_out] == ["opt_out:torch_a", "opt_out:torch_b", "circular_import:torch_a",
                                          "circular_import:torch_b", "neighbours", "import_cost"]
    assert all(c.status is Status.skipped and c.detail.startswith("not run: ") for c in left_out)
    bases = {c.name.split(":", 1)[0] for c in left_out}
    assert bases | {"entry_point", "plain_import", "build_torch", "device", "tensor"} == set(CHECK_ORDER)
