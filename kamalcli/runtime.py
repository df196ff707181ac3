"""Process-wide settings that must be in place before torch or transformers load."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import platformdirs


def cache_dir() -> Path:
    """kamal's own cache (converted models, downloads); outside any workspace."""
    override = os.environ.get("KAMAL_CACHE_DIR")
    return Path(override) if override else Path(platformdirs.user_cache_dir("kamalcli"))


_said: set[str] = set()


def say_once(message: str) -> None:
    """A note on stderr, once per command however often the code that finds it runs."""
    if message not in _said:
        _said.add(message)
        print(message, file=sys.stderr)


def said() -> set[str]:
    """The notes said so far in this command."""
    return set(_said)


def count_as_said(notes: set[str]) -> None:
    """Notes the user has read in an earlier command: say_once leaves them unsaid in this one."""
    _said.update(notes)


def cut_at_model_limit(limit: int, asked: int) -> int:
    """The max length to use when `asked` tokens are more than the model's `limit` takes; said once."""
    say_once(f"Note: the model takes at most {limit} tokens, so texts are cut at {limit}, "
             f"not at the max length {asked} asked for.")
    return limit


def prepare_environment() -> None:
    """Set defaults the user has not set, at the start of every command. Cheap: touches only os.environ."""
    _said.clear()
    # With another busy process, 2-thread torch with OpenMP's active spin-wait
    # slows down ~50x; passive waiting costs nothing measurable.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    # Never write the Hugging Face caches into the user's home by surprise.
    hf_home = cache_dir() / "huggingface"
    os.environ.setdefault("HF_HOME", str(hf_home))
    os.environ.setdefault("HF_DATASETS_CACHE", str(hf_home / "datasets"))
    # CUDA's kernel JIT cache (torch and onnxruntime alike) would go to ~/.nv otherwise.
    os.environ.setdefault("CUDA_CACHE_PATH", str(cache_dir() / "cuda"))


def resolve_device(name: str | None) -> str:
    """'cpu', 'cuda' or 'auto' -> a torch device string that really works."""
    name = (name or "auto").lower()
    if name not in {"cpu", "cuda", "auto"} and not name.startswith("cuda:"):
        from kamalcli.errors import KamalError

        raise KamalError(f"unknown device {name!r}: use cpu, cuda or auto")
    if name == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        local_rank = os.environ.get("LOCAL_RANK")
        if name in ("auto", "cuda") and local_rank is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            torch.cuda.set_device(int(local_rank))  # torchrun: one GPU per process on each machine
            return f"cuda:{local_rank}"
        return "cuda" if name == "auto" else name
    if name == "auto":
        return "cpu"
    from kamalcli.errors import KamalError

    raise KamalError("--device cuda was asked for, but torch sees no usable GPU")


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
