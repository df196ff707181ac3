"""Loading and reshaping Hugging Face models: classifiers, students, tokenizers.

Weights load from safetensors (or a .bin with weights_only=True); remote code
never runs. Imported only by commands that run models.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Sequence

import torch
from safetensors import SafetensorError
from torch import nn

from kamalcli.errors import KamalError, first_line
from kamalcli.models.folder import auto_class, check_weight_files, missing_folder_line, task_of_folder


def quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


quiet_transformers()


def model_folder(folder: str | Path, owner: str | None = None) -> Path:
    """The folder, checked to be there: a missing one is named (owner: "teacher NAME") with how to re-point
    it, never handed to transformers, which would take the path for a hub id."""
    path = Path(folder)
    if path.is_dir():
        return path
    raise KamalError(missing_folder_line(path, owner))


_LOAD_ERRORS = (OSError, ValueError, pickle.UnpicklingError, SafetensorError)


def _loaded(load, folder: Path, failure: str):
    """load(), with a failure told in one line: the weight file at fault by name, else transformers' reason."""
    try:
        return load()
    except _LOAD_ERRORS as e:
        check_weight_files(folder)  # names a file kamal will not load (a pickle of objects, not safetensors)
        raise KamalError(f"{failure}: {first_line(e, 160)}") from None


def load_tokenizer(folder: str | Path, owner: str | None = None):
    from transformers import AutoTokenizer

    folder = model_folder(folder, owner)
    try:
        return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise KamalError(f"cannot load a tokenizer from {folder}: {first_line(e, 160)}") from None


def load_classifier(folder: str | Path, *, attn: str | None = None, owner: str | None = None) -> nn.Module:
    """A sequence or token classifier, as its config.json says."""
    folder = model_folder(folder, owner)
    kwargs = {"trust_remote_code": False}
    if attn:
        kwargs["attn_implementation"] = attn
    model = _loaded(lambda: auto_class(task_of_folder(folder)).from_pretrained(str(folder), **kwargs),
                    folder, f"cannot load a classifier from {folder}")
    model.eval()
    return model


def load_encoder(folder: str | Path) -> nn.Module:
    """A pretrained encoder without a head (AutoModel), in eval mode."""
    from transformers import AutoModel

    folder = model_folder(folder)
    model = _loaded(lambda: AutoModel.from_pretrained(str(folder), trust_remote_code=False),
                    folder, f"cannot load an encoder from {folder}")
    model.eval()
    return model


def load_causal_lm(folder: str | Path) -> nn.Module:
    """A text generator (float32, eval mode)."""
    from transformers import AutoModelForCausalLM

    folder = model_folder(folder)
    model = _loaded(lambda: AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=False,
                                                                 dtype=torch.float32),
                    folder, f"cannot load a causal LM from {folder}")
    model.eval()
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# -- Monte-Carlo dropout ------------------------------------------------------

def _is_attention_with_dropout(module: nn.Module) -> bool:
    # transformers' attention modules apply attention-probability dropout
    # functionally, gated by the attention module's own `training` flag and
    # reading the rate from its `dropout` child; flipping only nn.Dropout
    # modules would leave that dropout off.
    return type(module).__name__.endswith("Attention") and isinstance(getattr(module, "dropout", None), nn.Dropout)


def dropout_sites(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, nn.Dropout) or _is_attention_with_dropout(m)]


def enable_mc_dropout(model: nn.Module, rate: float | None = None) -> int:
    """Everything in eval mode except dropout, which samples. Returns the active dropout count.

    rate overrides every dropout probability (the teacher's own rates otherwise).
    """
    model.eval()
    active = 0
    for module in dropout_sites(model):
        if isinstance(module, nn.Dropout):
            if rate is not None:
                module.p = rate
            if module.p > 0:
                active += 1
        module.training = True  # this module only: .train() would recurse into its Linear children
    return active


def disable_mc_dropout(model: nn.Module) -> None:
    model.eval()


# -- students -------------------------------------------------------------------

