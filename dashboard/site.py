"""`ootci dashboard build`: RunRecords in, a static site out, never half-written.

A build (1) finds every record.json under the data dir and parses only the new or
changed ones into the SQLite index, (2) decides which pages changed, (3) writes them
into a staging directory next to the site that starts as a hard-linked copy of the
current site, and (4) swaps the staging directory in. The index transaction commits
only after the swap, so a failed build leaves both the old site and the old index.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from ootci.dashboard import analysis, causes, performance, records, render, upstream
from ootci.dashboard.records import (
    BadRecord,
    Digest,
    FoundFile,
    discover,
    load,
    load_tests,
    reset_worker,
    summarize,
    summarize_file,
)
from ootci.dashboard.store import Index, Run, safe_name
from ootci.runner import models
from ootci.runner.core import atomic, procs
from ootci.runner.history import history_store
from ootci.runner.records import packed_tests, record_files

STAMP = ".ootci-build.json"
# Two weeks of nights: 100 backends' pages stay well under GitHub Pages' 1 GB (docs/dashboard.md).
DEFAULT_RUN_PAGES = history_store.PAGED_RUNS  # what a nightly's `ootci history pull` fetches
PARALLEL_FROM = 64  # records; fewer are parsed in-process
PAGE_ROWS_BYTES = 500_000
"""HTML of the tests one run page lists at most (the worst first): a run of 100,000 tests with
5,000 failures keeps its page under 1 MB, the rest is in its JSON (tests_api)"""
TESTSETS = "api/testsets"
"""the test sets the runs' JSON lists are packed against, shared by the runs of the same tests"""


@dataclass
class BuildReport:
    records: int = 0
    parsed: int = 0
    removed: int = 0
    skipped: list[str] = field(default_factory=list)
    full: bool = False
    run_pages_written: int = 0
    run_pages_deleted: int = 0
    backend_pages: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        kind = "full" if self.full else "incremental"
        return (f"dashboard: {kind} build, {self.records} records ({self.parsed} parsed, {self.removed} removed, "
                f"{len(self.skipped)} skipped), {self.backend_pages} backend pages, "
                f"{self.run_pages_written} run pages written, {self.run_pages_deleted} removed")


def default_state(site: Path) -> Path:
    return site.with_name(site.name + ".state")


def build(data_dir: Path, site: Path, *, state: Path | None = None, run_pages: int | None = DEFAULT_RUN_PAGES,
          jobs: int | None = None, rebuild: bool = False, warn=None,
          background_cleanup: bool = False) -> BuildReport:
    """Build or update the site. run_pages: run pages kept per backend (None: every run).

    background_cleanup: delete the replaced site in a detached process instead of waiting.
    """
    warn = warn or (lambda line: print(f"ootci: warning: {line}", file=sys.stderr))
    data_dir, site = data_dir.resolve(), site.resolve()
    state = (state or default_state(site)).resolve()
    state.mkdir(parents=True, exist_ok=True)
    with FileLock(str(state / "build.lock")):
        index = Index(state / "index.sqlite")
        try:
            builder = _Build(data_dir, site, index, run_pages, jobs, rebuild, warn)
            builder.background_cleanup = background_cleanup
            return builder.run()
        finally:
            index.close()


