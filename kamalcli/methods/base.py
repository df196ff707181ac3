"""What a method is: typed options, and a function from the teachers' outputs to an objective.

The training loop knows nothing about methods. An output-level method turns
the teachers' cached outputs on the transfer rows (TeacherOutputs) into an
Objective: per-row target arrays, optional per-row weights, and a per-example
loss on the student's logits. A feature-level method gets a FeatureContext
too (the student's shape, cached teacher features, teachers to run inside the
loop, gold labels when given) and adds an Auxiliary: its own parameters and
losses on hidden states. The Objective contract lives in train/objective.py.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Callable

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.probe.outputs import TeacherOutputs
from kamalcli.train.objective import Objective


@dataclass
class FeatureContext:
    """What a feature-level method gets besides the cached outputs (built by amalgamate)."""

    outputs: TeacherOutputs
    sources: object                  # features.FeatureSources: cached(...), in_loop(...), misaligned(), shapes()
    student_depth: int
    student_hidden: int
    gold: np.ndarray | None = None   # union label ids of the transfer rows; None: the data has no labels
    seed: int = 0
    batch_size: int = 32
    say: Callable[[str], None] = print
    phases: object = None            # train.phases.Phases: earlier training phases of the same run
    student: object = None           # the student model (methods that pre-train it or measure it for a reward)
    base: str | None = None          # the student's base: a pre-trained, not fine-tuned encoder
    train_rows: np.ndarray | None = None  # the rows the student trains on (None: all)
    held_out: np.ndarray | None = None    # held-out transfer rows (label-free model selection), maybe empty


def gold_over_one_label_set(context: FeatureContext, method: str) -> np.ndarray:
    """The transfer rows' gold label ids, for a method's paper setting: labelled rows, teachers over one label set."""
    outputs = context.outputs
    if context.gold is None:
        raise KamalError(f"{method} labels=true needs transfer data with gold labels (add it with --label-column)")
    if any(list(outputs.space.blocks[t]) != list(range(len(outputs.space))) for t in outputs.teachers):
        raise KamalError(f"{method} labels=true is the paper's setting: teachers over one label set. For teachers "
                         "with different label sets use the label-free variant (labels=false)")
    if (context.gold < 0).any():
        raise KamalError("some transfer rows have gold labels no teacher knows")
    return context.gold.astype(np.int64)


class Options:
    """Base for method options: typed dataclass fields, validated in check()."""

    def check(self) -> None:  # override to validate ranges
        pass


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    options: type
    build: Callable[[TeacherOutputs, object], Objective] | None  # None: no training (a baseline)
    paper: str = ""
    confidences: bool = False    # selects or weights teachers by their probe confidences (MC dropout, RMD)
    level: str = "output"        # "feature": build(FeatureContext, options)
    features: str = ""           # where teacher features come from (shown by `kamal methods`)
    labels: str = "no"           # "no", or "optional": gold labels of the transfer rows when asked for
    gold_target: bool = False    # its loss matches one distribution over the union, arrays["target"], which
                                 # --gold rows may replace (kamalcli/methods/gold_target.py)
    one_process: str = ""        # why the method cannot run on several processes (torchrun); "" if it can
    token_build: Callable | None = None  # token-level (named entities) build(TokenTeacherOutputs, options); None: none

    @property
    def trains(self) -> bool:
        return self.build is not None

    def defaults(self) -> dict:
        return dataclasses.asdict(self.options())

    def parse(self, pairs: typing.Iterable[str]) -> object:
        """['k=v', ...] -> a validated options instance (one clear line on any mistake)."""
        fields = {f.name: f for f in dataclasses.fields(self.options)}
        hints = typing.get_type_hints(self.options)
        values = {}
        for pair in pairs:
            key, sep, raw = pair.partition("=")
            key = key.strip().replace("-", "_")
            if not sep:
                raise KamalError(f"--option {pair!r}: write it as key=value")
            if key not in fields:
                known = ", ".join(fields) or "none"
                raise KamalError(f"{self.name} has no option {key!r} (options: {known})")
            values[key] = _coerce(raw.strip(), hints[key], f"{self.name} option {key}")
        options = self.options(**values)
        options.check()
        return options


def _coerce(raw: str, hint, what: str):
    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        if raw.lower() in ("none", "null", ""):
            return None
        hint = next(a for a in args if a is not type(None))
    literal = next((a for a in args if typing.get_origin(a) is typing.Literal), None)
    if literal is not None and len(args) == 2 and not optional:  # a number or a word: tau=0.3 or tau=auto
        if raw in typing.get_args(literal):
            return raw
        number = next(a for a in args if a is not literal)
        if number is bool:  # a switch or a word: reweight=false or reweight=auto
            *others, last = ("true", "false", *typing.get_args(literal))
            return _boolean(raw, f"{what} must be {', '.join(others)} or {last}")
        try:
            return number(raw)
        except ValueError:
            words = " or ".join(map(str, typing.get_args(literal)))
            raise KamalError(f"{what} must be a number or {words} (got {raw!r})") from None
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        if raw not in choices:
            raise KamalError(f"{what} must be one of {', '.join(map(str, choices))} (got {raw!r})")
        return raw
    if hint is bool:
        return _boolean(raw, f"{what} must be true or false")
    if hint in (int, float):
        try:
            return hint(raw)
        except ValueError:
            raise KamalError(f"{what} must be {'an integer' if hint is int else 'a number'} (got {raw!r})") from None
    if hint is str:
        return raw
    if isinstance(hint, types.UnionType):  # pragma: no cover - not used by kamal's options
        raise KamalError(f"{what}: unsupported option type")
    return raw


def _boolean(raw: str, mistake: str) -> bool:
    lowered = raw.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise KamalError(f"{mistake} (got {raw!r})")


def require(condition: bool, message: str) -> None:
    if not condition:
        raise KamalError(message)
