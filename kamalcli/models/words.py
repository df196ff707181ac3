"""Words -> sub-tokens and back: every token-level model is read at each word's first sub-token.

A fast tokenizer's word_ids() says which word each sub-token came from, for
WordPiece (BERT) and SentencePiece (XLM-R) alike. A word's tag is predicted,
trained and measured at its first sub-token; later sub-tokens, special tokens
and padding never enter a loss or a metric. One exception: SentencePiece
splits a word it has no "▁word" piece for into a bare "▁" (the word boundary,
the same token for every such word) and the word's pieces; such a word is read
at its first piece after the bare "▁" (for Chinese characters with an XLM-R
tokenizer that is most characters: "▁", "中"). Teachers and students may use
different tokenizers: what they exchange is one distribution per word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.probs import softmax

if TYPE_CHECKING:  # torch stays out of `kamal predict --onnx`
    from kamalcli.models.batching import Encoded

BOUNDARY = "\u2581"  # SentencePiece's word-boundary piece
# CJK ideographs and symbols, full-width forms: one word per character, as in character-level training data
_WORD = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]|[^\s\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]+")


@dataclass(frozen=True)
class WordAligned:
    encoded: Encoded
    first: list[np.ndarray]   # per sentence: the position of each word's first sub-token, -1 if cut by max_length

    def positions(self, width: int | None = None) -> np.ndarray:
        """(n, width) positions, -1 where a sentence has no such word (or it was cut)."""
        width = width or max_words(self.first)
        out = np.full((len(self.first), width), -1, dtype=np.int64)
        for i, f in enumerate(self.first):
            out[i, : min(len(f), width)] = f[:width]
        return out

    def cut_words(self) -> int:
        """Words lost to max_length (they are predicted O and counted in the metrics)."""
        return int(sum((f < 0).sum() for f in self.first))


def _bare_boundary_id(tokenizer) -> int | None:
    """The id of SentencePiece's bare word-boundary piece "▁", or None (WordPiece has none)."""
    token_id = tokenizer.convert_tokens_to_ids(BOUNDARY)
    return None if token_id is None or token_id == tokenizer.unk_token_id else token_id


def first_positions(word_ids: Sequence[int | None], bare: Sequence[bool], num_words: int) -> np.ndarray:
    """Where each word is read: its first sub-token, or the next one if that is a bare boundary piece
    followed by more of the same word; -1 for a word that has no sub-token (cut by max_length)."""
    positions = np.full(num_words, -1, dtype=np.int64)
    previous = None
    for position, word in enumerate(word_ids):
        if word is not None and word != previous:
            skip = bare[position] and position + 1 < len(word_ids) and word_ids[position + 1] == word
            positions[word] = position + 1 if skip else position
        previous = word
    return positions


def split_words(text: str) -> list[tuple[str, int, int]]:
    """Raw text -> (word, start, end): each CJK character or full-width form alone (as in character-level
    training data such as People's Daily), other runs of non-space characters as whole words."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def max_words(first: Sequence[np.ndarray]) -> int:
    return max(1, max((len(f) for f in first), default=1))


def encode_words(tokenizer, sentences: Sequence[Sequence[str]], max_length: int, *, config=None,
                 chunk: int = 2048) -> WordAligned:
    if not getattr(tokenizer, "is_fast", False):
        raise KamalError("token-level models need a fast tokenizer (tokenizer.json): kamal aligns words to "
                         "sub-tokens with its word_ids()")
    from kamalcli.models.batching import Encoded, clamp_length

    if config is not None:
        max_length = clamp_length(max_length, config, tokenizer)
    ids: list[np.ndarray] = []
    first: list[np.ndarray] = []
    boundary = _bare_boundary_id(tokenizer)
    for start in range(0, len(sentences), chunk):
        part = [list(s) for s in sentences[start : start + chunk]]
        enc = tokenizer(part, is_split_into_words=True, truncation=True, max_length=max_length, padding=False,
                        return_attention_mask=False, return_token_type_ids=False)
        for j, words in enumerate(part):
            ids.append(np.asarray(enc["input_ids"][j], dtype=np.int64))
            row = enc["input_ids"][j]
            first.append(first_positions(enc.word_ids(j), [t == boundary for t in row], len(words)))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    token_type = "token_type_ids" in getattr(tokenizer, "model_input_names", [])
    return WordAligned(Encoded(ids, pad_id, token_type), first)


def gather_words(logits, positions):
    """(B, T, k) per sub-token, (B, W) positions (-1: none) -> (B, W, k) per word (rows at -1 are position 0's)."""
    import torch

    index = positions.clamp(min=0).unsqueeze(-1).expand(-1, -1, logits.shape[-1])
    return torch.gather(logits, 1, index)


def word_logits(model, aligned: WordAligned, *, batch_size: int = 64, device: str = "cpu", width: int | None = None,
                passes: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """(n, W, k) logits per word in eval mode, and with passes > 0 the mean softmax over that many
    MC-dropout passes (dropout sampling, everything else in eval mode); 0 where there is no word."""
    import torch

    from kamalcli.models.batching import inference_batches
    from kamalcli.models.loading import enable_mc_dropout

    positions = aligned.positions(width)
    n, width = positions.shape
    k = model.config.num_labels
    logits = np.zeros((n, width, k), dtype=np.float32)
    mc = np.zeros((n, width, k), dtype=np.float32) if passes else None
    valid = torch.from_numpy(positions >= 0)
    was_training = model.training
    with torch.inference_mode():
        for rows in inference_batches(aligned.encoded.lengths, batch_size):
            batch = aligned.encoded.batch(rows, device)
            where = torch.from_numpy(positions[rows]).to(device)
            keep = valid[rows].unsqueeze(-1)
            model.eval()
            out = gather_words(model(**batch).logits.float(), where).cpu()
            logits[rows] = (out * keep).numpy()
            if passes:
                enable_mc_dropout(model)
                total = torch.zeros_like(out)
                for _ in range(passes):
                    total += torch.softmax(gather_words(model(**batch).logits.float(), where).cpu(), dim=-1)
                mc[rows] = (total / passes * keep).numpy()
    model.train(was_training)
    return logits, mc


def word_probabilities(logits: np.ndarray, seen: np.ndarray, labels) -> np.ndarray:
    """softmax per word; a word the model never saw (cut by max_length) is certainly O."""
    probs = softmax(logits)
    certain_o = np.zeros(len(labels), dtype=probs.dtype)
    certain_o[list(labels).index("O")] = 1.0
    return np.where(seen[..., None], probs, certain_o)
