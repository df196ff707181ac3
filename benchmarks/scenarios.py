"""The benchmark scenarios: MUKI's tables on debian-topics, reproduced through kamal's CLI."""

from __future__ import annotations

import json
import re
import time

from common import HALF_A, HALF_B, RESULTS, Bench, markdown, pct, summarize, write_results

MUKI_METHODS = [
    ("vanilla-kd", "vanilla-kd", ()),
    ("uhc", "uhc", ()),
    ("muki-hard", "muki-hard", ("paper=true",)),
    ("muki-soft", "muki-soft", ("paper=true",)),
]
ABLATIONS = [
    ("muki-hard w/o MC dropout", "muki-hard", ("paper=true", "mc=false")),
    ("muki-hard w/o re-weighting", "muki-hard", ("paper=true", "reweight=false")),
]
# kamal's own: the teacher picked by relative Mahalanobis distance instead of MC dropout (re-weighted, as measured).
# The hard rows keep MUKI's target (commit=1, no prior), so that they measure the selection score alone: with
# kamal's defaults, commit=auto and prior=auto can replace the pick by vanilla-kd's target, which no score changes.
MUKI_TARGET = ("commit=1", "prior=none")
RMD_VARIANTS = [
    ("muki-hard, RMD selection, MUKI's target (kamal)", "muki-hard", ("score=rmd", "reweight=true", *MUKI_TARGET)),
    ("muki-soft, RMD selection (kamal)", "muki-soft", ("score=rmd", "reweight=true")),
    ("muki-hard, per-teacher rank, MUKI's target (kamal)", "muki-hard",
     ("score=mc-dropout", "calibrate=rank", "reweight=true", *MUKI_TARGET)),
    ("muki-soft, per-teacher rank (kamal)", "muki-soft", ("score=mc-dropout", "calibrate=rank", "reweight=true")),
]


KAMAL_PICKS = [RMD_VARIANTS[0], RMD_VARIANTS[2]]  # muki-hard selecting by RMD, and by per-teacher rank
# MUKI Table 1's feature-level baselines (teachers' features per step; see docs/methods.md)
FEATURE_METHODS = [
    ("dfa", "dfa", ()),
    ("cfl", "cfl", ()),
]


def _student_rows(bench: Bench, ws, teachers: list[str], methods, base: str | None = None,
                  tag: str = "", default_budget: bool = False, data: str = "transfer") -> tuple[list, dict]:
    rows, payload = [], {}
    for label, method, options in methods:
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", (tag + label).replace("/", "")).strip("-")
        results = [bench.student(ws, name, method, teachers, seed, options, base, data=data,
                                 default_budget=default_budget)
                   for seed in bench.seeds]
        acc = summarize([r["accuracy"] for r in results])
        f1 = summarize([r["macro_f1"] for r in results])
        payload[label] = {"accuracy": acc, "macro_f1": f1, "train_seconds": [r["train_seconds"] for r in results],
                          "examples_per_second": [r["examples_per_second"] for r in results],
                          "steps": [r.get("steps") for r in results], "best_step": [r.get("best_step") for r in results],
                          "objective": [r.get("objective") for r in results]}
        rows.append([label, pct(acc), pct(f1)])
    return rows, payload


def _fixed_rows(bench: Bench, ws, teachers: list[str], with_teachers: bool = True) -> tuple[list, dict]:
    rows, payload = [], {}
    named = [(f"teacher {t}", f"teacher:{t}") for t in teachers] if with_teachers else []
    for label, which in named + [("ensemble", "ensemble")]:
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


def _selection(ws, dataset: str = "test", options_key: str | None = None) -> list[dict]:
    """The report's selection rows on dataset; options_key: only those of probes with these settings (a workspace
    may also hold probes made by hand with others)."""
    return [s for s in ws.json("report")["selection"]
            if s["data"] == dataset and options_key in (None, s.get("options_key"))]


def _selection_table(selection: list[dict]) -> str:
    rows = [[s["score"], f"{100 * s['accuracy']:.1f}" if s["accuracy"] is not None else "-",
             f"{s['auroc']:.3f}" if s["auroc"] is not None else "-",
             f"{100 * s['target_accuracy']:.1f}" if s["target_accuracy"] is not None else "-"] for s in selection]
    return markdown(["score", "selects the right teacher %", "AUROC right vs wrong", "hard target right %"], rows)


