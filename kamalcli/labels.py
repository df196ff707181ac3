"""The union label space: every teacher's labels, in one stable order.

Order: teachers in registration order, each teacher's labels in its own
id2label order; a label name two teachers share appears once, and both
teachers' blocks map onto it (docs/methods.md, "The union label space").
Names merged with `kamal labels merge` (Aliases) count as one name.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from kamalcli.errors import KamalError

_GENERIC = re.compile(r"^(LABEL_?\d+|label_?\d+|\d+)$")


def label_indices(gold: Sequence[str], names: Sequence[str]) -> np.ndarray:
    """Each gold label's position in names, -1 where names lacks it."""
    index = {name: i for i, name in enumerate(names)}
    return np.array([index.get(g, -1) for g in gold], dtype=np.int64)


def label_name_problem(name: str) -> str | None:
    """The one rule for a class name, from a teacher's config.json, add-teacher --labels or labels merge --as:
    what is wrong with it, None when it is usable. A comma splits --labels and `kamal labels merge` lists, a
    line break or tab splits predict's lines, and spaces around a name make it another name than it looks."""
    if not name.strip():
        return "is empty"
    if name != name.strip():
        return "has spaces around it"
    if "," in name:
        return "holds a comma (what separates names in --labels)"
    if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in name):
        return "holds a line break, tab or other control character"
    return None


def check_label_names(names: Sequence[str], source, fix: str) -> None:
    """Refuse, in one line that says how to fix it, the first name label_name_problem finds wrong."""
    for name in names:
        problem = label_name_problem(name)
        if problem:
            raise KamalError(f"{source}: label name {name!r} {problem}; {fix}")


def is_generic_label(name: str) -> bool:
    """LABEL_0, LABEL_1... (what transformers writes when nobody named the classes)."""
    return bool(_GENERIC.match(str(name)))


def upper_tag(tag: str) -> str:
    """A BIO tag with its entity type upper-cased (B-per -> B-PER), so that teachers and data agree; O as is."""
    prefix, dash, kind = tag.partition("-")
    return f"{prefix}-{kind.upper()}" if dash and prefix in ("B", "I") else tag


def bio_tag_set(tags: Sequence[str], source) -> tuple[list[str], dict[str, str]]:
    """A token classifier's tags with entity types upper-cased, and those renamed (old -> new).

    Refused in one line: two tags that differ only in case (the head has an output for each, the union
    would have one), and an I-TYPE without its B-TYPE (no output begins that type's entities). A B-TYPE
    without I-TYPE is fine: some entity types are one token long.
    """
    upper = [upper_tag(t) for t in tags]
    first: dict[str, str] = {}
    for tag, new in zip(tags, upper):
        if new in first:
            raise KamalError(f"{source}: tags {first[new]} and {tag} differ only in case; kamal upper-cases "
                             "entity types, and this head has an output for each")
        first[new] = tag
    lone = [t for t in upper if t.startswith("I-") and f"B-{t[2:]}" not in first]
    if lone:
        raise KamalError(f"{source}: tag {lone[0]} has no B-{lone[0][2:]} (BIO: an entity begins at B-TYPE and "
                         "continues with I-TYPE)")
    return upper, {old: new for old, new in zip(tags, upper) if old != new}


def renamed_tags_note(renamed: dict[str, str]) -> list[str]:
    """What the user is told when tags were upper-cased (none: nothing)."""
    if not renamed:
        return []
    listed = ", ".join(f"{old} -> {new}" for old, new in list(renamed.items())[:6])
    more = f" and {len(renamed) - 6} more" if len(renamed) > 6 else ""
    return [f"Entity types are upper-cased so that teachers and data agree: {listed}{more}."]


