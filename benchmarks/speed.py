"""Speed figures, each a ratio measured side by side in one run: the scenarios speed and demo-time, and the tool
suites gpu-figures, cuda-walk, distributed-speed, onnx-speed and cpu-overhead (the GPU ones and cpu-overhead on random
weights of the real shapes: no network, no packaged models). Removed once their findings were written in
docs/benchmarks.md: loop-speed and steering-speed (`git show 6ccb400:benchmarks/speed.py`)."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import HALF_A, HALF_B, REPO, WORK, Bench, Profile, Workspace, load_split, markdown, sample, write_results
from scenarios import two_teacher_workspace

KAMAL = [sys.executable, "-m", "kamalcli"]


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _fresh(bench: Bench, key: str, teachers: dict[str, str], rows: list[dict]) -> Workspace:
    root = REPO / "benchmarks" / "work" / f"{bench.profile.name}-speed-{key}"
    shutil.rmtree(root, ignore_errors=True)
    ws = bench.init(root)
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
    proc = subprocess.Popen([*KAMAL, "--workspace", str(ws.root), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"kamal {' '.join(args)} failed")
    return usage.ru_maxrss / 1024, time.perf_counter() - start


def _mc_floor(folder: str, texts: list[str], max_length: int) -> dict:
    """Median time of one forward pass over 32 rows: eval mode, dropout with torch's masks, the probe's dropout pass."""
    import torch
    from kamalcli.models.batching import encode
    from kamalcli.models.loading import disable_mc_dropout, enable_mc_dropout, load_classifier, load_tokenizer
    from kamalcli.probe.dropout_masks import dropout_passes
    model = load_classifier(folder)
    batch = encode(load_tokenizer(folder), texts, max_length).batch(range(len(texts)))
    times = {"eval": [], "torch": [], "probe": []}
    with torch.inference_mode():
        for i in range(23):
            for mode in times:  # turn about, so a drift in load touches each alike
                if mode == "probe":
                    with dropout_passes(model, None, "cpu"):
                        start = time.perf_counter()
                        model(**batch)
                else:
                    enable_mc_dropout(model) if mode == "torch" else disable_mc_dropout(model)
                    start = time.perf_counter()
                    model(**batch)
                if i >= 3:
                    times[mode].append(time.perf_counter() - start)
    disable_mc_dropout(model)
    return {"eval_forward_s": statistics.median(times["eval"]),
            "torch_dropout_forward_s": statistics.median(times["torch"]),
            "probe_dropout_forward_s": statistics.median(times["probe"])}


PROBE_ROUNDS = 5


def _probe_throughput(bench: Bench, teachers: dict[str, str], train: list[dict]) -> tuple[dict, Workspace, list]:
    """K = 1 against K = 16 (exact sequential and batched, and the default adaptive probe), same teacher and rows."""
    figures: dict = {}
    length = str(bench.profile.max_length)
    rows = sample(train, 256, "speed-probe")
    ws = _fresh(bench, "probe", {"half-a": teachers["half-a"]}, rows)
    seconds, passes = {}, {}
    runs = (("K=1", ["--mc-samples", "1"]),
            ("K=16 exact sequential", ["--mc-samples", "16", "--mc-exact", "--mc-mode", "sequential"]),
            ("K=16 exact batched", ["--mc-samples", "16", "--mc-exact", "--mc-mode", "batched"]),
            ("K=16 default (adaptive)", ["--mc-samples", "16"]))
    # interleaved rounds (other dropout seeds: nothing from the cache); medians follow a drifting load less
    for round_ in range(PROBE_ROUNDS):
        for offset, (label, args) in enumerate(runs):  # the pass mode is not in the cache key: seeds apart
            if round_ and "batched" in label:
                continue  # not one of the ratios reported against K = 1: once is enough
            bench.say(f"probe 256 rows, {label}, round {round_ + 1} of {PROBE_ROUNDS}")
            ws("probe", "--no-rmd", "--data", "rows", "--max-length", length, *args, "--seed", str(10 * offset + round_ + 1), quiet=True)
            probe = ws.json("report")["probes"][-1]
            seconds.setdefault(label, []).append(probe["seconds"])
            passes.setdefault(label, []).append(probe.get("mc_passes_mean"))
    figures["probe_seconds_per_round"] = seconds
    per_round = {label: [t / k1 for t, k1 in zip(seconds[label], seconds["K=1"])]
                 for label in ("K=16 exact sequential", "K=16 default (adaptive)")}
    spread = {label: f"{min(r):.1f}-{max(r):.1f}x per round" for label, r in per_round.items()}
    seconds = {k: statistics.median(v) for k, v in seconds.items()}
    passes = {k: v[-1] if v[-1] is None else statistics.mean(v) for k, v in passes.items()}
    figures["probe_examples_per_second"] = {k: 256 / v for k, v in seconds.items()}
    figures["probe_k16_over_k1_time"] = seconds["K=16 exact sequential"] / seconds["K=1"]
    figures["probe_default_k16_over_k1_time"] = seconds["K=16 default (adaptive)"] / seconds["K=1"]
    figures["probe_default_mean_passes"] = passes["K=16 default (adaptive)"]
    figures["probe_batched_over_sequential_time"] = seconds["K=16 exact batched"] / seconds["K=16 exact sequential"]
    figures["mc_floor"] = _mc_floor(teachers["half-a"], [r["text"] for r in rows[:32]], bench.profile.max_length)
    floor = figures["mc_floor"]
    floor_rate = 32 / (16 * floor["probe_dropout_forward_s"] + floor["eval_forward_s"])
    figures["probe_k16_over_floor_time"] = floor_rate / figures["probe_examples_per_second"]["K=16 exact sequential"]
    rate = figures["probe_examples_per_second"]
    rows_md = [
        ["probe, K = 1", f"{rate['K=1']:.1f} ex/s", ""],
        ["probe, K = 16 exact (sequential)", f"{rate['K=16 exact sequential']:.1f} ex/s",
         (f"{figures['probe_k16_over_k1_time']:.1f}x the time of K = 1 ({spread['K=16 exact sequential']}); "
          f"{figures['probe_k16_over_floor_time']:.2f}x the "
          f"floor, 16 dropout + 1 eval forwards timed alone ({1e3 * floor['probe_dropout_forward_s']:.0f} + "
          f"{1e3 * floor['eval_forward_s']:.0f} ms per 32 rows)")],
        ["one dropout pass, 32 rows", f"{1e3 * floor['probe_dropout_forward_s']:.0f} ms",
         (f"{floor['probe_dropout_forward_s'] / floor['eval_forward_s']:.2f}x an eval pass; with torch's own dropout "
          f"masks {1e3 * floor['torch_dropout_forward_s']:.0f} ms, "
          f"{floor['torch_dropout_forward_s'] / floor['eval_forward_s']:.2f}x")],
        ["probe, K = 16 exact (batched)", f"{rate['K=16 exact batched']:.1f} ex/s",
         f"{figures['probe_batched_over_sequential_time']:.2f}x the time of sequential"],
        ["probe, K = 16 default (adaptive)", f"{rate['K=16 default (adaptive)']:.1f} ex/s",
         f"{figures['probe_default_k16_over_k1_time']:.1f}x the time of K = 1 ({spread['K=16 default (adaptive)']}; "
         f"exact: {figures['probe_k16_over_k1_time']:.1f}x); "
         f"{figures['probe_default_mean_passes']:.1f} dropout passes per row on average"]]
    return figures, ws, rows_md


def speed(bench: Bench) -> None:
    source = two_teacher_workspace(bench)
    teachers = {t["name"]: t["path"] for t in source.json("teachers")}
    train = load_split(bench.data_dir, "train")
    length = str(bench.profile.max_length)
    # 1. probe throughput
    figures, ws, probe_rows = _probe_throughput(bench, teachers, train)
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
    ws("train-teacher", "labelled", "--labels", ",".join(labels), "--name", "supervised", "--base", bench.profile.base, *args, quiet=True)
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
        done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "onnx-speed", "--student", student["path"],
                               "--eval-data", str(source.root / "data" / "test.jsonl"), "--max-length", length,
                               "--json", str(out)], capture_output=True, text=True)
        if done.returncode == 0:
            onnx = json.loads(out.read_text())["results"]
        else:
            print(done.stderr[-2000:], file=sys.stderr)
    figures["onnx"] = onnx
    # 6. the default (adaptive) probe against the exact one: selection, calibration, muki-hard students
    side = probe_side_by_side(bench, source)
    figures["default_vs_exact"] = side
    # 7. the demo's total time with either probe
    figures["demo"], demo_rows = _demo_figures(bench)
    rows_md = [
        *probe_rows,
        ["repeated probe (cache hit)", f"{hit_command:.2f} s whole command", f"{hit_in_process:.2f} s inside the process"],
        ["probe peak memory, 1,000 rows", f"{memory[1000][0]:.0f} MB", ""],
        ["probe peak memory, 5,000 rows", f"{memory[5000][0]:.0f} MB", f"{memory[5000][0] / memory[1000][0]:.2f}x the 1,000-row peak"],
        ["amalgamate (muki-hard), 1 epoch", f"{figures['amalgamate_examples_per_second']:.1f} ex/s", ""],
        ["supervised fine-tuning, 1 epoch", f"{figures['supervised_examples_per_second']:.1f} ex/s",
         f"amalgamate / supervised time per epoch: {figures['amalgamate_over_supervised_time_per_epoch']:.2f}"],
        ["kamal --help", f"{figures['help_seconds_median']:.2f} s", "median of 7"],
        *demo_rows]
    for engine, r in onnx.items():
        acc = "-" if r.get("accuracy") is None else f"{100 * r['accuracy']:.1f}% test accuracy"
        rows_md.append([engine, f"{r['latency_ms_b1_t32']:.1f} ms at 1x32; {r['throughput_seq_s_b32_t128']:.1f} seq/s at 32x128",
                        f"{r['latency_speedup']:.2f}x / {r['throughput_ratio']:.2f}x PyTorch; {r['size_bytes'] / 1e6:.0f} MB; {acc}"])
    table = markdown(["what", "figure", "ratio / note"], rows_md)
    table += "\n\n" + side.pop("table")
    write_results(bench, figures, table)


SIDE_BY_SIDE_ROWS = {"transfer": 800, "test": 400}  # small enough to probe twice on a shared 2-core machine


def _side_by_side_workspace(bench: Bench, source: Workspace, probe_seed: int = 0) -> Workspace:
    """The two-halves teachers over the first transfer and test rows; probe_seed seeds the masks."""
    root = WORK / (f"{bench.profile.name}-probe-check" + (f"-seed{probe_seed}" if probe_seed else ""))
    ws = Workspace(root)
    if (root / ".kamal").is_dir():
        return ws
    from kamalcli.workspace.config import set_config_values
    bench.init(root)
    set_config_values(root / "kamal.toml", {("workspace", "seed"): str(probe_seed)})
    (root / "data").mkdir(exist_ok=True)
    for name, n in SIDE_BY_SIDE_ROWS.items():
        split = "train" if name == "transfer" else "test"
        lines = (source.root / "data" / f"{split}.jsonl").read_text().splitlines(keepends=True)[:n]
        (root / "data" / f"{name}.jsonl").write_text("".join(lines))
        ws("add-data", root / "data" / f"{name}.jsonl", "--name", name, *(["--role", "eval"] if name == "test" else []), quiet=True)
    for t in source.json("teachers"):
        ws("add-teacher", t["path"], "--name", t["name"], quiet=True)
    return ws


def _selection_by_score(report: dict, options_key: str) -> dict:
    """The test split's selection rows of one probe setting by score; `auto: X` under "auto", X as its choice."""
    rows = {}
    for s in report["selection"]:
        if s["data"] == "test" and s["options_key"] == options_key:
            auto = s["score"].startswith("auto:")
            rows["auto" if auto else s["score"]] = {**s, "chose": s["score"].split(": ", 1)[1] if auto else None}
    return rows


