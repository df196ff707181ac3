"""kamal export --hf: the student as a plain Hugging Face folder with a Hub model card.

The folder is what `transformers.pipeline("text-classification", model=folder)`
(a token student: "token-classification") and `huggingface_hub.upload_folder`
expect: safetensors weights, config.json with the labels, tokenizer files and
README.md. Before it is published, the staged folder is loaded with that very
pipeline and must agree with kamal's own predictions (a token student: the
student's own probability of every sub-token's top tag). Like the ONNX export it is written to a temporary folder and
renamed into place, and export.json (with its "format") marks it as a kamal export,
so `--force` may replace it (and nothing else) without a hidden file in the folder.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from kamalcli import __version__
from kamalcli.errors import KamalFailure
from kamalcli.files import write_json_atomic, write_text_atomic
from kamalcli.export.onnx import TRUST_FILES

MARKER = "export.json"
CHECK_ROWS = 64
CHECK_TOLERANCE = 1e-4
LEFT_OUT = {"kamal.json", "kamal-notes.json"}  # kamal's own record (the card says the same for people); notes predict said
# Besides the tokenizer's files (onnx.TOKENIZER_FILES): what a student folder holds and this export adds.
# `--force` replaces an export whose marker lists no files only when it holds nothing else.
WRITTEN_FILES = frozenset({"config.json", "model.safetensors", "generation_config.json", "README.md", MARKER,
                           *TRUST_FILES})


def has_marker(folder: Path) -> bool:
    try:
        return "format" in json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


@dataclass
class HfExport:
    path: Path
    files: list[str]
    size_bytes: int
    check: dict

    def as_json(self) -> dict:
        return {"path": str(self.path), "format": "hf", "files": self.files, "size_bytes": self.size_bytes,
                "check": self.check}


def write_hf_folder(staging: Path, folder: Path, student, texts: list[str], fields: dict) -> HfExport:
    """The student's folder copied into `staging`, checked through transformers.pipeline, with a model card and
    the export's manifest."""
    from kamalcli.export.card import labels_table, render_card

    for item in sorted(folder.iterdir()):
        if item.is_file() and item.name not in LEFT_OUT:
            shutil.copy2(item, staging / item.name)
    token = getattr(student, "task", "sequence") == "token"
    check = (token_pipeline_check if token else pipeline_check)(staging, student, texts)
    fields = {**fields, "kamal_version": __version__, "num_labels": len(student.labels),
              "labels_table": labels_table(list(student.labels), student.aliases.as_json()), "check_rows": check["rows"],
              "check_max_abs": f"{check['max_abs_diff']:.2e}", "check_argmax": f"{check['argmax_agreement']:.4f}"}
    write_text_atomic(staging / "README.md", render_card(fields, kind="hf"))
    files = sorted(p.name for p in staging.iterdir()) + [MARKER]
    write_json_atomic(staging / MARKER, {
        "format": "hf", "kamal_version": __version__, "student": student.name, "source": str(folder),
        "labels": list(student.labels), "check": check, "files": files,
    })
    size = sum(p.stat().st_size for p in staging.iterdir())
    return HfExport(path=staging, files=files, size_bytes=size, check=check)