def two_teacher_workspace(bench: Bench):
    ws = bench.workspace("two-halves")
    bench.teacher(ws, "half-a", HALF_A)
    bench.teacher(ws, "half-b", HALF_B)
    bench.probe(ws)
    return ws


def muki_table(bench: Bench) -> None:
    """MUKI Tables 1 and 2: two teachers over disjoint halves of topics10, under each protocol --protocol names.

    MUKI's: the teachers trained in the students' workspace, their own training rows the transfer set, so RMD is
    fitted on each teacher's training rows. Realistic: the same teachers added as folders to default-student's
    two-teacher workspace, the transfer set 2,000 rows none of them saw; its labelled sets are test sets (never
    decided by) and RMD is fitted on the text `kamal synthesize` wrote there. Same students, same budget."""
    teachers = ["half-a", "half-b"]
    methods = MUKI_METHODS + ABLATIONS + RMD_VARIANTS + FEATURE_METHODS
    payload, selections = {}, []
    for protocol in bench.protocols:
        ws, data, tag, supervised = _protocol_workspace(bench, protocol)
        _, fixed = _fixed_rows(bench, ws, teachers)
        _, students = _student_rows(bench, ws, teachers, methods, tag=tag, data=data)
        upper = supervised["accuracy"]["mean"]
        payload[protocol] = {"rows": {"supervised": supervised, **fixed, **students},
                             "ratio_to_supervised": {k: v["accuracy"]["mean"] / upper for k, v in students.items()},
                             "selection": _selection(ws, "test" if protocol == "muki" else "pool-gold")}
        selections.append((protocol, payload[protocol]["selection"]))
    first = payload[bench.protocols[0]]["rows"]
    headers = ["method", *(f"{PROTOCOL_TITLES[p]}: {m}" for p in bench.protocols for m in ("accuracy %", "macro-F1 %"))]
    rows = [[label, *(c for p in bench.protocols for c in (pct(payload[p]["rows"][label]["accuracy"]),
                                                            pct(payload[p]["rows"][label]["macro_f1"])))]
            for label in first]
    table = markdown(headers, rows)
    for protocol, selection in selections:
        where = "the test split" if protocol == "muki" else "the 2,000 transfer rows no teacher saw (gold labels)"
        table += (f"\n\nTeacher selection on {where}, {PROTOCOL_TITLES[protocol]}:\n\n"
                  + _selection_table(selection))
    write_results(bench, {"protocols": payload}, table)


PROTOCOL_TITLES = {"muki": "MUKI's protocol", "realistic": "realistic"}


def _protocol_workspace(bench: Bench, protocol: str):
    """(workspace, transfer dataset, student name prefix, supervised row) for muki_table under `protocol`."""
    if protocol == "muki":
        return two_teacher_workspace(bench), "transfer", "", _supervised_row(bench)[1]
    from default_student import SETTINGS, generated_and_probed, labelled_afterwards, student_workspace, supervised, \
        withdraw_labelled

    setting = SETTINGS["two teachers {5,5}"]
    ws = student_workspace(bench, setting)
    withdraw_labelled(bench, setting, ws)  # eval sets a workspace made before --role test holds
    generated_and_probed(bench, setting, ws)
    labelled_afterwards(bench, setting, ws)  # as test sets: measured on, never decided by
    results = [supervised(bench, "realistic", seed, default_budget=False) for seed in bench.seeds]
    reference = {"accuracy": summarize([r["accuracy"] for r in results]),
                 "macro_f1": summarize([r["macro_f1"] for r in results])}
    return ws, "pool", "table-", reference


