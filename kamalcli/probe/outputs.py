"""The probe's product, the methods' input: N teachers' cached outputs on the same rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.labels import LabelSpace
from kamalcli.probs import percentile, softmax


@dataclass(frozen=True)
class TeacherOutputs:
    """N teachers' cached outputs on the same n rows."""

    space: LabelSpace
    teachers: tuple[str, ...]
    logits: tuple[np.ndarray, ...]        # per teacher, (n, k_i)
    confidence: dict[str, np.ndarray]     # score name -> (n, N): higher = more sure the row is the teacher's
    rmd_sources: tuple = ()               # per teacher, where its RMD fit came from (score=auto reads it)
    prior: np.ndarray | None = None       # (n, |Y|): a class expert beside the teachers (muki-hard's prior), or none
    prior_teachers: tuple[str, ...] | None = None  # the prior refines classes only within these teachers' labels; None: all
    neighbours: np.ndarray | None = None  # (n, k): each row's nearest rows in a sentence encoder (muki-hard's smooth)
    pick_neighbours: np.ndarray | None = None  # (n, k): the same, for muki's pick (pick_smooth)

    @property
    def num_rows(self) -> int:
        return self.logits[0].shape[0]

    def probs(self, i: int, temperature: float = 1.0) -> np.ndarray:
        return softmax(self.logits[i].astype(np.float64) / temperature, axis=1)

    def padded(self, i: int, temperature: float = 1.0) -> np.ndarray:
        return self.space.pad(self.teachers[i], self.probs(i, temperature))

    def score(self, name: str) -> np.ndarray:
        if name not in self.confidence:
            available = ", ".join(sorted(self.confidence))
            raise KamalError(f"confidence score {name!r} is not available here (available: {available})")
        return self.confidence[name]


def teacher_outputs(store, teachers, probes) -> TeacherOutputs:
    """The methods' view of N teachers' cached probes on the same rows."""
    from kamalcli.probe.arrays import ProbeArrays
    from kamalcli.probe.measured import energy
    from kamalcli.probe.figures import SCORES

    space = store.label_space(teachers)
    rows = [store.probe_rows(p.id) for p in probes]
    logits = tuple(np.asarray(ProbeArrays.load(Path(p.path)).logits, dtype=np.float32) for p in probes)
    confidence = {}
    for score, of_rows in SCORES.items():
        columns = [of_rows(r) for r in rows]
        if all(c is not None for c in columns):
            confidence[score] = np.stack(columns, axis=1)
    if "rmd" in confidence:
        confidence["rmd"] = percentile(confidence["rmd"])
    confidence["energy"] = percentile(np.stack([energy(z) for z in logits], axis=1))
    fits = [store.rmd_fit_of(p.id) for p in probes]
    return TeacherOutputs(space, tuple(t.name for t in teachers), logits, confidence,
                          tuple(f.source if f is not None else None for f in fits))
