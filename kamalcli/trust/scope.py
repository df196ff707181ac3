"""Out-of-scope detection without labels: "none of my teachers knew this text".

Fitted on the student's own outputs over its transfer rows, which lie in the teachers' domains: a score that
is high in scope, and the threshold that keeps a target share of those rows (default 95%). Scores:

- energy: log-sum-exp of the logits (Liu et al. 2020);
- msp: the largest softmax probability (Hendrycks & Gimpel 2017);
- rmd: minus the relative Mahalanobis distance (Ren et al. 2021) of the last layer's first-token vector, class
  Gaussians fitted on the rows the student puts in each class (shared covariance), the background one on all.

numpy only: `kamal predict`, `kamal eval` and the exports' torch-free runtime compute the same number.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.probs import logsumexp, softmax
from kamalcli.trust.mahalanobis import RMDModel, fit_rmd

FILE = "scope.npz"  # in the student's folder and its exports: one file, replaced whole (the settings and rmd's Gaussians)
TASKS_FILE = "scope-tasks.npz"  # a student of several tasks (kamalcli/heads.py): a scope per task, in one file
SCORES = ("energy", "msp", "rmd")
DEFAULT_SCORE = "rmd"
FALLBACK_SCORE = "energy"  # when rmd cannot separate anything: the student puts every fit row in one class
DEFAULT_KEEP = 0.95
FOLDS = 5
MIN_ROWS = 20


@dataclass(frozen=True)
class Scope:
    score: str
    threshold: float     # in scope when score >= threshold
    keep: float          # the share of fit rows kept, as asked
    rows: int
    data: str = ""
    rmd: RMDModel | None = field(default=None, repr=False)
    note: str = ""       # why the score is not the one asked for (fit_scope's fallback), else ""

    @property
    def needs_features(self) -> bool:
        return self.score == "rmd"

    def scores(self, logits: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        return scope_scores(self.score, logits, features, self.rmd)

    def in_scope(self, scores: np.ndarray) -> np.ndarray:
        return np.asarray(scores) >= self.threshold

    def as_json(self) -> dict:
        return {"score": self.score, "threshold": self.threshold, "keep": self.keep, "rows": self.rows,
                "data": self.data, **({"note": self.note} if self.note else {})}

    def save(self, folder: Path) -> None:
        """scope.npz: `settings` (JSON text) and, for rmd, the Gaussians (means, precision, mean0, precision0)."""
        arrays = {"settings": np.array(json.dumps(self.as_json(), sort_keys=True))}
        if self.rmd is not None:
            arrays.update(self.rmd.arrays())
        _write(folder, FILE, arrays)


def scope_scores(score: str, logits: np.ndarray, features: np.ndarray | None = None,
                 rmd: RMDModel | None = None) -> np.ndarray:
    """Per row, higher = more in scope."""
    logits = np.asarray(logits, dtype=np.float64)
    if score == "energy":
        return logsumexp(logits, axis=1)
    if score == "msp":
        return softmax(logits).max(axis=1)
    if score == "rmd":
        if features is None or rmd is None:
            raise KamalError("the rmd scope score needs the student's features and its fitted Gaussians")
        return -rmd.score(features)
    raise KamalError(f"unknown scope score {score!r}: {', '.join(SCORES)}")


def fit_scope(logits: np.ndarray, features: np.ndarray | None = None, *, score: str = DEFAULT_SCORE,
              keep: float = DEFAULT_KEEP, data: str = "", folds: int = FOLDS, seed: int = 0) -> Scope:
    """The scope fitted on transfer rows: the threshold is the (1 - keep) quantile of their scores.

    rmd's Gaussians are fitted on the same rows, which then lie closer to them than new rows do (measured:
    a threshold from the fit rows' own scores kept 65-68% of new in-scope rows where 95% was asked). So its
    threshold comes from out-of-fold scores: each row scored by Gaussians fitted without it (`folds` folds);
    the Gaussians kept are fitted on every row. When the student puts every row in one class, rmd cannot
    tell anything apart: energy is fitted instead, and the scope's note says why."""
    check_keep(keep)
    logits = np.asarray(logits)
    if len(logits) < MIN_ROWS:
        raise KamalError(f"a scope needs at least {MIN_ROWS} transfer rows to fit; this data has {len(logits)}")
    if score not in SCORES:
        raise KamalError(f"unknown scope score {score!r}: {', '.join(SCORES)}")
    rmd, note = None, ""
    classes = logits.argmax(axis=1)
    if score == "rmd" and len(np.unique(classes)) < 2:
        # One class: its Gaussian is the background one, so every text's RMD is 0 and every text is in scope.
        note = (f"the student puts all {len(classes)} rows of {data or 'the data'} in one class, where rmd would "
                f"call every text in scope: fitted {FALLBACK_SCORE} instead")
        score = FALLBACK_SCORE
    if score == "rmd":
        rmd, values = rmd_out_of_fold(classes, np.asarray(features), folds=folds, seed=seed)
    else:
        values = scope_scores(score, logits)
    threshold = float(np.quantile(values, 1.0 - keep, method="lower"))
    return Scope(score=score, threshold=threshold, keep=keep, rows=len(values), data=data, rmd=rmd, note=note)


