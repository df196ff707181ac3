"""kamal predict: a student's label probabilities for texts (or entities for a token student), with
PyTorch or its ONNX export."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from kamalcli import runtime
from kamalcli.errors import KamalError
from kamalcli.files import write_json_atomic
from kamalcli.probs import softmax

STDIN = "-"
EMPTY = "empty text: not classified"
NOTES = "kamal-notes.json"  # in the student's folder: the notes predict has said for it (kept out of exports)


def gather_texts(texts: tuple[str, ...], file: str | None) -> list[str]:
    """The TEXT arguments, then the lines of `file` ("-": stdin); with neither, the lines piped on stdin."""
    if not texts and file is None and stdin_is_piped():
        gathered = _lines(_stdin_bytes(), "stdin")
    else:
        gathered = list(texts) + (read_texts(file) if file else [])
    if not any(t.strip() for t in gathered):
        raise KamalError("nothing to classify: give TEXT arguments, --file FILE, or pipe texts on stdin")
    return gathered


def stdin_is_piped() -> bool:
    return sys.stdin is not None and not sys.stdin.isatty()


def read_texts(path: str) -> list[str]:
    """Every line of a file ("-": stdin), stripped, blank ones as "" so that results line up with the lines."""
    name = "stdin" if path == STDIN else path
    try:
        data = _stdin_bytes() if path == STDIN else Path(path).read_bytes()
    except FileNotFoundError:
        raise KamalError(f"{path}: no such file") from None
    texts = _lines(data, name)
    if not any(texts):
        raise KamalError(f"{name} holds no text")
    return texts


def _stdin_bytes() -> bytes:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise KamalError("there is no stdin to read texts from")
    return stream.read()


def _lines(data: bytes, name: str) -> list[str]:
    """utf-8-sig: a byte-order mark (Windows editors write one) is no part of the first text. Lines end at
    \n, \r\n or \r only, as `wc -l` and editors count them."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise KamalError(f"{name} is not valid UTF-8 text") from None
    return [line.strip() for line in io.StringIO(text, newline=None)]


def predict_rows(student, texts: list[str], *, export=None, device: str = "auto", top: int = 1) -> list[dict]:
    """One row per text, in order: a text classifier's label, probability and `top` most likely labels, or a
    token student's entities. An empty text is not classified: its row says so (label None, a note)."""
    with notes_once_per_student(Path(student.path)):
        if getattr(student, "task", "sequence") == "token":
            return _aligned(texts, lambda given: predict_entities(student, given, export=export, device=device),
                            {"entities": []})
        from kamalcli.heads import heads_of_student, is_plain

        heads = heads_of_student(student)
        if not is_plain(heads):
            return _aligned(texts, lambda given: _task_rows(student, heads, given, export, device, top), {"tasks": {}})
        return _aligned(texts, lambda given: _label_rows(student, given, export, device, top),
                        {"label": None, "probability": None, "top": []})


def _task_rows(student, heads, texts: list[str], export, device: str, top: int) -> list[dict]:
    """A several-task student's answer per task: a single-label task's label, probability and top labels; a
    multi-label task's labels that are on (probability at least THRESHOLD) and every label's probability."""
    from kamalcli.heads import THRESHOLD

    scopes = task_scopes(student, export)
    reads_features = any(s.needs_features for s in scopes.values())
    found = text_outputs(student, texts, export=export, device=device, features=reads_features)
    if reads_features and found.features is None:
        scopes = {}  # an ONNX export without `features`: text_outputs said so
    answers = [(head, head.probabilities(found.logits)) for head in heads]
    scores = {head.name: scopes[head.name].scores(found.logits[:, head.columns], found.features) for head in heads
              if head.name in scopes}
    calibrations = task_calibrations(student, export)
    rows = []
    for i, text in enumerate(texts):
        tasks = {}
        for head, probs in answers:
            p = probs[i]
            if head.multi_label:
                tasks[head.name] = {"labels": [n for n, q in zip(head.labels, p) if q >= THRESHOLD],
                                    "probabilities": {n: float(q) for n, q in zip(head.labels, p)}}
            else:
                order = p.argsort()[::-1][:min(top, len(p))]
                tasks[head.name] = {"label": head.labels[order[0]], "probability": float(p[order[0]]),
                                    "top": [{"label": head.labels[j], "probability": float(p[j])} for j in order]}
            if head.name in scores:
                score = float(scores[head.name][i])
                tasks[head.name].update(in_scope=score >= scopes[head.name].threshold, scope_score=score)
            if head.name in calibrations:
                tasks[head.name]["set"] = calibrations[head.name].sets(p[None], list(head.labels))[0]
        rows.append({"text": text, "tasks": tasks})
    return rows


