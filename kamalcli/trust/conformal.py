"""Split conformal prediction sets (LAC: Sadinle, Lei & Wasserman 2019; Angelopoulos & Bates 2021, sec. 1).

On n labelled calibration rows the nonconformity of a row is 1 - p(true label). With q the
ceil((n + 1) c)-th smallest of them, the set {y : 1 - p(y) <= q} holds the true label of a new row from
the same distribution with probability at least c (marginally, over rows and calibration draws). With too
few rows for c (ceil((n + 1) c) > n) no finite q gives the guarantee: every label is in the set.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError

FILE = "calibration.json"  # in the student's folder, and in its exports
TASKS_FILE = "calibration-tasks.json"  # a several-task student's (kamalcli/heads.py): {task: calibration}


@dataclass(frozen=True)
class Calibration:
    coverage: float   # the probability asked for
    threshold: float  # q: a label is in the set when 1 - p(label) <= q
    rows: int
    data: str = ""
    method: str = "lac"

    @property
    def complete(self) -> bool:
        """Too few rows for the coverage asked: every set holds every label."""
        return self.threshold >= 1.0

    def members(self, probs: np.ndarray) -> np.ndarray:
        """(rows, labels) bool: which labels are in each row's set."""
        return 1.0 - np.asarray(probs, dtype=np.float64) <= self.threshold + 1e-12

    def sets(self, probs: np.ndarray, labels: list[str]) -> list[list[str]]:
        """Each row's set, most probable label first."""
        probs = np.asarray(probs)
        inside = self.members(probs)
        return [[labels[i] for i in np.argsort(-p, kind="stable") if m[i]] for p, m in zip(probs, inside)]

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Calibration":
        try:
            return cls(coverage=float(data["coverage"]), threshold=float(data["threshold"]), rows=int(data["rows"]),
                       data=str(data.get("data", "")), method=str(data.get("method", "lac")))
        except (KeyError, TypeError, ValueError) as e:
            raise KamalError(f"unreadable calibration ({type(e).__name__}: {e})") from None


def check_coverage(coverage: float) -> float:
    if not 0.0 < coverage < 1.0:
        raise KamalError(f"--coverage {coverage:g}: give a probability strictly between 0 and 1 (e.g. 0.9)")
    return coverage


def calibrate(probs: np.ndarray, gold: np.ndarray, coverage: float, data: str = "") -> Calibration:
    """The LAC threshold from calibration rows: probs (rows, labels), gold the true label's index per row."""
    check_coverage(coverage)
    gold = np.asarray(gold, dtype=np.int64)
    n = len(gold)
    if n == 0:
        raise KamalError("no labelled rows to calibrate on")
    scores = np.sort(1.0 - np.asarray(probs, dtype=np.float64)[np.arange(n), gold])
    k = math.ceil((n + 1) * coverage - 1e-9)
    threshold = 1.0 if k > n else float(scores[k - 1])
    return Calibration(coverage=coverage, threshold=threshold, rows=n, data=data)


def rows_needed(coverage: float) -> int:
    """The fewest calibration rows with which the guarantee asks for less than every label."""
    return math.ceil(coverage / (1.0 - coverage) - 1e-9)


def coverage_spread(rows: int, coverage: float, level: float = 0.9) -> tuple[float, float] | None:
    """Where the coverage of one calibration on `rows` rows lies (the probability, given those rows, that a new
    row's set holds its label) for `level` of the calibration draws one could have made. For continuous scores it
    follows Beta(k, rows + 1 - k), k = ceil((rows + 1) coverage) (Vovk 2012; Angelopoulos & Bates 2021, sec. 3.2):
    the guarantee is on the mean over draws, and this is how far one draw may fall from it. None when k > rows."""
    k = math.ceil((rows + 1) * coverage - 1e-9)
    if k > rows:
        return None
    tail = (1.0 - level) / 2
    return _beta_quantile(tail, k, rows + 1 - k), _beta_quantile(1.0 - tail, k, rows + 1 - k)


def _beta_quantile(p: float, a: int, b: int) -> float:
    """The p-quantile of Beta(a, b) for whole a, b, by bisection on its CDF: P(Beta(a, b) <= x) is the chance
    that Binomial(a + b - 1, x) reaches a."""
    n = a + b - 1
    log_factorial = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
    j = np.arange(a, n + 1)
    log_choose = log_factorial[n] - log_factorial[j] - log_factorial[n - j]

    def cdf(x: float) -> float:
        if x <= 0.0:
            return 0.0
        if x >= 1.0:
            return 1.0
        terms = log_choose + j * math.log(x) + (n - j) * math.log1p(-x)
        top = terms.max()
        return float(math.exp(top) * np.exp(terms - top).sum())

    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < p else (low, middle)
    return (low + high) / 2


def coverage_and_size(members: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """(share of rows whose set holds the gold label, mean set size) over rows with a known gold index."""
    gold = np.asarray(gold, dtype=np.int64)
    if len(gold) == 0:
        return float("nan"), float("nan")
    return float(members[np.arange(len(gold)), gold].mean()), float(members.sum(axis=1).mean())


def load_calibration(folder: Path) -> Calibration | None:
    """The calibration saved in a student's (or an export's) folder; None when it has none."""
    path = Path(folder) / FILE
    try:
        return Calibration.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise KamalError(f"unreadable {path}: {e}") from None


def load_task_calibrations(folder: Path) -> dict[str, Calibration]:
    """A several-task student's calibrations, by task (TASKS_FILE); empty when it has none."""
    path = Path(folder) / TASKS_FILE
    try:
        listed = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise KamalError(f"unreadable {path}: {e}") from None
    return {task: Calibration.from_json(data) for task, data in listed.items()}
