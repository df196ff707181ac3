"""kamal scope and kamal calibrate: a student's scope score fitted on unlabelled text, and conformal sets
calibrated on labelled text (kamalcli/trust). Both are saved in the student's folder, where predict and the
exports read them, and recorded with the student in the database, in one transaction."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.files import write_json_atomic
from kamalcli.runtime import resolve_device, say_once
from kamalcli.trust import conformal
from kamalcli.trust.scope import DEFAULT_KEEP, DEFAULT_SCORE, Scope, check_keep, fit_scope, fit_task_scopes, \
    save_task_scopes


def sequence_student(student, what: str, tasks: bool = False):
    """The student, refused in one line where `what` does not apply: a token student; one of several tasks
    unless `what` is done per task."""
    from kamalcli.heads import heads_of_student, is_plain

    if student.task == "token":
        raise KamalError(f"student {student.name} tags tokens; {what} is for text classifiers")
    if not tasks and not is_plain(heads_of_student(student)):
        raise KamalError(f"student {student.name} answers several tasks, and {what} per task is not built yet: it "
                         "is for a one-task student")
    return student


def scope_from_model(model, encoded, *, data: str, device: str, keep: float = DEFAULT_KEEP,
                     score: str = DEFAULT_SCORE, seed: int = 0, heads=None) -> Scope | dict[str, Scope]:
    """The scope of a model in memory over encoded transfer rows (amalgamate fits it before saving); with heads,
    a several-task student's scope per task."""
    from kamalcli.models.inference import logits_and_features

    logits, features = logits_and_features(model, encoded, device=device)
    return _fitted(logits, features, heads, score=score, keep=keep, data=data, seed=seed)


def _fitted(logits, features, heads=None, **fit) -> Scope | dict[str, Scope]:
    """fit_scope, or with heads (a several-task student's) a scope per task; each note said."""
    if heads:
        return {task: _note_said(s, task) for task, s in fit_task_scopes(logits, features, heads, **fit).items()}
    return _note_said(fit_scope(logits, features, **fit))


def scope_from_states(model, states, *, data: str, keep: float = DEFAULT_KEEP, score: str = DEFAULT_SCORE,
                      seed: int = 0) -> Scope:
    """The scope from the encoder's first-token states of the transfer rows, cached by --fit head (the features
    logits_and_features would compute again): the head alone gives the logits."""
    import torch

    from kamalcli.models.heads import head_of

    model.eval()
    with torch.no_grad():
        logits = head_of(model).logits(states.to(next(model.parameters()).device)).float().cpu().numpy()
    return _note_said(fit_scope(logits, states.numpy(), score=score, keep=keep, data=data, seed=seed))


def _note_said(scope: Scope, task: str | None = None) -> Scope:
    """The scope, its note (why its score is not the one asked for) said on stderr."""
    if scope.note:
        say_once(f"Note: {f'task {task}: ' if task else ''}{scope.note}.")
    return scope


def fit_student_scope(store, student, dataset, *, keep: float = DEFAULT_KEEP, score: str = DEFAULT_SCORE,
                      device: str = "cpu") -> Scope | dict[str, Scope]:
    """kamal scope: fit (again) on a dataset's texts, labelled or not, and record it. A student of several tasks
    gets a scope per task (dict by task)."""
    from kamalcli.data.text import load_dataset_rows
    from kamalcli.heads import heads_of_student, is_plain
    from kamalcli.models.inference import classifier_logits_and_features

    check_keep(keep)
    dataset.refuse_test(f"kamal scope --data {dataset.name}")
    folder = sequence_student(student, "a scope", tasks=True).folder
    texts, _ = load_dataset_rows(dataset)
    logits, features = classifier_logits_and_features(folder, texts, student.max_length, device=resolve_device(device))
    heads = heads_of_student(student)
    fitted = _fitted(logits, features, None if is_plain(heads) else heads, score=score, keep=keep, data=dataset.name,
                     seed=student.seed)
    save_scopes(store, student, folder, fitted)
    return fitted


def save_scopes(store, student, folder: Path, scope: Scope | dict[str, Scope]) -> None:
    """The student's scope (or scopes by task) recorded and written to its folder, in one transaction."""
    with store.transaction():
        store.set_student_trust(student.id, scope=scope_record(scope))
        write_scopes(folder, scope)


