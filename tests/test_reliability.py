"""Nothing a user made is lost: one test (or group) per defect a hostile test pass found (issue 14).

Each test is named by its item number in that issue.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import tiny
from conftest import Kamal, add_teachers_and_data

TRAIN = ["--epochs", "1", "--lr", "2e-3", "--batch-size", "16", "--max-length", "32", "--mc-samples", "1"]


def one_line_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def student_ws(tmp_path_factory, assets, trained) -> Kamal:
    """A workspace with two teachers, data and one trained student `s` (shared: tests must not damage it)."""
    root = tmp_path_factory.mktemp("student") / "ws"
    Kamal(None)("init", root)
    k = add_teachers_and_data(Kamal(root), {"news": trained["news"], "money": trained["money"]}, assets)
    k("amalgamate", "--method", "uhc", "--name", "s", "--student", assets["encoder"], *TRAIN)
    return k


# -- loses data -------------------------------------------------------------------

def test_item01_export_force_replaces_only_a_previous_kamal_export(student_ws, tmp_path):
    k, ws = student_ws, student_ws.workspace
    users = tmp_path / "thesis"
    users.mkdir()
    (users / "chapter1.tex").write_text("months of work")
    for target in (ws, ws / ".kamal", ws / ".kamal" / "artifacts", ws.parent, users):
        before = sorted(p.name for p in target.iterdir())
        message = one_line_error(k("export", "s", "--onnx", "--out", target, "--force", code=2))
        assert str(target) in message
        assert sorted(p.name for p in target.iterdir()) == before
    assert (users / "chapter1.tex").read_text() == "months of work"
    assert (ws / "kamal.toml").is_file() and (ws / ".kamal" / "kamal.db").is_file()

    out = tmp_path / "export"
    k("export", "s", "--onnx", "--out", out)
    assert (out / ".kamal-export").is_file()
    assert "--force" in one_line_error(k("export", "s", "--onnx", "--out", out, code=2))
    k("export", "s", "--onnx", "--out", out, "--force")  # its own previous export: replaced
    assert (out / "model.onnx").is_file() and not list(tmp_path.glob(".export*"))


def test_item01_a_failed_replacement_keeps_the_previous_export(student_ws, tmp_path, monkeypatch):
    import kamalcli.export.onnx
    from kamalcli.errors import KamalFailure

    out = tmp_path / "export"
    student_ws("export", "s", "--onnx", "--out", out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*args, **kwargs):
        raise KamalFailure("ONNX export failed: disk full")

    monkeypatch.setattr(kamalcli.export.onnx, "_export_into", broken)
    student_ws("export", "s", "--onnx", "--out", out, "--force", code=1)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_item02_init_force_is_refused_while_a_writer_runs(ws, kamal, assets):
    from kamalcli.workspace.folder import Workspace

    kamal("add-data", assets["pool"], "--name", "pool")
    with Workspace(ws).shared_write_lock(when_alone=lambda: None):  # as a running amalgamate holds it
        assert "busy" in one_line_error(Kamal(None)("init", ws, "--force", code=2))
    assert not list(ws.glob(".kamal.old-*"))
    assert [d["name"] for d in kamal.json("data")] == ["pool"]


@pytest.mark.parametrize("damage, found", [("truncate", "empty (0 bytes)"), ("delete", "missing")])
def test_item03_an_empty_or_missing_database_is_refused_not_recreated(ws, kamal, assets, damage, found):
    kamal("add-data", assets["pool"], "--name", "pool")
    db = ws / ".kamal" / "kamal.db"
    for side in (db.with_name("kamal.db-wal"), db.with_name("kamal.db-shm")):
        side.unlink(missing_ok=True)
    if damage == "truncate":
        db.write_bytes(b"")
    else:
        db.unlink()
    for command in (["data"], ["status"], ["add-data", assets["test"], "--name", "t"]):
        message = one_line_error(kamal(*command, code=2))
        assert found in message and "1 in data" in message
    assert (db.stat().st_size == 0) if damage == "truncate" else not db.exists()


def test_item04_a_moved_workspace_keeps_working(tmp_path, assets, trained):
    first = tmp_path / "first"
    Kamal(None)("init", first)
    k = Kamal(first)
    k("add-teacher", trained["news"], "--name", "news", "--copy")
    k("add-teacher", trained["money"], "--name", "money", "--copy")
    k("add-data", assets["pool"], "--name", "pool")
    k("probe", "--mc-samples", "1", "--no-rmd")
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(first, moved)
    k = Kamal(moved)
    assert "all 2 probes were cached" in k("probe", "--mc-samples", "1", "--no-rmd").stdout
    assert all(t["path"].startswith(str(moved)) for t in k.json("teachers"))
    conn = sqlite3.connect(moved / ".kamal" / "kamal.db")
    stored = [r[0] for r in conn.execute("SELECT path FROM teachers UNION ALL SELECT path FROM datasets "
                                         "UNION ALL SELECT path FROM probes")]
    conn.close()
    assert stored and all(p.startswith(".kamal/artifacts/") for p in stored)


def test_item04_migration_m005_makes_old_absolute_paths_relative(tmp_path):
    from kamalcli.workspace.db import open_database

    root = tmp_path / "ws"
    (root / ".kamal").mkdir(parents=True)
    db = open_database(root / ".kamal" / "kamal.db")
    old = "/old/place"  # where the workspace was when these rows were written
    db.execute("INSERT INTO datasets (name, source, format, role, num_rows, content_hash, text_column, columns, "
               "path, created_at) VALUES ('d', '/data/d.csv', 'csv', 'transfer', 1, 'h', 'text', '[]', ?, 'now')",
               [f"{old}/.kamal/artifacts/data/h.parquet"])
    db.execute("INSERT INTO teachers (name, source, path, fingerprint, architecture, model_type, created_at) "
               "VALUES ('inside', 's', ?, 'f1', 'A', 'bert', 'now'), ('outside', 's', '/models/t', 'f2', 'A', "
               "'bert', 'now')", [f"{old}/.kamal/artifacts/teachers/abc"])
    db.execute("INSERT INTO runs (kind, status, workdir, started_at) VALUES ('probe', 'done', ?, 'now')",
               [f"{old}/.kamal/artifacts/runs/run-1"])
    db.execute("DELETE FROM _sqlite_migrations WHERE name = 'm005_relative_paths'")
    db.conn.commit()
    db.close()
    db = open_database(root / ".kamal" / "kamal.db")
    assert db.execute("SELECT path FROM datasets").fetchall() == [(".kamal/artifacts/data/h.parquet",)]
    assert dict(db.execute("SELECT name, path FROM teachers").fetchall()) == {
        "inside": ".kamal/artifacts/teachers/abc", "outside": "/models/t"}
    assert db.execute("SELECT workdir FROM runs").fetchall() == [(".kamal/artifacts/runs/run-1",)]
    db.close()


# -- wrong results without a word ---------------------------------------------------------

class _Payload:
    """Unpickling this runs os.makedirs: proof that pickle code ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.makedirs, (str(self.marker),)