@dataclass(frozen=True)
class Aliases:
    """Label names that name one class (kamal labels merge): alias -> the class's name.

    A token teacher's tags follow their entity type: with PERSON -> PER, B-PERSON is B-PER.
    """

    to: Mapping[str, str] = field(default_factory=dict)

    def canonical(self, name: str) -> str:
        if name in self.to:
            return self.to[name]
        prefix, dash, kind = name.partition("-")
        if dash and prefix in ("B", "I") and kind in self.to:
            return f"{prefix}-{self.to[kind]}"
        return name

    def of(self, name: str) -> list[str]:
        """The other names of a class, in the order they were given."""
        return [alias for alias, target in self.to.items() if target == name]

    def within(self, names: Iterable[str]) -> "Aliases":
        """Only the aliases of these classes (what a student trained over them records)."""
        kept = {self.canonical(n) for n in names}
        kept |= {kind for n in kept for prefix, dash, kind in [n.partition("-")] if dash and prefix in ("B", "I")}
        return Aliases({a: t for a, t in self.to.items() if t in kept})

    def canonical_rows(self, rows: Sequence[Sequence[str]]) -> list[list[str]]:
        """Gold tag sequences with each tag as its class's (B-PERSON -> B-PER once PERSON is merged into PER)."""
        return [[self.canonical(tag) for tag in row] for row in rows]

    def indices(self, gold: Sequence[str], names: Sequence[str]) -> np.ndarray:
        """Each gold label's position in names, either side read through the aliases; -1 where none matches."""
        return label_indices([self.canonical(g) for g in gold], [self.canonical(n) for n in names])

    def as_json(self) -> dict[str, str]:
        return dict(sorted(self.to.items()))

    def __bool__(self) -> bool:
        return bool(self.to)


@dataclass(frozen=True)
class LabelSpace:
    names: tuple[str, ...]
    # teacher name -> union column of each of that teacher's classes, in its own order
    blocks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    aliases: Aliases = field(default_factory=Aliases)

    @classmethod
    def from_teachers(cls, teachers: Sequence[tuple[str, Sequence[str]]], start: Sequence[str] = (),
                      aliases: Aliases | None = None) -> "LabelSpace":
        """teachers: (name, labels) in registration order. start: labels that come first (a student's, kept as
        they are). aliases: names merged into one class; a teacher's label joins its class's column."""
        aliases = aliases or Aliases()
        names: list[str] = list(start)
        index = {n: i for i, n in enumerate(names)}
        for i, name in enumerate(start):  # a student trained before a merge may hold an alias as its own name
            index.setdefault(aliases.canonical(name), i)
        blocks = {}
        for teacher, labels in teachers:
            cols = []
            for label in labels:
                label = aliases.canonical(label)
                if label not in index:
                    index[label] = len(names)
                    names.append(label)
                cols.append(index[label])
            blocks[teacher] = tuple(cols)
        return cls(tuple(names), blocks, aliases)

    def __len__(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        return self.names.index(self.aliases.canonical(name))

    def indices(self, gold: Sequence[str]) -> np.ndarray:
        """Each gold label's column (any alias of a class finds it); -1 for labels outside the space."""
        return self.aliases.indices(gold, self.names)

    def knows(self, label: str) -> bool:
        """Whether the label, or a class it is another name of, is in the space."""
        return self.aliases.canonical(label) in self.names

    def owners(self, label: str) -> list[str]:
        col = self.index(label)
        return [t for t, cols in self.blocks.items() if col in cols]

    def shared_labels(self) -> list[str]:
        counts = np.zeros(len(self.names), dtype=int)
        for cols in self.blocks.values():
            counts[list(cols)] += 1
        return [n for n, c in zip(self.names, counts) if c > 1]

    def mask(self, teacher: str) -> np.ndarray:
        """Boolean (|Y|,) mask of the columns a teacher covers."""
        m = np.zeros(len(self.names), dtype=bool)
        m[list(self.blocks[teacher])] = True
        return m

    def pad(self, teacher: str, probs: np.ndarray) -> np.ndarray:
        """Place a teacher's (n, k) distribution in its block of the union; zeros elsewhere.

        Two of a teacher's classes that map to one union label add up there.
        """
        probs = np.asarray(probs)
        out = np.zeros((probs.shape[0], len(self.names)), dtype=probs.dtype)
        np.add.at(out, (slice(None), np.asarray(self.blocks[teacher])), probs)
        return out
