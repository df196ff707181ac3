"""Export a student (a Hugging Face classifier folder) to ONNX, checked against PyTorch.

Steps: load with eager attention -> TorchScript ONNX export (dynamic batch and
sequence axes) -> onnxruntime's transformer optimizer (fused Attention,
EmbedLayerNormalization, SkipLayerNormalization, ...) -> optional dynamic int8
quantisation -> parity on real texts -> folder published by one rename.

Eager attention on purpose: its graph is the one onnxruntime's BERT fusions
recognise; an sdpa export runs but does not fuse.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from kamalcli import __version__
from kamalcli.errors import KamalError, KamalFailure
from kamalcli.export.card import labels_table, markdown_table, render_card
from kamalcli.heads import laid_out
from kamalcli.files import publish_dir, removed_on_failure, write_json_atomic, write_text_atomic
from kamalcli.models.folder import task_of_architecture
from kamalcli.trust import conformal, scope

FP32_TOLERANCE = 1e-4  # max |logit difference| allowed between fp32 ONNX and PyTorch
INT8_MIN_AGREEMENT = 0.99  # below this argmax agreement an int8 export carries a warning
PARITY_BATCH = 8
PARITY_MAX_LENGTH = 128
QUANTIZE_CHOICES = ("int8",)
EXPORT_MARKER = ".kamal-export"  # written into every export: `--force` replaces only folders holding it
FUSED_OPS = (
    "Attention", "MultiHeadAttention", "EmbedLayerNormalization", "SkipLayerNormalization",
    "LayerNormalization", "BiasGelu", "FastGelu", "Gelu", "GemmFastGelu", "BiasSkipLayerNormalization",
    "QAttention", "QEmbedLayerNormalization",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                   "merges.txt", "vocab.json", "added_tokens.json", "sentencepiece.bpe.model", "spiece.model")
INPUT_ORDER = ("input_ids", "attention_mask", "token_type_ids")
# Every file an ONNX export may write (a fast tokenizer's save_pretrained may add its chat template): what
# `--force` may replace in an export whose marker predates its list of files.
TRUST_FILES = (scope.FILE, scope.TASKS_FILE, conformal.FILE, conformal.TASKS_FILE)  # the scope(s) and calibration(s) it has
WRITTEN_FILES = frozenset({"model.onnx", "labels.json", "config.json", "README.md", "export.json", EXPORT_MARKER,
                           *TOKENIZER_FILES, *TRUST_FILES, "chat_template.jinja", "chat_template.json"})


@dataclass
class ExportResult:
    path: Path  # the published folder
    opset: int
    quantize: str | None
    parity: dict[str, Any]
    size_bytes: int  # model.onnx
    providers: list[str]  # onnxruntime providers the parity check ran on
    fused_op_counts: dict[str, int] = field(default_factory=dict)  # fused operator types in model.onnx
    optimized: bool = True
    fp32_size_bytes: int = 0
    parameters: int = 0
    inputs: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what happened that the user may want to know
    warnings: list[str] = field(default_factory=list)  # what the CLI should print as a warning
    per_token: bool = False  # a token classifier: logits per token, no `features` output
    heads: list[dict] = field(default_factory=list)  # a several-task student's tasks: a probabilities output each

    @property
    def model_path(self) -> Path:
        return self.path / "model.onnx"

    @property
    def fused_ops(self) -> list[str]:
        return sorted(self.fused_op_counts)


# -- quiet tools ----------------------------------------------------------------

@contextlib.contextmanager
def _quiet_tools() -> Iterator[None]:
    """Exporter warnings and the onnxruntime tools' log lines, kept off the terminal.

    onnxruntime.quantization logs through the root logger (logging.warning),
    which would install a stderr handler on first use; a NullHandler prevents that.
    """
    root = logging.getLogger()
    names = ["onnxruntime", "onnx", "torch.onnx", "fusion", "onnx_model", "onnx_model_bert"]
    saved = [(root, root.level)] + [(logging.getLogger(n), logging.getLogger(n).level) for n in names]
    null = logging.NullHandler()
    root.addHandler(null)
    for logger, _ in saved:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)
        root.removeHandler(null)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


# -- steps --------------------------------------------------------------------

def _input_names(model, tokenizer) -> list[str]:
    accepted = set(inspect.signature(model.forward).parameters)
    produced = set(getattr(tokenizer, "model_input_names", INPUT_ORDER))
    names = [n for n in INPUT_ORDER if n in accepted and (n in produced or n == "input_ids")]
    if "input_ids" not in accepted:
        raise KamalError(f"a {type(model).__name__} takes no input_ids: kamal exports text classifiers only")
    return names


def _inputs_kept(path: Path, names: list[str]) -> list[str]:
    """The inputs the exported graph takes: the exporter drops one the model ignores (a DeBERTa-v2 with
    type_vocab_size 0, as deberta-v3 ships, reads no token_type_ids), and a feed naming it would fail."""
    import onnx

    kept = {i.name for i in onnx.load(str(path), load_external_data=False).graph.input}
    return [n for n in names if n in kept]


def _dummy_inputs(tokenizer, names: list[str]):
    import torch

    # Two texts of different lengths: the traced graph sees real padding.
    enc = tokenizer(["an example sentence for the export, long enough", "short"], padding=True,
                    return_tensors="pt")
    if int(enc["attention_mask"].min()) != 0:
        raise KamalError("the tokenizer does not pad: cannot export with a dynamic sequence axis")
    return tuple(enc[n].to(torch.long) if n in enc else torch.zeros_like(enc["input_ids"]) for n in names)


def _torch_export(model, tokenizer, names: list[str], path: Path, opset: int) -> None:
    import torch

    per_token = is_token_classifier(model)
    heads = model_heads(model)

    class Outputs(torch.nn.Module):
        """logits; a text classifier's last-layer first-token vector too (`features`: its rmd scope reads it); a
        student of several tasks, each task's probabilities too (softmax over its columns, or a sigmoid per label)."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            out = self.inner(**dict(zip(names, args)), return_dict=True, output_hidden_states=not per_token)
            if per_token:
                return out.logits
            tasks = [torch.sigmoid(out.logits[:, h.columns]) if h.multi_label
                     else torch.softmax(out.logits[:, h.columns], dim=-1) for h in heads]
            return (out.logits, out.hidden_states[-1][:, 0], *tasks)

    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["logits"] = {0: "batch", 1: "sequence"} if per_token else {0: "batch"}
    outputs = output_names(per_token, heads)
    if not per_token:
        axes.update({name: {0: "batch"} for name in outputs[1:]})
    with torch.inference_mode(False), torch.no_grad():
        torch.onnx.export(
            Outputs(model).eval(), _dummy_inputs(tokenizer, names), str(path),
            input_names=names, output_names=outputs, dynamic_axes=axes,
            opset_version=opset, do_constant_folding=True, dynamo=False,
        )


