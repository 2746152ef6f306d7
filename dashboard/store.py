"""The SQLite index of run summaries: the dashboard's memory between builds.

Records are immutable files; the index remembers each by relative path, mtime and
size, so a build parses only new or changed records and every page is rendered from
here. `page` says whether the current site holds the run's page.
"""

from __future__ import annotations

import json
import re
import sqlite3
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ootci.dashboard.records import FAILING, NO_TESTS, Digest, RunSummary

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs(
  id INTEGER PRIMARY KEY,
  rel TEXT UNIQUE NOT NULL,
  mtime_ns INTEGER NOT NULL,
  size INTEGER NOT NULL,
  run_id TEXT NOT NULL,
  backend TEXT NOT NULL,
  device TEXT NOT NULL,
  trigger TEXT NOT NULL,
  pr INTEGER,
  pr_head_sha TEXT,
  started_at TEXT NOT NULL,
  finished_at TEXT,
  status TEXT NOT NULL,
  torch_spec TEXT,
  torch_version TEXT,
  torch_git TEXT,
  command TEXT,
  duration_s REAL,
  pass_rate REAL,
  stages TEXT NOT NULL,
  counts TEXT NOT NULL,
  notable BLOB NOT NULL,
  testset TEXT,
  digested INTEGER NOT NULL,
  ops BLOB,
  problems TEXT,
  slug TEXT NOT NULL,
  page INTEGER NOT NULL DEFAULT 0,
  page_files TEXT,
  xfail TEXT,
  bench TEXT,
  upstream TEXT,
  upstream_files TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_backend ON runs(backend, started_at);
CREATE INDEX IF NOT EXISTS runs_by_pr ON runs(pr) WHERE pr IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS runs_slug ON runs(backend, slug);
CREATE TABLE IF NOT EXISTS testsets(hash TEXT PRIMARY KEY, ids BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS backend_cache(backend TEXT PRIMARY KEY, data TEXT NOT NULL);
"""

# Columns every page needs; the big blobs (notable, ops, upstream_files) are fetched only on demand.
LIGHT = ("id, rel, run_id, backend, device, trigger, pr, pr_head_sha, started_at, finished_at, status, torch_spec, "
         "torch_version, torch_git, command, duration_s, pass_rate, stages, counts, slug, page, page_files, problems, "
         "bench, upstream")
# The index is a cache of what the records say: a different layout is simply rebuilt.
INDEX_VERSION = "8"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file-name-safe spelling of a backend name or run id (never empty, no dot-only names)."""
    cleaned = _UNSAFE.sub("_", text).strip("._") or "_"
    return cleaned[:100]


@dataclass
class Run:
    """One row of the index, with its JSON columns decoded when first used."""

    row: sqlite3.Row

    def __getattr__(self, name):
        try:
            return self.row[name]
        except IndexError:
            raise AttributeError(name) from None

    @cached_property
    def stages(self) -> list[dict]:
        return json.loads(self.row["stages"])

    @cached_property
    def counts(self) -> dict[str, int]:
        return json.loads(self.row["counts"])

    @cached_property
    def problems(self) -> list[str]:
        return json.loads(self.row["problems"] or "[]")

    @cached_property
    def upstream(self) -> dict | None:
        """What the run's upstream stage says of its files (dashboard.upstream.stage_info), or None."""
        return json.loads(self.row["upstream"]) if self.row["upstream"] else None

    @property
    def files(self) -> list[str]:
        return json.loads(self.row["page_files"] or "[]")

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "skipped")

    @property
    def missing_reason(self) -> str:
        """Why a `missing` run has no results: its one stage's root cause ('' for other runs)."""
        if self.status != "missing":
            return ""
        stage = next((s for s in self.stages if s["status"] == "missing"), None)
        return (stage.get("cause") or stage.get("summary") or "") if stage else "no record from the backend job"

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def failing(self) -> int:
        return sum(n for o, n in self.counts.items() if o in FAILING)

    def stage(self, name: str) -> dict | None:
        return next((s for s in self.stages if s["name"] == name), None)


class Index:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        if not self._current():
            for (table,) in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
                self.db.execute(f"DROP TABLE {table}")
        self.db.executescript(SCHEMA)
        self.set_meta("index_version", INDEX_VERSION)
        self._testsets: dict[str, frozenset[str]] = {}
        # rel -> Digest of that run's tests, or None when they cannot be read; set by the builder.
        self.digester: Callable[[str], Digest | None] | None = None

    def _current(self) -> bool:
        try:
            return self.meta("index_version") == INDEX_VERSION
        except sqlite3.OperationalError:  # no meta table: a new file
            return False

    def close(self) -> None:
        self.db.close()

    # --- transactions: one per build, committed only after the site is swapped in ---
    def begin(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, value))

    # --- ingestion ---
    def known_files(self) -> dict[str, tuple[int, int, int]]:
        return {r[0]: (r[1], r[2], r[3]) for r in self.db.execute("SELECT rel, id, mtime_ns, size FROM runs")}

    def has_testset(self, digest: str) -> bool:
        return self.db.execute("SELECT 1 FROM testsets WHERE hash=?", (digest,)).fetchone() is not None

    def upsert(self, s: RunSummary, known: bool = True) -> Run | None:
        """Store a summary; returns the row it replaced, if any (known=False: the path is new)."""
        old = self.db.execute(f"SELECT {LIGHT} FROM runs WHERE rel=?", (s.rel,)).fetchone() if known else None
        if old is not None:
            self.db.execute("DELETE FROM runs WHERE id=?", (old["id"],))
        slug = self._free_slug(s.backend, safe_name(s.run_id), s.rel)
        cursor = self.db.execute(
            "INSERT INTO runs(rel, mtime_ns, size, run_id, backend, device, trigger, pr, pr_head_sha, started_at,"
            " finished_at, status, torch_spec, torch_version, torch_git, command, duration_s, pass_rate, stages,"
            " counts, notable, testset, digested, problems, slug, page, bench, upstream)"
            " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0,?,?,0,?,?)",
            (s.rel, s.mtime_ns, s.size, s.run_id, s.backend, s.device, s.trigger, s.pr, s.pr_head_sha, s.started_at,
             s.finished_at, s.status, s.torch_spec, s.torch_version, s.torch_git, s.command, s.duration_s,
             s.pass_rate, s.stages_json, s.counts_json, s.notable_zjson, s.testset, s.problems_json, slug,
             s.bench_json, s.upstream_json))
        if s.digest is not None:
            assert cursor.lastrowid is not None  # an INSERT sets it
            self.set_digest(cursor.lastrowid, s.digest)
        return Run(old) if old is not None else None

    def set_digest(self, run_id: int, d: Digest) -> None:
        if d.testset is not None and d.ids is not None and not self.has_testset(d.testset):
            self.db.execute("INSERT INTO testsets(hash, ids) VALUES(?, ?)",
                            (d.testset, zlib.compress("\n".join(d.ids).encode())))
        # A digest without a testset (unreadable tests) keeps the one record.json gave.
        # ops None: not worked out (only the coverage page needs them, see ops()); b"": none.
        # upstream None: not at hand (NO_TESTS, a test set without results); {}: no upstream tests.
        self.db.execute("UPDATE runs SET digested=1, testset=COALESCE(?, testset), ops=COALESCE(?, ops), xfail=?,"
                        " upstream_files=COALESCE(?, upstream_files) WHERE id=?",
                        (d.testset, d.ops, json.dumps(d.xfail) if d.xfail else None,
                         None if d.upstream is None else json.dumps(d.upstream, separators=(",", ":")), run_id))

    def _digested(self, run_id: int, with_ops: bool = False) -> None:
        """Read the run's tests now if no build has needed them yet (see `digester`)."""
        row = self.db.execute("SELECT rel, digested, ops IS NULL AND counts != '{}' AS no_ops FROM runs WHERE id=?",
                              (run_id,)).fetchone()
        if row is None or (row["digested"] and not (with_ops and row["no_ops"])):
            return
        d = self.digester(row["rel"]) if self.digester else None
        if d is None:
            # Unreadable tests (the builder warned): remembered as read, not retried each build.
            d = NO_TESTS
        self.set_digest(run_id, d)

    def _free_slug(self, backend: str, slug: str, rel: str) -> str:
        taken = self.db.execute("SELECT 1 FROM runs WHERE backend=? AND slug=?", (backend, slug)).fetchone()
        if taken is None:
            return slug
        # Two records with one run id (copied artifacts): tell them apart by their path.
        return f"{slug}-{zlib.crc32(rel.encode()):08x}"

    def delete(self, rel: str) -> Run | None:
        row = self.db.execute(f"SELECT {LIGHT} FROM runs WHERE rel=?", (rel,)).fetchone()
        if row is not None:
            self.db.execute("DELETE FROM runs WHERE rel=?", (rel,))
            return Run(row)
        return None

    def set_pages(self, files: dict[int, list[str]]) -> None:
        """Runs whose page the site now holds, with the site files the page consists of."""
        self.db.executemany("UPDATE runs SET page=1, page_files=? WHERE id=?",
                            [(json.dumps(f), i) for i, f in files.items()])

    def clear_pages(self, run_ids: list[int]) -> None:
        self.db.executemany("UPDATE runs SET page=0, page_files=NULL WHERE id=?", [(i,) for i in run_ids])

    def forget_pages(self) -> None:
        self.db.execute("UPDATE runs SET page=0, page_files=NULL")

    # --- what the last build derived per backend, reused while its runs do not change ---
    def backend_cache(self) -> dict[str, dict]:
        return {r[0]: json.loads(r[1]) for r in self.db.execute("SELECT backend, data FROM backend_cache")}

    def set_backend_cache(self, backend: str, data: dict) -> None:
        self.db.execute("INSERT OR REPLACE INTO backend_cache(backend, data) VALUES(?, ?)",
                        (backend, json.dumps(data, separators=(",", ":"))))

    def drop_backend_cache(self, backend: str) -> None:
        self.db.execute("DELETE FROM backend_cache WHERE backend=?", (backend,))

    # --- queries ---
    def backends(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT backend FROM runs ORDER BY backend")]

    def runs(self, backend: str) -> list[Run]:
        """All runs of a backend, oldest first."""
        return [Run(r) for r in self.db.execute(
            f"SELECT {LIGHT} FROM runs WHERE backend=? ORDER BY started_at, id", (backend,))]

    def pr_runs(self, pr: int) -> list[Run]:
        return [Run(r) for r in self.db.execute(
            f"SELECT {LIGHT} FROM runs WHERE pr=? ORDER BY started_at DESC, id DESC", (pr,))]

    def nightly_before(self, backend: str, started_at: str) -> Run | None:
        """The backend's latest `nightly` run that started before `started_at` (one that left no
        record, status missing, has nothing to compare with)."""
        row = self.db.execute(
            f"SELECT {LIGHT} FROM runs WHERE backend=? AND trigger='nightly' AND status != 'missing'"
            " AND started_at < ? ORDER BY started_at DESC, id DESC LIMIT 1", (backend, started_at)).fetchone()
        return Run(row) if row is not None else None

    def prs_after_nightly(self, backend: str, started_at: str) -> set[int]:
        """PRs whose runs of the backend compare with a nightly that started at `started_at`
        (see nightly_before): runs from then up to the backend's next nightly."""
        return {r[0] for r in self.db.execute(
            "SELECT DISTINCT pr FROM runs WHERE backend=? AND pr IS NOT NULL AND started_at >= ?"
            " AND started_at <= COALESCE((SELECT MIN(started_at) FROM runs WHERE backend=? AND trigger='nightly'"
            " AND status != 'missing' AND started_at > ?), started_at)", (backend, started_at, backend, started_at))}

    def rows(self, ids: list[int]) -> list[Run]:
        """The runs with these index ids (those still in the index)."""
        found = (self.db.execute(f"SELECT {LIGHT} FROM runs WHERE id=?", (i,)).fetchone() for i in ids)
        return [Run(r) for r in found if r is not None]

    def prs(self) -> list[tuple[int, str, int]]:
        """(pr, latest started_at, run count), newest first."""
        return [tuple(r) for r in self.db.execute(
            "SELECT pr, MAX(started_at), COUNT(*) FROM runs WHERE pr IS NOT NULL GROUP BY pr"
            " ORDER BY MAX(started_at) DESC")]

    def notable(self, run_id: int) -> dict[str, str]:
        row = self.db.execute("SELECT notable FROM runs WHERE id=?", (run_id,)).fetchone()
        return json.loads(zlib.decompress(row[0])) if row else {}

    def xfail(self, run_id: int) -> dict[str, str]:
        self._digested(run_id)
        row = self.db.execute("SELECT xfail FROM runs WHERE id=?", (run_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else {}

    def upstream_files(self, run_id: int) -> dict[str, dict] | None:
        """The run's upstream counts per file (dashboard.upstream.file_summaries), None when its
        tests are not at hand."""
        self._digested(run_id)
        row = self.db.execute("SELECT upstream_files FROM runs WHERE id=?", (run_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] is not None else None

    def ops(self, run_id: int) -> dict[str, dict[str, list[str]]]:
        self._digested(run_id, with_ops=True)
        row = self.db.execute("SELECT ops FROM runs WHERE id=?", (run_id,)).fetchone()
        return json.loads(zlib.decompress(row[0])) if row and row[0] else {}

    def latest_with_ops(self, backend: str, within: int) -> Run | None:
        """The newest of the backend's last `within` main-line runs that has OpInfo results."""
        rows = self.db.execute(
            f"SELECT {LIGHT} FROM runs WHERE backend=? AND trigger != 'pr'"
            " ORDER BY started_at DESC, id DESC LIMIT ?", (backend, within)).fetchall()
        for row in rows:
            if row["counts"] == "{}":  # no tests, so no ops: not worth reading
                continue
            self._digested(row["id"], with_ops=True)
            if self.db.execute("SELECT length(ops) > 0 FROM runs WHERE id=?", (row["id"],)).fetchone()[0]:
                return Run(row)
        return None

    def testset(self, run_id: int) -> frozenset[str]:
        """The run's test ids. Runs share sets, so the tests of one run per set are read."""
        digest = self.db.execute("SELECT testset FROM runs WHERE id=?", (run_id,)).fetchone()[0]
        if digest is None or not self.has_testset(digest):
            self._digested(run_id)
            digest = self.db.execute("SELECT testset FROM runs WHERE id=?", (run_id,)).fetchone()[0]
        if digest not in self._testsets:
            row = self.db.execute("SELECT ids FROM testsets WHERE hash=?", (digest,)).fetchone()
            if row is None:  # its tests could not be read: as far as we know, none ran
                return frozenset()
            text = zlib.decompress(row[0]).decode()
            self._testsets[digest] = frozenset(text.split("\n")) if text else frozenset()
        return self._testsets[digest]

    def page_runs(self) -> dict[int, list[str]]:
        """Runs whose page the site holds: id -> the page's files."""
        return {r[0]: json.loads(r[1] or "[]") for r in self.db.execute("SELECT id, page_files FROM runs WHERE page=1")}
