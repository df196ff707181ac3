"""Does the prototype prior read the transfer rows? A label-free check before muki-hard multiplies by it.

The prototypes come from labelled text (usually what `kamal synthesize` wrote, in the LM's language) and live in
one sentence encoder (minilm-l6, English, by default). Where the transfer rows are text that encoder cannot read
(measured: Chinese reviews beside English topics), the prototype classifier is noise on them, and multiplying
the teachers' target by it costs more than it gives (the cross-lingual pair, seed 1: 43.0% with the prior over
every label, 67.3% with it only within the English teacher's labels, docs/benchmarks.md).

The check, for each teacher, on the surer half of the transfer rows selection gives it (RMD in the teachers'
own feature spaces, fitted as the student's fit, when the cached probes carry it; the prototype score otherwise;
surer: the larger margin of the teacher's confidence over the next teacher's): how often the prototype
classifier, restricted to the teacher's labels, names the class the teacher predicts. It passes when that
agreement is clearly above chance agreement (the lower bound of its 95% Wilson interval above what two unrelated
classifiers with these class frequencies would share, i.e. Cohen's kappa clearly above 0) for every teacher
selection gives rows to (one given none says nothing). A teacher the prototypes cannot read agrees at chance with
them on its own rows; one they read agrees far above it. No labels are read.

A prior over every label also moves mass between teachers, so the check also asks, per teacher, on the same rows,
whether the prototypes' mass is largest on that teacher's labels for clearly more than half of them (the lower
bound of its 95% Wilson interval above 1/2). Measured on a build of the cross-lingual pair whose Chinese teacher
passed the class agreement by a little (kappa 0.11 on 511 rows): the prototypes' mass was largest on the English
teacher's labels for every one of those rows (0.0% placed among its own); multiplied by them, its rows would have
moved to English topics.

Why the surer half: a selector's mistakes give a teacher other teachers' rows, which the prototypes may read,
and with 1,000 rows a few hundred such rows lift the agreement clearly above chance. Measured on the
cross-lingual pair (docs/benchmarks.md): where MC dropout picks the teachers (75.8% right), the Chinese
teacher's rows are 72.9% Chinese and its agreement passes (kappa 0.07); its surer half is 90.1% Chinese and
fails (kappa 0.04), as on its true rows (kappa -0.01). A build whose RMD picked 75.5% right most likely let the
prototype score through this way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kamalcli.probs import wilson_interval


@dataclass(frozen=True)
class Agreement:
    """One teacher's rows: how often the prototype classifier names the teacher's own predicted class."""

    teacher: str
    rows: int
    agreed: int
    chance: float  # the agreement of two unrelated classifiers with the same class frequencies
    placed: int | None = None  # of the rows, those whose prototype mass is largest on this teacher's labels

    @property
    def share(self) -> float:
        return self.agreed / self.rows if self.rows else 0.0

    @property
    def clear(self) -> bool:
        """Its classes clearly above chance agreement and, where measured, most of its rows clearly placed among
        its labels."""
        return self.rows > 0 and wilson_interval(self.agreed, self.rows)[0] > self.chance and self.placed_clear

    @property
    def placed_clear(self) -> bool:
        return self.placed is None or (self.rows > 0 and wilson_interval(self.placed, self.rows)[0] > 0.5)

    @property
    def kappa(self) -> float:
        return (self.share - self.chance) / (1 - self.chance) if self.chance < 1 else 0.0

    def words(self) -> str:
        low, high = wilson_interval(self.agreed, self.rows) if self.rows else (0.0, 1.0)
        placed = ("" if self.placed is None or not self.rows else
                  f"; {100 * self.placed / self.rows:.1f}% of them placed among its labels")
        return (f"{self.teacher}: {100 * self.share:.1f}% of {self.rows:,} rows (95% interval {100 * low:.1f}-"
                f"{100 * high:.1f}%; chance {100 * self.chance:.1f}%; kappa {self.kappa:.2f}{placed})")

    def as_json(self) -> dict:
        return {"teacher": self.teacher, "rows": self.rows, "agreement": self.share, "chance": self.chance,
                "kappa": self.kappa, "clear": self.clear,
                "placed": None if self.placed is None or not self.rows else self.placed / self.rows}


def agreement(teacher: str, prototype_class: np.ndarray, teacher_class: np.ndarray, classes: int,
              placed: np.ndarray | None = None) -> Agreement:
    """prototype_class, teacher_class: per row, the class index (among the teacher's labels) each names; placed:
    per row, whether the prototypes' mass is largest on this teacher's labels (None: not measured)."""
    a, b = np.asarray(prototype_class), np.asarray(teacher_class)
    placed_rows = None if placed is None else int(np.asarray(placed, dtype=bool).sum())
    if not len(a):
        return Agreement(teacher, 0, 0, 1.0, placed_rows)
    chance = float(sum((a == c).mean() * (b == c).mean() for c in range(classes)))
    return Agreement(teacher, len(a), int((a == b).sum()), chance, placed_rows)


@dataclass(frozen=True)
class PriorCheck:
    data: str                    # the transfer set checked
    selected_by: str             # "rmd" or "prototype"
    teachers: list[Agreement]

    @property
    def failed(self) -> list[Agreement]:
        """The teachers given rows whose agreement is not clearly above chance (one given none says nothing)."""
        return [t for t in self.teachers if t.rows and not t.clear]

    @property
    def read(self) -> list[str]:
        """The teachers whose rows the prototypes read: given rows, agreement clearly above chance."""
        return [t.teacher for t in self.teachers if t.rows and t.clear]

    @property
    def passed(self) -> bool:
        return not self.failed

    def line(self, fit_data: str, encoder: str) -> str:
        failed = self.failed
        which = failed or [t for t in self.teachers if t.rows]
        rows = f"the surer half of the rows {self.selected_by} gives each teacher"
        verdict = (f"the prototypes of {fit_data} in {encoder} do not read every teacher's rows of {self.data}: on "
                   f"{rows}, they name the teacher's class no more often than chance, or place fewer than clearly "
                   "half of its rows among its labels, for " if failed else
                   f"the prototypes of {fit_data} in {encoder} read every teacher's rows of {self.data}: on {rows}, "
                   "they name the teacher's class clearly more often than chance and place most of them among its "
                   "labels (")
        return verdict + "; ".join(t.words() for t in which) + ("" if failed else ")")

    def as_json(self) -> dict:
        return {"data": self.data, "selected_by": self.selected_by, "passed": self.passed,
                "teachers": [t.as_json() for t in self.teachers]}


def check_prior(teacher_names: list[str], class_probs: np.ndarray, columns: list[list[int]],
                teacher_classes: list[np.ndarray], confidence: np.ndarray, data: str, selected_by: str) -> PriorCheck:
    """class_probs: (rows, labels) the prototype classifier over the union; columns[i]: the union columns of
    teacher i's labels in its own order; teacher_classes[i]: its predicted class per row; confidence: (rows,
    teachers) the selection score, higher = more the teacher's (each row goes to the highest)."""
    out = []
    mass = np.stack([class_probs[:, c].sum(axis=1) for c in columns], axis=1)  # (rows, teachers)
    for i, name in enumerate(teacher_names):
        rows = surer_half(confidence, i)
        mine = class_probs[rows][:, columns[i]].argmax(axis=1)
        out.append(agreement(name, mine, np.asarray(teacher_classes[i])[rows], len(columns[i]),
                             placed=mass[rows].argmax(axis=1) == i))
    return PriorCheck(data, selected_by, out)


