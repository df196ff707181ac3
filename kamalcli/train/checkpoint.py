"""One checkpoint format: model weights (safetensors) + trainer state (torch, weights_only).

A method's Auxiliary (its parameters and extra state) is part of the trainer state.

A checkpoint folder is written beside the old one and renamed over it, so a
crash mid-save leaves the previous checkpoint intact.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kamalcli.errors import KamalError
from kamalcli.files import publish_dir

FOLDER = "checkpoint"
BEST = "best.safetensors"


@dataclass
class TrainState:
    """Where training stands: what a checkpoint holds beside the weights and the optimiser."""

    step: int = 0
    best_metric: float | None = None
    best_step: int | None = None
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def save_weights(model: torch.nn.Module, path: Path) -> None:
    from safetensors.torch import save_model

    tmp = path.with_name(path.name + ".tmp")
    save_model(model, str(tmp))
    tmp.replace(path)


def load_weights(model: torch.nn.Module, path: Path) -> None:
    from safetensors.torch import load_model

    load_model(model, str(path), device=str(next(model.parameters()).device))


def save(workdir: Path, model, optimizer, scheduler, state, config, auxiliary=None, rank_rng: list | None = None) -> None:
    """rank_rng: every process's random state when several trained together (train/data_parallel.py)."""
    final = workdir / FOLDER
    staging = workdir / f".{FOLDER}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_weights(model, staging / "model.safetensors")
    trainer = {
        "step": state.step,
        "best_metric": state.best_metric,
        "best_step": state.best_step,
        "history": state.history,
        "seconds": state.seconds,
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "config": config.as_json(),
    }
    if rank_rng is not None:
        trainer["rank_rng"] = rank_rng
    if auxiliary is not None:
        trainer["auxiliary"] = {"parameters": auxiliary.state_dict(), "extra": auxiliary.extra_state()}
    torch.save(trainer, staging / "trainer.pt")
    publish_dir(staging, final)


def exists(workdir: Path) -> bool:
    return (workdir / FOLDER / "trainer.pt").is_file()


def load(workdir: Path, model, optimizer, scheduler, config, auxiliary=None, *, rank: int = 0, processes: int = 1):
    """Restore a checkpoint. Random state: each process's own when the same number of processes saved it
    (bit for bit); on another number, rank 0 takes the saved process 0's and the others a seed of their own."""
    folder = workdir / FOLDER
    if not exists(workdir):
        raise KamalError(f"no checkpoint to resume from in {workdir}")
    trainer = torch.load(folder / "trainer.pt", weights_only=True, map_location="cpu")
    saved = {k: v for k, v in trainer["config"].items() if k != "device"}
    defaults = type(config)().as_json()
    # settings newer than the checkpoint compare as their defaults (runs saved before they existed resume)
    asked = {k: v for k, v in config.as_json().items() if k != "device" and (k in saved or v != defaults[k])}
    if saved != asked:
        changed = ", ".join(f"{k} {saved.get(k)} -> {asked.get(k)}" for k in asked if saved.get(k) != asked.get(k))
        raise KamalError(f"cannot resume with different training settings ({changed})")
    load_weights(model, folder / "model.safetensors")
    if auxiliary is not None:
        if "auxiliary" not in trainer:
            raise KamalError("that checkpoint has no state for the method's own parameters; it was made by another method")
        auxiliary.load_state_dict(trainer["auxiliary"]["parameters"])
        auxiliary.load_extra_state(trainer["auxiliary"]["extra"])
    try:
        optimizer.load_state_dict(trainer["optimizer"])
    except ValueError as e:  # other parameters optimised (e.g. embeddings frozen then, trained now)
        raise KamalError(f"that checkpoint's optimizer state does not fit this model's trainable parameters ({e})") from None
    scheduler.load_state_dict(trainer["scheduler"])
    torch.set_rng_state(trainer["rng_cpu"])
    if trainer["rng_cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(trainer["rng_cuda"])
    saved = trainer.get("rank_rng") or [None]
    if len(saved) == processes and saved[rank] is not None:
        torch.set_rng_state(saved[rank]["cpu"])
        if "cuda" in saved[rank] and torch.cuda.is_available():
            torch.cuda.set_rng_state(saved[rank]["cuda"])
    elif rank > 0:
        torch.manual_seed(config.seed + 1_000_003 * trainer["step"] + rank)
    return TrainState(step=trainer["step"], best_metric=trainer["best_metric"], best_step=trainer["best_step"],
                      history=list(trainer["history"]), seconds=trainer["seconds"])
