"""score=auto: which confidence picks the teacher, decided from how well each score's own selection was measured.

One function decides, for kamal amalgamate (the student trains with it), kamal probe and kamal report (they
name it): `decide_auto`. The rule:
1. A score counts only if its measured selection accuracy, balanced over teachers (kamalcli/probe/selection.py:
   each teacher's rows weigh alike, whatever share of the measured rows it owns), is clearly above chance: the
   lower bound of its 95% Wilson interval (on the effective rows) lies above chance. Chance is the best constant
   selector's balanced accuracy: 1/T for T teachers of disjoint labels; a score that does no better than always
   picking one teacher adds nothing. Balanced, because the measured rows' teacher mix is not the transfer
   rows': generated text has as many rows per label, so on a pair of teachers of 10 and 2 labels always
   picking the first is right on 83.3% of it, and plain accuracy ranked energy, which does exactly that there,
   above the scores that choose (measured, docs/benchmarks.md). Figures stored before balanced accuracy was
   (migration m014) are judged by their plain accuracy against the plain chance, the share of rows whose label
   the most common owner knows.
2. A score's figure is its measurement on real labelled rows when there is one (the most rows first), on text
   kamal synthesize wrote otherwise: generated rows are labelled by the class they were steered to, which is
   weaker evidence. Figures that cannot describe the student's score do not count: a fitted score (RMD, the
   prototype score) measured with another fit than the one the student will use (kamalcli/probe/fit_plan.py),
   or on the very rows it was fitted on unless cross-fitted (kamalcli/probe/cross_fit.py: each fold scored by a
   fit on the others, which is how generated text, usually the only labelled text, can judge them); any score
   measured on rows a teacher was trained on, or on a test set (`add-data --role test`: measured on, never
   decided by).
3. Among the scores that count, the best: real labelled figures before generated ones, then the higher accuracy,
   unless a score earlier in PREFERENCE is not clearly below it (its accuracy at or above the lower bound of the
   best's 95% interval): then the earliest such. Near the ceiling the ranking is noise: on debian-topics' two
   teachers the prototype score led rmd+prototype on 200 generated rows, 99.5% against 97.5% (the first's
   interval 97.2-99.9%), and rmd+prototype picked right more often on the test rows (85.3% against 82.2%).
4. None counts (or nothing was measured): the confidence kamal trusts without fitted data. Energy when the
   teachers know different numbers of labels: max-prob and the entropy-based confidences (normalised by
   log|Y_i|) have a floor and a scale that depend on the number of labels, the log-sum-exp of the logits has no
   such normalisation (measured, four teachers {2,2,2,4}: 61.5% against 51.0% for MC dropout). Otherwise MC
   dropout, MUKI's own score, which selected best or within a point of the best label-free score in every
   setting of docs/benchmarks.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kamalcli.probe.scores import PROTOTYPE_SCORES, SCORES
from kamalcli.probs import wilson_interval

USABLE = tuple(s for s in SCORES if s != "auto")          # what a student can select with
FITTED = ("rmd", "prototype", "rmd+prototype")            # rest on an RMD fit or on labelled prototypes
# equal figures: the order of the scores' measured selection in docs/benchmarks.md
PREFERENCE = ("rmd+prototype", "rmd", "prototype", "mc-dropout", "entropy", "energy", "max-prob")


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

    def as_json(self) -> dict:
        return {"score": self.score, "data": self.data, "generated": self.generated, "rows": self.rows,
                "accuracy": self.accuracy, "interval": list(self.interval), "chance": self.chance,
                "clear": self.clear, "cross_fitted": self.cross_fitted, "balanced": self.total_rows is not None,
                "total_rows": self.total_rows}


@dataclass(frozen=True)
class AutoDecision:
    score: str
    reason: str
    figure: Figure | None  # what the choice rests on; None: the fallback

    @property
    def line(self) -> str:
        return f"score=auto selects with {self.score}: {self.reason}"

    def as_json(self) -> dict:
        return {"score": self.score, "reason": self.reason, "line": self.line,
                "figure": self.figure.as_json() if self.figure else None}


def fallback(label_counts: tuple[int, ...] = (), available=USABLE) -> tuple[str, str]:
    """(score, why): the confidence trusted without fitted data or measured figures."""
    if len(set(label_counts)) > 1:
        return "energy", ("the teachers know different numbers of labels, which energy compares and the "
                          "entropy-based scores do not; it needs no fitted data")
    if "mc-dropout" in available:
        return "mc-dropout", "MUKI's own score, which needs no fitted data"
    return "entropy", "MUKI's score without MC dropout (mc=false), which needs no fitted data"


def decide(figures, label_counts: tuple[int, ...] = (), available=USABLE) -> AutoDecision:
    """The rule above, on figures already gathered (measured_figures); available: the scores the student can
    compute (its options, an installed encoder)."""
    evidence = _evidence(figures, available)
    counted = [f for f in evidence.values() if f.clear]
    if counted:
        best = _preferred(counted)
        return AutoDecision(best.score, f"it picks the right teacher on {best.words()}, clearly above chance.", best)
    score, why = fallback(label_counts, available)
    if not evidence:
        return AutoDecision(score, f"{why}. No selection is measured for these teachers yet: `kamal probe` on "
                                   "an eval set measures it (a test set is never decided by), or on text from "
                                   "`kamal synthesize --prompt 'Write a ... about {label}.'`, the prompt naming what your texts are.", None)
    top = max(evidence.values(), key=lambda f: (not f.generated, f.accuracy))
    return AutoDecision(score, f"no score picks the right teacher clearly above chance (best: {top.score}, "
                               f"{top.words()}), so {score}, {why}.", None)


def _preferred(counted: list[Figure]) -> Figure:
    """Rule 3: the most accurate of the strongest kind of figure, or the earliest score in PREFERENCE that is not
    clearly below it."""
    real = [f for f in counted if not f.generated] or counted
    top = max(real, key=lambda f: (f.accuracy, -PREFERENCE.index(f.score)))
    floor = top.interval[0]
    return min((f for f in real if f.accuracy >= floor), key=lambda f: PREFERENCE.index(f.score))


def _evidence(figures, available=USABLE) -> dict[str, Figure]:
    """score -> the one figure it is judged by (real labelled rows before generated ones, then the most rows)."""
    evidence: dict[str, Figure] = {}
    for f in figures:
        if f.score in available and (f.score not in evidence or _weight(f) > _weight(evidence[f.score])):
            evidence[f.score] = f
    return evidence


@dataclass(frozen=True)
class Commitment:
    """muki-hard commit=auto: whether each row's target commits to its picked teacher (1) or is vanilla-kd's (0),
    and why."""

    commit: float | None      # None: nothing measured, MUKI's target
    baseline: float | None    # the selection it had to beat
    figure: Figure | None
    line: str

    def as_json(self) -> dict:
        return {"commit": self.commit, "baseline": self.baseline, "line": self.line,
                "figure": self.figure.as_json() if self.figure else None}


def commitment(score: str, figure: Figure | None, concatenated: Figure | None) -> Commitment:
    """Commit to the score's pick only where its measured selection is clearly better (the 95% interval's lower
    bound above) than the pick vanilla-kd's target already makes on the same rows (concatenated: energy's figure
    there; chance when it is not measured); otherwise the target is vanilla-kd's. No figure: commit fully."""
    if figure is None:
        return Commitment(None, None, None, f"commit=auto: {score}'s selection is not measured for these teachers, "
                                            "so each row learns from its picked teacher alone (MUKI's target; "
                                            "`kamal probe` on an eval set measures it).")
    if concatenated is not None:
        baseline, against = concatenated.accuracy, f"vanilla-kd's own pick (energy, {_pct(concatenated.accuracy)})"
    else:
        baseline, against = figure.chance, f"chance ({_pct(figure.chance)})"
    if figure.above(baseline):
        line = (f"commit=auto: each row learns from its picked teacher alone (MUKI's target): {score} picks the "
                f"right teacher clearly better than {against}: {figure.words()}.")
        return Commitment(1.0, baseline, figure, line)
    line = (f"commit=auto: each row learns vanilla-kd's target (the concatenated logits), because {score} does not "
            f"pick the right teacher clearly better than {against}: {figure.words()}.")
    return Commitment(0.0, baseline, figure, line)


