"""The settings of a workspace's kamal.toml, each written once: its default, its type and its comment.

One frozen dataclass per section ([workspace], [probe], [train]). `kamal init` renders kamal.toml
from them (workspace/config.py, which also checks the types of what a user wrote), the command-line
options take their defaults and the "(default N)" of their help from them (cli/options.py), and
TrainConfig (train/loop.py) starts from them. A shared basic: the standard library only.
"""

from dataclasses import dataclass, field
from typing import Any

HEADER = "kamal workspace configuration. Command-line options override these values."


def setting(default: Any, comment: str = "", *, example: Any = None, above: bool = False) -> Any:
    """A setting's default and what kamal.toml says of it: on its line, or on the line above (above=True).
    A setting that is off by default (None) is written commented out, with `example` as its value."""
    return field(default=default, metadata={"comment": comment, "example": example, "above": above})


@dataclass(frozen=True)
class WorkspaceSection:
    seed: int = setting(0, "Seed for every random choice (data order, dropout masks, initialisation).", above=True)
    device: str = setting("auto", "cpu, cuda or auto (cuda when a GPU is usable).", above=True)


@dataclass(frozen=True)
class ProbeSection:
    mc_samples: int = setting(16, "Monte-Carlo dropout passes (K); the default probe stops a row early once its "
                                  "confidence converged")
    mc_exact: bool = setting(False, "true: K passes of every row (the paper's probe; --mc-exact)")
    dropout: float | None = setting(None, "override the teachers' own dropout rate for MC dropout", example=0.1)
    batch_size: int = setting(32)
    max_length: int = setting(128)
    rmd: bool = setting(True, "relative Mahalanobis OOD scores")


@dataclass(frozen=True)
class TrainSection:
    student: str = setting("minilm-l6", "a named base (kamal models), a folder, or a hub id when online")
    epochs: int | None = setting(None, "passes over the transfer data; when set, it wins over the step budget below",
                                 example=1)
    steps: int = setting(600, "without epochs: at most this many steps...")
    eval_every: int = setting(50, "...measuring the held-out transfer loss every this many steps...")
    patience: int = setting(2, "...and stopping once it has not improved this many times in a row (the best step is kept)")
    batch_size: int = setting(32)
    lr: float = setting(1e-4)
    max_length: int = setting(128)
    warmup: float = setting(0.1, "share of steps with linear warm-up")
    weight_decay: float = setting(0.01)
    grad_clip: float = setting(1.0)
    checkpoint_every: int = setting(200, "steps")
    embeddings: str = setting("train", "or \"freeze\": keep the input word embeddings (faster for a multilingual vocabulary)")
    fit: str = setting("all", "or \"head\": train only the head, on the frozen encoder's states (seconds), or \"head-then-all\"")
    select_by: str = setting("transfer-loss", "or \"eval:NAME\" (uses labels: the run records it)")


# The sections of kamal.toml, in the order it lists them, and their defaults.
SECTIONS: dict[str, type] = {"workspace": WorkspaceSection, "probe": ProbeSection, "train": TrainSection}
WORKSPACE = WorkspaceSection()
PROBE = ProbeSection()
TRAIN = TrainSection()
_DEFAULTS = {"workspace": WORKSPACE, "probe": PROBE, "train": TRAIN}


def default(section: str, key: str) -> Any:
    """A setting's default: `default("train", "lr")` is TRAIN.lr."""
    return getattr(_DEFAULTS[section], key)


def shown(value: Any) -> str:
    """A default as help texts and kamal.toml write it: 1e-4 rather than 0.0001, true rather than True."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        plain = repr(value)
        mantissa, exponent = f"{value:e}".split("e")
        short = f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
        return short if len(short) < len(plain) and float(short) == value else plain
    return str(value)