def _weights_damage(folder: Path, case: str, tmp_path: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    if case == "garbage safetensors":
        (folder / "model.safetensors").write_bytes(os.urandom(4096))
    elif case == "pickle bin":
        import pickle

        (folder / "model.safetensors").unlink()
        (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _Payload(tmp_path / "pickle-ran")}))
    elif case == "shapes":
        config["intermediate_size"] = 48  # the weights have 64
    elif case == "head":
        config["id2label"] = {"0": "x", "1": "y", "2": "z"}  # the head has 2 rows
        config["label2id"] = {"x": 0, "y": 1, "z": 2}
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("case, message", [
    ("garbage safetensors", "not a safetensors file"),
    ("pickle bin", "not a readable weight file"),
    ("shapes", "intermediate"),
    ("head", "classifier.weight has shape (2, 32), the config implies (3, 32)"),
])
def test_item05_add_teacher_checks_the_weights(kamal, assets, tmp_path, case, message):
    folder = tmp_path / "broken"
    shutil.copytree(assets["teacher_a"], folder)
    _weights_damage(folder, case, tmp_path)
    assert message in one_line_error(kamal("add-teacher", folder, code=2))
    assert kamal.json("teachers") == []
    assert not (tmp_path / "pickle-ran").exists()


def test_item06_a_teacher_without_tokenizer_files_is_refused(kamal, assets, tmp_path):
    folder = tmp_path / "no-tokenizer"
    shutil.copytree(assets["teacher_a"], folder)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    assert "no tokenizer files" in one_line_error(kamal("add-teacher", folder, code=2))
    assert kamal.json("teachers") == []


