"""What a probe is asked for (settings) and what it leaves behind (arrays). No torch here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.probs import softmax
from kamalcli.settings import PROBE, WORKSPACE


@dataclass(frozen=True)
class ProbeSettings:
    mc_samples: int = PROBE.mc_samples
    dropout: float | None = PROBE.dropout  # None: the teacher's own dropout rates
    max_length: int = PROBE.max_length
    layers: tuple[int, ...] = ()   # hidden-state indices to pool for RMD (0 = embeddings)
    seed: int = WORKSPACE.seed
    feature_dtype: str = "float32"  # float16 for the features feature-level methods read per batch
    mc_exact: bool = PROBE.mc_exact  # K full fp32 passes of every row (the paper's estimator)
    mc_tolerance: float = 0.03     # adaptive: a row stops once its confidence is this close (probe/adaptive.py)
    mc_min_passes: int = 2         # adaptive: passes every row takes before it may stop

    @property
    def adaptive(self) -> bool:
        return self.mc_samples > 1 and not self.mc_exact

    def cache_fields(self) -> dict:
        """What changes the numbers (batch size, device and pass mode do not).

        The exact probe's fields are those of probes made before the adaptive
        one existed, so their caches stay valid; K = 1 samples nothing either way.
        """
        fields = {
            "mc_samples": self.mc_samples,
            "dropout": self.dropout,
            "max_length": self.max_length,
            "layers": list(self.layers),
            "seed": self.seed,
        }
        if self.feature_dtype != "float32":  # older probes' keys stay valid
            fields["feature_dtype"] = self.feature_dtype
        if self.adaptive:
            fields["mc_adaptive"] = self.adaptive_fields()
        return fields

    def adaptive_fields(self) -> dict:
        return {"tolerance": self.mc_tolerance, "min_passes": self.mc_min_passes}

    def validate(self) -> None:
        if self.mc_samples < 1:
            raise KamalError(f"--mc-samples must be at least 1 (got {self.mc_samples})")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise KamalError(f"--dropout must be in [0, 1) (got {self.dropout})")
        if not 0.0 <= self.mc_tolerance < 1.0:
            raise KamalError(f"the MC tolerance must be in [0, 1) (got {self.mc_tolerance})")
        if self.mc_min_passes < 2:
            raise KamalError(f"the adaptive probe needs at least 2 passes per row (got {self.mc_min_passes})")
        if self.max_length < 2:
            raise KamalError(f"--max-length must be at least 2 (got {self.max_length})")


def default_layers(num_layers: int) -> tuple[int, ...]:
    """The middle and the last transformer layer (hidden-state indices)."""
    return tuple(sorted({max(1, num_layers // 2), num_layers}))


@dataclass
class ProbeArrays:
    """A finished probe's arrays (memory-mapped: reading a column does not load the rest)."""

    logits: np.ndarray
    mc_probs: np.ndarray
    features: dict[int, np.ndarray]

    @classmethod
    def load(cls, folder: Path) -> "ProbeArrays":
        folder = Path(folder)
        if not (folder / "meta.json").is_file():
            raise KamalError(f"probe arrays missing at {folder}; run `kamal probe` again")
        meta = json.loads((folder / "meta.json").read_text())
        load = lambda name: np.load(folder / name, mmap_mode="r", allow_pickle=False)  # noqa: E731
        features = {int(layer): load(f"features-L{layer}.npy") for layer in meta.get("layers", [])}
        return cls(load("logits.npy"), load("mc_probs.npy"), features)

    def probs(self, temperature: float = 1.0) -> np.ndarray:
        return softmax(np.asarray(self.logits, dtype=np.float64) / temperature, axis=1)
