"""kamal extend: a student grows with newly released teachers (docs/methods.md, "Incremental extension").

The old student becomes a teacher for its own labels (registered and probed like
any other, MC dropout included); the new student starts from its weights with
the classifier grown by the new labels only (old rows, and so old label ids,
unchanged) and is amalgamated on transfer data that covers both.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kamalcli.students.amalgamate import amalgamate
from kamalcli.students.plan import AmalgamateRequest, transfer_data
from kamalcli.errors import KamalError


def lineage_fingerprints(store, student) -> set[str]:
    """Weights of every teacher that went into this student or its ancestors."""
    found: set[str] = set()
    while student is not None:
        found.update(t["fingerprint"] for t in student.teachers)
        student = store.find_student(student.parent) if student.parent else None
    return found


def student_as_teacher(workspace, store, student, say=print):
    """The student registered as a teacher of its own labels (once)."""
    from kamalcli.names import default_name
    from kamalcli.teachers.register import register_teacher

    existing = store.teacher_of_student(student.id)
    if existing is not None:
        return existing
    name = default_name(f"{student.name}-as-teacher")
    teacher, _ = register_teacher(workspace, store, student.path, name=name, labels=None, origin="student",
                                  student_id=student.id)
    say(f"Registered student {student.name} as teacher {teacher.name} for its {len(teacher.labels)} labels.")
    return teacher


def _one_task(store, parent, new) -> None:
    """kamal extend grows a one-task student with teachers of that task; several tasks are refused in one line."""
    from kamalcli.heads import heads_of_student, is_plain

    if not is_plain(heads_of_student(parent)):
        raise KamalError(f"student {parent.name} answers several tasks, and kamal extend grows a one-task student: "
                         "amalgamate a new student with every teacher")
    known = [store.find_teacher(name=t["name"]) for t in parent.teachers]
    tasks = {t.head for t in known if t is not None} or {None}
    other = [t.name for t in new if t.head not in tasks or t.multi_label]
    if other and parent.task == "sequence":
        raise KamalError(f"{', '.join(other)} answer{'s' if len(other) == 1 else ''} another task than {parent.name}, "
                         "and kamal extend grows a one-task student: amalgamate a new student with every teacher")


def extend(workspace, store, base: AmalgamateRequest, *, student_name: str, teacher_names: list[str],
           refine: bool = False, say=print, detail=None):
    parent = store.student(student_name)
    if not (Path(parent.path) / "config.json").is_file():
        raise KamalError(f"student {parent.name}'s folder is missing on disk: {parent.path}")
    if not teacher_names:
        raise KamalError("name the new teacher(s) with --teacher NAME")
    new = [store.teacher(n) for n in teacher_names]
    _one_task(store, parent, new)
    seen = lineage_fingerprints(store, parent)
    for teacher in new:
        if teacher.fingerprint in seen or teacher.student_id == parent.id:
            raise KamalError(f"teacher {teacher.name} is already part of student {parent.name}")
    canonical = store.label_aliases().canonical
    known = {canonical(label) for label in parent.labels}
    added = list(dict.fromkeys(canonical(label) for t in new for label in t.labels if canonical(label) not in known))
    if not added and not refine:
        labels = ", ".join(sorted({canonical(label) for t in new for label in t.labels}))
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
    if (method.startswith("muki") and not token  # token-level MUKI compares entity-only confidences raw
            and not any(o.split("=")[0].strip() == "calibrate" for o in base.options)):
        # The old student, distilled on soft targets, is less sure of everything than a freshly
        # fine-tuned teacher; compared raw, it loses its own labels (measured: benchmarks, extension).
        options = [o for o in options if not o.startswith("calibrate=")] + ["calibrate=rank"]
        say("Teacher confidences are compared per teacher (calibrate=rank): the old student is less sure "
            "of everything than a new teacher. --option calibrate=none compares them raw.")
    shared = sorted({canonical(label) for t in new for label in t.labels if canonical(label) in known})
    if shared:
        say(f"Labels {', '.join(shared)} are known to {parent.name} and taught again by the new teacher(s): "
            "both map onto the same label.")
    if base.data:  # refused (a test set) before the old student is registered as a teacher
        transfer_data(store, base.data, parent.task)
    self_teacher = student_as_teacher(workspace, store, parent, say)
    request = replace(base, method=method, options=options, name=name, parent=parent.name,
                      teachers=[self_teacher.name, *[t.name for t in new]], student=parent.path)
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
