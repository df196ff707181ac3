"""The workspace's schema history: one top-level function per migration, applied in order.

Each runs once, in a transaction together with the record that it ran
(sqlite-utils Migrations, set "kamal", named after the function). To change the
schema, add a new function at the end; never edit one that has shipped: a
workspace made by an older kamal has already run it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

MIGRATIONS: list[Callable] = []


def migration(fn: Callable) -> Callable:
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_registry(db):  # long by design: one flat schema script, and a shipped migration is never edited
    _run_script(db,
        """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            name TEXT,
            status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'interrupted')),
            params TEXT NOT NULL DEFAULT '{}',
            result TEXT,
            error TEXT,
            workdir TEXT,
            pid INTEGER,
            started_at TEXT NOT NULL,
            finished_at TEXT
        );
        CREATE INDEX runs_kind_name ON runs (kind, name);
        CREATE TABLE datasets (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            source TEXT NOT NULL,
            format TEXT NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('transfer', 'eval')),
            num_rows INTEGER NOT NULL,
            content_hash TEXT NOT NULL,
            text_column TEXT NOT NULL,
            label_column TEXT,
            columns TEXT NOT NULL,
            label_counts TEXT,
            path TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE teachers (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            source TEXT NOT NULL,
            path TEXT NOT NULL,
            fingerprint TEXT NOT NULL UNIQUE,
            architecture TEXT NOT NULL,
            model_type TEXT NOT NULL,
            num_layers INTEGER,
            hidden_size INTEGER,
            vocab_size INTEGER,
            dropout REAL,
            tokenizer_fingerprint TEXT,
            origin TEXT NOT NULL DEFAULT 'added' CHECK (origin IN ('added', 'trained', 'student')),
            train_dataset_id INTEGER REFERENCES datasets(id) ON DELETE SET NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE labels (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL
        );
        CREATE TABLE teacher_labels (
            teacher_id INTEGER NOT NULL REFERENCES teachers(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            label_id INTEGER NOT NULL REFERENCES labels(id),
            PRIMARY KEY (teacher_id, position)
        );
        CREATE INDEX teacher_labels_label ON teacher_labels (label_id);
        """
    )

@migration
def m002_probes(db):  # long by design: one flat schema script, and a shipped migration is never edited
    _run_script(db,
        """
        CREATE TABLE probes (
            id INTEGER PRIMARY KEY,
            teacher_id INTEGER NOT NULL REFERENCES teachers(id) ON DELETE CASCADE,
            dataset_id INTEGER NOT NULL REFERENCES datasets(id) ON DELETE CASCADE,
            key TEXT NOT NULL UNIQUE,
            options_key TEXT NOT NULL,
            options TEXT NOT NULL,
            path TEXT NOT NULL,
            num_rows INTEGER NOT NULL,
            summary TEXT NOT NULL DEFAULT '{}',
            seconds REAL,
            run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX probes_teacher_dataset ON probes (teacher_id, dataset_id);
        CREATE TABLE probe_rows (
            probe_id INTEGER NOT NULL REFERENCES probes(id) ON DELETE CASCADE,
            row INTEGER NOT NULL,
            pred INTEGER NOT NULL,
            max_prob REAL NOT NULL,
            entropy REAL NOT NULL,
            uhat REAL NOT NULL,
            mc_pred INTEGER NOT NULL,
            mc_max_prob REAL NOT NULL,
            mc_entropy REAL NOT NULL,
            mc_uhat REAL NOT NULL,
            rmd REAL,
            PRIMARY KEY (probe_id, row)
        ) WITHOUT ROWID;
        CREATE TABLE rmd_fits (
            id INTEGER PRIMARY KEY,
            teacher_id INTEGER NOT NULL REFERENCES teachers(id) ON DELETE CASCADE,
            key TEXT NOT NULL UNIQUE,
            source TEXT NOT NULL CHECK (source IN ('labelled', 'teacher-train', 'pseudo')),
            dataset_id INTEGER REFERENCES datasets(id) ON DELETE CASCADE,
            layers TEXT NOT NULL,
            num_rows INTEGER NOT NULL,
            path TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE probe_rmd (
            probe_id INTEGER NOT NULL REFERENCES probes(id) ON DELETE CASCADE,
            fit_id INTEGER NOT NULL REFERENCES rmd_fits(id) ON DELETE CASCADE,
            PRIMARY KEY (probe_id)
        );
        CREATE TABLE selection (
            id INTEGER PRIMARY KEY,
            dataset_id INTEGER NOT NULL REFERENCES datasets(id) ON DELETE CASCADE,
            options_key TEXT NOT NULL,
            teachers TEXT NOT NULL,
            probe_ids TEXT NOT NULL,
            score TEXT NOT NULL,
            accuracy REAL,
            auroc REAL,
            target_accuracy REAL,
            num_rows INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            UNIQUE (dataset_id, options_key, teachers, score)
        );
        """
    )

@migration
def m003_students(db):
    _run_script(db,
        """
        CREATE TABLE students (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            method TEXT NOT NULL,
            options TEXT NOT NULL DEFAULT '{}',
            base TEXT NOT NULL,
            path TEXT NOT NULL,
            labels TEXT NOT NULL,
            parent_id INTEGER REFERENCES students(id) ON DELETE SET NULL,
            transfer_dataset_id INTEGER REFERENCES datasets(id) ON DELETE SET NULL,
            select_by TEXT NOT NULL,
            seed INTEGER NOT NULL,
            train TEXT NOT NULL DEFAULT '{}',
            metrics TEXT NOT NULL DEFAULT '{}',
            run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE student_teachers (
            student_id INTEGER NOT NULL REFERENCES students(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            teacher_id INTEGER REFERENCES teachers(id) ON DELETE SET NULL,
            teacher_name TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            probe_id INTEGER REFERENCES probes(id) ON DELETE SET NULL,
            PRIMARY KEY (student_id, position)
        );
        ALTER TABLE teachers ADD COLUMN student_id INTEGER REFERENCES students(id) ON DELETE SET NULL;
        CREATE TABLE evaluations (
            id INTEGER PRIMARY KEY,
            student_id INTEGER REFERENCES students(id) ON DELETE CASCADE,
            baseline TEXT,
            dataset_id INTEGER NOT NULL REFERENCES datasets(id) ON DELETE CASCADE,
            metrics TEXT NOT NULL,
            created_at TEXT NOT NULL,
            CHECK ((student_id IS NULL) != (baseline IS NULL))
        );
        """
    )

@migration
def m004_exports(db):
    _run_script(db,
        """
        CREATE TABLE exports (
            id INTEGER PRIMARY KEY,
            student_id INTEGER NOT NULL REFERENCES students(id) ON DELETE CASCADE,
            path TEXT NOT NULL,
            quantize TEXT,
            opset INTEGER NOT NULL,
            parity TEXT NOT NULL,
            size_bytes INTEGER NOT NULL,
            created_at TEXT NOT NULL
        );
        """
    )

@migration
def m005_relative_paths(db):
    """Paths inside the workspace become relative to it, so a workspace can be moved or copied.

    The old root is also read from paths kamal always writes inside its own workspace (the part
    before /.kamal/), so a workspace that was moved before this migration ran converts right too.
    Teachers, bases and exports may live elsewhere (another workspace, too): they only follow.
    """
    path_columns = {"teachers": ["path"], "datasets": ["path"], "probes": ["path"], "rmd_fits": ["path"],
                    "students": ["path", "base"], "exports": ["path"], "runs": ["workdir"]}
    own = {"datasets": "path", "probes": "path", "rmd_fits": "path", "students": "path", "runs": "workdir"}
    roots = {_database_root(db)}
    for table, column in own.items():
        for (value,) in db.execute(f"SELECT {column} FROM {table} WHERE {column} LIKE '%/.kamal/artifacts/%'"):
            roots.add(value.rsplit("/.kamal/artifacts/", 1)[0])
    roots.discard(None)
    for table, columns in path_columns.items():
        for column in columns:
            rows = db.execute(f"SELECT rowid, {column} FROM {table} WHERE {column} LIKE '/%'").fetchall()
            for rowid, value in rows:
                relative = _relative_to_any(value, roots)
                if relative is not None:
                    db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", [relative, rowid])

@migration
def m006_loss_history(db):
    # A student's training loss per step (for the report's training curves);
    # students trained before this migration have none ("not recorded").
    _run_script(db,
        """
        CREATE TABLE loss_history (
            student_id INTEGER NOT NULL REFERENCES students(id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            loss REAL NOT NULL,
            PRIMARY KEY (student_id, step)
        ) WITHOUT ROWID;
        """
    )

@migration
def m007_dataset_provenance(db):
    # Where a dataset kamal wrote itself came from (kamal synthesize: the LM and its fingerprint,
    # teachers, settings, seed, prompts, quality figures), as JSON; NULL for data a user added.
    db.execute("ALTER TABLE datasets ADD COLUMN provenance TEXT")

@migration
def m008_token_task(db):
    # Token-level data and students (named-entity recognition) beside sequence classification.
    # A teacher's task follows from its architecture (*ForTokenClassification); rows made before this
    # migration are sequence classification.
    db.execute("ALTER TABLE datasets ADD COLUMN task TEXT NOT NULL DEFAULT 'sequence' "
               "CHECK (task IN ('sequence', 'token'))")
    db.execute("ALTER TABLE students ADD COLUMN task TEXT NOT NULL DEFAULT 'sequence' "
               "CHECK (task IN ('sequence', 'token'))")


@migration
def m009_teacher_weights_stat(db):
    # Each weight file's name, size and mtime (JSON) when the teacher was added or last checked: a teacher
    # rewritten in place is noticed without hashing its weights every time. NULL for teachers added before
    # this migration: the next probe or amalgamate hashes their weights once and records it.
    db.execute("ALTER TABLE teachers ADD COLUMN weights_stat TEXT")


@migration
def m010_label_aliases(db):
    # Label names that name one class of the union (kamal labels merge / split): each alias points at the
    # class's name. Workspaces made before this migration have none: labels are joined by exact name.
    _run_script(db,
        """
        CREATE TABLE label_aliases (
            alias TEXT PRIMARY KEY,
            label TEXT NOT NULL CHECK (label != alias),
            position INTEGER NOT NULL,
            created_at TEXT NOT NULL
        ) WITHOUT ROWID;
        """
    )


def _database_root(db) -> str | None:
    """The workspace folder of a database at ROOT/.kamal/kamal.db (None in memory)."""
    for _, name, file in db.execute("PRAGMA database_list").fetchall():
        if name == "main" and file:
            return str(Path(file).resolve().parent.parent)
    return None


def _relative_to_any(value: str, roots: set[str]) -> str | None:
    for root in sorted(roots, key=len, reverse=True):
        if value.startswith(root.rstrip("/") + "/"):
            return value[len(root.rstrip("/")) + 1:]
    return None


def _run_script(db, script: str) -> None:
    # conn.executescript() would COMMIT the migration's transaction first.
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


@migration
def m011_student_scope_and_calibration(db):
    # What a student says about itself (kamalcli/trust): the scope score fitted on its transfer rows when it
    # was trained (or by `kamal scope`), and the conformal threshold of `kamal calibrate`, as JSON. The
    # student's folder holds the same (scope.json, calibration.json) for predict and the exports. NULL for
    # students trained before this migration until `kamal scope` fits one.
    db.execute("ALTER TABLE students ADD COLUMN scope TEXT")
    db.execute("ALTER TABLE students ADD COLUMN calibration TEXT")


@migration
def m012_test_sets(db):
    # `kamal add-data --role test`: labelled rows kamal measures on and never fits or decides by (score=auto,
    # commit=auto, --select-by, --rmd-fit, --gold, kamal calibrate). Stored as role 'eval' with this flag, because
    # the role's CHECK cannot change without rebuilding the table. 0 for every dataset added before.
    db.execute("ALTER TABLE datasets ADD COLUMN test INTEGER NOT NULL DEFAULT 0 CHECK (test IN (0, 1))")


@migration
def m013_cross_fitted_selection(db):
    # A fitted score's selection measured on the rows it is fitted on is cross-fitted: each fold of rows scored by
    # a fit on the other folds (kamalcli/probe/cross_fit.py), the number of folds here. NULL for every figure
    # stored before: those were in-sample and stay uncounted.
    db.execute("ALTER TABLE selection ADD COLUMN cross_fitted INTEGER")


@migration
def m014_balanced_selection(db):
    # Selection accuracy balanced over teachers (kamalcli/probe/selection.py), what score=auto and commit=auto
    # judge by, with its effective rows. NULL for figures stored before: those are judged by their plain accuracy
    # until `kamal probe` measures them again.
    db.execute("ALTER TABLE selection ADD COLUMN balanced REAL")
    db.execute("ALTER TABLE selection ADD COLUMN balanced_rows REAL")


@migration
def m015_teacher_tasks(db):
    # `kamal add-teacher --task NAME`: the task a teacher answers (the student's head it trains), and whether its
    # labels are independent (multi-label: a sigmoid per label). NULL: the one shared task, as every teacher added
    # before this migration.
    db.execute("ALTER TABLE teachers ADD COLUMN head TEXT")
    db.execute("ALTER TABLE teachers ADD COLUMN multi_label INTEGER NOT NULL DEFAULT 0 CHECK (multi_label IN (0, 1))")
