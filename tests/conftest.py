"""Shared fixtures: a CLI runner over temporary workspaces, tiny models and synthetic data."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

if os.environ.get("PYTEST_XDIST_WORKER"):
    # make test runs a worker per core: torch's own threads on top oversubscribe the cores (measured: the tiny
    # models' steps 14% slower). Before torch is imported, which reads it once.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import tiny  # noqa: E402

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

FOUR = ["world", "sports", "business", "scitech"]
SIX = FOUR + ["health", "arts"]
TRAIN = ["--epochs", "2", "--lr", "2e-3", "--batch-size", "16", "--max-length", "32"]  # a tiny student's budget


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Keep kamal's cache (converted models, hub cache) out of the user's home during tests."""
    if "KAMAL_CACHE_DIR" not in os.environ:
        os.environ["KAMAL_CACHE_DIR"] = str(tmp_path_factory.mktemp("kamal-cache"))
    yield


@pytest.fixture(autouse=True)
def _label_names_by_spelling(monkeypatch):
    """add-teacher compares label names in a sentence encoder (all-MiniLM-L6-v2), whose conversion would cost
    every test session; here names are compared by spelling, and tests of the encoder path name one."""
    from kamalcli.teachers import label_overlap

    monkeypatch.setattr(label_overlap, "DEFAULT_ENCODER", "/no-sentence-encoder-in-unit-tests")


@pytest.fixture(autouse=True)
def _no_smoothing_by_default(monkeypatch):
    """muki-hard's smooth=auto changes every target beside a prior, and muki's pick_smooth=auto every pick; here
    auto means none, so the tests of other things keep their targets, and the tests of smoothing set it. The
    real-model tier runs the true default."""
    from kamalcli.recipe import recipe as neighbours

    monkeypatch.setattr(neighbours, "SMOOTH_NEIGHBOURS", 0)
    monkeypatch.setattr(neighbours, "PICK_NEIGHBOURS", 0)  # pick_smooth=auto, likewise


def unfolded(output: str) -> str:
    """Output with the lines kamal folds at 160 characters joined again (a folded line goes on indented)."""
    import re

    return re.sub(r"\n +(?=\S)", " ", output)


class Kamal:
    """Runs `kamal ...` in-process (click's CliRunner) against one workspace."""

    def __init__(self, workspace: Path | None):
        self.workspace = workspace

    def __call__(self, *args, code: int = 0, input: str | None = None):
        from click.testing import CliRunner

        from kamalcli.cli import cli

        argv = (["--workspace", str(self.workspace)] if self.workspace else []) + [str(a) for a in args]
        result = CliRunner().invoke(cli, argv, input=input, catch_exceptions=False)
        assert result.exit_code == code, f"kamal {' '.join(argv)} exited {result.exit_code}:\n{result.output}"
        return result

    def json(self, *args):
        return json.loads(self(*args, "--json").stdout)

    def db_snapshot(self) -> dict:
        """Every table's rows: to prove a failed command changed nothing."""
        conn = sqlite3.connect(self.workspace / ".kamal" / "kamal.db")
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
            return {t: sorted(conn.execute(f"SELECT * FROM [{t}]").fetchall(), key=repr) for t in tables
                    if t not in ("runs",)}
        finally:
            conn.close()


@pytest.fixture
def ws(tmp_path) -> Path:
    path = tmp_path / "ws"
    Kamal(None)("init", path)
    return path


@pytest.fixture
def kamal(ws) -> Kamal:
    return Kamal(ws)


@pytest.fixture(scope="session")
def assets(tmp_path_factory) -> dict[str, Path]:
    """Tiny random models and synthetic topic data, built once per test session."""
    root = tmp_path_factory.mktemp("assets")
    out = {
        "teacher_a": tiny.make_classifier(root / "teacher_a", ["world", "sports"], seed=1),
        "teacher_b": tiny.make_classifier(root / "teacher_b", ["business", "scitech"], seed=2),
        "teacher_c": tiny.make_classifier(root / "teacher_c", ["health", "arts"], seed=3),
        "generic": tiny.make_classifier(root / "generic", None, seed=4, generic_count=3),
        "no_dropout": tiny.make_classifier(root / "no_dropout", ["health", "arts"], seed=5, dropout=0.0),
        "encoder": tiny.make_encoder(root / "encoder", seed=6),
        "train": tiny.write_jsonl(root / "train.jsonl", tiny.topic_rows(FOUR + ["health", "arts"], 60, seed=11)),
        "pool": tiny.write_jsonl(root / "pool.jsonl", [{"text": r["text"]} for r in tiny.topic_rows(FOUR, 60, seed=12)]),
        "pool6": tiny.write_jsonl(root / "pool6.jsonl", [{"text": r["text"]} for r in tiny.topic_rows(SIX, 40, seed=14)]),
        "test6": tiny.write_jsonl(root / "test6.jsonl", tiny.topic_rows(SIX, 15, seed=15)),
        "test": tiny.write_jsonl(root / "test.jsonl", tiny.topic_rows(FOUR, 20, seed=13)),
    }
    return out