def test_item07_texts_longer_than_the_model_are_cut_at_its_limit(kamal, assets, trained, tmp_path):
    words = tiny.TOPICS["world"] + tiny.TOPICS["business"]
    rows = [{"text": " ".join(words * 10), "label": "world"}] + tiny.topic_rows(["world", "business"], 10, seed=3)
    long = tiny.write_jsonl(tmp_path / "long.jsonl", rows)
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", long, "--name", "long")
    kamal("add-data", long, "--name", "gold", "--role", "eval")
    note = "the model takes at most 64 tokens"  # the tiny models have 64 positions; 120+ words here
    runs = [  # each runs PyTorch over the long text (several times), and says so once
        kamal("probe", "--mc-samples", "2", "--max-length", "128"),
        kamal("amalgamate", "--method", "uhc", "--name", "s", "--student", assets["encoder"], "--epochs", "1",
              "--max-length", "128", "--mc-samples", "2"),
        kamal("eval", "s", "--data", "gold"),
        kamal("predict", "s", " ".join(words * 10)),
    ]
    assert [r.stderr.count(note) for r in runs] == [1, 1, 1, 1]
    kamal("eval", "--baseline", "ensemble", "--data", "gold")  # from the cached probes
    kamal("export", "s", "--onnx")
    # predict said it for this student already: once per student (tests/test_predict_cli.py)
    assert kamal("predict", "s", "--onnx", " ".join(words * 10)).stderr.count(note) == 0


# -- what a newcomer hit -------------------------------------------------------------

def test_item08_amalgamate_uses_the_cached_probe_with_the_same_k(two_teachers, assets):
    k = two_teachers
    k("probe", "--max-length", "24", "--mc-samples", "2", "--no-rmd")
    probes = len(k.json("report")["probes"])
    args = ["--method", "muki-hard", "--student", assets["encoder"], "--epochs", "1", "--max-length", "24"]
    result = k("amalgamate", *args, "--mc-samples", "2", "--name", "a")
    assert "Probing" not in result.stderr
    assert "Using cached probe" in result.stderr and "K=2, adaptive, max length 24" in result.stderr
    assert len(k.json("report")["probes"]) == probes
    assert "--reprobe" in one_line_error(k("amalgamate", *args, "--mc-samples", "3", "--name", "b", code=2))
    result = k("amalgamate", *args, "--mc-samples", "3", "--name", "b", "--reprobe")
    assert "Probing news on pool first (K=3" in result.stderr


def test_item09_probe_with_only_labelled_eval_data_skips_rmd(kamal, assets, trained):
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["test"], "--name", "test", "--role", "eval")
    result = kamal("probe", "--mc-samples", "2")
    warnings = [line for line in result.stderr.splitlines() if "RMD" in line]
    assert len(warnings) == 1 and warnings[0].startswith("Warning: RMD skipped for news, money")
    assert "Teacher selection on test" in result.stdout


