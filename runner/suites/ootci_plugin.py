"""pytest plugin loaded into every suite ootci runs inside the environment under test.

This file runs in the target interpreter, which has torch and pytest but not the
`runner` package's dependencies: it imports only pytest and the standard library
(torch lazily), and is put on sys.path by the runner (`-p ootci_plugin`), never
imported through `runner`.

What it adds to a pytest session:
- the backend under test: `--ootci-device`, `--ootci-capabilities`, `--ootci-dtypes`,
  `--ootci-import`, exposed as the fixtures `ootci_device`, `ootci_capabilities`,
  `ootci_dtypes`; tests marked `@pytest.mark.capability("streams")` are skipped with
  "capability 'streams' not claimed" when the backend does not claim it;
- crash-proof results (`--ootci-junit`): each finished test is appended to a JUnit
  XML file in one write, so a segfault loses nothing but the closing tags;
- the test in progress (`--ootci-progress DIR`), so the runner can name the test a
  crash or a hang happened in; the collected test ids next to the JUnit file, so it
  can tell which tests never ran;
- per-test time limits (`--ootci-test-timeout`): SIGALRM raises in the test after the
  limit (a Python-level hang becomes a "timeout" result and the session goes on);
  a hang in native code that never returns to Python is ended by faulthandler a
  little later, which exits the process after dumping every thread's stack;
- selection files (`--ootci-only`, `--ootci-exclude`, one test id a line) for retries
  and for resuming after a crash without long command lines;
- sharding (`--ootci-shard K/N`): every shard collects the whole suite and keeps only
  the tests whose node id hashes to shard K (`shard_of`: blake2b of "suite::nodeid",
  mod N), so N machines each run about 1/N of it and together run all of it once;
- a range of ids (`--ootci-id-from`, `--ootci-id-before`): the tests whose id sorts in
  [FROM, BEFORE), a piece of a file split between the jobs of a planned shard;
- crash isolation by fork (`--ootci-fork N`): this process imports torch and the
  backend and collects, but runs no test: N forked children run the tests (child k
  every N-th), and a child that crashes or hangs is recorded against the test in
  progress and replaced by a new fork that goes on after it. A crash then costs a fork
  (milliseconds), not an interpreter start and a collection (seconds); it needs a
  backend that does not start its device when it is imported (`ootci init` probes it);
  with `--ootci-retry-junit PATH`, the tests that did not pass run once more, in one more fork
  once the others are done: a retry that costs neither an interpreter nor a collection.

Collection is paid once per process: once collected, the session's objects are frozen out of the
garbage collector (`gc.freeze`), so that neither this process nor its forks walk the thousands
of collected items and everything torch holds at every collection, and a fork does not copy
the pages a collection would touch. At 20,000 tests this is several seconds of CPU.
"""

from __future__ import annotations

import faulthandler
import gc
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
from xml.sax.saxutils import escape, quoteattr

import pytest

# Kept in step with runner.manifests.manifest.Capability (a test in tests/ checks it).
CAPABILITIES = (
    "synchronize",
    "multi_device",
    "streams",
    "events",
    "generator",
    "autocast",
    "pinned_memory",
    "serialization",
    "autograd",
    "sparse",
    "quantized",
)

TAIL_CHARS = 4000
MESSAGE_CHARS = 1000
# The section of a worker's failed collection report that names the backend's import error.
IMPORT_ERROR_SECTION = "ootci: the backend's import error"
# A hang in native code gets this much longer than the Python-level limit before the
# process is ended, so that a test stuck in Python is always reported by the alarm.
NATIVE_GRACE_S = 2.0
XDIST_CRASH = re.compile(r"worker '(?P<worker>[^']+)' crashed while running")
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


class BackendImportFailed(Exception):
    """Raised before each test when the backend under test could not be imported."""


