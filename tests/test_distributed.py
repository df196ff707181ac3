"""Several processes (torchrun, gloo on CPU): real 2-process jobs on tiny models, compared with one process."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import tiny
from conftest import TRAIN, Kamal, add_teachers_and_data


def kamal_process(workspace: Path, *args, **popen) -> subprocess.Popen:
    """`python -m kamalcli` in a process of its own (torchrun's launcher needs a real one)."""
    argv = [sys.executable, "-m", "kamalcli", "--workspace", str(workspace), *map(str, args)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def kamal_run(workspace: Path, *args, code: int = 0, **popen) -> subprocess.CompletedProcess:
    proc = kamal_process(workspace, *args, **popen)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == code, f"kamal {' '.join(map(str, args))} exited {proc.returncode}:\n{out}\n{err}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def probe_folders(kamal: Kamal) -> dict[tuple[str, str], Path]:
    """(teacher, dataset) -> the folder of its probe arrays."""
    conn = sqlite3.connect(kamal.workspace / ".kamal" / "kamal.db")
    try:
        rows = conn.execute("SELECT t.name, d.name, p.path FROM probes p JOIN teachers t ON t.id = p.teacher_id "
                            "JOIN datasets d ON d.id = p.dataset_id").fetchall()
    finally:
        conn.close()
    return {(t, d): kamal.workspace / path for t, d, path in rows}


@pytest.fixture
def twin(tmp_path, assets):
    """Two identical workspaces (random tiny teachers, transfer and labelled data): one process vs two."""
    out = []
    for name in ("one", "two"):
        ws = tmp_path / name
        Kamal(None)("init", ws)
        out.append(add_teachers_and_data(Kamal(ws), {"a": assets["teacher_a"], "b": assets["teacher_b"]}, assets))
    return out


@pytest.mark.slow
def test_probe_on_two_processes_is_bit_for_bit_the_one_process_probe(twin, tmp_path):
    one, two = twin
    settings = ["--mc-samples", "1", "--batch-size", "4", "--max-length", "32"]
    one("probe", *settings)
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    kamal_run(two.workspace, "probe", *settings, "--nproc", "2", env={**os.environ, "TMPDIR": str(scratch)})
    assert not list(scratch.iterdir())  # torchrun's log folders (torchelastic_*) do not stay behind
    a, b = probe_folders(one), probe_folders(two)
    assert a.keys() == b.keys() and len(a) == 4
    for pair in a:
        names = sorted(p.name for p in a[pair].glob("*.npy"))
        assert names == sorted(p.name for p in b[pair].glob("*.npy")) and "features-L2.npy" in names
        for name in names:
            assert np.array_equal(np.load(a[pair] / name), np.load(b[pair] / name)), (pair, name)
        meta = json.loads((b[pair] / "meta.json").read_text())
        assert meta["processes"] == 2 and meta["rank_seeds"] == [0, 1]
        assert not list(b[pair].glob("shard-*"))
    # the per-row scores and the selection figures registered by rank 0 are the same too
    rows = lambda k: {(r["teacher"], r["data"]): r["mean_uhat"] for r in k.json("report")["probes"]}  # noqa: E731
    assert rows(one) == rows(two)
    assert one.json("report")["selection"] == two.json("report")["selection"]
    assert [r["status"] for r in two.json("runs")] == ["done"]


@pytest.mark.slow
def test_mc_dropout_on_two_processes_draws_from_the_same_distribution(twin):
    one, two = twin
    settings = ["--mc-samples", "8", "--mc-exact", "--batch-size", "4", "--max-length", "32", "--no-rmd",
                "--data", "pool"]
    one("probe", *settings)
    kamal_run(two.workspace, "probe", *settings, "--nproc", "2")
    for pair, folder in probe_folders(one).items():
        other = probe_folders(two)[pair]
        assert np.array_equal(np.load(folder / "logits.npy"), np.load(other / "logits.npy"))
        mc_one, mc_two = np.load(folder / "mc_probs.npy"), np.load(other / "mc_probs.npy")
        # rank 0's first group of batches (8 batches of 4 rows) draws the single process's masks: same numbers
        assert (mc_one == mc_two).all(axis=1).sum() >= 32
        assert not np.array_equal(mc_one, mc_two)  # rank 1 drew its own masks...
        assert abs(mc_one.max(axis=1).mean() - mc_two.max(axis=1).mean()) < 0.01  # ...from the same distribution


@pytest.fixture(scope="module")
def still_encoder(tmp_path_factory) -> Path:
    """A student base without dropout: one process and two must then train to the same weights."""
    from transformers import BertModel

    folder = tmp_path_factory.mktemp("still") / "encoder"
    torch.manual_seed(6)
    BertModel(tiny.tiny_config(2, 0.0, 2)).save_pretrained(str(folder), safe_serialization=True)
    tiny.make_tokenizer(folder)
    return folder


@pytest.mark.slow
def test_amalgamate_on_two_processes_matches_one(two_teachers, still_encoder):
    args = ["--method", "muki-hard", "--student", still_encoder, *TRAIN, "--mc-samples", "1"]
    result = kamal_run(two_teachers.workspace, "amalgamate", *args, "--name", "double", "--nproc", "2")
    assert "Trained student double" in result.stdout
    assert "Probing news on pool first" in result.stderr  # sharded across both processes, then trained
    two_teachers("amalgamate", *args, "--name", "single")  # reads the probes the two processes made
    students = {s["name"]: s for s in two_teachers.json("students")}
    a = load_file(str(Path(students["single"]["path"]) / "model.safetensors"))
    b = load_file(str(Path(students["double"]["path"]) / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:  # the same gradient, summed in another order: equal up to rounding
        assert torch.allclose(a[key], b[key], atol=2e-4), key
    accuracy = {n: two_teachers.json("eval", n, "--data", "test")["accuracy"] for n in ("single", "double")}
    assert abs(accuracy["single"] - accuracy["double"]) <= 0.025
    assert [r["status"] for r in two_teachers.json("runs") if r["name"] == "double"] == ["done"]
    assert not list((two_teachers.workspace / ".kamal" / "artifacts" / "runs").iterdir())


@pytest.mark.slow
def test_extend_and_a_feature_level_method_on_two_processes(kamal, assets, trained, still_encoder):
    """extend (a grown student, a probe of the old student) and dfa (an Auxiliary with parameters of its own,
    all-reduced with the student's) match one process."""
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["pool6"], "--name", "pool")
    kamal("add-data", assets["test6"], "--name", "test", "--role", "eval")
    kamal("amalgamate", "--method", "dfa", "--name", "dfa-1", "--student", still_encoder, *TRAIN)
    kamal_run(kamal.workspace, "amalgamate", "--method", "dfa", "--name", "dfa-2", "--student", still_encoder,
              *TRAIN, "--nproc", "2")
    kamal("add-teacher", trained["life"], "--name", "life")
    kamal("extend", "dfa-1", "--teacher", "life", "--name", "grown-1", *TRAIN)
    kamal_run(kamal.workspace, "extend", "dfa-1", "--teacher", "life", "--name", "grown-2", *TRAIN, "--nproc", "2")
    students = {s["name"]: s for s in kamal.json("students")}
    for one, two in (("dfa-1", "dfa-2"), ("grown-1", "grown-2")):
        a = load_file(str(Path(students[one]["path"]) / "model.safetensors"))
        b = load_file(str(Path(students[two]["path"]) / "model.safetensors"))
        assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=2e-4) for k in a), (one, two)
    assert students["grown-2"]["labels"] == students["grown-1"]["labels"]


@pytest.mark.slow
def test_train_teacher_on_two_processes(kamal, assets, still_encoder):
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    args = ["train", "--labels", "world,sports", "--base", still_encoder, "--epochs", "2", "--lr", "3e-3",
            "--batch-size", "16", "--max-length", "32"]
    kamal("train-teacher", *args, "--name", "t1")
    kamal_run(kamal.workspace, "train-teacher", *args, "--name", "t2", "--nproc", "2")
    teachers = {t["name"]: t for t in kamal.json("teachers")}
    a = load_file(str(Path(teachers["t1"]["path"]) / "model.safetensors"))
    b = load_file(str(Path(teachers["t2"]["path"]) / "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=2e-4) for k in a)


def long_training_with_a_checkpoint(kamal: Kamal, assets, name: str) -> tuple[subprocess.Popen, Path]:
    """`kamal amalgamate --nproc 2` started (40 epochs), once its first checkpoint is on disk: (process, runs dir)."""
    args = ["--method", "vanilla-kd", "--student", assets["encoder"], "--epochs", "40", "--lr", "2e-3",
            "--batch-size", "16", "--max-length", "32", "--checkpoint-every", "5", "--name", name]
    proc = kamal_process(kamal.workspace, "amalgamate", *args, "--nproc", "2", start_new_session=True)
    runs = kamal.workspace / ".kamal" / "artifacts" / "runs"
    deadline = time.time() + 240
    while not list(runs.glob("run-*/checkpoint/trainer.pt")):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.2)
    return proc, runs


@pytest.mark.slow
def test_ctrl_c_on_two_processes_then_resume_on_one(two_teachers, assets):
    proc, runs = long_training_with_a_checkpoint(two_teachers, assets, "cut")
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "kamal amalgamate --resume cut" in err
    run = [r for r in two_teachers.json("runs") if r["name"] == "cut"]
    assert [r["status"] for r in run] == ["interrupted"]
    trainer = torch.load(next(runs.glob("run-*/checkpoint/trainer.pt")), weights_only=True)
    assert len(trainer["rank_rng"]) == 2 and 0 < trainer["step"] < 40 * 29
    two_teachers("amalgamate", "--resume", "cut")  # on one process now
    assert [r["status"] for r in two_teachers.json("runs") if r["name"] == "cut"] == ["interrupted", "done"]
    assert "cut" in {s["name"] for s in two_teachers.json("students")}


@pytest.mark.parametrize("args, message", [
    (["--nproc", "0"], "--nproc must be at least 1 (got 0)"),
    (["--nproc", "2", "--backend", "nccl", "--device", "cpu"], "--backend nccl needs CUDA GPUs"),
    (["--backend", "nccl", "--device", "cpu"], "--backend nccl needs CUDA GPUs"),
])
def test_bad_distributed_input_is_one_line_and_exit_2(two_teachers, args, message):
    before = two_teachers.db_snapshot()
    result = two_teachers("amalgamate", "--method", "vanilla-kd", *args, code=2)
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert two_teachers.db_snapshot() == before
    result = two_teachers("probe", *args, code=2)
    assert message in result.stderr


def test_under_torchrun_only_the_distributed_commands_run(two_teachers, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    result = two_teachers("add-data", __file__, "--name", "x", code=2)
    assert "runs in one process; under torchrun only probe, amalgamate, extend and train-teacher run" in result.stderr
    result = two_teachers("amalgamate", "--method", "uhc", "--nproc", "2", code=2)
    assert "under torchrun leave it out" in result.stderr


def _rank_pids(launcher: int) -> dict[int, int]:
    """rank -> pid of the processes torchrun started under this launcher."""
    found = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            if int(fields["PPid"]) != launcher:
                continue
            environ = (status.parent / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, KeyError):
            continue
        for item in environ:
            if item.startswith(b"RANK="):
                found[int(item[5:])] = int(status.parent.name)
    return found


@pytest.mark.slow
def test_killing_rank_0_is_recorded_interrupted_by_the_launcher(two_teachers, assets):
    proc, _ = long_training_with_a_checkpoint(two_teachers, assets, "headless")
    os.kill(_rank_pids(proc.pid)[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 1 and "process 0 of the job died (signal 9)" in err, err
    conn = sqlite3.connect(two_teachers.workspace / ".kamal" / "kamal.db")  # as the launcher left it: no reader ran
    try:
        rows = conn.execute("SELECT status, error FROM runs WHERE name = 'headless'").fetchall()
    finally:
        conn.close()
    assert rows == [("interrupted", "the process ended without finishing (killed or crashed)")]
    kamal_run(two_teachers.workspace, "amalgamate", "--resume", "headless")  # its checkpoint was kept
    assert [r["status"] for r in two_teachers.json("runs") if r["name"] == "headless"] == ["interrupted", "done"]


@pytest.mark.slow
def test_a_lost_rank_marks_the_run_interrupted_and_it_resumes_on_two(two_teachers, assets):
    proc, runs = long_training_with_a_checkpoint(two_teachers, assets, "lost")
    os.kill(_rank_pids(proc.pid)[1], signal.SIGKILL)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode != 0
    run = [r for r in two_teachers.json("runs") if r["name"] == "lost"]
    assert [r["status"] for r in run] == ["interrupted"], err
    assert run[0]["error"] == "interrupted because a process of the job was lost", (run[0]["error"], err)
    kamal_run(two_teachers.workspace, "amalgamate", "--resume", "lost", "--nproc", "2")
    assert [r["status"] for r in two_teachers.json("runs") if r["name"] == "lost"] == ["interrupted", "done"]


@pytest.mark.slow
def test_data_another_command_writes_stops_every_rank_with_one_line(two_teachers):
    from kamalcli.workspace.folder import Workspace
    from kamalcli.workspace.store import Store

    store = Store.open(Workspace(two_teachers.workspace), holder="kamal add-data")
    store.claim("dataset", "pool", exclusive=True)  # another kamal command is writing dataset pool
    try:
        result = kamal_run(two_teachers.workspace, "probe", "--nproc", "2", code=2)
    finally:
        store.close()
    assert result.stderr.strip().splitlines() == [
        f"Error: dataset pool is in use: kamal add-data (pid {os.getpid()}) is writing it; try again when it has "
        "finished"]
    assert [r for r in two_teachers.json("runs") if r["kind"] == "probe"] == []  # refused before it started


@pytest.mark.slow
def test_a_method_that_runs_on_one_process_refuses_several_with_one_line(two_teachers):
    before = two_teachers.db_snapshot()
    result = kamal_run(two_teachers.workspace, "amalgamate", "--method", "rl-kd", *TRAIN, "--nproc", "2", code=2)
    assert result.stderr.strip().splitlines() == [
        "Error: rl-kd runs on one process (its policy takes one REINFORCE step per whole batch, and its phases "
        "are not sharded); run it without --nproc or torchrun"]
    assert two_teachers.db_snapshot() == before


@pytest.mark.slow
def test_early_stopping_on_two_processes_stops_every_rank_where_one_process_stops(two_teachers, still_encoder):
    toml = two_teachers.workspace / "kamal.toml"
    text = re.sub(r"(?m)^#?\s*eval_every = \d+", "eval_every = 2", toml.read_text())
    toml.write_text(re.sub(r"(?m)^#?\s*patience = \d+", "patience = 1", text))
    args = ["--method", "vanilla-kd", "--student", still_encoder, "--steps", "60", "--lr", "5e-2",
            "--batch-size", "16", "--max-length", "32"]
    kamal_run(two_teachers.workspace, "amalgamate", *args, "--name", "double", "--nproc", "2")
    two_teachers("amalgamate", *args, "--name", "single")
    train = {s["name"]: s["train"] for s in two_teachers.json("students")}
    assert len(train["single"]["history"]) >= 2  # it measured, so the ranks had decisions to agree on
    for key in ("steps", "best_step", "stopped_early"):
        assert train["double"][key] == train["single"][key], key
    assert [r["status"] for r in two_teachers.json("runs") if r["name"] == "double"] == ["done"]