def _heads_and_hidden(config) -> tuple[int, int]:
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_heads", None) or 0
    hidden = getattr(config, "hidden_size", None) or getattr(config, "dim", None) or 0
    return int(heads), int(hidden)


def _optimize(raw: Path, out: Path, config) -> tuple[bool, dict[str, int], str | None]:
    """onnxruntime's transformer optimizer; (optimized?, fused op counts, why not)."""
    heads, hidden = _heads_and_hidden(config)
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        optimized = optimize_model(str(raw), model_type="bert", num_heads=heads, hidden_size=hidden,
                                   use_gpu=False)
        optimized.save_model_to_file(str(out))
    except Exception as e:  # the optimizer is best effort: keep the plain export
        return False, {}, f"onnxruntime's optimizer failed ({_first_line(e)}); kept the plain export"
    return True, _fused_counts(out), None


def _fused_counts(path: Path) -> dict[str, int]:
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        if node.op_type in FUSED_OPS:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def _quantize_int8(src: Path, dst: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Fused contrib ops defeat ONNX shape inference; their outputs are float.
    # Per-channel weight scales: measured on MiniLM-L6, ~40% less logit error
    # than per-tensor at the same speed and +0.5% file size.
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


# -- parity -------------------------------------------------------------------

@dataclass
class _Batches:
    feeds: list[dict[str, np.ndarray]]
    ids: list[list[list[int]]]  # per batch, per row: the unpadded ids
    padded: int  # batches that hold padding


def _encode(tokenizer, texts: Sequence[str], names: list[str], max_length: int, batch: int) -> _Batches:
    feeds, ids, padded = [], [], 0
    for start in range(0, len(texts), batch):
        enc = tokenizer(list(texts[start:start + batch]), padding=True, truncation=True, max_length=max_length,
                        return_tensors="np")
        feed = {n: np.asarray(enc[n], dtype=np.int64) if n in enc else np.zeros_like(enc["input_ids"], dtype=np.int64)
                for n in names}
        mask = feed.get("attention_mask", np.ones_like(feed["input_ids"]))
        padded += int(mask.min() == 0)
        feeds.append(feed)
        ids.append([row[m.astype(bool)].tolist() for row, m in zip(feed["input_ids"], mask)])
    return _Batches(feeds, ids, padded)


def is_token_classifier(model) -> bool:
    return task_of_architecture(type(model).__name__) == "token"


def output_names(per_token: bool, heads=()) -> list[str]:
    """logits (and a text classifier's features), then one probabilities output per task of a several-task student."""
    return ["logits"] if per_token else ["logits", "features", *(task_output(h.name) for h in heads)]


def task_output(task: str) -> str:
    return f"probabilities_{task}"


def model_heads(model) -> list:
    """A several-task student's heads (kamalcli/heads.py); none for a one-task student or a token model."""
    from kamalcli.heads import KEY

    listed = getattr(model.config, KEY, None)
    return laid_out(listed) if listed and not is_token_classifier(model) else []


def _task_parity(path: Path, batches: _Batches, reference: np.ndarray, heads, rows: int) -> dict:
    """Each task's probabilities output against the same function of PyTorch's logits; a KamalFailure past the
    tolerance."""
    from kamalcli.export.runtime import create_session

    session = create_session(path, "cpu")
    names = [task_output(h.name) for h in heads]
    got = [np.concatenate(parts).astype(np.float64) for parts in zip(*(session.run(names, f) for f in batches.feeds))]
    worst = max(float(np.abs(g - h.probabilities(reference)).max()) for g, h in zip(got, heads))
    if not worst <= FP32_TOLERANCE:
        raise KamalFailure(f"export failed parity: max |task probability difference| {worst:.2e} > {FP32_TOLERANCE:g} "
                           f"against PyTorch on {rows} texts")
    return {"tasks_max_abs_diff": worst}


def _real_rows(logits: np.ndarray, feed: dict[str, np.ndarray]) -> np.ndarray:
    """A sequence classifier's (B, |Y|) as it is; a token classifier's (B, T, |Y|) -> one row per real token
    (padding left out), so that parity compares every token of batches of any width."""
    if logits.ndim == 2:
        return logits
    mask = feed.get("attention_mask", np.ones(logits.shape[:2], dtype=np.int64)).astype(bool)
    return logits[mask]


def _torch_reference(model, batches: _Batches, *, features: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """PyTorch's logits on the parity batches and, for a text classifier, its `features` (the last layer's
    first-token vectors), from one pass."""
    import torch

    logits, vectors = [], []
    with torch.inference_mode():
        for feed in batches.feeds:
            out = model(**{k: torch.from_numpy(v) for k, v in feed.items()}, output_hidden_states=features)
            logits.append(_real_rows(out.logits.float().numpy(), feed))
            if features:
                vectors.append(out.hidden_states[-1][:, 0].float().numpy())
    return (np.concatenate(logits).astype(np.float64),
            np.concatenate(vectors).astype(np.float64) if features else None)


def _ort_outputs(session, batches: _Batches, features: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The session's logits on the parity batches and, when asked, its `features` (what an rmd scope reads), from
    one pass."""
    names = ["logits", "features"] if features else ["logits"]
    logits, vectors = [], []
    for feed in batches.feeds:
        out = session.run(names, feed)
        logits.append(_real_rows(out[0], feed))
        if features:
            vectors.append(out[1])
    return (np.concatenate(logits).astype(np.float64),
            np.concatenate(vectors).astype(np.float64) if features else None)


def _run(path: Path, batches: _Batches, features: bool = False) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """(providers, logits, features or None) of an ONNX file on the parity batches, on the CPU."""
    from kamalcli.export.runtime import create_session

    try:
        session = create_session(path, "cpu")
        return list(session.get_providers()), *_ort_outputs(session, batches, features)
    except Exception as e:  # onnxruntime's own error types
        raise KamalFailure(f"onnxruntime cannot run {path.name}: {_first_line(e)}") from None


def _compare(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    diff = np.abs(got - ref)
    return {
        "max_abs_diff": float(diff.max()) if diff.size else 0.0,
        "mean_abs_diff": float(diff.mean()) if diff.size else 0.0,
        "argmax_agreement": float((got.argmax(-1) == ref.argmax(-1)).mean()) if len(ref) else 1.0,
    }


def _tokenizer_agreement(tokenizer, truncation_side: str, texts: Sequence[str], batches: _Batches,
                         max_length: int) -> float:
    """Share of texts the exported tokenizer.json (tokenizers alone) encodes exactly like transformers."""
    tokenizer.enable_truncation(max_length, direction=truncation_side)
    mine = [e.ids for e in tokenizer.encode_batch(list(texts))]
    theirs = [row for batch in batches.ids for row in batch]
    return float(np.mean([a == b for a, b in zip(mine, theirs)])) if texts else 1.0


# -- folder contents ----------------------------------------------------------

def _copy_tokenizer(student: Path, staging: Path, tokenizer) -> None:
    copied = False
    for name in TOKENIZER_FILES:
        if (student / name).is_file():
            shutil.copy2(student / name, staging / name)
            copied = True
    if not (staging / "tokenizer.json").is_file():
        # An older folder without tokenizer.json: a fast tokenizer writes one.
        if copied:
            for name in TOKENIZER_FILES:
                (staging / name).unlink(missing_ok=True)
        if getattr(tokenizer, "backend_tokenizer", None) is None:
            raise KamalError(f"{student} has no tokenizer.json and no fast tokenizer to write one")
        tokenizer.save_pretrained(str(staging))
        if not (staging / "tokenizer.json").is_file():
            raise KamalError(f"{student}: the tokenizer cannot be saved as tokenizer.json")


def _usage(names: list[str], pad_id: int, pad_token: str, max_length: int) -> str:
    attr = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
    feed = "".join(f'    "{n}": np.array([e.{attr[n]} for e in enc], dtype=np.int64),\n' for n in names)
    return (
        "# with kamal installed: kamal predict NAME --onnx, or\n"
        "# from kamalcli.export.runtime import OnnxClassifier; OnnxClassifier(folder).predict([...])\n"
        "import json\n\nimport numpy as np\nimport onnxruntime as ort\nfrom tokenizers import Tokenizer\n\n"
        'tokenizer = Tokenizer.from_file("tokenizer.json")\n'
        f"tokenizer.enable_truncation({min(128, max_length)})\n"
        f"tokenizer.enable_padding(pad_id={pad_id}, pad_token={json.dumps(pad_token)})\n"
        'labels = json.load(open("labels.json"))\n'
        'session = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])\n\n'
        'enc = tokenizer.encode_batch(["first text", "a second, longer text"])\n'
        "feed = {\n" + feed + "}\n"
        'logits = session.run(["logits"], feed)[0]\n'
        "print([labels[i] for i in logits.argmax(-1)])"
    )


def _card_fields(result: ExportResult, student: Path, usage: str, extra: dict | None) -> dict[str, Any]:
    """Card fields: what the export knows, then the student's kamal.json, then the caller's."""
    parity = result.parity
    fields: dict[str, Any] = {
        "name": student.name,
        "num_labels": len(result.labels),
        "labels_table": labels_table(result.labels),
        "kamal_version": __version__,
        "opset": result.opset,
        "quantization": "; dynamic int8 quantisation (QInt8 per-channel weights)" if result.quantize == "int8" else "",
        "parity_rows": parity["rows"],
        "parity_max_abs": f"{parity['max_abs_diff']:.2e}",
        "parity_argmax": f"{parity['argmax_agreement']:.4f}",
        "size_mb": f"{result.size_bytes / 1e6:.1f}",
        "usage": usage,
    }
    fields.update(_kamal_json_fields(student / "kamal.json"))
    fields.update({k: v for k, v in (extra or {}).items() if v is not None})
    return fields


def _kamal_json_fields(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(meta, dict):
        return {}
    fields = {k: meta[k] for k in ("name", "method", "base", "transfer_data", "select_by", "seed")
              if meta.get(k) not in (None, "")}
    if isinstance(meta.get("options"), dict):
        fields["options"] = ", ".join(f"{k}={v}" for k, v in sorted(meta["options"].items())) or "defaults"
    teachers = meta.get("teachers")
    if isinstance(teachers, list) and teachers:
        rows = [(t.get("name", "-"), ", ".join(map(str, t.get("labels") or [])) or "-")
                for t in teachers if isinstance(t, dict)]
        fields["num_teachers"] = len(rows)
        fields["teachers_table"] = markdown_table(["teacher", "labels"], rows)
    if meta.get("parent"):
        fields["lineage"] = f"extends {meta['parent']}"
    aliases = meta.get("label_aliases")
    if isinstance(aliases, dict) and aliases and isinstance(meta.get("labels"), list):
        fields["labels_table"] = labels_table(meta["labels"], aliases)
    return fields


# -- the export -------------------------------------------------------------------

def _staging_dir(out_dir: Path) -> Path:
    return out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"


def export_onnx(student_folder: Path, out_dir: Path, *, quantize: str | None = None, parity_texts: list[str],
                opset: int = 17, optimize: bool = True, card_fields: dict | None = None,
                overwrite: bool = False, before_publish: Callable[[], None] | None = None) -> ExportResult:
    """Export `student_folder` into `out_dir` (complete, or not there at all). before_publish runs just before
    out_dir is replaced: the caller's last look at what is there now (a KamalError keeps it)."""
    student_folder, out_dir = Path(student_folder), Path(out_dir)
    if quantize is not None and quantize not in QUANTIZE_CHOICES:
        raise KamalError(f"unknown quantisation {quantize!r}: use {', '.join(QUANTIZE_CHOICES)}")
    if not (student_folder / "config.json").is_file():
        raise KamalError(f"{student_folder} is not a model folder (no config.json)")
    if out_dir.exists() and not overwrite:
        raise KamalError(f"{out_dir} already exists (use --force to replace it)")
    texts = [str(t) for t in parity_texts if str(t).strip()]
    if not texts:
        raise KamalError("export needs some real texts for its parity check")
    if not 11 <= opset <= 20:
        raise KamalError(f"opset {opset} is not supported: use 11 to 20")

    from kamalcli.export.runtime import import_ort

    import_ort()  # before anything else imports it, so its telemetry files go to kamal's cache
    staging = _staging_dir(out_dir)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
    except OSError as e:
        raise KamalError(f"cannot write to {out_dir.parent}: {e.strerror}") from None
    with removed_on_failure(staging):
        result = _export_into(staging, student_folder, out_dir, quantize=quantize, texts=texts, opset=opset,
                              optimize=optimize, card_fields=card_fields)
        _write_marker(staging, student_folder)
        if out_dir.exists() and not overwrite:  # appeared while we worked
            raise KamalError(f"{out_dir} already exists (use --force to replace it)")
        if before_publish is not None:
            before_publish()
        publish_dir(staging, out_dir)
    return result


def _write_marker(staging: Path, student_folder: Path) -> None:
    """The marker `--force` looks for, with the files this export wrote: the only ones it may replace."""
    files = sorted({p.name for p in staging.iterdir()} | {EXPORT_MARKER})
    write_json_atomic(staging / EXPORT_MARKER, {"kamal_version": __version__, "source": str(student_folder),
                                                "files": files})


@dataclass
class _Fp32Model:
    """The fp32 ONNX file the export keeps (optimised, or the plain export) and what is known of it."""
    path: Path
    raw: Path  # the plain export, the fallback
    optimized: bool = False
    counts: dict[str, int] = field(default_factory=dict)  # fused operator types
    providers: list[str] = field(default_factory=list)
    logits: Any = None  # np.ndarray on the parity batches
    features: Any = None  # np.ndarray on the parity batches, for a text classifier
    parity: dict[str, float] = field(default_factory=dict)

    def fall_back(self) -> None:
        self.optimized, self.counts, self.path = False, {}, self.raw


def _load_student(student: Path):
    """(model, tokenizer, labels, input names) of the student, the model in fp32 with eager attention."""
    from kamalcli.models.loading import labels_of, load_classifier, load_tokenizer

    model = load_classifier(student, attn="eager").float()
    tokenizer = load_tokenizer(student)
    config = model.config
    labels = labels_of(student)
    if len(labels) != config.num_labels:
        raise KamalError(f"{student}: config.json names {len(labels)} labels but the head has {config.num_labels}")
    return model, tokenizer, labels, _input_names(model, tokenizer)


def _export_fp32(model, tokenizer, names: list[str], work: Path, opset: int, optimize: bool,
                 notes: list[str]) -> _Fp32Model:
    """TorchScript export to raw.onnx, then onnxruntime's optimizer (best effort) when asked."""
    raw = work / "raw.onnx"
    fp32 = _Fp32Model(path=raw, raw=raw)
    with _quiet_tools():
        try:
            _torch_export(model, tokenizer, names, raw, opset)
        except KamalError:
            raise
        except Exception as e:
            raise KamalFailure(f"ONNX export failed: {_first_line(e)}") from None
        if optimize:
            optimized, counts, why = _optimize(raw, work / "optimized.onnx", model.config)
            fp32.optimized, fp32.counts = optimized, counts
            if optimized:
                fp32.path = work / "optimized.onnx"
            if why:
                notes.append(why)
    return fp32


def _check_parity(fp32: _Fp32Model, batches: _Batches, reference: np.ndarray, reference_features: np.ndarray | None,
                  rows: int, notes: list[str]) -> None:
    """Run the fp32 model and compare it with PyTorch (logits, and `features` when given); an optimised model
    that cannot run or misses parity falls back to the plain export; a KamalFailure if the kept model misses
    parity."""
    features = reference_features is not None
    try:
        fp32.providers, fp32.logits, fp32.features = _run(fp32.path, batches, features)
    except KamalFailure as e:
        if not fp32.optimized:
            raise
        notes.append(f"onnxruntime cannot run the optimised model ({e}); kept the plain export")
        fp32.fall_back()
        fp32.providers, fp32.logits, fp32.features = _run(fp32.path, batches, features)
    fp32.parity = _compare(fp32.logits, reference)
    if fp32.parity["max_abs_diff"] > FP32_TOLERANCE and fp32.optimized:
        # The fusions are the likelier culprit: fall back to the plain graph if that one passes.
        _, plain_logits, plain_features = _run(fp32.raw, batches, features)
        plain_parity = _compare(plain_logits, reference)
        if plain_parity["max_abs_diff"] <= FP32_TOLERANCE:
            notes.append(f"the optimised model missed parity (max |logit diff| {fp32.parity['max_abs_diff']:.2e}); "
                         "kept the plain export")
            fp32.fall_back()
            fp32.logits, fp32.features, fp32.parity = plain_logits, plain_features, plain_parity
    if not fp32.parity["max_abs_diff"] <= FP32_TOLERANCE:  # also catches NaN
        raise KamalFailure(f"export failed parity: max |logit difference| {fp32.parity['max_abs_diff']:.2e} "
                           f"> {FP32_TOLERANCE:g} against PyTorch on {rows} texts")
    if features:
        fp32.parity["features_max_abs_diff"] = float(np.abs(fp32.features - reference_features).max())


def _quantize_checked(fp32: _Fp32Model, final: Path, batches: _Batches, reference: np.ndarray,
                      parity: dict[str, Any], rows: int, result_warnings: list[str]) -> dict[str, int]:
    """int8 `final` from the fp32 model, its agreement with PyTorch and with fp32 ONNX recorded in `parity`;
    returns its fused op counts."""
    with _quiet_tools():
        try:
            _quantize_int8(fp32.path, final)
        except Exception as e:
            raise KamalFailure(f"int8 quantisation failed: {_first_line(e)}") from None
    _, int8_logits, _ = _run(final, batches)
    vs_torch = _compare(int8_logits, reference)
    vs_fp32 = _compare(int8_logits, fp32.logits)
    parity.update(vs_torch)
    parity.update({
        "tolerance": None,
        "fp32": fp32.parity,
        "argmax_agreement_vs_fp32_onnx": vs_fp32["argmax_agreement"],
        "max_abs_diff_vs_fp32_onnx": vs_fp32["max_abs_diff"],
        "min_argmax_agreement": INT8_MIN_AGREEMENT,
    })
    worst = min(vs_torch["argmax_agreement"], vs_fp32["argmax_agreement"])
    if worst < INT8_MIN_AGREEMENT:
        result_warnings.append(
            f"int8 model agrees with the fp32 model on only {worst:.1%} of {rows} texts "
            f"(max |logit difference| {vs_torch['max_abs_diff']:.3f}); consider the fp32 export")
    return _fused_counts(final)


def _size_notes(fp32_size: int, parameters: int) -> list[str]:
    """A note when the fp32 file is far from 4 bytes a parameter (int8 is about a quarter of that)."""
    ratio = fp32_size / (4 * parameters) if parameters else 1.0
    if not 0.9 <= ratio <= 1.2:
        return [f"fp32 model.onnx is {ratio:.2f}x 4 bytes per parameter ({fp32_size} bytes, {parameters} parameters)"]
    return []


def _copy_student_files(staging: Path, student: Path, tokenizer, labels: list[str]) -> None:
    (staging / "labels.json").write_text(json.dumps(labels, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    shutil.copy2(student / "config.json", staging / "config.json")
    copy_trust_files(student, staging)
    _copy_tokenizer(student, staging, tokenizer)


def copy_trust_files(student: Path, staging: Path) -> None:
    """The student's scope and calibration (kamalcli/trust), where it has them: the export answers as it does."""
    for name in TRUST_FILES:
        if (student / name).is_file():
            shutil.copy2(student / name, staging / name)


def _check_tokenizer_json(staging: Path, texts: list[str], batches: _Batches, parity_length: int,
                          parity: dict[str, Any], result_warnings: list[str]) -> tuple[int, str]:
    """The exported tokenizer.json's agreement with transformers, into `parity`; returns (pad_id, pad_token)."""
    from kamalcli.export.runtime import load_fast_tokenizer

    fast_tokenizer, pad_id, pad_token, _, truncation_side = load_fast_tokenizer(staging)
    parity["tokenizer_agreement"] = _tokenizer_agreement(fast_tokenizer, truncation_side, texts, batches, parity_length)
    if parity["tokenizer_agreement"] < 1.0:
        result_warnings.append(
            f"tokenizer.json alone encodes {1 - parity['tokenizer_agreement']:.1%} of the parity texts differently "
            "from transformers; predictions outside kamal may differ")
    return pad_id, pad_token


def _write_manifest(staging: Path, result: ExportResult, student: Path, max_length: int) -> None:
    """export.json: what was exported, how it was checked, and with which versions."""
    import onnxruntime
    import torch
    import transformers

    write_json_atomic(staging / "export.json", {
        "format": "onnx",
        "opset": result.opset,
        "quantize": result.quantize,
        "parity": result.parity,
        "kamal_version": __version__,
        "providers": result.providers,
        "optimized": result.optimized,
        "fused_ops": result.fused_op_counts,
        "inputs": result.inputs,
        "outputs": output_names(result.per_token, laid_out(result.heads)),
        **({"tasks": result.heads} if result.heads else {}),
        "max_length": max_length,
        "num_labels": len(result.labels),
        "parameters": result.parameters,
        "sizes": {"model_onnx": result.size_bytes, "fp32_onnx": result.fp32_size_bytes},
        "source": str(student),
        "versions": {"onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "notes": result.notes,
        "warnings": result.warnings,
    })


def _export_into(staging: Path, student: Path, out_dir: Path, *, quantize: str | None, texts: list[str],
                 opset: int, optimize: bool, card_fields: dict | None) -> ExportResult:
    """Fill `staging`: model.onnx checked against PyTorch, labels, config, tokenizer, card and manifest."""
    from kamalcli.models.batching import token_limit
    from kamalcli.models.loading import count_parameters

    work = staging / ".work"
    work.mkdir()
    model, tokenizer, labels, names = _load_student(student)
    notes: list[str] = []
    result_warnings: list[str] = []
    fp32 = _export_fp32(model, tokenizer, names, work, opset, optimize, notes)
    names = _inputs_kept(fp32.raw, names)

    # Parity of the fp32 model against PyTorch eager, on real texts with padding.
    max_length = token_limit(model.config, tokenizer)
    parity_length = min(PARITY_MAX_LENGTH, max_length)
    batches = _encode(tokenizer, texts, names, parity_length, PARITY_BATCH)
    per_token = is_token_classifier(model)
    reference, reference_features = _torch_reference(model, batches, features=not per_token)
    _check_parity(fp32, batches, reference, reference_features, len(texts), notes)
    heads = model_heads(model)
    parity: dict[str, Any] = {
        "rows": len(texts), "batch_size": PARITY_BATCH, "max_length": parity_length,
        "padded_batches": batches.padded, "batches": len(batches.feeds), "reference": "pytorch eager fp32",
        "tolerance": FP32_TOLERANCE, **fp32.parity,
        **(_task_parity(fp32.path, batches, reference, heads, len(texts)) if heads else {}),
    }

    fp32_size = fp32.path.stat().st_size
    final = staging / "model.onnx"
    if quantize == "int8":
        counts = _quantize_checked(fp32, final, batches, reference, parity, len(texts), result_warnings)
    else:
        os.replace(fp32.path, final)
        counts = fp32.counts
    size = final.stat().st_size
    parameters = count_parameters(model)
    notes.extend(_size_notes(fp32_size, parameters))

    _copy_student_files(staging, student, tokenizer, labels)
    pad_id, pad_token = _check_tokenizer_json(staging, texts, batches, parity_length, parity, result_warnings)
    shutil.rmtree(work)

    result = ExportResult(
        path=out_dir, opset=opset, quantize=quantize, parity=parity, size_bytes=size, providers=fp32.providers,
        fused_op_counts=counts, optimized=fp32.optimized, fp32_size_bytes=fp32_size,
        parameters=parameters, inputs=names, labels=labels, notes=notes, warnings=result_warnings,
        per_token=per_token, heads=[h.as_json() for h in heads],
    )
    usage = _usage(names, pad_id, pad_token, max_length)
    write_text_atomic(staging / "README.md",
                      render_card(_card_fields(result, student, usage, card_fields)))
    _write_manifest(staging, result, student, max_length)
    return result