def _label_rows(student, texts: list[str], export, device: str, top: int) -> list[dict]:
    """Label, probability and top labels; with a scope (kamal scope), in_scope and scope_score; once calibrated
    (kamal calibrate), the prediction set."""
    found = text_outputs(student, texts, export=export, device=device)
    probs = softmax(found.logits)
    scores = found.scope.scores(found.logits, found.features) if found.scope is not None else None
    inside = found.scope.in_scope(scores) if scores is not None else None
    sets = found.calibration.sets(probs, found.labels) if found.calibration is not None else None
    top = min(top, len(found.labels))
    rows = []
    for i, (text, p) in enumerate(zip(texts, probs)):
        order = p.argsort()[::-1][:top]
        row = {"text": text, "label": found.labels[order[0]], "probability": float(p[order[0]]),
               "top": [{"label": found.labels[j], "probability": float(p[j])} for j in order]}
        if scores is not None:
            row.update(in_scope=bool(inside[i]), scope_score=float(scores[i]))
        if sets is not None:
            row["set"] = sets[i]
        rows.append(row)
    return rows


def task_calibrations(student, export=None) -> dict:
    """A several-task student's calibrations by task: the student's own, else (its folder gone) its export's."""
    from kamalcli.trust.conformal import load_task_calibrations

    return load_task_calibrations(_trust_folder(student, export))


def task_scopes(student, export=None) -> dict:
    """A several-task student's scopes by task: the student's own, else (its folder gone) its export's."""
    from kamalcli.trust.scope import load_task_scopes

    return load_task_scopes(_trust_folder(student, export))


def _trust_folder(student, export) -> Path:
    folder = Path(student.path)
    if not (folder / "config.json").is_file() and export is not None:
        folder = Path(export.path)
    return folder


@dataclass(frozen=True)
class TextOutputs:
    labels: list[str]
    logits: np.ndarray
    features: np.ndarray | None  # only where the scope reads them
    scope: object | None          # kamalcli/trust/scope.Scope
    calibration: object | None    # kamalcli/trust/conformal.Calibration


def text_outputs(student, texts: list[str], *, export=None, device: str = "auto", batch_size: int = 32,
                 features: bool = False) -> TextOutputs:
    """A text student's logits on texts, with PyTorch or its ONNX export, and what it says about itself: its
    scope (with the features it reads) and calibration, from the student's folder or the export's. features:
    the features too (a several-task student's scopes read them)."""
    if getattr(student, "task", "sequence") == "token":
        raise KamalError(f"{student.name} tags tokens: its predictions are entities (predict_entities)")
    if export is not None:
        from kamalcli.export.runtime import OnnxClassifier

        classifier = OnnxClassifier(Path(export.path), device=device)
        scope, calibration = current_trust(student, classifier)
        wanted = features or (scope is not None and scope.needs_features)
        if wanted and not classifier.has_features:
            runtime.say_once(f"the ONNX export of {student.name} predates its scope score (no `features` output): "
                             f"run `kamal export {student.name} --onnx --force` for in_scope and scope_score.")
            scope, wanted = None, False
        logits, found = classifier.predict_outputs(texts, batch_size=batch_size, max_length=student.max_length,
                                                   features=wanted)
        return TextOutputs(list(classifier.labels), logits, found, scope, calibration)
    from kamalcli.models.inference import classifier_logits, classifier_logits_and_features
    from kamalcli.runtime import resolve_device
    from kamalcli.trust.conformal import load_calibration
    from kamalcli.trust.scope import load_scope

    folder, device = student.folder, resolve_device(device)
    scope = load_scope(folder)
    if features or (scope is not None and scope.needs_features):
        logits, found = classifier_logits_and_features(folder, texts, student.max_length, device=device,
                                                       batch_size=batch_size)
    else:
        logits, found = classifier_logits(folder, texts, student.max_length, device=device,
                                          batch_size=batch_size), None
    return TextOutputs(list(student.labels), logits, found, scope, load_calibration(folder))


