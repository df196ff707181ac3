"""Everything the HTML report shows, read from the workspace (no model runs, no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kamalcli.labels import Aliases
from kamalcli.probe.calibration import ece, reliability_bins
from kamalcli.probe.figures import SCORES
from kamalcli.probe.selection import auroc



@dataclass
class ScoreDistribution:
    score: str
    inside: list[float]
    outside: list[float]
    auroc: float | None  # in-domain rows (positive) against out-of-domain rows


@dataclass
class Reliability:
    kind: str  # "plain" or "MC dropout"
    confidence: list[float | None]
    accuracy: list[float | None]
    counts: list[int]
    ece: float | None


@dataclass
class TeacherOnData:
    teacher: str
    data: str
    probe_id: int
    mc_samples: int | None
    in_rows: int
    out_rows: int
    distributions: list[ScoreDistribution]
    reliability: list[Reliability]
    summary: dict


@dataclass
class StudentView:
    name: str
    method: str
    options: dict
    parent: str | None
    teachers: list[str]
    labels: list[str]
    select_by: str
    train: dict
    losses: list[tuple[int, float]]
    evaluations: dict[str, dict]  # data name -> its latest metrics


@dataclass
class Report:
    workspace: str
    teachers: list[dict]
    probes: list[TeacherOnData] = field(default_factory=list)
    unlabelled: list[str] = field(default_factory=list)  # probed datasets without gold labels
    selection: list[dict] = field(default_factory=list)
    recipes: list[dict] = field(default_factory=list)  # per set of teachers: the recipe the next amalgamate decides
    students: list[StudentView] = field(default_factory=list)
    baselines: list[dict] = field(default_factory=list)


def _shown_probes(probes) -> dict[tuple[int, int], object]:
    """One probe per (teacher, dataset): the most MC-dropout passes, then the newest.

    Baselines leave logits-only probes (K = 1) behind; a real `kamal probe` is the one to show.
    """
    shown = {}
    for p in probes:  # in id order
        key = (p.teacher_id, p.dataset_id)
        if key not in shown or (p.options.get("mc_samples") or 1) >= (shown[key].options.get("mc_samples") or 1):
            shown[key] = p
    return shown


def teacher_on_data(teacher, dataset, probe, rows: dict, gold: list[str], aliases=None) -> TeacherOnData:
    local = (aliases or Aliases()).indices(gold, list(teacher.labels))
    inside = local >= 0
    sampled = (probe.options.get("mc_samples") or 1) > 1  # K = 1: the "MC" columns are the plain softmax again
    distributions = []
    for score, of_rows in SCORES.items():
        values = of_rows(rows)
        if values is None or (score == "mc-dropout" and not sampled):
            continue
        values = np.asarray(values, dtype=np.float64)
        distributions.append(ScoreDistribution(score, values[inside].tolist(), values[~inside].tolist(),
                                               auroc(values, inside)))
    reliability = []
    kinds = (("plain", "pred", "max_prob"), ("MC dropout", "mc_pred", "mc_max_prob"))
    for kind, pred, conf in kinds if sampled else kinds[:1]:
        confidence = np.asarray(rows[conf], dtype=np.float64)[inside]
        correct = np.asarray(rows[pred])[inside] == local[inside]
        c, a, n = reliability_bins(confidence, correct)
        reliability.append(Reliability(kind, c, a, n, ece(confidence, correct) if inside.any() else None))
    return TeacherOnData(teacher.name, dataset.name, probe.id, probe.options.get("mc_samples"),
                         int(inside.sum()), int((~inside).sum()), distributions, reliability, probe.summary)


def gather(workspace, store, student_options=None) -> Report:
    """student_options: the default student's, whose recipe the report shows (kamalcli/recipe/recipe.py)."""
    from kamalcli.data.text import load_dataset_rows
    from kamalcli.probe.service import selection_rows

    teachers = {t.id: t for t in store.teachers()}
    datasets = {d.id: d for d in store.datasets()}
    report = Report(
        workspace=Path(workspace.root).name,
        teachers=[{"name": t.name, "labels": list(t.labels), "origin": t.origin, "layers": t.num_layers}
                  for t in teachers.values()],
    )
    gold_of: dict[int, list[str]] = {}
    aliases = store.label_aliases()
    for (teacher_id, dataset_id), probe in sorted(_shown_probes(store.probes()).items(),
                                                  key=lambda kv: (kv[0][1], kv[0][0])):
        dataset = datasets[dataset_id]
        if dataset.task == "token":  # per-word figures: the text report's token table and selection rows
            continue
        if teachers[teacher_id].multi_label:  # its labels are not exclusive: no reliability of one softmax
            continue
        if not dataset.has_labels:
            if dataset.name not in report.unlabelled:
                report.unlabelled.append(dataset.name)
            continue
        if dataset_id not in gold_of:
            gold_of[dataset_id] = load_dataset_rows(dataset)[1]
        report.probes.append(teacher_on_data(teachers[teacher_id], dataset, probe, store.probe_rows(probe.id),
                                             gold_of[dataset_id], aliases))
    report.selection = selection_rows(store)
    report.recipes = _recipes(workspace, store, student_options)
    for s in store.students():
        latest = store.latest_evaluations(s.id)
        report.students.append(StudentView(
            name=s.name, method=s.method, options=s.options, parent=s.parent,
            teachers=[t["name"] for t in s.teachers], labels=list(s.labels), select_by=s.select_by,
            train=s.train, losses=store.loss_history(s.id), evaluations=latest,
        ))
    baselines = {}
    for e in store.evaluations():
        if e["baseline"]:
            baselines[(e["baseline"], e["data"])] = e
    report.baselines = [{"baseline": b, "data": d, "accuracy": e["metrics"].get("accuracy"),
                         "macro_f1": e["metrics"].get("macro_f1"), "rows": e["metrics"].get("rows"),
                         "entity_f1": e["metrics"].get("entity_f1")}
                        for (b, d), e in baselines.items()]
    return report


