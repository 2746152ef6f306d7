"""What grouping failures by cause adds to a run: 100,000 results with 5,000 failures.

    .venv/bin/python bench/causes.py [--tests 100000] [--failures 5000]

The results are a generated upstream file's, as the runner holds them after classification:
passing tests, and failures in the patterns of issue 52 (tensors not close with varying
counts, through ootci's sample wrapper with varying shapes; `Could not run 'aten::X'` for 7 ops;
an invalid pointer with varying addresses; segfaults in an op family; known failures through
the baseline's wrapper). It runs what a suite stage runs once per run (runner/core/causes.py
`attach`: a signature per failing test, grouped) and prints:

- the work, counted: signatures computed and regular expressions applied (the figure to compare:
  it does not move with the machine's load);
- the time it took, once (goal, issue 52: at most 2 s for 100,000 results with 5,000 failures);
- the causes found, largest first.

Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ootci.runner.core import causes  # noqa: E402
from ootci.runner.models import Outcome, StageResult, Status, TestResult  # noqa: E402

KERNELS = ("aten::_fft_r2c", "aten::linalg_qr.out", "aten::_cdist_forward", "aten::index_reduce.out",
           "aten::nanmedian", "aten::_embedding_bag_backward", "aten::histc")
COULD_NOT_RUN = ("NotImplementedError: Could not run '{op}' with arguments from the 'PrivateUse1' backend. This "
                 "could be because the operator doesn't exist for this backend, or was omitted during the "
                 "selective/custom build process (if using custom build). '{op}' is only available for these "
                 "backends: [CPU, Meta, SparseCPU].")


def failure(k: int, test_id: str) -> TestResult:
    """The k-th failure, in one of five patterns."""
    kind = k % 5
    if kind == 0:
        message = (f"AssertionError: sample {k % 9} (Tensor[{k % 7 + 1}, {k % 5 + 2}], dim={k % 3 - 1}): "
                   f"openreg and CPU differ: Tensor-likes are not close!\n\nMismatched elements: {k % 11 + 1} / "
                   f"{k % 50 + 12} ({(k % 11 + 1) / (k % 50 + 12) * 100:.1f}%)")
        return TestResult(id=test_id, suite="upstream", outcome=Outcome.failed, message=message, op=f"op{k % 40}",
                          dtype="float32")
    if kind == 1:
        return TestResult(id=test_id, suite="upstream", outcome=Outcome.failed,
                          message=COULD_NOT_RUN.format(op=KERNELS[k % 7]), op=f"op{k % 40}", dtype="float32")
    if kind == 2:
        return TestResult(id=test_id, suite="upstream", outcome=Outcome.failed,
                          message=f"RuntimeError: invalid pointer 0x{0x7f3a0000 + 4099 * k:x} freed on openreg:0",
                          dtype="int64")
    if kind == 3:
        return TestResult(id=test_id, suite="upstream", outcome=Outcome.crashed, op="fft.rfft",
                          message=f"crashed: the test process was killed by SIGSEGV at test_spectral.py:{k % 900} "
                                  f"in test_fft")
    return TestResult(id=test_id, suite="upstream", outcome=Outcome.xfailed, dtype="int16",
                      message=f"known failure (failed with torch 2.13.0+cpu); it failed: AssertionError: sample "
                              f"{k % 4} (Tensor[{k % 9}]): raised on openreg but not on CPU: RuntimeError: Abs "
                              f"kernel only supports float type")


def results(tests: int, failures: int) -> list[TestResult]:
    every = max(1, tests // max(failures, 1))
    out = []
    k = 0
    for i in range(tests):
        test_id = f"test_generated.py::TestGenerated::test_op_{i}_openreg_float32"
        if i % every == 0 and k < failures:
            out.append(failure(k, test_id))
            k += 1
        else:
            out.append(TestResult(id=test_id, suite="upstream", outcome=Outcome.passed))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=100_000)
    parser.add_argument("--failures", type=int, default=5_000)
    args = parser.parse_args()
    run = results(args.tests, args.failures)
    stage = StageResult(name="upstream", status=Status.failed)
    causes.WORK = causes.Work()
    start = time.perf_counter()
    causes.attach(stage, run, "openreg")
    took = time.perf_counter() - start
    print(f"{args.tests} results, {sum(1 for t in run if not t.outcome.ok or t.outcome is Outcome.xfailed)} "
          f"with a cause: {causes.WORK.signatures} signatures, {causes.WORK.patterns} regular expressions applied "
          f"({causes.WORK.patterns / max(causes.WORK.signatures, 1):.1f} a failure)")
    print(f"grouped into {len(stage.causes)} causes in {took:.3f} s (goal: at most 2 s)")
    before = causes.WORK.signatures
    start = time.perf_counter()
    for test in run:
        if causes.novelty_of(test):
            causes.cause_of(test, "openreg")
    print(f"asked again, as classification asks of each known failure: {causes.WORK.signatures - before} more "
          f"signatures computed, {time.perf_counter() - start:.3f} s")
    for c in stage.causes:
        print(f"  {c.novelty:<8} {c.count:>5}  {c.text}")
    print(f"root cause: {stage.root_cause.summary if stage.root_cause else None}")


if __name__ == "__main__":
    main()
