"""R(x): a frozen, not fine-tuned encoder's [CLS] vector per row, computed once and cached.

rl-kd's policy reads it as the description of a row. Like a teacher's probe it
depends only on (encoder, rows, max length), so it is stored in the workspace's
probe folder under that key and a repeat costs nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "config.json")


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
    from kamalcli.assets import resolve_model_source
    from kamalcli.fsutil import publish_dir

    folder = resolve_model_source(source)
    key = hashlib.sha256(f"cls|{_encoder_key(folder)}|{data_hash}|{len(texts)}|{max_length}".encode()).hexdigest()
    final = workspace.artifact_dir("probes") / f"cls-{key[:32]}"
    path = final / "cls.npy"
    if path.is_file():
        return np.load(path, mmap_mode="r")
    vectors = _compute(folder, texts, max_length, device)
    staging = workspace.tmp_dir() / "cls"
    staging.mkdir(parents=True)
    np.save(staging / "cls.npy", vectors)
    publish_dir(staging, final)
    say(f"Cached R(x), the [CLS] vectors of {source} (frozen) on {len(texts)} rows; reused from now on.")
    return np.load(path, mmap_mode="r")


def _compute(folder: Path, texts: list[str], max_length: int, device: str) -> np.ndarray:
    import torch
    from transformers import AutoConfig, AutoModel

    from kamalcli.batching import encode, inference_batches
    from kamalcli.modeling import load_tokenizer

    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    encoded = encode(load_tokenizer(folder), texts, max_length, config=config)
    model = AutoModel.from_pretrained(str(folder), trust_remote_code=False).to(device).eval()
    out = np.zeros((len(texts), config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for rows in inference_batches(encoded.lengths, 64):
            states = model(**encoded.batch(rows, device)).last_hidden_state
            out[rows] = states[:, 0].float().cpu().numpy()
    return out