class OotciTestTimeout(BaseException):
    """Raised by the alarm in a test that ran past its limit.

    A BaseException, so that `except Exception` in the code under test cannot
    swallow it.
    """


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ootci", "ootci: the backend under test and crash-proof results")
    group.addoption("--ootci-device", default=os.environ.get("OOTCI_DEVICE", "cpu"),
                    help="torch device type under test (default: $OOTCI_DEVICE or cpu)")
    group.addoption("--ootci-capabilities", default=None,
                    help="comma-separated capabilities the backend claims (default: all)")
    group.addoption("--ootci-dtypes", default="float32",
                    help="comma-separated dtypes the backend claims (default: float32)")
    group.addoption("--ootci-import", default="",
                    help="module to import before the tests (the backend, if autoload is not relied on)")
    group.addoption("--ootci-suite", default="", help="suite name written to the JUnit file")
    group.addoption("--ootci-junit", default="", help="append each result to this JUnit XML file as it finishes")
    group.addoption("--ootci-progress", default="", help="directory for the file naming the test in progress")
    group.addoption("--ootci-test-timeout", type=float, default=0.0,
                    help="seconds one test may take (0: no limit)")
    group.addoption("--ootci-only", default="", help="file of test ids: run only these")
    group.addoption("--ootci-exclude", default="", help="file of test ids: do not run these")
    group.addoption("--ootci-shard", default="", metavar="K/N",
                    help="run only the tests of shard K of N (a stable hash of suite and node id)")
    group.addoption("--ootci-id-from", default=None, metavar="ID",
                    help="run only the tests whose id sorts at or after ID (a range of a planned shard)")
    group.addoption("--ootci-id-before", default=None, metavar="ID",
                    help="run only the tests whose id sorts before ID (a range of a planned shard)")
    group.addoption("--ootci-fork", type=int, default=0, metavar="N",
                    help="run the tests in N forked children, each crash costing a fork (0: in this process)")
    group.addoption("--ootci-retry-junit", default="", metavar="PATH",
                    help="with --ootci-fork: once every child is done, run the tests that did not pass once more in "
                         "one new fork of the collected session, their results streamed to this JUnit file")
    group.addoption("--ootci-retry-skip", default="", metavar="FILE",
                    help="with --ootci-retry-junit: ids (one a line) the retry leaves out (known failures whose "
                         "cause the runner judges after the run)")
    group.addoption("--ootci-device-type-ids", default="", metavar="DEVICE",
                    help="write the ids of PyTorch's device-type tests without the instantiation's class suffix, "
                         "naming DEVICE in the method (device_type_ids.py); selections and shards use these ids")
    group.addoption("--ootci-cpu-twins", action="store_true",
                    help="with --ootci-device-type-ids: the tests are instantiated for the CPU too, and each CPU "
                         "copy is reported under its device twin's id, marked @cpu")


def parse_shard(text: str) -> tuple[int, int]:
    """(K, N) of "K/N" with 1 <= K <= N; ValueError otherwise."""
    k, sep, n = text.strip().partition("/")
    if not sep or not k.strip().isdigit() or not n.strip().isdigit():
        raise ValueError(f"{text!r} is not K/N (e.g. 2/3)")
    k_, n_ = int(k), int(n)
    if not 1 <= k_ <= n_:
        raise ValueError(f"{text!r}: K must be between 1 and N")
    return k_, n_


def shard_of(suite: str, nodeid: str, shards: int) -> int:
    """The shard (1..shards) a test belongs to: the same in every process and on every machine
    (never Python's salted hash()), so that N shards partition a suite."""
    digest = hashlib.blake2b(f"{suite}::{nodeid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards + 1


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _worker_id(config: pytest.Config) -> str:
    # pytest-xdist sets workerinput on a worker's config.
    return config.workerinput["workerid"] if _is_worker(config) else "main"  # type: ignore[attr-defined]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "capability(*names): the test needs these backend capabilities; skipped when one is not claimed",
    )
    claimed = config.getoption("ootci_capabilities")
    capabilities = set(CAPABILITIES) if claimed is None else set(_split(claimed))
    unknown = sorted(capabilities - set(CAPABILITIES))
    if unknown:
        raise pytest.UsageError(f"--ootci-capabilities: unknown capability {unknown[0]!r} "
                                f"(known: {', '.join(CAPABILITIES)})")
    module = config.getoption("ootci_import")
    shard = config.getoption("ootci_shard")
    if shard:
        try:
            parse_shard(shard)
        except ValueError as exc:
            raise pytest.UsageError(f"--ootci-shard: {exc}") from None
    state = _State(config, capabilities, module)
    config.stash[_STATE] = state
    config.pluginmanager.register(state, "ootci-state")