def probe_side_by_side(bench: Bench, source: Workspace) -> dict:
    """The default probe against the exact one: selection, calibration, muki-hard students."""
    from kamalcli.probe.runner import ProbeRequest
    k, length = bench.profile.mc_samples, bench.profile.max_length
    ws = _side_by_side_workspace(bench, source)
    bench.probe(ws)
    bench.probe(ws, "--mc-exact")
    keys = {mode: ProbeRequest(mc_samples=k, max_length=length, mc_exact=mode == "exact").options_key for mode in ("exact", "default")}
    report = ws.json("report")
    selection = {mode: _selection_by_score(report, key) for mode, key in keys.items()}
    probes = {}
    for p in report["probes"]:
        if p["data"] == "test" and p["mc_samples"] == k and p["max_length"] == length:
            probes[(p["teacher"], "default" if p.get("mc_estimator") == "adaptive" else "exact")] = p
    # the exact probe's own sampling noise: the same probe of the test rows with other dropout masks
    ws("probe", "--data", "test", "--mc-samples", str(k), "--max-length", str(length), "--mc-exact", "--seed", "1", quiet=True)
    other_key = ProbeRequest(mc_samples=k, max_length=length, seed=1, mc_exact=True).options_key
    # and the default probe with those masks' seed: both estimators' selection averaged over two mask seeds
    ws("probe", "--data", "test", "--mc-samples", str(k), "--max-length", str(length), "--seed", "1", quiet=True)
    default_other_key = ProbeRequest(mc_samples=k, max_length=length, seed=1).options_key
    report = ws.json("report")
    selection["exact, seed 1"] = _selection_by_score(report, other_key)
    selection["default, seed 1"] = _selection_by_score(report, default_other_key)
    # students from the default probe, the exact one, and the exact one with other masks (its sampling noise alone)
    other = _side_by_side_workspace(bench, source, probe_seed=1)
    arms = (("exact", ws, ("--mc-exact",)), ("default", ws, ()), ("exact, other masks", other, ("--mc-exact",)))
    students = {mode: [] for mode, _, _ in arms}
    for seed in bench.seeds:
        for mode, where, extra in arms:
            result = bench.student(where, f"probe-{mode.split(',')[0]}-muki-hard", "muki-hard", ["half-a", "half-b"], seed, extra=extra)
            students[mode].append(result["accuracy"])
    rows = []
    for score in selection["exact"]:
        e, d = selection["exact"][score], selection["default"].get(score, {})
        auroc = lambda r: "-" if r.get("auroc") is None else f"{r['auroc']:.3f}"  # noqa: E731
        o = selection["exact, seed 1"].get(score, e)
        label = score if score != "auto" else f"auto ({e['chose']} / {d['chose']})"
        d1 = selection["default, seed 1"].get(score, d)
        two_seeds = 100 * ((d["accuracy"] + d1["accuracy"]) - (e["accuracy"] + o["accuracy"])) / 2
        rows.append([f"selection by {label}", f"{100 * e['accuracy']:.1f} / {100 * d['accuracy']:.1f}",
                     f"{100 * (d['accuracy'] - e['accuracy']):+.1f} points (exact with other masks: "
                     f"{100 * (o['accuracy'] - e['accuracy']):+.1f}; mean of mask seeds 0 and 1, default - exact: "
                     f"{two_seeds:+.1f}); AUROC {auroc(e)} / {auroc(d)} ({auroc(o)})"])
    for teacher in ("half-a", "half-b"):
        e, d = probes[(teacher, "exact")], probes[(teacher, "default")]
        rows.append([f"{teacher} on test: MC ECE in / out", f"{e['mc_ece_in']:.3f} {e['mc_ece_out']:.3f} / "
                     f"{d['mc_ece_in']:.3f} {d['mc_ece_out']:.3f}",
                     f"mean MC confidence {1 - e['mean_mc_uhat']:.3f} / {1 - d['mean_mc_uhat']:.3f}; "
                     f"{d.get('mc_passes_mean', 0):.1f} passes per row (default)"])
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    per_seed = lambda arm: ", ".join(f"{100 * (d - e):+.1f}" for e, d in zip(students["exact"], students[arm]))  # noqa: E731
    delta = mean(students["default"]) - mean(students["exact"])
    noise = mean(students["exact, other masks"]) - mean(students["exact"])
    rows.append([f"muki-hard student accuracy, seeds {','.join(map(str, bench.seeds))}",
                 f"{100 * mean(students['exact']):.1f} / {100 * mean(students['default']):.1f}",
                 f"{100 * delta:+.1f} points (per seed: {per_seed('default')}); exact with other masks: "
                 f"{100 * noise:+.1f} (per seed: {per_seed('exact, other masks')})"])
    sizes = ", ".join(f"{n} {name} rows" for name, n in SIDE_BY_SIDE_ROWS.items())
    table = (f"The default (adaptive) probe against the exact one (K = {k}, two-halves teachers, {sizes}):\n\n"
             + markdown(["what", "exact / default", "difference"], rows))
    return {"selection": selection, "students": students, "student_accuracy_delta": delta,
            "exact_other_masks_student_accuracy_delta": noise,
            "selection_delta": {s: selection["default"][s]["accuracy"] - selection["exact"][s]["accuracy"]
                                for s in selection["exact"] if s in selection["default"]},
            "two_mask_seeds_selection_delta": {
                s: (selection["default"][s]["accuracy"] + selection["default, seed 1"][s]["accuracy"]
                    - selection["exact"][s]["accuracy"] - selection["exact, seed 1"][s]["accuracy"]) / 2
                for s in selection["exact"]
                if all(s in selection[m] for m in ("default", "default, seed 1", "exact, seed 1"))},
            "exact_other_masks_selection_delta": {
                s: selection["exact, seed 1"][s]["accuracy"] - selection["exact"][s]["accuracy"]
                for s in selection["exact"] if s in selection["exact, seed 1"]},
            "table": table}