@dataclass(frozen=True)
class Prior:
    """muki-hard prior=auto: whether the target is multiplied by the prototype classifier (kamalcli/probe/
    prototypes.py), built from labelled text for every label (generated, or --rmd-fit), and why."""

    data: str | None          # the labelled text the prototypes come from; None: no prior
    reason: str
    check: dict | None = None  # kamalcli/probe/prior_check.py on the transfer rows; None: not made
    teachers: list[str] | None = None  # the prior refines classes only within these teachers'; None: everywhere

    @property
    def line(self) -> str:
        return f"prior=auto: {'' if self.data else 'none: '}{self.reason}"

    @property
    def carries_selection(self) -> bool:
        """A prior over every label also moves mass between teachers; one within some teachers' labels does not."""
        return self.data is not None and self.teachers is None

    def as_json(self) -> dict:
        return {"kind": "prototype" if self.data else "none", "data": self.data, "line": self.line,
                "check": self.check, "teachers": self.teachers}


def decide_prior(plan, label_names, canonical=lambda label: label, encoder: str = "minilm-l6",
                 encoder_error: str | None = None, check=None,
                 unchecked: str = "checked against the transfer rows when a student trains") -> Prior:
    """The prototype prior where the fit plan has one labelled dataset holding every label (label_names: the
    union's classes; canonical: a label's class), the encoder is installed and, when `check` (a PriorCheck of the
    transfer rows) was made, the prototypes read every teacher's rows; else none, saying why."""
    dataset = plan.dataset
    if dataset is None:
        return Prior(None, "no labelled text for these teachers' labels (`kamal synthesize` writes some, or "
                           "--rmd-fit NAME).")
    present = {canonical(label) for label in (dataset.label_counts or {})}
    missing = [name for name in label_names if name not in present]
    if missing:
        return Prior(None, f"{dataset.name} has no rows of {', '.join(missing)}.")
    if encoder_error:
        return Prior(None, f"{encoder_error}.")
    if check is not None and not check.passed:
        read = check.read
        if not read:
            return Prior(None, f"{check.line(dataset.name, encoder)}.", check.as_json())
        return Prior(dataset.name, f"within the labels of {', '.join(read)} only, the target's classes are "
                                   f"multiplied by a prototype classifier built from {dataset.name} in {encoder}, "
                                   f"keeping each teacher's mass, because {check.line(dataset.name, encoder)}; the "
                                   "choice between teachers stays the selection score's (commit=auto decides it).",
                     check.as_json(), read)
    checked = f" ({check.line(dataset.name, encoder) if check is not None else unchecked})"
    return Prior(dataset.name, f"the target is multiplied by the class probabilities of a prototype classifier "
                               f"over every label, built from {dataset.name} in {encoder}{checked}; it carries the "
                               "selection, so commit=auto keeps vanilla-kd's soft target.",
                 check.as_json() if check is not None else None)