def selection(bench: Bench) -> None:
    """MUKI's Figure 2 as numbers: how well each confidence score picks the right teacher."""
    ws = two_teacher_workspace(bench)
    chosen = _selection(ws)
    report = ws.json("report")
    calibration = [
        {k: p.get(k) for k in ("teacher", "accuracy_in", "ece_in", "mc_ece_in", "ece_out", "mc_ece_out",
                                "confidence_out", "mc_confidence_out", "uhat_in", "uhat_out", "mc_uhat_in",
                                "mc_uhat_out")}
        for p in report["probes"] if p["data"] == "test"
    ]
    cal_table = markdown(
        ["teacher", "acc in %", "ECE in", "ECE in MC", "ECE out", "ECE out MC", "mean c in", "mean c out", "mean c in MC", "mean c out MC"],
        [[c["teacher"], f"{100 * c['accuracy_in']:.1f}", *(f"{c[k]:.3f}" for k in ("ece_in", "mc_ece_in", "ece_out", "mc_ece_out")),
          *(f"{1 - c[k]:.3f}" for k in ("uhat_in", "uhat_out", "mc_uhat_in", "mc_uhat_out"))] for c in calibration],
    )
    table = _selection_table(chosen) + "\n\nCalibration per teacher on the test split (c = 1 - normalised entropy):\n\n" + cal_table
    payload = {"selection": chosen, "calibration": calibration}
    private_rows, private_selection, payload["private_teachers"] = _downloaded_teachers(bench, ws)
    table += ("\n\nThe same teachers added with `kamal add-teacher` (their training data unknown, as in a real "
              "amalgamation): RMD's in-distribution Gaussians are then fitted on the transfer rows each teacher is "
              "itself confident on.\n\n" + _selection_table(private_selection)
              + "\n\n" + markdown(["method", "accuracy %", "macro-F1 %"], private_rows))
    few_rows, few_selection, payload["few_labelled"] = _downloaded_teachers(bench, ws, FEW_LABELLED_PER_CLASS)
    table += (f"\n\nThe same, with {FEW_LABELLED_PER_CLASS} labelled rows per class given to `kamal probe --rmd-fit` "
              "(RMD's Gaussians fitted on them):\n\n" + _selection_table(few_selection)
              + "\n\n" + markdown(["method", "accuracy %", "macro-F1 %"], few_rows))
    write_results(bench, payload, table)


FEW_LABELLED_PER_CLASS = 20


def _downloaded_teachers(bench: Bench, source, few_per_class: int = 0) -> tuple[list, list, dict]:
    """The two-halves teachers registered as downloaded classifiers: no training rows to fit RMD on.

    With few_per_class, that many labelled rows of each class fit the RMD Gaussians (`--rmd-fit`);
    without, kamal falls back to the rows each teacher is itself confident on.
    """
    ws = bench.workspace(f"two-halves-few-{few_per_class}" if few_per_class else "two-halves-private")
    folders = {t["name"]: t["path"] for t in source.json("teachers")}
    teachers = ["half-a", "half-b"]
    for name in teachers:
        if not ws.has_teacher(name):
            ws("add-teacher", folders[name], "--name", name, quiet=True)
    if not few_per_class:
        bench.probe(ws)
        label = "muki-hard, RMD fit on confident transfer rows"
    else:
        if not any(d["name"] == "few" for d in ws.json("data")):
            rows = [json.loads(line) for line in (ws.root / "data" / "train.jsonl").read_text().splitlines()]
            few = [r for label in sorted({r["label"] for r in rows}) for r in [r for r in rows if r["label"] == label][:few_per_class]]
            path = ws.root / "data" / "few.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in few))
            ws("add-data", path, "--name", "few", "--role", "eval", quiet=True)
        bench.probe(ws, "--rmd-fit", "few")
        label = f"muki-hard, RMD fit on {few_per_class} labelled rows per class"
    rows, payload = _student_rows(bench, ws, teachers, [(label, "muki-hard", ("score=rmd",))])
    return rows, _selection(ws), payload


def more_teachers(bench: Bench) -> None:
    """MUKI Table 3: more teachers with unequal label counts."""
    layouts = {
        "3 teachers {2,3,5}": [["mail", "math"], ["games", "graphics", "sound"], ["admin", "net", "science", "text", "web"]],
        "4 teachers {2,2,2,4}": [["mail", "math"], ["games", "graphics"], ["sound", "text"], ["admin", "net", "science", "web"]],
    }
    sections, payload = [], {}
    for title, groups in layouts.items():
        key = f"teachers-{len(groups)}"
        ws = bench.workspace(key)
        names = [f"t{i + 1}-{'-'.join(g)}"[:60] for i, g in enumerate(groups)]
        for name, labels in zip(names, groups):
            bench.teacher(ws, name, labels)
        bench.probe(ws)
        fixed, fixed_payload = _fixed_rows(bench, ws, names, with_teachers=False)
        students, student_payload = _student_rows(bench, ws, names, MUKI_METHODS + KAMAL_PICKS)
        sections.append(f"**{title}**\n\n" + markdown(["method", "accuracy %", "macro-F1 %"], [*fixed, *students]))
        payload[title] = {"groups": groups, "rows": {**fixed_payload, **student_payload}, "selection": _selection(ws)}
    write_results(bench, payload, "\n\n".join(sections))


