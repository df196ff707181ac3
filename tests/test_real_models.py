"""The real pretrained bases, offline: a broken asset path must not land (marked slow)."""

import gzip
import json
import os
from importlib import resources

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.mark.slow
def test_minilm_l6_loads_offline_and_classifies_a_sentence():
    import torch

    from kamalcli.models.bases import resolve_model_source
    from kamalcli.models.batching import encode
    from kamalcli.models.loading import build_student, load_tokenizer

    folder = resolve_model_source("minilm-l6")
    model = build_student(folder, ["games", "science"]).eval()
    assert model.config.num_hidden_layers == 6 and model.config.hidden_size == 384
    encoded = encode(load_tokenizer(folder), ["A puzzle game for the terminal"], 32)
    with torch.inference_mode():
        probs = torch.softmax(model(**encoded.batch([0])).logits, -1)
    assert probs.shape == (1, 2) and torch.isfinite(probs).all()
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-5)
    # the real vocabulary, not [UNK]s
    assert len(set(encoded.ids[0].tolist())) > 4 and 100 not in encoded.ids[0].tolist()


@pytest.mark.slow
def test_train_teacher_on_the_real_base_through_the_cli(kamal, tmp_path):
    rows = [json.loads(line) for line in gzip.open(resources.files("kamalcli.resources").joinpath("demo/train.jsonl.gz"))]
    picked = [r for r in rows if r["label"] in ("games", "math")][:48]
    path = tmp_path / "few.jsonl"
    path.write_text("".join(json.dumps({"text": r["text"], "label": r["label"]}) + "\n" for r in picked))
    kamal("add-data", path, "--name", "few", "--role", "eval")
    kamal("train-teacher", "few", "--labels", "games,math", "--name", "real", "--base", "minilm-l6",
          "--epochs", "1", "--batch-size", "16", "--max-length", "32")
    [teacher] = kamal.json("teachers")
    assert teacher["num_layers"] == 6 and teacher["origin"] == "trained"
    kamal("probe", "--mc-samples", "2", "--max-length", "32")
    report = kamal.json("report")["probes"][0]
    assert report["rows"] == 48 and report["accuracy_in"] is not None


def test_models_lists_the_bases_and_the_lm(kamal):
    models = {m["name"]: m for m in kamal.json("models")}
    assert set(models) == {"minilm-l6", "minilm-l3", "multilingual-e5-small", "smollm2-135m"}
    assert all(m["status"] == "installed" for m in models.values())
    assert models["smollm2-135m"]["kind"] == "causal-lm" and models["minilm-l3"]["kind"] == "encoder"


def test_the_demo_data_ships_with_the_package():
    demo = resources.files("kamalcli.resources").joinpath("demo")
    train = [json.loads(line) for line in gzip.open(demo.joinpath("train.jsonl.gz"))]
    test = [json.loads(line) for line in gzip.open(demo.joinpath("test.jsonl.gz"))]
    assert len(train) == 480 and len(test) == 240
    assert {r["label"] for r in train} == {"games", "graphics", "sound", "mail", "math", "science"}
    assert not {r["package"] for r in train} & {r["package"] for r in test}
    assert "debian" in demo.joinpath("README.md").read_text().lower()


@pytest.mark.slow
def test_synthesize_with_smollm2_converted_from_its_gguf(kamal, trained):
    """smollm2-135m: the GGUF converted once into the cache, checked by fingerprint, then steered text."""
    from kamalcli.models.convert import smollm2 as lm_convert
    from kamalcli.models.bases import resolve_lm_source
    from kamalcli.models.convert.common import MARKER

    folder = resolve_lm_source("smollm2-135m")
    record = json.loads((folder / MARKER).read_text())
    assert record["source_sha256"] == lm_convert.EXPECTED_GGUF_SHA256
    assert resolve_lm_source("smollm2-135m") == folder  # verified and reused, not converted again
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("synthesize", "--per-class", 2, "--name", "s", "--max-new-tokens", 10, "--batch-size", 2, "--top-m", 5,
          "--prompt", "Write one news sentence about {label}.")
    [data] = kamal.json("data")
    overall = data["provenance"]["quality"]["overall"]
    # every text written is kept (weak rows too), unless empty; --min-steering-p would count the dropped ones
    assert data["rows"] >= 1 and data["rows"] + overall["dropped"] >= 3
    assert data["provenance"]["generator"] == {"lm": "smollm2-135m", "fingerprint": record["model_sha256"]}
    import pyarrow.parquet as pq

    [path] = (kamal.workspace / ".kamal" / "artifacts" / "data").glob("*.parquet")
    texts = pq.read_table(path).column("text").to_pylist()
    assert all(len(t.split()) >= 2 for t in texts)  # English words from a real LM, not token debris


@pytest.mark.slow
def test_prototypes_in_the_real_shared_encoder_tell_real_topics_apart(tmp_path):
    """The prototype score's encoder, mean-pooled: prototypes from 10 rows per label put most other rows of the
    label with the teacher that owns it (two teachers of three demo topics each; chance is half)."""
    import numpy as np

    from kamalcli.probe.prototypes import class_prototypes, teacher_shares
    from kamalcli.probe.encoder import _compute
    from kamalcli.models.bases import resolve_model_source

    rows = [json.loads(line) for line in gzip.open(resources.files("kamalcli.resources").joinpath("demo/train.jsonl.gz"))]
    names = ["games", "graphics", "sound", "math", "mail", "science"]
    fit = [r for name in names for r in [r for r in rows if r["label"] == name][:10]]
    held = [r for name in names for r in [r for r in rows if r["label"] == name][10:40]]
    folder = resolve_model_source("minilm-l6")
    prototypes = class_prototypes(_compute(folder, [r["text"] for r in fit], 64, "cpu", ("mean",))["mean"],
                                  [r["label"] for r in fit], names)
    owns = np.array([[name in names[:3], name in names[3:]] for name in names])
    shares = teacher_shares(_compute(folder, [r["text"] for r in held], 64, "cpu", ("mean",))["mean"], prototypes, owns)
    owner = np.array([0 if r["label"] in names[:3] else 1 for r in held])
    assert np.allclose(shares.sum(axis=1), 1.0)
    assert (shares.argmax(axis=1) == owner).mean() > 0.75


@pytest.mark.slow
def test_label_names_in_the_real_shared_encoder_tell_synonyms_from_related_classes():
    """kamal labels' name evidence: synonyms above the default threshold, related but different classes below."""
    from kamalcli.teachers.label_overlap import DEFAULT_THRESHOLD, name_similarity, name_vectors

    vectors, missing = name_vectors(["sound", "audio", "mail", "email", "net", "network", "web", "math", "science"],
                                    "minilm-l6")
    assert missing is None
    for a, b in (("sound", "audio"), ("mail", "email"), ("net", "network")):
        assert name_similarity(a, b, vectors) > 0.7, (a, b)
    for a, b in (("net", "web"), ("math", "science"), ("network", "web")):
        assert name_similarity(a, b, vectors) < DEFAULT_THRESHOLD, (a, b)
