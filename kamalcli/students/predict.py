"""kamal predict: a student's label probabilities for texts (or entities for a token student), with
PyTorch or its ONNX export."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError


def read_texts(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            texts = [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        raise KamalError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise KamalError(f"{path} is not valid UTF-8 text") from None
    if not texts:
        raise KamalError(f"{path} holds no text")
    return texts


def predict_texts(student, texts: list[str], *, export=None, device: str = "auto",
                  batch_size: int = 32) -> tuple[list[str], np.ndarray]:
    if getattr(student, "task", "sequence") == "token":
        raise KamalError(f"{student.name} tags tokens: its predictions are entities (predict_entities)")
    if export is not None:
        from kamalcli.export.runtime import OnnxClassifier

        classifier = OnnxClassifier(Path(export.path), device=device)
        return list(classifier.labels), classifier.predict_proba(texts, batch_size=batch_size, max_length=student.max_length)
    from kamalcli.models.inference import classifier_probs
    from kamalcli.runtime import resolve_device

    return list(student.labels), classifier_probs(student.folder, texts, student.max_length,
                                                  device=resolve_device(device), batch_size=batch_size)


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
