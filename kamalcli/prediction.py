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
    if export is not None:
        from kamalcli.export.runtime import OnnxClassifier

        classifier = OnnxClassifier(Path(export.path), device=device)
        return list(classifier.labels), classifier.predict_proba(texts, batch_size=batch_size, max_length=student_max_length(student))

    import torch

    logits = student_logits(student, texts, device=device, batch_size=batch_size)
    return list(student.labels), torch.softmax(torch.from_numpy(logits), dim=-1).numpy()
