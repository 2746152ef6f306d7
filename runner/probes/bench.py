"""Probe: how fast the device is, each measurement timed on the device and on CPU in one process (stage `bench`).

The measurements (MEASUREMENTS) are device-generic: the per-call overhead of tiny
operations, the throughput of large ones sized so that the CPU side takes milliseconds,
and one training step and one inference step of the model-parity models
(runner/suites/integration/test_model_parity.py, loaded from its file). Each is timed by
torch.utils.benchmark's `blocked_autorange` on one thread, device then CPU, for --rounds
rounds, with the device synchronised inside every timed statement. A regression is judged
on the ratio of the two: each round's device median over its CPU median, taken back to back,
and the median of the rounds' ratios; a loaded machine slows both sides alike.

Phases (one result line each): `import`, `device` (whether it can be synchronised), then
`start:<name>` and `measure:<name>` for each measurement, so a crash or a hang names the
measurement it happened in and keeps the ones before it.
Result of a measurement: {"ok": true, "value": {"device": STATS, "cpu": STATS, "ratio": float,
"round_ratios": [float], "unit": "s"}} with STATS = {"median", "iqr", "runs", "per_run"} over
every round of that side; or an exception chain.
Usage: bench.py --device D [--package P] [--only a,b] [--min-run-time S] [--rounds N] [--deadline S]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
from pathlib import Path

from _probe import arm, attempt, emit, split_list

MODEL_PARITY = Path(__file__).resolve().parents[1] / "suites" / "integration" / "test_model_parity.py"


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


def set_up(group, only: set[str]) -> bool:
    """Whether to set the group up for --only: the models take a second or more to build (a
    bisection step times one measurement, often not theirs); the other groups cost nothing."""
    return not only or group is not models or any(name.split(":", 1)[0] in (TRAIN, INFER) for name in only)


def synchronizer(torch, device):
    """The device's synchronize(), or None when its module has none (nothing then waits for the device)."""
    module = getattr(torch, device, None)
    sync = getattr(module, "synchronize", None)
    return sync if callable(sync) else None


def stats(measurement) -> dict:
    return {"median": measurement.median, "iqr": measurement.iqr, "runs": len(measurement.times),
            "per_run": measurement.number_per_run}


def measure(torch, benchmark, name, on_device, on_cpu, sync, *, rounds, min_run_time):
    """Device then CPU, `rounds` times: each round's two timings are taken back to back, so the
    round's ratio shares the machine's state, and the ratio recorded is the median of the rounds'.
    The rounds of one side are merged into one Measurement for its median and IQR."""
    timed = {"device": [], "cpu": []}
    for _ in range(rounds):
        for side, fn, after in (("device", on_device, sync), ("cpu", on_cpu, None)):
            stmt = "fn(); after()" if after is not None else "fn()"
            # One thread on both sides: the comparison is of the backend, not of how many cores
            # the runner has free at that moment.
            timer = benchmark.Timer(stmt=stmt, globals={"fn": fn, "after": after}, label=name, sub_label=side,
                                    num_threads=1)
            fn()  # once outside the timing: a first call may compile or allocate
            if after is not None:
                after()
            timed[side].append(timer.blocked_autorange(min_run_time=min_run_time))
    ratios = sorted(d.median / c.median for d, c in zip(timed["device"], timed["cpu"]))
    device, cpu = (benchmark.Measurement.merge(timed[side])[0] for side in ("device", "cpu"))
    return {"device": stats(device), "cpu": stats(cpu), "ratio": ratios[len(ratios) // 2],
            "round_ratios": ratios, "unit": "s"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", required=True)
    parser.add_argument("--package", default="", help="the backend's module, imported after torch")
    parser.add_argument("--only", default="", help="comma-separated measurement names (default: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-run-time", type=float, default=0.1, help="seconds per side and round")
    parser.add_argument("--deadline", type=float, default=0)
    args = parser.parse_args()
    arm(args.deadline)

    imported = attempt(lambda: [importlib.import_module(m) for m in ("torch.utils.benchmark", args.package) if m])
    emit("import", **{k: v for k, v in imported.items() if k != "value"})
    if not imported["ok"]:
        return
    import torch
    import torch.utils.benchmark as benchmark

    sync = synchronizer(torch, args.device)
    emit("device", ok=True, value={"device": args.device, "synchronized": sync is not None})
    only = set(split_list(args.only))
    wanted = (lambda name: not only or name in only)

    def run(name, on_device, on_cpu, after):
        emit(f"start:{name}", ok=True)
        emit(f"measure:{name}", **attempt(lambda: measure(torch, benchmark, name, on_device, on_cpu, after,
                                                          rounds=args.rounds, min_run_time=args.min_run_time)))

    if wanted("synchronize"):
        if sync is None:
            emit("measure:synchronize", ok=False, chain=[{
                "type": "Unsupported", "module": "ootci", "frames": [],
                "message": f"torch.{args.device} has no synchronize(): nothing waits for the device"}])
        else:
            run("synchronize", sync, torch.cpu.synchronize, None)
    for group in filter(lambda g: set_up(g, only), MEASUREMENTS):
        made = attempt(lambda: (group(torch, args.device), group(torch, "cpu")))
        if not made["ok"]:
            emit(f"setup:{group.__name__}", **made)
            continue
        on_device, on_cpu = made["value"]
        for name in filter(wanted, on_device):
            run(name, on_device[name], on_cpu[name], sync)


if __name__ == "__main__":
    main()