class _Build:
    background_cleanup = False  # build() says otherwise

    def __init__(self, data_dir: Path, site: Path, index: Index, run_pages: int | None, jobs: int | None,
                 rebuild: bool, warn):
        self.data_dir, self.site, self.index = data_dir, site, index
        self.run_pages, self.jobs, self.rebuild, self.warn = run_pages, jobs, rebuild, warn
        self.report = BuildReport()
        self.dirty_backends: set[str] = set()
        self.dirty_prs: set[int] = set()
        self.removed_runs: list[Run] = []
        self.replaced: list[Run] = []  # rows of records that changed: their old page goes
        # (backend, started_at) of nightly runs added, changed or removed: PR pages compare with them.
        self.nightlies: list[tuple[str, str]] = []
        self.staging = site.parent / f".{site.name}.building-{os.getpid()}"
        index.digester = self._digest_run
        self.unreadable: set[str] = set()  # records whose tests were found unreadable (warned once)

    def _digest_run(self, rel: str) -> Digest | None:
        """A run's tests, read because a page needs them and no run page was written for it."""
        path = self.data_dir / rel
        try:
            return records.digest(load_tests(path, load(path)))
        except BadRecord as exc:
            shared = records.testset_digest(path)
            if shared is not None:
                return shared  # a run a partial pull did not fetch: its test set is at hand
            self.unreadable.add(rel)
            self.warn(f"tests not read: {exc}")
            return None

    def _tick(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self.report.seconds[name] = round(now - since, 3)
        return now

    def run(self) -> BuildReport:
        t = time.perf_counter()
        self.index.begin()
        try:
            build_id = uuid.uuid4().hex
            self.report.full = self._needs_full()
            if self.report.full:
                self.index.forget_pages()
            t = self._tick("check", t)
            self._ingest()
            t = self._tick("ingest", t)
            self._prepare_staging()
            t = self._tick("staging", t)
            self._render(build_id)
            t = self._tick("render", t)
            self._swap()
            self.index.set_meta("build_id", build_id)
            self.index.set_meta("renderer", render.RENDERER_VERSION)
            self.index.set_meta("run_pages", str(self.run_pages))
            self.index.commit()
            self._tick("swap", t)
        except BaseException:
            self.index.rollback()
            shutil.rmtree(self.staging, ignore_errors=True)
            raise
        return self.report

    # --- 1. what changed -------------------------------------------------------------
    def _needs_full(self) -> bool:
        if self.rebuild or not self.site.is_dir():
            return True
        try:
            stamp = json.loads((self.site / STAMP).read_text())
        except (OSError, ValueError):
            return True
        return (stamp.get("build_id") != self.index.meta("build_id")
                or self.index.meta("run_pages") != str(self.run_pages)
                or stamp.get("renderer") != render.RENDERER_VERSION
                or self.index.meta("renderer") != render.RENDERER_VERSION)

    def _ingest(self) -> None:
        found = discover(self.data_dir) if self.data_dir.is_dir() else []
        if not self.data_dir.is_dir():
            self.warn(f"{self.data_dir}: no such directory; building an empty dashboard")
        self.report.records = len(found)
        known = self.index.known_files()
        present = {f.rel for f in found}
        changed = [f for f in found if known.get(f.rel, (None, None, None))[1:] != (f.mtime_ns, f.size)]
        for rel in sorted(set(known) - present):
            self._forget(rel)
        for result, f in zip(self._summaries(changed), changed, strict=True):
            if isinstance(result, str):
                self.report.skipped.append(result)
                self.warn(f"skipped {result}")
                if f.rel in known:  # was good, is bad now: it no longer counts
                    self._forget(f.rel)
                continue
            self.report.parsed += 1
            old = self.index.upsert(result, known=f.rel in known)
            self.dirty_backends.add(result.backend)
            if result.pr is not None:
                self.dirty_prs.add(result.pr)
            if result.trigger == "nightly":
                self.nightlies.append((result.backend, result.started_at))
            if old is not None:
                self.replaced.append(old)
                self.dirty_backends.add(old.backend)
                self._touch_prs(old)

    def _forget(self, rel: str) -> None:
        run = self.index.delete(rel)
        if run is not None:
            self.report.removed += 1
            self.removed_runs.append(run)
            self.dirty_backends.add(run.backend)
            self._touch_prs(run)

    def _touch_prs(self, run: Run) -> None:
        """Mark the PR pages that show this run, as a PR run or as the nightly compared with."""
        if run.pr is not None:
            self.dirty_prs.add(run.pr)
        if run.trigger == "nightly":
            self.nightlies.append((run.backend, run.started_at))

    def _summaries(self, changed: list[FoundFile]):
        jobs = self.jobs or os.cpu_count() or 1
        if len(changed) < PARALLEL_FROM or jobs < 2:
            seen: set[str] = set()
            for f in changed:
                try:
                    yield summarize(load(self.data_dir / f.rel), f, seen)
                except BadRecord as exc:
                    yield str(exc)
            return
        with ProcessPoolExecutor(jobs, initializer=reset_worker) as pool:
            yield from pool.map(summarize_file, [str(self.data_dir)] * len(changed), changed, chunksize=128)

    # --- 2. staging -----------------------------------------------------------------
    def _prepare_staging(self) -> None:
        # Left behind by a build that was killed: nothing else uses them while we hold the lock.
        for stale in self.site.parent.glob(f".{self.site.name}.building-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if self.report.full or not self.site.is_dir():
            self.staging.mkdir(parents=True)
            return
        link_tree(self.site, self.staging)

    def put(self, rel: str, text: str) -> None:
        """Write a site file in staging without touching the live file it may be linked to."""
        path = self.staging / rel
        if path.exists():
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def _swap(self) -> None:
        old = self.site.parent / f".{self.site.name}.old-{uuid.uuid4().hex[:12]}"
        if self.site.exists():
            os.rename(self.site, old)
        os.rename(self.staging, self.site)
        if not old.exists():
            return
        if self.background_cleanup:
            # The new site is live; deleting the old copy is only I/O, so a detached process
            # does it and the build returns now.
            procs.start_detached([sys.executable, "-c", "import shutil, sys; shutil.rmtree(sys.argv[1], True)", old])
        else:
            shutil.rmtree(old, ignore_errors=True)

    # --- 3. pages -------------------------------------------------------------------
    def _render(self, build_id: str) -> None:
        full = self.report.full
        backends = self.index.backends()
        cache = {} if full else self.index.backend_cache()
        # Backends whose runs changed are worked out from their whole history; the others
        # reuse what the last build derived (their index row, API entry, kept run pages).
        # A new or grown bisection changes its backend's page even when no run did.
        self.bisections = records.latest_bisections(self.data_dir)
        fresh = {b: self.index.runs(b) for b in backends if full or b in self.dirty_backends or b not in cache
                 or cache[b].get("bisection") != _bisection_key(self.bisections.get(b))}
        wanted = {b: self._wanted_pages(runs) for b, runs in fresh.items()}
        want_ids = {r.id for runs in wanted.values() for r in runs}
        for b in backends:
            if b not in fresh:
                want_ids.update(cache[b]["wanted"])
        have = self.index.page_runs()

        # Run pages that leave the site: removed or changed records, runs past the retention.
        for run in self.removed_runs + self.replaced:
            if run.page:
                self._drop_page(run.files)
        stale = [i for i in have if i not in want_ids]
        for i in stale:
            self._drop_page(have[i])
        if not full:  # PR pages that link a page now gone are written again
            for run in self.index.rows(stale):
                self._touch_prs(run)
        self.index.clear_pages(stale)

        # Worker processes write the run pages while this one writes everything else. The
        # backend pages need what the pages of the latest runs read (their tests' digest),
        # so those pages come first and are waited for.
        latest = {(analysis.mainline(runs) or runs)[-1].id for runs in fresh.values() if runs}
        to_write = sorted((r for runs in wanted.values() for r in runs if r.id not in have),
                          key=lambda r: r.id not in latest)
        # Each cause's first night, from the backend's history, for the run pages' causes tables.
        since = {run_id: {text: causes.since_entry(s, "../../", want_ids) for text, s in found.items()}
                 for b, runs in fresh.items()
                 for run_id, found in analysis.cause_history(analysis.with_results(analysis.mainline(runs))).items()}
        pages = _RunPages(self, to_write, latest, since)
        try:
            pages.take(sum(1 for r in to_write if r.id in latest))
            self._write_other_pages(build_id, backends, fresh, wanted, cache, want_ids)
            pages.take()
        finally:
            pages.close()
        self.index.set_pages(pages.written)
        self._drop_unused_testsets()

    def _drop_unused_testsets(self) -> None:
        """The test sets no run page of the site refers to any more."""
        used = {rel for files in self.index.page_runs().values() for rel in files if rel.startswith(f"{TESTSETS}/")}
        for path in (self.staging / TESTSETS).glob("*.json.gz"):
            if f"{TESTSETS}/{path.name}" not in used:
                path.unlink()

    def _write_other_pages(self, build_id: str, backends: list[str], fresh: dict[str, list[Run]],
                           wanted: dict[str, list[Run]], cache: dict[str, dict], paged: set[int]) -> None:
        """Backend, PR, index and coverage pages, badges, the API and the assets."""
        full = self.report.full

        for gone in set(cache) - set(backends) | ({r.backend for r in self.removed_runs} - set(backends)):
            for rel in (render.backend_href(gone), f"badges/{safe_name(gone)}.svg",
                        f"api/backends/{safe_name(gone)}.json"):
                if (self.staging / rel).exists():
                    (self.staging / rel).unlink()
            shutil.rmtree(self.staging / "runs" / safe_name(gone), ignore_errors=True)
            self.index.drop_backend_cache(gone)

        generated = render.now_iso()
        for b, runs in fresh.items():
            perf = performance.section(analysis.mainline(runs) or runs)
            summary = self._backend_summary(b, runs, paged, perf)
            self._write_backend(summary, runs, paged, perf)
            self.report.backend_pages += 1
            cache[b] = {"row": str(render.page("_index_row.html.j2", s=summary)), "api": summary["api"],
                        "new_causes": summary["causes"]["new_causes"],
                        "wanted": [r.id for r in wanted[b]], "latest_id": summary["latest"].id,
                        "bisection": _bisection_key(self.bisections.get(b))}
            self.index.set_backend_cache(b, cache[b])

        prs = self.index.prs()
        if not full:
            for backend, started_at in self.nightlies:
                self.dirty_prs |= self.index.prs_after_nightly(backend, started_at)
        for pr in (p for p, _, _ in prs) if full else sorted(self.dirty_prs):
            runs = self.index.pr_runs(pr)
            if runs:
                self.put(f"prs/{pr}.html", render.page(
                    "pr.html.j2", root="../", pr=pr, heads=analysis.pr_heads(self.index, runs),
                    pull_url=analysis.pull_url(pr), shown=analysis.NEW_VS_NIGHTLY_SHOWN, paged=paged,
                    generated=generated))
            elif (self.staging / f"prs/{pr}.html").exists():
                (self.staging / f"prs/{pr}.html").unlink()

        entries = [cache[b] for b in backends]
        shared = analysis.shared_causes({b: [tuple(c) for c in cache[b].get("new_causes", [])] for b in backends})
        self.put("index.html", render.page("index.html.j2", root="", rows=[render.Markup(e["row"]) for e in entries],
                                           prs=prs[:30], generated=generated, skipped=self.report.skipped,
                                           shared_causes=shared))
        self._put_coverage(self._coverage(cache, backends), generated)
        self.put("api/latest.json", render.dumps({
            "generated_at": generated, "schema_version": 1, "backends": [e["api"] for e in entries],
        }))
        for asset in ("style.css", "filter.js", "favicon.svg"):
            self.put(f"assets/{asset}", (Path(__file__).parent / "static" / asset).read_text())
        self.put(".nojekyll", "")
        self.put(STAMP, render.dumps({"build_id": build_id, "renderer": render.RENDERER_VERSION,
                                      "generated_at": generated}))

    def _wanted_pages(self, runs: list[Run]) -> list[Run]:
        """Runs that get a page: the latest N main-line and N PR runs, and the culprit pair."""
        if self.run_pages is None:
            return runs
        main = analysis.mainline(runs)
        prs = [r for r in runs if r.trigger == "pr"]
        keep = {r.id: r for r in main[-self.run_pages:] + prs[-self.run_pages:]} if self.run_pages else {}
        suspect = analysis.culprit(analysis.with_results(main))
        if suspect is not None:
            keep[suspect.red.id] = suspect.red
            if suspect.green is not None:
                keep[suspect.green.id] = suspect.green
        return list(keep.values())

    def _drop_page(self, files: list[str]) -> None:
        for rel in files:
            if rel.startswith(f"{TESTSETS}/"):
                continue  # shared with other runs' pages: _drop_unused_testsets
            path = self.staging / rel
            if path.is_file():
                path.unlink()
        if files:
            self.report.run_pages_deleted += 1

    def _backend_summary(self, name: str, runs: list[Run], paged: set[int],
                         perf: performance.Section | None = None) -> dict:
        main = analysis.mainline(runs) or runs
        latest = main[-1]
        green = analysis.last_green(main)
        base = f"backends/{safe_name(name)}"
        api = {
            "name": name, "device": latest.device, "status": latest.status,
            "run_id": latest.run_id, "started_at": latest.started_at, "trigger": latest.trigger,
            "torch": {"spec": latest.torch_spec, "version": latest.torch_version, "git_version": latest.torch_git},
            "stages": {s["name"]: s["status"] for s in latest.stages},
            "missing_reason": latest.missing_reason or None,
            "tests": latest.counts, "pass_rate": latest.pass_rate,
            "last_green": _run_ref(green),
            "page": f"{base}.html", "badge": f"badges/{safe_name(name)}.svg", "api": f"api/{base}.json",
            "run_page": render.run_href(latest) if latest.id in paged else None,
            "performance_regressions": [
                {"measurement": c.measurement, "metric": c.metric, "relative": round(c.open_regression.relative, 4),
                 "first_bad": c.open_regression.first_bad.run_id} for c in perf.regressions
                if c.open_regression is not None] if perf else [],
        }
        # The latest run's upstream suite: read after its run page, which digested its tests.
        up = upstream.section(latest.upstream, self.index.upstream_files(latest.id) if latest.upstream else None)
        api["upstream"] = up
        slower = perf.slower if perf else []
        counted = causes.counted(latest)
        api["causes"] = {"causes": counted["causes"], "new": counted["new"]}
        return {"name": name, "latest": latest, "green": green, "spark": main[-analysis.FLAKY_WINDOW:],
                "api": api, "paged": latest.id in paged, "runs": len(main), "slower": slower, "upstream": up,
                "causes": counted}

    def _write_backend(self, summary: dict, runs: list[Run], paged: set[int],
                       perf: performance.Section | None = None) -> None:
        name = summary["name"]
        main = analysis.mainline(runs) or runs
        pr_runs = [r for r in runs if r.trigger == "pr"]
        # Runs that left no record (missing) are listed, but say nothing of tests or culprits.
        judged = analysis.with_results(main)
        suspect = analysis.culprit(judged)
        changes = analysis.changes(self.index, judged)
        flaky = analysis.flaky(self.index, judged)
        xfail = analysis.expected_failures(self.index, judged[-1] if judged else None)
        cause_rows = causes.run_rows(judged[-1], analysis.cause_history(judged)[judged[-1].id], paged) \
            if judged else []
        hrefs = {r.id: "../" + render.run_href(r) for r in main if r.id in paged}
        bisection = self.bisections.get(name)
        self.put(render.backend_href(name), render.page(
            "backend.html.j2", root="../", s=summary, runs=list(reversed(main)), pr_runs=list(reversed(pr_runs)),
            culprit=suspect, changes=changes, flaky=flaky, xfail=xfail, paged=paged, causes=cause_rows,
            hidden=sum(1 for r in main if r.id not in paged),
            trend=render.trend(main, hrefs), reproduce=reproduce_command(main[-1]),
            perf=perf, perf_charts={c.anchor: performance.chart(c, hrefs) for c in perf.charts} if perf else {},
            perf_number=performance.number,
            bisection=bisection[0] if bisection else None, generated=render.now_iso()))
        self.put(f"badges/{safe_name(name)}.svg", render.badge(name, summary["latest"].status))
        api = dict(summary["api"])
        api.update({
            "culprit": None if suspect is None else {
                "last_green": _run_ref(suspect.green), "first_red": _run_ref(suspect.red),
                "red_runs": suspect.red_runs, "compare_url": suspect.compare_url},
            "new_failures": [{"test": t, "outcome": o} for t, o in changes.new_failures],
            "new_tests_failing": [{"test": t, "outcome": o} for t, o in changes.new_tests_failing],
            "newly_fixed": [{"test": t, "was": o} for t, o in changes.fixed],
            "flaky": [vars(f) for f in flaky],
            "expected_failures": [{"test": t, "outcome": o, "reason": why} for t, o, why in xfail],
            "causes": [{k: c.get(k) for k in ("text", "novelty", "count", "stage", "example", "ops", "dtypes",
                                              "was", "first_run", "culprit_url")} for c in cause_rows],
            "reproduce": reproduce_command(main[-1]),
            "bisection": _bisection_api(bisection),
            "performance": performance.api(perf),
            "runs": [_run_entry(r, paged) for r in reversed(runs)],
        })
        self.put(f"api/backends/{safe_name(name)}.json", render.dumps(api))

    def _put_coverage(self, coverage: dict, generated: str) -> None:
        """coverage.html, and where the table outgrows one page (issue 51: at most 1 MB a page), its
        further pages under coverage/, each linked from every page; the pages of an earlier build go."""
        pages = render.coverage_pages(coverage["ops"], coverage["backends"], coverage["table"])
        shutil.rmtree(self.staging / "coverage", ignore_errors=True)
        rels = ["coverage.html", *(f"coverage/{n}.html" for n in range(2, len(pages) + 1))]
        nav = [{"href": rel, "first": ops[0] if ops else "", "last": ops[-1] if ops else ""}
               for rel, (ops, _) in zip(rels, pages, strict=True)]
        for n, (rel, (ops, rows)) in enumerate(zip(rels, pages, strict=True), start=1):
            root = "../" if "/" in rel else ""
            self.put(rel, render.page("coverage.html.j2", root=root, rows=rows, page_no=n, nav=nav,
                                      ops_shown=len(ops), ops_total=len(coverage["ops"]),
                                      backends=coverage["backends"], sources=coverage["sources"],
                                      generated=generated))

    def _coverage(self, cache: dict[str, dict], backends: list[str]) -> dict:
        """Ops x backends from each backend's newest run with OpInfo results."""
        table: dict[str, dict[str, dict]] = {}
        sources = {}
        for name in backends:
            run = self.index.latest_with_ops(name, within=analysis.FLAKY_WINDOW)
            if run is None:
                continue
            sources[name] = {"run": run, "latest": run.id == cache[name]["latest_id"]}
            for op, groups in self.index.ops(run.id).items():
                table.setdefault(op, {})[name] = {
                    "ok": sorted(groups.get("ok", [])), "bad": sorted(groups.get("bad", [])),
                    "skip": sorted(groups.get("skip", []))}
        return {"ops": sorted(table), "table": table, "backends": list(sources), "sources": sources}


class _RunPages:
    """Run pages being written, by worker processes when there are many; results are taken in order."""

    def __init__(self, build: _Build, runs: list[Run], latest: set[int], since: dict[int, dict[str, dict]]):
        self.build, self.runs = build, runs
        self.written: dict[int, list[str]] = {}
        self.taken = 0
        # Op coverage comes from the latest runs: only their pages work out the ops.
        work = [(str(build.data_dir), r.rel, str(build.staging), render.run_base(r),
                 render.backend_href(r.backend), r.id in latest, since.get(r.id)) for r in runs]
        jobs = build.jobs or os.cpu_count() or 1
        self.pool = None
        if len(work) >= 8 and jobs > 1:
            self.pool = ProcessPoolExecutor(min(jobs, len(work)), initializer=reset_worker)
            self.results = self.pool.map(write_run_page_in_worker, *zip(*work, strict=True), chunksize=4)
        else:
            self.results = iter([write_run_page(*w[:6], since=w[6]) for w in work])

    def take(self, count: int | None = None) -> None:
        """Wait for the next `count` pages (None: all the rest) and keep what they found."""
        end = len(self.runs) if count is None else self.taken + count
        for run in self.runs[self.taken:end]:
            problem, files, run_digest = next(self.results)
            self.taken += 1
            # A run page being written while its tests were read for a backend page: warned already.
            if problem and run.rel not in self.build.unreadable:
                self.build.warn(problem)
            self.written[run.id] = files
            self.build.report.run_pages_written += 1
            # The page read the run's tests: keep their digest, so no page reads them again.
            if run_digest is not None:
                self.build.index.set_digest(run.id, run_digest)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def _bisection_key(found) -> str | None:
    """What the backend page shows of a bisection changes exactly when this does."""
    if found is None:
        return None
    bisection, _ = found
    return f"{bisection.bisect_id}:{bisection.state}:{bisection.steps_taken()}"


def _bisection_api(found) -> dict | None:
    if found is None:
        return None
    bisection, rel = found
    result = bisection.result
    return {"bisect_id": bisection.bisect_id, "state": bisection.state, "good": bisection.good,
            "bad": bisection.bad, "steps": bisection.steps_taken(), "record": f"{rel}/bisect.json",
            "verdict": result.summary if result else None, "kind": result.kind if result else None,
            "cause": result.cause if result else None, "links": result.links if result else {}}


def _run_ref(run: Run | None) -> dict | None:
    if run is None:
        return None
    return {"run_id": run.run_id, "started_at": run.started_at, "status": run.status,
            "torch_version": run.torch_version, "torch_git": run.torch_git}


def _run_entry(run: Run, paged: set[int]) -> dict:
    return {
        "run_id": run.run_id, "started_at": run.started_at, "finished_at": run.finished_at,
        "status": run.status, "trigger": run.trigger, "pr": run.pr, "pr_head_sha": run.pr_head_sha,
        "torch": {"spec": run.torch_spec, "version": run.torch_version, "git_version": run.torch_git},
        "stages": {s["name"]: s["status"] for s in run.stages}, "missing_reason": run.missing_reason or None,
        "tests": run.counts, "pass_rate": run.pass_rate, "duration_s": run.duration_s,
        "page": render.run_href(run) if run.id in paged else None,
    }


def reproduce_command(run: Run) -> str:
    # Index rows written before records always had a command get one built the same way.
    return run.command or models.reproduce_command(
        run.backend, models.TorchInfo(spec=run.torch_spec or "nightly", version=run.torch_version,
                                      git_version=run.torch_git))


def write_run_page(data_dir: str, rel: str, staging: str, base: str, backend_href: str, with_ops: bool = True,
                   in_worker: bool = False, since: dict[str, dict] | None = None
                   ) -> tuple[str | None, list[str], Digest | None]:
    """Render one run page and copy its logs beside it; `since`: each cause's first night
    (dashboard.causes.since_entry).

    Returns a warning line (or None), the site files written, and the digest of the
    run's tests (None when they could not be read).
    """
    record_path = Path(data_dir) / rel
    try:
        record = load(record_path)
    except BadRecord as exc:
        return f"run page not written: {exc}", [], None
    try:
        tests, unreadable = load_tests(record_path, record), None
    except BadRecord as exc:
        tests, unreadable = [], str(exc)
    root = Path(staging)
    (root / base).parent.mkdir(parents=True, exist_ok=True)
    files, logs, problems = [], {}, []
    record_dir = record_path.parent.resolve()
    for stage in record.stages:
        if not stage.log:
            continue
        source = (record_dir / stage.log).resolve()
        # A record is untrusted: its log path must stay inside the record's directory.
        if not source.is_relative_to(record_dir) or not source.is_file():
            problems.append(stage.name)
            continue
        target = render.log_name(base, stage.name)
        _replace(root / target)
        shutil.copyfile(source, root / target)
        files.append(target)
        logs[stage.name] = target.rsplit("/", 1)[1]
    ordered, counts = render.sorted_tests(tests)
    up = upstream.section(upstream.stage_info(record), None if unreadable else upstream.file_summaries(tests))
    # The tests that did not pass are the page, worst first, as many as PAGE_ROWS_BYTES holds; the
    # passed ones (most of a run) are counted, never listed: every test is in the run's JSON.
    listed = [t for t in ordered if t["outcome"] != "passed"]
    rows, shown = render.test_rows(listed, budget=PAGE_ROWS_BYTES)
    api = tests_api(root, base, record, tests) if tests else []
    files += api
    text = render.page("run.html.j2", root="../../", r=record, logs=logs, missing_logs=problems,
                       artifacts=artifacts_link(record),
                       total=len(tests), unreadable=unreadable, rows=rows, shown=shown,
                       counts=[(o, n) for o, n in counts if o != "passed"], listed=len(listed),
                       passed=len(tests) - len(listed), tests_href=api[0].rsplit("/", 1)[-1] if api else None,
                       backend_href="../../" + backend_href,
                       reproduce=record.reproduce(), upstream=up,
                       causes=causes.record_rows(record, logs, since),
                       generated=render.now_iso())
    page = f"{base}.html"
    _replace(root / page)
    (root / page).write_text(text, encoding="utf-8")
    if record.tests_pruned_at is not None:
        return None, [page] + files, records.NO_TESTS  # pruned on purpose: nothing to warn about
    if unreadable:
        # Remembered as a run without tests, so later pages do not try (and warn) again.
        return f"run page without tests: {unreadable}", [page] + files, records.NO_TESTS
    if in_worker:
        return None, [page] + files, records.digest_in_worker(tests, record.test_ids_hash, with_ops)
    return None, [page] + files, records.digest(tests, with_ops=with_ops)


def tests_api(root: Path, base: str, record: models.RunRecord, tests: list) -> list[str]:
    """Every test of the run, in the history's packed form (runner/records/packed_tests.py): the
    run's `RUN.tests.json.gz` (outcomes, durations, and the messages and log tails of the tests that
    have any) against a test set, `api/testsets/<fingerprint>.json.gz`, that every run of the same
    tests shares. The site files written: the run's first, then its test set. None for tests whose
    ids repeat (a set is keyed by id): the page alone shows them."""
    try:
        rows = packed_tests.testset_rows(tests)
        fingerprint = record_files.ids_hash(row[0] for row in rows)
        results = packed_tests.pack(record.run_id, fingerprint, rows, tests)
    except packed_tests.PackError:
        return []
    own, shared = f"{base}.tests.json.gz", f"{TESTSETS}/{fingerprint}.json.gz"
    _replace(root / own)
    atomic.write_bytes(root / own, packed_tests.dumps(results))
    if not (root / shared).is_file():
        # Run pages are written side by side: the same set may come twice, each write whole.
        (root / shared).parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(root / shared, packed_tests.dumps(rows))
    return [own, shared]


def artifacts_link(record: models.RunRecord, now: dt.datetime | None = None) -> dict | None:
    """Where the logs the history does not keep are: the CI run's artifacts, until they expire."""
    if not record.ci_run_url:
        return None
    started = record.started_at if record.started_at.tzinfo else record.started_at.replace(tzinfo=dt.UTC)
    until = started + dt.timedelta(days=history_store.ARTIFACT_RETENTION_DAYS)
    return {"url": record.ci_run_url, "until": f"{until:%Y-%m-%d}",
            "expired": (now or dt.datetime.now(dt.UTC)) >= until}


def write_run_page_in_worker(data_dir: str, rel: str, staging: str, base: str, backend_href: str,
                             with_ops: bool = True, since: dict[str, dict] | None = None
                             ) -> tuple[str | None, list[str], Digest | None]:
    return write_run_page(data_dir, rel, staging, base, backend_href, with_ops, in_worker=True, since=since)


def _replace(path: Path) -> None:
    """Unlink before writing: in staging the old file is a hard link into the live site."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def link_tree(source: Path, target: Path) -> None:
    """Copy a directory tree as hard links (a copy where links are not possible)."""
    for dirpath, _dirnames, filenames in os.walk(source):
        rel = os.path.relpath(dirpath, source)
        dest = target / rel if rel != "." else target
        dest.mkdir(parents=True, exist_ok=True)
        for name in filenames:
            src = os.path.join(dirpath, name)
            try:
                os.link(src, dest / name)
            except OSError:
                shutil.copy2(src, dest / name)