def build_student(base_folder: str | Path, labels: Sequence[str], *, num_layers: int | None = None,
                  seed: int = 0, task: str = "sequence") -> nn.Module:
    """A classifier over `labels` from a base: a plain encoder or a classifier (its head is replaced).

    num_layers keeps only the first N transformer layers (a shallower student). task=token: a tag per token.
    """
    from transformers import AutoConfig

    base_folder = model_folder(base_folder)
    config = AutoConfig.from_pretrained(str(base_folder), trust_remote_code=False)
    if getattr(config, "auto_map", None):
        raise KamalError(f"{base_folder} needs custom code from its author; kamal never runs remote code")
    total = getattr(config, "num_hidden_layers", None)
    if num_layers is not None:
        if total is None or not 1 <= num_layers <= total:
            raise KamalError(f"--student-layers {num_layers}: the base has {total} layers")
        config.num_hidden_layers = num_layers
    config.num_labels = len(labels)
    config.id2label = {i: name for i, name in enumerate(labels)}
    config.label2id = {name: i for i, name in enumerate(labels)}
    config.problem_type = "single_label_classification" if task == "sequence" else None
    torch.manual_seed(seed)  # the new head's initialisation
    return _loaded(lambda: auto_class(task).from_pretrained(
        str(base_folder), config=config, ignore_mismatched_sizes=True, trust_remote_code=False
    ), base_folder, f"cannot build a student from {base_folder}")


def grow_classifier(model: nn.Module, new_labels: Sequence[str], seed: int = 0) -> nn.Module:
    """Append rows to the classification head for new labels; old rows (and ids) are kept."""
    old = find_head(model).out_features
    labels = [model.config.id2label[i] for i in range(old)] + list(new_labels)
    return rearrange_classifier(model, [*range(old), *[None] * len(new_labels)], labels, seed=seed)


def rearrange_classifier(model: nn.Module, rows: Sequence[int | None], labels: Sequence[str], seed: int = 0) -> nn.Module:
    """The classification head with one row per label: rows[i], the old row that label i keeps (its weights and
    bias), or None for a new label (drawn as the base's initializer draws, bias 0). Growing, cutting a head to one
    task's columns and laying several tasks' heads out anew are all this."""
    head = find_head(model)
    grown = nn.Linear(head.in_features, len(labels), bias=head.bias is not None)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        std = getattr(model.config, "initializer_range", 0.02)
        grown.weight.normal_(0.0, std, generator=generator)
        if grown.bias is not None:
            grown.bias.zero_()
        for i, row in enumerate(rows):
            if row is not None:
                grown.weight[i] = head.weight[row]
                if grown.bias is not None:
                    grown.bias[i] = head.bias[row]
    _set_head(model, grown)
    model.config.num_labels = len(labels)
    model.num_labels = len(labels)
    model.config.id2label = {i: name for i, name in enumerate(labels)}
    model.config.label2id = {name: i for i, name in enumerate(labels)}
    return model


def find_head(model: nn.Module) -> nn.Linear:
    head = getattr(model, "classifier", None)
    if isinstance(head, nn.Linear):
        return head
    if head is not None and isinstance(getattr(head, "out_proj", None), nn.Linear):
        return head.out_proj  # RoBERTa-style head
    raise KamalError(f"cannot find the classification head of a {type(model).__name__}")


def _set_head(model: nn.Module, linear: nn.Linear) -> None:
    head = model.classifier
    if isinstance(head, nn.Linear):
        model.classifier = linear
    else:
        head.out_proj = linear


def save_classifier(model: nn.Module, tokenizer, folder: Path, extra: dict | None = None) -> None:
    """A Hugging Face folder (safetensors), plus kamal.json with what kamal knows about it."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    if extra is not None:
        (folder / "kamal.json").write_text(json.dumps(extra, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def labels_of(folder: Path) -> list[str]:
    config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    id2label = config.get("id2label") or {}
    return [id2label[k] for k in sorted(id2label, key=int)]