@pytest.mark.slow  # a subprocess that imports torch, transformers and onnxruntime: the full tier
def test_item10_onnxruntime_writes_nothing_under_home(student_ws, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    env.update(HOME=str(home), KAMAL_CACHE_DIR=str(tmp_path / "cache"))
    code = (
        "from kamalcli.cli import cli\n"
        "for args in (['export', 's', '--onnx', '--out', %r], ['predict', 's', '--onnx', 'goal match']):\n"
        "    try:\n"
        "        cli(['--workspace', %r, *args], prog_name='kamal')\n"
        "    except SystemExit as e:\n"
        "        assert not e.code, (args, e.code)\n"
    ) % (str(tmp_path / "export"), str(student_ws.workspace))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    # onnxruntime writes its telemetry database on some runs only (a clean CI run wrote none), so what
    # is checked is that nothing lands under HOME; where one was written, it is in kamal's cache.
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []
    written = list(tmp_path.rglob("onnxruntime.db"))
    assert all((tmp_path / "cache") in p.parents for p in written), written


# -- lesser -------------------------------------------------------------------------

@pytest.mark.parametrize("toml, word", [
    ('[workspace]\nseed = "abc"\n', "seed"),
    ("[workspace]\ndevice = 5\n", "device"),
    ("[probe]\nmc_samples = 2.5\n", "mc_samples"),
])
def test_item11_wrong_types_in_kamal_toml(ws, kamal, trained, toml, word):
    kamal("add-teacher", trained["news"], "--name", "news")
    (ws / "kamal.toml").write_text(toml)
    message = one_line_error(kamal("probe", code=2))
    assert word in message and "kamal.toml" in message


def test_item11_bad_input_is_one_line_and_exit_2(ws, kamal, tmp_path, monkeypatch, student_ws):
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes('{"text": "café"}\n'.encode("latin-1"))
    assert "not valid UTF-8" in one_line_error(kamal("add-data", latin1, code=2))
    assert "cannot write to /proc" in one_line_error(student_ws("export", "s", "--onnx", "--out", "/proc/x", code=2))
    import kamalcli.workspace.folder

    monkeypatch.setattr(kamalcli.workspace.folder.time, "strftime", lambda *a: "20260101-000000")  # the same second
    Kamal(None)("init", ws, "--force")
    Kamal(None)("init", ws, "--force")
    assert len(list(ws.glob(".kamal.old-20260101-000000*"))) == 2


def test_item12_leftovers_are_cleaned_when_the_next_writer_starts(ws, kamal, assets, tmp_path):
    from kamalcli.workspace.store import Store
    from kamalcli.workspace.folder import Workspace

    artifacts = ws / ".kamal" / "artifacts"
    kamal("add-teacher", assets["teacher_a"], "--name", "a", "--copy")
    assert not any((artifacts / "tmp").iterdir())  # the copy's scratch folder went with it

    (artifacts / "tmp" / "tmpdead").mkdir()
    (artifacts / "tmp" / "tmpprobe").mkdir()
    (artifacts / "tmp" / "tmpprobe" / "logits.npy").write_bytes(b"x")
    (artifacts / "exports" / ".s.tmp-4242").mkdir()
    (artifacts / "runs" / "run-90").mkdir()
    (artifacts / "runs" / "run-90" / "best.safetensors").write_bytes(b"x")
    (artifacts / "runs" / "run-91" / "checkpoint").mkdir(parents=True)
    (artifacts / "runs" / "run-91" / "checkpoint" / "trainer.pt").write_bytes(b"x")
    outside = tmp_path / "out"
    (tmp_path / ".out.tmp-4343").mkdir()
    store = Store.open(Workspace(ws))
    store.finish_run(store.start_run("amalgamate", "cut", {}, str(artifacts / "runs" / "run-91")), "interrupted")
    store.finish_run(store.start_run("amalgamate", "dead", {}, str(artifacts / "runs" / "run-90")), "failed")
    export_run = store.start_run("export", "s", {"out": str(outside)})
    store.db.execute("UPDATE runs SET pid = 4343 WHERE id = ?", [export_run])
    store.db.conn.commit()
    store.close()

    kamal("add-data", assets["pool"], "--name", "pool")  # any writer
    assert not any((artifacts / "tmp").iterdir())
    assert not (artifacts / "exports" / ".s.tmp-4242").exists() and not (tmp_path / ".out.tmp-4343").exists()
    assert not (artifacts / "runs" / "run-90").exists()
    assert (artifacts / "runs" / "run-91" / "checkpoint" / "trainer.pt").is_file()  # still resumable


def test_item12_amalgamate_leaves_no_scratch_folder(two_teachers, assets):
    two_teachers("amalgamate", "--method", "uhc", "--name", "u", "--student", assets["encoder"], *TRAIN)
    artifacts = two_teachers.workspace / ".kamal" / "artifacts"
    assert not any((artifacts / "tmp").iterdir()) and not any((artifacts / "runs").iterdir())


def test_item12_a_failed_copy_leaves_nothing(kamal, assets, monkeypatch):
    import kamalcli.workspace.store

    def fail(*args, **kwargs):
        raise kamalcli.workspace.store.KamalError("the database refused")

    monkeypatch.setattr(kamalcli.workspace.store.Store, "add_teacher", fail)
    kamal("add-teacher", assets["teacher_a"], "--name", "a", "--copy", code=2)
    teachers = kamal.workspace / ".kamal" / "artifacts" / "teachers"
    assert not any(teachers.iterdir()) and not any((teachers.parent / "tmp").iterdir())


def test_item13_sigterm_stops_a_run_like_ctrl_c(two_teachers, assets, monkeypatch):
    from kamalcli.train import loop

    class Killed(Exception):
        pass

    def unhandled(signum, frame):  # what SIGTERM does without kamal's handler (but keeps pytest alive)
        raise Killed

    previous = signal.signal(signal.SIGTERM, unhandled)
    real = loop.train

    def terminated_at_step_2(*args, **kwargs):
        def kill(step):
            if step == 2:
                os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **{**kwargs, "on_step": kill})

    monkeypatch.setattr(loop, "train", terminated_at_step_2)
    args = ["--method", "uhc", "--student", assets["encoder"], "--epochs", "1", "--batch-size", "16",
            "--max-length", "32", "--mc-samples", "1", "--checkpoint-every", "100"]
    try:
        result = two_teachers("amalgamate", *args, "--name", "cut", code=130)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert "kamal amalgamate --resume cut" in result.stderr
    [run] = [r for r in two_teachers.json("runs") if r["name"] == "cut"]
    assert run["status"] == "interrupted" and "SIGTERM" in run["error"]
    monkeypatch.setattr(loop, "train", real)
    two_teachers("amalgamate", "--resume", "cut")
    assert "cut" in {s["name"] for s in two_teachers.json("students")}