def prior_commitment(data: str) -> Commitment:
    """commit=auto beside a prior (from `data`): vanilla-kd's target, which the prior then selects within."""
    return Commitment(0.0, None, None, f"commit=auto: each row learns vanilla-kd's target times the prior of {data} "
                                        "(the prior carries the selection).")


def _weight(f: Figure) -> tuple[bool, int]:
    """Real labelled rows before generated ones, then the most rows."""
    return not f.generated, f.rows


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


def decide_auto(store, teachers, plan, available=USABLE, check=None) -> AutoDecision:
    """score=auto for these teachers: the one decision kamal amalgamate trains with and kamal probe and kamal
    report name (check: whether the prototypes read the transfer rows, readable_scores)."""
    return decide(measured_figures(store, teachers, plan), tuple(len(t.labels) for t in teachers),
                  readable_scores(check, available))


def decide_commitment(store, teachers, plan, score: str) -> Commitment:
    """muki-hard commit=auto for these teachers selecting with `score`: what kamal amalgamate trains with and
    kamal report names."""
    return _commitment_on(measured_figures(store, teachers, plan), score)


def _commitment_on(figures, score: str) -> Commitment:
    """commitment() from the figure `score` is judged by (clearly above chance or not) and, on the same rows,
    energy's: the pick vanilla-kd's target makes (softmax over the concatenated logits weighs each teacher by
    exp(log-sum-exp of its logits))."""
    figure = _evidence(figures, (score,)).get(score)
    concatenated = None if figure is None else next(
        (f for f in figures if f.score == "energy" and f.data == figure.data), None)
    return commitment(score, figure, concatenated)