def heterogeneous(bench: Bench) -> None:
    """MUKI Table 4: teachers of different depth (minilm-l6 and minilm-l3)."""
    from default_student import DEFAULT_ROW
    ws = bench.workspace("heterogeneous")
    bench.teacher(ws, "a-l6", HALF_A, base="minilm-l6")
    bench.teacher(ws, "b-l3", HALF_B, base="minilm-l3")
    bench.probe(ws)
    teachers = ["a-l6", "b-l3"]
    fixed, fixed_payload = _fixed_rows(bench, ws, teachers)
    sections, payload = [], {"fixed": fixed_payload}
    for base in ("minilm-l6", "minilm-l3"):
        methods = MUKI_METHODS + (KAMAL_PICKS + [DEFAULT_ROW[:3]] if base == "minilm-l6" else [])
        students, student_payload = _student_rows(bench, ws, teachers, methods, base=base, tag=f"{base} ")
        sections.append(f"**student {base}**\n\n" + markdown(["method", "accuracy %", "macro-F1 %"], [*fixed, *students]))
        payload[base] = student_payload
    write_results(bench, {**payload, "selection": _selection(ws)}, "\n\n".join(sections))


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
    """MUKI Table 1's feature-level rows (dfa, cfl) beside vanilla-kd, whose output term they extend:
    the two-halves teachers of muki-table, the same seeds, one run."""
    ws = two_teacher_workspace(bench)
    teachers = ["half-a", "half-b"]
    fixed, fixed_payload = _fixed_rows(bench, ws, teachers)
    students, student_payload = _student_rows(bench, ws, teachers, [MUKI_METHODS[0], *FEATURE_METHODS])
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
        ws("add-data", ws.root / "data" / "train.jsonl", "--name", "transfer-labelled", "--label-column", "label",
           quiet=True)
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
         ("labels=true", "hidden_weight=0"), names, "transfer-labelled"),
    ]
    rows, payload = [], {}
    for label, method, options, chosen, data in methods:
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:60]
        results = [bench.student(ws, name, method, chosen, seed, options, data=data) for seed in bench.seeds]
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
        ("mt-bert (teachers in the loop, per token)", "mt-bert", ()),
    ]
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
    """Train (unless done) and evaluate; adds the whole command's wall time when it trained now, and the
    student's objective figures."""
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
    """RL-KD's Table 4 setting: teachers sharing the ten topics10 labels, a 3-layer student. rl-kd r1/r2/r3
    beside fine-tuning only, the best single-teacher KD and the averaged-teacher KD the paper does not report.
    rl-kd trains the student twice (an epoch on the average of all teachers, then the alternation): the
    baselines trained for two epochs are the controls for that budget."""
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
    payload[label] = {"accuracy": summarize([r["accuracy"] for r in tuned]),
                      "macro_f1": summarize([r["macro_f1"] for r in tuned])}
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


def _selection_share(objective: dict, key: str) -> float | None:
    return (objective.get("selection_accuracy") or {}).get(key)


def rl_kd_amalgamation(bench: Bench) -> None:
    """Label-free rl-kd (kamal's) beside muki-hard and vanilla-kd: two teachers over disjoint halves of
    topics10; the policy's selection accuracy (does the teacher it rates most likely own the gold label?)
    beside muki-hard's; and training time against muki-hard's, both trained now, side by side.

    rl-kd reads the same transfer texts with their labels attached ("transfer-labelled"), only to count its
    selections per gold class and score them; training never reads them."""
    _rl_kd_against_muki(bench, two_teacher_workspace(bench), ["half-a", "half-b"])


def rl_kd_four(bench: Bench) -> None:
    """rl-kd-amalgamation with MUKI Table 3's four teachers {2,2,2,4} (more-teachers' workspace)."""
    groups = [["mail", "math"], ["games", "graphics"], ["sound", "text"], ["admin", "net", "science", "web"]]
    ws = bench.workspace("teachers-4")
    names = [f"t{i + 1}-{'-'.join(g)}"[:60] for i, g in enumerate(groups)]
    for name, labels in zip(names, groups):
        bench.teacher(ws, name, labels)
    _rl_kd_against_muki(bench, ws, names)


