"""The relay's callback at scale (run by hand; prints figures, asserts nothing).

    python bench/relay_scale.py                          # 100,000 tests, 5,000 failures
    python bench/relay_scale.py --tests 20000 --failures 500

One backend's run as `ootci relay nightly` reports it: its record and tests.json written to a
temporary directory, read back, and its completed callback built (runner/relay/reporting.py).
Failures carry a 3 KB message and a 9 KB log tail, so the body must be cut to fit HUD's 2 MB.
Prints the body's bytes as the relay forwards it, the detail's entries and their cuts, the
time to read the records and to build the body, and the totals HUD keeps.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ootci.runner import relay  # noqa: E402
from ootci.runner.models import Outcome, RunRecord, StageResult, Status, TestResult, TorchInfo  # noqa: E402
from ootci.runner.records import record_files  # noqa: E402

COMMIT = "5e1f0c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f"
KINDS = (Outcome.upstream, Outcome.xfailed, Outcome.flaky, Outcome.failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=100_000)
    parser.add_argument("--failures", type=int, default=5_000)
    args = parser.parse_args()
    tests = [TestResult(id=f"test_ops.py::TestCommonOPENREG::test_op_{i}", suite="upstream", outcome=Outcome.passed)
             for i in range(args.tests - args.failures)]
    tests += [TestResult(id=f"test_ops.py::TestCommonOPENREG::test_bad_{i}", suite="upstream", outcome=KINDS[i % 4],
                         message="RuntimeError: " + "m" * 3000, log_tail="Traceback\n" + "s" * 9000)
              for i in range(args.failures)]
    started = dt.datetime(2026, 11, 23, 3, 17, tzinfo=dt.UTC)
    record = RunRecord(run_id="openreg-bench", backend="openreg", device="openreg", trigger="nightly",
                       torch=TorchInfo(spec="nightly", version="2.16.0.dev20261122+cpu", git_version=COMMIT),
                       started_at=started, finished_at=started + dt.timedelta(hours=2), status=Status.failed,
                       tests=tests, stages=[StageResult(name="upstream", status=Status.failed)])
    workflow = relay.Workflow(name="ootci nightly", url="https://github.com/o/r/actions/runs/1", run_id="1",
                              run_attempt="1", job_name="relay", check_run_id="1-1")
    with tempfile.TemporaryDirectory() as tmp:
        record_files.write(Path(tmp) / record.run_id, record)
        t0 = time.perf_counter()
        records, _ = relay.read_records(Path(tmp), with_tests=True)
        t1 = time.perf_counter()
        [job] = relay.jobs_of(records)
        body = relay.completed(relay.nightly_envelope(COMMIT), workflow, job)
        t2 = time.perf_counter()
    report = body["workflow"]
    entries = report["failed_tests_detail"]
    forwarded = len(json.dumps({"trusted": {}, "untrusted": {"callback_payload": body}}).encode())
    print(f"tests {args.tests:,}, failures {args.failures:,}")
    print(f"body as forwarded to HUD: {forwarded:,} bytes (limit {relay.BODY_LIMIT:,})")
    print(f"detail: {len(entries)} entries, message <= {max(len(e['message']) for e in entries)} chars, "
          f"stacktrace <= {max(len(e['stacktrace']) for e in entries)} chars, first outcome {entries[0]['outcome']}")
    numbers = report["test_results"]
    print("totals: " + ", ".join(f"{k} {numbers[k]:,}" for k in ("passed", "failed", "skipped", "total")))
    print(f"read the records: {t1 - t0:.2f} s; build the body: {t2 - t1:.2f} s")


if __name__ == "__main__":
    main()
