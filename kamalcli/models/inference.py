"""Running a classifier folder over texts with PyTorch: logits and probabilities, per text or per word.

What kamal predict, kamal eval and the exports' checks compare against (eval mode, length-bucketed batches,
tokenised as in training).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from kamalcli.models.batching import Encoded, encode, inference_batches
from kamalcli.models.loading import load_classifier, load_tokenizer
from kamalcli.models.words import encode_words, word_logits, word_probabilities


def predict_logits(model: torch.nn.Module, encoded: Encoded, *, batch_size: int = 64, device: str = "cpu",
                   rows: np.ndarray | None = None) -> np.ndarray:
    """(rows, |Y|) for a sequence classifier; (rows, longest row, |Y|) per sub-token for a token classifier
    (zeros beyond each row's length)."""
    rows = np.arange(len(encoded)) if rows is None else np.asarray(rows)
    lengths = encoded.lengths[rows]
    per_token = type(model).__name__.endswith("ForTokenClassification")
    shape = (len(rows), int(lengths.max(initial=1)), model.config.num_labels) if per_token else \
        (len(rows), model.config.num_labels)
    out = np.zeros(shape, dtype=np.float32)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for local in inference_batches(lengths, batch_size):
            logits = model(**encoded.batch(rows[local], device)).logits.float().cpu().numpy()
            if per_token:
                out[local, : logits.shape[1]] = logits
            else:
                out[local] = logits
    model.train(was_training)
    return out


def logits_and_features(model: torch.nn.Module, encoded: Encoded, *, batch_size: int = 64,
                        device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """A sequence classifier's (rows, |Y|) logits and (rows, hidden) last-layer first-token vectors, in one pass
    (the features a student's rmd scope reads; the ONNX export's `features` output is the same vector)."""
    rows = np.arange(len(encoded))
    logits = np.zeros((len(rows), model.config.num_labels), dtype=np.float32)
    features = np.zeros((len(rows), model.config.hidden_size), dtype=np.float32)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for local in inference_batches(encoded.lengths, batch_size):
            out = model(**encoded.batch(rows[local], device), output_hidden_states=True)
            logits[local] = out.logits.float().cpu().numpy()
            features[local] = out.hidden_states[-1][:, 0].float().cpu().numpy()
    model.train(was_training)
    return logits, features


def first_token_states(model: torch.nn.Module, encoded: Encoded, *, batch_size: int = 64, device: str = "cpu",
                       say_progress: bool = True) -> torch.Tensor:
    """(rows, hidden) last-layer first-token states of a sequence classifier's encoder (the head's input,
    kamalcli/models/heads.py), in eval mode under a progress bar: `--fit head` caches them once."""
    from kamalcli.progress import progress_bar

    states = torch.zeros((len(encoded), model.config.hidden_size), dtype=torch.float32)
    was_training = model.training
    model.eval()
    with torch.inference_mode(), progress_bar(len(encoded), "encoder states", show=say_progress) as bar:
        for local in inference_batches(encoded.lengths, batch_size):
            hidden = model.base_model(**encoded.batch(local, device)).last_hidden_state
            states[torch.as_tensor(local)] = hidden[:, 0].float().cpu()
            bar.advance(len(local))
    model.train(was_training)
    return states


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, L, d) states -> (B, d): the mean over the real tokens (mask 1), padding left out. The probe pools
    teachers' features with it and feature-level methods the student's, so the two compare."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


def classifier_logits(folder: Path, texts: list[str], max_length: int, *, device: str = "cpu",
                      batch_size: int = 32) -> np.ndarray:
    """A sequence classifier's logits for texts."""
    model = load_classifier(folder).to(device)
    encoded = encode(load_tokenizer(folder), texts, max_length, config=model.config)
    return predict_logits(model, encoded, batch_size=batch_size, device=device)


def classifier_logits_and_features(folder: Path, texts: list[str], max_length: int, *, device: str = "cpu",
                                    batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    model = load_classifier(folder).to(device)
    encoded = encode(load_tokenizer(folder), texts, max_length, config=model.config)
    return logits_and_features(model, encoded, batch_size=batch_size, device=device)


def classifier_probs(folder: Path, texts: list[str], max_length: int, *, device: str = "cpu",
                     batch_size: int = 32) -> np.ndarray:
    logits = classifier_logits(folder, texts, max_length, device=device, batch_size=batch_size)
    return torch.softmax(torch.from_numpy(logits), dim=-1).numpy()


def word_proba(folder: Path, words: list[list[str]], labels, max_length: int, *, device: str = "cpu",
               batch_size: int = 32) -> np.ndarray:
    """A token classifier's tag probabilities per word, read at each word's first sub-token."""
    model = load_classifier(folder).to(device)
    aligned = encode_words(load_tokenizer(folder), [ws or ["."] for ws in words], max_length, config=model.config)
    logits, _ = word_logits(model, aligned, batch_size=batch_size, device=device)
    return word_probabilities(logits, aligned.positions(logits.shape[1]) >= 0, labels)