def _test_ids(config: pytest.Config):
    """The id a test is known by: its node id, or the stable id of a device-type test."""
    device = config.getoption("ootci_device_type_ids")
    if not device:
        return lambda nodeid: nodeid
    from device_type_ids import DeviceTypeIds  # beside this file, on PYTHONPATH

    return DeviceTypeIds(device, cpu_twins=bool(config.getoption("ootci_cpu_twins")))


def _is_xdist_controller(config: pytest.Config) -> bool:
    # xdist sets `dist` from -n before any pytest_configure; "no" is -n 0 or no -n at all.
    return not _is_worker(config) and getattr(config.option, "dist", "no") != "no"


def _import_backend(module: str) -> str | None:
    """Import torch, then the backend; why that failed, or None.

    torch comes first, as a user's `import torch` would: a backend whose package defines
    its autoload hook after its own `import torch` (a circular import) fails when it is
    imported before torch, and works after. When the backend cannot be imported at all,
    every test still runs and fails with this error (see _State.pytest_runtest_setup), so
    that a broken import costs no result.
    """
    found = _source_tree_copy(module)
    if found:
        # Worded as runner/verify.py words it, which gives the hint (runner/rootcause.py).
        return (f"--ootci-import: import {module} finds {found['imported_from']} (a same-named directory of a "
                f"source tree) instead of the installed {found['installed_at']}")
    for name in ("torch", module):
        try:
            __import__(name)
        except ModuleNotFoundError as exc:
            if name == "torch" and exc.name == "torch":
                continue  # an environment without torch (a plain-pytest vendor suite): the backend alone
            return f"--ootci-import: cannot import {name!r}: {type(exc).__name__}: {exc}"
        except Exception as exc:
            return f"--ootci-import: cannot import {name!r}: {type(exc).__name__}: {exc}"
    return None


def _source_tree_copy(module: str) -> dict | None:
    try:
        from _probe import shadowing  # runner/probes, on PYTHONPATH when ootci runs the suite
    except ImportError:
        return None
    return shadowing(module)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.close()


def _dtype(name: str):
    import torch

    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise pytest.UsageError(f"--ootci-dtypes: {name!r} is not a torch dtype")
    return value


@pytest.fixture(scope="session")
def ootci_device(pytestconfig: pytest.Config) -> str:
    return pytestconfig.getoption("ootci_device")


@pytest.fixture(scope="session")
def ootci_capabilities(pytestconfig: pytest.Config) -> frozenset[str]:
    return frozenset(pytestconfig.stash[_STATE].capabilities)


@pytest.fixture(scope="session")
def ootci_dtypes(pytestconfig: pytest.Config) -> list:
    return [_dtype(name) for name in _split(pytestconfig.getoption("ootci_dtypes"))]


def claimed_dtype_names(config: pytest.Config) -> list[str]:
    """For suites that parametrize over dtypes at collection time."""
    names = _split(config.getoption("ootci_dtypes"))
    for name in names:
        _dtype(name)
    return names


def _read_ids(path: str) -> set[str]:
    if not path:
        return set()
    with open(path, encoding="utf-8") as f:
        return {line.rstrip("\n") for line in f if line.strip()}


