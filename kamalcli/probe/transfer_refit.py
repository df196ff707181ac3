"""RMD fitted again on the transfer rows, for the teachers whose rows the generated text does not read.

kamal fits each teacher's RMD on the text `kamal synthesize` wrote for it. Where that text does not look like the
teacher's rows of the transfer set (measured: English text written for a Chinese sentiment teacher, whose rows
of the pool are Chinese), the fit may give it the wrong rows. The prior's check (prior_check.py) detects
exactly that teacher without labels: the prototypes of the generated text name its classes on its rows no more
often than chance, or place most of its rows among other teachers' labels. refit=auto then fits that teacher's
Gaussians again on the transfer rows themselves: from the current selection, on the surer half of the rows it is
given (prior_check.surer_half), its own predicted classes as the classes, every transfer row as the background;
the rows are selected again with the new fit, for up to the recipe's rounds, stopping once no row changes teacher. No
labels are read; the other teachers keep their fit.

Measured on four builds of the cross-lingual pair's teachers (docs/benchmarks.md, benchmarks/pool_refit.py):
RMD picked the right teacher on 90.1, 72.5, 77.3 and 79.5% of the pool; refitting the failing teacher, after three
rounds, 90.5, 93.5, 99.5 and 85.4%. Refitting every teacher drifted on one build (91.4% after one round, 83.8% after
three), and on debian-topics, where the check passes, refitting lowered selection (two teachers 78.7 to 76.4%,
three 84.2 to 70.0%): so only the teachers the check fails for, and only when it fails.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from kamalcli.probe.prior_check import surer_half
from kamalcli.probs import percentile
from kamalcli.trust.mahalanobis import fit_rmd

ROUNDS = 3


def refit_rounds(confidence: np.ndarray, features: list[np.ndarray], predicted: list[np.ndarray],
                 refit: list[int], rounds: int = ROUNDS) -> list[np.ndarray]:
    """The selection confidence (rows, teachers; -RMD, higher = more the teacher's row) before and after each
    round, stopping early once no row changes teacher. features[i], predicted[i]: teacher i's features at its RMD
    layer and its predicted class on every row; only the teachers in `refit` are fitted again (one given fewer
    than two rows keeps its column)."""
    out = [np.asarray(confidence, dtype=np.float64)]
    for _ in range(rounds):
        confidence = out[-1].copy()
        for i in refit:
            rows = surer_half(out[-1], i)
            if len(rows) < 2:
                continue
            h = np.asarray(features[i], dtype=np.float64)
            confidence[:, i] = -fit_rmd(h[rows], np.asarray(predicted[i])[rows], h).score(h)
        out.append(confidence)
        if (confidence.argmax(axis=1) == out[-2].argmax(axis=1)).all():
            break
    return out


def refitted_outputs(store, probes, outputs, refit: dict, say):
    """The teachers' outputs with the RMD confidence refitted as `refit` (Refit.as_json) says."""
    from kamalcli.probe.arrays import ProbeArrays

    arrays = [ProbeArrays.load(Path(p.path)) for p in probes]
    features = [a.features[max(a.features)] for a in arrays]  # the layer the RMD fits read (runner.fit_rmd)
    raw = np.stack([-np.asarray(store.probe_rows(p.id)["rmd"], dtype=np.float64) for p in probes], axis=1)
    which = [outputs.teachers.index(name) for name in refit["teachers"]]
    steps = refit_rounds(raw, features, [np.asarray(z).argmax(axis=1) for z in outputs.logits], which,
                         refit["rounds"])
    moved = [int((a.argmax(axis=1) != b.argmax(axis=1)).sum()) for a, b in zip(steps, steps[1:])]
    say(f"refit=auto: rows changing teacher, round by round: {', '.join(f'{m:,}' for m in moved)} "
        f"(of {outputs.num_rows:,}).")
    return replace(outputs, confidence={**outputs.confidence, "rmd": percentile(steps[-1])})
