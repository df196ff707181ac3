"""Which labels of different teachers may name one class (`same`) or one inside another (`nested`).

Label-free evidence, per pair of labels (a of teacher A, b of teacher B):
- names: 1 when the names match once case, punctuation, plurals and -ing are set aside; otherwise the cosine
  of their vectors in a sentence encoder no teacher was tuned on (the prototype score's, all-MiniLM-L6-v2),
  floored at 0. Synonyms score 0.75-0.95 there, related but different classes 0.3-0.65.
- behaviour on transfer rows (each teacher's top label on every row of a probed dataset):
  `forward` = P(B says b | A says a), `backward` = P(A says a | B says b), and kappa, Cohen's agreement
  beyond chance between "A says a" and "B says b". A teacher must put every row somewhere, so a class
  neither knows lands on each teacher's nearest one and two different classes can be co-assigned both
  ways (admin and net: kappa 0.76 on debian-topics); names tell those apart, behaviour tells synonyms from
  decoys whose names are alike.

Scores, each in [0, 1], proposed at `threshold` (default 0.6):
- same = sqrt(names * kappa); names alone when no dataset was probed by both teachers, or when a teacher gives
  one of the two labels to fewer than 5 rows there (a class too small or too weak to show behaviour);
- nested (b inside a) = sqrt(names * backward) when backward - forward >= 0.3 (b's rows go to a, a's rows
  mostly elsewhere), the names are at least 0.5 alike and at least 5 rows were given to both.
A teacher that never saw b's rows also sends them to its nearest class, one-sidedly: a nested proposal
whose coarse teacher was not trained on the fine class is the false kind this cannot tell apart.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field

import numpy as np

from kamalcli.probe.prototypes import DEFAULT_ENCODER

DEFAULT_THRESHOLD = 0.6
ONE_SIDED = 0.3      # backward - forward for a nested proposal
NESTED_NAMES = 0.5   # how alike a part's and its whole's names are at least
MIN_TOGETHER = 5     # rows given to both labels: fewer say nothing about nesting
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Behaviour:
    """How two teachers' top labels co-occur on the same rows."""

    forward: float     # P(B says b | A says a)
    backward: float    # P(A says a | B says b)
    kappa: float       # Cohen's kappa of the two yes/no assignments
    together: int      # rows where A says a and B says b
    rows: int
    data: str
    given_a: int = 0   # rows where A says a
    given_b: int = 0   # rows where B says b

    @property
    def silent(self) -> bool:
        """One label was given to fewer than MIN_TOGETHER rows: behaviour says nothing, the names decide alone."""
        return min(self.given_a, self.given_b) < MIN_TOGETHER

    def as_json(self) -> dict:
        return {"forward": round(self.forward, 4), "backward": round(self.backward, 4),
                "kappa": round(self.kappa, 4), "together": self.together, "rows": self.rows, "data": self.data,
                "given": [self.given_a, self.given_b], "silent": self.silent}


@dataclass(frozen=True)
class Proposal:
    kind: str                     # same | nested
    labels: tuple[str, str]       # nested: (coarse, fine)
    teachers: tuple[str, str]
    score: float
    names: float
    behaviour: Behaviour | None
    reason: str
    command: str = field(default="")

    def as_json(self) -> dict:
        return {"kind": self.kind, "labels": list(self.labels), "teachers": list(self.teachers),
                "score": round(self.score, 4), "names": round(self.names, 4),
                "behaviour": self.behaviour.as_json() if self.behaviour else None,
                "reason": self.reason, "command": self.command}


def name_key(name: str) -> tuple[str, ...]:
    """A label name with case, punctuation, plurals and -ing set aside: Sports, sport and SPORT agree."""
    return tuple(_stem(w) for w in _WORD.findall(name.lower()))


