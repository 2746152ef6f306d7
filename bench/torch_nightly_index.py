"""How long nightly resolution takes on an index page the size of PyTorch's.

    .venv/bin/python bench/torch_nightly_index.py [--dates N] [--runs N]

PyTorch's nightly page for torch lists every build of the last months for every
Python, platform and accelerator: thousands of links, megabytes of HTML. This serves
a page shaped like it (DATES nightly dates x 6 Pythons x 5 platforms) from a local HTTP
server, in PEP 503 HTML and PEP 691 JSON, and times `resolve_nightly` (fetch, parse,
select) on each. Goal: under 1 s for 400 dates (12,000 wheels) on one core.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.server
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from packaging.tags import sys_tags  # noqa: E402

from ootci.runner.torch_supply import torch_index  # noqa: E402

PYTHONS = ["cp39", "cp310", "cp311", "cp312", "cp313", "cp313t"]


def filenames(dates: int) -> list[str]:
    ours = next(iter(sys_tags()))
    platforms = [ours.platform, "manylinux_2_28_aarch64", "win_amd64", "macosx_11_0_arm64", "linux_s390x"]
    start = dt.date(2026, 11, 20)
    names = []
    for d in range(dates):
        day = (start - dt.timedelta(days=d)).strftime("%Y%m%d")
        for py in PYTHONS:
            for plat in platforms:
                names.append(f"torch-2.14.0.dev{day}+cpu-{py}-{py}-{plat}.whl")
    return names


def pages(names: list[str]) -> tuple[bytes, bytes]:
    digest = "0" * 64
    html = "".join(f'<a href="/whl/nightly/cpu/{n.replace("+", "%2B")}#sha256={digest}" '
                   f'data-requires-python="&gt;=3.9">{n}</a><br/>\n' for n in names)
    files = [{"filename": n, "url": f"/whl/nightly/cpu/{n.replace('+', '%2B')}", "hashes": {"sha256": digest},
              "requires-python": ">=3.9"} for n in names]
    return (f"<html><body>{html}</body></html>".encode(),
            json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": files}).encode())


def serve(html: bytes, js: bytes) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body, kind = (js, torch_index.PEP691_JSON) if self.path.startswith("/json/") else (html, "text/html")
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dates", type=int, default=400)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    names = filenames(args.dates)
    html, js = pages(names)
    server = serve(html, js)
    port = server.server_address[1]
    print(f"{len(names)} wheels; HTML page {len(html) / 1e6:.1f} MB, JSON page {len(js) / 1e6:.1f} MB")
    for form in ("html", "json"):
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            found = torch_index.resolve_nightly(f"http://127.0.0.1:{port}/{form}")
            times.append(time.perf_counter() - start)
        print(f"{form:>4}: median {statistics.median(times):.3f} s, min {min(times):.3f} s "
              f"over {args.runs} runs -> {found.filename}")
    server.shutdown()


if __name__ == "__main__":
    main()
