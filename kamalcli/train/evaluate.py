"""Running a trained classifier over texts (eval mode, length-bucketed batches)."""

from __future__ import annotations

import numpy as np
import torch

from kamalcli.batching import Encoded, inference_batches


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
