"""Wall time of the integration suite on a partly-red backend, against the all-green OpenReg run.

    .venv/bin/python bench/partly_red.py            # both runs, then the ratio
    .venv/bin/python bench/partly_red.py --skip-openreg
    .venv/bin/python bench/partly_red.py --skip-openreg --ootci OLD/venv/bin/ootci   # another ootci, e.g. before

The backend is the partly-red fixture (tests/fixtures/partly-red: OpenReg's C++ runtime
as `partreg`), claiming every dtype, with the float-only fault widened to the unary ops
in FLOAT_ONLY (each fails in the six integer and bool dtypes) and the real-input FFTs
(aten::_fft_r2c) segfaulting on inputs of two or more dimensions: about 150 failing and 50 crashing OpInfo
tests, the rest of op_db passing. Both runs are `ootci run NAME --suites integration`
(xdist on the machine's cores, retries as the manifest's default), timed whole, with the
torch layer and wheels already cached (they are built first, untimed).

Goal (issue: partly-red backends): the partly-red integration suite in at most 5
minutes on 2 cores; before the retry rules it took 19 min 46 s. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import partly_red  # noqa: E402

OOTCI = Path(sys.executable).with_name("ootci")
FLOAT_ONLY = "abs,neg,sign,sgn,square,frac,ceil,floor,round,trunc,fix,positive,reciprocal,rsqrt,sqrt,sin"
CRASH = "_fft_r2c"  # rfft and friends, on inputs of two or more dimensions
DTYPES = '["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"]'


def run(ootci: str, argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, dict]:
    out = Path(tempfile.mkdtemp(prefix="ootci-bench-"))
    started = time.monotonic()
    done = subprocess.run([ootci, *argv, "--suites", "integration", "--out", str(out)], cwd=cwd,
                          env={**os.environ, **env}, capture_output=True, text=True)
    wall = time.monotonic() - started
    record = json.loads(next(out.glob("*/record.json")).read_text())
    stage = next(s for s in record["stages"] if s["name"] == "integration")
    if not stage.get("counts"):
        print(done.stdout[-3000:], done.stderr[-3000:])
    return wall, stage


def show(name: str, wall: float, stage: dict) -> None:
    suite = stage.get("data", {}).get("suites", {}).get("integration", {})
    print(f"{name}: {wall:.0f} s wall ({stage['duration_s']:.0f} s in the stage); counts {stage.get('counts')}")
    if suite.get("retries"):
        print(f"  retries: {suite['retries']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-openreg", action="store_true", help="time only the partly-red backend")
    parser.add_argument("--ootci", type=Path, default=OOTCI, help="the ootci to time (default: this venv's)")
    parser.add_argument("--isolation", choices=("fork", "process"), default="fork",
                        help="the partly-red manifest's suites.crash_isolation (an ootci before it had 'process' only)")
    args = parser.parse_args()
    ootci = str(args.ootci)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    repo = partly_red.assemble(Path(tempfile.mkdtemp(prefix="partreg-")) / "partreg")
    manifest = repo / "ci" / "backend.toml"
    manifest.parent.mkdir()
    isolation_line = f'crash_isolation = "{args.isolation}"' if args.isolation == "fork" else ""
    manifest.write_text(f'''name = "partreg"
device = "partreg"
distribution = "torch_partreg"
import_name = "torch_partreg"
entry_point = "torch_partreg = torch_partreg:_autoload"
capabilities = ["multi_device", "streams", "events", "generator", "autocast", "serialization", "autograd"]
dtypes = {DTYPES}

[source]
path = ".."

[suites]
smoke = false
{isolation_line}
''')
    faults = {"PARTREG_FLOAT_ONLY": FLOAT_ONLY, "PARTREG_CRASH": CRASH}
    # Build and install once, untimed: the figure is the suite's.
    subprocess.run([ootci, "run", str(manifest), "--torch", "2.13.0", "--suites", "none", "--out",
                    tempfile.mkdtemp()], env={**os.environ, **faults}, capture_output=True, check=False)
    red_wall, red = run(ootci, ["run", str(manifest), "--torch", "2.13.0"], repo, faults)
    show("partly red", red_wall, red)
    if args.skip_openreg:
        return
    subprocess.run([ootci, "run", "openreg", "--torch", "2.13.0", "--suites", "none", "--out", tempfile.mkdtemp()],
                   capture_output=True, check=False)
    green_wall, green = run(ootci, ["run", "openreg", "--torch", "2.13.0"], REPO, {})
    show("openreg (all green)", green_wall, green)
    print(f"ratio partly red / all green: {red_wall / green_wall:.1f}x; against the 19 min 46 s before: "
          f"{1186 / red_wall:.1f}x faster")


if __name__ == "__main__":
    main()
