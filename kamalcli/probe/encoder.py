"""A frozen, not fine-tuned encoder's vector per row, computed once and cached.

- cls_vectors: the last layer's [CLS] vector, R(x), which rl-kd's policy reads as the description of a row;
- sentence_vectors: the mean of the last layer over the row's tokens, unit length: how sentence encoders
  such as all-MiniLM-L6-v2 are trained to be read (the prototype selection score compares them by cosine).

Like a teacher's probe they depend only on (encoder, pooling, rows, max length), so they are stored in the
workspace's probe folder under that key and a repeat costs nothing. One pass of the encoder makes both poolings
(a student on the frozen default base reads the first, its neighbours the second).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "config.json")
POOLINGS = ("cls", "mean")


def _encoder_key(folder: Path) -> str:
    """The encoder's identity: its folder and its weight files' sizes and times (a changed file, a new key)."""
    parts = [str(folder.resolve())]
    for name in WEIGHT_FILES:
        path = folder / name
        if path.is_file():
            stat = path.stat()
            parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return "|".join(parts)


def cls_vectors(workspace, source: str, texts: list[str], data_hash: str, max_length: int, device: str,
                say=print) -> np.ndarray:
    """(rows, hidden) float32: the last layer's first-token ([CLS]) vector of `source`, in eval mode."""
    return _cached(workspace, source, texts, data_hash, max_length, device, "cls",
                   f"Cached R(x), the [CLS] vectors of {source} (frozen) on {len(texts)} rows; reused from now on.",
                   say)


def head_states(workspace, source: str, texts: list[str], data_hash: str, max_length: int, device: str,
                say=print) -> np.ndarray:
    """cls_vectors as a `--fit head` student reads them: its frozen encoder's states, the head's input."""
    return _cached(workspace, source, texts, data_hash, max_length, device, "cls",
                   f"Cached the first-token states of {source} (frozen) on {len(texts)} rows; --fit head "
                   "students of these rows reuse them.", say)


def sentence_vectors(workspace, source: str, texts: list[str], data_hash: str, max_length: int, device: str,
                     say=print, encode: bool = True) -> np.ndarray | None:
    """(rows, hidden) float32, unit length: the mean of `source`'s last layer over each row's tokens.
    encode=False: only from the cache (None when they were never computed)."""
    return _cached(workspace, source, texts, data_hash, max_length, device, "mean",
                   f"Cached the sentence vectors of {source} (frozen) on {len(texts)} rows; reused from now on.",
                   say, encode)


def text_vectors(source: str, texts: list[str], max_length: int = 32, device: str = "cpu") -> np.ndarray:
    """(len(texts), hidden) float32, unit length, not cached: for a handful of short texts (label names)."""
    from kamalcli.models.bases import resolve_model_source

    return _compute(resolve_model_source(source), texts, max_length, device, ("mean",))["mean"]


def _cached(workspace, source, texts, data_hash, max_length, device, pooling: str, line: str, say,
            encode: bool = True) -> np.ndarray | None:
    from kamalcli.models.bases import resolve_model_source
    from kamalcli.files import publish_dir

    folder = resolve_model_source(source)
    path = _cache_path(workspace, folder, data_hash, len(texts), max_length, pooling)
    if path.is_file():
        return np.load(path, mmap_mode="r")
    if not encode:
        return None
    for other, vectors in _compute(folder, texts, max_length, device, POOLINGS).items():
        final = _cache_path(workspace, folder, data_hash, len(texts), max_length, other)
        if final.is_file():
            continue
        staging = workspace.tmp_dir() / other
        staging.mkdir(parents=True)
        np.save(staging / final.name, vectors)
        publish_dir(staging, final.parent)
    say(line)
    return np.load(path, mmap_mode="r")


def _cache_path(workspace, folder: Path, data_hash: str, rows: int, max_length: int, pooling: str) -> Path:
    # [CLS] keys stay as they were before mean pooling existed, so caches made then are still found
    prefix = "cls" if pooling == "cls" else f"pool-{pooling}"
    key = hashlib.sha256(f"{prefix}|{_encoder_key(folder)}|{data_hash}|{rows}|{max_length}".encode()).hexdigest()
    return workspace.artifact_dir("probes") / f"{prefix}-{key[:32]}" / ("cls.npy" if pooling == "cls" else "vectors.npy")


def _compute(folder: Path, texts: list[str], max_length: int, device: str,
             poolings: tuple[str, ...]) -> dict[str, np.ndarray]:
    import torch
    from transformers import AutoConfig, AutoModel

    from kamalcli.models.batching import encode, inference_batches
    from kamalcli.models.inference import mean_pool
    from kamalcli.models.loading import load_tokenizer

    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    encoded = encode(load_tokenizer(folder), texts, max_length, config=config)
    model = AutoModel.from_pretrained(str(folder), trust_remote_code=False).to(device).eval()
    out = {pooling: np.zeros((len(texts), config.hidden_size), dtype=np.float32) for pooling in poolings}
    with torch.inference_mode():
        for rows in inference_batches(encoded.lengths, 64):
            batch = encoded.batch(rows, device)
            states = model(**batch).last_hidden_state.float()
            if "cls" in out:
                out["cls"][rows] = states[:, 0].cpu().numpy()
            if "mean" in out:
                mean = mean_pool(states, batch["attention_mask"])
                out["mean"][rows] = torch.nn.functional.normalize(mean, dim=-1).cpu().numpy()
    return out
