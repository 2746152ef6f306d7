"""Causes: failures grouped into the few things that broke, on messages as ootci's suites and
PyTorch's tests write them."""

from __future__ import annotations

import itertools
import re

from ootci.runner.core import causes
from ootci.runner.models import Outcome, StageResult, Status
from ootci.runner.models import TestResult as Result

COULD_NOT_RUN = ("NotImplementedError: Could not run '{op}' with arguments from the 'PrivateUse1' backend. This "
                 "could be because the operator doesn't exist for this backend, or was omitted during the "
                 "selective/custom build process (if using custom build). If you are a Facebook employee using "
                 "PyTorch on mobile, please visit https://fburl.com/ptmfixes for possible resolutions. '{op}' is "
                 "only available for these backends: [{backends}].\n\nCPU: registered at "
                 "/pytorch/build/aten/src/ATen/RegisterCPU.cpp:30477 [kernel]")
NOT_CLOSE = ("AssertionError: Tensor-likes are not close!\n\nMismatched elements: {n} / {total} ({pct:.1f}%)\n"
             "Greatest absolute difference: {diff} at index (0, {n}) (up to 1e-05 allowed)\n"
             "Greatest relative difference: 0.5 at index (0, 1) (up to 1.3e-06 allowed)")
SHAPES = ["2, 3", "5", "3, 4, 5", "", "1, 1, 7", "20"]


def failed(test_id: str, message: str, *, outcome: Outcome = Outcome.failed, op: str | None = None,
           dtype: str | None = None, suite: str = "integration") -> Result:
    return Result(id=test_id, suite=suite, outcome=outcome, message=message, op=op, dtype=dtype)


def held_out_backend() -> list[Result]:
    """The held-out C++ backend of issue 52 rebuilt: a float-only abs kernel (direct in PyTorch's
    tests, wrapped by ootci's sample comparison in its own), an fft family that segfaults, a missing
    convolution_overrideable behind convolution samples, and a device mix-up."""
    results = []
    ops = itertools.cycle(["abs", "linalg.vector_norm", "nn.functional.l1_loss", "sgn", "dist"])
    dtypes = itertools.cycle(["int64", "int32", "int16", "bool"])
    for i in range(50):
        results.append(failed(f"test_ops.py::TestCommon::test_abs_{i}_heldout_int64",
                              "RuntimeError: Abs kernel only supports float type", suite="upstream",
                              op=next(ops), dtype=next(dtypes)))
    for i in range(60):
        op, dtype = next(ops), next(dtypes)
        results.append(failed(
            f"test_opinfo.py::test_compare_cpu[{op}-{dtype}]",
            f"AssertionError: sample {i % 7} (Tensor[{SHAPES[i % 6]}], dim={i % 3 - 1}, keepdim=True): raised on "
            f"heldout but not on CPU: RuntimeError: Abs kernel only supports float type", op=op, dtype=dtype))
    fft = itertools.cycle(["fft.fft", "fft.rfft", "fft.ihfft2", "fft.fftn", "fft.irfft"])
    for i in range(56):
        results.append(failed(f"test_opinfo.py::test_compare_cpu[fft-{i}]",
                              f"crashed: the test process was killed by SIGSEGV at test_opinfo.py:{240 + i % 3} in "
                              f"test_compare_cpu", outcome=Outcome.crashed, op=next(fft), dtype="float32"))
    for i in range(30):
        results.append(failed(
            f"test_opinfo.py::test_compare_cpu[nn.functional.conv{1 + i % 3}d-{i}]",
            f"AssertionError: sample {i} (Tensor[{i + 1}, 3, 8, 8], Tensor[4, 3, 3, 3], bias=Tensor[4]): raised "
            f"on heldout but not on CPU: " + COULD_NOT_RUN.format(op="aten::convolution_overrideable",
                                                                  backends="CPU, Meta, QuantizedCPU"),
            op=f"nn.functional.conv{1 + i % 3}d", dtype="float32"))
    for i in range(8):
        results.append(failed(f"test_device.py::test_to_{i}", "RuntimeError: Expected all tensors to be on the same "
                              f"device, but found at least two devices, heldout:{i % 2} and cpu!"))
    return results


def test_a_held_out_backend_reads_as_the_handful_of_things_a_person_names():
    grouped = causes.group(held_out_backend(), device="heldout")
    assert [(c.count, c.text) for c in grouped] == [
        (110, "RuntimeError: Abs kernel only supports float type"),
        (56, "SIGSEGV in `fft`"),
        (30, "NotImplementedError: Could not run 'aten::convolution_overrideable' with arguments from the "
             "'PrivateUse1' backend."),
        (8, "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
            "<device> and cpu!"),
    ]
    abs_only = grouped[0]
    assert abs_only.ops == ["abs", "dist", "linalg.vector_norm", "nn.functional.l1_loss", "sgn"]
    assert abs_only.dtypes == ["bool", "int16", "int32", "int64"]
    assert "the sample's wrapper" in abs_only.masked
    assert grouped[1].ops == ["fft.fft", "fft.fftn", "fft.ihfft2", "fft.irfft", "fft.rfft"]
    # Naively, first lines with the numbers masked: the samples' shapes make many groups of one bug.
    naive = {re.sub(r"\d+", "N", t.message.splitlines()[0]) for t in held_out_backend()}
    assert len(naive) >= 2 * len(grouped)


