"""kamal export --onnx and kamal predict --onnx, through the command line."""

import json
import subprocess
import sys

import pytest


def test_export_records_parity_and_writes_a_card(kd_student, ws):
    result = kd_student("export", "kd", "--onnx")
    assert "parity with PyTorch on 256 texts" in result.stdout  # 80 eval rows, then transfer rows
    folder = ws / ".kamal" / "artifacts" / "exports" / "kd"
    assert {p.name for p in folder.iterdir()} >= {"model.onnx", "tokenizer.json", "labels.json", "README.md", "export.json"}
    assert json.loads((folder / "labels.json").read_text()) == ["world", "sports", "business", "scitech"]
    card = (folder / "README.md").read_text()
    for expected in ("news", "money", "vanilla-kd", "pool (240 rows", "| test | 80 |", "argmax agreement 1.0000", "opset 17"):
        assert expected in card, expected
    export = json.loads((folder / "export.json").read_text())
    assert export["parity"]["max_abs_diff"] < 1e-4 and export["parity"]["padded_batches"] > 0


def test_onnx_predictions_match_pytorch(kd_student):
    kd_student("export", "kd", "--onnx")
    texts = ["goal match league coach", "market bank revenue", "telescope genome physics", "the treaty embassy"]
    torch_side = kd_student.json("predict", "kd", *texts)
    onnx_side = kd_student.json("predict", "kd", "--onnx", *texts)
    assert [p["label"] for p in onnx_side] == [p["label"] for p in torch_side]
    for a, b in zip(onnx_side, torch_side):
        assert a["probability"] == pytest.approx(b["probability"], abs=1e-4)


def test_int8_export_and_refusals(kd_student, ws, tmp_path):
    kd_student("export", "kd", "--onnx", "--quantize", "int8", "--out", tmp_path / "int8")
    assert (tmp_path / "int8" / "model.onnx").is_file()
    card_before = (tmp_path / "int8" / "README.md").read_text()
    result = kd_student("export", "kd", "--onnx", "--quantize", "int8", "--out", tmp_path / "int8", code=2)
    assert "already exists (use --force" in result.stderr
    assert (tmp_path / "int8" / "README.md").read_text() == card_before
    kd_student("export", "kd", "--onnx", "--quantize", "int8", "--out", tmp_path / "int8", "--force")
    assert "choose a format: --onnx" in kd_student("export", "kd", code=2).stderr
    assert "no student named 'nope'" in kd_student("export", "nope", "--onnx", code=2).stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # as root, permissions cannot make a folder unwritable; this can
    assert "cannot create" in kd_student("export", "kd", "--onnx", "--out", blocker / "x", code=2).stderr
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no half-written staging folder


def test_predict_from_the_export_needs_no_torch(kd_student, ws):
    kd_student("export", "kd", "--onnx")
    code = (
        "import sys, json\n"
        "from kamalcli.cli import cli\n"
        f"args = ['--workspace', {str(ws)!r}, 'predict', 'kd', '--onnx', '--json', 'goal match']\n"
        "try:\n"
        "    cli(args, prog_name='kamal')\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print(json.dumps(sorted({'torch', 'transformers'} & set(sys.modules))), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []
    assert json.loads(done.stdout)[0]["label"] in ("world", "sports", "business", "scitech")


# round 4, item 16
@pytest.mark.parametrize("out", ["", "  "])
def test_an_empty_out_is_refused_not_taken_for_the_default(kd_student, ws, out, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # were "  " taken for a folder, it would be written here
    exports = ws / ".kamal" / "artifacts" / "exports"
    before = kd_student.db_snapshot()
    for fmt in ("--onnx", "--hf"):
        err = kd_student("export", "kd", fmt, "--out", out, "--force", code=2).stderr
        assert err.startswith("Error: --out is empty") and err.count("\n") == 1 and len(err) <= 160, err
    assert kd_student.db_snapshot() == before
    assert not exports.exists() or not any(exports.iterdir())
    assert [p.name for p in tmp_path.iterdir()] == ["ws"]
