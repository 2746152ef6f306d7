"""Realistic synthetic RunRecords: for tests, demos and the scale benchmark.

Histories are deterministic (seeded) and exercise what the dashboard has to show:
green runs that turn red when an upstream torch commit lands, a broken import that
blocks every later stage, flaky tests that pass on retry or flip between nights,
expected failures, OpInfo results per op and dtype, and PR runs.

Two writers: `write_history()` builds real `RunRecord` models and writes them with
pydantic (small data, used by tests), `write_fast()` writes the same JSON shape by
string templating (100 backends x 365 nights x 2,000 tests for `bench/`).
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.models import (
    SUITES,
    Outcome,
    RootCause,
    RunRecord,
    StageResult,
    Status,
    TestResult,
    TorchInfo,
    overall_status,
)
from ootci.runner.records import packed_tests, record_files

STAGES = ("torch", "build", "install", "autoload", "smoke", "integration")
OPS = ("add", "sub", "mul", "div", "matmul", "softmax", "relu", "sum", "mean", "max",
       "cat", "index_select", "conv2d", "layer_norm", "gelu", "exp", "log", "sqrt",
       "topk", "sort", "where", "clamp", "abs", "neg")
DTYPES = ("float32", "float16", "bfloat16", "int64")
EPOCH = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.UTC)


def torch_commit(day: int) -> str:
    """The upstream nightly commit of a given day: stable, 40 hex digits."""
    return hashlib.sha1(f"pytorch-nightly-{day}".encode()).hexdigest()


def pr_head(pr: int, push: int = 0) -> str:
    """The head commit of a PR after its push-th push: stable, 40 hex digits."""
    return hashlib.sha1(f"pytorch-pr-{pr}-push-{push}".encode()).hexdigest()


def torch_version(day: int) -> str:
    date = (EPOCH + dt.timedelta(days=day)).strftime("%Y%m%d")
    return f"2.13.0.dev{date}+cpu"


@dataclass
class Scenario:
    """How one synthetic backend behaves over its history."""

    name: str
    device: str
    red_from: int | None = None  # first night of an upstream regression
    red_stage: str = "smoke"  # the stage that breaks then
    fixed_from: int | None = None  # first night it is green again
    flaky: tuple[str, ...] = ()  # test ids that fail now and then
    xfail: tuple[str, ...] = ()
    broken_tests: tuple[str, ...] = ()  # tests that fail while red_stage is smoke/integration
    ops: tuple[str, ...] = OPS
    dtypes: tuple[str, ...] = DTYPES
    extra_messages: dict[str, str] = field(default_factory=dict)
    bench: bool = False  # a bench stage every night (runner/stages/bench.py)
    slower_from: int | None = None  # first night of a 25 % slowdown of BENCH_MEASUREMENTS[0]


BENCH_MEASUREMENTS = (
    "add_tiny", "empty", "view", "copy_to_device", "copy_to_cpu", "synchronize", "add_large", "matmul", "sum",
    "conv2d", "train_step:mlp", "train_step:cnn", "train_step:transformer_block", "inference:mlp", "inference:cnn",
    "inference:transformer_block")
"""the 16 measurements OpenReg's bench stage records"""


def bench_stage(slower: bool, rng: random.Random) -> StageResult:
    """A bench stage's record: each measurement's instructions per call on both sides (a few hundredths
    of a per cent of noise) and its device time (a few per cent), gated; slower: the first
    measurement 25 % slower in both."""
    measurements = {}
    for k, name in enumerate(BENCH_MEASUREMENTS):
        factor = 1.25 if k == 0 and slower else 1.0
        cpu = 10_000.0 * (k + 1)
        device = cpu * (1 + k / 4) * factor * (1 + rng.gauss(0, 0.0003))
        seconds = 1e-4 * (1 + k / 4) * factor * (1 + rng.gauss(0, 0.03))
        measurements[name] = {"counts": {"device": {"per_call": round(device, 1)}, "cpu": {"per_call": cpu},
                                         "ratio": round(device / cpu, 6)},
                              "ratio": round(seconds / 1e-4, 4), "round_ratios": [round(seconds / 1e-4, 4)] * 5,
                              "device": {"median": seconds, "iqr": 1e-6, "rsd": 0.03, "runs": 40},
                              "cpu": {"median": 1e-4, "iqr": 1e-6, "rsd": 0.03, "runs": 40},
                              "timing": "events", "noisy": False}
    return StageResult(name="bench", status=Status.passed, duration_s=55.0,
                       summary=f"{len(measurements)} measurements", data={
                           "measurements": measurements, "counter": "callgrind", "timing": "events",
                           "time_gated": True})