def demo_time(bench: Bench) -> None:
    figures, rows = _demo_figures(bench)
    write_results(bench, {"demo": figures}, markdown(["what", "figure", "note"], rows))


def _demo_figures(bench: Bench) -> tuple[dict, list]:
    """`kamal demo` as shipped, twice back to back: minutes, probing minutes and whether muki-hard leads."""
    rows, figures = [], {}
    for run in ("run 1", "run 2"):
        target = WORK / f"demo-{run.replace(' ', '')}"
        shutil.rmtree(target, ignore_errors=True)
        bench.say(f"kamal demo, {run}")
        load = os.getloadavg()[0]
        done = subprocess.run([*KAMAL, "demo", "--dir", str(target)], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"kamal demo failed:\n{done.stderr[-2000:]}")
        took = re.search(r"The demo took ([\d.]+) minutes, ([\d.]+) of them probing", done.stdout)
        acc = {m: float(re.search(rf"{m}\s*[│|]\s*([\d.]+)", done.stdout).group(1))
               for m in ("muki-hard", "vanilla-kd", "baseline ensemble")}
        figures[run] = {"minutes": float(took.group(1)), "probe_minutes": float(took.group(2)), "load_before": load,
                        "accuracy": acc, "muki_hard_leads": acc["muki-hard"] > max(acc["vanilla-kd"], acc["baseline ensemble"])}
        rows.append([f"kamal demo, {run}", f"{figures[run]['minutes']:.1f} min", f"probing {took.group(2)} min; "
                     + "; ".join(f"{m} {a}%" for m, a in acc.items()) + f"; load average {load:.1f} at its start"])
    return figures, rows