class _State:
    """Per-session state and the hooks that need it."""

    def __init__(self, config: pytest.Config, capabilities: set[str], module: str | None = None):
        self.config = config
        self.capabilities = capabilities
        # Why the backend could not be imported: every test fails with it. An xdist controller
        # runs and collects no test, so it imports nothing (about 2 s of CPU per integration run
        # before any worker starts); a worker's collection error brings the worker's reason.
        self.import_error = _import_backend(module) if module and not _is_xdist_controller(config) else None
        self.timeout = float(config.getoption("ootci_test_timeout") or 0)
        self.progress_dir = config.getoption("ootci_progress")
        self.junit = None
        self.pending: dict[str, list[pytest.TestReport]] = {}
        self.worker = _worker_id(config)
        # The stderr the session started with: faulthandler writes there even while
        # pytest captures fd 2 for a test.
        self.stderr_fd = os.dup(2)
        self.progress_file: str | None = None
        self.progress_fd: int | None = None
        self.progress_len = 0
        self.native_armed_at: float | None = None
        """when faulthandler's watchdog was last armed (_arm_native)"""
        self.retrying = False
        """this process is the retry's fork (--ootci-retry-junit)"""
        self.ids = _test_ids(config)
        """node id -> the id the runner knows the test by (mapped once, where pytest's ids come in)"""
        path = config.getoption("ootci_junit")
        if path and not _is_worker(config):
            self.junit = _StreamingJUnit(path, config.getoption("ootci_suite") or "pytest")

    def close(self) -> None:
        if self.native_armed_at is not None:
            faulthandler.cancel_dump_traceback_later()
            self.native_armed_at = None
        if self.progress_fd is not None:
            os.close(self.progress_fd)
            self.progress_fd = self.progress_file = None
        if self.junit is not None:
            self.junit.close()
        try:
            os.close(self.stderr_fd)
        except OSError:
            pass

    # -- selection and capabilities -------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        only = _read_ids(config.getoption("ootci_only"))
        exclude = _read_ids(config.getoption("ootci_exclude"))
        shard = config.getoption("ootci_shard")
        k, n = parse_shard(shard) if shard else (1, 1)
        suite = config.getoption("ootci_suite") or ""
        start, before = config.getoption("ootci_id_from"), config.getoption("ootci_id_before")
        if only or exclude or n > 1 or start is not None or before is not None:
            kept: list[pytest.Item] = []
            dropped: list[pytest.Item] = []
            for item in items:
                test_id = self.ids(item.nodeid)
                wanted = ((not only or test_id in only) and test_id not in exclude
                          and (n == 1 or shard_of(suite, test_id, n) == k)
                          and (start is None or test_id >= start) and (before is None or test_id < before))
                (kept if wanted else dropped).append(item)
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = kept
        for item in items:
            for mark in item.iter_markers("capability"):
                for name in mark.args:
                    if name not in CAPABILITIES:
                        raise pytest.UsageError(f"{item.nodeid}: capability marker names unknown capability {name!r}")
                    if name not in self.capabilities:
                        item.add_marker(pytest.mark.skip(reason=f"capability '{name}' not claimed"))
        if self.junit is not None:
            self.junit.write_collected([self.ids(item.nodeid) for item in items])

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # What is alive now (torch, the test modules, the items) lives for the whole session.
        gc.collect()
        gc.freeze()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        # Under xdist the controller collects nothing itself; every worker collects
        # the same ids (after its own selection), so the first report is the list.
        if self.junit is not None and not self.junit.collected_written:
            self.junit.write_collected([self.ids(nodeid) for nodeid in ids])

    # -- crash isolation by fork ---------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session):
        children = int(self.config.getoption("ootci_fork") or 0)
        if children <= 0 or _is_worker(self.config) or self.config.option.collectonly or not session.items:
            return None
        if session.testsfailed and not self.config.option.continue_on_collection_errors:
            return None  # pytest's own loop says why it stops
        items = session.items
        queues = {k: list(range(k, len(items), children)) for k in range(children)}
        running: dict[int, tuple[int, list[int]]] = {}
        for k, queue in queues.items():
            if queue:
                running[self._fork(k, queue, items)] = (k, queue)
        self._run_forks(running, items)
        retry_junit = self.config.getoption("ootci_retry_junit")
        if retry_junit and self.progress_dir:
            self._retry_in_fork(retry_junit, items)
        return True

    def _run_forks(self, running: dict[int, tuple[int, list[int]]], items: list[pytest.Item],
                   junit: _StreamingJUnit | None = None) -> None:
        """Wait for the forked children, each crashed one replaced by a fork that goes on after its test."""
        while running:
            pid, status = os.waitpid(-1, 0)
            if pid not in running:
                continue
            k, queue = running.pop(pid)
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
                continue
            rest = self._after_death(k, queue, items, status, junit)
            if rest:
                running[self._fork(k, rest, items, junit)] = (k, rest)

    def _retry_in_fork(self, path: str, items: list[pytest.Item]) -> None:
        """The tests that did not pass, once more, in a new fork of this session: results in `path`."""
        failing: set[str] = set()
        for name in os.listdir(self.progress_dir):
            if name.startswith(_NOT_PASSED):
                with open(os.path.join(self.progress_dir, name), encoding="utf-8") as f:
                    failing.update(line.rstrip("\n") for line in f if line.strip())
        skip_file = self.config.getoption("ootci_retry_skip")
        if skip_file:
            with open(skip_file, encoding="utf-8") as f:
                failing.difference_update(line.rstrip("\n") for line in f)
        queue = [i for i, item in enumerate(items) if self.ids(item.nodeid) in failing]
        if not queue:
            return
        junit = _StreamingJUnit(path, self.config.getoption("ootci_suite") or "pytest")
        try:
            self._run_forks({self._fork(_RETRY_CHILD, queue, items, junit): (_RETRY_CHILD, queue)}, items, junit)
            junit.finish(0)
        finally:
            junit.close()

    def _fork(self, k: int, queue: list[int], items: list[pytest.Item], junit: _StreamingJUnit | None = None) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 0
        try:
            self.worker = f"fork{k}"
            if junit is not None:  # the retry: its results go to a file of their own
                self.junit, self.retrying = junit, True
            if self.progress_dir:  # the report of a crash, for the parent to read
                fault = open(os.path.join(self.progress_dir, f"{self.worker}.fault"), "w")
                faulthandler.enable(file=fault)
                self.stderr_fd = fault.fileno()
            for pos, index in enumerate(queue):
                nextitem = items[queue[pos + 1]] if pos + 1 < len(queue) else None
                items[index].config.hook.pytest_runtest_protocol(item=items[index], nextitem=nextitem)
        except BaseException:  # noqa: B036 - whatever it is, this child ends here and says so
            code = 3
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # the parent finishes the session: no second sessionfinish, no atexit

    def _after_death(self, k: int, queue: list[int], items: list[pytest.Item], status: int,
                     junit: _StreamingJUnit | None = None) -> list[int]:
        """Record the test a child died in (in `junit`, else the session's file); the rest of its
        queue, for a new child."""
        worker = f"fork{k}"
        progress = self._progress(worker)
        nodeid = progress.get("nodeid")
        positions = {self.ids(items[i].nodeid): pos for pos, i in enumerate(queue)}
        if not isinstance(nodeid, str) or nodeid not in positions:
            return []  # it died outside any test: the rest is reported as never run
        if os.WIFSIGNALED(status):
            name = signal.Signals(os.WTERMSIG(status)).name
            how = f"the test process was killed by {name}"
        else:
            how = f"the test process exited with code {os.WEXITSTATUS(status)}"
        report = ""
        try:
            with open(os.path.join(self.progress_dir, f"{worker}.fault"), encoding="utf-8", errors="replace") as f:
                report = f.read()
        except OSError:
            pass
        frame = _innermost_test_frame(report)
        if self.timeout > 0 and time.time() - progress.get("started", time.time()) >= self.timeout:
            forced = ("timeout", f"test exceeded its {self.timeout:g} s time limit in code that never returned to "
                                 f"Python; faulthandler ended the process" + (f" at {frame}" if frame else ""))
        else:
            forced = ("crashed", f"crashed: {how}" + (f" at {frame}" if frame else ""))
        junit = junit or self.junit
        if junit is not None:
            junit.write_died(nodeid, forced, report)
            if junit is self.junit:
                self._not_passed(nodeid)
        return queue[positions[nodeid] + 1:]

    def _not_passed(self, test_id: str) -> None:
        """Note a test that did not pass, for the retry (--ootci-retry-junit): one line, appended."""
        if not self.progress_dir or self.retrying or not self.config.getoption("ootci_retry_junit"):
            return
        path = os.path.join(self.progress_dir, f"{_NOT_PASSED}{self.worker}.txt")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{test_id}\n".encode("utf-8", "replace"))
        finally:
            os.close(fd)

    def _progress(self, worker: str) -> dict:
        try:
            with open(os.path.join(self.progress_dir, f"{worker}.json"), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError, TypeError):
            return {}

    # -- the test in progress and its time limit ----------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        test_id = self.ids(item.nodeid)
        self._write_progress(test_id)
        armed = self._arm(test_id)
        try:
            yield
        finally:
            if armed:
                self._disarm()

    def _write_progress(self, nodeid: str) -> None:
        """`<worker>.json` names the test in progress: one pwrite per test into a file kept open (a new
        file and a rename per test cost more than many a test). Space-padded to the longest record
        so far, so that a shorter one leaves no bytes of the last; readers read it once the writer
        is gone, and JSON allows the trailing spaces."""
        if not self.progress_dir:
            return
        data = json.dumps({"nodeid": nodeid, "started": time.time(), "timeout": self.timeout,
                           "pid": os.getpid()}).encode("utf-8", "replace")
        path = os.path.join(self.progress_dir, f"{self.worker}.json")
        if self.progress_file != path:  # this process's first test (or a fork's, under its own name)
            self.progress_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self.progress_file, self.progress_len = path, 0
        assert self.progress_fd is not None  # opened with progress_file
        os.pwrite(self.progress_fd, data.ljust(self.progress_len), 0)
        self.progress_len = max(self.progress_len, len(data))

    def _arm(self, nodeid: str) -> bool:
        if self.timeout <= 0:
            return False
        limit = self.timeout

        def on_alarm(signum, frame):
            raise OotciTestTimeout(f"test exceeded its {limit:g} s time limit: {nodeid}")

        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, limit)
        else:
            self._previous_handler = None
        self._arm_native(limit)
        return True

    def _arm_native(self, limit: float) -> None:
        """faulthandler ends a process stuck in native code, past the limit and a grace. Arming it
        starts a thread, and cancelling joins it: per test, more CPU than many a test. So it is armed
        for the limit, the grace and a slack as long again, and armed anew only once the slack is
        used up: such a test is ended between limit + grace and limit + 2 x grace after it started
        (and the watchdog is cancelled when the session ends)."""
        grace = max(NATIVE_GRACE_S, 0.1 * limit)
        now = time.monotonic()
        if self.native_armed_at is not None and now - self.native_armed_at < grace:
            return
        faulthandler.dump_traceback_later(limit + 2 * grace, exit=True, file=self.stderr_fd)
        self.native_armed_at = now

    def _disarm(self) -> None:
        if self._previous_handler is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous_handler)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.import_error:
            raise BackendImportFailed(self.import_error)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        if call.excinfo is not None and call.excinfo.errisinstance(OotciTestTimeout):
            report.user_properties.append(("ootci.outcome", "timeout"))
        elif call.excinfo is not None and call.excinfo.errisinstance(BackendImportFailed):
            # The test could not start: it failed, with the import error as its message.
            report.user_properties.append(("ootci.outcome", "failed"))

    # -- results ----------------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.junit is None:
            return
        in_a_phase = report.when in ("setup", "call", "teardown")
        crash = XDIST_CRASH.search(str(report.longrepr or "")) if not in_a_phase else None
        if crash:
            reports = self.pending.pop(report.nodeid, [])
            worker = crash.group("worker")
            test_id = self.ids(report.nodeid)
            if self._worker_timed_out(worker, test_id):
                message = (f"test exceeded its {self.timeout:g} s time limit in code that never returned to "
                           f"Python; faulthandler ended worker {worker!r}")
                self.junit.write_case(test_id, reports + [report], forced=("timeout", message))
            else:
                self.junit.write_case(test_id, reports + [report], forced=("crashed", None))
            return
        self.pending.setdefault(report.nodeid, []).append(report)
        if report.when == "teardown":
            test_id = self.ids(report.nodeid)
            if self.junit.write_case(test_id, self.pending.pop(report.nodeid)) in _RETRIED:
                self._not_passed(test_id)

    def _worker_timed_out(self, worker: str, nodeid: str) -> bool:
        if not self.progress_dir or self.timeout <= 0:
            return False
        progress = self._progress(worker)
        return progress.get("nodeid") == nodeid and time.time() - progress.get("started", 0) >= self.timeout

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        report = (yield).get_result()
        if report.failed and self.import_error and _is_worker(self.config):
            # The controller writes the JUnit file and has not imported the backend: the
            # report, serialized to it, carries the reason.
            report.sections.append((IMPORT_ERROR_SECTION, self.import_error))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if self.junit is None or report.passed:
            return
        forced = None
        import_error = self.import_error or next(
            (content for title, content in report.sections if title == IMPORT_ERROR_SECTION), None)
        if import_error:
            # A test module importing the backend itself fails to collect, before any
            # runtest_setup could give the reason: the import error is the message.
            forced = ("error", f"{import_error} (collecting: {_short_message(report)})")
        self.junit.write_case(self.ids(report.nodeid) or "(collection)", [report], forced=forced)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.junit is not None:
            # Tests whose teardown never reported (an interrupted session) still count.
            for nodeid, reports in list(self.pending.items()):
                self.junit.write_case(self.ids(nodeid), reports)
            self.pending.clear()
            self.junit.finish(int(exitstatus))


