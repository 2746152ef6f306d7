"""The bench stage: OpenReg's host instructions counted and its time taken on its device and on CPU,
each measurement with its statistics and ratios; without a counter the stage is time only and
says why; a crash names the measurement it happened in; switched off, it leaves no trace in the
record (tests/onboarding/test_init.py checks a first run's stages are exactly those of its suites, no bench)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ootci.runner.manifests import registry
from ootci.runner.models import Status, TorchInfo, reproduce_command
from ootci.runner.stages import bench
from ootci.runner.stages.base import RunOptions
from ootci.runner.stages.pipeline import wanted
from ootci.runner.verification.verify import Runner
from tests.support.cli import ootci
from tests.support.records import only_record

EVERY_MEASUREMENT = {
    "synchronize", "add_tiny", "empty", "view", "copy_to_device", "copy_to_cpu",
    "add_large", "matmul", "sum", "conv2d",
    *(f"{step}:{model}" for step in ("train_step", "inference") for model in ("mlp", "cnn", "transformer_block")),
}


def openreg(**suites):
    manifest = registry.resolve("openreg")
    return manifest.model_copy(update={"suites": manifest.suites.model_copy(update=suites)})


@pytest.mark.parametrize("in_manifest, from_suites, runs", [
    (False, None, False),  # the default: off
    (True, None, True),  # turned on by the manifest
    (False, True, True),  # --suites bench
    (True, False, False),  # --suites none
])
def test_the_stage_runs_where_the_manifest_or_suites_say(in_manifest, from_suites, runs):
    assert wanted("bench", openreg(bench=in_manifest), RunOptions(bench=from_suites)) is runs
    assert wanted("smoke", openreg(bench=in_manifest), RunOptions(bench=from_suites))  # not optional


def test_the_reproduce_command_names_bench_only_when_suites_did():
    torch = TorchInfo(spec="2.13.0", version="2.13.0")
    assert reproduce_command("openreg", torch) == "ootci run openreg --torch 2.13.0"
    assert reproduce_command("openreg", torch, bench=True) == \
        "ootci run openreg --torch 2.13.0 --suites smoke,integration,upstream,bench"
    assert reproduce_command("openreg", torch, ("smoke",)) == "ootci run openreg --torch 2.13.0 --suites smoke"
    assert reproduce_command("openreg", torch, (), bench=False) == "ootci run openreg --torch 2.13.0 --suites none"
    assert reproduce_command("openreg", torch, (), bench=True) == "ootci run openreg --torch 2.13.0 --suites bench"
    assert reproduce_command("openreg", torch, (), bench=True, bench_only=("add_tiny", "empty")) == \
        "ootci run openreg --torch 2.13.0 --suites bench --bench-only add_tiny,empty"


def test_bench_only_names_the_measurements_the_probe_times(tmp_path):
    """--bench-only reaches the probe as --only; without the bench stage it is refused in one line."""
    from ootci.runner.cli import build_parser
    from ootci.runner.commands.run import options_from

    def options(*args: str) -> RunOptions:
        return options_from(build_parser().parse_args(["run", "openreg", "--torch", "2.13.0", "--out", str(tmp_path),
                                                       *args]))

    chosen = options("--suites", "bench", "--bench-only", "add_tiny, empty")
    assert (chosen.bench, chosen.bench_only) == (True, ("add_tiny", "empty"))
    assert bench.probe_args(openreg(bench=False), chosen.bench_only)[-2:] == ["--only", "add_tiny,empty"]
    assert options("--suites", "bench").bench_only == ()
    refused = ootci("run", "openreg", "--torch", "2.13.0", "--suites", "none", "--bench-only", "add_tiny",
                    "--dry-run", "--out", str(tmp_path))
    assert refused.returncode == 2 and "--bench-only: names the measurements of the bench stage" in refused.stderr
    empty = ootci("run", "openreg", "--torch", "2.13.0", "--suites", "bench", "--bench-only", ",", "--dry-run",
                  "--out", str(tmp_path))
    assert empty.returncode == 2 and "--bench-only: no measurement named" in empty.stderr


def test_dry_run_says_bench_is_off_and_how_to_turn_it_on(tmp_path):
    off = ootci("run", "openreg", "--torch", "2.13.0", "--dry-run", "--out", str(tmp_path))
    assert off.returncode == 0, off.stderr
    assert "bench        off ([suites] bench = true in the manifest, or --suites bench)" in off.stdout
    on = ootci("run", "openreg", "--torch", "2.13.0", "--dry-run", "--suites", "smoke,bench", "--out", str(tmp_path))
    assert "  bench        run" in on.stdout and "integration  skip: not selected (--suites)" in on.stdout
    for suites in ("smoke,integration", "none"):  # as the workflows pass it; and nothing at all
        default = ootci("run", "openreg", "--torch", "2.13.0", "--dry-run", "--suites", suites, "--out", str(tmp_path))
        assert "  bench        off (" in default.stdout
    bad = ootci("run", "openreg", "--torch", "2.13.0", "--dry-run", "--suites", "benchmark", "--out", str(tmp_path))
    assert bad.returncode == 2
    assert "--suites: unknown suite 'benchmark' (known: smoke, integration, upstream, bench)" in bad.stderr


def probe_with(torch_layer, tmp_path: Path, monkeypatch, sitecustomize: str, *args: str):
    """The bench probe on the CPU device of the 2.13.0 layer, with a sitecustomize breaking something."""
    site = tmp_path / "site"
    site.mkdir(parents=True)
    (site / "sitecustomize.py").write_text(sitecustomize)
    monkeypatch.setenv("PYTHONPATH", str(site))
    runner = Runner(torch_layer.python, timeout=180, log=tmp_path / "bench.log")
    return runner.probe("bench.py", "--device", "cpu", "--rounds", "1", "--min-run-time", "0.01", *args)


CRASH_IN_SUM = """
import os, torch
torch.Tensor.sum = lambda self, *args, **kwargs: os.abort()
"""


def test_a_crash_names_its_measurement_and_keeps_the_ones_before_it(torch_layer, tmp_path, monkeypatch):
    probe = probe_with(torch_layer, tmp_path, monkeypatch, CRASH_IN_SUM, "--only", "add_tiny,matmul,sum,conv2d")
    result = bench.result_of(probe)
    assert result.status is Status.crashed, result.summary
    assert "SIGABRT" in result.summary and "in measurement 'sum'" in result.summary, result.summary
    assert "(2 measured before it)" in result.summary
    assert set(result.data["measurements"]) == {"add_tiny", "matmul"}  # conv2d came after the crash


NO_SYNCHRONIZE = """
import torch
del torch.cpu.synchronize
"""


def test_a_device_that_cannot_synchronize_fails_that_measurement_only(torch_layer, tmp_path, monkeypatch):
    probe = probe_with(torch_layer, tmp_path, monkeypatch, NO_SYNCHRONIZE, "--only", "synchronize,add_tiny")
    result = bench.result_of(probe)
    assert result.status is Status.failed
    assert result.summary == ("1 of 2 measurements failed: synchronize: Unsupported: torch.cpu has no synchronize(): "
                              "nothing waits for the device")
    assert result.data["synchronized"] is False and set(result.data["measurements"]) == {"add_tiny"}


NO_MODELS = """
import copy