def _train_teachers(ws: Path, assets) -> dict[str, str]:
    k = Kamal(None)
    k("init", ws)
    k = Kamal(ws)
    k("add-data", assets["train"], "--name", "train", "--role", "eval")
    settings = ["--base", assets["encoder"], "--epochs", 10, "--lr", "3e-3", "--batch-size", 16, "--max-length", 32]
    k("train-teacher", "train", "--labels", "world,sports", "--name", "news", *settings)
    k("train-teacher", "train", "--labels", "business,scitech", "--name", "money", *settings)
    k("train-teacher", "train", "--labels", "health,arts", "--name", "life", *settings)
    return {t["name"]: t["path"] for t in k.json("teachers")}


@pytest.fixture(scope="session")
def trained(tmp_path_factory, assets, request) -> dict[str, Path]:
    """Three tiny teachers really trained (kamal train-teacher) on disjoint thirds of six topics. Built once per
    test session and shared by pytest-xdist's workers (tests only read teacher folders)."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):
        root = root.parent  # the session's folder, above each xdist worker's own
    index = root / "teacher-factory.json"
    with FileLock(str(root / "teacher-factory.lock")):
        if not index.is_file():
            index.write_text(json.dumps(_train_teachers(root / "teacher-factory" / "ws", assets)))
    return {name: Path(path) for name, path in json.loads(index.read_text()).items()}


@pytest.fixture(scope="session")
def lm(tmp_path_factory) -> Path:
    """A tiny causal LM (Llama-shaped) for kamal synthesize."""
    return tiny.make_causal_lm(tmp_path_factory.mktemp("lm") / "lm", seed=7)


def add_copied_teacher(kamal: Kamal, assets, folder: Path, names: tuple[str, str] = ("a", "b")) -> Path:
    """Teacher teacher_a from a copy at folder (which the test may rewrite or move), teacher_b as it is, and
    the transfer pool. Returns the copy."""
    import shutil

    shutil.copytree(assets["teacher_a"], folder)
    kamal("add-teacher", folder, "--name", names[0])
    kamal("add-teacher", assets["teacher_b"], "--name", names[1])
    kamal("add-data", assets["pool"], "--name", "pool")
    return folder


def add_teachers_and_data(kamal: Kamal, teachers: dict[str, Path], assets) -> Kamal:
    """Register these teacher folders by name, the transfer pool and the labelled test set."""
    for name, folder in teachers.items():
        kamal("add-teacher", folder, "--name", name)
    kamal("add-data", assets["pool"], "--name", "pool")
    kamal("add-data", assets["test"], "--name", "test", "--role", "eval")
    return kamal


@pytest.fixture
def two_teachers(kamal, assets, trained) -> Kamal:
    """A workspace with the two trained teachers, transfer data and a labelled test set."""
    return add_teachers_and_data(kamal, {"news": trained["news"], "money": trained["money"]}, assets)


@pytest.fixture(scope="session")
def _kd_workspace(tmp_path_factory, assets, trained) -> Path:
    ws = tmp_path_factory.mktemp("kd-student") / "ws"
    Kamal(None)("init", ws)
    k = add_teachers_and_data(Kamal(ws), {"news": trained["news"], "money": trained["money"]}, assets)
    k("amalgamate", "--method", "vanilla-kd", "--name", "kd", "--student", assets["encoder"], *TRAIN)
    k("eval", "kd", "--data", "test")
    return ws


@pytest.fixture
def kd_student(_kd_workspace, ws) -> Kamal:
    """two_teachers' workspace with student "kd" (vanilla-kd), trained and evaluated on "test": a copy of one
    workspace trained once per worker, which the test may change."""
    import shutil

    shutil.rmtree(ws)
    shutil.copytree(_kd_workspace, ws)
    return Kamal(ws)


@pytest.fixture
def interrupt_training(monkeypatch):
    """interrupt_training(step): the next trainings stop as if Ctrl-C came at that step; (None) undoes it."""
    from kamalcli.train import loop

    real = loop.train

    def arm(step: int | None) -> None:
        def interrupted(*args, **kwargs):
            def stop(at):
                if at == step:
                    raise KeyboardInterrupt
            return real(*args, **{**kwargs, "on_step": stop})

        monkeypatch.setattr(loop, "train", real if step is None else interrupted)

    return arm


@pytest.fixture
def same_labels(kamal, assets, trained, tmp_path):
    """Two tiny teachers over the same labels (news, and news trained on by another seed), labelled transfer."""
    kamal("add-data", assets["train"], "--name", "train6", "--role", "eval")
    kamal("train-teacher", "train6", "--labels", "world,sports", "--name", "news2", "--base", assets["encoder"],
          "--epochs", 4, "--lr", "3e-3", "--batch-size", 16, "--max-length", 32, "--seed", 5)
    kamal("add-teacher", trained["news"], "--name", "news")
    rows = [r for r in tiny.topic_rows(["world", "sports"], 40, seed=21)]
    kamal("add-data", tiny.write_jsonl(tmp_path / "ws.jsonl", rows), "--name", "labelled", "--label-column", "label")
    return kamal


@pytest.fixture
def uninstalled_base(monkeypatch):
    """uninstalled_base(name): the named base behaves as if its package were not installed."""
    from dataclasses import replace

    from kamalcli.models import bases as assets
    from kamalcli.errors import KamalError

    def uninstall(name: str) -> None:
        def locate():
            raise KamalError(f"the model package of {name} is not installed")

        monkeypatch.setitem(assets.BASES, name, replace(assets.BASES[name], locate=locate))

    return uninstall