_STATE = pytest.StashKey[_State]()
_NOT_PASSED = "not-passed-"
"""the files (one per forked child, in the progress folder) naming the tests that did not pass"""
_RETRY_CHILD = -1
"""the retry's fork, among the children"""
_RETRIED = frozenset({"failed", "error", "timeout"})
"""outcomes re-run by --ootci-retry-junit (a crash is noted where the parent records it)"""


# -- the JUnit file ---------------------------------------------------------------------

def _clean(text: str) -> str:
    return _XML_INVALID.sub("\ufffd", text)


def _attr(value: object) -> str:
    return quoteattr(_clean(str(value)))


def _head(text: str, limit: int = TAIL_CHARS - 1000) -> str:
    """faulthandler's report starts with the signal and the innermost frames: keep its start."""
    return text if len(text) <= limit else text[:limit] + "\n..."


def _tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


_TEST_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>test\w*)')


def _innermost_test_frame(report: str) -> str | None:
    """`file:line in test_x` of faulthandler's report: the test function the crash came through."""
    found = _TEST_FRAME.search(report)  # faulthandler prints the innermost frame first
    if not found:
        return None
    return f"{os.path.basename(found.group('file'))}:{found.group('line')} in {found.group('func')}"


def _classname_and_name(nodeid: str) -> tuple[str, str]:
    parts = nodeid.split("::")
    module = parts[0]
    if module.endswith(".py"):
        module = module[:-3]
    module = module.replace("/", ".").replace("\\", ".")
    if len(parts) == 1:
        return module, module
    return ".".join([module] + parts[1:-1]), parts[-1]