def refuse(*args, **kwargs):
    raise RuntimeError("the models were set up")


copy.deepcopy = refuse
"""


def test_only_sets_up_the_models_when_it_names_one(torch_layer, tmp_path, monkeypatch):
    """A bisection step times one measurement: the models (a second or more to build) are set up
    only when --only names a model step; without --only, always."""
    per_call = probe_with(torch_layer, tmp_path / "a", monkeypatch, NO_MODELS, "--only", "add_tiny")
    assert "setup:models" not in per_call.phases and bench.result_of(per_call).status is Status.passed
    model = probe_with(torch_layer, tmp_path / "b", monkeypatch, NO_MODELS, "--only", "add_tiny,inference:mlp")
    assert "the models were set up" in bench.first_message(model.phases["setup:models"])
    assert set(bench.result_of(model).data["measurements"]) == {"add_tiny"}


def test_every_measurement_is_timed_on_both_sides_with_its_spread(torch_layer, tmp_path, monkeypatch):
    """The CPU device of the 2.13.0 layer, briefly: each measurement's two sides, their relative
    standard deviation, the rounds' ratios, how the device was timed (the CPU has no timing events:
    wall time) and whether it was too noisy to judge."""
    probe = probe_with(torch_layer, tmp_path, monkeypatch, "", "--events")
    result = bench.result_of(probe)
    assert result.status is Status.passed, result.summary
    assert result.data["timing"] == "wall" and "events_unusable" in result.data
    measurements = result.data["measurements"]
    assert set(measurements) == EVERY_MEASUREMENT
    for name, m in measurements.items():
        for side in ("device", "cpu"):
            assert m[side]["median"] > 0 and m[side]["iqr"] >= 0 and m[side]["rsd"] >= 0, (name, m)
            assert m[side]["runs"] >= 3 and m[side]["per_run"] >= 1, (name, m)
        assert m["round_ratios"] == [m["ratio"]] and m["timing"] == "wall"
        assert m["noisy"] is (m["device"]["rsd"] > 0.05)
    assert result.data["counter"] is None and "counts" not in measurements["add_tiny"]


def cpu_manifest(**suites):
    """A manifest for the CPU device of the torch layer itself (no backend package to import)."""
    manifest = openreg(**suites)
    return manifest.model_copy(update={"device": "cpu", "import_name": "", "capabilities": []})


def test_without_valgrind_the_stage_is_time_only_and_says_why_in_one_line(torch_layer, tmp_path, monkeypatch):
    """This machine has no hardware counter (perf_event_open is refused here), so without Valgrind
    nothing can count: an image without a counter gets a passed, time-only stage whose summary says
    why, in one line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))  # nothing on it: no valgrind
    missing = "valgrind is not on PATH (install it for instruction counts: apt-get install valgrind)"
    assert bench.callgrind_tools() == missing
    valgrind = shutil.which("valgrind", path="/usr/bin:/usr/local/bin")
    if valgrind is not None:  # valgrind alone, without its callgrind_control
        (bin_dir / "valgrind").symlink_to(valgrind)
        assert bench.callgrind_tools() == \
            f"callgrind_control is not on PATH beside {bin_dir / 'valgrind'} (it comes with valgrind)"
        (bin_dir / "valgrind").unlink()
    result = bench.measure(torch_layer.python, cpu_manifest(), ("add_tiny",), log=tmp_path / "bench.log")
    assert result.status is Status.passed, result.summary
    note = result.data["counter_note"]
    assert note.startswith("time only: no hardware instruction counter") and "\n" not in note
    assert note.endswith(f"; {missing}")
    assert result.data["counter"] is None and "counts" not in result.data["measurements"]["add_tiny"]
    assert result.summary.endswith(note) and "1 measurements; time by synchronised wall time" in result.summary
    assert (tmp_path / "bench.log").read_text().count("bench.py --device cpu") == 1  # no counting process


