"""Speed figures, each a ratio measured side by side in one run (these machines are noisy)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from common import HALF_A, HALF_B, REPO, WORK, Bench, Workspace, load_split, markdown, sample, write_results
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
    # interleaved rounds (other dropout seeds, so nothing is served from the cache); the median of each:
    # a shared machine's load drifts, and a ratio of medians taken turn about follows it less
    for round_ in range(PROBE_ROUNDS):
        for offset, (label, args) in enumerate(runs):  # the pass mode is not in the cache key: seeds apart
            if round_ and "batched" in label:
                continue  # not one of the ratios reported against K = 1: once is enough
            bench.say(f"probe 256 rows, {label}, round {round_ + 1} of {PROBE_ROUNDS}")
            ws("probe", "--no-rmd", "--data", "rows", "--max-length", length, *args, "--seed", str(10 * offset + round_ + 1),
               quiet=True)
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
         f"{figures['probe_default_mean_passes']:.1f} dropout passes per row on average"],
    ]
    return figures, ws, rows_md


def probe_speed(bench: Bench) -> None:
    """The probe's figures alone: throughput of the exact and default probes, and the side-by-side comparison."""
    source = bench.workspace("two-halves")  # its teachers only: the comparison has its own, smaller data
    bench.teacher(source, "half-a", HALF_A)
    bench.teacher(source, "half-b", HALF_B)
    teachers = {t["name"]: t["path"] for t in source.json("teachers")}
    figures, _, rows_md = _probe_throughput(bench, teachers, load_split(bench.data_dir, "train"))
    side = probe_side_by_side(bench, source)
    table = markdown(["what", "figure", "ratio / note"], rows_md) + "\n\n" + side.pop("table")
    write_results(bench, {**figures, "default_vs_exact": side}, table)


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
        *demo_rows,
    ]
    for engine, r in onnx.items():
        acc = "-" if r.get("accuracy") is None else f"{100 * r['accuracy']:.1f}% test accuracy"
        rows_md.append([engine, f"{r['latency_ms_b1_t32']:.1f} ms at 1x32; {r['throughput_seq_s_b32_t128']:.1f} seq/s at 32x128",
                        f"{r['latency_speedup']:.2f}x / {r['throughput_ratio']:.2f}x PyTorch; {r['size_bytes'] / 1e6:.0f} MB; {acc}"])
    table = markdown(["what", "figure", "ratio / note"], rows_md)
    table += "\n\n" + side.pop("table")
    write_results(bench, figures, table)


SIDE_BY_SIDE_ROWS = {"transfer": 800, "test": 400}  # small enough to probe twice on a shared 2-core machine


