"""Runs a short training step on openreg in 100 fresh interpreters and counts
how many exit cleanly (exit status 0, expected output). Run it with the
Python of an environment where torch_openreg is installed.

A naive PrivateUse1 backend crashes at exit now and then: the autograd
engine's device worker threads can still be releasing the last graph while
the interpreter finalizes (see torch_openreg/_register.py).
"""

import subprocess
import sys

CODE = """
import torch
m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("openreg")
x = torch.randn(4, 16, device="openreg")
for _ in range(3):
    m(x).sum().backward()
print("done")
"""


def main(runs: int = 100) -> int:
    clean, failures = 0, []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == "done":
            clean += 1
        else:
            failures.append((r.returncode, r.stderr.strip()[-200:]))
    print(f"clean exits: {clean}/{runs}")
    for rc, err in failures[:5]:
        print(f"  exit status {rc}: {err}")
    return 0 if clean == runs else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
