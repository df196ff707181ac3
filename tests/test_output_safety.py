"""What kamal writes outside its own folders: `report --html` and `export --force` never destroy what is not theirs."""

import json
import os
from pathlib import Path

import pytest
import tiny

from conftest import Kamal



def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _snapshot(folder) -> dict:
    """Every file under folder, by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- kamal report --html ----------------------------------------------------------------

def test_report_never_writes_over_the_workspace_files(kamal, ws):
    before = _snapshot(ws)
    for target in (ws / ".kamal" / "kamal.db", ws / "kamal.toml", ws / ".kamal" / "artifacts" / "r.html"):
        for force in ([], ["--force"]):
            message = _one_line(kamal("report", "--html", target, *force, code=2))
            assert str(target) in message and "workspace" in message, message
    assert _snapshot(ws) == before
    assert kamal.json("teachers") == []  # the database is still one


def test_report_never_writes_into_a_teacher_folder(kamal, tmp_path):
    teacher = tiny.make_classifier(tmp_path / "my-teacher", ["world", "sports"], seed=1)
    kamal("add-teacher", teacher, "--name", "news")
    before = _snapshot(teacher)
    for target in (teacher / "config.json", teacher / "model.safetensors", teacher / "report.html"):
        for force in ([], ["--force"]):
            message = _one_line(kamal("report", "--html", target, *force, code=2))
            assert "teacher news" in message, message
    assert _snapshot(teacher) == before


def test_report_never_writes_into_a_student_or_export_folder(kd_student, ws, tmp_path):
    kd_student("export", "kd", "--hf", "--out", tmp_path / "kd-hf")
    (kd,) = [s for s in kd_student.json("students") if s["name"] == "kd"]
    kd_folder = Path(kd["path"])
    before = _snapshot(kd_folder), _snapshot(tmp_path / "kd-hf")
    for target, who in ((kd_folder / "model.safetensors", "student kd"), (tmp_path / "kd-hf" / "config.json", "export"),
                        (tmp_path / "kd-hf" / "report.html", "export")):
        for force in ([], ["--force"]):
            message = _one_line(kd_student("report", "--html", target, *force, code=2))
            assert who in message, message
    assert (_snapshot(kd_folder), _snapshot(tmp_path / "kd-hf")) == before


def test_report_replaces_a_file_only_when_it_is_a_kamal_report_or_forced(kamal, tmp_path):
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my own notes</html>")
    message = _one_line(kamal("report", "--html", mine, code=2))
    assert "not a kamal report" in message and "--force" in message, message
    assert mine.read_text() == "<html>my own notes</html>"
    kamal("report", "--html", mine, "--force")
    assert '<meta name="generator" content="kamal ' in mine.read_text()

    report = tmp_path / "report.html"
    kamal("report", "--html", report)
    report.write_text(report.read_text().replace("No teachers yet", "An older report"))
    kamal("report", "--html", report)  # a kamal report is replaced without --force
    assert "No teachers yet" in report.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.html", "report.html", "ws"]  # no temporary file left
    assert "--force applies to --html" in _one_line(kamal("report", "--force", code=2))


def test_report_to_standard_output_and_bad_targets(kamal, tmp_path):
    for target in ("-", "/dev/stdout"):
        html = kamal("report", "--html", target).stdout
        assert html.startswith("<!doctype html>") and '<meta name="generator" content="kamal ' in html
        assert html.rstrip().endswith("</html>") and "Wrote" not in html
    assert "--html needs a file name" in _one_line(kamal("report", "--html", "", code=2))
    assert "standard output" in _one_line(kamal("report", "--html", "-", "--json", code=2))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    message = _one_line(kamal("report", "--html", fifo, code=2))
    assert "not a regular file" in message and "--html -" in message, message


# -- kamal export --force -----------------------------------------------------------------

def _names(message: str) -> str:
    return message.split("(", 1)[1] if "(" in message else message


def test_force_keeps_a_workspace_made_inside_an_export(kd_student, tmp_path):
    out = tmp_path / "kd-onnx"
    kd_student("export", "kd", "--onnx", "--out", out)
    Kamal(None)("init", out)  # a user makes a workspace in the export folder
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)
    message = _one_line(kd_student("export", "kd", "--onnx", "--out", out, "--force", code=2))
    assert str(out) in message and ".kamal" in message and ".gitignore" in message, message
    assert _snapshot(out) == before
    assert Kamal(out).json("teachers") == []  # that workspace still works


def test_force_replaces_only_what_an_export_wrote(kd_student, tmp_path):
    out = tmp_path / "kd-hf"
    kd_student("export", "kd", "--hf", "--out", out)
    (out / "my-eval.py").write_text("print('mine')")
    message = _one_line(kd_student("export", "kd", "--hf", "--out", out, "--force", code=2))
    assert "my-eval.py" in message, message
    assert (out / "my-eval.py").read_text() == "print('mine')"
    (out / "my-eval.py").unlink()
    (out / "README.md").write_text("edited")  # a file the export wrote: replaced
    kd_student("export", "kd", "--hf", "--out", out, "--force")
    assert (out / "README.md").read_text().startswith("---")

    onnx = tmp_path / "kd-onnx"
    kd_student("export", "kd", "--onnx", "--out", onnx)
    listed = json.loads((onnx / ".kamal-export").read_text())["files"]
    assert sorted(listed) == sorted(p.name for p in onnx.iterdir())
    (onnx / "data").mkdir()  # a folder: no export writes one
    message = _one_line(kd_student("export", "kd", "--onnx", "--out", onnx, "--force", code=2))
    assert "data" in _names(message), message
    assert (onnx / "data").is_dir()


@pytest.mark.parametrize("extra", [None, "notes.txt"])
def test_an_older_export_without_a_file_list(kd_student, tmp_path, extra):
    """A marker from before the list of files: replaceable when it holds only files an export writes."""
    out = tmp_path / "kd-onnx"
    kd_student("export", "kd", "--onnx", "--out", out)
    (out / ".kamal-export").write_text(json.dumps({"kamal_version": "0.9.0", "source": "somewhere"}))
    if extra is None:
        kd_student("export", "kd", "--onnx", "--out", out, "--force")
        assert "files" in json.loads((out / ".kamal-export").read_text())
        return
    (out / extra).write_text("mine")
    message = _one_line(kd_student("export", "kd", "--onnx", "--out", out, "--force", code=2))
    assert extra in message, message
    assert (out / extra).read_text() == "mine"
