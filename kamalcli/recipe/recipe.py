"""The default student's recipe: every `auto` of muki-hard (and muki) decided in one place, once, before training.

`decide(evidence, options)` turns the evidence (kamalcli/recipe/evidence.py: the workspace's measured selection,
the prior's check of the transfer rows, the generated text) into a frozen Recipe: one Decision per option left to
kamal, each with its value, a short reason and the evidence behind it. kamal amalgamate and extend train with it
(and record it with the run, so that --resume reads it instead of deciding again), kamal report and kamal probe
show what the next amalgamate would decide by the same call, and the student's record keeps it.

The rules, each measured in docs/benchmarks.md:
- score: a score counts only if its measured selection accuracy, balanced over teachers, is clearly above chance
  (the lower bound of its 95% Wilson interval above the best constant selector's). Real labelled rows before
  generated ones, then the most accurate, unless a score earlier in PREFERENCE is not clearly below it: near the
  ceiling the ranking is noise. None counts: energy when the teachers know different numbers of labels (the
  entropy-based scores' floor and scale depend on it), else MC dropout, MUKI's own score. The prototype scores
  only where the prior's check finds the prototypes read the transfer rows and the encoder is installed.
- fit: what RMD and the prototypes are fitted on (kamalcli/probe/fit_plan.py), for a fitted score.
- prior: the target times a prototype classifier built from labelled text holding every label, where the
  prototypes read every teacher's transfer rows (kamalcli/probe/prior_check.py); only within the teachers they
  read where they do not read some; none without such text or encoder.
- commit: each row learns its picked teacher alone (MUKI's target) only where the score's measured selection is
  clearly better than the pick vanilla-kd's concatenated logits already make (energy's figure), else
  vanilla-kd's target; beside a prior over every label, vanilla-kd's target (the prior carries the selection;
  MUKI's target there gained on three of four confirm settings, the last built after its test was written, and
  lost 4.8, 8.3 and 7.8 points on the README walk's three seeds, a tune setting, so it was not chosen: on the tune
  settings' real rows the target times the prior already picks the teacher as well as the score, 82.5-85.2%
  against 82.8-84.8% balanced, so committing only drops the mass it leaves on the other teachers' labels).
  Where it commits, a guard read as the targets are built: a pick that gives a teacher under a quarter of the
  transfer rows vanilla-kd's own target credits it with has starved that teacher, and the rows learn vanilla-kd's
  target instead (`starved`).
- refit (an option, off by default; refit=auto asks for it): RMD fitted again on the transfer rows for the teachers
  whose rows the generated text does not read (kamalcli/probe/transfer_refit.py), only when the check fails for
  them. Off since the ablation: on two confirm settings (genre, outlets) the refitted teacher took every row and the
  guard fell back to vanilla-kd's target; without it outlets' default gained 3.0 points.
- smooth: each row's target half averaged with its 10 nearest rows, beside a prior over every label and with at
  least 20 rows per label and neighbour (measured to help at 2,000 rows over 10 labels, to cost below it).
- pick_smooth: the pick by each row's confidence averaged with its 10 nearest rows', where those rows' own picks
  agree with the row's clearly beyond chance (Cohen's kappa at least 0.2). The agreement is measured on the
  transfer rows' confidences as the targets are built; `picks_agree` here is the rule that reads it.
- reweight: MUKI's margin scaled to mean 1 within each picked teacher's rows (the paper's margin with paper=true).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kamalcli.errors import KamalError
from kamalcli.probe.measured import FITTED, USABLE, Figure
from kamalcli.probe.neighbours import OWN_SHARE
from kamalcli.probe.transfer_refit import ROUNDS as REFIT_ROUNDS
from kamalcli.probe.scores import PROTOTYPE_SCORES, RMD_SCORES

# equal figures: the order of the scores' measured selection in docs/benchmarks.md
PREFERENCE = ("rmd+prototype", "rmd", "prototype", "mc-dropout", "entropy", "energy", "max-prob")
SMOOTH_NEIGHBOURS = 10  # smooth=auto
# smooth=auto wants at least this many rows per label and neighbour: 200 a label at k = 10. Measured on
# debian-topics' two teachers, smoothing raised the student by 2.1-3.2 points with 2,000 transfer rows over 10
# labels (three seeds), and moved it by -1.0 to +0.7 with the first 736, 1,000 and 1,500 of those rows.
ROWS_PER_LABEL_AND_NEIGHBOUR = 20
PICK_NEIGHBOURS = 10    # pick_smooth=auto
PICK_KAPPA = 0.2        # pick_smooth=auto: "fair" agreement of the neighbours' picks with the row's
# commit=auto's guard: a pick that gives a teacher under this share of the rows vanilla-kd's target credits it with
# starved it. A right pick may move rows between teachers (cross-lingual: half the pool away from what vanilla-kd
# credits), so only a factor of 4 counts: it fires only where the pick or vanilla-kd's credit is wrong fourfold.
# On genre the generated text's RMD, refitted for one teacher, gave it every row: the other got 0% of the rows,
# vanilla-kd credits it with 44% (the gold share: 43%), and the student learnt three of six classes.
STARVED_SHARE = 0.25
VALUE_WIDTH = 32        # a value as the table shows it
REASON_WIDTH = 80       # a reason is at most this long; the evidence goes to --verbose and --json
ORDER = ("score", "fit", "prior", "commit", "refit", "smooth", "pick_smooth", "reweight")


@dataclass(frozen=True)
class Decision:
    """One option kamal decided: its value, why (at most REASON_WIDTH characters) and the evidence behind it
    (`line`: the whole sentence; the rest: figures, as recorded)."""

    name: str
    value: object
    reason: str
    evidence: dict = field(default_factory=dict)

    def __post_init__(self):
        assert len(self.reason) <= REASON_WIDTH, f"{self.name}: reason over {REASON_WIDTH} characters: {self.reason}"

    @property
    def line(self) -> str:
        """The whole sentence behind the decision ("" where it needs none)."""
        return self.evidence.get("line", "")

    @property
    def shown(self) -> str:
        if self.value is None:
            return "none"
        return f"{self.value:g}" if isinstance(self.value, float) else str(self.value)

    def as_json(self) -> dict:
        assert not {"value", "reason"} & set(self.evidence), f"{self.name}: evidence names value or reason"
        return {"value": self.value, "reason": self.reason, **self.evidence}


@dataclass(frozen=True)
class Recipe:
    """What a student trains with where its options said auto: one Decision per option, in ORDER."""

    decisions: tuple[Decision, ...] = ()

    def get(self, name: str) -> Decision | None:
        return next((d for d in self.decisions if d.name == name), None)

    def value(self, name: str, default=None):
        decision = self.get(name)
        return default if decision is None else decision.value

    def evidence(self, name: str) -> dict | None:
        decision = self.get(name)
        return None if decision is None else decision.evidence

    def rows(self) -> list[tuple[str, str, str]]:
        """(decision, value, reason): the table kamal amalgamate, extend and report print."""
        return [(d.name, d.shown, d.reason) for d in self.decisions]

    def lines(self) -> list[str]:
        """The evidence, one sentence per decision: what --verbose prints."""
        return [d.evidence["line"] for d in self.decisions if d.evidence.get("line")]

    def table(self, title: str = "Recipe, decided before training (--verbose: the evidence):") -> list[str]:
        """The decisions as a small table of lines (decision, value, reason), each under 130 characters."""
        rows = [(name, _cut(value, VALUE_WIDTH), reason) for name, value, reason in self.rows()]
        if not rows:
            return []
        names, values = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
        return [title, *(f"  {name:<{names}}  {value:<{values}}  {reason}" for name, value, reason in rows)]

    def options_for(self, options):
        """The options a student trains with: score=auto replaced by what was decided, and commit=auto where it
        decided not to commit fully (commit=auto stays where it commits: MUKI's target with the `starved` guard);
        the student's record keeps the options as asked."""
        score, commit = self.get("score"), self.get("commit")
        if score is not None and getattr(options, "confidence_score", None) == "auto":
            options = replace(options, score=score.value)
        if commit is not None and commit.value not in (None, 1.0) and getattr(options, "commit", None) == "auto":
            options = replace(options, commit=commit.value)
        return options

    def as_json(self) -> dict:
        return {d.name: d.as_json() for d in self.decisions}

    @classmethod
    def from_json(cls, data: dict | None) -> Recipe:
        decisions = []
        for name in ORDER:
            if data and name in data:
                entry = dict(data[name])
                decisions.append(Decision(name, entry.pop("value"), entry.pop("reason"), entry))
        return cls(tuple(decisions))

    @classmethod
    def from_legacy(cls, params: dict) -> dict | None:
        """A run recorded before the recipe (auto, gate, prior and refit apart): its decisions as a recipe's JSON,
        so that --resume trains with what that run decided."""
        values = {  # old key: (decision, its value in the old record)
            "auto": ("score", lambda old: old["score"]), "prior": ("prior", lambda old: old.get("data")),
            "gate": ("commit", lambda old: old.get("commit")),
            "refit": ("refit", lambda old: ", ".join(old["teachers"]) or None)}
        out = {}
        for key, (name, value) in values.items():
            old = params.pop(key, None)
            if old:
                out[name] = {"value": value(old), "reason": "decided when the run started", **old}
        return out or None


def autos(options, teachers) -> set[str]:
    """The decisions these options leave to kamal (sequence teachers; paper=true decides nothing)."""
    if getattr(options, "paper", False) or any(t.task != "sequence" for t in teachers):
        return set()
    wanted = set()
    score = getattr(options, "confidence_score", None)
    if score == "auto":
        wanted.add("score")
    if score in (*FITTED, "auto"):
        wanted.add("fit")
    if getattr(options, "prior", "none") != "none":
        wanted.add("prior")
    if getattr(options, "commit", None) == "auto":
        wanted.add("commit")
    if getattr(options, "refit", "none") == "auto" and score in ("auto", *RMD_SCORES):
        wanted.add("refit")
    if getattr(options, "smooth", None) == "auto":
        wanted.add("smooth")
    if getattr(options, "pick_smooth", None) == "auto":
        wanted.add("pick_smooth")
    if getattr(options, "reweight", None) == "auto":
        wanted.add("reweight")
    return wanted


def decide(evidence, options) -> Recipe:
    """The recipe for a student of these options on this evidence: the one call that decides every auto."""
    wanted = autos(options, evidence.teachers)
    decisions: list[Decision] = []
    score = getattr(options, "confidence_score", None)
    if "score" in wanted:
        decisions.append(_score(evidence, options))
        score = decisions[-1].value
    fit = _fit(evidence, score) if "fit" in wanted else None
    if fit is not None:
        decisions.append(fit)
    prior = _prior(evidence, options) if "prior" in wanted else None
    if prior is not None:
        decisions.append(prior)
    if "commit" in wanted:
        decisions.append(_commit(evidence, score, prior))
    if "refit" in wanted:
        decisions.append(_refit(evidence, score))
    if "smooth" in wanted:
        decisions.append(_smooth(evidence, options, prior))
    if "pick_smooth" in wanted:
        decisions.append(_pick_smooth(options, decisions))
    if "reweight" in wanted:
        decisions.append(Decision("reweight", reweighting(options), "MUKI's margin, scaled to mean 1 within each "
                                  "picked teacher's rows"))
    return Recipe(tuple(decisions))


# -- score ---------------------------------------------------------------------------------------------------

def _score(evidence, options) -> Decision:
    """score=auto over the scores this student can compute: MC dropout unless mc=false; the prototype scores with
    the encoder their figures were measured with, where the check finds they read the transfer rows and it is
    installed."""
    from kamalcli.probe.prototypes import DEFAULT_ENCODER

    available = tuple(s for s in USABLE if (s != "mc-dropout" or getattr(options, "mc", True))
                      and (s not in PROTOTYPE_SCORES or getattr(options, "encoder", None) == DEFAULT_ENCODER))
    decision = choose_score(evidence.figures, evidence.label_counts, readable_scores(evidence.check, available))
    if decision.value in PROTOTYPE_SCORES:
        error = evidence.encoder_error(DEFAULT_ENCODER)
        if error:
            decision = choose_score(evidence.figures, evidence.label_counts,
                                    tuple(s for s in available if s not in PROTOTYPE_SCORES))
            line = f"score=auto: no prototype score ({error}); deciding without it. {decision.evidence['line']}"
            decision = replace(decision, evidence={**decision.evidence, "line": line})
    return decision


def choose_score(figures, label_counts: tuple[int, ...] = (), available=USABLE) -> Decision:
    """The score rule on figures already gathered (kamalcli/probe/measured.py measured_figures); available: the
    scores the student can compute."""
    evidence = _evidence(figures, available)
    counted = [f for f in evidence.values() if f.clear]
    if counted:
        best = _preferred(counted)
        return _score_decision(best.score, f"it picks the right teacher on {best.words()}, clearly above chance.",
                               best, f"picks right on {best.short()}")
    score, why, short = fallback(label_counts, available)
    if not evidence:
        return _score_decision(score, f"{why}. No selection is measured for these teachers yet: `kamal probe` on "
                                      "an eval set measures it (a test set is never decided by), or on text from "
                                      "`kamal synthesize --prompt 'Write a ... about {label}.'`, the prompt naming "
                                      "what your texts are.", None, f"no selection measured; {short}")
    top = max(evidence.values(), key=lambda f: (not f.generated, f.accuracy))
    return _score_decision(score, f"no score picks the right teacher clearly above chance (best: {top.score}, "
                                  f"{top.words()}), so {score}, {why}.", None,
                           f"none clearly above chance (best {top.score} {_pct(top.accuracy)}); {short}")


def _score_decision(score: str, reason: str, figure: Figure | None, short: str) -> Decision:
    line = f"score=auto selects with {score}: {reason}"
    return Decision("score", score, short, {"score": score, "line": line,
                                            "figure": figure.as_json() if figure else None})


def fallback(label_counts: tuple[int, ...] = (), available=USABLE) -> tuple[str, str, str]:
    """(score, why, why in a few words): the confidence trusted without fitted data or measured figures."""
    if len(set(label_counts)) > 1:
        return "energy", ("the teachers know different numbers of labels, which energy compares and the "
                          "entropy-based scores do not; it needs no fitted data"), "teachers' label counts differ"
    if "mc-dropout" in available:
        return "mc-dropout", "MUKI's own score, which needs no fitted data", "MUKI's own score"
    return "entropy", "MUKI's score without MC dropout (mc=false), which needs no fitted data", "MUKI's, mc=false"


def _preferred(counted: list[Figure]) -> Figure:
    """The most accurate of the strongest kind of figure, or the earliest score in PREFERENCE that is not clearly
    below it."""
    real = [f for f in counted if not f.generated] or counted
    top = max(real, key=lambda f: (f.accuracy, -PREFERENCE.index(f.score)))
    floor = top.interval[0]
    return min((f for f in real if f.accuracy >= floor), key=lambda f: PREFERENCE.index(f.score))


def _evidence(figures, available=USABLE) -> dict[str, Figure]:
    """score -> the one figure it is judged by (real labelled rows before generated ones, then the most rows)."""
    chosen: dict[str, Figure] = {}
    for f in figures:
        if f.score in available and (f.score not in chosen or _weight(f) > _weight(chosen[f.score])):
            chosen[f.score] = f
    return chosen


def _weight(f: Figure) -> tuple[bool, int]:
    return not f.generated, f.rows


def readable_scores(check, available=USABLE) -> tuple[str, ...]:
    """The scores the score rule may pick: without the prototype scores where the check found the prototypes do
    not read the transfer rows."""
    if check is None or check.passed:
        return tuple(available)
    return tuple(s for s in available if s not in PROTOTYPE_SCORES)


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


# -- fit -----------------------------------------------------------------------------------------------------

def _fit(evidence, score: str) -> Decision | None:
    """What a fitted score's RMD and prototypes are fitted on; None for a score that fits nothing."""
    if score not in FITTED:
        return None
    plan = evidence.fit_plan(one_dataset=score in PROTOTYPE_SCORES)
    if score in PROTOTYPE_SCORES and plan.dataset is None:
        raise KamalError(f"score={score} needs labelled text for every label of these teachers: --rmd-fit NAME, "
                         "or text from `kamal synthesize`")
    data = plan.dataset.name if plan.dataset is not None else None
    short = {"given": f"{data}, given with --rmd-fit", "teacher-train": "each teacher's own training rows",
             "generated": f"{data}, text kamal synthesize wrote for them",
             "pseudo": "rows each teacher is surest of (circular)"}[plan.source]
    return Decision("fit", data, short, {"source": plan.source, "line": plan.line})


# -- prior ---------------------------------------------------------------------------------------------------

def _prior(evidence, options) -> Decision:
    """muki-hard prior=auto (or prototype): the labelled text its prototype prior comes from."""
    checked = options.prior == "auto"
    decision = decide_prior(evidence.fit_plan(one_dataset=True), evidence.label_names, evidence.canonical,
                            options.encoder, evidence.encoder_error(options.encoder),
                            check=evidence.prior_check if checked else None,
                            unchecked="not checked against the transfer rows: kamal probe caches what it reads"
                            if checked else "prior=prototype: not checked", gold=evidence.gold,
                            gold_alone=evidence.gold_alone and checked)
    if options.prior == "prototype" and decision.value is None:
        raise KamalError(f"prior=prototype: {decision.evidence['why']}")
    return decision


def decide_prior(plan, label_names, canonical=lambda label: label, encoder: str = "minilm-l6",
                 encoder_error: str | None = None, check=None,
                 unchecked: str = "checked against the transfer rows when a student trains", gold=None,
                 gold_alone: bool = False) -> Decision:
    """The prototype prior where the fit plan has one labelled dataset holding every label (label_names: the
    union's classes; canonical: a label's class), the encoder is installed and, when `check` (a PriorCheck of the
    transfer rows) was made, the prototypes read every teacher's rows; else none, saying why. gold (the rows of
    --gold): their labels join the plan's text in the prototypes (every labelled row counts once), unless the plan
    fits on them already (--rmd-fit); gold_alone: they replace it, the plan's text having failed the check."""
    dataset = gold if gold_alone else plan.dataset
    also = gold.name if gold is not None and dataset is not None and gold.id != dataset.id else None
    if dataset is None:
        return _prior_decision(None, "no labelled text for these teachers' labels (`kamal synthesize` writes some, "
                                     "or --rmd-fit NAME).", "no labelled text for every label")
    present = {canonical(label) for label in (dataset.label_counts or {})}
    missing = [name for name in label_names if name not in present]
    if missing:
        return _prior_decision(None, f"{dataset.name} has no rows of {', '.join(missing)}.",
                               _cut(f"{dataset.name} has no rows of {', '.join(missing)}"))
    if encoder_error:
        return _prior_decision(None, f"{encoder_error}.", f"{encoder} is not installed")
    if check is not None and not check.passed:
        read = check.read
        if not read:
            return _prior_decision(None, f"{check.line(dataset.name, encoder)}.",
                                   _cut(f"its prototypes do not read the rows of {check.data}"), check.as_json())
        return _prior_decision(dataset.name, f"within the labels of {', '.join(read)} only, the target's classes are "
                                             f"multiplied by a prototype classifier built from {_rows(dataset, also)} in "
                                             f"{encoder}, keeping each teacher's mass, because "
                                             f"{check.line(dataset.name, encoder)}; the choice between teachers "
                                             "stays the selection score's (commit=auto decides it).",
                               _cut(f"within {', '.join(read)}'s labels only: not every teacher's rows read"),
                               check.as_json(), read, also)
    how = check.line(dataset.name, encoder) if check is not None else unchecked
    if check is not None:
        short = f"its prototypes read every teacher's rows of {check.data}"
    else:
        short = "asked for (prior=prototype); not checked" if "prior=prototype" in how else "not checked"
    if gold_alone:  # the generated text's own check failed, the gold rows' passed (or was not made)
        how = (f"{how}; from {dataset.name} alone, because the prototypes of the generated text do not read every "
               "teacher's transfer rows")
        short = f"{dataset.name} alone: the generated text's prototypes misread the rows"
    return _prior_decision(dataset.name, f"the target is multiplied by the class probabilities of a prototype "
                                         f"classifier over every label, built from {_rows(dataset, also)} in {encoder} "
                                         f"({how}); it carries the selection, so commit=auto keeps vanilla-kd's "
                                         "soft target.", _cut(short), check.as_json() if check is not None else None,
                           gold=also)


def _rows(dataset, gold: str | None) -> str:
    return dataset.name if gold is None else (f"{dataset.name} and the labelled rows of {gold} (a gold row is left out "
                                              "of its own label's prototype)")


def _prior_decision(data: str | None, reason: str, short: str, check: dict | None = None,
                    teachers: list[str] | None = None, gold: str | None = None) -> Decision:
    line = f"prior=auto: {'' if data else 'none: '}{reason}"
    value = None if data is None else (data if gold is None else f"{data} + {gold}")
    value = value if value is None or teachers is None else f"{value} within {', '.join(teachers)}"
    return Decision("prior", value, short, {"kind": "prototype" if data else "none", "data": data, "gold": gold,
                                            "why": reason, "line": line, "check": check, "teachers": teachers})


def carries_selection(prior: Decision | None) -> bool:
    """A prior over every label also moves mass between teachers; one within some teachers' labels does not."""
    return prior is not None and prior.evidence["data"] is not None and prior.evidence["teachers"] is None


# -- commit --------------------------------------------------------------------------------------------------

def _commit(evidence, score: str, prior: Decision | None) -> Decision:
    """muki-hard commit=auto: beside a prior over every label, vanilla-kd's target; else by the score's skill."""
    if carries_selection(prior):
        return _commit_decision(0.0, None, None, "commit=auto: each row learns vanilla-kd's target times the prior of "
                                f"{prior.evidence['data']} (the prior carries the selection).",
                                "vanilla-kd's target: the prior over every label carries the selection")
    return commitment_on(evidence.figures_for(score), score)


def commitment_on(figures, score: str) -> Decision:
    """commitment() from the figure `score` is judged by and, on the same rows, energy's: the pick vanilla-kd's
    target makes (softmax over the concatenated logits weighs each teacher by exp(log-sum-exp of its logits))."""
    figure = _evidence(figures, (score,)).get(score)
    concatenated = None if figure is None else next(
        (f for f in figures if f.score == "energy" and f.data == figure.data), None)
    return commitment(score, figure, concatenated)


def commitment(score: str, figure: Figure | None, concatenated: Figure | None) -> Decision:
    """Commit to the score's pick only where its measured selection is clearly better (the 95% interval's lower
    bound above) than the pick vanilla-kd's target already makes on the same rows (concatenated: energy's figure
    there; chance when it is not measured); otherwise the target is vanilla-kd's. No figure: commit fully."""
    if figure is None:
        return _commit_decision(None, None, None, f"commit=auto: {score}'s selection is not measured for these "
                                "teachers, so each row learns from its picked teacher alone (MUKI's target; "
                                "`kamal probe` on an eval set measures it).", "selection not measured: MUKI's target")
    if concatenated is not None:
        baseline, against = concatenated.accuracy, f"vanilla-kd's own pick (energy, {_pct(concatenated.accuracy)})"
        short_against = f"vanilla-kd's pick ({_pct(concatenated.accuracy)})"
    else:
        baseline, against = figure.chance, f"chance ({_pct(figure.chance)})"
        short_against = f"chance ({_pct(figure.chance)})"
    if figure.above(baseline):
        return _commit_decision(1.0, baseline, figure, f"commit=auto: each row learns from its picked teacher alone "
                                f"(MUKI's target): {score} picks the right teacher clearly better than {against}: "
                                f"{figure.words()}.", f"{score} {_pct(figure.accuracy)} beats {short_against}")
    return _commit_decision(0.0, baseline, figure, f"commit=auto: each row learns vanilla-kd's target (the "
                            f"concatenated logits), because {score} does not pick the right teacher clearly better "
                            f"than {against}: {figure.words()}.",
                            f"{score} {_pct(figure.accuracy)} not clearly above {short_against}")


def _commit_decision(commit, baseline, figure, line: str, short: str) -> Decision:
    return Decision("commit", commit, short, {"commit": commit, "baseline": baseline, "line": line,
                                              "figure": figure.as_json() if figure else None})


# -- refit ---------------------------------------------------------------------------------------------------

def _refit(evidence, score: str) -> Decision:
    return decide_refit(evidence.check, score, evidence.data)


def decide_refit(check, score: str, data: str) -> Decision:
    """muki refit=auto: the teachers whose RMD is fitted again on the transfer rows (none: the fits stay). check:
    the prior's check of the transfer rows (None: not made); score: the selection score trained with."""
    if score not in RMD_SCORES:
        return _refit_decision([], "", f"{score} reads no RMD")
    if check is None:
        return _refit_decision([], f"refit=auto: none: the prior's check of {data} was not made (it needs the "
                               "teachers' cached probes there, which `kamal probe` makes, labelled text for every "
                               "label and the prototype encoder), so every teacher keeps its RMD fit.",
                               "the prior's check was not made: every RMD fit stays")
    failed = [t.teacher for t in check.failed]
    if not failed:
        return _refit_decision([], "", "the generated text reads every teacher's rows")
    return _refit_decision(failed, f"refit=auto: {', '.join(failed)}'s RMD is fitted again on the rows of {data} "
                           "selection gives it (the surer half, its own predicted classes; no labels), because the "
                           "prior's check finds the generated text does not read its rows; up to "
                           f"{REFIT_ROUNDS} rounds (refit=none keeps the fit on the generated text).",
                           _cut(f"the generated text does not read {', '.join(failed)}'s rows"))


def _refit_decision(teachers: list[str], line: str, short: str) -> Decision:
    return Decision("refit", ", ".join(teachers) or None, short,
                    {"teachers": teachers, "rounds": REFIT_ROUNDS, "line": line})


# -- smooth, pick_smooth -------------------------------------------------------------------------------------

def _smooth(evidence, options, prior: Decision | None) -> Decision:
    """muki-hard smooth=auto: how many nearest rows each row's target is averaged with."""
    k, data, encoder = SMOOTH_NEIGHBOURS, evidence.data, options.encoder
    if prior is None or not prior.evidence["data"]:
        return _smooth_decision(0, f"smooth=auto: none: it smooths only beside a prior over every label, whose "
                                f"check shows that {encoder} reads the transfer rows; smooth=K asks for K anyway.",
                                "only beside a prior over every label")
    if prior.evidence["teachers"] is not None:
        return _smooth_decision(0, f"smooth=auto: none: the prior's check found that {encoder} does not read every "
                                f"teacher's rows of {data}; smooth=K asks for K anyway.",
                                f"{encoder} does not read every teacher's rows")
    needed = ROWS_PER_LABEL_AND_NEIGHBOUR * k * len(evidence.label_names)
    if evidence.rows < needed:
        return _smooth_decision(0, f"smooth=auto: none: {evidence.rows} rows of {data} are too few for {k} neighbours "
                                f"a row over {len(evidence.label_names)} labels (at least {needed}); smooth=K asks "
                                "for K anyway.", f"{evidence.rows:,} rows, fewer than the {needed:,} it needs")
    return _smooth_decision(k, f"smooth=auto: each row's target is {OWN_SHARE:.0%} its own and {1 - OWN_SHARE:.0%} "
                            f"the mean of its {k} nearest rows of {data} in {encoder} (no labels).",
                            f"half of each target from its {k} nearest rows")


def _smooth_decision(k: int, line: str, short: str) -> Decision:
    return Decision("smooth", k, short, {"line": line})


def _pick_smooth(options, decisions: list[Decision]) -> Decision:
    """muki pick_smooth=auto: PICK_NEIGHBOURS where the neighbours' picks agree (picks_agree, on the transfer rows);
    none where the target reads no pick (commit=0)."""
    commit = next((d.value for d in decisions if d.name == "commit"), None)
    asked = getattr(options, "commit", "auto")
    if (commit if asked == "auto" else asked) == 0:
        return Decision("pick_smooth", 0, "the target reads no pick (commit=0)")
    return Decision("pick_smooth", f"{PICK_NEIGHBOURS} if kappa >= {PICK_KAPPA}",
                    f"where the {PICK_NEIGHBOURS} nearest rows' picks agree with the row's beyond chance",
                    {"neighbours": PICK_NEIGHBOURS, "kappa": PICK_KAPPA})


def pick_neighbours(options) -> int:
    """How many nearest rows each row's confidence is averaged with before the pick (pick_smooth=auto: the
    recipe's PICK_NEIGHBOURS, kept where picks_agree; paper=true: none)."""
    if getattr(options, "paper", False):
        return 0
    return PICK_NEIGHBOURS if options.pick_smooth == "auto" else int(options.pick_smooth)


def smooth_neighbours(options) -> int:
    """muki-hard's smooth asked for: smooth=auto: SMOOTH_NEIGHBOURS at most (the recipe decides); paper: none."""
    if getattr(options, "paper", False):
        return 0
    return SMOOTH_NEIGHBOURS if options.smooth == "auto" else int(options.smooth)


def picks_agree(agreement) -> bool:
    """pick_smooth=auto's rule: the neighbours' picks agree with the row's at kappa PICK_KAPPA or more."""
    return agreement.kappa >= PICK_KAPPA


def starved(shares, credited) -> list[int]:
    """commit=auto's guard: the teachers the pick gives under STARVED_SHARE of the rows vanilla-kd's target credits
    them with (shares: each teacher's share of the picks; credited: its mean probability mass in vanilla-kd's
    target). Read as the targets are built; where it names a teacher, the rows learn vanilla-kd's target."""
    return [i for i, (share, credit) in enumerate(zip(shares, credited)) if share < STARVED_SHARE * credit]


def starved_line(info: dict, data: str) -> str:
    """What the guard did, in one line (info: muki-hard's objective.info["starved"])."""
    parts = "; ".join(f"{name} {_pct(share)} of {data}'s rows, vanilla-kd's target {_pct(credit)}"
                      for name, (share, credit) in info.items())
    return _cut(f"commit=auto: the pick starves {parts}: each row learns vanilla-kd's target instead.", 160)


def pick_smooth_line(option, info: dict, data: str, encoder: str) -> str:
    """What pick_smooth did, in one line (info: muki's objective.info["pick_smooth"])."""
    k, kappa = info["neighbours"], info["kappa"]
    if not info["used"]:
        return _cut(f"pick_smooth=auto: none: the {k} nearest rows' picks agree at kappa {kappa:.2f} "
                    f"(< {PICK_KAPPA}) on {data}", 160)
    return _cut(f"pick_smooth={option}: each pick averaged over the {k} nearest rows of {data} in {encoder} "
                f"(kappa {kappa:.2f})", 160)


def reweighting(options) -> str:
    """margin (the paper's), per-teacher (that margin scaled to mean 1 within each picked teacher's rows) or none."""
    if options.reweight == "auto":
        return "margin" if getattr(options, "paper", False) else "per-teacher"
    return {True: "margin", False: "none"}.get(options.reweight, options.reweight)


def _cut(text: str, width: int = REASON_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


# -- the calls -----------------------------------------------------------------------------------------------

def plan_recipe(workspace, store, teachers, dataset, options, *, rmd_fit: str | None = None, gold: str | None = None,
                device: str = "cpu") -> Recipe:
    """The recipe a student of these options trains with on this transfer set: the evidence gathered, then
    decide(); an empty recipe where the options leave nothing to kamal."""
    from kamalcli.recipe.evidence import gather

    wanted = autos(options, teachers)
    if not wanted:
        return Recipe()
    # the prior's check reads the transfer rows' sentence vectors: made only where a rule reads it
    evidence = gather(workspace, store, teachers, dataset, rmd_fit, check=bool({"score", "prior", "refit"} & wanted),
                      encoder=options.encoder, device=device, gold=gold)
    return decide(evidence, options)


def workspace_recipes(workspace, store, options) -> list[dict]:
    """For every set of two or more registered sentence teachers with stored selection figures, the recipe the
    next `kamal amalgamate` of these options would decide without --data or --rmd-fit (the prior's check made on
    the transfer sets the teachers were probed on, from cached sentence vectors): what kamal report shows. Where
    no check could be made, `unread` is what amalgamate decides instead if its check finds the prototypes do not
    read some teacher's rows."""
    from kamalcli.recipe.evidence import gather

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
        evidence = gather(workspace, store, group, None, check=workspace is not None, encoder=options.encoder,
                          encode=False)
        recipe = decide(evidence, options)
        out.append({"teachers": list(names), "recipe": recipe.as_json(),
                    "unread": None if evidence.check else _if_unread(evidence, recipe)})
    return out


def probe_score(workspace, store, teachers, rmd_fit: str | None, device: str) -> Decision:
    """What kamal probe names after measuring: the score=auto of a default student, checked on every transfer set
    the teachers were probed on (encoding what is not cached)."""
    from kamalcli.probe.prototypes import DEFAULT_ENCODER
    from kamalcli.recipe.evidence import gather

    evidence = gather(workspace, store, teachers, None, rmd_fit, check=True, encoder=DEFAULT_ENCODER, device=device)
    return choose_score(evidence.figures, evidence.label_counts, readable_scores(evidence.check))


def _if_unread(evidence, recipe: Recipe) -> dict | None:
    """What amalgamate decides where its check finds the prototypes do not read some teacher's transfer rows: no
    prototype score, and commit=auto by the score chosen without them. None where the prototypes play no part."""
    score = recipe.value("score")
    if score not in PROTOTYPE_SCORES and not any(f.score in PROTOTYPE_SCORES for f in evidence.figures):
        return None
    without = choose_score(evidence.figures, evidence.label_counts,
                           tuple(s for s in USABLE if s not in PROTOTYPE_SCORES))
    commit = commitment_on(evidence.figures, without.value)
    return {"score": without.value, "line": without.evidence["line"], "commit": commit.as_json()}


def unread_sentence(unread: dict) -> str:
    """_if_unread's decision in words, as `kamal report --verbose` prints it and its HTML page shows it."""
    return ("Where the prototypes do not read some teacher's transfer rows (not checked here: `kamal probe` checks "
            "the transfer sets, kamal amalgamate its --data; then no prototype score, and the prior only within the "
            f"teachers they read): {unread['line']} {unread['commit']['line']}")