def generated_file(tests: int = 2000) -> list[Result]:
    """The generated upstream file of issue 52: 300 failures in three patterns (tensors not close
    with varying counts; `Could not run 'aten::X'` for 7 ops; an invalid pointer with varying
    addresses) among passing tests."""
    kernels = ["aten::_fft_r2c", "aten::linalg_qr.out", "aten::_cdist_forward", "aten::index_reduce.out",
               "aten::nanmedian", "aten::_embedding_bag_backward", "aten::histc"]
    results = []
    for i in range(tests):
        test_id = f"test_generated.py::TestGenerated::test_op_{i}_openreg_float32"
        if i % 20 == 0 and len(results) < tests:
            k = i // 20
            if k % 2 == 0:
                message = NOT_CLOSE.format(n=k % 9 + 1, total=12 + k, pct=100 * (k % 9 + 1) / (12 + k), diff=k / 7)
            elif k % 4 == 1:
                message = COULD_NOT_RUN.format(op=kernels[k % 7], backends="CPU, Meta" + ", SparseCPU" * (k % 2))
            else:
                message = f"RuntimeError: openreg: invalid pointer 0x{0x7f3a00 + 97 * k:x} freed on openreg:0"
            results.append(failed(test_id, message, suite="upstream", op=f"op{i % 11}", dtype="float32"))
        else:
            results.append(Result(id=test_id, suite="upstream", outcome=Outcome.passed))
    return results


def test_a_generated_file_groups_its_failures_by_pattern_the_largest_first():
    results = generated_file()
    causes.WORK = causes.Work()
    causes._memo.clear()
    grouped = causes.group(results, device="openreg")
    texts = [c.text for c in grouped]
    assert texts[0] == "AssertionError: Tensor-likes are not close!" and grouped[0].count == 50
    assert texts[1] == "RuntimeError: <device>: invalid pointer 0x? freed on <device>" and grouped[1].count == 25
    # One missing kernel a cause: each is a kernel to write, named by its quoted op.
    missing = [c for c in grouped if "Could not run" in c.text]
    assert len(missing) == 7 and sum(c.count for c in missing) == 25
    assert {c.text.split("'")[1] for c in missing} == {
        "aten::_fft_r2c", "aten::linalg_qr.out", "aten::_cdist_forward", "aten::index_reduce.out",
        "aten::nanmedian", "aten::_embedding_bag_backward", "aten::histc"}
    assert len(grouped) == 9
    assert [c.count for c in grouped] == sorted((c.count for c in grouped), reverse=True)
    # Only the failures cost anything, and each a bounded number of patterns.
    assert causes.WORK.signatures == 100
    assert causes.WORK.patterns <= 100 * 25
    # Asked again (classification asks of a known failure, then grouping does): computed once.
    causes.group(results, device="openreg")
    assert causes.WORK.signatures == 100


def test_the_signature_is_stable_across_torch_releases_samples_and_shards():
    # The list of backends an op has changes from release to release: the first sentence names the error.
    old = failed("a::t", COULD_NOT_RUN.format(op="aten::_fft_r2c", backends="CPU, Meta"))
    new = failed("b::t", COULD_NOT_RUN.format(op="aten::_fft_r2c", backends="CPU, CUDA, Meta, SparseCPU, "
                                                                          "BackendSelect, Python, Functionalize"))
    assert causes.cause_of(old, "openreg") == causes.cause_of(new, "openreg")
    # PyTorch's own sample note and repro line (PYTORCH_PRINT_REPRO_ON_FAILURE) are not the error.
    noted = failed("c::t", "RuntimeError: \"abs_cpu\" not implemented for 'Half'\n\nCaused by sample input at "
                           "index 3: SampleInput(input=Tensor[size=(2, 3), device=\"openreg:0\", dtype=torch.float16])"
                           "\n\nTo execute this test, run the following from the base repo dir:\n    python "
                           "test/test_ops.py TestCommonOPENREG.test_compare_cpu_abs_openreg_float16")
    plain = failed("d::t", "RuntimeError: \"abs_cpu\" not implemented for 'BFloat16'")
    assert causes.cause_of(noted, "openreg") == causes.cause_of(plain, "openreg") == \
        "RuntimeError: \"abs_cpu\" not implemented for '<dtype>'"
    # Addresses, directories and the device's index differ from run to run and machine to machine.
    one = failed("e::t", "ValueError: bad storage at 0x55d3e8a0b2c0 of /tmp/pytest-of-ci/pytest-3/x.py on openreg:1")
    two = failed("f::t", "ValueError: bad storage at 0x7f00aa01 of /home/runner/work/x.py on openreg:0")
    assert causes.signature(one, "openreg") == causes.signature(two, "openreg")
    assert causes.signature(one, "openreg").masked == ("the device's name", "addresses", "directories")
    # A known failure's, a retry's and the second opinion's wrappers are looked through.
    inner = "RuntimeError: Abs kernel only supports float type"
    for wrapped, outcome in [
        (f"known failure (failed with torch 2.13.0+cpu); it failed: {inner}", Outcome.xfailed),
        (f"fails on CPU too: not the backend's (failed on openreg: {inner} | failed on cpu: ValueError: x)",
         Outcome.upstream),
        (f"AssertionError: making sample input 4 on openreg failed: {inner}", Outcome.failed),
    ]:
        assert causes.cause_of(failed("g::t", wrapped, outcome=outcome), "openreg") == inner


