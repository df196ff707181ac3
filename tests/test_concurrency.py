"""Commands beside a training run: only what touches the same teacher, dataset or student waits.

A real `kamal amalgamate` runs in a process of its own, held just before its
training loop (its probes computed, its run recorded); every other command
is tried beside it, as a user would while a long run goes on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tiny
from conftest import Kamal

# several processes, so the full tier (make test-all); one worker holds the one held run (loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("busy-workspace")]

TRAIN = ["--epochs", "1", "--lr", "2e-3", "--batch-size", "16", "--max-length", "32"]

HOLDER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import kamalcli.train.loop as loop

    real, flags = loop.train, Path(os.environ["HOLD_FLAGS"])

    def held(*args, **kwargs):
        (flags / "started").touch()
        while not (flags / "release").exists():
            time.sleep(0.05)
        return real(*args, **kwargs)

    loop.train = held
    from kamalcli.cli import main
    sys.argv[0] = "kamal"
    main()
""")


def start_held(workspace: Path, flags: Path, *args) -> subprocess.Popen:
    """`kamal ARGS` in its own process, stopped where its training would start; returns once it is there."""
    flags.mkdir(parents=True, exist_ok=True)
    script = flags / "hold.py"
    script.write_text(HOLDER)
    env = {**os.environ, "HOLD_FLAGS": str(flags), "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, str(script), "--workspace", str(workspace), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 180
    while not (flags / "started").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"the held command never reached training:\n{out}\n{err}")
        time.sleep(0.05)
    return proc


def release(flags: Path, proc: subprocess.Popen) -> subprocess.CompletedProcess:
    (flags / "release").touch()
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def busy(tmp_path_factory, assets, trained):
    """A workspace with two teachers, a pool, a test set, a finished student `done`, and an amalgamate of
    student `held` running (stopped before its training loop) for the whole module."""
    root = tmp_path_factory.mktemp("busy")
    Kamal(None)("init", root / "ws")
    kamal = Kamal(root / "ws")
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["pool"], "--name", "pool")
    kamal("add-data", assets["test"], "--name", "test", "--role", "eval")
    kamal("amalgamate", "--method", "muki-hard", "--name", "done", "--student", assets["encoder"], *TRAIN)
    flags = root / "flags"
    proc = start_held(kamal.workspace, flags, "amalgamate", "--method", "muki-hard", "--name", "held",
                      "--student", assets["encoder"], *TRAIN)
    yield kamal, proc
    if proc.poll() is None:
        finished = release(flags, proc)
        assert finished.returncode == 0, finished.stderr


def test_the_held_run_shows_running(busy):
    kamal, proc = busy
    [run] = [r for r in kamal.json("runs") if r["name"] == "held"]
    assert run["status"] == "running"


@pytest.mark.parametrize("command", [
    ["eval", "done", "--data", "test"],
    ["eval", "--baseline", "ensemble", "--data", "test"],
    ["export", "done", "--onnx"],
    ["add-data", "{test}", "--name", "more", "--role", "eval"],
    ["probe", "--data", "test", "--mc-samples", "2"],
    ["students"], ["teachers"], ["status"], ["report"],
], ids=lambda c: " ".join(c[:2]))
def test_commands_that_touch_other_things_go_on(busy, assets, command):
    kamal, proc = busy
    kamal(*[str(assets["test"]) if a == "{test}" else a for a in command])
    assert proc.poll() is None  # the held run is still there


def test_a_teacher_from_another_folder_and_its_own_training_go_on(busy, assets, tmp_path):
    kamal, _ = busy
    kamal("add-teacher", assets["teacher_c"], "--name", "life")
    kamal("add-data", assets["train"], "--name", "train6", "--role", "eval")
    kamal("train-teacher", "train6", "--labels", "health,arts", "--name", "life2", "--base", assets["encoder"],
          "--epochs", 1, "--batch-size", 16, "--max-length", 32)


