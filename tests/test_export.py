"""ONNX export (parity, dynamic axes, int8, atomic folder, model card) and the torch-free runtime."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kamalcli.errors import KamalError
from tiny import make_classifier, topic_rows, vocabulary

LABELS = ["world", "sports", "business", "health"]
HAS_GPU = Path("/dev/nvidia0").exists()


def _texts(n: int = 27, seed: int = 3) -> list[str]:
    texts = [r["text"] for r in topic_rows(LABELS, n // len(LABELS) + 1, seed=seed)][:n]
    # very different lengths in the same batches: padding everywhere
    return texts + ["goal " * 90, "a", "market shares fell today in a big week for the bank and its revenue"]


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    return make_classifier(tmp_path_factory.mktemp("student") / "s1", LABELS, seed=1, dropout=0.0)


@pytest.fixture(scope="module")
def exported(student, tmp_path_factory):
    from kamalcli.export.onnx import export_onnx

    out = tmp_path_factory.mktemp("exports") / "fp32"
    return export_onnx(student, out, parity_texts=_texts(),
                       card_fields={"teachers_table": "| teacher | labels |\n|---|---|\n| t-news | world, sports |"})


@pytest.fixture(scope="module")
def exported_int8(student, tmp_path_factory):
    from kamalcli.export.onnx import export_onnx

    return export_onnx(student, tmp_path_factory.mktemp("exports") / "int8", quantize="int8", parity_texts=_texts())


@pytest.fixture(scope="module")
def torch_model(student):
    from kamalcli.models.loading import load_classifier, load_tokenizer

    return load_classifier(student, attn="eager"), load_tokenizer(student)


def _torch_logits(torch_model, enc) -> np.ndarray:
    import torch

    model, _ = torch_model
    with torch.inference_mode():
        return model(**{k: torch.from_numpy(np.asarray(v, dtype=np.int64)) for k, v in enc.items()}).logits.numpy()


def test_fp32_export_passes_parity_on_padded_batches(exported):
    p = exported.parity
    assert p["rows"] == len(_texts()) and p["padded_batches"] >= 1
    assert p["max_abs_diff"] < 1e-4
    assert p["argmax_agreement"] == 1.0
    assert p["tokenizer_agreement"] == 1.0
    assert exported.providers == ["CPUExecutionProvider"]
    assert exported.optimized and not exported.notes
    assert {"Attention", "EmbedLayerNormalization", "SkipLayerNormalization"} <= set(exported.fused_ops)
    folder = exported.path
    for name in ("model.onnx", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "labels.json",
                 "config.json", "README.md", "export.json"):
        assert (folder / name).is_file(), name
    assert not list(folder.parent.glob(".*tmp-*"))  # no staging left behind
    assert json.loads((folder / "labels.json").read_text()) == LABELS
    info = json.loads((folder / "export.json").read_text())
    assert info["opset"] == 17 and info["quantize"] is None and info["kamal_version"]
    assert info["parity"]["max_abs_diff"] == p["max_abs_diff"]
    assert info["fused_ops"]["Attention"] == 2  # one per layer
    assert info["sizes"]["model_onnx"] == (folder / "model.onnx").stat().st_size == exported.size_bytes
    # fp32: about 4 bytes a parameter
    assert 0.9 < exported.size_bytes / (4 * exported.parameters) < 1.2


@pytest.mark.parametrize("batch,length", [(1, 3), (5, 40), (5, 3), (1, 40)])
def test_dynamic_batch_and_sequence_axes(exported, torch_model, batch, length):
    from kamalcli.export.runtime import create_session

    _, tokenizer = torch_model
    rng = random.Random(batch * 100 + length)
    words = vocabulary()[5:]
    texts = [" ".join(rng.choices(words, k=rng.randint(1, length))) for _ in range(batch)]
    texts[0] = " ".join(rng.choices(words, k=length))  # the longest row sets the sequence length
    enc = tokenizer(texts, padding="max_length", truncation=True, max_length=length, return_tensors="np")
    assert enc["input_ids"].shape == (batch, length)
    session = create_session(exported.model_path, "cpu")
    got = session.run(["logits"], {k: v.astype(np.int64) for k, v in enc.items()})[0]
    assert got.shape == (batch, len(LABELS))
    np.testing.assert_allclose(got, _torch_logits(torch_model, enc), atol=1e-4, rtol=0)


def test_int8_export_is_smaller_and_reports_agreement(exported, exported_int8):
    p = exported_int8.parity
    assert exported_int8.quantize == "int8"
    assert exported_int8.size_bytes < 0.6 * exported.size_bytes
    assert exported_int8.fp32_size_bytes == exported.size_bytes
    assert p["max_abs_diff"] > 1e-6 and p["fp32"]["max_abs_diff"] < 1e-4  # int8 really changed the weights
    assert ("QAttention" in exported_int8.fused_ops) or ("Attention" in exported_int8.fused_ops)
    if min(p["argmax_agreement"], p["argmax_agreement_vs_fp32_onnx"]) < 0.99:
        assert exported_int8.warnings and "int8" in exported_int8.warnings[0]
    else:
        assert not exported_int8.warnings
    info = json.loads((exported_int8.path / "export.json").read_text())
    assert info["quantize"] == "int8" and info["sizes"]["model_onnx"] < info["sizes"]["fp32_onnx"]


def test_int8_low_agreement_is_a_warning_not_a_failure(student, tmp_path, monkeypatch):
    from kamalcli.export import onnx as exporter

    monkeypatch.setattr(exporter, "INT8_MIN_AGREEMENT", 1.01)  # nothing can reach it
    result = exporter.export_onnx(student, tmp_path / "q", quantize="int8", parity_texts=_texts(9))
    assert (tmp_path / "q" / "model.onnx").is_file()
    assert result.warnings and "int8" in result.warnings[0]


def test_runtime_predicts_like_pytorch(exported, exported_int8, torch_model):
    from kamalcli.export.runtime import OnnxClassifier

    _, tokenizer = torch_model
    texts = _texts(20, seed=11) + ["goal match " * 100]  # longer than the model's 64 positions
    enc = tokenizer(texts, padding=True, truncation=True, max_length=64, return_tensors="np")
    expected = [LABELS[i] for i in _torch_logits(torch_model, enc).argmax(-1)]
    clf = OnnxClassifier(exported.path)
    assert clf.labels == LABELS and clf.providers == ["CPUExecutionProvider"]
    assert clf.predict(texts, batch_size=3) == expected
    probs = clf.predict_proba(texts, batch_size=4, max_length=128)
    assert probs.shape == (len(texts), len(LABELS))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert clf.predict([]) == [] and clf.predict_proba([]).shape == (0, len(LABELS))
    assert set(OnnxClassifier(exported_int8.path).predict(texts)) <= set(LABELS)


def test_runtime_import_leaves_out_torch_and_transformers():
    code = ("import sys, kamalcli.export.runtime\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.skipif(HAS_GPU, reason="checks the CPU-only fallback")
def test_auto_device_on_cpu_machine_is_silent(exported, capfd):
    from kamalcli.export.runtime import OnnxClassifier

    capfd.readouterr()
    clf = OnnxClassifier(exported.path, device="auto")
    # within the tiny model's 64 positions: the note on cutting longer texts is said once per process, so it
    # came out here or not depending on which test ran before in this worker
    clf.predict(["goal match"], max_length=64)
    assert clf.providers == ["CPUExecutionProvider"]
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
    # also as the first session of a fresh process (how `kamal predict --onnx` starts)
    code = ("from kamalcli.export.runtime import OnnxClassifier\n"
            f"print(OnnxClassifier({str(exported.path)!r}, device='auto').providers)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr == "" and out.stdout.strip() == "['CPUExecutionProvider']"


@pytest.mark.skipif(HAS_GPU, reason="checks the CPU-only failure")
def test_cuda_device_on_cpu_machine_is_a_one_line_error(exported, capfd):
    from kamalcli.export.runtime import OnnxClassifier

    with pytest.raises(KamalError) as info:
        OnnxClassifier(exported.path, device="cuda")
    assert "cuda" in str(info.value).lower() and "\n" not in str(info.value)
    assert capfd.readouterr().err == ""


def test_existing_out_dir_is_refused_and_untouched(student, tmp_path):
    from kamalcli.export.onnx import export_onnx

    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(KamalError, match="already exists"):
        export_onnx(student, out, parity_texts=_texts(5))
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    export_onnx(student, out, parity_texts=_texts(5), overwrite=True)  # --force
    assert (out / "model.onnx").is_file() and not (out / "keep.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_failed_parity_leaves_no_folder(student, tmp_path, monkeypatch):
    from kamalcli.export import onnx as exporter

    monkeypatch.setattr(exporter, "FP32_TOLERANCE", -1.0)  # no export can pass
    with pytest.raises(KamalError, match="export failed parity"):
        exporter.export_onnx(student, tmp_path / "out", parity_texts=_texts(5))
    assert list(tmp_path.iterdir()) == []


def test_model_card_names_labels_and_parity(exported):
    card = (exported.path / "README.md").read_text()
    for label in LABELS:
        assert f"| {label} |" in card
    p = exported.parity
    assert f"{p['max_abs_diff']:.2e}" in card and f"{p['argmax_agreement']:.4f}" in card
    assert f"on {p['rows']} real inputs" in card
    assert "| t-news | world, sports |" in card  # a caller's field
    assert "{" + "name}" not in card and "opset 17" in card


def test_render_card_fills_missing_fields_with_a_dash():
    from kamalcli.export.card import render_card

    card = render_card({"name": "v1", "labels_table": "{not a field}", "seed": None})
    assert card.startswith("---") and "# v1" in card
    assert "{not a field}" in card  # values are inserted as text
    assert "seed: -;" in card and "method: `-`" in card
    assert "No human labels were used to train it." in card  # empty suffix, not a dash
    assert render_card({}, text="{a} {b.c} {{x}}") == "- {b.c} {x}"


def test_optimizer_failure_falls_back_to_the_plain_export(student, tmp_path, monkeypatch):
    import onnxruntime.transformers.optimizer as ort_optimizer

    from kamalcli.export.onnx import export_onnx

    def broken(*args, **kwargs):
        raise RuntimeError("simulated optimizer bug")

    monkeypatch.setattr(ort_optimizer, "optimize_model", broken)
    result = export_onnx(student, tmp_path / "plain", parity_texts=_texts(9))
    assert not result.optimized and result.fused_ops == []
    assert any("optimizer failed" in n and "simulated optimizer bug" in n for n in result.notes)
    assert result.parity["max_abs_diff"] < 1e-4 and (tmp_path / "plain" / "model.onnx").is_file()
    assert json.loads((tmp_path / "plain" / "export.json").read_text())["optimized"] is False


def _deberta_v2_classifier(folder: Path) -> Path:
    """A tiny random DeBERTa-v2 classifier with type_vocab_size 0 (as deberta-v3 ships: it reads no token type),
    and tiny.py's BERT tokenizer, which still produces token_type_ids."""
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    from tiny import make_tokenizer

    torch.manual_seed(0)
    config = DebertaV2Config(
        vocab_size=len(vocabulary()), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, type_vocab_size=0, relative_attention=True,
        position_buckets=16, pos_att_type=["p2c", "c2p"], position_biased_input=False, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)})
    DebertaV2ForSequenceClassification(config).save_pretrained(str(folder), safe_serialization=True)
    make_tokenizer(folder)
    return folder


# round 4, item 6
def test_a_deberta_v2_without_token_types_exports_only_the_inputs_it_takes(tmp_path):
    from kamalcli.export.onnx import export_onnx
    from kamalcli.export.runtime import OnnxClassifier
    from kamalcli.models.loading import load_classifier, load_tokenizer

    folder = _deberta_v2_classifier(tmp_path / "deberta")
    texts = _texts(9)
    result = export_onnx(folder, tmp_path / "out", parity_texts=texts)
    assert result.inputs == ["input_ids", "attention_mask"] and result.parity["max_abs_diff"] < 1e-4
    assert json.loads((tmp_path / "out" / "export.json").read_text())["inputs"] == ["input_ids", "attention_mask"]
    assert "token_type_ids" not in (tmp_path / "out" / "README.md").read_text()  # the card's usage feeds none
    clf = OnnxClassifier(tmp_path / "out")
    assert clf.input_names == ["input_ids", "attention_mask"]
    model, tokenizer = load_classifier(folder, attn="eager"), load_tokenizer(folder)
    enc = tokenizer(texts, padding=True, truncation=True, max_length=64, return_tensors="np")
    assert clf.predict(texts) == [LABELS[i] for i in _torch_logits((model, tokenizer), enc).argmax(-1)]