CONTROL_REFUSES = "#!/bin/sh\necho 'Error: Callgrind task with PID '$2' not detected' >&2\nexit 3\n"


def test_a_counter_that_cannot_count_leaves_a_time_only_stage(torch_layer, tmp_path, monkeypatch):
    """The counting process when Callgrind cannot start counting (its control cannot reach the
    process, as where Valgrind's gdbserver is unreachable): no counts, a passed stage, and the reason."""
    control = tmp_path / "callgrind_control"
    control.write_text(CONTROL_REFUSES)
    control.chmod(0o755)
    timed = probe_with(torch_layer, tmp_path / "timed", monkeypatch, "", "--only", "add_tiny")
    counted = probe_with(torch_layer, tmp_path / "counted", monkeypatch, "", "--only", "add_tiny", "--no-time",
                         "--counter", "callgrind", "--callgrind-out", str(tmp_path / "callgrind.out"),
                         "--callgrind-control", str(control))
    result = bench.result_of(timed, counted)
    assert result.status is Status.passed, result.summary
    assert result.data["counter"] is None and "counts" not in result.data["measurements"]["add_tiny"]
    assert result.data["counter_note"].startswith(
        "time only: Callgrind could not count: CounterUnavailable: callgrind_control could not start "
        "instrumentation (exit 3): Error: Callgrind task with PID"), result.data["counter_note"]


