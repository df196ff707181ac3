"""The benchmark scenarios: MUKI's tables on debian-topics, reproduced through kamal's CLI."""

from __future__ import annotations

import json
import re
import time

from common import HALF_A, HALF_B, RESULTS, Bench, markdown, pct, summarize, write_results

# MUKI Table 1's feature-level rows (see docs/methods.md) beside vanilla-kd, whose output term they extend
FEATURE_METHODS = [("vanilla-kd", "vanilla-kd", ()), ("dfa", "dfa", ()), ("cfl", "cfl", ())]


def _student_rows(bench: Bench, ws, teachers: list[str], methods) -> tuple[list, dict]:
    rows, payload = [], {}
    for label, method, options in methods:
        results = [bench.student(ws, _named(label), method, teachers, seed, options) for seed in bench.seeds]
        acc = summarize([r["accuracy"] for r in results])
        f1 = summarize([r["macro_f1"] for r in results])
        payload[label] = {"accuracy": acc, "macro_f1": f1, "train_seconds": [r["train_seconds"] for r in results],
                          "examples_per_second": [r["examples_per_second"] for r in results],
                          "steps": [r.get("steps") for r in results], "best_step": [r.get("best_step") for r in results],
                          "objective": [r.get("objective") for r in results]}
        rows.append([label, pct(acc), pct(f1)])
    return rows, payload


def _fixed_rows(bench: Bench, ws, teachers: list[str]) -> tuple[list, dict]:
    rows, payload = [], {}
    for label, which in [*((f"teacher {t}", f"teacher:{t}") for t in teachers), ("ensemble", "ensemble")]:
        metrics = bench.baseline(ws, which)
        payload[label] = {"accuracy": summarize([metrics["accuracy"]]), "macro_f1": summarize([metrics["macro_f1"]])}
        rows.append([label, pct(payload[label]["accuracy"]), pct(payload[label]["macro_f1"])])
    return rows, payload


def _supervised_row(bench: Bench) -> tuple[list, dict]:
    results = [bench.supervised(seed) for seed in bench.seeds]
    acc, f1 = summarize([r["accuracy"] for r in results]), summarize([r["macro_f1"] for r in results])
    payload = {"accuracy": acc, "macro_f1": f1, "train_seconds": [r["train_seconds"] for r in results],
               "examples_per_second": [r["examples_per_second"] for r in results]}
    return ["supervised (upper bound)", pct(acc), pct(f1)], payload


def two_teacher_workspace(bench: Bench):
    ws = bench.workspace("two-halves")
    bench.teacher(ws, "half-a", HALF_A)
    bench.teacher(ws, "half-b", HALF_B)
    bench.probe(ws)
    return ws