def test_a_crash_is_its_signal_and_op_family_or_test_function_known_or_not():
    seg = failed("test_autograd.py::TestAutogradDeviceType::test_gradgrad_openreg_float64",
                 "crashed: the test process was killed by SIGSEGV at test_autograd.py:812 in test_gradgrad",
                 outcome=Outcome.crashed)
    assert causes.cause_of(seg, "openreg") == "SIGSEGV in `test_gradgrad`"
    # A test that crashed before it recorded its op still names it in its id.
    early = failed("test_opinfo.py::test_compare_cpu[fft.rfft-bool]", "crashed: the test process was killed by "
                   "SIGSEGV at test_opinfo.py:244 in test_compare_cpu", outcome=Outcome.crashed)
    assert causes.cause_of(early, "partreg") == "SIGSEGV in `fft`"
    known = failed(seg.id, f"known failure (crashed with torch 2.13.0); it crashed: {seg.message}",
                   outcome=Outcome.xfailed)
    assert causes.cause_of(known, "openreg") == causes.cause_of(seg, "openreg")
    # An OpInfo test of PyTorch's own file names its op only inside its name: its seven crashes on OpenReg (a
    # real night of test_ops_gradients.py) died in the same function, and are one cause, not seven.
    gradgrad = [failed(f"test_ops_gradients.py::TestBwdGradients::test_fn_gradgrad_{op}_openreg_float64",
                       "crashed: the test process was killed by SIGSEGV at test_ops_gradients.py:69 "
                       "in test_fn_gradgrad",
                       outcome=Outcome.crashed)
                for op in ("linalg_eigh", "linalg_matrix_norm", "linalg_norm", "linalg_svd", "linalg_vector_norm",
                           "masked_norm", "masked_normalize")]
    assert {causes.cause_of(crash, "openreg") for crash in gradgrad} == {"SIGSEGV in `test_fn_gradgrad`"}
    hung = failed("t.py::test_x[fft.fft-float32]", "test exceeded its 60 s time limit in code that never returned",
                  outcome=Outcome.timeout, op="fft.fft")
    assert causes.cause_of(hung, "openreg") == "timeout in `fft`"


def test_a_stage_is_grouped_new_before_known_and_its_root_cause_is_its_largest_new_cause():
    inner = "RuntimeError: Abs kernel only supports float type"
    results = [failed(f"t.py::test_{i}", inner, outcome=Outcome.xfailed) for i in range(40)]
    results += [failed(f"t.py::test_n{i}", "RuntimeError: mul is add", op="mul") for i in range(3)]
    results += [failed("t.py::test_pointer", "RuntimeError: invalid pointer 0x1234")]
    results += [failed("t.py::test_changed", f"{causes.CHANGED} (listed as `{inner}`); it failed: RuntimeError: boom")]
    results += [Result(id="t.py::ok", suite="integration", outcome=Outcome.passed)]
    stage = StageResult(name="integration", status=Status.failed)
    causes.attach(stage, results, "openreg")
    assert [(c.novelty, c.count, c.text) for c in stage.causes] == [
        ("new", 3, "RuntimeError: mul is add"), ("new", 1, "RuntimeError: invalid pointer 0x?"),
        ("changed", 1, "RuntimeError: boom"), ("known", 40, inner)]
    assert stage.causes[2].was == inner
    assert stage.root_cause is not None and stage.root_cause.summary.startswith(
        "RuntimeError: mul is add (3 of 4 new failures, e.g. t.py::test_n0)")
    line = causes.summary_line(stage.causes)
    assert line == ("4 new failures in 2 causes: 3 `RuntimeError: mul is add` (mul); "
                    "1 `RuntimeError: invalid pointer 0x?`")


def test_order_by_cause_puts_one_example_of_each_cause_first_largest_first():
    results = [failed(f"t.py::a{i}", f"RuntimeError: sizes [{i}, 2] differ") for i in range(5)]
    results += [failed("t.py::b", "ValueError: one"), failed("t.py::c0", "KeyError: 3"),
                failed("t.py::c1", "KeyError: 9")]
    ordered = [t.id for t in causes.order_by_cause(results)]
    assert ordered[:3] == ["t.py::a0", "t.py::c0", "t.py::b"]
    assert sorted(ordered) == sorted(t.id for t in results)