def workspace_decisions(store, workspace=None) -> list[dict]:
    """score=auto for every set of two or more registered sentence teachers with stored selection figures,
    muki-hard's prior=auto and commit=auto, and muki's refit=auto, as kamal amalgamate decides them without
    --rmd-fit: what kamal report names. With the workspace, the prototypes are checked on the transfer sets the
    teachers were probed on, from cached sentence vectors (kamal probe computes them; kamalcli/probe/prior_check.py
    workspace_check)."""
    from kamalcli.probe.fit_plan import rmd_fit_plan
    from kamalcli.probe.prior_check import workspace_check
    from kamalcli.probe.prototypes import DEFAULT_ENCODER
    from kamalcli.probe.transfer_refit import decide_refit

    teachers = {t.name: t for t in store.teachers()}
    sets: list[tuple[str, ...]] = []
    for row in store.selections():
        names = tuple(row["teachers"])
        if (len(names) > 1 and all(n in teachers and teachers[n].task == "sequence" for n in names)
                and set(names) not in [set(s) for s in sets]):
            sets.append(names)
    out = []
    for names in sets:
        group = [teachers[n] for n in names]
        check = workspace_check(workspace, store, group, None, encoder=DEFAULT_ENCODER, device="cpu",
                                encode=False) if workspace is not None else None
        figures = measured_figures(store, group, rmd_fit_plan(store, group))
        decision = decide(figures, tuple(len(t.labels) for t in group), readable_scores(check))
        prior = decide_prior(rmd_fit_plan(store, group, one_dataset=True), store.label_space(group).names,
                             store.label_aliases().canonical, check=check)
        commit = prior_commitment(prior.data) if prior.carries_selection else _commitment_on(figures, decision.score)
        refit = decide_refit(check, decision.score, check.data).as_json() if check is not None else None
        out.append({"teachers": list(names), **decision.as_json(), "commit": commit.as_json(),
                    "prior": prior.as_json(), "refit": refit,
                    "unread": None if check else _if_unread(figures, group, decision)})
    return out


def readable_scores(check, available=USABLE) -> tuple[str, ...]:
    """The scores score=auto may pick: without the prototype scores when the check (kamalcli/probe/
    prior_check.py) found the prototypes do not read the transfer rows."""
    if check is None or check.passed:
        return tuple(available)
    return tuple(s for s in available if s not in PROTOTYPE_SCORES)


def _if_unread(figures, group, decision: AutoDecision) -> dict | None:
    """What kamal amalgamate decides instead when its check finds the prototypes do not read some teacher's
    transfer rows (kamalcli/probe/prior_check.py, made where a student trains): no prototype score, the prior
    only within the teachers they read (decide_prior), and commit=auto by the score chosen without them. None
    when the prototypes play no part."""
    if decision.score not in PROTOTYPE_SCORES and not any(f.score in PROTOTYPE_SCORES for f in figures):
        return None
    without = decide(figures, tuple(len(t.labels) for t in group), tuple(s for s in USABLE if s not in PROTOTYPE_SCORES))
    commit = _commitment_on(figures, without.score)
    return {"score": without.score, "line": without.line, "commit": commit.as_json()}


def unread_sentence(unread: dict) -> str:
    """_if_unread's decision in words, as `kamal report` prints it and its HTML page shows it."""
    return ("Where the prototypes do not read some teacher's transfer rows (not checked here: `kamal probe` checks "
            "the transfer sets, kamal amalgamate its --data; then no prototype score, and the prior only within the "
            f"teachers they read): {unread['line']} {unread['commit']['line']}")
