"""Whether training updates the input word embeddings (`--embeddings train|freeze`, default train).

A multilingual base holds most of its parameters in its vocabulary (multilingual-e5-small: 96M of
107M at six layers), and a batch touches a few hundred of its 250,037 rows. Freezing the matrix
skips its dense gradient and its optimizer update: a cross-lingual student step is about 1.8x faster
on a CPU, and the rows a transfer set never shows stay aligned with the ones it does. It is not the
default because it learned more slowly where measured: a muki-soft student over English topics and
Chinese sentiment at 180 steps reached 54.3% on the Chinese reviews frozen against 77.0% trained
(one seed; docs/benchmarks.md, "Cross-lingual teachers (MUKI Table 5)").
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator

from kamalcli.errors import KamalError

if TYPE_CHECKING:
    import torch

MODES = ("train", "freeze")


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise KamalError(f"embeddings must be one of {', '.join(MODES)} (got {mode!r})")


def _word_embeddings(model: "torch.nn.Module") -> "torch.nn.Parameter | None":
    getter = getattr(model, "get_input_embeddings", None)
    embedding = getter() if callable(getter) else None
    return getattr(embedding, "weight", None)


@contextlib.contextmanager
def embeddings_policy(model: "torch.nn.Module", mode: str) -> Iterator[bool]:
    """Yields whether the word embeddings are frozen for the duration; their requires_grad comes back after.
    The mode was checked by TrainConfig.validate."""
    weight = _word_embeddings(model)
    if mode == "train" or weight is None:
        if mode == "freeze":
            raise KamalError("--embeddings freeze: this model has no input word embeddings to freeze")
        yield False
        return
    before = weight.requires_grad
    weight.requires_grad_(False)
    try:
        yield True
    finally:
        weight.requires_grad_(before)