def _side_by_side_workspace(bench: Bench, source: Workspace, probe_seed: int = 0) -> Workspace:
    """The two-halves teachers (added as folders) over the first rows of the profile's transfer and test sets.

    probe_seed: the workspace seed, which seeds the probe's dropout masks (students get theirs from --seed).
    """
    root = WORK / (f"{bench.profile.name}-probe-check" + (f"-seed{probe_seed}" if probe_seed else ""))
    ws = Workspace(root)
    if (root / ".kamal").is_dir():
        return ws
    from kamalcli.cli import cli
    from kamalcli.workspace.config import set_config_values

    cli.main(["init", str(root)], prog_name="kamal", standalone_mode=False)
    bench._configure(root)
    set_config_values(root / "kamal.toml", {("workspace", "seed"): str(probe_seed)})
    (root / "data").mkdir(exist_ok=True)
    for name, n in SIDE_BY_SIDE_ROWS.items():
        split = "train" if name == "transfer" else "test"
        lines = (source.root / "data" / f"{split}.jsonl").read_text().splitlines(keepends=True)[:n]
        (root / "data" / f"{name}.jsonl").write_text("".join(lines))
        ws("add-data", root / "data" / f"{name}.jsonl", "--name", name, *(["--role", "eval"] if name == "test" else []),
           quiet=True)
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
    """The default probe against the exact one on the two-halves teachers, same rows and K (the profile's).

    Selection accuracy and AUROC per score on the test split, MC-dropout ECE and mean confidence per teacher,
    and muki-hard students trained from each probe (one per seed).
    """
    from kamalcli.probe.runner import ProbeRequest

    k, length = bench.profile.mc_samples, bench.profile.max_length
    ws = _side_by_side_workspace(bench, source)
    bench.probe(ws)
    bench.probe(ws, "--mc-exact")
    keys = {mode: ProbeRequest(mc_samples=k, max_length=length, mc_exact=mode == "exact").options_key
            for mode in ("exact", "default")}
    report = ws.json("report")
    selection = {mode: _selection_by_score(report, key) for mode, key in keys.items()}
    probes = {}
    for p in report["probes"]:
        if p["data"] == "test" and p["mc_samples"] == k and p["max_length"] == length:
            probes[(p["teacher"], "default" if p.get("mc_estimator") == "adaptive" else "exact")] = p
    # the exact probe's own sampling noise: the same probe of the test rows with other dropout masks
    ws("probe", "--data", "test", "--mc-samples", str(k), "--max-length", str(length), "--mc-exact", "--seed", "1",
       quiet=True)
    other_key = ProbeRequest(mc_samples=k, max_length=length, seed=1, mc_exact=True).options_key
    # and the default probe with those masks' seed: both estimators' selection averaged over two mask seeds
    ws("probe", "--data", "test", "--mc-samples", str(k), "--max-length", str(length), "--seed", "1", quiet=True)
    default_other_key = ProbeRequest(mc_samples=k, max_length=length, seed=1).options_key
    report = ws.json("report")
    selection["exact, seed 1"] = _selection_by_score(report, other_key)
    selection["default, seed 1"] = _selection_by_score(report, default_other_key)
    # students: the same seeds from the default probe, the exact one, and the exact one with other masks (the noise
    # a student inherits from its probe's sampling alone)
    other = _side_by_side_workspace(bench, source, probe_seed=1)
    arms = (("exact", ws, ("--mc-exact",)), ("default", ws, ()), ("exact, other masks", other, ("--mc-exact",)))
    students = {mode: [] for mode, _, _ in arms}
    for seed in bench.seeds:
        for mode, where, extra in arms:
            result = bench.student(where, f"probe-{mode.split(',')[0]}-muki-hard", "muki-hard", ["half-a", "half-b"],
                                   seed, extra=extra)
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
    """`kamal demo` with the exact probe and with the default one, back to back: total and probing minutes."""
    import os
    import re
    import shutil

    rows, figures = [], {}
    for label, flags in (("exact probe (--mc-exact)", ["--mc-exact"]), ("default (adaptive) probe", [])):
        target = WORK / f"demo-{'exact' if flags else 'default'}"
        shutil.rmtree(target, ignore_errors=True)
        bench.say(f"kamal demo, {label}")
        load = os.getloadavg()[0]
        done = subprocess.run([*KAMAL, "demo", "--dir", str(target), *flags], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"kamal demo {' '.join(flags)} failed:\n{done.stderr[-2000:]}")
        took = re.search(r"The demo took ([\d.]+) minutes, ([\d.]+) of them probing", done.stdout)
        accuracy = re.search(r"muki-hard\s*[│|]\s*([\d.]+)", done.stdout)
        figures[label] = {"minutes": float(took.group(1)), "probe_minutes": float(took.group(2)),
                          "load_before": load, "muki_hard_accuracy": accuracy and float(accuracy.group(1))}
    for label, f in figures.items():
        rows.append([f"kamal demo, {label}", f"{f['minutes']:.1f} min", f"probing {f['probe_minutes']:.1f} min; "
                     f"muki-hard {f['muki_hard_accuracy']}%; load average {f['load_before']:.1f} at its start"])
    return figures, rows