@pytest.mark.slow
def test_openreg_bench_counts_and_times_each_measurement_on_both_sides(tmp_path):
    """OpenReg as a nightly measures it, on one measurement of each group: the timing process (its
    device by OpenReg's timing events) and one Callgrind process that counts every measurement."""
    out = tmp_path / "runs"
    picked = ("synchronize", "add_tiny", "matmul", "train_step:mlp")
    result = ootci("run", "openreg", "--torch", "2.13.0", "--suites", "bench", "--bench-only", ",".join(picked),
                   "--out", str(out), timeout=1800)
    record = only_record(out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert [(s.name, s.status) for s in record.stages] == [
        ("torch", Status.passed), ("build", Status.passed), ("install", Status.passed), ("autoload", Status.passed),
        ("smoke", Status.skipped), ("integration", Status.skipped), ("upstream", Status.skipped),
        ("bench", Status.passed)]
    assert record.command.endswith(f"--suites bench --bench-only {','.join(picked)}"), record.command
    stage = record.stage("bench")
    data = stage.data
    assert (data["synchronized"], data["timing"], data["time_gated"], data["counter"]) == \
        (True, "events", False, "callgrind"), {k: v for k, v in data.items() if k != "measurements"}
    assert "counter_note" not in data and set(data["measurements"]) == set(picked)
    for name, m in data["measurements"].items():
        for side in ("device", "cpu"):
            assert m[side]["median"] > 0 and m[side]["iqr"] >= 0 and m[side]["rsd"] >= 0, (name, m)
            counted = m["counts"][side]
            assert len(counted["repeats"]) == bench.COUNT_REPEATS and counted["number"] >= 1, (name, m)
            assert counted["per_call"] == sorted(counted["repeats"])[bench.COUNT_REPEATS // 2] > 0, (name, m)
        rounds = m["round_ratios"]
        assert len(rounds) == bench.ROUNDS and rounds == sorted(rounds) and m["ratio"] == rounds[len(rounds) // 2]
        assert m["counts"]["ratio"] == m["counts"]["device"]["per_call"] / m["counts"]["cpu"]["per_call"]
        assert m["timing"] == ("wall" if name == "synchronize" else "events") and isinstance(m["noisy"], bool)
    # An add on OpenReg goes through its boxed fallback: more host instructions than the CPU's own add.
    assert data["measurements"]["add_tiny"]["counts"]["ratio"] > 1.2
    assert "instructions by callgrind" in stage.summary and "time by device events (shown, not gated" in stage.summary
    # One Valgrind process, instrumented only while counting.
    log = (out / record.run_id / "logs" / "bench.log").read_text()
    assert log.count("valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no") == 1
    # The current dashboard reads a record with the stage.
    site = ootci("dashboard", "build", "--data", str(out), "--out", str(tmp_path / "site"))
    assert site.returncode == 0, site.stderr
    page = (tmp_path / "site" / "backends" / "openreg.html").read_text()
    assert 'id="perf-add_tiny-count"' in page and 'id="perf-add_tiny-time"' in page
