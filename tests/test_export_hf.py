"""kamal export --hf: a plain Hugging Face folder that transformers.pipeline loads, with a Hub model card."""

import json

import pytest


TEXTS = ["goal match league coach", "market bank revenue", "telescope genome physics", "the treaty embassy"]


def test_the_folder_loads_in_a_transformers_pipeline(kd_student, tmp_path):
    from transformers import pipeline

    out = tmp_path / "kd-hf"
    result = kd_student("export", "kd", "--hf", "--out", out)
    assert f"Exported kd to {out}" in result.stdout and "transformers.pipeline on 64 texts" in result.stdout
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "README.md", "export.json"} <= names and "kamal.json" not in names
    assert not any(n.startswith(".") for n in names) and not any(p.name.startswith(".") for p in tmp_path.iterdir())
    marker = json.loads((out / "export.json").read_text())
    assert marker["format"] == "hf" and marker["check"]["max_abs_diff"] < 1e-4

    classifier = pipeline("text-classification", model=str(out))
    got = classifier(TEXTS, top_k=None, truncation=True, max_length=32)
    expected = kd_student.json("predict", "kd", "--top", "4", *TEXTS)
    for scores, want in zip(got, expected):
        assert scores[0]["label"] == want["label"]
        assert scores[0]["score"] == pytest.approx(want["probability"], abs=1e-5)


def test_the_card_carries_what_the_hub_reads(kd_student, tmp_path):
    from huggingface_hub import ModelCard

    kd_student("export", "kd", "--hf", "--out", tmp_path / "kd-hf")
    card = ModelCard.load(tmp_path / "kd-hf" / "README.md")
    data = card.data.to_dict()
    assert data["library_name"] == "transformers" and data["pipeline_tag"] == "text-classification"
    assert "kamal" in data["tags"] and data["datasets"] == ["pool", "test"]
    assert "license" not in data and "base_model" not in data  # the tiny test base declares neither
    accuracy = kd_student.json("students")[0]["evaluations"][0]["accuracy"]
    results = {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert results[("test", "accuracy")] == pytest.approx(accuracy, abs=1e-4)
    assert ("test", "f1") in results
    text = card.text
    for expected in ("# kd", "vanilla-kd", "| 0 | world |", "base model: encoder (a local folder)",
                     'pipeline("text-classification"', "huggingface-cli upload", "cut at 32 tokens"):
        assert expected in text, expected
    assert "{" + "name}" not in str(card) and "onnx" not in data["tags"]


def test_the_onnx_card_has_the_same_hub_metadata(kd_student, ws):
    from huggingface_hub import ModelCard

    kd_student("export", "kd", "--onnx")
    card = ModelCard.load(ws / ".kamal" / "artifacts" / "exports" / "kd" / "README.md")
    assert card.data.library_name == "onnxruntime" and "onnx" in card.data.tags
    assert {r.metric_type for r in card.data.eval_results} == {"accuracy", "f1"}
    assert "## Export" in card.text and "opset 17" in card.text


def test_refusals_and_force(kd_student, tmp_path):
    out = tmp_path / "kd-hf"
    kd_student("export", "kd", "--hf", "--out", out)
    assert "already exists (use --force" in kd_student("export", "kd", "--hf", "--out", out, code=2).stderr
    (out / "README.md").write_text("old")
    kd_student("export", "kd", "--hf", "--out", out, "--force")
    assert (out / "README.md").read_text().startswith("---")

    mine = tmp_path / "my-folder"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    result = kd_student("export", "kd", "--hf", "--out", mine, "--force", code=2)
    assert "is not a previous kamal export" in result.stderr and (mine / "notes.txt").read_text() == "keep me"
    assert "one format at a time" in kd_student("export", "kd", "--hf", "--onnx", code=2).stderr
    assert "--quantize applies to --onnx only" in kd_student("export", "kd", "--hf", "--quantize", "int8", code=2).stderr
    assert "choose a format: --onnx or --hf" in kd_student("export", "kd", code=2).stderr


def test_predict_json_keys_are_the_same_with_pytorch_and_onnx(kd_student):
    kd_student("export", "kd", "--onnx")
    for extra in ([], ["--onnx"]):
        rows = kd_student.json("predict", "kd", "--top", "2", *extra, *TEXTS[:2])
        assert len(rows) == 2
        for row, text in zip(rows, TEXTS):
            assert set(row) == {"text", "label", "probability", "top", "in_scope", "scope_score"} and row["text"] == text
            assert [set(t) for t in row["top"]] == [{"label", "probability"}] * 2
            assert row["top"][0] == {"label": row["label"], "probability": row["probability"]}


def test_declared_license_and_yaml_front_matter(tmp_path):
    import yaml

    from kamalcli.export.card import front_matter
    from kamalcli.export.service import declared_license

    (tmp_path / "README.md").write_text("---\nlanguage: en\nlicense: apache-2.0\ntags:\n- x\n---\n# a model\n")
    assert declared_license(tmp_path) == "apache-2.0"
    (tmp_path / "README.md").write_text("# no front matter\nlicense: mit\n")
    assert declared_license(tmp_path) is None
    assert declared_license(tmp_path / "missing") is None
    meta = {"license": "mit", "datasets": ["pool: a", "é"], "model-index": [{"name": "v", "results": [
        {"metrics": [{"type": "f1", "value": 0.5, "args": {"average": "macro"}}], "empty": []}]}]}
    text = front_matter(meta)
    assert text.startswith("---\n") and text.endswith("\n---")
    assert yaml.safe_load(text[4:-4]) == meta


def test_a_named_base_gives_base_model_and_its_license(tmp_path):
    from types import SimpleNamespace

    from kamalcli.export.service import hub_metadata

    base = tmp_path / "base"
    base.mkdir()
    (base / "README.md").write_text("---\nlicense: apache-2.0\n---\n")
    folders = {}
    for name, kamal_base in (("v1", "minilm-l6"), ("v2", str(base))):  # v2 extends v1: its base is v1's
        folders[name] = tmp_path / name
        folders[name].mkdir()
        (folders[name] / "kamal.json").write_text(json.dumps({"base": kamal_base}))
    v1 = SimpleNamespace(id=1, name="v1", parent=None, path=str(folders["v1"]), base=str(base))
    v2 = SimpleNamespace(id=2, name="v2", parent="v1", path=str(folders["v2"]), base=str(folders["v1"]))
    store = SimpleNamespace(find_student=lambda name: {"v1": v1, "v2": v2}.get(name))
    meta = hub_metadata(store, v2, {"test": {"accuracy": 0.51234, "macro_f1": None}}, "pool")
    assert meta == {
        "base_model": "sentence-transformers/all-MiniLM-L6-v2", "license": "apache-2.0", "datasets": ["pool", "test"],
        "model-index": [{"name": "v2", "results": [{
            "task": {"type": "text-classification", "name": "Text Classification"},
            "dataset": {"name": "test", "type": "test"},
            "metrics": [{"type": "accuracy", "value": 0.5123, "name": "Accuracy"}]}]}],
    }
