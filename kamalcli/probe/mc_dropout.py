"""One teacher over one dataset: deterministic logits, MC-dropout probabilities, pooled features.

The teacher runs once; arrays stream into .npy files in chunks (memory does
not grow with the dataset), in a folder that is renamed into place only when
complete.

MC dropout: forward passes with dropout sampling (modeling.enable_mc_dropout;
on a CPU with the cheaper masks of probe/dropout_masks.py), pbar = mean softmax(z^(k)). K = 1 means no sampling: pbar is the
deterministic softmax (the paper's "w/o MC dropout").

The exact probe (settings.mc_exact) takes K full fp32 passes of every row, in
one of two equivalent ways: 'sequential' runs K passes over a batch (faster on
this CPU, measured), and 'batched' repeats the batch K times in one pass
(faster on a GPU). The default, adaptive probe (probe/adaptive.py) stops a
row's sampling once its confidence has converged, at most K passes; each
pass is the same fp32 dropout pass as the exact probe's, so only the number of
passes per row changes. (Dynamic int8 Linear layers for the dropout passes were
measured and rejected: they moved the confidence by 0.05 on average, five times
the difference between K = 8 and K = 16.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from kamalcli.models.batching import Encoded, inference_batches
from kamalcli.errors import KamalError
from kamalcli.models.inference import mean_pool
from kamalcli.models.loading import disable_mc_dropout, enable_mc_dropout
from kamalcli.probe.adaptive import adaptive_mc_mean
from kamalcli.probe.dropout_masks import dropout_passes
from kamalcli.probe.arrays import ProbeSettings

GROUP_BATCHES = 8  # the adaptive probe samples this many batches' rows together, re-batching as rows stop


def pick_mode(mode: str, device: str) -> str:
    if mode == "auto":
        return "sequential" if device == "cpu" else "batched"
    if mode not in ("sequential", "batched"):
        raise KamalError(f"unknown MC mode {mode!r}: sequential, batched or auto")
    return mode


def check_dropout(model: torch.nn.Module, settings: ProbeSettings, teacher_name: str) -> int:
    if settings.mc_samples == 1:
        return 0
    active = enable_mc_dropout(model, settings.dropout)
    disable_mc_dropout(model)
    if active == 0:
        raise KamalError(
            f"MC dropout is impossible for teacher {teacher_name} (no dropout above 0): use --mc-samples 1, or give "
            f"it a rate: kamal probe --teacher {teacher_name} --dropout 0.1"
        )
    return active


def _row_groups(encoded: Encoded, batch_size: int, out_dir: Path,
                part: tuple[int, int] | None) -> tuple[list[list[np.ndarray]], np.ndarray]:
    """(the batch groups this process computes, where each row's results go in out_dir's arrays: -1 for
    another rank's rows). With a part, this rank's rows are written to rows.npy."""
    batches = list(inference_batches(encoded.lengths, batch_size))
    groups = [batches[i : i + GROUP_BATCHES] for i in range(0, len(batches), GROUP_BATCHES)]
    local = np.arange(len(encoded))  # where each row's results go in this folder's arrays
    out_dir.mkdir(parents=True, exist_ok=True)
    if part is not None:
        rank, processes = part
        groups = groups[rank::processes]
        mine = np.concatenate([row for group in groups for row in group]) if groups else np.zeros(0, dtype=np.int64)
        np.save(out_dir / "rows.npy", mine)
        local = np.full(len(encoded), -1, dtype=np.int64)
        local[mine] = np.arange(len(mine))
    return groups, local


@dataclass
class _Outputs:
    """The probe's arrays: .npy files mapped into memory, filled batch by batch."""
    logits: np.ndarray
    mc: np.ndarray
    features: dict[int, np.ndarray]

    @classmethod
    def open(cls, out_dir: Path, n: int, config, settings: ProbeSettings) -> "_Outputs":
        open_array = np.lib.format.open_memmap
        num_classes = config.num_labels
        logits_out = open_array(out_dir / "logits.npy", mode="w+", dtype=np.float32, shape=(n, num_classes))
        mc_out = open_array(out_dir / "mc_probs.npy", mode="w+", dtype=np.float32, shape=(n, num_classes))
        hidden = config.hidden_size
        features_out = {
            layer: open_array(out_dir / f"features-L{layer}.npy", mode="w+", dtype=np.dtype(settings.feature_dtype),
                              shape=(n, hidden))
            for layer in settings.layers
        }
        return cls(logits_out, mc_out, features_out)

    def flush(self) -> None:
        for array in (self.logits, self.mc, *self.features.values()):
            array.flush()


def _batch_pass(model, batch: dict[str, torch.Tensor], at: np.ndarray, settings: ProbeSettings, outputs: _Outputs,
                adaptive: bool, mode: str, device: str) -> None:
    """A batch's deterministic pass (logits, pooled features) and, unless adaptive, its MC probabilities."""
    k = settings.mc_samples
    out = model(**batch, output_hidden_states=bool(settings.layers))
    logits = out.logits.float()
    outputs.logits[at] = logits.cpu().numpy()
    for layer, array in outputs.features.items():
        array[at] = mean_pool(out.hidden_states[layer].float(), batch["attention_mask"]).cpu().numpy()
    if k == 1:
        outputs.mc[at] = torch.softmax(logits, dim=-1).cpu().numpy()
    elif not adaptive:
        with dropout_passes(model, settings.dropout, device):
            outputs.mc[at] = _mc_mean(model, batch, k, mode).cpu().numpy()


def run_teacher(
    model: torch.nn.Module,
    encoded: Encoded,
    settings: ProbeSettings,
    out_dir: Path,
    *,
    device: str = "cpu",
    batch_size: int = 32,
    mode: str = "sequential",
    advance: Callable[[int], None] = lambda n: None,
    part: tuple[int, int] | None = None,
) -> dict:
    """Write the probe's arrays into out_dir; returns how the MC passes went (for meta.json).

    part=(rank, processes): only this rank's share of the batch groups (every
    process forms the same batches, so each row is computed exactly as one
    process would), their rows in rows.npy; dropout masks seeded seed + rank.
    """
    groups, local = _row_groups(encoded, batch_size, out_dir, part)
    n = int((local >= 0).sum())
    num_classes = model.config.num_labels
    outputs = _Outputs.open(out_dir, n, model.config, settings)
    model.to(device)
    disable_mc_dropout(model)  # the deterministic pass; dropout_passes samples and restores eval mode
    torch.manual_seed(settings.seed + (part[0] if part else 0))
    k = settings.mc_samples
    adaptive = k > 1 and not settings.mc_exact
    passes = np.full(n, k if k > 1 else 0, dtype=np.int64)
    with torch.inference_mode():
        for group in groups:
            for index in group:
                _batch_pass(model, encoded.batch(index, device), local[index], settings, outputs, adaptive, mode,
                            device)
                if not adaptive:
                    advance(len(index))
            if adaptive:
                rows = np.concatenate(group)
                mean, taken = _adaptive_rows(model, encoded, rows, settings, device, batch_size, num_classes)
                outputs.mc[local[rows]] = mean.numpy().astype(np.float32)
                passes[local[rows]] = taken
                advance(len(rows))
    outputs.flush()
    del outputs
    np.save(out_dir / "mc_passes.npy", passes)
    return {
        "mc_estimator": "adaptive" if adaptive else ("exact" if k > 1 else "none"),
        "mc_passes_mean": float(passes.mean()) if n else 0.0,
    }


def _adaptive_rows(model, encoded: Encoded, rows: np.ndarray, settings: ProbeSettings, device: str,
                   batch_size: int, num_classes: int) -> tuple[torch.Tensor, np.ndarray]:
    def sample(local: np.ndarray) -> torch.Tensor:
        # padded to the longest row still sampling: rows that stopped no longer set the width
        return torch.softmax(model(**encoded.batch(rows[local], device)).logits.float(), dim=-1)

    with dropout_passes(model, settings.dropout, device):
        return adaptive_mc_mean(sample, len(rows), num_classes, max_passes=settings.mc_samples,
                                min_passes=settings.mc_min_passes, tolerance=settings.mc_tolerance,
                                batch_size=batch_size)


def _mc_mean(model, batch: dict[str, torch.Tensor], k: int, mode: str) -> torch.Tensor:
    if mode == "batched":
        repeated = {name: t.repeat(k, *([1] * (t.dim() - 1))) for name, t in batch.items()}
        probs = torch.softmax(model(**repeated).logits.float(), dim=-1)
        return probs.view(k, -1, probs.shape[-1]).mean(dim=0)
    total = None
    for _ in range(k):
        probs = torch.softmax(model(**batch).logits.float(), dim=-1)
        total = probs if total is None else total + probs
    return total / k
