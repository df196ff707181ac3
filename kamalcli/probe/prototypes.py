"""The prototype score: how near a row is to each teacher's labels in one shared sentence encoder.

RMD measures each teacher in its own fine-tuned feature space. Fine-tuning keeps what separates that
teacher's classes and folds foreign text onto them, so distances in two teachers' spaces do not compare
well, and a teacher with few classes loses its rows to the one with many. A general sentence encoder
(all-MiniLM-L6-v2 by default), fine-tuned on no teacher's labels, places every label's text in one space:
- the prototype of label c is the unit mean of the encoder's sentence vectors of rows labelled c (text
  kamal synthesize wrote for c, or the labelled rows given with --rmd-fit);
- a row's prototype score for teacher i is the share of softmax(cos(x, prototype_c) / T) over all labels
  that falls on teacher i's labels.
T = 0.05 is the encoder's own training temperature (its contrastive loss scales cosines by 20).

The two scores err on different rows, so kamal's default (score=auto with such text) averages their
pooled percentiles: `rmd+prototype`.

The same prototypes are also a classifier over the union of labels, one the teachers' errors do not
share: softmax(cos(x, prototype_c) / PRIOR_T) over every label. muki-hard's `prior` multiplies the
teachers' ensemble by it (a product of experts). PRIOR_T = 0.1 is softer than the score's T because
this expert is not the stronger of the two (56-71% alone on the README walk, the ensemble 64-68%);
it was chosen on one seed of that walk and checked on two others (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.probs import percentile, softmax

DEFAULT_ENCODER = "minilm-l6"
TEMPERATURE = 0.05
PRIOR_TEMPERATURE = 0.1


def class_prototypes(vectors: np.ndarray, labels: list[str], names: list[str]) -> np.ndarray:
    """(len(names), H): per label name, the unit-length mean of the unit-length vectors labelled with it."""
    vectors = _unit(np.asarray(vectors, dtype=np.float64))
    labels = np.asarray(labels, dtype=object)
    missing = [name for name in names if not (labels == name).any()]
    if missing:
        raise KamalError(f"no rows for label(s) {', '.join(missing)}: the prototype score needs every label")
    return _unit(np.stack([vectors[labels == name].mean(axis=0) for name in names]))


def teacher_shares(vectors: np.ndarray, prototypes: np.ndarray, owns: np.ndarray,
                   temperature: float = TEMPERATURE) -> np.ndarray:
    """(n, N): per row, the softmax mass over all labels' prototypes that falls on each teacher's labels.

    owns: (labels, N) booleans, label c is one of teacher i's (a label two teachers know counts for both)."""
    logits = _unit(np.asarray(vectors, dtype=np.float64)) @ prototypes.T / temperature
    return softmax(logits, axis=1) @ np.asarray(owns, dtype=np.float64)


def class_posterior(vectors: np.ndarray, prototypes: np.ndarray, temperature: float = PRIOR_TEMPERATURE) -> np.ndarray:
    """(n, labels): per row, softmax(cos(x, prototype_c) / temperature) over every label's prototype."""
    return softmax(_unit(np.asarray(vectors, dtype=np.float64)) @ prototypes.T / temperature, axis=1)


def fused(rmd: np.ndarray, prototype: np.ndarray) -> np.ndarray:
    """The mean of the two scores' pooled percentiles (each one map for all teachers), in (0, 1]."""
    return (percentile(rmd) + percentile(prototype)) / 2


def confidence_columns(scores: np.ndarray, rmd: np.ndarray | None) -> dict[str, np.ndarray]:
    """The selection scores the prototype score adds: `prototype`, and `rmd+prototype` when RMD exists."""
    columns = {"prototype": percentile(scores)}
    if rmd is not None:
        columns["rmd+prototype"] = fused(rmd, scores)
    return columns


def label_owners(teachers, canonical=lambda label: label) -> tuple[list[str], np.ndarray]:
    """The union's label names in teacher order, and (labels, teachers) booleans: which teacher knows which.
    canonical: a label's class name (kamal labels merge), so merged labels are one prototype."""
    names = list(dict.fromkeys(canonical(label) for t in teachers for label in t.labels))
    return names, np.array([[name in {canonical(label) for label in t.labels} for t in teachers] for name in names])


