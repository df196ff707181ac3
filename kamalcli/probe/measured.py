"""Measured teacher selection: each score's figure on the labelled rows kamal probe measured, as the recipe reads it.

A figure counts only if it can describe the student's score: a fitted score (RMD, the prototype score) measured
with the fit the student will use (kamalcli/probe/fit_plan.py), on other rows than it was fitted on unless
cross-fitted (kamalcli/probe/cross_fit.py); never on rows a teacher was trained on, nor on a test set
(`add-data --role test`: measured on, never decided by). Accuracy is balanced over teachers (kamalcli/probe/
selection.py): each teacher's rows weigh alike, whatever share of the measured rows it owns; chance is the best
constant selector's. Figures stored before balanced accuracy was (migration m014) keep their plain accuracy and
the plain chance. What is decided from these figures is kamalcli/recipe/recipe.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kamalcli.probe.scores import SCORES
from kamalcli.probs import wilson_interval

USABLE = tuple(s for s in SCORES if s != "auto")          # what a student can select with
FITTED = ("rmd", "prototype", "rmd+prototype")            # rest on an RMD fit or on labelled prototypes


def energy(logits: np.ndarray) -> np.ndarray:
    """log sum_k exp(z_k) per row (Liu et al. 2020): higher = more in-distribution; unbounded, scale of the logits."""
    z = np.asarray(logits, dtype=np.float64)
    top = z.max(axis=1)
    return top + np.log(np.exp(z - top[:, None]).sum(axis=1))


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


@dataclass(frozen=True)
class Figure:
    """One score's measured selection: on how many rows of which data it picked a teacher owning the label."""

    score: str
    data: str
    generated: bool
    rows: int
    accuracy: float
    chance: float
    cross_fitted: int | None = None  # folds: a fitted score measured on its own fit's rows, out of sample
    total_rows: int | None = None    # balanced: the measured rows (rows: their effective number); None: plain

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(round(self.accuracy * self.rows), self.rows)

    @property
    def clear(self) -> bool:
        """Clearly above chance: the interval's lower bound lies above it."""
        return self.above(self.chance)

    def above(self, baseline: float) -> bool:
        """Clearly above a baseline accuracy: the interval's lower bound lies above it."""
        return self.interval[0] > baseline

    def words(self) -> str:
        low, high = self.interval
        kind = "generated" if self.generated else "labelled"
        folds = f", {self.cross_fitted}-fold cross-fitted" if self.cross_fitted else ""
        if self.total_rows is None:
            return (f"{_pct(self.accuracy)} of {self.rows:,} {kind} rows of {self.data}{folds} (95% interval "
                    f"{100 * low:.1f}-{_pct(high)}; chance {_pct(self.chance)})")
        return (f"{_pct(self.accuracy)} of {self.total_rows:,} {kind} rows of {self.data}, balanced over teachers"
                f"{folds} (95% interval {100 * low:.1f}-{_pct(high)} on {self.rows:,} effective rows; chance "
                f"{_pct(self.chance)})")

    def short(self) -> str:
        """The figure in a few words: share, rows (generated ones said so) and chance."""
        kind = "generated rows" if self.generated else "rows"
        return f"{_pct(self.accuracy)} of {self.total_rows or self.rows:,} {kind} of {self.data}, chance {_pct(self.chance)}"

    def as_json(self) -> dict:
        return {"score": self.score, "data": self.data, "generated": self.generated, "rows": self.rows,
                "accuracy": self.accuracy, "interval": list(self.interval), "chance": self.chance,
                "clear": self.clear, "cross_fitted": self.cross_fitted, "balanced": self.total_rows is not None,
                "total_rows": self.total_rows}


def chance(label_counts: dict[str, int], teachers) -> float:
    """The best constant selector's accuracy: the share of covered rows whose label the most common owner knows."""
    known = {label for t in teachers for label in t.labels}
    covered = sum(n for label, n in label_counts.items() if label in known)
    if not covered:
        return 1.0
    return max(sum(n for label, n in label_counts.items() if label in t.labels) for t in teachers) / covered


def balanced_chance(label_counts: dict[str, int], teachers) -> float:
    """The best constant selector's balanced accuracy: always picking teacher j is right on the share of each
    teacher's rows whose label j knows too (1 on its own), averaged over the teachers owning rows."""
    owned = [{label: n for label, n in label_counts.items() if label in t.labels and n} for t in teachers]
    groups = [rows for rows in owned if rows]
    if not groups:
        return 1.0
    return max(sum(sum(n for label, n in rows.items() if label in j.labels) / sum(rows.values()) for rows in groups)
               / len(groups) for j in teachers)


def measured_figures(store, teachers, plan) -> list[Figure]:
    """The newest stored figure per (labelled dataset, score) for exactly these teachers that can describe the
    student's score (rule 2 above); plan: what RMD will be fitted on (kamalcli/probe/fit_plan.py)."""
    names = {t.name for t in teachers}
    newest = {}
    for row in store.selections():  # in id order: a later row replaces an earlier one
        if set(row["teachers"]) == names and row["score"] in USABLE and row["accuracy"] is not None \
                and row["num_rows"]:
            newest[row["dataset_id"], row["score"]] = row
    trained_on = {t.train_dataset_id for t in teachers} - {None}
    figures = []
    for (dataset_id, score), row in newest.items():
        dataset = store.dataset_by_id(dataset_id)
        if dataset_id in trained_on or not dataset.has_labels or dataset.role == "test":
            continue
        if score in FITTED and not _fitted_as_planned(store, row, teachers, plan):
            continue
        figures.append(_figure(row, dataset, teachers))
    return figures


def _figure(row: dict, dataset, teachers) -> Figure:
    """A stored selection row as the figure rule 1 judges: balanced over teachers, or plain when stored before."""
    from kamalcli.data.text import is_generated

    if row.get("balanced") is None:
        return Figure(row["score"], dataset.name, is_generated(dataset), int(row["num_rows"]), float(row["accuracy"]),
                      chance(dataset.label_counts, teachers), row["cross_fitted"])
    return Figure(row["score"], dataset.name, is_generated(dataset), max(1, round(row["balanced_rows"])),
                  float(row["balanced"]), balanced_chance(dataset.label_counts, teachers), row["cross_fitted"],
                  int(row["num_rows"]))


def _fitted_as_planned(store, row, teachers, plan) -> bool:
    """Every teacher's probe in this figure carries the fit the plan makes, fitted on other rows than these or
    cross-fitted on these."""
    by_name = {t.name: t for t in teachers}
    for name, probe_id in zip(row["teachers"], row["probe_ids"]):
        fit = store.rmd_fit_of(probe_id)
        if not plan.made(fit, by_name[name]) or (fit.dataset_id == row["dataset_id"] and not row["cross_fitted"]):
            return False
    return True
