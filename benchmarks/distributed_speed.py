"""Two processes against one on this machine: probe and amalgamate time, and the student's accuracy.

    python benchmarks/distributed_speed.py [--rows 1000] [--test-rows 400] [--repeats 1]

Two minilm-l3 teachers (disjoint halves of topics10, trained once and kept in
benchmarks/work/) are probed (K = 8, adaptive) and a muki-hard student is
amalgamated, each once on one process and once with `--nproc 2` (torchrun,
gloo), taking turns in one run so that the machine's load falls on both alike.
Each command runs as the user would run it (`python -m kamalcli ...`), so the
wall time includes starting the processes. The probes differ by their dropout
seed only (each has to be computed); both students read the same cached probe.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import HALF_A, HALF_B, Bench, Profile, markdown, write_results  # noqa: E402


def timed(ws, *args) -> float:
    argv = [sys.executable, "-m", "kamalcli", "--workspace", str(ws.root), *map(str, args)]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000, help="transfer rows (also the teachers' labelled rows)")
    parser.add_argument("--test-rows", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=1, help="rounds of (one process, two processes)")
    args = parser.parse_args()

    profile = Profile(f"dist{args.rows}", "minilm-l3", transfer_rows=args.rows, test_rows=args.test_rows,
                      mc_samples=8, max_length=64, teacher_epochs=2, student_epochs=1, lr=3e-4)
    bench = Bench("distributed-speed", profile)
    ws = bench.workspace("halves")
    bench.teacher(ws, "half-a", HALF_A)
    bench.teacher(ws, "half-b", HALF_B)
    bench.say("the probe the students read (one process, not timed)")
    ws("probe", "--data", "transfer", "--no-rmd", quiet=True)

    probe = ["probe", "--data", "transfer", "--data", "test", "--no-rmd"]
    train = ["--method", "muki-hard", "--data", "transfer", "--student", profile.base,
             *profile.train_args(profile.student_epochs, seed=1)]
    results: dict[int, dict[str, list]] = {1: {}, 2: {}}
    for repeat in range(args.repeats):
        for processes in (1, 2) if repeat % 2 == 0 else (2, 1):
            extra = ["--nproc", "2"] if processes == 2 else []
            bench.say(f"round {repeat + 1}: probe on {processes} process(es)")
            seed = 1000 + 10 * repeat + processes  # a probe not in the cache yet
            results[processes].setdefault("probe", []).append(timed(ws, *probe, "--seed", seed, *extra))
            bench.say(f"round {repeat + 1}: amalgamate on {processes} process(es)")
            name = f"muki-p{processes}-r{repeat}-{int(time.time())}"
            results[processes].setdefault("amalgamate", []).append(timed(ws, "amalgamate", *train, "--name", name,
                                                                         *extra))
            metrics = ws.json("eval", name, "--data", "test")
            student = next(s for s in ws.json("students") if s["name"] == name)
            results[processes].setdefault("accuracy", []).append(metrics["accuracy"])
            results[processes].setdefault("train_seconds", []).append(student["train"]["seconds"])
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    one, two = results[1], results[2]
    table = markdown(
        ["what", "1 process", "2 processes", "2 / 1"],
        [["probe, 2 teachers x (transfer + test), K = 8 adaptive: wall s", f"{mean(one['probe']):.1f}",
          f"{mean(two['probe']):.1f}", f"{mean(two['probe']) / mean(one['probe']):.2f}x"],
         ["amalgamate muki-hard, 1 epoch: wall s", f"{mean(one['amalgamate']):.1f}", f"{mean(two['amalgamate']):.1f}",
          f"{mean(two['amalgamate']) / mean(one['amalgamate']):.2f}x"],
         ["amalgamate: training loop alone s", f"{mean(one['train_seconds']):.1f}",
          f"{mean(two['train_seconds']):.1f}", f"{mean(two['train_seconds']) / mean(one['train_seconds']):.2f}x"],
         ["student test accuracy %", f"{100 * mean(one['accuracy']):.1f}", f"{100 * mean(two['accuracy']):.1f}",
          f"{100 * (mean(two['accuracy']) - mean(one['accuracy'])):+.1f} points"]])
    header = (f"{args.rows} transfer rows, {args.test_rows} test rows, minilm-l3, max length 64, "
              f"{os.cpu_count()} CPUs shared with other work (load {os.getloadavg()[0]:.1f} at the end); "
              f"{args.repeats} round(s), the two taking turns")
    print(f"\n{header}\n")
    write_results(bench, {"results": {str(k): v for k, v in results.items()}, "header": header}, f"<!-- {header} -->\n{table}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