def smoke_ids(n: int = 6) -> list[str]:
    names = ["tensor_roundtrip", "device_count", "arange_add", "autograd_backward", "to_and_from_cpu",
             "random_seed", "storage_resize", "pin_memory", "stream_sync", "generator_state"]
    return [f"smoke/test_basic.py::test_{names[i % len(names)]}{'' if i < len(names) else i}" for i in range(n)]


def op_test_id(device: str, op: str, dtype: str, variant: str = "") -> str:
    cls = f"TestCommon{device.upper()}"
    return f"test_ops.py::{cls}::test_{variant or 'compare_cpu'}_{op}_{device}_{dtype}"


def default_scenarios() -> list[Scenario]:
    """Four backends, each showing a different story."""
    flaky = op_test_id("npu", "softmax", "float16")
    return [
        Scenario("openreg", "openreg", xfail=(op_test_id("openreg", "topk", "bfloat16"),)),
        Scenario("ascend", "npu", red_from=9, red_stage="autoload", flaky=(flaky,)),
        Scenario("gaudi", "hpu", red_from=5, red_stage="integration", fixed_from=8,
                 broken_tests=(op_test_id("hpu", "matmul", "float32"), op_test_id("hpu", "conv2d", "float16"))),
        Scenario("tenstorrent", "tt", red_from=10, red_stage="smoke",
                 broken_tests=("smoke/test_basic.py::test_arange_add",),
                 flaky=(op_test_id("tt", "sort", "int64"),)),
    ]


def _root_cause(stage: str, device: str) -> RootCause:
    if stage == "autoload":
        return RootCause(kind="exception", summary="OSError: libhccl.so: cannot open shared object file",
                         exception_type="OSError", message="libhccl.so: cannot open shared object file",
                         hint="the backend needs its vendor runtime libraries", culprit=f"torch_{device}")
    if stage == "build":
        return RootCause(kind="exit_code", summary="build exited with code 1", exit_code=1,
                         hint="the C++ extension does not compile against this torch")
    return RootCause(kind="exit_code", summary=f"{stage} suite: tests failed", exit_code=1)


def build_record(sc: Scenario, day: int, *, tests_per_op: int = 1, trigger: str = "nightly",
                 pr: int | None = None, pr_head_sha: str | None = None, seed: int = 0) -> RunRecord:
    """One night of one backend as a real RunRecord."""
    rng = random.Random(f"{seed}-{sc.name}-{day}-{trigger}-{pr}")
    red = sc.red_from is not None and day >= sc.red_from and (sc.fixed_from is None or day < sc.fixed_from)
    started = EPOCH + dt.timedelta(days=day, minutes=rng.randint(0, 40))
    torch = TorchInfo(spec="nightly", version=torch_version(day), git_version=torch_commit(day),
                      source="https://download.pytorch.org/whl/nightly/cpu")
    stages: list[StageResult] = []
    tests: list[TestResult] = []
    broken_stage = sc.red_stage if red else None
    blocked = False
    clock = started
    for name in STAGES:
        duration = round(rng.uniform(0.5, 4.0) * (40 if name in ("build", "integration") else 1), 2)
        log = f"logs/{name}.log"
        if blocked:
            stages.append(StageResult(name=name, status=Status.blocked, summary="blocked by an earlier failure"))
            continue
        stage = StageResult(name=name, status=Status.passed, duration_s=duration, started_at=clock, log=log)
        clock += dt.timedelta(seconds=duration)
        if name in SUITES:
            suite_tests = _suite_tests(sc, name, rng, red and broken_stage == name, tests_per_op)
            tests.extend(suite_tests)
            counts: dict[str, int] = {}
            for t in suite_tests:
                counts[t.outcome.value] = counts.get(t.outcome.value, 0) + 1
            stage.counts = counts
            bad = sum(n for o, n in counts.items() if not Outcome(o).ok)
            stage.summary = f"{len(suite_tests)} tests, {bad} failing"
            if bad:
                stage.status = Status.failed
                stage.root_cause = _root_cause(name, sc.device)
        elif name == broken_stage:
            stage.status = Status.crashed if name == "autoload" else Status.failed
            stage.root_cause = _root_cause(name, sc.device)
            stage.summary = stage.root_cause.summary
        else:
            stage.summary = "ok"
        if not stage.status.ok and name not in SUITES:
            blocked = True
        stages.append(stage)
    if sc.bench and trigger != "pr":
        stages.append(bench_stage(sc.slower_from is not None and day >= sc.slower_from, rng))
    command = f"ootci run {sc.name} --torch nightly" + (f" --trigger pr --pr {pr}" if pr else "")
    return RunRecord(
        run_id=f"{sc.name}-{started.strftime('%Y%m%dT%H%M%S')}" + (f"-pr{pr}" if pr else ""),
        backend=sc.name, device=sc.device, trigger=trigger, pr=pr, pr_head_sha=pr_head_sha, torch=torch,
        python="3.11.7", platform="linux-x86_64", host="ci-runner-1", ootci_version="0.1.0",
        started_at=started, finished_at=clock, status=overall_status(stages), stages=stages,
        tests=tests, command=command,
    )