def rmd_out_of_fold(classes: np.ndarray, features: np.ndarray, *, folds: int = FOLDS,
                    seed: int = 0) -> tuple[RMDModel, np.ndarray]:
    """The Gaussians fitted on every row, and each row's -RMD by Gaussians fitted without its fold."""
    values = np.empty(len(classes))
    fold_of = np.random.default_rng(seed).permutation(len(classes)) % folds
    for fold in range(folds):
        held = fold_of == fold
        values[held] = -fit_rmd(features[~held], classes[~held], features[~held]).score(features[held])
    return fit_rmd(features, classes, features), values


def check_keep(keep: float) -> float:
    if not 0.0 < keep < 1.0:
        raise KamalError(f"--keep {keep:g}: give the share of in-scope rows to keep, strictly between 0 and 1")
    return keep


def load_scope(folder: Path) -> Scope | None:
    """The scope saved in a student's (or an export's) folder; None when it has none."""
    return _read(folder, FILE, lambda z: _scope(json.loads(str(z["settings"])), z))


def fit_task_scopes(logits: np.ndarray, features: np.ndarray | None, heads, **fit) -> dict[str, Scope]:
    """A several-task student's scope per task: each fitted as fit_scope fits a one-task student's, on the task's
    own columns (its classes) and the shared features."""
    logits = np.asarray(logits)
    return {head.name: fit_scope(logits[:, head.columns], features, **fit) for head in heads}


def save_task_scopes(folder: Path, scopes: dict[str, Scope]) -> None:
    """scope-tasks.npz: `settings` (JSON: the tasks' scopes in order) and each rmd's Gaussians under `I:NAME`."""
    arrays = {"settings": np.array(json.dumps([{"task": task, **scope.as_json()} for task, scope in scopes.items()],
                                              sort_keys=True))}
    for i, scope in enumerate(scopes.values()):
        if scope.rmd is not None:
            arrays.update({f"{i}:{key}": value for key, value in scope.rmd.arrays().items()})
    _write(folder, TASKS_FILE, arrays)


def load_task_scopes(folder: Path) -> dict[str, Scope]:
    """A several-task student's (or its export's) scopes by task; empty when it has none."""
    def parse(z) -> dict[str, Scope]:
        return {settings["task"]: _scope(settings, {key.split(":", 1)[1]: z[key] for key in z.files
                                                    if key.startswith(f"{i}:")})
                for i, settings in enumerate(json.loads(str(z["settings"])))}

    return _read(folder, TASKS_FILE, parse) or {}


def _scope(settings: dict, arrays) -> Scope:
    rmd = RMDModel.from_arrays(arrays) if settings["score"] == "rmd" else None
    return Scope(score=str(settings["score"]), threshold=float(settings["threshold"]), keep=float(settings["keep"]),
                 rows=int(settings["rows"]), data=str(settings.get("data", "")), rmd=rmd,
                 note=str(settings.get("note", "")))


def _write(folder: Path, name: str, arrays: dict) -> None:
    tmp = Path(folder) / f".{name}.tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, Path(folder) / name)


def _read(folder: Path, name: str, parse):
    """parse(the open .npz); None when there is none; an unreadable one is one line."""
    try:
        with np.load(Path(folder) / name, allow_pickle=False) as z:
            return parse(z)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise KamalError(f"unreadable scope in {folder} ({type(e).__name__}: {e}); fit it again with "
                         "`kamal scope STUDENT`") from None
