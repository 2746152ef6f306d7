"""Probe: what each bench measurement costs on the device and on the CPU, in one process (stage `bench`).

The measurements (MEASUREMENTS) are device-generic: the per-call overhead of tiny
operations, the throughput of large ones sized so that the CPU side takes milliseconds,
and one training step and one inference step of the model-parity models
(runner/suites/integration/test_model_parity.py, loaded from its file). Each is measured
in two ways, on one thread:

- **time**: device then CPU, back to back, for --rounds rounds of blocks of calls (at least
  --min-run-time seconds per side and round), the garbage collector off. The device side is
  timed by the device's own timing events (torch.Event(enable_timing=True)) where it has them,
  else by synchronised wall time (the device synchronised after every call); the CPU side by
  wall time. Each side's median, interquartile range and relative standard deviation over its
  blocks; the device/CPU ratio is the median of the rounds' ratios. A measurement whose device
  time spreads more than NOISY_RSD is marked `noisy`.
- **instructions** (--counter): host instructions per call of each side (runner/probes/_counters.py:
  the hardware counter, or Callgrind when the process runs under it): one dropped first count,
  which also sets how many calls a count spans (about TARGET_INSTRUCTIONS), then
  --count-repeats counts; the median. The device is synchronised after each count, outside it.

--no-time measures instructions only (the process that runs under Valgrind, where time means
nothing). Phases (one result line each): `import`, `device`, `counter` (which counter counts, or
why none), then `start:<name>` and `measure:<name>` (time) and `count:<name>` (instructions) for
each measurement, so a crash or a hang names the measurement it happened in and keeps the
ones before it. Time: {"device": STATS, "cpu": STATS, "ratio", "round_ratios", "unit": "s",
"timing": "events"|"wall", "noisy"} with STATS = {"median", "iqr", "rsd", "runs", "per_run"};
instructions: {"device": COUNT, "cpu": COUNT, "ratio"} with COUNT = {"per_call", "repeats", "number"}.
Usage: bench.py --device D [--package P] [--only a,b] [--rounds N] [--min-run-time S] [--no-time]
       [--events] [--counter none|auto|callgrind] [--callgrind-out PATH --callgrind-control PATH] [--deadline S]
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import importlib.util
import itertools
import statistics
import time
from pathlib import Path

from _counters import CALLGRIND, Callgrind, CounterUnavailable, HardwareCounter
from _probe import arm, attempt, emit, leave, split_list

MODEL_PARITY = Path(__file__).resolve().parents[1] / "suites" / "integration" / "test_model_parity.py"

NOISY_RSD = 0.05
"""a device time that spreads more than this over its blocks cannot tell a 5 % slowdown"""
TARGET_INSTRUCTIONS = 2_000_000
"""instructions a count spans, at least (a count of a few thousand is mostly the loop's own)"""
MAX_CALLS_PER_COUNT = 10_000


def overhead(torch, device):
    """Per-call cost of tiny operations: what the dispatcher and the backend add to every call
    (and `synchronize`, measured on its own in main)."""
    tiny = torch.ones(1, device=device)
    small = torch.ones(64, device=device)
    host = torch.ones(256)
    on_device = torch.ones(256, device=device)
    to_host = (lambda: on_device.cpu()) if device != "cpu" else (lambda: on_device.clone())
    to_device = (lambda: host.to(device)) if device != "cpu" else (lambda: host.clone())
    return {
        "add_tiny": lambda: tiny + tiny,
        "empty": lambda: torch.empty(1, device=device),
        "view": lambda: small.view(8, 8),
        "copy_to_device": to_device,
        "copy_to_cpu": to_host,
    }


def throughput(torch, device):
    """Large operations, sized so that the CPU takes milliseconds for each."""
    g = torch.Generator().manual_seed(0)
    big = torch.rand(1 << 22, generator=g).to(device)
    a = torch.rand(512, 512, generator=g).to(device)
    image = torch.rand(4, 16, 32, 32, generator=g).to(device)
    kernel = torch.rand(32, 16, 3, 3, generator=g).to(device)
    return {
        "add_large": lambda: big + big,
        "matmul": lambda: a @ a,
        "sum": lambda: big.sum(),
        "conv2d": lambda: torch.nn.functional.conv2d(image, kernel, padding=1),
    }


def models(torch, device):
    """One training step and one inference step of each model-parity model."""
    spec = importlib.util.spec_from_file_location("ootci_model_parity", MODEL_PARITY)
    parity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(parity)
    steps = {}
    for kind, make in sorted(parity.MODELS.items()):
        torch.manual_seed(0)
        model = copy.deepcopy(make()).to(device)
        x, y = (t.to(device) for t in parity._batch(kind))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

        def train(model=model, x=x, y=y, optimizer=optimizer):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

        def infer(model=model, x=x):
            with torch.no_grad():
                return model(x)

        steps[f"{TRAIN}:{kind}"] = train
        steps[f"{INFER}:{kind}"] = infer
    return steps


TRAIN, INFER = "train_step", "inference"
MEASUREMENTS = (overhead, throughput, models)
SYNCHRONIZE = "synchronize"


def set_up(group, only: set[str]) -> bool:
    """Whether to set the group up for --only: the models take a second or more to build (a
    bisection step measures one measurement, often not theirs); the other groups cost nothing."""
    return not only or group is not models or any(name.split(":", 1)[0] in (TRAIN, INFER) for name in only)


def synchronizer(torch, device):
    """The device's synchronize(), or None when its module has none (nothing then waits for the device)."""
    module = getattr(torch, device, None)
    sync = getattr(module, "synchronize", None)
    return sync if callable(sync) else None


def timing_events(torch, device):
    """A pair of the device's timing events when they work, else the reason they do not."""
    try:
        start, end = (torch.Event(device=device, enable_timing=True) for _ in range(2))
        start.record()
        end.record()
        end.synchronize()
        start.elapsed_time(end)
    except Exception as exc:  # a backend without timing events may raise anything here
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
    return (start, end), ""


def calls(fn, number: int, after=None):
    """`number` calls of fn (each followed by after(), where given), as one callable."""
    def run():
        for _ in itertools.repeat(None, number):
            fn()
            if after is not None:
                after()
    return run


class Clock:
    """Seconds per call of a block of calls: by the device's timing events, or by wall time with
    the device synchronised after every call."""

    def __init__(self, events=None, sync=None):
        self.events = events
        self.sync = sync
        self.method = "events" if events is not None else "wall"

    def per_call(self, fn, number: int) -> float:
        if self.events is not None:
            start, end = self.events
            start.record()
            calls(fn, number)()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / number
        run = calls(fn, number, self.sync)
        began = time.perf_counter()
        run()
        return (time.perf_counter() - began) / number


def calls_per_block(clock: Clock, fn, min_run_time: float) -> int:
    """The calls a timed block makes: the fewest (a power of two) whose fastest of three blocks
    takes a tenth of min_run_time. The fastest, so that a block the scheduler interrupted does
    not stop the search early (a loaded runner interrupts many)."""
    number = 1
    while number < 1 << 20:
        if min(clock.per_call(fn, number) for _ in range(3)) * number >= min_run_time / 10:
            break
        number *= 2
    return number


def blocks(clock: Clock, fn, number: int, min_run_time: float) -> list[float]:
    """Per-call seconds of each block of one round: blocks of `number` calls until min_run_time
    is spent, three at least."""
    found: list[float] = []
    spent = 0.0
    while spent < min_run_time or len(found) < 3:
        found.append(clock.per_call(fn, number))
        spent += found[-1] * number
    return found


def side_stats(times: list[float], number: int) -> dict:
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    mean = statistics.fmean(times)
    return {"median": statistics.median(times), "iqr": q[2] - q[0],
            "rsd": statistics.stdev(times) / mean if len(times) > 1 and mean > 0 else 0.0,
            "runs": len(times), "per_run": number}


def measure_time(device_clock: Clock, on_device, on_cpu, *, rounds: int, min_run_time: float) -> dict:
    """Device then CPU, `rounds` times: each round's two timings are taken back to back, so the
    round's ratio shares the machine's state, and the ratio recorded is the median of the rounds'."""
    cpu_clock = Clock()
    timed: dict[str, list[float]] = {"device": [], "cpu": []}
    ratios = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        numbers = {"device": calls_per_block(device_clock, on_device, min_run_time),
                   "cpu": calls_per_block(cpu_clock, on_cpu, min_run_time)}
        for _ in range(rounds):
            medians = {}
            for side, clock, fn in (("device", device_clock, on_device), ("cpu", cpu_clock, on_cpu)):
                found = blocks(clock, fn, numbers[side], min_run_time)
                timed[side] += found
                medians[side] = statistics.median(found)
            ratios.append(medians["device"] / medians["cpu"])
    finally:
        if gc_was:
            gc.enable()
    ratios.sort()
    device = side_stats(timed["device"], numbers["device"])
    return {"device": device, "cpu": side_stats(timed["cpu"], numbers["cpu"]), "ratio": ratios[len(ratios) // 2],
            "round_ratios": ratios, "unit": "s", "timing": device_clock.method, "noisy": device["rsd"] > NOISY_RSD}


def count_side(counter, fn, sync, repeats: int) -> dict:
    """Instructions per call: a first count (dropped) sets the calls per count, then `repeats`
    counts of that many calls; the median."""
    def one(number: int) -> float:
        gc_was = gc.isenabled()
        gc.disable()
        try:
            found = counter.count(calls(fn, number))
        finally:
            if gc_was:
                gc.enable()
        if sync is not None:
            sync()  # outside the count: a device's wait for its own work is not host cost
        return found / number

    first = one(1)
    number = max(1, min(MAX_CALLS_PER_COUNT, int(TARGET_INSTRUCTIONS // max(first, 1.0))))
    found = [one(number) for _ in range(repeats)]
    return {"per_call": statistics.median(found), "repeats": found, "number": number}


def measure_count(counter, on_device, on_cpu, sync, repeats: int) -> dict:
    device = count_side(counter, on_device, sync, repeats)
    cpu = count_side(counter, on_cpu, None, repeats)
    return {"device": device, "cpu": cpu, "ratio": device["per_call"] / cpu["per_call"]}


def both_sides(group, torch, device: str):
    """A group's measurements set up on the device and on the CPU."""
    return group(torch, device), group(torch, "cpu")


def choose_counter(torch, args):
    """The counter asked for, or None with the reason it cannot count here."""
    if args.counter == "none":
        return None, "not asked for"
    if args.counter == CALLGRIND:
        return Callgrind(torch, args.callgrind_out, args.callgrind_control), ""
    try:
        return HardwareCounter(torch), ""
    except CounterUnavailable as exc:
        return None, str(exc)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", required=True)
    parser.add_argument("--package", default="", help="the backend's module, imported after torch")
    parser.add_argument("--only", default="", help="comma-separated measurement names (default: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-run-time", type=float, default=0.1, help="seconds per side and round")
    parser.add_argument("--no-time", action="store_true", help="count instructions only")
    parser.add_argument("--events", action="store_true",
                        help="time the device by its timing events where they work (the backend claims `events`)")
    parser.add_argument("--counter", choices=("none", "auto", CALLGRIND), default="none",
                        help="auto: the hardware counter where there is one; callgrind: under Valgrind")
    parser.add_argument("--count-repeats", type=int, default=5)
    parser.add_argument("--callgrind-out", default="", help="valgrind's --callgrind-out-file")
    parser.add_argument("--callgrind-control", default="callgrind_control")
    parser.add_argument("--deadline", type=float, default=0)
    args = parser.parse_args()
    arm(args.deadline)

    imported = attempt(lambda: [importlib.import_module(m) for m in ("torch", args.package) if m])
    emit("import", **{k: v for k, v in imported.items() if k != "value"})
    if not imported["ok"]:
        return
    import torch

    # One thread on both sides: the comparison is of the backend, not of how many cores the
    # runner has free at that moment.
    torch.set_num_threads(1)
    sync = synchronizer(torch, args.device)
    events, why_not = timing_events(torch, args.device) if args.events and not args.no_time else (None, "")
    device_clock = Clock(events, sync)
    emit("device", ok=True, value={"device": args.device, "synchronized": sync is not None,
                                   "timing": None if args.no_time else device_clock.method,
                                   **({"events_unusable": why_not} if why_not else {})})
    chosen = attempt(lambda: choose_counter(torch, args))
    counter = chosen["value"][0] if chosen["ok"] else None
    if args.counter != "none":
        if chosen["ok"]:
            emit("counter", ok=True, value={"counter": counter.name if counter else None, "why": chosen["value"][1]})
        else:
            emit("counter", **chosen)
    if args.no_time and counter is None:
        return  # nothing to time and nothing to count with here: the stage counts under Callgrind
    only = set(split_list(args.only))

    def wanted(name: str) -> bool:
        return not only or name in only

    todo = []  # (name, on_device, on_cpu, sync after a device call, the device's clock)
    if wanted(SYNCHRONIZE):
        if sync is None:
            emit(f"measure:{SYNCHRONIZE}", ok=False, chain=[{
                "type": "Unsupported", "module": "ootci", "frames": [],
                "message": f"torch.{args.device} has no synchronize(): nothing waits for the device"}])
        else:
            # Wall time: a device's events would time its queue, which a synchronize leaves empty.
            todo.append((SYNCHRONIZE, sync, torch.cpu.synchronize, None, Clock()))
    for group in filter(lambda g: set_up(g, only), MEASUREMENTS):
        made = attempt(functools.partial(both_sides, group, torch, args.device))
        if not made["ok"]:
            emit(f"setup:{group.__name__}", **made)
            continue
        on_device, on_cpu = made["value"]
        todo += [(name, on_device[name], on_cpu[name], sync, device_clock) for name in filter(wanted, on_device)]

    if isinstance(counter, Callgrind):
        # Only the counts are instrumented: `import torch` and the set-up above ran at about a sixth
        # of the instrumented cost. The first count of each side, dropped, is the warm-up.
        started = attempt(counter.start)
        emit("counting", **started)
        if not started["ok"]:
            counter = None
    for name, on_device, on_cpu, after, clock in todo:
        emit(f"start:{name}", ok=True)
        if not args.no_time:
            emit(f"measure:{name}", **attempt(functools.partial(
                measure_time, clock, on_device, on_cpu, rounds=args.rounds, min_run_time=args.min_run_time)))
        if counter is not None:
            emit(f"count:{name}", **attempt(functools.partial(
                measure_count, counter, on_device, on_cpu, after, args.count_repeats)))


if __name__ == "__main__":
    main()
    leave()  # under Callgrind the teardown, instrumented, would cost half a minute
