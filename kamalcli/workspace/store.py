"""The only module that knows table names. Reads return dataclasses; writes are transactions."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from typing import Any, Iterator

from kamalcli.errors import KamalError
from kamalcli.files import resolved_path, stored_path
from kamalcli.labels import Aliases, LabelSpace
from kamalcli.workspace.locks import Locks
from kamalcli.workspace.records import Dataset, Export, Probe, RmdFit, Run, Student, Teacher


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _loads(text: str | None, default: Any = None) -> Any:
    return json.loads(text) if text else default


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


PROBE_ROW_COLUMNS = ("pred", "max_prob", "entropy", "uhat", "mc_pred", "mc_max_prob", "mc_entropy", "mc_uhat")


class Store:
    """root: the workspace folder; paths inside it are stored relative to it (see kamalcli.files.stored_path)."""

    def __init__(self, db, root=None, locks: Locks | None = None):
        self.db = db
        self.root = root
        self.locks = locks

    @classmethod
    def open(cls, workspace, holder: str = "kamal") -> "Store":
        return cls(workspace.db(), workspace.root, Locks(workspace.state_dir, holder))

    def claim(self, kind: str, name: str, *, exclusive: bool = False, wait: bool = False, on_wait=None) -> None:
        """Claim a teacher, dataset, student... for the rest of this command: shared to read it,
        exclusive to write it (workspace/locks.py). Refused in one line when another command is in the way."""
        if self.locks is not None:
            self.locks.claim(kind, name, exclusive=exclusive, wait=wait, on_wait=on_wait)

    def claim_inputs(self, teachers=(), datasets=()) -> None:
        """Shared claims on what a command reads: no one removes or replaces them meanwhile."""
        for teacher in teachers:
            self.claim("teacher", teacher.name)
        for dataset in datasets:
            if dataset is not None:
                self.claim("dataset", dataset.name)

    @contextlib.contextmanager
    def _bookkeeping(self) -> Iterator[None]:
        with self.locks.bookkeeping() if self.locks is not None else contextlib.nullcontext():
            yield

    def _rel(self, path) -> str | None:
        return stored_path(path, self.root)

    def _abs(self, text: str | None) -> str | None:
        return resolved_path(text, self.root)

    def close(self) -> None:
        if self.locks is not None:
            self.locks.release_all()
        self.db.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator["Store"]:
        with self.db.atomic():
            yield self

    def _rows(self, sql: str, params: Any = ()) -> list[dict]:
        cursor = self.db.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def _one(self, sql: str, params: Any = ()) -> dict | None:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    def _insert(self, table: str, fields: dict[str, Any]) -> int:
        """INSERT one row (created_at added); call inside a transaction. Returns its id."""
        fields = {**fields, "created_at": now()}
        cursor = self.db.execute(
            f"INSERT INTO {table} ({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})", list(fields.values())
        )
        return cursor.lastrowid

    def _delete(self, table: str, row_id: int) -> None:
        with self.transaction():
            self.db.execute(f"DELETE FROM {table} WHERE id = ?", [row_id])

    # -- teachers and labels -------------------------------------------
    def _teacher(self, row: dict) -> Teacher:
        labels = [r["name"] for r in self._rows(
            "SELECT l.name FROM teacher_labels tl JOIN labels l ON l.id = tl.label_id "
            "WHERE tl.teacher_id = ? ORDER BY tl.position", [row["id"]])]
        stat = _loads(row.get("weights_stat"))
        return Teacher(**{**row, "path": self._abs(row["path"]), "multi_label": bool(row.get("multi_label")),
                          "weights_stat": tuple(map(tuple, stat)) if stat is not None else None}, labels=tuple(labels))

    def teachers(self) -> list[Teacher]:
        return [self._teacher(r) for r in self._rows("SELECT * FROM teachers ORDER BY id")]

    def _named(self, table: str, name: str, build, everything, nothing: str):
        """The row of that name, built into its record; or one line naming those there are."""
        row = self._one(f"SELECT * FROM {table} WHERE name = ?", [name])
        if row is None:
            known = ", ".join(record.name for record in everything()) or nothing
            raise KamalError(f"no {table[:-1]} named {name!r} ({table}: {known})")
        return build(row)

    def teacher(self, name: str) -> Teacher:
        return self._named("teachers", name, self._teacher, self.teachers, "none registered")

    def teacher_by_id(self, teacher_id: int) -> Teacher:
        return self._teacher(self._one("SELECT * FROM teachers WHERE id = ?", [teacher_id]))

    def find_teacher(self, *, name: str | None = None, fingerprint: str | None = None) -> Teacher | None:
        row = self._one("SELECT * FROM teachers WHERE name = ? OR fingerprint = ?", [name, fingerprint])
        return self._teacher(row) if row else None

    def add_teacher(self, *, labels: list[str], **fields: Any) -> Teacher:
        fields = {**fields, "path": self._rel(fields["path"])}
        if fields.get("weights_stat") is not None:
            fields["weights_stat"] = _dumps(fields["weights_stat"])
        with self.transaction():
            teacher_id = self._insert("teachers", fields)
            for position, label in enumerate(labels):
                self.db.execute("INSERT OR IGNORE INTO labels (name, created_at) VALUES (?, ?)", [label, now()])
                label_id = self._one("SELECT id FROM labels WHERE name = ?", [label])["id"]
                self.db.execute(
                    "INSERT INTO teacher_labels (teacher_id, position, label_id) VALUES (?, ?, ?)",
                    [teacher_id, position, label_id],
                )
        return self.teacher_by_id(teacher_id)

    def remove_teacher(self, name: str) -> Teacher:
        teacher = self.teacher(name)
        with self.transaction():
            self.db.execute("DELETE FROM teachers WHERE id = ?", [teacher.id])
            self.db.execute("DELETE FROM labels WHERE id NOT IN (SELECT label_id FROM teacher_labels)")
        return teacher

    def record_teacher_weights(self, teacher_id: int, weights_stat) -> None:
        """The sizes and times of the teacher's weight files, checked to hold the recorded weights."""
        with self.transaction():
            self.db.execute("UPDATE teachers SET weights_stat = ? WHERE id = ?", [_dumps(weights_stat), teacher_id])

    def replace_teacher_weights(self, teacher_id: int, fingerprint: str, weights_stat) -> list[str]:
        """One transaction: the teacher's new fingerprint, and its probes and RMD fits forgotten, with the
        selection figures made from them (students keep the fingerprint they were trained from).
        Returns the folders of what was forgotten, for the caller to delete."""
        paths = self.probe_artifacts(teacher_id=teacher_id)
        stale = {p.id for p in self.probes(teacher_id=teacher_id)}
        with self.transaction():
            for row in self._rows("SELECT id, probe_ids FROM selection"):
                if stale & set(_loads(row["probe_ids"], [])):
                    self.db.execute("DELETE FROM selection WHERE id = ?", [row["id"]])
            self.db.execute("DELETE FROM probes WHERE teacher_id = ?", [teacher_id])
            self.db.execute("DELETE FROM rmd_fits WHERE teacher_id = ?", [teacher_id])
            self.db.execute("UPDATE teachers SET fingerprint = ?, weights_stat = ? WHERE id = ?",
                            [fingerprint, _dumps(weights_stat), teacher_id])
        return paths

    def teachers_of_task(self, task: str) -> list[Teacher]:
        return [t for t in self.teachers() if t.task == task]

    def label_space(self, teachers: list[Teacher] | None = None) -> LabelSpace:
        teachers = self.teachers() if teachers is None else teachers
        return LabelSpace.from_teachers([(t.name, t.labels) for t in teachers], aliases=self.label_aliases())

    # -- label aliases (kamal labels merge / split) --------------------------------
    def label_aliases(self) -> Aliases:
        rows = self._rows("SELECT alias, label FROM label_aliases ORDER BY position, alias")
        return Aliases({r["alias"]: r["label"] for r in rows})

    def merge_labels(self, members: list[str], name: str, teachers: list[str]) -> None:
        """One class named name for every label in members (each the class's name or an alias), in one
        transaction; the selection figures of these teachers go (they were scored over the old classes)."""
        with self.transaction():
            self.db.execute(f"DELETE FROM label_aliases WHERE alias IN ({_marks(members)}) "
                            f"OR label IN ({_marks(members)})", [*members, *members])
            start = (self._one("SELECT COALESCE(MAX(position), -1) + 1 AS n FROM label_aliases") or {"n": 0})["n"]
            for position, alias in enumerate((m for m in members if m != name), start=start):
                self.db.execute("INSERT INTO label_aliases (alias, label, position, created_at) VALUES (?, ?, ?, ?)",
                                [alias, name, position, now()])
            self._forget_selection(teachers)

    def split_label(self, name: str, teachers: list[str]) -> list[str]:
        """Undo a merge: the class's aliases go; returns them. The teachers' selection figures go too."""
        aliases = self.label_aliases().of(name)
        with self.transaction():
            self.db.execute("DELETE FROM label_aliases WHERE label = ?", [name])
            self._forget_selection(teachers)
        return aliases

    def _forget_selection(self, teachers: list[str]) -> None:
        for row in self._rows("SELECT id, teachers FROM selection"):
            if set(teachers) & set(_loads(row["teachers"], [])):
                self.db.execute("DELETE FROM selection WHERE id = ?", [row["id"]])

    # -- datasets --------------------------------------------------------
    def _dataset(self, row: dict) -> Dataset:
        row = dict(row)
        row["columns"] = _loads(row["columns"], [])
        row["label_counts"] = _loads(row["label_counts"])
        row["provenance"] = _loads(row.get("provenance"))
        row["path"] = self._abs(row["path"])
        if row.pop("test", 0):  # m012_test_sets: a test set is stored as role 'eval' with this flag
            row["role"] = "test"
        return Dataset(**row)

    def datasets(self, role: str | None = None) -> list[Dataset]:
        return [d for d in map(self._dataset, self._rows("SELECT * FROM datasets ORDER BY id"))
                if role in (None, d.role)]

    def dataset(self, name: str) -> Dataset:
        return self._named("datasets", name, self._dataset, self.datasets, "none registered")

    def dataset_by_id(self, dataset_id: int) -> Dataset:
        return self._dataset(self._one("SELECT * FROM datasets WHERE id = ?", [dataset_id]))

    def has_dataset(self, name: str) -> bool:
        return self._one("SELECT 1 FROM datasets WHERE name = ?", [name]) is not None

    def add_dataset(self, *, columns: list[str], label_counts: dict | None, provenance: dict | None = None,
                    **fields: Any) -> Dataset:
        if fields["role"] == "test":
            fields = {**fields, "role": "eval", "test": 1}
        fields = {**fields, "columns": _dumps(columns), "path": self._rel(fields["path"]),
                  "label_counts": _dumps(label_counts) if label_counts is not None else None,
                  "provenance": _dumps(provenance) if provenance is not None else None}
        with self.transaction():
            dataset_id = self._insert("datasets", fields)
        return self.dataset_by_id(dataset_id)

    def remove_dataset(self, name: str) -> Dataset:
        dataset = self.dataset(name)
        self._delete("datasets", dataset.id)
        return dataset

    def dataset_shared(self, dataset: Dataset) -> bool:
        """Whether another dataset uses the same workspace copy (same content)."""
        return self._one("SELECT 1 FROM datasets WHERE path = ? AND id != ?", [self._rel(dataset.path), dataset.id]) is not None

    # -- runs -------------------------------------------------------------
    def _run(self, row: dict) -> Run:
        row = dict(row)
        row["params"] = _loads(row["params"], {})
        row["result"] = _loads(row["result"])
        row["workdir"] = self._abs(row["workdir"])
        return Run(**row)

    def start_run(self, kind: str, name: str | None, params: dict, workdir: str | None = None) -> int:
        """The run's row, and its run lock held by this process until finish_run (or the process ends)."""
        with self._bookkeeping():
            with self.transaction():
                cursor = self.db.execute(
                    "INSERT INTO runs (kind, name, status, params, workdir, pid, started_at) "
                    "VALUES (?, ?, 'running', ?, ?, ?, ?)",
                    [kind, name, _dumps(params), self._rel(workdir), os.getpid(), now()],
                )
            if self.locks is not None:
                self.locks.hold_run(cursor.lastrowid)
        return cursor.lastrowid

    def finish_run(self, run_id: int, status: str, result: dict | None = None, error: str | None = None) -> None:
        with self.transaction():
            self.db.execute(
                "UPDATE runs SET status = ?, result = ?, error = ?, finished_at = ? WHERE id = ?",
                [status, _dumps(result) if result is not None else None, error, now(), run_id],
            )
        if self.locks is not None:
            self.locks.release_run(run_id)

    def update_run(self, run_id: int, *, workdir: str) -> None:
        with self.transaction():
            self.db.execute("UPDATE runs SET workdir = ? WHERE id = ?", [self._rel(workdir), run_id])

    def runs(self, kind: str | None = None, name: str | None = None, status: str | None = None) -> list[Run]:
        where, params = _where(kind=kind, name=name, status=status)
        return [self._run(r) for r in self._rows(f"SELECT * FROM runs{where} ORDER BY id", params)]

    def mark_stale_runs(self, read_only_ok: bool = False) -> int:
        """Record as interrupted every run still 'running' whose process no longer holds its run lock
        (killed or crashed), whatever process has its pid today. Safe beside running commands.
        read_only_ok: in a workspace this user cannot write, leave them (a reader still works)."""
        if read_only_ok and self.locks is not None and not os.access(self.locks.folder.parent, os.W_OK):
            return 0
        with self._bookkeeping():
            running = self._rows("SELECT id FROM runs WHERE status = 'running'")
            stale = [r["id"] for r in running if self.locks is None or not self.locks.run_alive(r["id"])]
            for run_id in stale:
                self.finish_run(run_id, "interrupted", error="the process ended without finishing (killed or crashed)")
        return len(stale)

    # -- probes -----------------------------------------------------------
    def _probe(self, row: dict) -> Probe:
        row = dict(row)
        row["options"] = _loads(row["options"], {})
        row["summary"] = _loads(row["summary"], {})
        row["path"] = self._abs(row["path"])
        return Probe(**row)

    def find_probe(self, key: str) -> Probe | None:
        row = self._one("SELECT * FROM probes WHERE key = ?", [key])
        return self._probe(row) if row else None

    def probe(self, probe_id: int) -> Probe:
        return self._probe(self._one("SELECT * FROM probes WHERE id = ?", [probe_id]))

    def probes(self, *, teacher_id: int | None = None, dataset_id: int | None = None,
               options_key: str | None = None) -> list[Probe]:
        where, params = _where(teacher_id=teacher_id, dataset_id=dataset_id, options_key=options_key)
        return [self._probe(r) for r in self._rows(f"SELECT * FROM probes{where} ORDER BY id", params)]

    def add_probe(self, rows: dict, **fields: Any) -> Probe:
        """One transaction: the probe and its per-row scores (columns PROBE_ROW_COLUMNS)."""
        fields = {**fields, "options": _dumps(fields["options"]), "summary": _dumps(fields.get("summary", {})),
                  "path": self._rel(fields["path"])}
        with self.transaction():
            probe_id = self._insert("probes", fields)
            columns = [rows[c] for c in PROBE_ROW_COLUMNS]
            self.db.conn.executemany(
                f"INSERT INTO probe_rows (probe_id, row, {', '.join(PROBE_ROW_COLUMNS)}) "
                f"VALUES (?, ?, {', '.join('?' * len(PROBE_ROW_COLUMNS))})",
                ((probe_id, i, *(_py(col[i]) for col in columns)) for i in range(fields["num_rows"])),
            )
        return self.probe(probe_id)

    def probe_rows(self, probe_id: int) -> dict[str, list]:
        cursor = self.db.execute(
            f"SELECT {', '.join(PROBE_ROW_COLUMNS)}, rmd FROM probe_rows WHERE probe_id = ? ORDER BY row", [probe_id]
        )
        rows = cursor.fetchall()
        names = [*PROBE_ROW_COLUMNS, "rmd"]
        return {name: [r[i] for r in rows] for i, name in enumerate(names)}

    def probe_artifacts(self, *, teacher_id: int | None = None, dataset_id: int | None = None) -> list[str]:
        """Folders of the probes (and RMD fits) that removing this teacher or dataset deletes."""
        paths = [p.path for p in self.probes(teacher_id=teacher_id, dataset_id=dataset_id)]
        column, value = ("teacher_id", teacher_id) if teacher_id is not None else ("dataset_id", dataset_id)
        paths += [self._abs(r["path"]) for r in self._rows(f"SELECT path FROM rmd_fits WHERE {column} = ?", [value])]
        return paths

    def delete_probe(self, probe_id: int) -> None:
        self._delete("probes", probe_id)

    def _rmd_fit(self, row: dict | None) -> RmdFit | None:
        return RmdFit(**{**row, "layers": _loads(row["layers"], []), "path": self._abs(row["path"])}) if row else None

    def find_rmd_fit(self, key: str) -> RmdFit | None:
        return self._rmd_fit(self._one("SELECT * FROM rmd_fits WHERE key = ?", [key]))

    def add_rmd_fit(self, **fields: Any) -> RmdFit:
        with self.transaction():
            self._insert("rmd_fits", {**fields, "layers": _dumps(fields["layers"]), "path": self._rel(fields["path"])})
        return self.find_rmd_fit(fields["key"])

    def delete_rmd_fit(self, fit_id: int) -> None:
        self._delete("rmd_fits", fit_id)

    def rmd_fit_of(self, probe_id: int) -> RmdFit | None:
        return self._rmd_fit(self._one(
            "SELECT f.* FROM rmd_fits f JOIN probe_rmd p ON p.fit_id = f.id WHERE p.probe_id = ?", [probe_id]))

    def set_probe_rmd(self, probe_id: int, fit_id: int, values, summary: dict) -> None:
        with self.transaction():
            self.db.execute("INSERT OR REPLACE INTO probe_rmd (probe_id, fit_id) VALUES (?, ?)", [probe_id, fit_id])
            self.db.conn.executemany(
                "UPDATE probe_rows SET rmd = ? WHERE probe_id = ? AND row = ?",
                ((float(v), probe_id, i) for i, v in enumerate(values)),
            )
            self.db.execute("UPDATE probes SET summary = ? WHERE id = ?", [_dumps(summary), probe_id])

    def replace_selection(self, dataset_id: int, options_key: str, teachers: list[str], probe_ids: list[int],
                          results: dict[str, dict]) -> None:
        names = _dumps(teachers)
        with self.transaction():
            self.db.execute(
                "DELETE FROM selection WHERE dataset_id = ? AND options_key = ? AND teachers = ?",
                [dataset_id, options_key, names],
            )
            for score, r in results.items():
                self.db.execute(
                    "INSERT INTO selection (dataset_id, options_key, teachers, probe_ids, score, accuracy, auroc, "
                    "target_accuracy, num_rows, cross_fitted, balanced, balanced_rows, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [dataset_id, options_key, names, _dumps(probe_ids), score, r.get("accuracy"), r.get("auroc"),
                     r.get("target_accuracy"), r.get("rows", 0), r.get("cross_fitted"), r.get("balanced"),
                     r.get("balanced_rows"), now()],
                )

    def selections(self) -> list[dict]:
        rows = self._rows("SELECT s.*, d.name AS dataset FROM selection s JOIN datasets d ON d.id = s.dataset_id ORDER BY s.id")
        for r in rows:
            r["teachers"] = _loads(r["teachers"], [])
            r["probe_ids"] = _loads(r["probe_ids"], [])
        return rows

    # -- students -------------------------------------------------------------
    def _student(self, row: dict) -> Student:
        row = dict(row)
        for key, default in (("options", {}), ("labels", []), ("train", {}), ("metrics", {}), ("scope", None),
                             ("calibration", None)):
            row[key] = _loads(row[key], default)
        row["path"], row["base"] = self._abs(row["path"]), self._abs(row["base"])
        parent = self._one("SELECT name FROM students WHERE id = ?", [row["parent_id"]]) if row["parent_id"] else None
        teachers = self._rows(
            "SELECT teacher_name AS name, fingerprint, probe_id, teacher_id IS NOT NULL AS registered "
            "FROM student_teachers WHERE student_id = ? ORDER BY position", [row["id"]])
        for t in teachers:
            t["registered"] = bool(t["registered"])
        return Student(**row, parent=parent["name"] if parent else None, teachers=tuple(teachers))

    def students(self) -> list[Student]:
        return [self._student(r) for r in self._rows("SELECT * FROM students ORDER BY id")]

    def find_student(self, name: str) -> Student | None:
        row = self._one("SELECT * FROM students WHERE name = ?", [name])
        return self._student(row) if row else None

    def student(self, name: str) -> Student:
        return self._named("students", name, self._student, self.students, "none yet")

    def student_by_id(self, student_id: int) -> Student:
        return self._student(self._one("SELECT * FROM students WHERE id = ?", [student_id]))

    def add_student(self, *, teachers: list[tuple], losses: list[tuple[int, float]] = (), **fields: Any) -> Student:
        """teachers: (teacher, probe_id) in the order of the student's label space; losses: (step, training loss)."""
        for key in ("options", "labels", "train", "metrics"):
            fields[key] = _dumps(fields.get(key, {}))
        for key in ("scope", "calibration"):
            fields[key] = _dumps(fields[key]) if fields.get(key) is not None else None
        fields["path"], fields["base"] = self._rel(fields["path"]), self._rel(fields["base"])
        with self.transaction():
            student_id = self._insert("students", fields)
            self.db.conn.executemany("INSERT INTO loss_history (student_id, step, loss) VALUES (?, ?, ?)",
                                     ((student_id, int(step), float(loss)) for step, loss in losses))
            for position, (teacher, probe_id) in enumerate(teachers):
                self.db.execute(
                    "INSERT INTO student_teachers (student_id, position, teacher_id, teacher_name, fingerprint, probe_id) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [student_id, position, teacher.id, teacher.name, teacher.fingerprint, probe_id],
                )
        return self.student_by_id(student_id)

    def set_student_trust(self, student_id: int, *, scope: dict | None = None,
                          calibration: dict | None = None) -> None:
        """Record a student's scope or calibration (kamalcli/trust); the caller writes its folder's files
        inside this transaction."""
        for column, value in (("scope", scope), ("calibration", calibration)):
            if value is not None:
                self.db.execute(f"UPDATE students SET {column} = ? WHERE id = ?", [_dumps(value), student_id])

    def loss_history(self, student_id: int) -> list[tuple[int, float]]:
        """(step, training loss) in step order; empty for a student trained before kamal recorded it."""
        return [(r["step"], r["loss"]) for r in self._rows(
            "SELECT step, loss FROM loss_history WHERE student_id = ? ORDER BY step", [student_id])]

    def remove_student(self, name: str) -> Student:
        student = self.student(name)
        self._delete("students", student.id)
        return student

    def teachers_of_student(self, student_id: int) -> list[Teacher]:
        """The teachers kamal extend registered from a student: its own folder, or one cut per task."""
        return [self._teacher(row) for row in self._rows("SELECT * FROM teachers WHERE student_id = ? ORDER BY id",
                                                         [student_id])]

    # -- evaluations ------------------------------------------------------------
    def add_evaluation(self, *, dataset_id: int, metrics: dict, student_id: int | None = None,
                       baseline: str | None = None) -> int:
        with self.transaction():
            return self._insert("evaluations", {"student_id": student_id, "baseline": baseline,
                                                "dataset_id": dataset_id, "metrics": _dumps(metrics)})

    def evaluations(self, student_id: int | None = None) -> list[dict]:
        sql = ("SELECT e.id, s.name AS student, e.baseline, d.name AS data, e.metrics, e.created_at FROM evaluations e "
               "JOIN datasets d ON d.id = e.dataset_id LEFT JOIN students s ON s.id = e.student_id")
        rows = self._rows(sql + (" WHERE e.student_id = ?" if student_id is not None else "") + " ORDER BY e.id",
                          [student_id] if student_id is not None else [])
        for r in rows:
            r["metrics"] = _loads(r["metrics"], {})
        return rows

    def latest_evaluations(self, student_id: int) -> dict[str, dict]:
        """Dataset name -> the metrics of the student's newest evaluation on it."""
        return {e["data"]: e["metrics"] for e in self.evaluations(student_id)}

    # -- exports --------------------------------------------------------------
    def _export(self, row: dict) -> Export:
        row = dict(row)
        row["parity"] = _loads(row["parity"], {})
        row["path"] = self._abs(row["path"])
        return Export(**row)

    def add_export(self, *, student_id: int, path: str, quantize: str | None, opset: int, parity: dict,
                   size_bytes: int) -> Export:
        path = self._rel(path)
        with self.transaction():
            self.db.execute("DELETE FROM exports WHERE path = ?", [path])
            export_id = self._insert("exports", {"student_id": student_id, "path": path, "quantize": quantize,
                                                 "opset": opset, "parity": _dumps(parity), "size_bytes": size_bytes})
        return self._export(self._one("SELECT * FROM exports WHERE id = ?", [export_id]))

    def exports(self, student_id: int | None = None) -> list[Export]:
        sql = "SELECT * FROM exports" + (" WHERE student_id = ?" if student_id is not None else "") + " ORDER BY id"
        return [self._export(r) for r in self._rows(sql, [student_id] if student_id is not None else [])]

    def latest_export(self, student_id: int) -> Export | None:
        """The newest export whose folder still exists, fp32 preferred."""
        from pathlib import Path

        found = [e for e in self.exports(student_id) if (Path(e.path) / "model.onnx").is_file()]
        found.sort(key=lambda e: (e.quantize is None, e.id))
        return found[-1] if found else None

    # -- counts for `kamal status` -----------------------------------------
    def counts(self) -> dict[str, int]:
        tables = ("teachers", "labels", "datasets", "runs", "probes", "students", "exports")
        return {t: self._one(f"SELECT count(*) AS n FROM {t}")["n"] for t in tables}


def _marks(values) -> str:
    return ", ".join("?" for _ in values)


def _where(**filters) -> tuple[str, list]:
    """' WHERE a = ? AND b = ?' for the filters that are not None, and their values."""
    given = {column: value for column, value in filters.items() if value is not None}
    clause = " WHERE " + " AND ".join(f"{column} = ?" for column in given) if given else ""
    return clause, list(given.values())


def _py(value):
    """numpy scalars -> Python numbers for sqlite3."""
    return value.item() if hasattr(value, "item") else value