def extension(bench: Bench) -> None:
    """Incremental extension: (a) teachers 1+2 then extend with 3, against (b) all three at once."""
    from kamalcli.report.html import decided
    thirds = [["admin", "games", "graphics"], ["mail", "math", "net"], ["science", "sound", "text", "web"]]
    old_labels = thirds[0] + thirds[1]
    ws = bench.workspace("thirds")
    names = ["third-1", "third-2", "third-3"]
    for name, labels in zip(names, thirds):
        bench.teacher(ws, name, labels)
    bench.probe(ws)
    routes = {  # (kind, the extension's or student's name stem, its --option values)
        "(a) 1+2, then extend with 3 (kamal's default: calibrate=rank, pick_smooth=auto, reweight=auto)":
            ("extend", "rank", ("calibrate=rank",)),
        "(a) 1+2, then extend with 3 (calibrate=rank, pick_smooth=0, reweight=true: the default before 2026-11-27)":
            ("extend", "rank-nopick", ("calibrate=rank", "pick_smooth=0", "reweight=true")),
        "(a) 1+2, then extend with 3 (calibrate=none, raw confidences)": ("extend", "none", ("calibrate=none",)),
        "(b) all three from scratch (muki-soft as published: paper=true)": ("scratch", "paper", ("paper=true",)),
        "(b) all three from scratch (calibrate=rank)": ("scratch", "rank", ("calibrate=rank",)),
    }
    per_seed = {route: [] for route in routes}
    for seed in bench.seeds:
        bench.student(ws, "a-first", "muki-soft", names[:2], seed)
        for route, (kind, stem, options) in routes.items():
            if kind == "extend":
                name = f"a-ext-{stem}-s{seed}"
                if not ws.has_student(name):
                    bench.say(f"extend a-first-s{seed} with third-3 ({' '.join(options)})")
                    ws("extend", f"a-first-s{seed}", "--teacher", "third-3", "--name", name, "--data", "transfer",
                       *[arg for option in options for arg in ("--option", option)],
                       "--mc-samples", str(bench.profile.mc_samples),
                       *bench.profile.train_args(bench.profile.student_epochs, seed))
                record = next(s for s in ws.json("students") if s["name"] == name)
                seconds, objective = record["train"]["seconds"], record["train"].get("objective") or {}
            else:
                result = bench.student(ws, f"b-{stem}", "muki-soft", names, seed, options)
                name, seconds, objective = f"b-{stem}-s{seed}", result["train_seconds"], result["objective"] or {}
            metrics = ws.json("eval", name, "--data", "test")
            old, new = _old_new(metrics, old_labels)
            per_seed[route].append({"accuracy": metrics["accuracy"], "old": old, "new": new, "seconds": seconds,
                                    "decided": decided(objective)})
    rows, summary = [], {}
    for route, results in per_seed.items():
        agg = {k: summarize([r[k] for r in results]) for k in ("accuracy", "old", "new", "seconds")}
        summary[route] = agg
        rows.append([route, pct(agg["accuracy"]), pct(agg["old"]), pct(agg["new"]), f"{agg['seconds']['mean']:.0f}",
                     " / ".join(r["decided"] for r in results)])
    headers = ["route", "test accuracy %", f"old labels ({len(old_labels)}) %", f"new labels ({len(thirds[2])}) %",
               "training seconds (extension step for a)", "decided where its options said auto, per seed (as kamal report shows it)"]
    write_results(bench, {"per_seed": per_seed, "summary": summary, "thirds": thirds}, markdown(headers, rows))


def _old_new(metrics: dict, old_labels: list[str]) -> tuple[float | None, float | None]:
    labels = metrics["labels"]
    confusion = metrics["confusion"]
    def accuracy(names):
        idx = [labels.index(n) for n in names]
        total = sum(sum(confusion[i]) for i in idx)
        return sum(confusion[i][i] for i in idx) / total if total else None
    return accuracy(old_labels), accuracy([n for n in labels if n not in old_labels])


def feature_table(bench: Bench) -> None:
    """MUKI Table 1's feature-level rows (dfa, cfl) beside vanilla-kd on the two-halves teachers."""
    ws = two_teacher_workspace(bench)
    teachers = ["half-a", "half-b"]
    fixed, fixed_payload = _fixed_rows(bench, ws, teachers)
    students, student_payload = _student_rows(bench, ws, teachers, FEATURE_METHODS)
    table = markdown(["method", "accuracy %", "macro-F1 %"], [*fixed, *students])
    write_results(bench, {"rows": {**fixed_payload, **student_payload}}, table)