def _rl_kd_against_muki(bench: Bench, ws, teachers: list[str]) -> None:
    if not any(d["name"] == "transfer-labelled" for d in ws.json("data")):
        ws("add-data", ws.root / "data" / "train.jsonl", "--name", "transfer-labelled", "--label-column", "label",
           quiet=True)
    # probed first, so the timed rl-kd command below does not include a probe muki-hard found cached
    ws("probe", "--data", "transfer-labelled", "--mc-samples", str(bench.profile.mc_samples),
       "--max-length", str(bench.profile.max_length), *[a for t in teachers for a in ("--teacher", t)], quiet=True)
    twice = ("--epochs", str(2 * bench.profile.student_epochs))
    # rl-kd trains the student for two epochs (the teachers' average, then the alternation): muki-hard with
    # two epochs is the control for that budget (first seed only: the CPU's time)
    variants = [("vanilla-kd", "vanilla-kd", (), "transfer", (), bench.seeds),
                ("muki-hard", "muki-hard", (), "transfer", (), bench.seeds),
                ("muki-hard, 2 epochs", "muki-hard", (), "transfer", twice, bench.seeds[:1]),
                ("rl-kd, label-free (kamal)", "rl-kd", (), "transfer-labelled", (), bench.seeds)]
    rows, payload, first = [], {}, {}
    for label, method, options, data, extra, seeds in variants:
        results = [_timed_student(bench, ws, label, method, teachers, seed, options, data, extra) for seed in seeds]
        first[label] = results[0]
        acc, f1 = summarize([r["accuracy"] for r in results]), summarize([r["macro_f1"] for r in results])
        policy = [_selection_share(r["objective"], "policy") for r in results]
        muki = [_selection_share(r["objective"], "muki-hard (mc-dropout)") for r in results]
        payload[label] = {"accuracy": acc, "macro_f1": f1, "objective": [r["objective"] for r in results]}
        selection = "-"
        if policy[0] is not None:
            payload[label]["selection_accuracy"] = {"policy": summarize(policy), "muki-hard": summarize(muki)}
            selection = f"{pct(summarize(policy))} (muki-hard's {pct(summarize(muki))})"
        epochs = f"1 + {results[0]['epochs']}" if method == "rl-kd" else str(results[0]["epochs"])
        rows.append([label, pct(acc), pct(f1), epochs, ",".join(map(str, seeds)), selection])
    table = markdown(["method", "accuracy %", "macro-F1 %", "student epochs", "seeds",
                      "selects the gold label's teacher %"], rows)

    # time per epoch: muki-hard and rl-kd both trained in this run (again, under new names, if reused)
    tag, seed = time.strftime("%m%d%H%M"), bench.seeds[0]
    timed_variants = [variants[1], variants[3]]  # muki-hard and rl-kd, one epoch of each's own loop
    timing = {label: first[label] for label, *_ in timed_variants}
    if any(r["wall_seconds"] is None for r in timing.values()):
        for label, method, options, data, *_ in timed_variants:
            timing[label] = _timed_student(bench, ws, f"speed{tag}-{label}", method, teachers, seed, options, data)
    base = timing["muki-hard"]
    timed = []
    for label, r in timing.items():
        per_epoch = r["train_seconds"] / r["epochs"]
        timed.append([label, f"{per_epoch:.0f}", f"{per_epoch / (base['train_seconds'] / base['epochs']):.2f}x",
                      f"{r['wall_seconds']:.0f}", f"{r['wall_seconds'] / base['wall_seconds']:.2f}x"])
    table += ("\n\nTraining time, trained side by side in this run (seed "
              f"{seed}); rl-kd's whole command adds its phases (an epoch on the teachers' average, the policy's "
              "pre-training, R(x) once):\n\n"
              + markdown(["method", "seconds per epoch (alternation)", "/ muki-hard", "whole command s", "/ muki-hard"],
                         timed))
    payload["timing"] = {k: {"train_seconds": v["train_seconds"], "wall_seconds": v["wall_seconds"],
                             "epochs": v["epochs"], "accuracy": v["accuracy"]} for k, v in timing.items()}
    write_results(bench, payload, table)


SCENARIOS = {
    "muki-table": muki_table,
    "selection": selection,
    "more-teachers": more_teachers,
    "heterogeneous": heterogeneous,
    "extension": extension,
    "feature-table": feature_table,
    "compression": compression,
    "feature-speed": feature_speed,
    "rl-kd-compression": rl_kd_compression,
    "rl-kd-amalgamation": rl_kd_amalgamation,
    "rl-kd-four": rl_kd_four,
}