def test_synthesize_with_the_running_runs_teachers_goes_on(busy, tmp_path):
    kamal, _ = busy
    lm = tiny.make_causal_lm(tmp_path / "lm")
    kamal("synthesize", "--lm", lm, "--name", "written", "--teacher", "news", "--per-class", 2,
          "--max-new-tokens", 4, "--batch-size", 2, "--top-m", 5)


@pytest.mark.parametrize("command, refusal", [
    (["remove-teacher", "news"], "Error: teacher news is in use: another kamal command reads it; "
                                 "try again when it has finished"),
    (["remove-data", "pool"], "Error: dataset pool is in use: another kamal command reads it; "
                              "try again when it has finished"),
    (["amalgamate", "--method", "muki-hard", "--name", "held", "--data", "pool", "--student", "{encoder}", *TRAIN],
     "Error: student held is in use: kamal amalgamate (pid {pid}) is writing it; try again when it has finished"),
    (["amalgamate", "--resume", "held"],  # round 4, item 20
     "Error: held is still running (kamal amalgamate, pid {pid}): nothing to resume until it stops (Ctrl-C there, "
     "or kill {pid})"),
])
def test_commands_that_touch_the_runs_teachers_data_or_student_are_refused(busy, assets, command, refusal):
    kamal, proc = busy
    before = kamal.db_snapshot()
    result = kamal(*[str(assets["encoder"]) if a == "{encoder}" else a for a in command], code=2)
    assert one_line(result) == refusal.format(pid=proc.pid)
    assert kamal.db_snapshot() == before


def test_init_force_is_refused_while_commands_run(busy):
    kamal, _ = busy
    result = Kamal(None)("init", kamal.workspace, "--force", code=2)
    assert one_line(result) == ("Error: the workspace is busy: other kamal commands are running in it; "
                                "wait for them to finish")
    assert not list(kamal.workspace.glob(".kamal.old-*"))


def test_a_writer_beside_a_running_command_leaves_its_scratch_files_alone(busy, assets):
    kamal, _ = busy
    scratch = kamal.workspace / ".kamal" / "artifacts" / "tmp" / "in-use"
    scratch.mkdir(parents=True)
    kamal("add-data", assets["test"], "--name", "beside", "--role", "eval")  # a writer, not alone
    assert scratch.is_dir()  # a writer alone would have removed it as a dead command's leftover
    scratch.rmdir()


def test_a_probe_being_computed_is_waited_for_then_read_from_the_cache(ws, kamal, trained, assets, tmp_path):
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-data", assets["pool"], "--name", "pool")
    from kamalcli.workspace.folder import Workspace
    from kamalcli.workspace.store import Store

    store = Store.open(Workspace(ws), holder="kamal probe")
    key = _probe_key(store, "news", "pool")
    store.claim("probe", key, exclusive=True)
    waiting = subprocess.Popen([sys.executable, "-m", "kamalcli", "--workspace", str(ws), "probe",
                                "--mc-samples", "2", "--max-length", "32"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)
    assert waiting.poll() is None  # it waits for the probe another command is computing
    store.close()
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert f"Waiting for kamal probe (pid {os.getpid()}): it is computing the probe of news on pool." in err


def _probe_key(store, teacher_name: str, dataset_name: str) -> str:
    from kamalcli.probe.runner import ProbeRequest, probe_key

    teacher, dataset = store.teacher(teacher_name), store.dataset(dataset_name)
    settings = ProbeRequest(mc_samples=2, max_length=32).settings_for(teacher)
    return probe_key(teacher, dataset, settings)


def test_a_run_whose_process_was_killed_shows_interrupted_to_readers(ws, kamal, trained, assets, tmp_path):
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["pool"], "--name", "pool")
    proc = start_held(ws, tmp_path / "flags", "amalgamate", "--method", "muki-hard", "--name", "cut",
                      "--student", assets["encoder"], *TRAIN)
    assert [r["status"] for r in kamal.json("runs") if r["name"] == "cut"] == ["running"]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    [run] = [r for r in kamal.json("runs") if r["name"] == "cut"]
    assert run["status"] == "interrupted" and "killed or crashed" in run["error"]
    assert [r["name"] for r in kamal.json("status")["running"]] == []
