"""kamal predict: a student's label probabilities for texts, with PyTorch or its ONNX export."""

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


def student_folder(student) -> Path:
    """The student's saved folder; a one-line error if it is gone from disk."""
    folder = Path(student.path)
    if not (folder / "config.json").is_file():
        raise KamalError(f"student {student.name}'s folder is missing: {folder}")
    return folder


def student_max_length(student) -> int:
    return student.train.get("config", {}).get("max_length", 128)


def student_logits(student, texts: list[str], *, device: str = "auto", batch_size: int = 32) -> np.ndarray:
    """The student's logits for texts, with PyTorch, tokenised as in its training."""
    from kamalcli.batching import encode
    from kamalcli.modeling import load_classifier, load_tokenizer
    from kamalcli.runtime import resolve_device
    from kamalcli.train.evaluate import predict_logits

    folder = student_folder(student)
    device = resolve_device(device)
    model = load_classifier(folder).to(device)
    encoded = encode(load_tokenizer(folder), texts, student_max_length(student), config=model.config)
    return predict_logits(model, encoded, batch_size=batch_size, device=device)


def predict_texts(student, texts: list[str], *, export=None, device: str = "auto",
                  batch_size: int = 32) -> tuple[list[str], np.ndarray]:
    if getattr(student, "task", "sequence") == "token":
        raise KamalError(f"{student.name} tags tokens: its predictions are entities (predict_entities)")
    if export is not None:
        from kamalcli.export.runtime import OnnxClassifier

        classifier = OnnxClassifier(Path(export.path), device=device)
        return list(classifier.labels), classifier.predict_proba(texts, batch_size=batch_size, max_length=student_max_length(student))

    import torch

    logits = student_logits(student, texts, device=device, batch_size=batch_size)
    return list(student.labels), torch.softmax(torch.from_numpy(logits), dim=-1).numpy()


def predict_entities(student, texts: list[str], *, export=None, device: str = "auto", batch_size: int = 32) -> list[dict]:
    """A token student's entities in raw texts: words as kamalcli/word_alignment.split_words cuts them, each
    read at its first sub-token, tags decoded into typed spans (kamalcli/entities.py)."""
    from kamalcli.entities import entities_in_text
    from kamalcli.word_alignment import split_words

    words = [split_words(t) for t in texts]
    lists = [[w for w, _, _ in ws] for ws in words]
    max_length = student_max_length(student)
    if export is not None:
        from kamalcli.export.runtime import OnnxClassifier

        classifier = OnnxClassifier(Path(export.path), device=device)
        labels, probs = list(classifier.labels), classifier.predict_word_proba(lists, batch_size=batch_size,
                                                                             max_length=max_length)
    else:
        labels, probs = list(student.labels), _torch_word_proba(student, lists, device, batch_size, max_length)
    return [entities_in_text(text, ws, probs[i], labels) for i, (text, ws) in enumerate(zip(texts, words))]


def _torch_word_proba(student, lists, device: str, batch_size: int, max_length: int) -> np.ndarray:
    from kamalcli.modeling import load_classifier, load_tokenizer
    from kamalcli.runtime import resolve_device
    from kamalcli.word_alignment import encode_words, word_logits

    folder = student_folder(student)
    device = resolve_device(device)
    model = load_classifier(folder).to(device)
    aligned = encode_words(load_tokenizer(folder), [ws or ["."] for ws in lists], max_length, config=model.config)
    logits, _ = word_logits(model, aligned, batch_size=batch_size, device=device)
    return word_probabilities(logits, aligned.positions(logits.shape[1]) >= 0, student.labels)


def word_probabilities(logits: np.ndarray, seen: np.ndarray, labels) -> np.ndarray:
    """softmax per word; a word the model never saw (cut by max_length) is certainly O."""
    z = logits - logits.max(axis=-1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    certain_o = np.zeros(len(labels), dtype=probs.dtype)
    certain_o[list(labels).index("O")] = 1.0
    return np.where(seen[..., None], probs, certain_o)