def _suite_tests(sc: Scenario, suite: str, rng: random.Random, red: bool, tests_per_op: int) -> list[TestResult]:
    specs: list[tuple[str, str | None, str | None]]
    if suite == "smoke":
        specs = [(tid, None, None) for tid in smoke_ids()]
    else:
        variants = ["compare_cpu", "out", "noncontiguous", "backward", "inplace"][:max(1, tests_per_op)]
        specs = [(op_test_id(sc.device, op, dtype, v), op, dtype)
                 for op in sc.ops for dtype in sc.dtypes for v in variants]
    out = []
    for tid, op, dtype in specs:
        outcome, message, tail, attempts = Outcome.passed, "", "", 1
        if tid in sc.xfail:
            outcome, message = Outcome.xfailed, "expected failure: topk is not implemented for bfloat16"
        elif red and tid in sc.broken_tests:
            outcome = Outcome.failed
            message = sc.extra_messages.get(tid, f"AssertionError: Tensor-likes are not close! ({op or tid})")
            tail = f"Traceback (most recent call last):\n  File \"{tid.split('::')[0]}\", line 42\n{message}"
        elif tid in sc.flaky:
            roll = rng.random()
            if roll < 0.3:
                outcome, attempts, message = Outcome.flaky, 2, "passed on retry 2 of 3"
            elif roll < 0.5:
                outcome, message = Outcome.failed, "RuntimeError: device timeout in stream synchronize"
                tail = message
        elif dtype == "int64" and op in ("sqrt", "log", "exp"):
            outcome, message = Outcome.skipped, "dtype not supported by op"
        out.append(TestResult(id=tid, suite=suite, outcome=outcome, duration_s=round(rng.uniform(0.001, 0.5), 3),
                              message=message, log_tail=tail, attempts=attempts, op=op, dtype=dtype))
    return out


def write_record(root: Path, record: RunRecord, *, logs: bool = True) -> Path:
    """Lay a record out like `ootci run` does: DIR/<backend>/<run_id>/record.json + logs/."""
    run_dir = root / record.backend / record.run_id
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    if logs:
        for stage in record.stages:
            if stage.log and ".." not in Path(stage.log).parts:
                lines = [f"[{stage.name}] step {i}: ok" for i in range(20)]
                if stage.root_cause:
                    lines.append(stage.root_cause.summary)
                (run_dir / stage.log).write_text("\n".join(lines) + "\n")
    return record_files.write(run_dir, record)


def write_history(root: Path, scenarios: list[Scenario] | None = None, nights: int = 14, *,
                  prs: int = 2, tests_per_op: int = 1) -> list[Path]:
    """Nightly runs of every scenario plus a few PR runs; returns the record paths."""
    paths = []
    for sc in scenarios or default_scenarios():
        for day in range(nights):
            paths.append(write_record(root, build_record(sc, day, tests_per_op=tests_per_op)))
    for i in range(prs):
        for sc in (scenarios or default_scenarios())[:2]:
            rec = build_record(sc, nights - 1, trigger="pr", pr=100 + i, pr_head_sha=pr_head(100 + i),
                               tests_per_op=tests_per_op)
            paths.append(write_record(root, rec))
    return paths


# --- fast path for the scale benchmark -------------------------------------------------

@dataclass
class FastNight:
    """One synthetic night of one backend, as plain data: what both fast writers lay out."""

    backend: str
    run_id: str
    head: dict  # record.json's fields but the stages
    stages: str  # the stages as a JSON list's items
    specs: list[tuple[str, str, str]]  # (test id, op, dtype) of every test, in the backend's order
    # test index -> (outcome, message, attempts, log tail); the rest passed
    changed: dict[int, tuple[str, str, int, str]]