def _short_message(report) -> str:
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:  # a skip: (path, line, reason)
        reason = str(report.longrepr[2])
        return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message)
    text = str(report.longrepr or "").strip()
    return text.splitlines()[-1] if text else ""


def _outcome(reports: list) -> tuple[str, pytest.TestReport | None]:
    """The test's outcome and the report that decided it."""
    for report in reports:
        for key, value in getattr(report, "user_properties", ()):
            if key == "ootci.outcome":
                return str(value), report
    by_phase = {getattr(r, "when", "collect"): r for r in reports}
    call = by_phase.get("call")
    for report in reports:
        if report.failed and getattr(report, "when", "collect") in ("setup", "teardown", "collect"):
            if report is by_phase.get("teardown") and call is not None and call.failed:
                return "failed", call
            return "error", report
    if call is not None:
        if hasattr(call, "wasxfail"):
            return ("xfailed" if call.skipped else "xpassed"), call
        if call.failed:
            return "failed", call
        if call.skipped:
            return "skipped", call
        return "passed", None
    for report in reports:
        if report.skipped:
            if hasattr(report, "wasxfail"):
                return "xfailed", report
            return "skipped", report
    return "passed", None


class _StreamingJUnit:
    """A JUnit XML file that is valid up to the last finished test at every moment.

    Each test case is one os.write on an O_APPEND descriptor; the closing tags come
    at the end of the session. A reader must therefore accept a file without them
    (runner/junit.py does).
    """

    def __init__(self, path: str, suite: str):
        self.path = path
        self.collected_written = False
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._write('<?xml version="1.0" encoding="utf-8"?>\n<testsuites>\n'
                    f'<testsuite name={_attr(suite)} timestamp={_attr(time.strftime("%Y-%m-%dT%H:%M:%S"))}>\n')

    def _write(self, text: str) -> None:
        if self.fd is not None:
            os.write(self.fd, text.encode("utf-8", "replace"))

    def write_collected(self, ids: list[str]) -> None:
        tmp = f"{self.path}.collected.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(f"{nodeid}\n" for nodeid in ids)
        os.replace(tmp, f"{self.path}.collected")
        self.collected_written = True

    def write_case(self, nodeid: str, reports: list, forced: tuple[str, str | None] | None = None) -> str:
        """nodeid: the test's id as the runner knows it; forced: (outcome, message) decided by the
        caller, e.g. for a crashed xdist worker. Returns the outcome written."""
        outcome, deciding = _outcome(reports)
        if forced:
            outcome, deciding = forced[0], reports[-1]
        classname, name = _classname_and_name(nodeid)
        duration = sum(float(getattr(r, "duration", 0) or 0) for r in reports)
        first = reports[0]
        location = getattr(first, "location", None) or (nodeid.split("::")[0], None, "")
        attrs = f"classname={_attr(classname)} name={_attr(name)} file={_attr(location[0])}"
        if location[1] is not None:
            attrs += f" line={_attr(location[1] + 1)}"
        parts = [f"<testcase {attrs} time={_attr(f'{duration:.3f}')}>"]
        props = [("nodeid", nodeid), ("ootci.outcome", outcome)]
        for report in reports:  # every phase's report carries the properties recorded so far
            props += [(k, v) for k, v in getattr(report, "user_properties", ()) if k != "ootci.outcome"]
        props = list(dict.fromkeys((str(k), str(v)) for k, v in props))
        parts.append("<properties>" + "".join(
            f"<property name={_attr(k)} value={_attr(v)}/>" for k, v in props) + "</properties>")
        detail = ""
        if deciding is not None and outcome != "passed":
            message = ((forced and forced[1]) or _short_message(deciding))[:MESSAGE_CHARS]
            detail = "" if outcome in ("skipped", "xfailed") else _tail(str(deciding.longreprtext or ""))
            tag = {"failed": "failure", "timeout": "failure", "xpassed": None,
                   "skipped": "skipped", "xfailed": "skipped"}.get(outcome, "error")
            if tag:
                parts.append(f"<{tag} type={_attr(outcome)} message={_attr(message)}>{escape(_clean(detail))}</{tag}>")
        # A later phase's report repeats the sections captured in the earlier ones.
        sections = dict.fromkeys(tuple(section) for r in reports for section in getattr(r, "sections", ())
                                 if section[0] != IMPORT_ERROR_SECTION)  # already the message
        # pytest's failure text already carries the captured output; do not repeat it.
        output = "".join(f"--- {title} ---\n{content}\n" for title, content in sections if content not in detail)
        if output:
            parts.append(f"<system-out>{escape(_clean(_tail(output)))}</system-out>")
        parts.append("</testcase>\n")
        self._write("".join(parts))
        return outcome

    def write_died(self, nodeid: str, forced: tuple[str, str], report: str) -> None:
        """The case of a test its forked child died in: no pytest report exists for it."""
        outcome, message = forced
        classname, name = _classname_and_name(nodeid)
        props = "".join(f"<property name={_attr(k)} value={_attr(v)}/>"
                        for k, v in (("nodeid", nodeid), ("ootci.outcome", outcome)))
        tag = "failure" if outcome == "timeout" else "error"
        self._write(f"<testcase classname={_attr(classname)} name={_attr(name)} time=\"0.000\">"
                    f"<properties>{props}</properties>"
                    f"<{tag} type={_attr(outcome)} message={_attr(message[:MESSAGE_CHARS])}>"
                    f"{escape(_clean(_head(report)))}</{tag}></testcase>\n")

    def finish(self, exitstatus: int) -> None:
        self._write(f"<!-- ootci: session finished, exit status {exitstatus} -->\n</testsuite>\n</testsuites>\n")
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

