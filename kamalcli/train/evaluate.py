"""Running a trained classifier over texts (eval mode, length-bucketed batches)."""

from __future__ import annotations

import numpy as np
import torch

from kamalcli.models.batching import Encoded
from kamalcli.models.inference import predict_logits


HOLDOUT_SHARE = 0.05
HOLDOUT_MAX = 1000
HOLDOUT_MIN_ROWS = 40  # below this many rows, no held-out slice: the last step is kept


def holdout_split(n: int, seed: int, max_rows: int | None = HOLDOUT_MAX) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, held-out rows): a seeded 5% slice for label-free model selection."""
    if n < HOLDOUT_MIN_ROWS:
        return np.arange(n), np.arange(0)
    size = max(1, round(HOLDOUT_SHARE * n))
    if max_rows is not None:
        size = min(max_rows, size)
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[size:]), np.sort(order[:size])


class HeldOutLoss:
    """Label-free model selection: the objective's loss on held-out transfer rows."""

    higher_is_better = False
    name = "transfer-loss"

    def __init__(self, objective, encoded: Encoded, rows: np.ndarray, device: str, batch_size: int = 64):
        from kamalcli.train.objective import BatchArrays

        self.objective, self.encoded, self.rows, self.device, self.batch_size = objective, encoded, rows, device, batch_size
        self._arrays = BatchArrays(objective)

    def measure(self, model) -> float:
        """The output-level term only: an Auxiliary's own parameters move during training, so its
        feature losses are not comparable from one checkpoint to the next."""
        from kamalcli.train.objective import output_loss

        logits = torch.from_numpy(predict_logits(model, self.encoded, batch_size=self.batch_size,
                                                 device=self.device, rows=self.rows))
        with torch.no_grad():
            return float(output_loss(self.objective, logits, self._arrays(self.rows, "cpu"),
                                     self._arrays.weights(self.rows, "cpu")))


class EvalAccuracy:
    """Model selection on a labelled set (uses labels: runs record that they did)."""

    higher_is_better = True

    def __init__(self, dataset_name: str, encoded: Encoded, gold: np.ndarray, device: str, batch_size: int = 64):
        self.name = f"eval:{dataset_name}"
        self.encoded, self.gold, self.device, self.batch_size = encoded, gold, device, batch_size

    def measure(self, model) -> float:
        pred = predict_logits(model, self.encoded, batch_size=self.batch_size, device=self.device).argmax(axis=1)
        return float((pred == self.gold).mean())
