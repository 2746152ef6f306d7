"""OpenReg speed figures: run with the Python of an environment where
torch==2.13.0 and torch_openreg are installed (e.g. .cache/openreg-venv).

    python bench/openreg_ops.py              # op ratios + autoload cost
    python bench/openreg_ops.py --build      # also a cold wheel build

Prints figures; it asserts nothing (goals are in bench/README.md).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def best_of(fn, repeat, number):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return min(times)


def op_timings():
    import torch

    out = {"fallback": torch.ops.openreg.fallback_kind()}
    for label, n, number in (("large_16M", 16 * 1024 * 1024, 5), ("tiny_8", 8, 20000)):
        a, b = torch.randn(n), torch.randn(n)
        da, db = a.to("openreg"), b.to("openreg")
        torch.add(da, db)  # warm up
        cpu = best_of(lambda a=a, b=b: torch.add(a, b), 5, number)
        dev = best_of(lambda da=da, db=db: torch.add(da, db), 5, number)
        out[label] = {"cpu_s": cpu, "openreg_s": dev, "ratio": dev / cpu}
    return out


def child(env_extra):
    env = {**os.environ, **env_extra}
    proc = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def import_ms(runs=15):
    """Median `import torch` time with and without autoload, runs interleaved
    so that machine load affects both alike."""
    code = "import time; t=time.perf_counter(); import torch; print(time.perf_counter()-t)"
    samples = {True: [], False: []}
    for _ in range(runs):
        for autoload in (True, False):
            env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if autoload else "0"}
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            samples[autoload].append(float(r.stdout) * 1000)
    return statistics.median(samples[True]), statistics.median(samples[False])


def autoload_ms(runs=15):
    """What autoload adds to `import torch`, timed inside the process: torch's
    own entry-point scan plus loading and registering torch_openreg. (The
    difference of two whole `import torch` timings drowns in their noise.)"""
    code = ("import time, torch; t = time.perf_counter(); torch._import_device_backends();"
            " print(time.perf_counter() - t)")
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    samples = []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        samples.append(float(r.stdout) * 1000)
    return statistics.median(samples), min(samples)


def cold_build_s():
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "openreg"
        shutil.copytree(REPO / "backends" / "openreg", src,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so"))
        env = {**os.environ, "MAX_JOBS": "2", "CCACHE_DISABLE": "1"}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                        "-w", str(Path(tmp) / "dist"), str(src)], env=env, check=True)
        return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--build", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(op_timings()))
        return
    zero = child({"TORCH_OPENREG_COPYING_FALLBACK": "0"})
    copying = child({"TORCH_OPENREG_COPYING_FALLBACK": "1"})
    for name, res in (("zero-copy fallback", zero), ("stock copying cpu_fallback", copying)):
        assert res["fallback"] in ("zero_copy", "copying")
        print(f"{name} ({res['fallback']}):")
        for label in ("large_16M", "tiny_8"):
            r = res[label]
            print(f"  add {label:9s}  cpu {r['cpu_s'] * 1e6:10.1f} us  openreg {r['openreg_s'] * 1e6:10.1f} us"
                  f"  ratio {r['ratio']:5.2f}x")
    on, off = import_ms()
    print(f"import torch: autoload {on:.1f} ms, TORCH_DEVICE_BACKEND_AUTOLOAD=0 {off:.1f} ms"
          f" (medians of 15, interleaved)")
    med, best = autoload_ms()
    print(f"autoload cost in-process (entry points + torch_openreg): median {med:.1f} ms, best {best:.1f} ms")
    if args.build:
        print(f"cold build (pip wheel --no-build-isolation, MAX_JOBS=2, no ccache): {cold_build_s():.1f} s")


if __name__ == "__main__":
    main()
