"""Instruction counters for the bench probe: host cost as a count, which load does not move.

Two counters, never mixed in one series (the record names the one used):

- `perf_event`: the CPU's own counter of retired user-space instructions of the measuring
  thread, through torch._C._instruction_counter (Linux perf_event_open). Native speed, in
  the timing process itself. Many virtual machines do not expose it: start() returns -1.
- `callgrind`: Valgrind's Callgrind, where there is no hardware counter. The process runs
  under `valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no`: `import torch`
  and the set-up run uninstrumented (about 7 times slower than native, against about 40 times
  instrumented), then `start()` asks Valgrind, through `callgrind_control -i on PID`, to
  instrument, and each count collects only between torch._C._valgrind_toggle() and
  torch._C._valgrind_toggle_and_dump_stats() (both toggle CALLGRIND_TOGGLE_COLLECT; neither
  starts instrumentation). Each dump is a file `<out>.<n>` whose header carries the total
  (`summary: N`); it is read and removed at once.

torch and the standard library only (a probe of the environment under test).
"""

from __future__ import annotations

import os
import subprocess
import time

PERF_EVENT = "perf_event"
CALLGRIND = "callgrind"


class CounterUnavailable(Exception):
    """This counter cannot count here; the message says why, in one line."""


class HardwareCounter:
    name = PERF_EVENT

    def __init__(self, torch):
        counter = getattr(getattr(torch, "_C", None), "_instruction_counter", None)
        if counter is None:
            raise CounterUnavailable("this torch has no torch._C._instruction_counter")
        fd = counter.start()
        if fd < 0:
            raise CounterUnavailable("no hardware instruction counter: torch._C._instruction_counter.start() "
                                     "returned -1 (perf_event_open refused: a virtual machine, or "
                                     "kernel.perf_event_paranoid)")
        counter.end(fd)
        self._counter = counter

    def count(self, run) -> int:
        fd = self._counter.start()
        run()
        found = self._counter.end(fd)
        if found < 0:
            raise RuntimeError(f"torch._C._instruction_counter.end() returned {found}")
        return int(found)


class Callgrind:
    name = CALLGRIND

    def __init__(self, torch, out: str, control: str):
        if not getattr(torch._C, "_valgrind_supported_platform", lambda: False)():
            raise CounterUnavailable("this torch was built without Valgrind's client requests")
        self._torch = torch
        self._out = out
        self._control = control
        self._dumps = 0

    def start(self, timeout: float = 120.0) -> None:
        """Instrument from now on. callgrind_control reaches this process through Valgrind's
        gdbserver, which looks for commands between basic blocks: the wait must keep running code
        (a blocking wait would need ptrace to be woken, which many runners forbid)."""
        control = subprocess.Popen([self._control, "--instr=on", str(os.getpid())],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while control.poll() is None:
            if time.monotonic() > deadline:
                control.kill()
                control.wait()
                raise CounterUnavailable(f"{self._control} did not reach this process in {timeout:.0f} s")
        said = control.stdout.read().decode(errors="replace") if control.stdout else ""
        if control.returncode != 0 or "OK" not in said:
            last = (said.strip().splitlines() or ["no output"])[-1]
            raise CounterUnavailable(f"callgrind_control could not start instrumentation "
                                     f"(exit {control.returncode}): {last[:200]}")
        if self.count(lambda: None) <= 0:
            raise CounterUnavailable("Callgrind collected nothing: this process is not instrumented")

    def count(self, run) -> int:
        self._torch._C._valgrind_toggle()
        run()
        self._torch._C._valgrind_toggle_and_dump_stats()
        self._dumps += 1
        return self._read(f"{self._out}.{self._dumps}")

    @staticmethod
    def _read(path: str) -> int:
        """The dump's total, from its header: the file's body (every function's cost) is not read."""
        try:
            with open(path, encoding="utf-8", errors="replace") as dump:
                for _, line in zip(range(64), dump, strict=False):
                    if line.startswith("summary:"):
                        total = int(line.split()[1])
                        break
                else:
                    raise RuntimeError(f"{path}: no summary line in the first 64 lines")
        except FileNotFoundError:
            raise CounterUnavailable(f"no Callgrind dump at {path}: this process does not run under "
                                     "valgrind --tool=callgrind with that --callgrind-out-file") from None
        os.remove(path)
        return total