# ---- random MiniLM shapes (gpu-figures, cpu-overhead) ----------------------------------------------------------

def minilm_like(num_labels: int, layers: int = 6, seed: int = 0):
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=layers, num_attention_heads=12,
                        intermediate_size=1536, num_labels=num_labels)
    return BertForSequenceClassification(config).eval()


# ---- gpu-figures ---------------------------------------------------------------------------------------------------

WORDS = ("market shares profit merger bank revenue goal match league coach tennis stadium software physics robot "
         "chip genome telescope vaccine doctor clinic disease nurse therapy painting novel museum theatre poetry "
         "election minister treaty embassy parliament border the a today new report said on in big week").split()


def random_encoded(rows: int, length: int, seed: int = 0):
    from kamalcli.models.batching import Encoded
    rng = np.random.default_rng(seed)
    return Encoded([rng.integers(1000, 30000, size=length) for _ in range(rows)], 0, True)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize()


def probe_rate(device: str, rows: int, length: int, k: int, exact: bool, batch_size: int) -> float:
    from kamalcli.probe.arrays import ProbeSettings
    from kamalcli.probe.mc_dropout import pick_mode, run_teacher
    model = minilm_like(5, seed=1)
    settings = ProbeSettings(mc_samples=k, max_length=length, layers=(3, 6), mc_exact=exact)
    encoded = random_encoded(rows, length)
    with tempfile.TemporaryDirectory() as tmp:
        run_teacher(model, random_encoded(batch_size, length, seed=9), settings, Path(tmp) / "warm", device=device,
                    batch_size=batch_size, mode=pick_mode("auto", device))
        sync(device)
        started = time.perf_counter()
        run_teacher(model, encoded, settings, Path(tmp) / "probe", device=device, batch_size=batch_size, mode=pick_mode("auto", device))
        sync(device)
        return rows / (time.perf_counter() - started)


def loop_rate(device: str, rows: int, length: int, batch_size: int) -> float:
    from kamalcli.labels import LabelSpace
    from kamalcli.methods import get_method
    from kamalcli.methods.base import TeacherOutputs
    from kamalcli.train.loop import TrainConfig, train
    rng = np.random.default_rng(0)
    space = LabelSpace.from_teachers([("t0", [f"a{i}" for i in range(5)]), ("t1", [f"b{i}" for i in range(5)])])
    outputs = TeacherOutputs(space, ("t0", "t1"), tuple(rng.standard_normal((rows, 5)).astype(np.float32)
                                                        for _ in range(2)), {"mc-dropout": rng.random((rows, 2))})
    method = get_method("muki-hard")
    objective = method.build(outputs, method.parse([]))
    config = TrainConfig(epochs=1, batch_size=batch_size, lr=1e-4, max_length=length, device=device, checkpoint_every=10**9)
    encoded = random_encoded(rows, length)
    with tempfile.TemporaryDirectory() as tmp:
        train(minilm_like(len(space), seed=3), encoded, objective, config, Path(tmp) / "warm",
              rows=np.arange(min(rows, 2 * batch_size)), description="warm-up")
        student = minilm_like(len(space), seed=3)
        sync(device)
        started = time.perf_counter()
        train(student, encoded, objective, config, Path(tmp) / "run", description="amalgamate (muki-hard)")
        sync(device)
        return rows / (time.perf_counter() - started)


def classifier_folder(folder: Path) -> Path:
    """A MiniLM-L6-shaped classifier with random weights and a small word-level tokenizer (no download)."""
    from transformers import BertTokenizerFast
    model = minilm_like(10, seed=4)
    model.save_pretrained(str(folder), safe_serialization=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(WORDS))]
    BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True).save_pretrained(str(folder))
    return folder


def texts(n: int, words: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=words)) for _ in range(n)]


