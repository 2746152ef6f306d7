"""The bench stage: OpenReg timed on its device and on CPU, each measurement with its statistics
and ratio; a crash names the measurement it happened in; switched off, it leaves no trace in the
record (tests/onboarding/test_init.py checks a first run's stages are exactly those of its suites, no bench)."""

from __future__ import annotations

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
    from ootci.runner.commands.run import options_from
    from ootci.runner.cli import build_parser

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
    assert bad.returncode == 2 and "--suites: unknown suite 'benchmark' (known: smoke, integration, upstream, bench)" in bad.stderr


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


@pytest.mark.slow
def test_openreg_bench_records_every_measurement_with_its_statistics_and_ratio(tmp_path):
    out = tmp_path / "runs"
    result = ootci("run", "openreg", "--torch", "2.13.0", "--suites", "bench", "--out", str(out), timeout=1800)
    record = only_record(out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert [(s.name, s.status) for s in record.stages] == [
        ("torch", Status.passed), ("build", Status.passed), ("install", Status.passed), ("autoload", Status.passed),
        ("smoke", Status.skipped), ("integration", Status.skipped), ("bench", Status.passed)]
    assert record.command.endswith("--torch 2.13.0+cpu --index-url https://download.pytorch.org/whl/cpu --suites bench") \
        or record.command.endswith("--suites bench"), record.command
    stage = record.stage("bench")
    assert stage.data["synchronized"] is True
    measurements = stage.data["measurements"]
    assert set(measurements) == EVERY_MEASUREMENT
    for name, m in measurements.items():
        for side in ("device", "cpu"):
            assert m[side]["median"] > 0 and m[side]["iqr"] >= 0, (name, m)
            assert m[side]["runs"] >= bench.ROUNDS, (name, m)  # at least one timed block per round
        # The ratio is the median of the rounds' own device/CPU ratios, one per round.
        rounds = m["round_ratios"]
        assert len(rounds) == bench.ROUNDS and rounds == sorted(rounds) and m["ratio"] == rounds[len(rounds) // 2]
    assert "measurements, device/CPU ratio" in stage.summary
    # The current dashboard reads a record with the stage.
    site = ootci("dashboard", "build", "--data", str(out), "--out", str(tmp_path / "site"))
    assert site.returncode == 0, site.stderr
    assert (tmp_path / "site" / "backends" / "openreg.html").is_file()
