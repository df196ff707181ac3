"""Teachers' encoders merged in weight space, each teacher's own head on the merged encoder.

The base (theta_0 of kamalcli/merge/task_vectors.py) is the pretrained model every teacher was fine-tuned from:
named with --base, else the one every teacher's kamal.json records (teachers made by `kamal train-teacher`).
Encoder parameters the base lacks, and the heads, stay each teacher's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kamalcli.errors import KamalError
from kamalcli.merge.task_vectors import MERGES, State, task_vectors

LOCAL = " (a local folder)"  # how kamal.json records a base that was a local folder (teachers/train.py)
FAR = 0.5  # a task vector this large against the base's own norm: probably not fine-tuned from it


@dataclass(frozen=True)
class Merge:
    encoder: State                  # the merged encoder parameters, by the base's names
    info: dict                      # method, base, parameters merged, each teacher's distance from the base
    warnings: tuple[str, ...] = ()


def merge_method(spec: str) -> str:
    """merge or merge:METHOD (as --baseline and --init spell it) -> METHOD; anything else refused in one line."""
    kind, _, method = spec.partition(":")
    method = method or "task-arithmetic"
    if kind != "merge" or method not in MERGES:
        raise KamalError(f"unknown merge {spec!r}: merge or merge:METHOD ({', '.join(MERGES)})")
    return method


def recorded_base(teachers) -> str | None:
    """The base every teacher's kamal.json names (train-teacher records it), when they agree."""
    from kamalcli.models.folder import kamal_json

    bases = {kamal_json(t.path).get("base") for t in teachers}
    return bases.pop() if len(bases) == 1 and None not in bases else None


def merge_teachers(teachers, base_source: str | None, method: str, models=None) -> Merge:
    """The teachers' encoders merged from their base (base_source: --base, else what their kamal.json records);
    models: the teachers' loaded classifiers, when the caller has them."""
    from kamalcli.models.bases import resolve_model_source
    from kamalcli.models.loading import load_classifier, load_encoder

    if method not in MERGES:
        raise KamalError(f"unknown merge {method!r}: {', '.join(MERGES)}")
    if len(teachers) < 2:
        raise KamalError("a merge needs two or more teachers")
    if base_source is None:
        base_source = recorded_base(teachers)
        if base_source is None:
            raise KamalError("a merge needs the pretrained base the teachers were fine-tuned from: --base NAME or "
                             "FOLDER (kamal models lists the named ones)")
        if base_source.endswith(LOCAL):
            raise KamalError(f"the teachers were fine-tuned from a local folder, {base_source.removesuffix(LOCAL)}: "
                             "name it with --base FOLDER")
    models = models or [load_classifier(t.path, owner=f"teacher {t.name}") for t in teachers]
    _check_one_architecture(teachers, models)
    base = load_encoder(resolve_model_source(base_source)).state_dict()
    encoders = [m.base_model.state_dict() for m in models]
    names = _shared_parameters(base, encoders, base_source)
    base = {k: base[k] for k in names}
    taus = task_vectors(base, [{k: e[k] for k in names} for e in encoders])
    merged = MERGES[method](base, taus)
    base_norm = torch.sqrt(sum((v.float() ** 2).sum() for v in base.values())).item()
    distance = [torch.sqrt(sum((v ** 2).sum() for v in tau.values())).item() / base_norm for tau in taus]
    warnings = tuple(f"teacher {t.name} lies far from {base_source} (task vector {100 * d:.0f}% of the base's "
                     "norm): was it fine-tuned from it?" for t, d in zip(teachers, distance) if d > FAR)
    info = {"method": method, "base": base_source, "parameters": int(sum(v.numel() for v in base.values())),
            "kept_per_teacher": sorted(set(encoders[0]) - set(names)),
            "distance_from_base": {t.name: round(d, 4) for t, d in zip(teachers, distance)}}
    return Merge(merged, info, warnings)


def load_merged(model, merge: Merge) -> None:
    """Put the merged encoder into a classifier built on the same base (its head and other parameters stay)."""
    own = model.base_model.state_dict()
    model.base_model.load_state_dict({**own, **{k: v.to(own[k].dtype) for k, v in merge.encoder.items()}})


def merged_logits(teachers, base_source: str | None, method: str, texts: list[str], max_length: int, *,
                  device: str = "cpu", batch_size: int = 32) -> tuple[tuple[np.ndarray, ...], Merge]:
    """Per teacher, (rows, its labels): its head on the merged encoder; and the merge."""
    from kamalcli.models.batching import encode
    from kamalcli.models.inference import predict_logits
    from kamalcli.models.loading import load_classifier, load_tokenizer

    models = [load_classifier(t.path, owner=f"teacher {t.name}") for t in teachers]
    merge = merge_teachers(teachers, base_source, method, models)
    logits = []
    for teacher, model in zip(teachers, models):
        load_merged(model, merge)
        model.to(device)
        encoded = encode(load_tokenizer(teacher.path, owner=f"teacher {teacher.name}"), texts, max_length,
                         config=model.config)
        logits.append(predict_logits(model, encoded, batch_size=batch_size, device=device))
    return tuple(logits), merge


def _check_one_architecture(teachers, models) -> None:
    def shape(model) -> tuple:
        c = model.config
        return (type(model.base_model).__name__, getattr(c, "hidden_size", None),
                getattr(c, "num_hidden_layers", None), getattr(c, "vocab_size", None))

    first = shape(models[0])
    for teacher, model in zip(teachers[1:], models[1:]):
        if shape(model) != first:
            raise KamalError(f"a merge needs teachers of one architecture fine-tuned from one base: "
                             f"{teachers[0].name} is {_words(first)}, {teacher.name} is {_words(shape(model))}")


def _words(shape: tuple) -> str:
    kind, hidden, layers, vocab = shape
    return f"{kind} ({layers} layers of {hidden}, vocabulary {vocab})"


def _shared_parameters(base: State, encoders: list[State], base_source: str) -> list[str]:
    """The floating-point encoder parameters the base holds with the same shapes; refused when the base is not
    the teachers' own."""
    names = [k for k, v in encoders[0].items() if v.is_floating_point() and k in base]
    for k in names:
        if base[k].shape != encoders[0][k].shape:
            raise KamalError(f"{base_source} is not the base these teachers were fine-tuned from: {k} is "
                             f"{tuple(base[k].shape)} there and {tuple(encoders[0][k].shape)} in the teachers")
    total = sum(v.numel() for v in encoders[0].values() if v.is_floating_point())
    if sum(encoders[0][k].numel() for k in names) < 0.9 * total:
        raise KamalError(f"{base_source} is not the base these teachers were fine-tuned from: it holds under 90% "
                         "of their encoder's parameters")
    return names