def current_trust(student, classifier) -> tuple[object | None, object | None]:
    """The scope and calibration the ONNX export answers with: the student's own, which `kamal scope` and
    `kamal calibrate` may have refitted since the export copied them, so that predict --onnx agrees with
    predict; the export's copies only when the student's folder is gone. Said once when those copies are older."""
    from kamalcli.trust.conformal import FILE as CALIBRATION_FILE, load_calibration
    from kamalcli.trust.scope import FILE as SCOPE_FILE, load_scope

    folder = Path(student.path)
    if not (folder / "config.json").is_file():
        return classifier.scope, classifier.calibration
    stale = [what for what, name in (("scope", SCOPE_FILE), ("calibration", CALIBRATION_FILE))
             if _bytes(folder / name) != _bytes(classifier.folder / name)]
    if stale:
        runtime.say_once(f"Note: {student.name}'s {' and '.join(stale)} changed since its ONNX export; predict uses "
                         f"the student's.\n  To update the export: kamal export {student.name} --onnx --force")
    return load_scope(folder), load_calibration(folder)


def _bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _aligned(texts: list[str], run: Callable[[list[str]], list[dict]], empty: dict) -> list[dict]:
    """run() over the texts that are not blank; each blank one gets the `empty` row with a note, in its place."""
    done = iter(run([t for t in texts if t.strip()]))
    return [next(done) if t.strip() else {"text": t, **empty, "note": EMPTY} for t in texts]


@contextlib.contextmanager
def notes_once_per_student(folder: Path) -> Iterator[None]:
    """Notes predict has said for this student before (the model-limit note: the student was trained at more
    tokens than its model takes) stay unsaid: once per student, not on every call. Recorded in the student's
    folder, not in the database: predict is a reader and takes no write lock."""
    path = folder / NOTES
    before = set(_read_notes(path))
    runtime.count_as_said(before)
    yield
    said = runtime.said() - before
    if said:
        with contextlib.suppress(OSError):  # a workspace this user may only read: the note comes again, no harm
            write_json_atomic(path, sorted(before | said))


def _read_notes(path: Path) -> list[str]:
    try:
        notes = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [n for n in notes if isinstance(n, str)] if isinstance(notes, list) else []


def predict_texts(student, texts: list[str], *, export=None, device: str = "auto",
                  batch_size: int = 32) -> tuple[list[str], np.ndarray]:
    found = text_outputs(student, texts, export=export, device=device, batch_size=batch_size)
    return found.labels, softmax(found.logits)


def predict_entities(student, texts: list[str], *, export=None, device: str = "auto", batch_size: int = 32) -> list[dict]:
    """A token student's entities in raw texts: words as kamalcli/models/words.split_words cuts them, each
    read at its first sub-token, tags decoded into typed spans (kamalcli/data/entities.py)."""
    from kamalcli.data.entities import entities_in_text
    from kamalcli.models.words import split_words

    words = [split_words(t) for t in texts]
    lists = [[w for w, _, _ in ws] for ws in words]
    if export is not None:
        from kamalcli.export.runtime import OnnxClassifier

        classifier = OnnxClassifier(Path(export.path), device=device)
        labels, probs = list(classifier.labels), classifier.predict_word_proba(lists, batch_size=batch_size,
                                                                             max_length=student.max_length)
    else:
        from kamalcli.models.inference import word_proba
        from kamalcli.runtime import resolve_device

        labels, probs = list(student.labels), word_proba(student.folder, lists, student.labels, student.max_length,
                                                         device=resolve_device(device), batch_size=batch_size)
    return [entities_in_text(text, ws, probs[i], labels) for i, (text, ws) in enumerate(zip(texts, words))]
