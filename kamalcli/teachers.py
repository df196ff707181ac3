"""Reading a fine-tuned classifier folder: what it is, its labels, its fingerprint.

Only config.json and file bytes are read here (no torch), so registering a
teacher is instant; the weights load when something runs the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.fsutil import sha256_files
from kamalcli.labels import is_generic_label

WEIGHT_PATTERNS = ("model.safetensors", "model-*.safetensors", "pytorch_model.bin", "pytorch_model-*.bin")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "sentencepiece.bpe.model", "spiece.model", "vocab.json")


@dataclass(frozen=True)
class ModelFolder:
    path: Path
    architecture: str
    model_type: str
    labels: tuple[str, ...]
    generic_labels: bool
    num_layers: int | None
    hidden_size: int | None
    vocab_size: int | None
    dropout: float | None
    fingerprint: str
    tokenizer_fingerprint: str | None
    weight_files: tuple[str, ...]


def weight_files(folder: Path) -> list[Path]:
    for pattern in WEIGHT_PATTERNS:
        found = sorted(folder.glob(pattern))
        if found:
            return found
    return []


def weights_fingerprint(folder: Path) -> str:
    files = weight_files(folder)
    if not files:
        raise KamalError(f"{folder} holds no weights (model.safetensors or pytorch_model.bin)")
    return sha256_files(files)


def tokenizer_fingerprint(folder: Path) -> str | None:
    """What decides how text becomes ids: the vocabulary and normalisation, not padding settings."""
    import hashlib

    path = folder / "tokenizer.json"
    if path.is_file():
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
            essential = {k: spec.get(k) for k in ("model", "normalizer", "pre_tokenizer", "added_tokens")}
            return hashlib.sha256(json.dumps(essential, sort_keys=True).encode()).hexdigest()
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
    for name in TOKENIZER_FILES[1:]:
        if (folder / name).is_file():
            return sha256_files([folder / name])
    return None


def dropout_rate(config: dict) -> float | None:
    for key in ("hidden_dropout_prob", "dropout", "hidden_dropout", "dropout_rate"):
        value = config.get(key)
        if isinstance(value, (int, float)):
            return float(value)
    return None


def read_config(folder: Path) -> dict:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise KamalError(f"{folder} is not a Hugging Face model folder (no config.json)")
    try:
        return json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise KamalError(f"{config_path} is not valid JSON: {e}") from None


def inspect_classifier(source: str | Path, labels: list[str] | None = None) -> ModelFolder:
    """Validate a local sequence-classification folder; labels override generic names."""
    folder = Path(source).expanduser()
    if not folder.exists():
        raise KamalError(f"{source}: no such folder (kamal reads local Hugging Face model folders)")
    if not folder.is_dir():
        raise KamalError(f"{source} is a file; give the model's folder (with config.json)")
    folder = folder.resolve()
    config = read_config(folder)
    if config.get("auto_map"):
        raise KamalError(
            f"{source} needs custom code from its author (auto_map in config.json); "
            "kamal never runs remote code"
        )
    architectures = config.get("architectures") or []
    classifier = [a for a in architectures if a.endswith("ForSequenceClassification")]
    if not classifier:
        found = ", ".join(architectures) or "none"
        raise KamalError(f"{source} is not a sequence classifier (architectures: {found})")
    model_type = config.get("model_type")
    if not model_type:
        raise KamalError(f"{source}: config.json has no model_type")
    if not _known_model_type(model_type):
        raise KamalError(f"{source}: model type {model_type!r} is unknown to the installed transformers")

    id2label = config.get("id2label") or {}
    num_labels = len(id2label) or config.get("num_labels") or _head_size(folder)
    if not num_labels:
        raise KamalError(f"{source} has no labels (no id2label in config.json, and no classification head found)")
    try:
        names = [str(id2label[k]) for k in sorted(id2label, key=int)] if id2label else []
    except (TypeError, ValueError):
        raise KamalError(f"{source}: id2label keys are not class ids") from None
    generic = not names or all(is_generic_label(n) for n in names)
    if labels is not None:
        if len(labels) != num_labels:
            raise KamalError(f"--labels gives {len(labels)} names but {source} has {num_labels} classes")
        names = list(labels)
    elif not names:
        raise KamalError(
            f"{source} names no labels (config.json has no id2label); "
            f"name its {num_labels} classes in order with --labels a,b,..."
        )
    elif generic:
        raise KamalError(
            f"{source} has generic class names ({', '.join(names[:3])}...); "
            f"name its {num_labels} classes in order with --labels a,b,..."
        )
    if len(set(names)) != len(names):
        raise KamalError(f"{source}: label names repeat: {', '.join(names)}")
    if any(not n.strip() for n in names):
        raise KamalError(f"{source}: a label name is empty")

    return ModelFolder(
        path=folder,
        architecture=classifier[0],
        model_type=model_type,
        labels=tuple(names),
        generic_labels=generic,
        num_layers=config.get("num_hidden_layers") or config.get("n_layers") or config.get("num_layers"),
        hidden_size=config.get("hidden_size") or config.get("dim") or config.get("d_model"),
        vocab_size=config.get("vocab_size"),
        dropout=dropout_rate(config),
        fingerprint=weights_fingerprint(folder),
        tokenizer_fingerprint=tokenizer_fingerprint(folder),
        weight_files=tuple(p.name for p in weight_files(folder)),
    )


def _head_size(folder: Path) -> int | None:
    """Rows of the classification head, read from the safetensors header (no torch)."""
    import struct

    for path in weight_files(folder):
        if path.suffix != ".safetensors":
            return None
        with open(path, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(size))
        for name in ("classifier.weight", "classifier.out_proj.weight", "score.weight"):
            if name in header:
                return int(header[name]["shape"][0])
    return None


def _known_model_type(model_type: str) -> bool:
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except ImportError:  # pragma: no cover - transformers is a dependency
        return True
    return model_type in CONFIG_MAPPING_NAMES


# -- registration -----------------------------------------------------------

def register_teacher(workspace, store, source: str, *, name: str | None, labels: list[str] | None,
                     copy: bool = False, origin: str = "added", train_dataset_id: int | None = None,
                     student_id: int | None = None):
    """Validate and record a teacher. Returns (teacher, notes for the user).

    Everything is checked before anything is written; the database changes in one
    transaction, and a copied folder is renamed into place only when complete.
    """
    import shutil

    from kamalcli.assets import resolve_classifier_source
    from kamalcli.names import check_name, default_name

    folder = resolve_classifier_source(source)
    info = inspect_classifier(folder, labels)
    name = check_name(name or default_name(info.path.name), "teacher")
    existing = store.find_teacher(name=name, fingerprint=info.fingerprint)
    if existing is not None and existing.fingerprint == info.fingerprint:
        raise KamalError(f"these weights are already registered as teacher {existing.name!r}")
    if existing is not None:
        raise KamalError(f"a teacher named {name!r} exists already; choose another --name")

    notes = []
    others = store.teachers()
    space = store.label_space(others)
    for label in info.labels:
        if label in space.names:
            owners = ", ".join(space.owners(label))
            notes.append(
                f"Label {label!r} is also taught by {owners}: it stays one label in the union, "
                "and both teachers' predictions for it are combined there."
            )
    tokenizers = {t.tokenizer_fingerprint for t in others if t.tokenizer_fingerprint}
    if others and info.tokenizer_fingerprint and info.tokenizer_fingerprint not in tokenizers:
        notes.append(
            f"{name} uses a different tokenizer from the other teachers: fine, each teacher's "
            "outputs are computed with its own tokenizer and cached."
        )
    if info.dropout in (0, 0.0):
        notes.append(f"{name} has dropout 0: MC-dropout probing needs --dropout P (or --mc-samples 1).")

    path = info.path
    if copy:
        target = workspace.artifact_dir("teachers") / info.fingerprint[:16]
        if not target.exists():
            staging = workspace.tmp_dir() / "model"
            shutil.copytree(info.path, staging)
            from kamalcli.fsutil import publish_dir

            publish_dir(staging, target)
        path = target

    teacher = store.add_teacher(
        labels=list(info.labels),
        name=name,
        source=str(source),
        path=str(path),
        fingerprint=info.fingerprint,
        architecture=info.architecture,
        model_type=info.model_type,
        num_layers=info.num_layers,
        hidden_size=info.hidden_size,
        vocab_size=info.vocab_size,
        dropout=info.dropout,
        tokenizer_fingerprint=info.tokenizer_fingerprint,
        origin=origin,
        train_dataset_id=train_dataset_id,
        student_id=student_id,
    )
    return teacher, notes