def scope_record(scope: Scope | dict[str, Scope]) -> dict:
    """What the database keeps of a scope: its settings, or {"tasks": {task: settings}}."""
    if isinstance(scope, dict):
        return {"tasks": {task: s.as_json() for task, s in scope.items()}}
    return scope.as_json()


def write_scopes(folder: Path, scope: Scope | dict[str, Scope]) -> None:
    if isinstance(scope, dict):
        save_task_scopes(folder, scope)
    else:
        scope.save(folder)


def calibrate_student(store, student, dataset, *, coverage: float = 0.9, device: str = "cpu", task: str | None = None):
    """kamal calibrate: the conformal threshold from a labelled dataset of the student's labels (any of their
    names); a several-task student's, of the task whose labels those are (or `task`). Returns (Calibration, notes)."""
    from kamalcli.data.text import load_labelled_rows
    from kamalcli.heads import heads_of_student, is_plain
    from kamalcli.models.inference import classifier_probs

    conformal.check_coverage(coverage)
    dataset.refuse_test(f"kamal calibrate --data {dataset.name}")
    heads = heads_of_student(student)
    if not is_plain(heads) and student.task == "sequence":
        return _calibrate_task(store, student, dataset, heads, coverage, device, task)
    if task is not None:
        raise KamalError(f"{student.name} answers one task: drop --task")
    folder = sequence_student(student, "calibration").folder
    texts, gold = load_labelled_rows(dataset)
    index = np.asarray(student.aliases.indices(gold, student.labels))
    unknown = sorted({g for g, i in zip(gold, index) if i < 0})
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise KamalError(f"dataset {dataset.name} has labels student {student.name} does not know ({shown}): "
                         "calibrate on rows of its labels only")
    probs = classifier_probs(folder, texts, student.max_length, device=resolve_device(device))
    calibration = conformal.calibrate(probs, index, coverage, data=dataset.name)
    notes = []
    if calibration.complete:
        notes.append(f"{len(texts)} rows are too few for coverage {coverage:g}: every set holds every label "
                     f"(at least {conformal.rows_needed(coverage)} rows are needed; use more, or a lower --coverage).")
    with store.transaction():
        store.set_student_trust(student.id, calibration=calibration.as_json())
        write_json_atomic(Path(folder) / conformal.FILE, calibration.as_json())
    return calibration, notes


def _calibrate_task(store, student, dataset, heads, coverage: float, device: str, task: str | None):
    """One task of a several-task student calibrated: its softmax over its own columns; kept beside the other
    tasks' calibrations (conformal.TASKS_FILE). A multi-label task's labels are not exclusive: refused."""
    from kamalcli.data.text import load_labelled_rows
    from kamalcli.labels import label_indices
    from kamalcli.models.inference import classifier_logits
    from kamalcli.heads import task_of_labels

    folder = student.folder
    texts, gold = load_labelled_rows(dataset)
    head = task_of_labels(heads, gold, dataset.name, task)
    if head.multi_label:
        raise KamalError(f"task {head.name} is multi-label: its prediction sets (a set per label) are not built yet")
    index = label_indices(gold, head.labels)
    if (index < 0).any():
        unknown = sorted({g for g, i in zip(gold, index) if i < 0})
        raise KamalError(f"dataset {dataset.name} has labels task {head.name} does not have ({', '.join(unknown[:5])}): "
                         "calibrate on rows of its labels only")
    logits = classifier_logits(folder, texts, student.max_length, device=resolve_device(device))
    calibration = conformal.calibrate(head.probabilities(logits), index, coverage, data=dataset.name)
    calibrations = {**conformal.load_task_calibrations(folder), head.name: calibration}
    listed = {name: c.as_json() for name, c in calibrations.items()}
    notes = [f"Task {head.name}."]
    if calibration.complete:
        notes.append(f"{len(texts)} rows are too few for coverage {coverage:g}: every set holds every label.")
    with store.transaction():
        store.set_student_trust(student.id, calibration={"tasks": listed})
        write_json_atomic(Path(folder) / conformal.TASKS_FILE, listed)
    return calibration, notes
