"""What the workspace records, as the store returns it: one frozen dataclass per table's row."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.heads import DEFAULT as DEFAULT_HEAD
from kamalcli.labels import Aliases
from kamalcli.models.folder import task_of_architecture


@dataclass(frozen=True)
class Teacher:
    id: int
    name: str
    source: str
    path: str
    fingerprint: str
    architecture: str
    model_type: str
    num_layers: int | None
    hidden_size: int | None
    vocab_size: int | None
    dropout: float | None
    tokenizer_fingerprint: str | None
    origin: str
    train_dataset_id: int | None
    student_id: int | None
    created_at: str
    labels: tuple[str, ...] = ()
    # (file name, size, mtime in ns) of each weight file when last checked; None: added by an older kamal
    weights_stat: tuple[tuple[str, int, int], ...] | None = None
    head: str | None = None          # the task it answers (add-teacher --task; kamalcli/heads.py); None: the shared one
    multi_label: bool = False        # a sigmoid per label (problem_type multi_label_classification)

    @property
    def head_name(self) -> str:
        return self.head or DEFAULT_HEAD

    @property
    def task(self) -> str:
        """token: a token classifier (named entities, BIO tags); sequence: a text classifier."""
        return task_of_architecture(self.architecture)

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "task": self.task,
            "head": self.head_name,
            "multi_label": self.multi_label,
            "labels": list(self.labels),
            "path": self.path,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "architecture": self.architecture,
            "model_type": self.model_type,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "dropout": self.dropout,
            "tokenizer_fingerprint": self.tokenizer_fingerprint,
            "origin": self.origin,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class Dataset:
    id: int
    name: str
    source: str
    format: str
    role: str                        # transfer, eval or test (measured on, never decided by)
    num_rows: int
    content_hash: str
    text_column: str
    label_column: str | None
    columns: list[str]
    label_counts: dict[str, int] | None
    path: str
    created_at: str
    provenance: dict | None = None   # datasets kamal generated (synthesize) or converted; None for added data
    task: str = "sequence"           # token: tokens with BIO tags (named entities)

    @property
    def has_labels(self) -> bool:
        return self.label_counts is not None

    def refuse_test(self, use: str) -> None:
        """A test set (`add-data --role test`) is measured on, never fitted or decided by."""
        if self.role == "test":
            raise KamalError(f"{use}: {self.name} is a test set, which kamal only measures on (add its rows again "
                             "with --role eval to fit or select on them)")

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "role": self.role,
            "task": self.task,
            "rows": self.num_rows,
            "labelled": self.has_labels,
            "label_counts": self.label_counts,
            "text_column": self.text_column,
            "label_column": self.label_column,
            "columns": self.columns,
            "format": self.format,
            "source": self.source,
            "content_hash": self.content_hash,
            "created_at": self.created_at,
            "provenance": self.provenance,
        }


@dataclass(frozen=True)
class Run:
    id: int
    kind: str
    name: str | None
    status: str
    params: dict
    result: dict | None
    error: str | None
    workdir: str | None
    started_at: str
    finished_at: str | None
    pid: int | None = None

    def as_json(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "status": self.status,
            "params": self.params,
            "result": self.result,
            "error": self.error,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


@dataclass(frozen=True)
class Probe:
    id: int
    teacher_id: int
    dataset_id: int
    key: str
    options_key: str
    options: dict
    path: str
    num_rows: int
    summary: dict
    seconds: float | None
    run_id: int | None
    created_at: str


@dataclass(frozen=True)
class RmdFit:
    id: int
    teacher_id: int
    key: str
    source: str
    dataset_id: int | None
    layers: list[int]
    num_rows: int
    path: str
    created_at: str


@dataclass(frozen=True)
class Student:
    id: int
    name: str
    method: str
    options: dict
    base: str
    path: str
    labels: list[str]
    parent_id: int | None
    transfer_dataset_id: int | None
    select_by: str
    seed: int
    train: dict
    metrics: dict
    run_id: int | None
    created_at: str
    parent: str | None = None
    teachers: tuple[dict, ...] = ()
    task: str = "sequence"
    scope: dict | None = None         # kamalcli/trust/scope.py: Scope.as_json(), fitted on its transfer rows
    calibration: dict | None = None   # kamalcli/trust/conformal.py: Calibration.as_json(), from kamal calibrate

    def by_task(self, kind: str) -> dict[str | None, dict]:
        """Its scope or calibration (kind) as recorded, by task: {task: settings} for a student of several tasks,
        {None: settings} for one task, {} when it has none."""
        record = getattr(self, kind)
        if not record:
            return {}
        return dict(record["tasks"]) if "tasks" in record else {None: record}

    @property
    def folder(self) -> Path:
        """The student's saved folder; a one-line error if it is gone from disk."""
        folder = Path(self.path)
        if not (folder / "config.json").is_file():
            raise KamalError(f"student {self.name}'s folder is missing: {folder}")
        return folder

    @property
    def max_length(self) -> int:
        """Tokens per text the student was trained with (and reads at prediction)."""
        return self.train.get("config", {}).get("max_length", 128)

    @property
    def aliases(self) -> Aliases:
        """The other names of its classes when it was trained (kamal labels merge); none for older students."""
        return Aliases(self.train.get("label_aliases") or {})

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "task": self.task,
            "method": self.method,
            "options": self.options,
            "base": self.base,
            "path": self.path,
            "labels": self.labels,
            "label_aliases": self.aliases.as_json(),
            "parent": self.parent,
            "teachers": [dict(t) for t in self.teachers],
            "select_by": self.select_by,
            "seed": self.seed,
            "train": self.train,
            "metrics": self.metrics,
            "scope": self.scope,
            "calibration": self.calibration,
            "run_id": self.run_id,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class Export:
    id: int
    student_id: int
    path: str
    quantize: str | None
    opset: int
    parity: dict
    size_bytes: int
    created_at: str

    def as_json(self) -> dict:
        return {"path": self.path, "quantize": self.quantize, "opset": self.opset, "parity": self.parity,
                "size_bytes": self.size_bytes, "created_at": self.created_at}