def compression(bench: Bench) -> None:
    """MT-BERT's and RL-KD's setting: teachers that share all ten labels, distilled into one small student."""
    ws = bench.workspace("shared-labels")
    labels = sorted(HALF_A + HALF_B)
    teachers = {"t1-l6": ("minilm-l6", 0), "t2-l3": (bench.profile.base, 1), "t3-l3": (bench.profile.base, 2)}
    for name, (base, seed) in teachers.items():
        if not ws.has_teacher(name):
            bench.say(f"train teacher {name} on all ten labels (base {base}, seed {seed})")
            ws("train-teacher", "labelled", "--labels", ",".join(labels), "--name", name, "--base", base,
               *bench.profile.train_args(bench.profile.teacher_epochs, seed))
    if not any(d["name"] == "transfer-labelled" for d in ws.json("data")):
        ws("add-data", ws.root / "data" / "train.jsonl", "--name", "transfer-labelled", "--label-column", "label", quiet=True)
    names = list(teachers)
    fixed, fixed_payload = _fixed_rows(bench, ws, names)
    best = max(names, key=lambda t: fixed_payload[f"teacher {t}"]["accuracy"]["mean"])
    methods = [
        (f"best single-teacher KD ({best})", "vanilla-kd", (), [best], "transfer"),
        # uhc's sum_i KL(p_i || q) over one shared label set has the gradient of KL(mean_i p_i || q), times N
        ("averaged-teacher KD (uhc over one label set)", "uhc", (), names, "transfer"),
        ("mt-bert, gold labels (the paper)", "mt-bert", ("labels=true",), names, "transfer-labelled"),
        ("mt-bert, gold labels, co-finetuned teachers (the paper)", "mt-bert", ("labels=true", "co_finetune=true"),
         names, "transfer-labelled"),
        ("mt-bert, label-free (kamal)", "mt-bert", (), names, "transfer"),
        # how much of mt-bert's result is its hidden-state term (weight 1 in the paper)
        ("mt-bert, gold labels, hidden_weight=0.1", "mt-bert", ("labels=true", "hidden_weight=0.1"), names,
         "transfer-labelled"),
        ("mt-bert, gold labels, hidden_weight=0 (weighted distillation + CE only)", "mt-bert",
         ("labels=true", "hidden_weight=0"), names, "transfer-labelled")]
    rows, payload = [], {}
    for label, method, options, chosen, data in methods:
        results = [bench.student(ws, _named(label), method, chosen, seed, options, data=data) for seed in bench.seeds]
        acc, f1 = summarize([r["accuracy"] for r in results]), summarize([r["macro_f1"] for r in results])
        payload[label] = {"accuracy": acc, "macro_f1": f1, "train_seconds": [r["train_seconds"] for r in results]}
        rows.append([label, pct(acc), pct(f1)])
    supervised, supervised_payload = _supervised_row(bench)
    table = markdown(["method", "accuracy %", "macro-F1 %"], [*fixed, *rows, supervised])
    write_results(bench, {"rows": {**fixed_payload, **payload, "supervised": supervised_payload}, "best_teacher": best,
                          "teachers": {k: {"base": b, "seed": s} for k, (b, s) in teachers.items()}}, table)


def feature_speed(bench: Bench) -> None:
    """Training time per epoch of the feature-level methods against muki-hard: same student, data, one run."""
    ws = two_teacher_workspace(bench)
    teachers = ["half-a", "half-b"]
    variants = [
        ("muki-hard", "muki-hard", ()),
        ("cfl (cached pooled features)", "cfl", ()),
        ("dfa, features=pooled (cached)", "dfa", ("features=pooled",)),
        ("mt-bert, features=pooled (cached)", "mt-bert", ("features=pooled",)),
        ("dfa (teachers in the loop, per token)", "dfa", ()),
        ("mt-bert (teachers in the loop, per token)", "mt-bert", ())]
    seed, tag = bench.seeds[0], time.strftime("%m%d%H%M")  # a new name per run: every row is timed now, side by side
    rows, payload = [], {}
    for label, method, options in variants:
        name = f"speed{tag}-" + re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:40]
        result = bench.student(ws, name, method, teachers, seed, options)
        record = next(s for s in ws.json("students") if s["name"] == f"{name}-s{seed}")
        payload[label] = {"seconds": result["train_seconds"], "accuracy": result["accuracy"],
                          "teacher_seconds": record["train"]["objective"].get("teacher_seconds")}
    base = payload["muki-hard"]["seconds"]
    for label, figures in payload.items():
        share = figures["teacher_seconds"]
        note = f"teachers' forward passes {100 * share / figures['seconds']:.0f}% of it" if share else ""
        rows.append([label, f"{figures['seconds']:.0f}", f"{figures['seconds'] / base:.2f}x", f"{100 * figures['accuracy']:.1f}", note])
    table = markdown(["method", "seconds per epoch", "/ muki-hard", "accuracy %", "note"], rows)
    write_results(bench, payload, table)


