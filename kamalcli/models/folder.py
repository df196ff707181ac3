"""Reading a fine-tuned classifier folder: what it is, its labels, its fingerprint.

config.json, file bytes and the weights' shapes are read here (safetensors headers,
or a .bin on torch's meta device: no pickle code runs, no weights are loaded), so
registering a teacher is quick and a folder whose weights do not fit its config is
refused before anything is recorded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kamalcli.errors import KamalError, first_line
from kamalcli.files import sha256_files
from kamalcli.labels import check_label_names, is_generic_label

def task_of_architecture(architecture: str) -> str:
    return "token" if architecture.endswith("ForTokenClassification") else "sequence"


def auto_class(task: str = "sequence"):
    """The transformers Auto class of a task: sequence (one label per text) or token (one tag per token)."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    return AutoModelForTokenClassification if task == "token" else AutoModelForSequenceClassification


def task_of_folder(folder: str | Path) -> str:
    """token if the folder's config.json names a *ForTokenClassification architecture, else sequence."""
    path = Path(folder) / "config.json"
    architectures = (json.loads(path.read_text(encoding="utf-8")).get("architectures") or []) if path.is_file() else []
    return "token" if any(task_of_architecture(a) == "token" for a in architectures) else "sequence"


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
    multi_label: bool = False  # problem_type multi_label_classification: a sigmoid per label (kamalcli/heads.py)


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


def _local_folder(source: str | Path) -> Path:
    folder = Path(source).expanduser()
    if not folder.exists():
        raise KamalError(f"{source}: no such folder (kamal reads local Hugging Face model folders)")
    if not folder.is_dir():
        raise KamalError(f"{source} is a file; give the model's folder (with config.json)")
    return folder.resolve()


def _classifier_kind(source: str | Path, config: dict) -> tuple[str, str, str]:
    """(architecture, task, model type) of a classifier config.json kamal can load without remote code."""
    if config.get("auto_map"):
        raise KamalError(
            f"{source} needs custom code from its author (auto_map in config.json); "
            "kamal never runs remote code"
        )
    architectures = config.get("architectures") or []
    classifier = [a for a in architectures if a.endswith(("ForSequenceClassification", "ForTokenClassification"))]
    if not classifier:
        found = ", ".join(architectures) or "none"
        raise KamalError(f"{source} is neither a sequence nor a token classifier (architectures: {found})")
    task = task_of_architecture(classifier[0])
    model_type = config.get("model_type")
    if not model_type:
        raise KamalError(f"{source}: config.json has no model_type")
    if not _known_model_type(model_type):
        raise KamalError(f"{source}: model type {model_type!r} is unknown to the installed transformers")
    return classifier[0], task, model_type


MULTI_LABEL = "multi_label_classification"


def is_multi_label(config: dict) -> bool:
    return config.get("problem_type") == MULTI_LABEL