def pipeline_check(folder: Path, student, texts: list[str]) -> dict:
    """The exported folder through transformers' text-classification pipeline against kamal's own predictions."""
    import numpy as np
    from transformers import pipeline

    from kamalcli.models.inference import classifier_probs

    max_length = student.max_length
    try:
        classifier = pipeline("text-classification", model=str(folder), device="cpu", trust_remote_code=False)
        outputs = classifier(texts, top_k=None, truncation=True, max_length=max_length)
    except Exception as e:  # whatever transformers raises: the folder is not usable as promised
        from kamalcli.errors import first_line

        raise KamalFailure(f"the exported folder does not load in transformers.pipeline: {first_line(e, 200)}") from None
    labels, reference = list(student.labels), classifier_probs(student.folder, texts, max_length, device="cpu")
    got = np.zeros_like(reference)
    for row, scores in enumerate(outputs):
        for item in scores:
            got[row, labels.index(item["label"])] = item["score"]
    diff = float(np.abs(got - reference).max())
    check = {"rows": len(texts), "max_abs_diff": diff, "tolerance": CHECK_TOLERANCE, "max_length": max_length,
             "argmax_agreement": float((got.argmax(1) == reference.argmax(1)).mean()),
             "reference": "kamal predict (PyTorch)", "loader": "transformers.pipeline('text-classification')"}
    if not diff <= CHECK_TOLERANCE:  # also catches NaN
        raise KamalFailure(f"the exported folder disagrees with the student in transformers.pipeline: max |probability "
                           f"difference| {diff:.2e} > {CHECK_TOLERANCE:g} on {len(texts)} texts")
    return check


def token_pipeline_check(folder: Path, student, texts: list[str]) -> dict:
    """The exported folder through transformers' token-classification pipeline (no aggregation, every tag kept)
    against the student's own softmax on the same sub-tokens: the top tag and its probability per sub-token.

    The pipeline reads the raw text's sub-tokens, while `kamal predict` reads each word at its first
    sub-token (CJK characters one word each), so entities grouped by the pipeline may differ from kamal's;
    the weights and tags checked here do not. Texts longer than the student's max length are left out
    (the pipeline does not truncate)."""
    import numpy as np
    import torch
    from transformers import pipeline

    from kamalcli.errors import first_line
    from kamalcli.models.loading import load_classifier, load_tokenizer

    max_length = student.max_length
    tokenizer, model = load_tokenizer(folder), load_classifier(folder).eval()
    encoded = [tokenizer(t, return_special_tokens_mask=True) for t in texts]
    kept = [(t, e) for t, e in zip(texts, encoded) if len(e["input_ids"]) <= max_length]
    if not kept:
        raise KamalFailure(f"no text of at most {max_length} tokens to check the export with")
    try:
        tagger = pipeline("token-classification", model=str(folder), device="cpu", trust_remote_code=False,
                          aggregation_strategy="none", ignore_labels=[])
        outputs = tagger([t for t, _ in kept])
    except Exception as e:  # whatever transformers raises: the folder is not usable as promised
        raise KamalFailure(f"the exported folder does not load in transformers.pipeline: {first_line(e, 200)}") from None
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    diffs, same = [], []
    for (_, enc), items in zip(kept, outputs):
        inputs = {k: torch.tensor([v]) for k, v in enc.items() if k != "special_tokens_mask"}
        with torch.no_grad():
            probs = torch.softmax(model(**inputs).logits[0], dim=-1).numpy()
        real = [i for i, special in enumerate(enc["special_tokens_mask"]) if not special]
        by_index = {item["index"]: item for item in items}
        if sorted(by_index) != real:
            raise KamalFailure("the exported folder disagrees with the student in transformers.pipeline: "
                               "other sub-tokens were tagged")
        for i in real:
            diffs.append(abs(float(by_index[i]["score"]) - float(probs[i].max())))
            same.append(by_index[i]["entity"] == labels[int(probs[i].argmax())])
    diff = float(max(diffs)) if diffs else 0.0
    check = {"rows": len(kept), "sub_tokens": len(diffs), "max_abs_diff": diff, "tolerance": CHECK_TOLERANCE,
             "max_length": max_length, "argmax_agreement": float(np.mean(same)) if same else 1.0,
             "reference": "the student (PyTorch), per sub-token",
             "loader": "transformers.pipeline('token-classification')"}
    if not diff <= CHECK_TOLERANCE or not all(same):
        raise KamalFailure(f"the exported folder disagrees with the student in transformers.pipeline: max |probability "
                           f"difference| {diff:.2e}, top tag agreement {check['argmax_agreement']:.4f} on "
                           f"{len(kept)} texts")
    return check