def _named(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:60]


def _timed_student(bench: Bench, ws, label: str, method: str, teachers: list[str], seed: int, options=(),
                   data: str = "transfer", extra=()) -> dict:
    """bench.student, with the command's wall time (when it trained now) and objective figures."""
    name = _named(label)
    started = time.perf_counter()
    fresh = not ws.has_student(f"{name}-s{seed}")
    result = bench.student(ws, name, method, teachers, seed, options, data=data, extra=extra)
    record = next(s for s in ws.json("students") if s["name"] == f"{name}-s{seed}")
    return {**result, "wall_seconds": time.perf_counter() - started if fresh else None,
            "objective": record["train"]["objective"], "epochs": record["train"]["config"]["epochs"]}


RL_REWARDS = [("rl-kd r1 = -CE (the paper)", ("labels=true", "reward=r1")),
              ("rl-kd r2 = -CE - DL (the paper)", ("labels=true", "reward=r2")),
              ("rl-kd r3 = mix with held-out accuracy (the paper)", ("labels=true", "reward=r3"))]


def rl_kd_compression(bench: Bench) -> None:
    """RL-KD's Table 4 setting on the compression teachers; baselines at two epochs too (rl-kd's budget)."""
    baselines = RESULTS / f"compression-{bench.profile.name}.json"
    if not baselines.is_file():
        compression(bench)  # the teachers and the baselines
    ws = bench.workspace("shared-labels")
    summary = json.loads(baselines.read_text())
    names, best = list(summary["teachers"]), summary["best_teacher"]
    rows = [[f"teacher {t}", pct(summary["rows"][f"teacher {t}"]["accuracy"]), pct(summary["rows"][f"teacher {t}"]["macro_f1"]), "-"]
            for t in names]
    kept = ["supervised", f"best single-teacher KD ({best})", "averaged-teacher KD (uhc over one label set)"]
    titles = {"supervised": "fine-tuning only (gold labels)"}
    payload = {k: summary["rows"][k] for k in kept}
    rows += [[titles.get(k, k), pct(payload[k]["accuracy"]), pct(payload[k]["macro_f1"]), "1"] for k in kept]
    twice = ("--epochs", str(2 * bench.profile.student_epochs))
    tuned = [bench.supervised(seed, 2 * bench.profile.student_epochs) for seed in bench.seeds]
    label = "fine-tuning only (gold labels), 2 epochs"
    payload[label] = {"accuracy": summarize([r["accuracy"] for r in tuned]), "macro_f1": summarize([r["macro_f1"] for r in tuned])}
    rows.append([label, pct(payload[label]["accuracy"]), pct(payload[label]["macro_f1"]), "2"])
    runs = [(f"best single-teacher KD ({best}), 2 epochs", "vanilla-kd", (), "transfer", twice, [best]),
            ("averaged-teacher KD (uhc over one label set), 2 epochs", "uhc", (), "transfer", twice, names)]
    runs += [(label, "rl-kd", options, "transfer-labelled", (), names) for label, options in RL_REWARDS]
    for label, method, options, data, extra, chosen in runs:
        results = [_timed_student(bench, ws, label, method, chosen, seed, options, data, extra) for seed in bench.seeds]
        acc, f1 = summarize([r["accuracy"] for r in results]), summarize([r["macro_f1"] for r in results])
        payload[label] = {"accuracy": acc, "macro_f1": f1, "objective": [r["objective"] for r in results],
                          "train_seconds": [r["train_seconds"] for r in results],
                          "wall_seconds": [r["wall_seconds"] for r in results]}
        epochs = f"{results[0]['epochs']}" if method != "rl-kd" else f"1 + {results[0]['epochs']}"
        rows.append([label, pct(acc), pct(f1), epochs])
    table = markdown(["method", "accuracy %", "macro-F1 %", "student epochs"], rows)
    write_results(bench, {"rows": payload, "best_teacher": best}, table)


SCENARIOS = {"extension": extension, "feature-table": feature_table, "compression": compression,
             "feature-speed": feature_speed, "rl-kd-compression": rl_kd_compression}
