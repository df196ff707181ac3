"""kamal extend: a student grows with newly released teachers (docs/methods.md, "Incremental extension").

The old student becomes a teacher for its own labels (registered and probed like
any other, MC dropout included); the new student starts from its weights with
the classifier grown by the new labels only (old rows, and so old label ids,
unchanged) and is amalgamated on transfer data that covers both.

With tasks (kamalcli/heads.py), a new teacher joins its own task: a task the student
answers grows by its labels, a new task adds a head. A student of several tasks
becomes a teacher per task, cut to that task's columns; each old (task, label)
column keeps its row in the new student.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from kamalcli.students.amalgamate import amalgamate
from kamalcli.students.plan import AmalgamateRequest, transfer_data
from kamalcli.students.problem import student_heads
from kamalcli.errors import KamalError


def lineage_fingerprints(store, student) -> set[str]:
    """Weights of every teacher that went into this student or its ancestors."""
    found: set[str] = set()
    while student is not None:
        found.update(t["fingerprint"] for t in student.teachers)
        student = store.find_student(student.parent) if student.parent else None
    return found


def student_as_teachers(workspace, store, student, say=print) -> list:
    """The student registered as a teacher of each task it answers (once): a one-task student reads its own
    folder; a student of several tasks (or of a multi-label one) is cut to each task's columns first."""
    from kamalcli.heads import DEFAULT, is_plain
    from kamalcli.names import default_name
    from kamalcli.teachers.register import register_teacher

    heads, existing = student_heads(store, student), store.teachers_of_student(student.id)
    plain = is_plain(heads)
    if plain and existing:
        return existing[:1]
    by_task, teachers = {t.head_name: t for t in existing}, []
    for head in heads:
        if head.name in by_task:
            teachers.append(by_task[head.name])
            continue
        path = student.path if plain else task_folder(workspace, student, head)
        name = default_name(f"{student.name}-as-teacher" if plain else f"{student.name}-{head.name}-as-teacher")
        teacher, _ = register_teacher(workspace, store, str(path), name=name, labels=None, origin="student",
                                      student_id=student.id, task=None if head.name == DEFAULT else head.name)
        task = "" if plain else f" of task {head.name}"
        say(f"Registered student {student.name} as teacher {teacher.name} for its {len(teacher.labels)} labels{task}.")
        teachers.append(teacher)
    return teachers


def task_folder(workspace, student, head) -> Path:
    """The student cut to one task's columns, in the workspace's teachers (once): a standard classifier of the
    task's labels, multi-label (a sigmoid per label) where the task is."""
    from kamalcli.files import publish_dir
    from kamalcli.heads import KEY
    from kamalcli.models.folder import MULTI_LABEL
    from kamalcli.models.loading import load_classifier, load_tokenizer, rearrange_classifier, save_classifier

    target = workspace.artifact_dir("teachers") / f"student-{student.id}-{head.name}"
    if (target / "config.json").is_file():
        return target
    model = load_classifier(student.path)
    rearrange_classifier(model, list(range(head.columns.start, head.columns.stop)), head.labels)
    if hasattr(model.config, KEY):
        delattr(model.config, KEY)
    model.config.problem_type = MULTI_LABEL if head.multi_label else "single_label_classification"
    scratch = workspace.tmp_dir()
    try:
        save_classifier(model, load_tokenizer(student.path), scratch / "model",
                        extra={"cut_from_student": student.name, "task": head.name})
        publish_dir(scratch / "model", target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def extend(workspace, store, base: AmalgamateRequest, *, student_name: str, teacher_names: list[str],
           refine: bool = False, say=print, detail=None):
    parent = store.student(student_name)
    if not (Path(parent.path) / "config.json").is_file():
        raise KamalError(f"student {parent.name}'s folder is missing on disk: {parent.path}")
    if not teacher_names:
        raise KamalError("name the new teacher(s) with --teacher NAME")
    new = [store.teacher(n) for n in teacher_names]
    seen = lineage_fingerprints(store, parent)
    for teacher in new:
        if teacher.fingerprint in seen or teacher.student_id == parent.id:
            raise KamalError(f"teacher {teacher.name} is already part of student {parent.name}")
    canonical = store.label_aliases().canonical
    heads = student_heads(store, parent)
    tasks = {h.name for h in heads} | {t.head_name for t in new}
    several = len(tasks) > 1 or any(h.multi_label for h in heads) or any(t.multi_label for t in new)
    shown = (lambda task, label: f"{task}/{label}") if several else (lambda task, label: label)
    known = {(h.name, canonical(label)) for h in heads for label in h.labels}
    taught = list(dict.fromkeys((t.head_name, canonical(label)) for t in new for label in t.labels))
    added = [shown(*pair) for pair in taught if pair not in known]
    if not added and not refine:
        labels = ", ".join(sorted(shown(*pair) for pair in taught))
        raise KamalError(
            f"{', '.join(teacher_names)} only knows labels {parent.name} has already ({labels}): nothing to extend; "
            "pass --refine to retrain on them anyway"
        )
    name = _next_version(store, parent.name) if base.name is None else base.name
    if store.find_student(name) is not None:
        raise KamalError(f"a student named {name!r} exists already; choose another --name")
    method = base.method or parent.method
    options = list(base.options) if (base.options or base.method) else _option_pairs(parent.options)
    token = parent.task == "token"
    if any(t.task != parent.task for t in new):
        raise KamalError(f"{parent.name} {'tags tokens' if token else 'classifies texts'}; every new teacher must too")
    joins_old = any(t.head_name in {h.name for h in heads} for t in new)  # else the old student is alone in its tasks
    if (method.startswith("muki") and not token and joins_old  # token-level MUKI compares entity-only confidences raw
            and not any(o.split("=")[0].strip() == "calibrate" for o in base.options)):
        # The old student, distilled on soft targets, is less sure of everything than a freshly
        # fine-tuned teacher; compared raw, it loses its own labels (measured: benchmarks, extension).
        options = [o for o in options if not o.startswith("calibrate=")] + ["calibrate=rank"]
        say("Teacher confidences are compared per teacher (calibrate=rank): the old student is less sure "
            "of everything than a new teacher. --option calibrate=none compares them raw.")
    shared = sorted(shown(*pair) for pair in taught if pair in known)
    if shared:
        say(f"Labels {', '.join(shared)} are known to {parent.name} and taught again by the new teacher(s): "
            "both map onto the same label.")
    if base.data:  # refused (a test set) before the old student is registered as a teacher
        transfer_data(store, base.data, parent.task)
    own = student_as_teachers(workspace, store, parent, say)
    request = replace(base, method=method, options=options, name=name, parent=parent.name,
                      teachers=[*(t.name for t in own), *(t.name for t in new)], student=parent.path)
    say(f"Extending {parent.name} ({len(parent.labels)} labels) with {len(added)} new: {', '.join(added) or 'none'}.")
    return amalgamate(workspace, store, request, say=say, detail=detail)


def _next_version(store, name: str) -> str:
    import re

    match = re.match(r"^(.*?)(\d+)$", name)
    stem, number = (match.group(1), int(match.group(2))) if match else (f"{name}-v", 1)
    candidate = f"{stem}{number + 1}"
    while store.find_student(candidate) is not None:
        number += 1
        candidate = f"{stem}{number + 1}"
    return candidate


def _option_pairs(options: dict) -> list[str]:
    return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items()]