def fast_nights(backends: int, nights: int, tests: int, *, start_night: int = 0, only: int | None = None,
                bench: int = 0, failures: int = 10):
    """Yield FastNight for backends x nights, backend by backend (None after each backend).
    bench: how many backends (the first ones) have a bench stage; every fifth of them is 25 %
    slower in its first measurement for its last five nights. failures: the tests a red night
    fails, each with a log tail as long as the runner keeps."""
    n_ops = max(1, tests // (len(DTYPES) * 2))
    ops = [f"op{i:04d}" for i in range(n_ops)]
    for b in range(backends) if only is None else [only]:
        name, device = f"vendor{b:03d}", f"dev{b:03d}"
        specs = [(op_test_id(device, op, dt_, v), op, dt_)
                 for op in ops for dt_ in DTYPES for v in ("compare_cpu", "out")][:tests]
        ids_hash = record_files.ids_hash(tid for tid, _, _ in specs)
        red_from = (b * 37) % (nights + 30) if b % 3 == 0 else None
        for night in range(start_night, start_night + nights):
            rng = random.Random(b * 100_003 + night)
            red = red_from is not None and night >= red_from
            failing = red
            changed: dict[int, tuple[str, str, int, str]] = {}
            for k in rng.sample(range(len(specs)), k=min(3, len(specs))):
                outcome = "flaky" if rng.random() < 0.7 else "failed"
                failing = failing or outcome == "failed"
                changed[k] = (outcome, "RuntimeError: synthetic intermittent failure", 2, "")
            if red:
                for k in range(0, min(len(specs), failures * 4), 4):
                    changed[k] = ("failed", "AssertionError: Tensor-likes are not close!", 1, _LOG_TAIL)
            notable = {specs[k][0]: outcome for k, (outcome, _, _, _) in changed.items()}
            counts = {"passed": len(specs) - len(notable)}
            for outcome in notable.values():
                counts[outcome] = counts.get(outcome, 0) + 1
            started = EPOCH + dt.timedelta(days=night, seconds=b)
            status = "failed" if failing else "passed"
            stages = ",".join(
                json.dumps({"name": s, "status": status if s == "integration" else "passed",
                            "duration_s": 1.5, "started_at": started.isoformat(), "log": f"logs/{s}.log",
                            "summary": "", "counts": {}})
                for s in STAGES)
            if b < bench:
                slower = b % 5 == 0 and night >= start_night + nights - 5
                stages += "," + bench_stage(slower, rng).model_dump_json()
            # Named as runner.records.run_identity.new_run_id names runs (the history's partial pull reads the names).
            run_id = f"{name}-{started:%Y%m%dT%H%M%SZ}-{night:06x}"
            head = {
                "schema_version": 1, "run_id": run_id, "backend": name, "device": device,
                "trigger": "nightly", "pr": None,
                "torch": {"spec": "nightly", "version": torch_version(night), "git_version": torch_commit(night)},
                "started_at": started.isoformat(), "finished_at": started.isoformat(), "status": status,
                "command": f"ootci run {name} --torch nightly", "tests_file": record_files.TESTS_NAME,
                "test_counts": counts, "test_ids_hash": ids_hash, "notable_tests": notable,
            }
            yield FastNight(name, run_id, head, stages, specs, changed)
        yield None


_LOG_TAIL = "".join(f"  File \"test/test_ops.py\", line {1000 + i}, in test_compare_cpu\n    self.assertEqual(actual, "
                    f"expected)\n" for i in range(20)) + "AssertionError: Tensor-likes are not close!\n"
"""a failure's log tail, about 2 KB: the runner keeps up to 4 KB of one"""


def _record_text(night: FastNight) -> str:
    return f'{json.dumps(night.head)[:-1]}, "stages": [{night.stages}]}}'


def write_fast(root: Path, backends: int, nights: int, tests: int, *, start_night: int = 0,
               only: int | None = None, progress=None, bench: int = 0, failures: int = 10) -> int:
    """Write backends x nights records of `tests` tests each without building models.

    Each run is the record.json and tests.json that runner.records.record_files writes; a passing
    test list is rendered once per backend and a handful of entries are swapped per night
    (failures, flakes).
    Returns the bytes written.
    """
    written, done, base = 0, 0, None
    for night in fast_nights(backends, nights, tests, start_night=start_night, only=only, bench=bench,
                             failures=failures):
        if night is None:
            done, base = done + 1, None
            if progress:
                progress(done if only is None else only + 1)
            continue
        if base is None:
            base = [_fast_test(tid, "integration", "passed", op=op, dtype=dt_) for tid, op, dt_ in night.specs]
        entries = list(base)
        for k, (outcome, message, attempts, log_tail) in night.changed.items():
            tid, op, dt_ = night.specs[k]
            entries[k] = _fast_test(tid, "integration", outcome, op=op, dtype=dt_, message=message, attempts=attempts,
                                    log_tail=log_tail)
        tests_text = f'{{"schema_version": 1, "run_id": "{night.run_id}", "tests": [{",".join(entries)}]}}'.encode()
        run_dir = root / night.backend / night.run_id
        os.makedirs(run_dir / "logs", exist_ok=True)
        if len(tests_text) >= record_files.COMPRESS_FROM:  # as record_files.write_tests writes a big list
            night.head["tests_file"] = record_files.TESTS_GZ_NAME
            tests_text = gzip.compress(tests_text, compresslevel=1, mtime=0)
        (run_dir / night.head["tests_file"]).write_bytes(tests_text)
        text = _record_text(night)
        (run_dir / record_files.RECORD_NAME).write_text(text)
        (run_dir / "logs" / "integration.log").write_text("synthetic integration log\n")
        written += len(text) + len(tests_text)
    return written


def write_store_fast(runs: Path, backends: int, nights: int, tests: int, *, progress=None,
                     failures: int = 10) -> int:
    """The same runs as write_fast, laid out as the history keeps them (runner.history.history_store):
    headers, results packed against one shared test set per backend, no logs. Durations vary
    from night to night as real ones do (they are most of a packed run's bytes).
    Returns the bytes written."""
    written, done, rows = 0, 0, None
    letter = {o: packed_tests.pack("x", "x", [["t", "s", None, None]],
                                   [TestResult(id="t", suite="s", outcome=o)])["outcomes"] for o in Outcome}
    for night in fast_nights(backends, nights, tests, failures=failures):
        if night is None:
            done, rows = done + 1, None
            if progress:
                progress(done)
            continue
        order = sorted(range(len(night.specs)), key=lambda i: night.specs[i][0])
        if rows is None:
            rows = [[night.specs[i][0], "integration", night.specs[i][1], night.specs[i][2]] for i in order]
            shared = packed_tests.testset_path(runs / "x", night.head["test_ids_hash"])
            if not shared.exists():
                written += _write(shared, packed_tests.dumps(rows))
        rng = random.Random(night.run_id)
        outcomes, details = [], {}
        for position, i in enumerate(order):
            outcome, message, attempts, log_tail = night.changed.get(i, ("passed", "", 1, ""))
            outcomes.append(letter[Outcome(outcome)])
            if message:
                details[str(position)] = {"message": message, **({"attempts": attempts} if attempts != 1 else {}),
                                          **({"log_tail": log_tail} if log_tail else {})}
        results = {"packed_version": packed_tests.PACKED_VERSION, "run_id": night.run_id,
                   "testset": night.head["test_ids_hash"], "outcomes": "".join(outcomes),
                   "durations_ms": [int(rng.lognormvariate(3, 1.2)) for _ in order], "details": details}
        night.head.update(tests_file=packed_tests.RESULTS_NAME,
                          ci_run_url=f"https://github.com/ootci/ootci/actions/runs/{zlib.crc32(night.run_id.encode())}")
        written += _write(runs / night.run_id / packed_tests.RESULTS_NAME, packed_tests.dumps(results))
        written += _write(runs / night.run_id / record_files.RECORD_NAME, _record_text(night).encode())
    return written


def _write(path: Path, data: bytes) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


def _fast_test(tid: str, suite: str, outcome: str, *, op: str | None = None, dtype: str | None = None,
               message: str = "", attempts: int = 1, log_tail: str = "") -> str:
    # Fields at their default are left out, as a compact writer would: the record still loads.
    entry = {"id": tid, "suite": suite, "outcome": outcome, "duration_s": 0.01, "op": op, "dtype": dtype}
    if message:
        entry["message"] = message
    if log_tail:
        entry["log_tail"] = log_tail
    if attempts != 1:
        entry["attempts"] = attempts
    return json.dumps(entry, separators=(",", ":"))