@pytest.mark.parametrize("body, status, error", [
    ("lost", "interrupted", "interrupted because a process of the job was lost"),
    ("crash", "failed", "disk on fire"),
    ("fine", "done", None),
])
def test_item13_a_sigterm_while_the_run_is_recorded_waits_for_the_record(body, status, error):
    """torchrun SIGTERMs rank 0 as soon as another rank is lost, often while rank 0 writes that run's end."""
    from kamalcli.distributed import RankLost
    from kamalcli.workspace.runs import recorded_run

    class Killed(Exception):
        pass

    def unhandled(signum, frame):  # what SIGTERM does without kamal's handler (but keeps pytest alive)
        raise Killed

    class Store:
        finished = []

        def start_run(self, *args):
            return 7

        def finish_run(self, run_id, status, result, error=None):
            os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-write
            self.finished.append((run_id, status, error))

    sigint = signal.getsignal(signal.SIGINT)  # ignored in a background job (CI), Python's own otherwise
    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        raised = {"lost": KeyboardInterrupt, "crash": RuntimeError}.get(body)
        with pytest.raises(raised) if raised else contextlib.nullcontext():
            with recorded_run(Store(), "amalgamate", "lost", {}):
                if body == "lost":
                    raise RankLost("Connection closed by peer")
                if body == "crash":
                    raise RuntimeError("disk on fire")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert Store.finished == [(7, status, error)]
    assert signal.getsignal(signal.SIGINT) == sigint  # put back


def test_item14_usage_errors_and_bad_files_are_one_line(kamal, tmp_path):
    assert "--batch-size" in one_line_error(kamal("probe", "--batch-size", "0", code=2))
    assert "No such option" in one_line_error(kamal("probe", "--bogus", code=2))
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "x"\n')
    bad_parquet = tmp_path / "bad.parquet"
    bad_parquet.write_text("not parquet")
    assert "bad.jsonl line 1: not valid JSON" in one_line_error(kamal("add-data", bad_json, code=2))
    assert "cannot read" in one_line_error(kamal("add-data", bad_parquet, code=2))


def test_item15_empty_names_top_zero_and_eval_without_a_subject(kamal, assets):
    assert "name ''" in one_line_error(kamal("add-data", assets["pool"], "--name", "", code=2))
    assert "name ''" in one_line_error(kamal("add-teacher", assets["teacher_a"], "--name", "", code=2))
    assert "--top" in one_line_error(kamal("predict", "ghost", "hi", "--top", "0", code=2))
    message = one_line_error(kamal("eval", "--data", "x", code=2))
    assert "not both" not in message and "STUDENT" in message
    assert kamal.json("data") == [] and kamal.json("teachers") == []


def test_item15_deleted_probe_files_are_not_called_different(two_teachers, assets):
    two_teachers("probe", "--mc-samples", "1", "--no-rmd", "--data", "pool")
    assert two_teachers.json("report")["probes"]
    shutil.rmtree(two_teachers.workspace / ".kamal" / "artifacts" / "probes")
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "u", "--student", assets["encoder"], *TRAIN)
    assert "Probing news on pool first (K=1, max length 128)." in result.stderr
    assert "differ" not in result.stderr


def test_item16_a_running_row_whose_run_lock_is_free_is_stale_whatever_its_pid(two_teachers, assets,
                                                                             interrupt_training):
    args = ["--method", "uhc", "--name", "cut", "--student", assets["encoder"], *TRAIN, "--checkpoint-every", "2"]
    interrupt_training(3)
    two_teachers("amalgamate", *args, code=130)
    interrupt_training(None)
    conn = sqlite3.connect(two_teachers.workspace / ".kamal" / "kamal.db")
    with conn:  # as if killed hard mid-run, and its pid now belongs to a live process (this one)
        conn.execute("UPDATE runs SET status = 'running', finished_at = NULL, pid = ? WHERE name = 'cut'",
                     [os.getpid()])
    conn.close()
    [run] = [r for r in two_teachers.json("runs") if r["name"] == "cut"]  # no process holds its run lock
    assert run["status"] == "interrupted" and "killed or crashed" in run["error"]
    two_teachers("amalgamate", "--resume", "cut")
    assert [r["status"] for r in two_teachers.json("runs") if r["name"] == "cut"] == ["interrupted", "done"]