# -- the text report (`kamal report` and its --json) --------------------------------

def policy_selection(students) -> list[dict]:
    """Per student trained by a teacher-selection policy (rl-kd): how often it selected each teacher, per class."""
    out = []
    for s in students:
        info = (s.train or {}).get("objective") or {}
        if "selection" in info:
            out.append({"student": s.name, "variant": info.get("variant"), "reward": info.get("reward"),
                        **info["selection"], "selection_accuracy": info.get("selection_accuracy")})
    return out


def probe_rows(teachers: dict, datasets: dict, probes) -> list[dict]:
    """Each stored probe: its pair, its options and its summary's figures."""
    rows = []
    for p in probes:
        # a multi-label teacher's labels are not exclusive: figures of one softmax over them mean nothing
        multi_label = teachers[p.teacher_id].multi_label
        s = {} if multi_label else p.summary
        rows.append({
            "probe_id": p.id, "teacher": teachers[p.teacher_id].name, "data": datasets[p.dataset_id].name,
            "rows": p.num_rows, "mc_samples": p.options.get("mc_samples"), "dropout": p.options.get("dropout"),
            "max_length": p.options.get("max_length"), "seconds": p.seconds,
            **{k: v for k, v in s.items() if k != "rmd"},
            "rmd": s.get("rmd"), **({"multi_label": True} if multi_label else {}),
        })
    return rows


def _recipes(workspace, store, student_options) -> list[dict]:
    """Per set of teachers, the recipe the next amalgamate of student_options decides; none without options."""
    from kamalcli.recipe.recipe import workspace_recipes

    return workspace_recipes(workspace, store, student_options) if student_options is not None else []


def text_report(store, workspace=None, student_options=None) -> dict:
    """What `kamal report` shows and its --json writes: probes, selection (and each figure on generated text
    beside the real rows'), per set of teachers the recipe the next kamal amalgamate of student_options would
    decide, rl-kd students' policies and generated datasets."""
    from kamalcli.data.text import is_generated
    from kamalcli.probe.service import generated_against_real, selection_rows

    teachers = {t.id: t for t in store.teachers()}
    datasets = {d.id: d for d in store.datasets()}
    probes = store.probes()
    selections = selection_rows(store)
    policies = policy_selection(store.students())
    generated = [{"data": d.name, **d.provenance} for d in datasets.values() if is_generated(d)]
    return {"probes": probe_rows(teachers, datasets, probes), "selection": selections,
            "generated_against_real": generated_against_real(selections),
            "recipes": _recipes(workspace, store, student_options),
            "policy_selection": policies, "generated": generated}