def surer_half(confidence: np.ndarray, teacher: int) -> np.ndarray:
    """The indices of the rows selection gives this teacher, the half (rounded up) with the larger margin of its
    confidence over the best other teacher's, surest first."""
    confidence = np.asarray(confidence, dtype=np.float64)
    given = np.flatnonzero(confidence.argmax(axis=1) == teacher)
    if confidence.shape[1] < 2:
        return given
    margin = confidence[given, teacher] - np.delete(confidence[given], teacher, axis=1).max(axis=1)
    return given[np.argsort(-margin, kind="stable")][: (len(given) + 1) // 2]


def transfer_check(workspace, store, teachers, dataset, rmd_fit: str | None, *, encoder: str, device: str,
                   encode: bool = True, gold=None) -> PriorCheck | None:
    """check_prior on a transfer set, from the teachers' cached probes there (the newest carrying RMD fitted as
    kamalcli/probe/fit_plan.py plans, else the newest) and the prototypes the prior would use (the plan's labelled
    text, with gold's rows where given), at the probes' length; None when it cannot be made: no labelled text for
    every label, the encoder not installed, a teacher never probed there, or (encode=False) sentence vectors never
    computed."""
    from kamalcli.errors import KamalError
    from kamalcli.probe.fit_plan import rmd_fit_plan
    from kamalcli.probe.prototypes import fit_prototypes

    plan = rmd_fit_plan(store, teachers, rmd_fit, one_dataset=True)
    probes = [max(store.probes(teacher_id=t.id, dataset_id=dataset.id), default=None,
                  key=lambda p, t=t: (_fitted_as_planned(store, p, plan, t), p.id)) for t in teachers]
    if plan.dataset is None or None in probes:
        return None
    canonical = store.label_aliases().canonical
    try:
        fit = fit_prototypes(workspace, teachers, dataset, plan.dataset, encoder=encoder, device=device,
                             max_length=max(p.options.get("max_length", 128) for p in probes), say=lambda _: None,
                             canonical=canonical, encode=encode, gold=gold)
    except KamalError:
        return None
    if fit is None:
        return None
    rows = [store.probe_rows(p.id) for p in probes]
    if all(_fitted_as_planned(store, p, plan, t) and None not in r["rmd"] for p, t, r in zip(probes, teachers, rows)):
        confidence = np.stack([-np.asarray(r["rmd"], dtype=np.float64) for r in rows], axis=1)
        by = "rmd"
    else:
        confidence, by = fit.shares(), "the prototype score"
    columns = [[fit.names.index(canonical(label)) for label in t.labels] for t in teachers]
    return check_prior([t.name for t in teachers], fit.prior(fit.names), columns,
                       [np.asarray(r["pred"]) for r in rows], confidence, dataset.name, by)


def workspace_check(workspace, store, teachers, rmd_fit: str | None, *, encoder: str, device: str,
                    encode: bool) -> PriorCheck | None:
    """What kamal probe and kamal report check: every transfer set the teachers were probed on, not counting
    generated text (the prototypes' own); the first set's check when all agree on which teachers' rows the
    prototypes read, else None (kamal amalgamate checks its --data)."""
    from kamalcli.data.text import is_generated

    sets = [d for d in store.datasets(role="transfer") if not is_generated(d)
            and all(store.probes(teacher_id=t.id, dataset_id=d.id) for t in teachers)]
    checks = [transfer_check(workspace, store, teachers, d, rmd_fit, encoder=encoder, device=device, encode=encode)
              for d in sets]
    if not checks or None in checks or len({tuple(t.teacher for t in c.failed) for c in checks}) > 1:
        return None
    return checks[0]


def _fitted_as_planned(store, probe, plan, teacher) -> bool:
    fit = store.rmd_fit_of(probe.id)
    return fit is not None and plan.made(fit, teacher)