@dataclass(frozen=True)
class PrototypeFit:
    """The prototypes of the labelled rows' labels and the sentence vectors of a dataset's rows, read once for both
    the prototype score and the prior. held_out: the dataset's rows that are themselves labelled rows of the fit,
    as (row indices, their label indices, their unit vectors); the prior leaves each one out of its own label's
    prototype, so a student does not learn a gold row's label twice (from its loss and from its target)."""

    names: list[str]
    owns: np.ndarray
    vectors: np.ndarray
    prototypes: np.ndarray
    sums: np.ndarray | None = None      # (labels, H): the sum of each label's unit vectors, for held_out
    held_out: tuple | None = None

    def shares(self) -> np.ndarray:
        """(rows, teachers): the prototype score."""
        return teacher_shares(self.vectors, self.prototypes, self.owns)

    def prior(self, labels: list[str]) -> np.ndarray:
        """(rows, len(labels)): the prototype classifier's class probabilities, columns in `labels` order."""
        unit = _unit(np.asarray(self.vectors, dtype=np.float64))
        cosines = unit @ self.prototypes.T
        if self.held_out is not None:
            rows, label_of, own = self.held_out  # each against its own label's prototype without it
            cosines[rows, label_of] = np.einsum("ij,ij->i", unit[rows], _unit(self.sums[label_of] - own))
        return softmax(cosines / PRIOR_TEMPERATURE, axis=1)[:, [self.names.index(label) for label in labels]]


def fit_prototypes(workspace, teachers, dataset, fit_dataset, *, encoder: str, max_length: int, device: str,
                   say=print, canonical=lambda label: label, encode: bool = True, gold=None) -> PrototypeFit | None:
    """Prototypes of fit_dataset's labelled rows, and of gold's too where given (every labelled row counts once:
    the real rows join the generated ones, a label gold lacks keeps fit_dataset's); a transfer row that is a fit
    row is held out of its own label's prototype in the prior; encode=False: from cached sentence vectors only
    (None when a set's were never computed)."""
    from kamalcli.data.text import load_dataset_rows
    from kamalcli.probe.encoder import sentence_vectors

    names, owns = label_owners(teachers, canonical)
    fit_texts, fit_labels, fit_vectors = [], [], []
    for labelled in (fit_dataset, gold if gold is None or gold.id != fit_dataset.id else None):  # each row once
        if labelled is None:
            continue
        texts, labels = load_dataset_rows(labelled)
        if labels is None:
            raise KamalError(f"{labelled.name} has no labels: the prototype score needs labelled rows")
        vectors = sentence_vectors(workspace, encoder, texts, labelled.content_hash, max_length, device, say, encode)
        if vectors is None:
            return None
        fit_texts += texts
        fit_labels += [canonical(label) for label in labels]
        fit_vectors.append(np.asarray(vectors, dtype=np.float64))
    texts, _ = load_dataset_rows(dataset)
    vectors = sentence_vectors(workspace, encoder, texts, dataset.content_hash, max_length, device, say, encode)
    if vectors is None:
        return None
    fit_vectors = np.concatenate(fit_vectors)
    prototypes = class_prototypes(fit_vectors, fit_labels, names)
    return PrototypeFit(names, owns, vectors, prototypes, *_held_out(texts, fit_texts, fit_labels, fit_vectors, names))


def _held_out(texts, fit_texts, fit_labels, fit_vectors, names) -> tuple[np.ndarray, tuple]:
    """The per-label sums of the fit's unit vectors, and the rows of texts that are fit rows (see PrototypeFit)."""
    unit = _unit(fit_vectors)
    label_index = np.array([names.index(label) if label in names else -1 for label in fit_labels])
    sums = np.zeros((len(names), unit.shape[1]))
    known = label_index >= 0
    np.add.at(sums, label_index[known], unit[known])
    where = {text: i for i, text in enumerate(fit_texts) if label_index[i] >= 0}
    rows = np.array([r for r, text in enumerate(texts) if text in where], dtype=int)
    fit_rows = np.array([where[texts[r]] for r in rows], dtype=int)
    return sums, (rows, label_index[fit_rows], unit[fit_rows])


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
