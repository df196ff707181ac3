"""What RMD (and the prototype score) are fitted on: one rule, used by kamal probe and kamal amalgamate alike.

In order:
1. labelled data the user names with --rmd-fit NAME;
2. each teacher's own training rows, when every teacher was trained in this workspace (kamal train-teacher):
   measured, the better fit (86.7% against 81.8% selection);
3. the newest text kamal synthesize wrote for these teachers: its rows are labelled with the class they were
   steered to, so each teacher is fitted on text written for its own classes;
4. otherwise the transfer rows each teacher is itself most confident on. That is circular (the fit follows the
   teacher's own picks), and said so.
A labelled eval set is never taken without being named: its figures would then measure a fit made on itself.
The prototype score needs one labelled dataset for every teacher, so with `one_dataset` rule 2 is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from kamalcli.data.text import is_generated
from kamalcli.errors import KamalError


@dataclass(frozen=True)
class FitPlan:
    source: str                  # "given", "teacher-train", "generated" or "pseudo"
    dataset: object | None       # the labelled dataset every teacher is fitted on; None: each teacher's own rows
    line: str                    # what kamal probe and kamal amalgamate both print

    @property
    def circular(self) -> bool:
        return self.source == "pseudo"

    def made(self, fit, teacher) -> bool:
        """Whether a stored RMD fit of this teacher is the one this plan fits (figures measured with another
        fit say nothing of this one)."""
        if fit is None:
            return False
        if self.dataset is not None:
            return fit.source == "labelled" and fit.dataset_id == self.dataset.id
        return fit.source == ("teacher-train" if teacher.train_dataset_id is not None else "pseudo")

    def as_json(self) -> dict:
        return {"source": self.source, "data": self.dataset.name if self.dataset is not None else None,
                "line": self.line}


def rmd_fit_plan(store, teachers, given: str | None = None, *, one_dataset: bool = False) -> FitPlan:
    """The fit for these teachers: --rmd-fit NAME, their training rows, generated text for them, or circular."""
    if given:
        dataset = store.dataset(given)
        dataset.refuse_test(f"--rmd-fit {given}")
        if not dataset.has_labels:
            raise KamalError(f"--rmd-fit {given}: that dataset has no labels")
        return FitPlan("given", dataset, f"RMD fitted on {given}, the labelled data given with --rmd-fit.")
    if teachers and not one_dataset and all(t.train_dataset_id is not None for t in teachers):
        return FitPlan("teacher-train", None,
                       "RMD fitted on each teacher's own training rows (it was trained in this workspace).")
    generated = generated_for(store, teachers)
    if generated is not None:
        return FitPlan("generated", generated, f"RMD fitted on {generated.name}, text kamal synthesize wrote for "
                                               "these teachers (--rmd-fit NAME for labelled data).")
    circular = ", ".join(t.name for t in teachers if t.train_dataset_id is None)
    return FitPlan("pseudo", None, f"RMD fitted on the transfer rows each teacher ({circular}) is itself most "
                                   "confident on: circular. Give labelled data with --rmd-fit NAME, or text "
                                   "written for these teachers with `kamal synthesize`.")


def generated_for(store, teachers):
    """The newest dataset kamal synthesize wrote with every one of these teachers (by fingerprint), or None."""
    wanted = {t.fingerprint for t in teachers}
    if not wanted:
        return None
    for dataset in sorted(store.datasets(), key=lambda d: d.id, reverse=True):
        steered = {t.get("fingerprint") for t in (dataset.provenance or {}).get("teachers", [])}
        if is_generated(dataset) and dataset.has_labels and wanted <= steered:
            return dataset
    return None
