"""What the recipe is decided from, gathered once: the workspace's measured selection for these teachers, the
prior's check of the transfer rows, the labelled (usually generated) text the fits and prototypes come from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from kamalcli.errors import KamalError


@dataclass(frozen=True)
class Evidence:
    teachers: tuple
    data: str | None                  # the transfer set's name (None: report, no transfer set checked)
    rows: int                         # its rows
    label_names: tuple[str, ...]      # the union's classes
    label_counts: tuple[int, ...]     # each teacher's number of labels
    canonical: Callable[[str], str]   # a label's class (kamal labels merge)
    check: object | None              # kamalcli/probe/prior_check.py PriorCheck of the transfer rows; None: not made
    plans: dict = field(default_factory=dict)      # one_dataset -> FitPlan (kamalcli/probe/fit_plan.py)
    figures_by_plan: dict = field(default_factory=dict)  # one_dataset -> measured figures under that plan
    encoder_errors: dict = field(default_factory=dict)   # encoder -> why it cannot load (None: it loads), memoised
    gold: object | None = None        # the labelled rows of --gold (the prior's prototypes read them)
    gold_alone: bool = False          # the prior's prototypes from gold alone: the generated text's fail the check
    prior_check: object | None = None  # the check of the prototypes the prior reads (with gold: not `check`'s)

    @property
    def figures(self):
        """The figures the score rule reads: fitted scores as RMD is fitted for any score."""
        return self.figures_by_plan[False]

    def fit_plan(self, one_dataset: bool = False):
        return self.plans[one_dataset]

    def figures_for(self, score: str):
        """The figures a chosen score's commitment reads: fitted as that score's plan fits."""
        from kamalcli.probe.scores import PROTOTYPE_SCORES

        return self.figures_by_plan[score in PROTOTYPE_SCORES]

    def encoder_error(self, encoder: str) -> str | None:
        """Why the sentence encoder cannot load (None: it loads); resolved at most once, when a rule asks."""
        if encoder not in self.encoder_errors:
            from kamalcli.models.bases import resolve_model_source

            try:
                resolve_model_source(encoder)
                self.encoder_errors[encoder] = None
            except KamalError as error:
                self.encoder_errors[encoder] = str(error)
        return self.encoder_errors[encoder]


def gather(workspace, store, teachers, dataset=None, rmd_fit: str | None = None, *, check: bool, encoder: str,
           device: str = "cpu", encode: bool = True, gold: str | None = None) -> Evidence:
    """The evidence for these teachers on the transfer set a student trains on; dataset None: on every transfer
    set the teachers were probed on, as kamal probe and kamal report check them (encode=False: from cached
    sentence vectors only)."""
    from kamalcli.probe.fit_plan import rmd_fit_plan
    from kamalcli.probe.measured import measured_figures
    from kamalcli.probe.prior_check import transfer_check, workspace_check

    plans = {one: rmd_fit_plan(store, teachers, rmd_fit, one_dataset=one) for one in (False, True)}
    fits = {one: (plan.source, plan.dataset.id if plan.dataset is not None else None) for one, plan in plans.items()}
    figures = {False: measured_figures(store, teachers, plans[False])}  # one read where both plans fit alike
    figures[True] = figures[False] if fits[True] == fits[False] else measured_figures(store, teachers, plans[True])
    prior_check = None
    if check and dataset is None:
        prior_check = workspace_check(workspace, store, teachers, rmd_fit, encoder=encoder, device=device,
                                      encode=encode)
    elif check:
        prior_check = transfer_check(workspace, store, teachers, dataset, rmd_fit, encoder=encoder, device=device)
    space, canonical = store.label_space(teachers), store.label_aliases().canonical
    gold, alone, checked_prior = _gold_for_the_prior(workspace, store, teachers, dataset, rmd_fit, gold, plans[True],
                                                     prior_check, set(space.names), canonical, check=check,
                                                     encoder=encoder, device=device)
    data = dataset.name if dataset is not None else (prior_check.data if prior_check is not None else None)
    return Evidence(tuple(teachers), data, dataset.num_rows if dataset is not None else 0, tuple(space.names),
                    tuple(len(t.labels) for t in teachers), canonical, prior_check, plans,
                    figures, gold=gold, gold_alone=alone, prior_check=checked_prior)


def _gold_for_the_prior(workspace, store, teachers, dataset, rmd_fit, gold_name, plan, generated_check, label_names,
                        canonical, *, check: bool, encoder: str, device: str):
    """With --gold: (the gold dataset, whether the prior reads it alone, the check of the prototypes it reads). Its
    rows join the plan's labelled text unless the plan fits on them already (--rmd-fit); they replace it where
    they hold every label and the plan's text failed the check (its prototypes misread some teacher's rows)."""
    from kamalcli.probe.prior_check import transfer_check

    gold = store.dataset(gold_name) if gold_name else None
    if gold is None or plan.dataset is None or gold.id == plan.dataset.id:
        return None, False, generated_check
    holds_every_label = label_names <= {canonical(label) for label in (gold.label_counts or {})}
    alone = holds_every_label and generated_check is not None and not generated_check.passed
    if not check or dataset is None:
        return gold, alone, generated_check
    return gold, alone, transfer_check(workspace, store, teachers, dataset, gold.name if alone else rmd_fit,
                                       encoder=encoder, device=device, gold=None if alone else gold)
