"""Speed figures, each a ratio measured side by side in one run (these machines are noisy)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from common import REPO, Bench, Workspace, load_split, markdown, sample, write_results
from scenarios import two_teacher_workspace

KAMAL = [sys.executable, "-m", "kamalcli"]


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _fresh(bench: Bench, key: str, teachers: dict[str, str], rows: list[dict]) -> Workspace:
    from kamalcli.cli import cli

    root = REPO / "benchmarks" / "work" / f"{bench.profile.name}-speed-{key}"
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    cli.main(["init", str(root)], prog_name="kamal", standalone_mode=False)
    bench._configure(root)
    ws = Workspace(root)
    data = root / "rows.jsonl"
    data.write_text("".join(json.dumps({"text": r["text"], "label": r["label"]}) + "\n" for r in rows))
    ws("add-data", data, "--name", "rows", quiet=True)
    ws("add-data", data, "--name", "labelled", "--role", "eval", quiet=True)
    for name, path in teachers.items():
        ws("add-teacher", path, "--name", name, quiet=True)
    return ws


def _peak_rss_mb(ws: Workspace, args: list[str]) -> tuple[float, float]:
    """Run `kamal probe ...` in its own process; (peak resident MB, seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen([*KAMAL, "--workspace", str(ws.root), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = __import__("os").wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"kamal {' '.join(args)} failed")
    return usage.ru_maxrss / 1024, time.perf_counter() - start


def _mc_floor(folder: str, texts: list[str], max_length: int) -> dict:
    """Median time of one eval-mode and one MC (dropout sampling) forward pass over 32 rows."""
    import torch

    from kamalcli.batching import encode
    from kamalcli.modeling import disable_mc_dropout, enable_mc_dropout, load_classifier, load_tokenizer

    model = load_classifier(folder)
    batch = encode(load_tokenizer(folder), texts, max_length).batch(range(len(texts)))
    times = {"eval": [], "mc": []}
    with torch.inference_mode():
        for i in range(23):
            for mode in ("eval", "mc"):
                enable_mc_dropout(model) if mode == "mc" else disable_mc_dropout(model)
                start = time.perf_counter()
                model(**batch)
                if i >= 3:
                    times[mode].append(time.perf_counter() - start)
    disable_mc_dropout(model)
    return {"eval_forward_s": statistics.median(times["eval"]), "train_mode_forward_s": statistics.median(times["mc"])}


def speed(bench: Bench) -> None:
    source = two_teacher_workspace(bench)
    teachers = {t["name"]: t["path"] for t in source.json("teachers")}
    train = load_split(bench.data_dir, "train")
    figures: dict = {}
    length = str(bench.profile.max_length)

    # 1. probe throughput, K = 1 against K = 16 (sequential and batched), same teacher, same rows
    rows = sample(train, 256, "speed-probe")
    ws = _fresh(bench, "probe", {"half-a": teachers["half-a"]}, rows)
    seconds = {}
    for label, args in (("K=1", ["--mc-samples", "1"]), ("K=16 sequential", ["--mc-samples", "16", "--mc-mode", "sequential"]),
                        ("K=16 batched", ["--mc-samples", "16", "--mc-mode", "batched", "--seed", "1"])):
        bench.say(f"probe 256 rows, {label}")
        ws("probe", "--no-rmd", "--data", "rows", "--max-length", length, *args, quiet=True)
        probe = ws.json("report")["probes"][-1]
        seconds[label] = probe["seconds"]
    figures["probe_examples_per_second"] = {k: 256 / v for k, v in seconds.items()}
    figures["probe_k16_over_k1_time"] = seconds["K=16 sequential"] / seconds["K=1"]
    figures["probe_batched_over_sequential_time"] = seconds["K=16 batched"] / seconds["K=16 sequential"]
    figures["mc_floor"] = _mc_floor(teachers["half-a"], [r["text"] for r in rows[:32]], bench.profile.max_length)
    floor_rate = 32 / (16 * figures["mc_floor"]["train_mode_forward_s"] + figures["mc_floor"]["eval_forward_s"])
    figures["probe_k16_over_floor_time"] = floor_rate / figures["probe_examples_per_second"]["K=16 sequential"]
    hit_in_process = _timed(lambda: ws("probe", "--no-rmd", "--data", "rows", "--max-length", length, "--mc-samples", "1", quiet=True))
    hit_command = _timed(lambda: subprocess.run([*KAMAL, "--workspace", str(ws.root), "probe", "--no-rmd", "--data", "rows",
                                                 "--max-length", length, "--mc-samples", "1"], capture_output=True, check=True))
    figures["repeated_probe_seconds"] = {"in_process": hit_in_process, "whole_command": hit_command}

    # 2. peak memory of a probe over 1,000 and 5,000 rows (arrays stream to disk)
    memory = {}
    for n in (1000, 5000):
        bench.say(f"probe {n} rows in a fresh process for its peak memory")
        ws_n = _fresh(bench, f"memory-{n}", {"half-a": teachers["half-a"]}, sample(train, n, "speed-memory"))
        memory[n] = _peak_rss_mb(ws_n, ["probe", "--no-rmd", "--data", "rows", "--mc-samples", "1", "--max-length", length])
    figures["probe_peak_rss_mb"] = {str(n): m[0] for n, m in memory.items()}
    figures["probe_memory_seconds"] = {str(n): m[1] for n, m in memory.items()}

    # 3. amalgamate against supervised fine-tuning: same rows, student, budget; teachers already probed
    rows = sample(train, 640, "speed-train")
    ws = _fresh(bench, "train", teachers, rows)
    ws("probe", "--no-rmd", "--data", "rows", "--mc-samples", "16", "--max-length", length, quiet=True)
    args = ["--epochs", "1", "--batch-size", "32", "--lr", "1e-4", "--max-length", length]
    labels = sorted({r["label"] for r in rows})
    bench.say("amalgamate and supervised fine-tuning on the same 640 rows")
    ws("amalgamate", "--method", "muki-hard", "--name", "timed", "--data", "rows", "--student", bench.profile.base,
       "--mc-samples", "16", "--select-by", "eval:labelled", *args, quiet=True)
    ws("train-teacher", "labelled", "--labels", ",".join(labels), "--name", "supervised", "--base", bench.profile.base,
       *args, quiet=True)
    amalgamate = next(s for s in ws.json("students") if s["name"] == "timed")["train"]
    supervised = next(r for r in ws.json("runs") if r["kind"] == "train-teacher")["result"]
    figures["amalgamate_examples_per_second"] = amalgamate["examples_per_second"]
    figures["supervised_examples_per_second"] = supervised["examples_per_second"]
    figures["amalgamate_over_supervised_time_per_epoch"] = supervised["examples_per_second"] / amalgamate["examples_per_second"]

    # 4. `kamal --help` start-up
    starts = [_timed(lambda: subprocess.run([*KAMAL, "--help"], capture_output=True, check=True)) for _ in range(7)]
    figures["help_seconds_median"] = statistics.median(starts)

    # 5. ONNX against PyTorch on a trained student, with test accuracy
    student = next((s for s in source.json("students") if s["name"].startswith("muki-hard-s")), None)
    onnx = {}
    if student:
        bench.say("ONNX vs PyTorch on the muki-hard student")
        out = REPO / "benchmarks" / "work" / "onnx-speed.json"
        done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "onnx_speed.py"), "--student", student["path"],
                               "--eval-data", str(source.root / "data" / "test.jsonl"), "--max-length", length,
                               "--json", str(out)], capture_output=True, text=True)
        if done.returncode == 0:
            onnx = json.loads(out.read_text())["results"]
        else:
            print(done.stderr[-2000:], file=sys.stderr)
    figures["onnx"] = onnx

    rows_md = [
        ["probe, K = 1", f"{figures['probe_examples_per_second']['K=1']:.1f} ex/s", ""],
        ["probe, K = 16 sequential", f"{figures['probe_examples_per_second']['K=16 sequential']:.1f} ex/s",
         (f"{figures['probe_k16_over_k1_time']:.1f}x the time of K = 1; {figures['probe_k16_over_floor_time']:.2f}x the "
          f"floor, 16 dropout-mode + 1 eval forwards timed alone ({1e3 * figures['mc_floor']['train_mode_forward_s']:.0f} + "
          f"{1e3 * figures['mc_floor']['eval_forward_s']:.0f} ms per 32 rows)")],
        ["probe, K = 16 batched", f"{figures['probe_examples_per_second']['K=16 batched']:.1f} ex/s",
         f"{figures['probe_batched_over_sequential_time']:.2f}x the time of sequential"],
        ["repeated probe (cache hit)", f"{hit_command:.2f} s whole command", f"{hit_in_process:.2f} s inside the process"],
        ["probe peak memory, 1,000 rows", f"{memory[1000][0]:.0f} MB", ""],
        ["probe peak memory, 5,000 rows", f"{memory[5000][0]:.0f} MB", f"{memory[5000][0] / memory[1000][0]:.2f}x the 1,000-row peak"],
        ["amalgamate (muki-hard), 1 epoch", f"{figures['amalgamate_examples_per_second']:.1f} ex/s", ""],
        ["supervised fine-tuning, 1 epoch", f"{figures['supervised_examples_per_second']:.1f} ex/s",
         f"amalgamate / supervised time per epoch: {figures['amalgamate_over_supervised_time_per_epoch']:.2f}"],
        ["kamal --help", f"{figures['help_seconds_median']:.2f} s", "median of 7"],
    ]
    for engine, r in onnx.items():
        acc = "-" if r.get("accuracy") is None else f"{100 * r['accuracy']:.1f}% test accuracy"
        rows_md.append([engine, f"{r['latency_ms_b1_t32']:.1f} ms at 1x32; {r['throughput_seq_s_b32_t128']:.1f} seq/s at 32x128",
                        f"{r['latency_speedup']:.2f}x / {r['throughput_ratio']:.2f}x PyTorch; {r['size_bytes'] / 1e6:.0f} MB; {acc}"])
    write_results(bench, figures, markdown(["what", "figure", "ratio / note"], rows_md))
