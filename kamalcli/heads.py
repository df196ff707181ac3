"""A student's heads: one per task its teachers answer (`kamal add-teacher --task NAME`).

Teachers of one task are amalgamated over the union of their labels, as they always were; teachers of different
tasks (a topic classifier and a sentiment classifier: a text has both) get a head each. A head is a block of the
student's one classifier: its columns are the task's labels, read through a softmax of their own, or a sigmoid per
label for a multi-label task (`problem_type: multi_label_classification`). The student stays one standard
*ForSequenceClassification model: its config.json lists the heads under KEY, and a student without that key
has one head over all its labels (every student made before tasks existed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.probs import softmax

DEFAULT = "default"   # the task of every teacher added without --task
KEY = "kamal_heads"   # config.json: [{"name", "labels", "multi_label"}, ...] in column order
SEPARATOR = "/"       # a several-head student's column names: TASK/LABEL, as id2label shows them
THRESHOLD = 0.5       # a multi-label head's label is on when its sigmoid is at least this


@dataclass(frozen=True)
class Head:
    name: str
    labels: tuple[str, ...]
    multi_label: bool = False
    start: int = 0

    @property
    def columns(self) -> slice:
        return slice(self.start, self.start + len(self.labels))

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """(n, |labels|): this head's columns of (n, all columns) logits, softmaxed or sigmoid per label."""
        block = np.asarray(logits, dtype=np.float64)[:, self.columns]
        return sigmoid(block) if self.multi_label else softmax(block, axis=1)

    def as_json(self) -> dict:
        return {"name": self.name, "labels": list(self.labels), "multi_label": self.multi_label}


@dataclass(frozen=True)
class TaskTeachers:
    """The teachers of one task, in registration order."""

    name: str
    teachers: tuple
    multi_label: bool


def tasks_of(teachers) -> list[TaskTeachers]:
    """The tasks these teachers answer, in the order their first teacher was registered."""
    order: dict[str, list] = {}
    for teacher in teachers:
        order.setdefault(teacher.head_name, []).append(teacher)
    return [TaskTeachers(name, tuple(group), group[0].multi_label) for name, group in order.items()]


def several_heads(teachers) -> bool:
    """Whether these teachers make a student of several heads (or of one multi-label head): not the one-task
    student kamal has always made."""
    tasks = tasks_of(teachers)
    return len(tasks) > 1 or any(task.multi_label for task in tasks)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # exact, and no overflow warning for large |x|


def laid_out(heads: Sequence[dict | Head]) -> list[Head]:
    """Heads (as_json dicts or Heads) with their column offsets, in the order given."""
    out, start = [], 0
    for head in heads:
        head = head.as_json() if isinstance(head, Head) else head
        out.append(Head(head["name"], tuple(head["labels"]), bool(head.get("multi_label")), start))
        start += len(head["labels"])
    return out


def column_names(heads: Sequence[Head]) -> list[str]:
    """The student's id2label: the labels as they are for one single-label head (every student before tasks),
    TASK/LABEL for several heads (two tasks may both say "positive")."""
    if is_plain(heads):
        return list(heads[0].labels)
    return [f"{head.name}{SEPARATOR}{label}" for head in heads for label in head.labels]


def is_plain(heads: Sequence[Head]) -> bool:
    """One single-label head: the student kamal has always made, on its code path bit for bit."""
    return len(heads) == 1 and not heads[0].multi_label


def heads_of_config(config: dict, labels: Sequence[str]) -> list[Head]:
    """A saved student's (or export's) heads: config.json's KEY, else one head over its labels."""
    listed = config.get(KEY) if isinstance(config, dict) else None
    if not listed:
        return [Head(DEFAULT, tuple(labels))]
    return laid_out(listed)


def heads_of_student(student) -> list[Head]:
    """A student record's heads, as its training recorded them."""
    listed = (student.train or {}).get("heads")
    return laid_out(listed) if listed else [Head(DEFAULT, tuple(student.labels))]


def head_named(heads: Sequence[Head], name: str) -> Head:
    found = [h for h in heads if h.name == name]
    if not found:
        raise KamalError(f"no task named {name!r} (tasks: {', '.join(h.name for h in heads)})")
    return found[0]


def task_of_labels(heads, gold: list[str], data_name: str, named: str | None = None) -> Head:
    """The task named (--task), else the one whose labels most of the gold labels are (a multi-label task's: every
    name of a row's set)."""
    if named is not None:
        return head_named(heads, named)

    def share(head) -> float:
        known = set(head.labels)
        fits = [set(label_set(g)) <= known if head.multi_label else g in known for g in gold]
        return float(np.mean(fits)) if fits else 0.0

    best = max(heads, key=share)
    if share(best) < 0.5:
        raise KamalError(f"the labels of {data_name} are none of the student's tasks' ("
                         + "; ".join(f"{h.name}: {', '.join(h.labels[:4])}" for h in heads) + "): name one with --task")
    return best


def label_set(value: str) -> list[str]:
    """A multi-label gold value: a JSON list (JSONL data keeps it as add-data read it) or names split by commas (a
    comma is in no label name); an empty list is "[]"."""
    value = value.strip()
    if value.startswith("["):
        try:
            names = json.loads(value)
        except ValueError:
            raise KamalError(f"gold value {value!r} is not a JSON list of labels") from None
        return [str(n) for n in names]
    return [n.strip() for n in value.split(",") if n.strip()]


def check_task_name(name: str) -> None:
    """A task's name: a word that can sit in a column name (TASK/LABEL) and a JSON key."""
    if not name or name != name.strip() or SEPARATOR in name or "," in name or any(c.isspace() for c in name):
        raise KamalError(f"task name {name!r}: use one word without spaces, commas or {SEPARATOR!r}")