def _stem(word: str) -> str:
    for suffix in ("ing", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def name_similarity(a: str, b: str, vectors: dict[str, np.ndarray] | None) -> float:
    """1 for names that match (name_key), else the cosine of their unit vectors (0 without vectors)."""
    if name_key(a) == name_key(b) and name_key(a):
        return 1.0
    if not vectors or a not in vectors or b not in vectors:
        return 0.0
    return max(0.0, float(np.dot(vectors[a], vectors[b])))


def co_assignment(top_a: np.ndarray, top_b: np.ndarray, i: int, j: int, data: str) -> Behaviour:
    """Behaviour of label i of teacher A and label j of teacher B from each teacher's top label per row."""
    says_a, says_b = np.asarray(top_a) == i, np.asarray(top_b) == j
    n = len(says_a)
    both = int((says_a & says_b).sum())
    n_a, n_b = int(says_a.sum()), int(says_b.sum())
    observed = (both + int((~says_a & ~says_b).sum())) / n if n else 0.0
    chance = (n_a * n_b + (n - n_a) * (n - n_b)) / (n * n) if n else 1.0
    kappa = (observed - chance) / (1 - chance) if chance < 1 else 0.0
    return Behaviour(both / n_a if n_a else 0.0, both / n_b if n_b else 0.0, kappa, both, n, data, n_a, n_b)


def propose(teachers: list[tuple[str, list[str]]], vectors: dict[str, np.ndarray] | None,
            top: dict[str, np.ndarray] | None, canonical, threshold: float = DEFAULT_THRESHOLD,
            data: str = "") -> list[Proposal]:
    """Proposals for every pair of labels of two different teachers that are not one class already.

    teachers: (name, labels); vectors: label name -> unit vector (None: names compared by spelling only);
    top: teacher -> its top label index per row of one dataset (None: no behaviour); canonical: a label's
    class name (labels of one class are not proposed again). A pair is not proposed when one teacher has both
    classes already (B knows `positive` too: `positive` ~ `negative` would make two of B's labels one class,
    which `kamal labels merge` refuses), however alike the names."""
    out: list[Proposal] = []
    for x, (ta, labels_a) in enumerate(teachers):
        for tb, labels_b in teachers[x + 1:]:
            classes_a, classes_b = [canonical(a) for a in labels_a], [canonical(b) for b in labels_b]
            for i, a in enumerate(labels_a):
                for j, b in enumerate(labels_b):
                    if classes_a[i] in classes_b or classes_b[j] in classes_a:  # one class already, or would join two
                        continue
                    names = name_similarity(a, b, vectors)
                    seen = co_assignment(top[ta], top[tb], i, j, data) if top else None
                    out.extend(_judge(ta, tb, a, b, names, seen, threshold))
    return sorted(out, key=lambda p: -p.score)


def _judge(ta: str, tb: str, a: str, b: str, names: float, seen: Behaviour | None,
           threshold: float) -> list[Proposal]:
    same = math.sqrt(names * max(seen.kappa, 0.0)) if seen and not seen.silent else names
    if same >= threshold:
        return [Proposal("same", (a, b), (ta, tb), same, names, seen, _same_reason(a, b, names, seen),
                         f"kamal labels merge {shlex.quote(a)} {shlex.quote(b)}")]
    if seen is None or seen.silent:
        return []
    for coarse, fine, t_coarse, t_fine, into, out_of in ((a, b, ta, tb, seen.backward, seen.forward),
                                                          (b, a, tb, ta, seen.forward, seen.backward)):
        nested = math.sqrt(names * into)
        if (into - out_of >= ONE_SIDED and names >= NESTED_NAMES and seen.together >= MIN_TOGETHER
                and nested >= threshold):
            reason = (f"names alike ({names:.2f}); {100 * into:.0f}% of the rows {t_fine} calls {fine!r} "
                      f"{t_coarse} calls {coarse!r}, only {100 * out_of:.0f}% the other way round: "
                      f"{fine!r} looks like a part of {coarse!r}")
            return [Proposal("nested", (coarse, fine), (t_coarse, t_fine), nested, names, seen, reason,
                             f"kamal labels merge {shlex.quote(coarse)} {shlex.quote(fine)}")]
    return []


def _same_reason(a: str, b: str, names: float, seen: Behaviour | None) -> str:
    spelled = "the names match" if names == 1.0 else f"names alike ({names:.2f})"
    if seen is None:
        return f"{spelled}; no transfer data probed by both teachers, so their behaviour was not compared"
    if seen.silent:
        return (f"{spelled}; on {seen.rows} rows of {seen.data} the teachers give {a!r} {seen.given_a} rows and "
                f"{b!r} {seen.given_b}: too few to compare their behaviour")
    return (f"{spelled}; on {seen.rows} rows of {seen.data} the teachers agree beyond chance (kappa "
            f"{seen.kappa:.2f}): {100 * seen.forward:.0f}% of {a!r} rows are {b!r}, "
            f"{100 * seen.backward:.0f}% of {b!r} rows are {a!r}")



@dataclass
class LabelView:
    """What `kamal labels` shows: the union, the merged classes, the proposals and what they rest on."""

    space: object                     # the text classifiers' union (LabelSpace)
    tags: object                      # the token classifiers' union of tags (LabelSpace; empty without them)
    classes: list
    proposals: list[Proposal]
    data: str | None                  # the dataset whose rows gave the behaviour evidence
    encoder: str | None               # the sentence encoder that compared the names (None: spelling only)
    notes: list[str]

    def as_json(self) -> dict:
        return {"labels": list(self.space.names), "tags": list(self.tags.names),
                "aliases": self.space.aliases.as_json(), "classes": [c.as_json() for c in self.classes],
                "proposals": [p.as_json() for p in self.proposals],
                "evidence": {"data": self.data, "encoder": self.encoder}, "notes": self.notes}


def label_view(store, *, data: str | None = None, encoder: str | None = None,
               threshold: float = DEFAULT_THRESHOLD) -> LabelView:
    """The union of every teacher's labels, the merges made, and proposals for labels that may be one class:
    text classifiers' labels with names and behaviour, token classifiers' entity types by name.
    encoder: the sentence encoder comparing names (default: the prototype score's)."""
    from kamalcli.errors import KamalError
    from kamalcli.heads import tasks_of
    from kamalcli.teachers.label_merges import entity_types, label_classes

    if not 0 < threshold <= 1:
        raise KamalError(f"--threshold must be in (0, 1], not {threshold}")
    aliases, notes = store.label_aliases(), []
    sequence, token = store.teachers_of_task("sequence"), store.teachers_of_task("token")
    text_labels = [(t.name, list(t.labels)) for t in sequence]
    types = [(t.name, entity_types(t.labels)) for t in token]
    encoder = encoder or DEFAULT_ENCODER
    vectors, missing = name_vectors([label for _, labels in text_labels + types for label in labels], encoder)
    if missing:
        notes.append(f"Names compared by spelling only: {missing}")
        encoder = None
    dataset, top = _behaviour(store, sequence, data, notes)
    # labels of teachers of different tasks (kamalcli/heads.py) are never one class: proposals stay within a task
    by_task = [[(t.name, list(t.labels)) for t in task.teachers] for task in tasks_of(sequence)]
    proposals = [p for one_task in by_task
                 for p in propose(one_task, vectors, top, aliases.canonical, threshold, dataset.name if dataset else "")]
    proposals += propose(types, vectors, None, aliases.canonical, threshold)
    return LabelView(store.label_space(sequence), store.label_space(token), label_classes(store),
                     sorted(proposals, key=lambda p: -p.score), dataset.name if dataset else None, encoder, notes)


def name_vectors(names: list[str], encoder: str) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """Each label name's unit vector in the sentence encoder; (None, why) when the encoder is not there
    (names are then compared by spelling)."""
    from kamalcli.errors import KamalError
    from kamalcli.probe.encoder import text_vectors

    names = sorted(set(names))
    if not names:
        return {}, None
    try:
        return dict(zip(names, text_vectors(encoder, names))), None
    except KamalError as error:
        return None, str(error)


def _behaviour(store, teachers, data: str | None, notes: list[str]):
    """The dataset whose rows every sequence teacher was probed on (data, else the largest transfer one),
    and each teacher's top label per row there; (None, None) when there is none."""
    from pathlib import Path

    from kamalcli.errors import KamalError
    from kamalcli.probe.arrays import ProbeArrays
    from kamalcli.probe.teacher_weights import stale_probe_lines

    if len(teachers) < 2:
        return None, None
    stale = stale_probe_lines(teachers)
    if stale:
        notes.extend([*stale, "A teacher's probes are stale, so only the names were compared."])
        return None, None
    candidates = [store.dataset(data)] if data else sorted(
        (d for d in store.datasets() if d.task == "sequence"), key=lambda d: (d.role != "transfer", -d.num_rows))
    for dataset in candidates:
        probes = {t.name: store.probes(teacher_id=t.id, dataset_id=dataset.id) for t in teachers}
        if all(probes.values()):
            top = {name: np.asarray(ProbeArrays.load(Path(found[-1].path)).logits).argmax(axis=1)
                   for name, found in probes.items()}
            return dataset, top
    if data:
        raise KamalError(f"{data} was not probed by every teacher: run `kamal probe --data {data}` first")
    notes.append("No dataset was probed by every teacher, so only the names were compared: `kamal probe` "
                 "a transfer dataset for the teachers' behaviour.")
    return None, None