def onnx_rows(device: str, runs: int, length: int) -> tuple[list[list[str]], list[str]]:
    """(table rows, notes): PyTorch and onnxruntime fp32 / fp16 at batch 1 and 32 (`length` tokens), on device."""
    import torch
    from kamalcli.errors import KamalError
    from kamalcli.export.onnx import export_onnx
    from kamalcli.export.runtime import create_session, import_ort
    from kamalcli.models.loading import load_classifier
    ort = import_ort()
    notes = [f"onnxruntime {ort.__version__}; available providers: {', '.join(ort.get_available_providers())}"]
    work = Path(tempfile.mkdtemp(prefix="kamal-gpu-figures-"))
    student = classifier_folder(work / "student")
    fp32 = export_onnx(student, work / "onnx", parity_texts=texts(16, 12)).model_path
    fp16 = work / "model-fp16.onnx"
    try:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16
        onnx.save(convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), str(fp16))
    except Exception as e:  # noqa: BLE001 - a figure we cannot take is said, not fatal
        notes.append(f"fp16 conversion failed: {type(e).__name__}: {e}")
        fp16 = None
    ort_device = "cuda" if device.startswith("cuda") else "cpu"
    sessions = {}
    for name, path in (("onnxruntime fp32", fp32), ("onnxruntime fp16", fp16)):
        if path is None:
            continue
        try:
            session = create_session(path, ort_device)
            sessions[f"{name} ({', '.join(session.get_providers())})"] = session
        except KamalError as e:
            notes.append(f"{name} on {ort_device}: NOT MEASURED: {e}")
        except Exception as e:  # noqa: BLE001
            notes.append(f"{name} on {ort_device}: NOT MEASURED: {type(e).__name__}: {str(e).splitlines()[0]}")
    if ort_device == "cuda" and not any("CUDAExecutionProvider" in name for name in sessions):
        notes.append("CUDAExecutionProvider is ABSENT or did not load: no ONNX figure on CUDA "
                     "(pip install onnxruntime-gpu and the CUDA and cuDNN it was built for)")
    elif ort_device == "cuda":
        # kamal's sessions run full fp32 (TF32 moved scope scores by 0.2 on an H100); onnxruntime's default beside it
        sessions["onnxruntime fp32, TF32 on (onnxruntime's default, not kamal's)"] = ort.InferenceSession(
            str(fp32), providers=[("CUDAExecutionProvider", {"use_tf32": 1}), "CPUExecutionProvider"])
    model = load_classifier(student).to(device)
    half = load_classifier(student).to(device).half() if device.startswith("cuda") else None
    engines = {"PyTorch fp32": model, **({"PyTorch fp16": half} if half is not None else {}), **sessions}
    rows = []
    rng = np.random.default_rng(0)
    for batch in (1, 32):
        ids = rng.integers(5, 5 + len(set(WORDS)), size=(batch, length)).astype(np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        times = {}
        for name, engine in engines.items():
            if isinstance(engine, torch.nn.Module):
                tensors = {k: torch.from_numpy(v).to(device) for k, v in feed.items()}

                def call(engine=engine, tensors=tensors):
                    with torch.inference_mode():
                        engine(**tensors)
                    sync(device)
            else:
                inputs = {i.name for i in engine.get_inputs()}

                def call(engine=engine, inputs=inputs):
                    engine.run(["logits"], {k: v for k, v in feed.items() if k in inputs})
            try:
                for _ in range(5):
                    call()
            except Exception as e:  # noqa: BLE001 - e.g. fp16 kernels a provider lacks: said, not fatal
                notes.append(f"{name} at batch {batch}: NOT MEASURED: {type(e).__name__}: {str(e).splitlines()[0]}")
                continue
            samples = []
            for _ in range(runs):
                started = time.perf_counter()
                call()
                samples.append(time.perf_counter() - started)
            times[name] = statistics.median(samples)
        base = times["PyTorch fp32"]
        rows += [[f"batch {batch} x {length}", name, f"{1e3 * t:.2f}", f"{batch / t:.0f}", f"{base / t:.2f}x"] for name, t in times.items()]
    shutil.rmtree(work, ignore_errors=True)
    return rows, notes


def gpu_figures_main(argv: list[str] | None = None) -> None:
    """Per-row costs on a GPU against this CPU: probe (K = 1, K = 16), the training loop, ONNX on CUDA vs PyTorch."""
    prepare_environment()
    import torch
    parser = argparse.ArgumentParser(prog="run.py gpu-figures", description=gpu_figures_main.__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows", type=int, default=8192, help="rows on the GPU")
    parser.add_argument("--cpu-rows", type=int, default=256, help="rows on the CPU (a row costs the same)")
    parser.add_argument("--length", type=int, default=64, help="tokens per row (probe and training)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--onnx-runs", type=int, default=50)
    parser.add_argument("--onnx-length", type=int, default=128, help="tokens per row for the ONNX figures")
    parser.add_argument("--small", action="store_true", help="CPU only, tiny sizes: checks that everything runs")
    args = parser.parse_args(argv)
    if args.small:
        args.device, args.cpu_rows, args.length, args.onnx_runs, args.onnx_length = "cpu", 32, 16, 2, 16
    devices = [args.device] if args.device == "cpu" else [args.device, "cpu"]
    figures = {}
    for device in devices:
        rows = args.cpu_rows if device == "cpu" else args.rows
        print(f"[{device}] probe and training loop, {rows} rows x {args.length} tokens ...", file=sys.stderr, flush=True)
        figures[device] = {
            "probe K=1": probe_rate(device, rows, args.length, 1, False, args.batch_size),
            "probe K=16 exact": probe_rate(device, rows, args.length, 16, True, args.batch_size),
            "probe K=16 adaptive (default; random weights)": probe_rate(device, rows, args.length, 16, False,
                                                                         args.batch_size),
            "amalgamate (training loop, muki-hard)": loop_rate(device, rows, args.length, args.batch_size),
        }
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "-"
    print(f"\nMiniLM-L6 shapes, random weights, {args.length} tokens a row, batch {args.batch_size}; "
          f"GPU: {name}; CPU: {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)\n")
    gpu = args.device if args.device != "cpu" else None
    headers = ["what", *(f"rows/s on {d}" for d in devices)] + (["GPU / CPU"] if gpu else [])
    body = []
    for what in figures[devices[0]]:
        row = [what, *(f"{figures[d][what]:.1f}" for d in devices)]
        if gpu:
            row.append(f"{figures[gpu][what] / figures['cpu'][what]:.1f}x")
        body.append(row)
    print(markdown(headers, body))
    per_row = {what: 1 / value for what, value in figures[devices[0]].items()}
    print(f"\nPer-row cost on {devices[0]} (ms): " + "; ".join(f"{w} {1e3 * c:.3f}" for w, c in per_row.items()))
    print(f"\nONNX vs PyTorch on {args.device} (median of {args.onnx_runs} calls, host arrays in and out):\n")
    rows, notes = onnx_rows(args.device, args.onnx_runs, args.onnx_length)
    print(markdown(["shape", "engine", "ms per call", "rows/s", "x PyTorch fp32"], rows))
    for note in notes:
        print(f"  note: {note}")


# ---- cuda-walk -----------------------------------------------------------------------------------------------------

WALK_TEXTS = ["the match ended with a late goal", "shares fell after the merger", "the telescope found a comet"]


def walk_kamal(workspace: Path, *args) -> tuple[int, float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kamalcli", "--workspace", str(workspace), *map(str, args)],
                          capture_output=True, text=True)
    return done.returncode, time.perf_counter() - started, done.stdout + done.stderr


def cuda_walk_main(argv: list[str] | None = None) -> int:
    """The CLI's CUDA paths end to end, on tiny random models (no download): every step a user types, with --device."""
    parser = argparse.ArgumentParser(prog="run.py cuda-walk", description=cuda_walk_main.__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, help="keep the workspace here (default: a temporary folder)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "tests"))
    import tiny
    root = args.out or Path(tempfile.mkdtemp(prefix="kamal-cuda-walk-"))
    root.mkdir(parents=True, exist_ok=True)
    four = ["world", "sports", "business", "scitech"]
    tiny.make_encoder(root / "encoder", seed=6)
    tiny.write_jsonl(root / "train.jsonl", tiny.topic_rows(four, 60, seed=11))
    tiny.write_jsonl(root / "pool.jsonl", [{"text": r["text"]} for r in tiny.topic_rows(four, 60, seed=12)])
    tiny.write_jsonl(root / "test.jsonl", tiny.topic_rows(four, 20, seed=13))
    ws, device = root / "ws", args.device
    teacher_training = ("--base", root / "encoder", "--epochs", 10, "--lr", "3e-3", "--batch-size", 16,
                        "--max-length", 32, "--device", device)
    training = ("--student", root / "encoder", "--epochs", 8, "--lr", "2e-3", "--batch-size", 16, "--max-length", 32, "--device", device)
    steps = [
        ("init", ("init", ws)),
        ("add-data train", ("add-data", root / "train.jsonl", "--name", "train", "--role", "eval")),
        ("train-teacher news", ("train-teacher", "train", "--labels", "world,sports", "--name", "news",
                                *teacher_training)),
        ("train-teacher money", ("train-teacher", "train", "--labels", "business,scitech", "--name", "money",
                                 *teacher_training)),
        ("add-data pool", ("add-data", root / "pool.jsonl", "--name", "pool")),
        ("add-data test", ("add-data", root / "test.jsonl", "--name", "test", "--role", "eval")),
        ("probe", ("probe", "--data", "pool", "--device", device)),
        ("amalgamate muki-hard", ("amalgamate", "--method", "muki-hard", "--data", "pool", "--name", "hard",
                                  *training)),
        ("amalgamate dfa (teachers in the loop)", ("amalgamate", "--method", "dfa", "--data", "pool", "--name",
                                                   "dfa", *training)),
        ("calibrate", ("calibrate", "hard", "--data", "test", "--coverage", "0.9", "--device", device)),
        ("eval", ("eval", "hard", "--data", "test", "--device", device)),
        ("predict", ("predict", "hard", *WALK_TEXTS, "--device", device, "--json")),
        ("predict on cpu", ("predict", "hard", *WALK_TEXTS, "--device", "cpu", "--json")),
        ("export --onnx", ("export", "hard", "--onnx")),
        ("predict --onnx", ("predict", "hard", *WALK_TEXTS, "--onnx", "--device", device, "--json"))]
    outputs, failed = {}, 0
    for name, argv in steps:
        code, seconds, output = walk_kamal(ws, *argv) if argv[0] != "init" else walk_kamal(root, *argv)
        outputs[name] = output
        failed += code != 0
        print(f"{'ok ' if code == 0 else 'FAIL'} {name:<40} exit {code}  {seconds:6.1f} s", flush=True)
        if code != 0:
            print("     " + "\n     ".join(output.strip().splitlines()[-6:]))

    def rows(step: str) -> list[dict] | None:
        try:
            return json.loads(outputs[step])
        except (KeyError, ValueError, TypeError):
            return None

    def same(a: list[dict] | None, b: list[dict] | None) -> tuple[bool, float]:
        """Labels, in_scope and sets equal; the largest scope_score difference."""
        if a is None or b is None:
            return False, float("nan")
        keys = ("label", "in_scope", "set")
        equal = all(x.get(k) == y.get(k) for x, y in zip(a, b) for k in keys)
        return equal, max(abs(x["scope_score"] - y["scope_score"]) for x, y in zip(a, b))

    cpu, gpu, onnx = rows("predict on cpu"), rows("predict"), rows("predict --onnx")
    gpu_ok, gpu_diff = same(gpu, cpu)
    onnx_ok, onnx_diff = same(onnx, cpu)
    print(f"\npredict on {device} vs cpu: labels, in_scope and sets {'equal' if gpu_ok else 'DIFFER'}; "
          f"max |scope_score difference| {gpu_diff:.2e}")
    print(f"predict --onnx on {device} vs PyTorch on cpu: labels, in_scope and sets {'equal' if onnx_ok else 'DIFFER'}; "
          f"max |scope_score difference| {onnx_diff:.2e}")
    return 1 if failed or not gpu_ok or not onnx_ok else 0


# ---- distributed-speed ---------------------------------------------------------------------------------------------

def timed(ws, *args) -> float:
    code, seconds, output = walk_kamal(ws.root, *args)
    if code:
        raise SystemExit(f"kamal {' '.join(map(str, args))} failed ({code}):\n{output[-3000:]}")
    return seconds


def distributed_speed_main(argv: list[str] | None = None) -> None:
    """Two processes against one on this machine: probe and amalgamate time, and the student's accuracy."""
    parser = argparse.ArgumentParser(prog="run.py distributed-speed", description=distributed_speed_main.__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000, help="transfer rows (also the teachers' labelled rows)")
    parser.add_argument("--test-rows", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=1, help="rounds of (one process, two processes)")
    args = parser.parse_args(argv)
    profile = Profile(f"dist{args.rows}", "minilm-l3", transfer_rows=args.rows, test_rows=args.test_rows,
                      mc_samples=8, max_length=64, teacher_epochs=2, student_epochs=1, lr=3e-4)
    bench = Bench("distributed-speed", profile)
    ws = bench.workspace("halves")
    bench.teacher(ws, "half-a", HALF_A)
    bench.teacher(ws, "half-b", HALF_B)
    bench.say("the probe the students read (one process, not timed)")
    ws("probe", "--data", "transfer", "--no-rmd", quiet=True)
    probe = ["probe", "--data", "transfer", "--data", "test", "--no-rmd"]
    train = ["--method", "muki-hard", "--data", "transfer", "--student", profile.base, *profile.train_args(profile.student_epochs, seed=1)]
    results: dict[int, dict[str, list]] = {1: {}, 2: {}}
    for repeat in range(args.repeats):
        for processes in (1, 2) if repeat % 2 == 0 else (2, 1):
            extra = ["--nproc", "2"] if processes == 2 else []
            bench.say(f"round {repeat + 1}: probe on {processes} process(es)")
            seed = 1000 + 10 * repeat + processes  # a probe not in the cache yet
            results[processes].setdefault("probe", []).append(timed(ws, *probe, "--seed", seed, *extra))
            bench.say(f"round {repeat + 1}: amalgamate on {processes} process(es)")
            name = f"muki-p{processes}-r{repeat}-{int(time.time())}"
            results[processes].setdefault("amalgamate", []).append(timed(ws, "amalgamate", *train, "--name", name, *extra))
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


# ---- onnx-speed ----------------------------------------------------------------------------------------------------

SENTENCES = [
    "The central bank raised interest rates by a quarter point on Wednesday.",
    "Shares of the chipmaker jumped after it reported record quarterly revenue.",
    "The striker scored twice in the second half to keep his team top of the league.",
    "Researchers found that the new vaccine cut hospital admissions by half.",
    "Parliament voted late on Tuesday to approve the revised border treaty.",
    "A new telescope has captured the sharpest images yet of a distant galaxy.",
    "The museum reopens next month with an exhibition of early modern painting.",
    "Doctors warn that the flu season could be longer than usual this year.",
    "The coach said the injury would keep their captain out for several weeks.",
    "Oil prices fell as traders weighed weaker demand against tighter supply.",
    "Engineers unveiled a robot that can sort recycling faster than people.",
    "The novel, her third, follows two sisters across four decades of war and peace.",
    "Ministers from both countries met at the embassy to discuss the ceasefire.",
    "The merger would create the largest insurer in the region by premiums.",
    "Wimbledon organisers extended play into the evening after rain delays.",
    "A software update fixed the flaw that let attackers read private messages.",
    "Nurses at the clinic began a two-day strike over pay and staffing.",
    "The theatre company will tour the play through twelve cities this autumn.",
    "Quarterly profit beat forecasts, but the outlook for next year was cautious.",
    "Physicists measured the particle's mass with unprecedented precision.",
    "Election officials said turnout was the highest in three decades.",
    "The marathon was won in a course record despite strong headwinds.",
    "Gene therapy restored partial sight to patients in a small trial.",
    "Poetry readings drew record crowds at this year's literary festival.",
]


def parity_texts(n: int = 96, seed: int = 0) -> list[str]:
    """Real sentences, alone or joined, so the batches mix short and long rows."""
    rng = random.Random(seed)
    texts = list(SENTENCES)
    while len(texts) < n:
        texts.append(" ".join(rng.sample(SENTENCES, rng.randint(1, 6))))
    rng.shuffle(texts)
    return texts


def fixed_batch(tokenizer, batch: int, length: int, seed: int) -> dict:
    """`batch` rows of exactly `length` real tokens (no padding)."""
    rng = random.Random(seed)
    texts = [" ".join(rng.sample(SENTENCES, len(SENTENCES))) for _ in range(batch)]
    enc = tokenizer(texts, truncation=True, max_length=length, padding="max_length", return_tensors="np")
    return {k: v.astype("int64") for k, v in enc.items()}


def engine_accuracy(path: Path, tokenizer, names, engines, id2label, max_length: int) -> dict[str, float]:
    """Accuracy of every engine on a labelled jsonl (the same tokenised batches for all)."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    gold = np.array([r["label"] for r in rows])
    labels = np.array([id2label[i] for i in range(len(id2label))])
    correct = {engine: 0 for engine in engines}
    for start in range(0, len(rows), 32):
        enc = tokenizer([r["text"] for r in rows[start:start + 32]], padding=True, truncation=True,
                        max_length=max_length, return_tensors="np")
        feed = {k: v.astype("int64") for k, v in enc.items() if k in names}
        for engine, call in engines.items():
            out = call(feed)
            logits = out[0] if isinstance(out, list) else out.numpy()
            correct[engine] += int((labels[logits.argmax(-1)] == gold[start:start + 32]).sum())
    return {engine: n / len(rows) for engine, n in correct.items()}


def onnx_speed_main(argv: list[str] | None = None) -> None:
    """PyTorch eager vs onnxruntime fp32 vs onnxruntime int8 on one student, side by side (the speed suite's ONNX rows)."""
    parser = argparse.ArgumentParser(prog="run.py onnx-speed", description=onnx_speed_main.__doc__.splitlines()[0])
    parser.add_argument("--student", type=Path, required=True, help="a classifier folder")
    parser.add_argument("--latency-runs", type=int, default=300)
    parser.add_argument("--throughput-runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--eval-data", type=Path, help="a jsonl of {text, label}: accuracy of each engine on it")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per text for --eval-data")
    args = parser.parse_args(argv)
    prepare_environment()
    import torch
    from kamalcli.export.onnx import export_onnx
    from kamalcli.export.runtime import create_session
    from kamalcli.models.loading import load_classifier, load_tokenizer
    work = Path(tempfile.mkdtemp(prefix="kamal-onnx-bench-"))
    student = args.student
    fp32 = export_onnx(student, work / "onnx-fp32", parity_texts=parity_texts())
    int8 = export_onnx(student, work / "onnx-int8", parity_texts=parity_texts(), quantize="int8")
    model = load_classifier(student)  # default attention (sdpa), as kamal predicts
    tokenizer = load_tokenizer(student)
    names = fp32.inputs
    sessions = {"onnxruntime fp32": create_session(fp32.model_path, "cpu"), "onnxruntime int8": create_session(int8.model_path, "cpu")}

    def torch_call(feed):
        with torch.inference_mode():
            return model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits

    def ort_call(session):
        return lambda feed: session.run(["logits"], feed)

    engines = {"PyTorch eager (sdpa)": torch_call, **{k: ort_call(s) for k, s in sessions.items()}}
    shapes = {"latency": (1, 32, args.latency_runs), "throughput": (32, 128, args.throughput_runs)}
    times: dict[str, dict[str, list[float]]] = {s: {e: [] for e in engines} for s in shapes}
    rng = random.Random(0)
    for setting, (batch, length, runs) in shapes.items():
        feed = {k: v for k, v in fixed_batch(tokenizer, batch, length, seed=batch).items() if k in names}
        for _ in range(args.warmup):
            for call in engines.values():
                call(feed)
        for _ in range(runs):
            order = list(engines)
            rng.shuffle(order)  # interleaved, in a fresh order each repetition
            for engine in order:
                start = time.perf_counter()
                engines[engine](feed)
                times[setting][engine].append(time.perf_counter() - start)
    accuracy = {}
    if args.eval_data:
        accuracy = engine_accuracy(args.eval_data, tokenizer, names, engines, model.config.id2label, args.max_length)
    safetensors = sum(p.stat().st_size for p in Path(student).glob("*.safetensors"))
    sizes = {"PyTorch eager (sdpa)": safetensors, "onnxruntime fp32": fp32.size_bytes, "onnxruntime int8": int8.size_bytes}
    results = {}
    for engine in engines:
        latency = statistics.median(times["latency"][engine])
        per_batch = statistics.median(times["throughput"][engine])
        results[engine] = {"latency_ms_b1_t32": latency * 1e3, "throughput_seq_s_b32_t128": 32 / per_batch,
                           "size_bytes": sizes[engine], "accuracy": accuracy.get(engine)}
    base = results["PyTorch eager (sdpa)"]
    for r in results.values():
        r["latency_speedup"] = base["latency_ms_b1_t32"] / r["latency_ms_b1_t32"]
        r["throughput_ratio"] = r["throughput_seq_s_b32_t128"] / base["throughput_seq_s_b32_t128"]
    print(markdown(["engine", "latency b1x32 (ms)", "speed-up", "throughput b32x128 (seq/s)", "x PyTorch",
                    "model file (MB)", "accuracy %"],
                   [[engine, f"{r['latency_ms_b1_t32']:.2f}", f"{r['latency_speedup']:.2f}x",
                     f"{r['throughput_seq_s_b32_t128']:.1f}", f"{r['throughput_ratio']:.2f}x", f"{r['size_bytes'] / 1e6:.1f}",
                     "-" if r["accuracy"] is None else f"{100 * r['accuracy']:.1f}"] for engine, r in results.items()]))
    if args.json:
        args.json.write_text(json.dumps({"model": str(student), "results": results, "torch": torch.__version__,
                                         "parity": {"fp32": fp32.parity, "int8": int8.parity}}, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)


def prepare_environment() -> None:
    """kamal's environment defaults (caches, quiet libraries), before torch or transformers is imported."""
    from kamalcli.runtime import prepare_environment as prepare
    prepare()


# ---- cpu-overhead ---------------------------------------------------------------------------------------------------

def plain_loop_seconds(student, encoded, targets: np.ndarray, batch_size: int, seed: int) -> float:
    """A plain transformers fine-tuning loop: the batches kamal's loop forms (same order and padding), AdamW with
    a linear schedule, soft cross-entropy against the targets, gradient clipping; nothing else."""
    import torch
    from kamalcli.models.batching import training_order
    rows = training_order(len(encoded), seed, 0)
    optimizer = torch.optim.AdamW(student.parameters(), lr=1e-4, weight_decay=0.01)
    steps = -(-len(rows) // batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / steps)
    target = torch.as_tensor(targets)
    student.train()
    started = time.perf_counter()
    for start in range(0, len(rows), batch_size):
        index = rows[start:start + batch_size]
        logits = student(**encoded.batch(index)).logits
        loss = -(target[index] * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
    return time.perf_counter() - started


def plain_probe_seconds(model, encoded, batch_size: int) -> float:
    """A plain eval-mode forward over the rows in kamal's length-sorted batches, hidden states returned (what a
    K = 1 probe needs for its logits and RMD features), nothing written."""
    import torch
    from kamalcli.models.batching import inference_batches
    model.eval()
    started = time.perf_counter()
    with torch.inference_mode():
        for index in inference_batches(encoded.lengths, batch_size):
            out = model(**encoded.batch(index), output_hidden_states=True)
            out.logits.float().numpy()
    return time.perf_counter() - started


def overhead_main(argv: list[str] | None = None) -> None:
    """kamal's training loop and K = 1 probe against plain transformers loops over the same rows and batches."""
    parser = argparse.ArgumentParser(prog="run.py cpu-overhead", description=overhead_main.__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="alternating pairs; the median of each side")
    parser.add_argument("--layers", type=int, default=6, help="MiniLM-shaped random model depth (default 6)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "cpu-overhead.md")
    args = parser.parse_args(argv)
    import torch
    from kamalcli.labels import LabelSpace
    from kamalcli.methods import get_method
    from kamalcli.methods.base import TeacherOutputs
    from kamalcli.probe.arrays import ProbeSettings
    from kamalcli.probe.mc_dropout import pick_mode, run_teacher
    from kamalcli.train.loop import TrainConfig, train

    from kamalcli.models.batching import Encoded
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(3.8, 0.5, size=args.rows).astype(int), 8, 128)  # 45 tokens typical, some 128
    encoded = Encoded([rng.integers(1000, 30000, size=n) for n in lengths], 0, True)
    space = LabelSpace.from_teachers([("t0", [f"a{i}" for i in range(5)]), ("t1", [f"b{i}" for i in range(5)])])
    outputs = TeacherOutputs(space, ("t0", "t1"), tuple(rng.standard_normal((args.rows, 5)).astype(np.float32)
                                                        for _ in range(2)), {"mc-dropout": rng.random((args.rows, 2))})
    method = get_method("vanilla-kd")
    objective = method.build(outputs, method.parse([]))
    targets = torch.softmax(torch.as_tensor(np.concatenate(outputs.logits, axis=1)), dim=-1).numpy()
    config = TrainConfig(epochs=1, batch_size=args.batch_size, lr=1e-4, max_length=128, checkpoint_every=10**9)
    probe = ProbeSettings(mc_samples=1, max_length=128, layers=(args.layers // 2, args.layers), mc_exact=True)
    seconds: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for label, run in (
                ("kamal training loop (vanilla-kd, one epoch)", lambda: _timed(lambda: train(
                    minilm_like(len(space), args.layers, seed=3), encoded, objective, config,
                    Path(tmp) / f"loop-{repeat}", description="kamal loop"))),
                ("plain transformers loop", lambda: plain_loop_seconds(
                    minilm_like(len(space), args.layers, seed=3), encoded, targets, args.batch_size, 0)),
                ("kamal probe, K = 1 (logits, RMD features written)", lambda: _timed(lambda: run_teacher(
                    minilm_like(5, args.layers, seed=1), encoded, probe, Path(tmp) / f"probe-{repeat}",
                    batch_size=args.batch_size, mode=pick_mode("auto", "cpu")))),
                ("plain eval forward, hidden states", lambda: plain_probe_seconds(
                    minilm_like(5, args.layers, seed=1), encoded, args.batch_size)),
            ):
                seconds.setdefault(label, []).append(run())
    median = {label: statistics.median(values) for label, values in seconds.items()}
    labels = list(median)
    rows = [[label, f"{args.rows / median[label]:.1f}",
             f"{median[label] / median[labels[i - 1]]:.2f}x kamal" if i % 2 else ""] for i, label in enumerate(labels)]
    table = (f"{args.rows} rows of 8-128 tokens (median {int(np.median(lengths))}), batch {args.batch_size}, MiniLM-L"
             f"{args.layers} shapes (random weights), {torch.get_num_threads()} threads; median of {args.repeats} "
             "alternating runs\n\n" + markdown(["what", "rows/s", "plain / kamal time"], rows))
    args.out.write_text(f"<!-- cpu-overhead, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs -->\n{table}\n")
    print(table)
