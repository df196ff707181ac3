"""The probe's dropout passes, with cheaper dropout masks on a CPU.

torch's CPU dropout draws each element's keep/drop with bernoulli_, which
took a quarter of a MiniLM-L6 dropout pass here (130 of about 470 ms for 32
rows of 64 tokens): a dropout pass cost 1.5-1.75x an eval pass. The same
distribution comes from 16 random bits per element, four elements per 64-bit
word: an element is kept when its bits, read as a signed integer, are at
least -32768 + round(65536 p). That keeps it with probability 1 - p', where
p' = round(65536 p) / 65536 differs from p by at most 7.6e-6 (p = 0.1:
0.100006). Kept elements are scaled by 1 / (1 - p), as torch does.

The attention-probability dropout of an SDPA kernel happens inside the
kernel, where no Python code can change its masks, so during the passes the
attention runs eager: softmax(QK^T / sqrt(d) + mask), dropout, times V. That
is the arithmetic SDPA itself falls back to on a CPU once dropout is on.

On a GPU the passes keep torch's own dropout: its fused kernels draw masks
cheaply there.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from kamalcli.models.loading import disable_mc_dropout, enable_mc_dropout

_LOWEST = -(2 ** 15)


def keep_mask(shape: torch.Size, p: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """True where an element is kept: probability 1 - round(65536 p) / 65536."""
    count = shape.numel()
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(-(2 ** 63), 2 ** 63 - 1)
    bits = words.view(torch.int16)[:count].view(shape)
    return bits >= _LOWEST + round(65536 * p)


class WordDropout(TorchFunctionMode):
    """Inside this mode, F.dropout (what nn.Dropout and eager attention call) uses keep_mask."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.dropout:
            return func(*args, **kwargs)
        named = dict(zip(("input", "p", "training", "inplace"), args))
        named.update(kwargs)
        x, p = named["input"], named.get("p", 0.5)
        if not named.get("training", True) or p == 0.0:
            return x
        if p == 1.0:
            return x.zero_() if named.get("inplace", False) else torch.zeros_like(x)
        scaled_mask = keep_mask(x.shape, p, x.device).to(x.dtype).mul_(1.0 / (1.0 - p))
        return x.mul_(scaled_mask) if named.get("inplace", False) else x * scaled_mask


@contextmanager
def dropout_passes(model: torch.nn.Module, rate: float | None, device: str) -> Iterator[None]:
    """Forward passes inside sample dropout (modeling.enable_mc_dropout); eval mode again after."""
    enable_mc_dropout(model, rate)
    attention = getattr(model.config, "_attn_implementation", None)
    cheap = str(device).startswith("cpu")
    switch = cheap and attention not in (None, "eager") and hasattr(model, "set_attn_implementation")
    try:
        if switch:
            model.set_attn_implementation("eager")
        if cheap:
            with WordDropout():
                yield
        else:
            yield
    finally:
        if switch:
            model.set_attn_implementation(attention)
        disable_mc_dropout(model)
