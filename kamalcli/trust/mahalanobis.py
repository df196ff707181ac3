"""Relative Mahalanobis distance (Ren et al. 2021): the probe's and StrataNet's OOD scores, and a student's scope.

Class-conditional Gaussians N(mu_k, Sigma) with one shared covariance are fitted
on in-distribution features; one background Gaussian N(mu_0, Sigma_0) on all
features. RMD_k(h) = MD_k(h) - MD_0(h); the OOD score is min_k RMD_k(h) and the
in-domain confidence is its negative.

Covariances are shrunk towards a scaled identity, more so when rows are few
relative to the feature size, so a tiny sample gives a usable (if blunt) score
instead of a singular matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError


@dataclass(frozen=True)
class RMDModel:
    means: np.ndarray       # (k, H)
    precision: np.ndarray   # (H, H), shared
    mean0: np.ndarray       # (H,)
    precision0: np.ndarray  # (H, H)

    def score(self, features: np.ndarray, chunk: int = 4096) -> np.ndarray:
        """min_k RMD_k(h) for each row: higher = further out of distribution."""
        out = np.empty(features.shape[0], dtype=np.float64)
        for start in range(0, features.shape[0], chunk):
            h = np.asarray(features[start : start + chunk], dtype=np.float64)
            md = _mahalanobis(h, self.means, self.precision)            # (n, k)
            md0 = _mahalanobis(h, self.mean0[None, :], self.precision0)  # (n, 1)
            out[start : start + chunk] = (md - md0).min(axis=1)
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        """The fitted Gaussians by name, as saved in an .npz (the probe's fits, a student's scope.npz)."""
        return {"means": self.means, "precision": self.precision, "mean0": self.mean0, "precision0": self.precision0}

    @classmethod
    def from_arrays(cls, arrays) -> "RMDModel":
        return cls(arrays["means"], arrays["precision"], arrays["mean0"], arrays["precision0"])

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.stem + ".tmp.npz")
        np.savez(tmp, **self.arrays())
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "RMDModel":
        with np.load(path, allow_pickle=False) as z:
            return cls.from_arrays(z)


def _mahalanobis(h: np.ndarray, means: np.ndarray, precision: np.ndarray) -> np.ndarray:
    hp = h @ precision
    quad_h = np.einsum("nd,nd->n", hp, h)
    cross = hp @ means.T
    quad_m = np.einsum("kd,kd->k", means @ precision, means)
    return quad_h[:, None] - 2.0 * cross + quad_m[None, :]


def shrunk_precision(centered: np.ndarray) -> np.ndarray:
    n, d = centered.shape
    cov = centered.T @ centered / max(n, 1)
    scale = max(np.trace(cov) / d, 1e-12)
    alpha = d / (d + n)
    cov = (1.0 - alpha) * cov + alpha * scale * np.eye(d)
    cov += 1e-6 * scale * np.eye(d)
    return np.linalg.inv(cov)


def fit_rmd(in_features: np.ndarray, in_labels: np.ndarray, all_features: np.ndarray) -> RMDModel:
    in_features = np.asarray(in_features, dtype=np.float64)
    all_features = np.asarray(all_features, dtype=np.float64)
    in_labels = np.asarray(in_labels)
    if in_features.shape[0] < 2 or all_features.shape[0] < 2:
        raise KamalError("relative Mahalanobis needs at least 2 in-distribution rows to fit")
    classes = np.unique(in_labels)
    means = np.stack([in_features[in_labels == c].mean(axis=0) for c in classes])
    centered = in_features - means[np.searchsorted(classes, in_labels)]
    mean0 = all_features.mean(axis=0)
    return RMDModel(
        means=means,
        precision=shrunk_precision(centered),
        mean0=mean0,
        precision0=shrunk_precision(all_features - mean0),
    )
