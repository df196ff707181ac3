"""kamal labels merge / split: label names of different teachers that name one class of the union.

A merge is recorded in the workspace (the label_aliases table) and read wherever the union is built
(Store.label_space): the teachers' outputs for the merged names land in one column, gold labels may use any
of the names, students record the classes they were trained over. Refused in one line, with nothing
changed: unknown names, a token teacher's B-/I- tags (its entity types merge), names that are one class
already, two labels of one teacher, a name taken by another class or not usable as one (labels.py's rule), a
sequence label with an entity type, splitting what was never merged. A merge goes with the last teacher that
has one of its names (remove-teacher).
"""

from __future__ import annotations

from dataclasses import dataclass

from kamalcli.errors import KamalError
from kamalcli.labels import Aliases, check_label_names

OUTSIDE = "O"  # every token teacher's "outside" tag: never merged


@dataclass(frozen=True)
class LabelClass:
    """One class of the union after a merge or split: its name, every other name, and who teaches it."""

    name: str
    aliases: tuple[str, ...]
    teachers: dict[str, tuple[str, ...]]   # teacher -> its labels in the class

    @property
    def taught(self) -> list[str]:
        """The class's names some teacher has, in the class's order: what a split makes classes again."""
        names = {label for labels in self.teachers.values() for label in labels}
        return [n for n in (self.name, *self.aliases) if n in names]

    def as_json(self) -> dict:
        return {"name": self.name, "aliases": list(self.aliases),
                "teachers": {t: list(labels) for t, labels in self.teachers.items()}}


def mergeable_names(teachers) -> dict[str, list[tuple[str, str]]]:
    """Each label name a user may merge -> [(teacher, task)]: a sequence teacher's labels and a token
    teacher's entity types (PER for B-PER and I-PER); O is not one."""
    owners: dict[str, list[tuple[str, str]]] = {}
    for teacher in teachers:
        names = teacher.labels if teacher.task == "sequence" else entity_types(teacher.labels)
        for name in names:
            owners.setdefault(name, []).append((teacher.name, teacher.task))
    return owners


def merge_labels(store, labels: list[str], name: str | None = None) -> LabelClass:
    """Join the classes of these label names into one, named name (default: the first label's class)."""
    if len(labels) < 2:
        raise KamalError("give two labels or more to merge (see `kamal labels`)")
    aliases, owners = store.label_aliases(), mergeable_names(store.teachers())
    classes = list(dict.fromkeys(_class_of(label, labels, aliases, owners) for label in labels))
    if len(classes) < 2:
        raise KamalError(f"{' and '.join(map(repr, labels))} are one class already (see `kamal labels`)")
    members = list(dict.fromkeys(m for c in classes for m in (c, *aliases.of(c))))
    _check_one_task(members, owners)
    merged = _label_class(name if name is not None else classes[0], members, owners)
    _check_apart(merged)
    _check_name(merged.name, members, aliases, owners)
    store.merge_labels(members, merged.name, list(merged.teachers))
    return merged


def split_label(store, label: str) -> LabelClass:
    """Undo the merge that holds label: every name of its class is its own class again."""
    aliases, owners = store.label_aliases(), mergeable_names(store.teachers())
    name = aliases.canonical(label)
    if not aliases.of(name):
        known = label in owners or label in aliases.to.values()
        raise KamalError(f"{label!r} was never merged with another label (see `kamal labels`)" if known else
                         f"no label {label!r}: not a label of any teacher (see `kamal labels`)")
    merged = _label_class(name, [name, *aliases.of(name)], owners)
    store.split_label(name, list(merged.teachers))
    return merged


def label_classes(store) -> list[LabelClass]:
    """Every merged class of the workspace, in the order the merges were made."""
    aliases, owners = store.label_aliases(), mergeable_names(store.teachers())
    names = list(dict.fromkeys(aliases.to.values()))
    return [_label_class(n, [n, *aliases.of(n)], owners) for n in names]


def forget_untaught_merges(store) -> list[LabelClass]:
    """The merges none of whose names a teacher has any more (their teachers were removed), undone: a teacher
    added later with one of those labels keeps its own name. Returns them."""
    untaught = [merged for merged in label_classes(store) if not merged.teachers]
    for merged in untaught:
        store.split_label(merged.name, [])
    return untaught


def _class_of(label: str, labels: list[str], aliases: Aliases, owners: dict) -> str:
    if label == OUTSIDE:
        raise KamalError("O is every token teacher's 'outside' tag: it cannot be merged")
    kind = next(iter(entity_types([label])), None)
    if label not in owners and any(task == "token" for _, task in owners.get(kind, [])):
        types = " ".join(dict.fromkeys(t for name in labels for t in entity_types([name]) or [name]))
        raise KamalError(f"{label!r} is a tag of token teachers: merge their entity types (kamal labels merge {types})")
    if label not in owners and label not in aliases.to.values():
        raise KamalError(f"no label {label!r}: not a label of any teacher (see `kamal labels`)")
    return aliases.canonical(label)


def _check_one_task(members: list[str], owners: dict) -> None:
    tasks = {task for m in members for _, task in owners.get(m, [])}
    if len(tasks) > 1:
        raise KamalError(f"{', '.join(members)} mix text labels and entity types: only names of one kind merge")


def _check_apart(merged: LabelClass) -> None:
    """Refused when one teacher has two of the labels: a teacher's own classes stay apart."""
    for teacher, labels in merged.teachers.items():
        if len(labels) > 1:
            raise KamalError(f"{labels[0]!r} and {labels[1]!r} are both labels of teacher {teacher}: a teacher's "
                             "own classes stay apart (its head tells them apart)")


def _check_name(name: str, members: list[str], aliases: Aliases, owners: dict) -> None:
    check_label_names([name], "--as", "pick another --as")
    if name == OUTSIDE:
        raise KamalError("'O' is kept for every token teacher's 'outside' tag; pick another --as")
    if name not in members and (name in owners or name in aliases.to or name in aliases.to.values()):
        other = aliases.canonical(name)
        raise KamalError(f"{name!r} is already the name of another class ({other}); pick another --as")


def _label_class(name: str, members: list[str], owners: dict) -> LabelClass:
    taught: dict[str, list[str]] = {}
    for member in members:
        for teacher, _ in owners.get(member, []):
            taught.setdefault(teacher, []).append(member)
    return LabelClass(name, tuple(m for m in members if m != name), {t: tuple(v) for t, v in taught.items()})


def entity_types(tags) -> list[str]:
    """A token teacher's entity types, in tag order (PER for B-PER and I-PER)."""
    return list(dict.fromkeys(t[2:] for t in tags if t[:2] in ("B-", "I-")))
