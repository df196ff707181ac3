"""kamal predict: texts from arguments, a file or stdin, one result per input line, notes said once per student."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny
from conftest import Kamal, add_teachers_and_data

LABELS = ("world", "sports", "business", "scitech")
EMPTY = "empty text: not classified"
LIMIT_NOTE = "the model takes at most 64 tokens"  # the tiny models have 64 positions


def student_args(assets, max_length: int) -> list:
    return ["--method", "vanilla-kd", "--student", assets["encoder"], "--epochs", "1", "--lr", "2e-3",
            "--batch-size", "16", "--max-length", str(max_length)]


@pytest.fixture(scope="module")
def k(tmp_path_factory, assets, trained) -> Kamal:
    """A workspace with student kd (trained at 32 tokens, within the tiny models' 64)."""
    ws = tmp_path_factory.mktemp("predict") / "ws"
    Kamal(None)("init", ws)
    kamal = add_teachers_and_data(Kamal(ws), {"news": trained["news"], "money": trained["money"]}, assets)
    kamal("amalgamate", "--name", "kd", *student_args(assets, 32))
    return kamal


def as_json(kamal: Kamal, *args, input=None):
    return json.loads(kamal(*args, "--json", input=input).stdout)


def lines_file(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


# -- item 5: blank lines keep their place ------------------------------------------

SIX_LINES = "goal match league\n\n   \nbank shares market\n\nelection treaty minister\n"


def test_blank_lines_keep_their_place_in_json(k, tmp_path):
    rows = k.json("predict", "kd", "--file", lines_file(tmp_path / "six.txt", SIX_LINES), "--top", "2")
    assert [r["text"] for r in rows] == ["goal match league", "", "", "bank shares market", "",
                                         "election treaty minister"]
    for i in (1, 2, 4):
        assert rows[i] == {"text": "", "label": None, "probability": None, "top": [], "note": EMPTY}
    for i in (0, 3, 5):
        assert rows[i]["label"] in LABELS and len(rows[i]["top"]) == 2 and "note" not in rows[i]


def test_blank_lines_keep_their_place_in_the_table(k, tmp_path):
    out = k("predict", "kd", "--file", lines_file(tmp_path / "six.txt", SIX_LINES)).stdout.splitlines()
    assert len(out) == 6
    assert [line.split("\t")[2] for line in out] == ["goal match league", "", "", "bank shares market", "",
                                                    "election treaty minister"]
    for i in (1, 2, 4):
        assert out[i] == f"-\t-\t\t({EMPTY})"
    assert all(out[i].split("\t")[0] in LABELS for i in (0, 3, 5))


def test_an_empty_argument_gets_its_row_and_only_blank_input_is_refused(k, tmp_path):
    rows = k.json("predict", "kd", "goal match", "", "bank shares")
    assert [r["label"] is None for r in rows] == [False, True, False]
    assert "nothing to classify" in k("predict", "kd", "", " ", code=2).stderr
    blank = lines_file(tmp_path / "blank.txt", "\n  \n")
    assert "holds no text" in k("predict", "kd", "--file", blank, code=2).stderr


@pytest.fixture(scope="module")
def token_k(tmp_path_factory) -> Kamal:
    """A token student amalgamated (one epoch) from two untrained token teachers: only its rows matter here."""
    root = tmp_path_factory.mktemp("predict-ner")
    ws = root / "ws"
    Kamal(None)("init", ws)
    kamal = Kamal(ws)
    kamal("add-teacher", tiny.make_token_classifier(root / "perloc", ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], seed=1),
          "--name", "perloc")
    kamal("add-teacher", tiny.make_token_classifier(root / "org", ["O", "B-ORG", "I-ORG"], seed=2), "--name", "org")
    kamal("add-data", tiny.write_jsonl(root / "pool.jsonl", tiny.ner_rows(40, seed=2, tagged=False)), "--name", "pool")
    kamal("amalgamate", "--method", "muki-hard", "--student", tiny.make_encoder(root / "encoder", seed=6),
          "--name", "tok", "--epochs", "1", "--batch-size", "16", "--max-length", "32", "--mc-samples", "2")
    return kamal


def test_a_token_student_gives_blank_lines_a_row_too(token_k, tmp_path):
    three = lines_file(tmp_path / "three.txt", "the goal coach\n\nbank market\n")
    rows = token_k.json("predict", "tok", "--file", three)
    assert [r["text"] for r in rows] == ["the goal coach", "", "bank market"]
    assert rows[1] == {"text": "", "entities": [], "note": EMPTY} and "note" not in rows[0]
    out = token_k("predict", "tok", "--file", three).stdout.splitlines()
    assert len(out) == 3 and out[1] == f"({EMPTY})\t"
    assert out[0].endswith("\tthe goal coach") and out[2].endswith("\tbank market")


# -- item 16: stdin ------------------------------------------------------------------

def test_file_dash_reads_stdin(k):
    rows = as_json(k, "predict", "kd", "election treaty", "--file", "-", input="goal match league\n\nbank shares\n")
    assert [r["text"] for r in rows] == ["election treaty", "goal match league", "", "bank shares"]
    assert [r["label"] is None for r in rows] == [False, False, True, False]


def test_texts_piped_without_arguments_are_read(k):
    piped = as_json(k, "predict", "kd", input="goal match league\r\nbank shares market\r\n")
    assert [r["text"] for r in piped] == ["goal match league", "bank shares market"]
    assert [r["label"] for r in piped] == [r["label"] for r in k.json("predict", "kd", "goal match league",
                                                                         "bank shares market")]
    # a TEXT argument wins: stdin is not read
    assert [r["text"] for r in as_json(k, "predict", "kd", "goal", input="bank\n")] == ["goal"]


def test_nothing_on_stdin_is_still_nothing_to_classify(k):
    result = k("predict", "kd", input="", code=2)
    assert result.stderr == "Error: nothing to classify: give TEXT arguments, --file FILE, or pipe texts on stdin\n"
    assert result.stdout == ""
    assert "stdin holds no text" in k("predict", "kd", "--file", "-", input="\n\n", code=2).stderr
    assert "stdin is not valid UTF-8 text" in k("predict", "kd", "--file", "-", input=b"\xff\xfe goal\n", code=2).stderr


# -- item 17: a byte-order mark is no part of the first text -------------------------

def test_a_byte_order_mark_is_dropped_from_file_and_stdin(k, tmp_path):
    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbfgoal match league\nbank shares\n")
    from_file = k.json("predict", "kd", "--file", bom)
    assert [r["text"] for r in from_file] == ["goal match league", "bank shares"]
    plain = k.json("predict", "kd", "goal match league")[0]
    assert from_file[0]["probability"] == pytest.approx(plain["probability"], abs=1e-6)
    from_stdin = as_json(k, "predict", "kd", input=b"\xef\xbb\xbfgoal match league\n")
    assert [r["text"] for r in from_stdin] == ["goal match league"]
    assert [r["text"] for r in as_json(k, "predict", "kd", "--file", "-", input=b"\xef\xbb\xbfgoal\n")] == ["goal"]


# -- item 20: the model-limit note once per student ----------------------------------

def test_the_model_limit_note_is_said_once_per_student(k, assets, tmp_path):
    for name in ("long-a", "long-b"):  # trained at 128 tokens: the tiny models take 64
        k("amalgamate", "--name", name, *student_args(assets, 128))
    first = k("predict", "long-a", "goal match")
    assert first.stderr.count(LIMIT_NOTE) == 1
    again = k("predict", "long-a", "goal match")
    assert LIMIT_NOTE not in again.stderr and again.stdout == first.stdout
    folder = Path(next(s["path"] for s in k.json("students") if s["name"] == "long-a"))
    assert LIMIT_NOTE in json.loads((folder / "kamal-notes.json").read_text())[0]
    k("export", "long-a", "--onnx")
    assert LIMIT_NOTE not in k("predict", "long-a", "--onnx", "goal match").stderr
    k("export", "long-b", "--onnx")  # another student, first through its export: said for it, then not by PyTorch
    assert k("predict", "long-b", "--onnx", "goal match").stderr.count(LIMIT_NOTE) == 1
    assert LIMIT_NOTE not in k("predict", "long-b", "goal match").stderr
    assert LIMIT_NOTE not in k("predict", "kd", "goal match").stderr  # within the limit: nothing to say
    # the marker is kamal's own: it stays out of the Hugging Face export
    out = tmp_path / "long-a-hf"
    k("export", "long-a", "--hf", "--out", out)
    assert "kamal-notes.json" not in {p.name for p in out.iterdir()}


def test_a_token_student_has_no_scope_and_is_not_calibrated(token_k):
    record = next(s for s in token_k.json("students") if s["name"] == "tok")
    assert record["scope"] is None and record["calibration"] is None
    assert "tags tokens; a scope is for text classifiers" in token_k("scope", "tok", "--data", "pool", code=2).stderr
    assert "tags tokens; calibration is for text classifiers" in token_k("calibrate", "tok", "--data", "pool",
                                                                         code=2).stderr
