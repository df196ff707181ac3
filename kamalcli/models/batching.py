"""Tokenise once, pad per batch: what every model-running loop here feeds on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from kamalcli.runtime import cut_at_model_limit


@dataclass(frozen=True)
class Encoded:
    ids: list[np.ndarray]          # token ids per text, truncated, unpadded
    pad_id: int
    token_type: bool               # whether the model takes token_type_ids

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.ids), dtype=np.int64, count=len(self.ids))

    def batch(self, index: Sequence[int], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        rows = [self.ids[i] for i in index]
        width = max(len(r) for r in rows)
        input_ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for j, r in enumerate(rows):
            input_ids[j, : len(r)] = r
            mask[j, : len(r)] = 1
        out = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask)}
        if self.token_type:
            out["token_type_ids"] = torch.zeros_like(out["input_ids"])
        return {k: v.to(device) for k, v in out.items()}


def token_limit(config, tokenizer=None) -> int:
    """The most tokens a model takes: its position embeddings (or less, if its tokenizer says so)."""
    positions = int(getattr(config, "max_position_embeddings", 512) or 512)
    if getattr(config, "model_type", "") in {"roberta", "xlm-roberta", "camembert"}:
        positions -= 2  # positions start after the padding index
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < positions:
        positions = declared
    return positions


def clamp_length(max_length: int, config, tokenizer=None) -> int:
    """max_length, or the model's limit if that is lower (said once per command: longer inputs crash a model)."""
    limit = token_limit(config, tokenizer)
    return max_length if max_length <= limit else cut_at_model_limit(limit, max_length)


def encode(tokenizer, texts: Sequence[str], max_length: int, chunk: int = 4096, *, config=None) -> Encoded:
    """Token ids per text, cut at max_length (and, given the model's config, at the model's limit)."""
    if config is not None:
        max_length = clamp_length(max_length, config, tokenizer)
    ids: list[np.ndarray] = []
    for start in range(0, len(texts), chunk):
        enc = tokenizer(
            list(texts[start : start + chunk]),
            truncation=True,
            max_length=max_length,
            padding=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        ids.extend(np.asarray(x, dtype=np.int64) for x in enc["input_ids"])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    token_type = "token_type_ids" in getattr(tokenizer, "model_input_names", [])
    return Encoded(ids, pad_id, token_type)


def inference_batches(lengths: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    """Batches of similar length (less padding); longest first so memory peaks early."""
    order = np.argsort(-lengths, kind="stable")
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def training_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled order of one epoch: a pure function of (seed, epoch), so resuming replays it."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator).numpy()