def check_registered_teacher(teacher) -> None:
    """A registered teacher's config.json read again before probe or amalgamate use it or its cached outputs:
    a teacher recorded as single-label whose folder now says multi-label (added by a kamal that read it through
    one softmax, or rewritten since) is refused. A folder or config.json that is gone is left to the command that
    loads it, which names it."""
    try:
        config = json.loads((Path(teacher.path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(config, dict) and is_multi_label(config) and not teacher.multi_label:
        raise KamalError(f"teacher {teacher.name} is multi-label (problem_type {MULTI_LABEL}) but was added as "
                         f"single-label: remove it and add it again with a task of its own (--task NAME)")


def _label_names(source: str | Path, folder: Path, config: dict, labels: list[str] | None,
                 task: str) -> tuple[list[str], bool]:
    """(the class names, whether config.json's are generic): config.json's, or the --labels that override
    generic ones; checked to be distinct, non-empty and, for a token classifier, BIO tags."""
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
    check_label_names(names, source, f"name its {num_labels} classes in order with --labels a,b,...")
    if task == "token":
        check_bio_labels(names, source)
    return names, generic


def inspect_classifier(source: str | Path, labels: list[str] | None = None) -> ModelFolder:
    """Validate a local sequence-classification folder; labels override generic names."""
    folder = _local_folder(source)
    config = read_config(folder)
    architecture, task, model_type = _classifier_kind(source, config)
    names, generic = _label_names(source, folder, config, labels, task)
    tokenizer = tokenizer_fingerprint(folder)
    if tokenizer is None:
        raise KamalError(
            f"{source} has no tokenizer files ({', '.join(TOKENIZER_FILES)}); copy in the tokenizer "
            "the model was trained with"
        )
    fingerprint = weights_fingerprint(folder)
    check_weights(folder, len(names), task)
    num_layers, hidden_size = depth_and_width(folder)

    return ModelFolder(
        path=folder,
        architecture=architecture,
        model_type=model_type,
        labels=tuple(names),
        generic_labels=generic,
        num_layers=num_layers,
        hidden_size=hidden_size,
        vocab_size=config.get("vocab_size"),
        dropout=dropout_rate(config),
        fingerprint=fingerprint,
        tokenizer_fingerprint=tokenizer,
        weight_files=tuple(p.name for p in weight_files(folder)),
        multi_label=is_multi_label(config),
    )


def check_bio_labels(names, source) -> None:
    """A token classifier's tags: one O, and B-TYPE / I-TYPE (kamal merges teachers' tags around one O)."""
    bad = [n for n in names if n != "O" and not (n[:2] in ("B-", "I-") and len(n) > 2)]
    if bad or "O" not in names:
        raise KamalError(f"{source}: a token classifier needs BIO tags (O, B-TYPE, I-TYPE); "
                         + (f"not BIO: {', '.join(bad[:4])}" if bad else "it has no O tag"))


def check_weights(folder: Path, num_labels: int, task: str = "sequence") -> None:
    """The weight files load without running pickle, and their tensors have the shapes config.json implies.

    The expected shapes come from the model built on the meta device (no memory, no weights);
    the stored ones from safetensors headers, or from a .bin opened with weights_only=True on
    the meta device. A tensor the model does not know is ignored; one it knows with another
    shape, or a model most of whose tensors are missing, is refused.
    """
    stored = _stored_shapes(folder)
    expected, prefix = _expected_shapes(folder, num_labels, task)
    found = 0
    for name, shape in expected.items():
        candidates = (name, f"{prefix}.{name}", name.removeprefix(f"{prefix}."))
        match = next((stored[c] for c in candidates if c in stored), None)
        if match is None:
            continue
        found += 1
        if tuple(match) != tuple(shape):
            raise KamalError(
                f"{folder}: weights do not match config.json: {name} has shape {tuple(match)}, "
                f"the config implies {tuple(shape)}"
            )
    if found < len(expected) / 2:
        raise KamalError(f"{folder}: weights do not match config.json: only {found} of the {len(expected)} "
                         "tensors the config implies are in the weight files")


def check_weight_files(folder: Path) -> None:
    """Every weight file is one kamal loads: a safetensors file, or a pickle of plain tensors; else one
    line naming the file (what a failed load is explained with)."""
    _stored_shapes(folder)


def _stored_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    import pickle

    shapes: dict[str, tuple[int, ...]] = {}
    for path in weight_files(folder):
        try:
            if path.suffix == ".safetensors":
                shapes.update({k: tuple(v["shape"]) for k, v in _safetensors_header(path).items()})
            else:
                shapes.update(_bin_shapes(path))
        except KamalError:
            raise
        except pickle.UnpicklingError:  # torch's weights_only refused what the pickle holds
            raise KamalError(f"{path} is not a readable weight file: {_pickle_advice(path)}") from None
        except Exception as e:  # torch/unpickling/JSON errors: the file is not what it says
            raise KamalError(f"{path} is not a readable weight file: {first_line(e, 160)}") from None
    return shapes


def _pickle_advice(path: Path) -> str:
    """Why a pickle is refused, and the one command that turns its tensors into safetensors."""
    target = path.with_name(path.name.replace("pytorch_model", "model").removesuffix(".bin") + ".safetensors")
    return ("kamal loads only safetensors, or pickles of plain tensors (torch.load with weights_only=True), and this "
            "one holds other objects; if you trust its source, convert it: python -c \"import torch; from "
            "safetensors.torch import save_file; save_file({k: v.contiguous().clone() for k, v in "
            f"torch.load('{path}', weights_only=False).items() if isinstance(v, torch.Tensor)}}, '{target}')\" "
            "and remove the .bin")


def check_causal_lm(folder: Path, given: str) -> None:
    """A text generator kamal can load: a *ForCausalLM (or *LMHeadModel) config, readable weights, no
    remote code. given: how the user named it, for the message."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = read_config(folder)
    if config.get("auto_map"):
        raise KamalError(f"{given} needs custom code from its author (auto_map in config.json); "
                         "kamal never runs remote code")
    causal = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    architectures = config.get("architectures") or []
    if architectures:
        ok = any(a in causal or a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures)
    else:
        ok = config.get("model_type") in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if not ok:
        found = ", ".join(architectures) or f"none; model type {config.get('model_type')}"
        raise KamalError(f"{given} is not a causal LM (architectures: {found}); synthesize needs a text "
                         "generator: a named one (kamal models) or a folder of a *ForCausalLM model")
    if not weight_files(folder):
        raise KamalError(f"{given}: {folder} holds no weights (model.safetensors or pytorch_model.bin)")
    check_weight_files(folder)


def _safetensors_header(path: Path) -> dict:
    import struct

    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise KamalError(f"{path} is not a safetensors file (too short)")
        size = struct.unpack("<Q", head)[0]
        if size > min(path.stat().st_size - 8, 100_000_000):
            raise KamalError(f"{path} is not a safetensors file (bad header size)")
        header = json.loads(f.read(size))
    if not isinstance(header, dict):
        raise KamalError(f"{path} is not a safetensors file (bad header)")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if not all(isinstance(v, dict) and isinstance(v.get("shape"), list) for v in tensors.values()):
        raise KamalError(f"{path} is not a safetensors file (bad header)")
    return tensors


def _bin_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    import warnings

    import torch

    with warnings.catch_warnings():  # torch warns about pickle protocols before refusing a foreign pickle
        warnings.simplefilter("ignore")
        try:
            state = torch.load(path, weights_only=True, map_location="meta", mmap=True)
        except RuntimeError:  # an old (non-zip) torch file cannot be memory-mapped
            state = torch.load(path, weights_only=True, map_location="meta")
    if not isinstance(state, dict):
        raise KamalError(f"{path} does not hold a state dict of tensors")
    return {k: tuple(v.shape) for k, v in state.items() if hasattr(v, "shape")}


def transformers_config(folder: Path):
    """config.json read by its model type's transformers config class (never remote code)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise KamalError(f"{folder}: config.json does not describe a model transformers can build: "
                         f"{first_line(e, 160)}") from None


def depth_and_width(folder: Path) -> tuple[int | None, int | None]:
    """(transformer layers, hidden size), None where the config does not say.

    Read through the config class, whose attribute_map gives every model the standard names
    (GPT-2's n_layer / n_embd, DistilBERT's n_layers / dim, T5's num_layers / d_model ...).
    """
    config = transformers_config(folder)

    def number(name: str) -> int | None:
        value = getattr(config, name, None)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    return number("num_hidden_layers"), number("hidden_size")


def _expected_shapes(folder: Path, num_labels: int, task: str) -> tuple[dict[str, tuple[int, ...]], str]:
    import torch

    config = transformers_config(folder)
    try:
        config.num_labels = num_labels
        with torch.device("meta"):
            model = auto_class(task).from_config(config, trust_remote_code=False)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise KamalError(f"{folder}: config.json does not describe a model transformers can build: "
                         f"{first_line(e, 160)}") from None
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    return shapes, model.base_model_prefix


def _head_size(folder: Path) -> int | None:
    """Rows of the classification head, read from the safetensors header (no torch)."""
    for path in weight_files(folder):
        if path.suffix != ".safetensors":
            return None
        header = _safetensors_header(path)
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


def missing_folder_line(path: Path, owner: str | None = None) -> str:
    """What a command says of a model folder that is gone (owner: "teacher NAME"), with how to re-point it."""
    if owner and owner.startswith("teacher "):
        name = owner.removeprefix("teacher ")
        how = f"kamal remove-teacher {name}, then kamal add-teacher NEW_FOLDER --name {name}"
    else:
        how = "a teacher's is re-pointed with kamal remove-teacher NAME, then kamal add-teacher NEW_FOLDER --name NAME"
    whose = f"{owner}'s folder" if owner else "model folder"
    return f"{whose} {path} is missing (moved or deleted?): move it back, or {how}"


def kamal_json(folder: Path) -> dict:
    """What kamal wrote about a model folder (kamal.json: its base, labels, training); {} when there is none."""
    try:
        meta = json.loads((Path(folder) / "kamal.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}
