"""What a training run reports: the one training loop's and --fit head's (train/head.py) alike."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainResult:
    steps: int
    epochs: float
    seconds: float
    examples_per_second: float
    best_step: int | None
    best_metric: float | None
    selected_by: str | None
    history: list[dict]
    stopped_early: bool = False
    embeddings_frozen: bool = False
    encoder_states: object = None      # --fit head: the frozen encoder's first-token states of every row (a tensor)

    @property
    def embeddings(self) -> str:
        """What runs and students record."""
        return "frozen" if self.embeddings_frozen else "trained"
