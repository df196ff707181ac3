"""kamal add-teacher: check a classifier folder and record it as a teacher."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.files import publish_dir
from kamalcli.labels import bio_tag_set, renamed_tags_note
from kamalcli.models.bases import resolve_classifier_source
from kamalcli.models.folder import ModelFolder, inspect_classifier, task_of_architecture
from kamalcli.names import check_name, default_name
from kamalcli.probe.teacher_weights import weights_stat


def register_teacher(workspace, store, source: str, *, name: str | None, labels: list[str] | None,
                     copy: bool = False, origin: str = "added", train_dataset_id: int | None = None,
                     student_id: int | None = None, task: str | None = None):
    """Validate and record a teacher. Returns (teacher, notes for the user). task: the task it answers (the
    student's head it trains, kamalcli/heads.py); None: the one shared task.

    Everything is checked before anything is written; the database changes in one
    transaction, and a copied folder is renamed into place only when complete.
    """
    info = inspect_classifier(resolve_classifier_source(source), labels)
    info, renamed = _tags_upper_cased(info, source)
    name = _new_name(store, info, name)
    head = _head_of(store, info, name, task)
    store.claim("teacher", name, exclusive=True)
    notes = renamed + _notes(store, info, name, head)
    path, copied = _copy_into(workspace, info) if copy else (info.path, None)
    try:
        teacher = store.add_teacher(
            labels=list(info.labels), name=name, source=str(source), path=str(path), fingerprint=info.fingerprint,
            architecture=info.architecture, model_type=info.model_type, num_layers=info.num_layers,
            hidden_size=info.hidden_size, vocab_size=info.vocab_size, dropout=info.dropout,
            tokenizer_fingerprint=info.tokenizer_fingerprint, origin=origin, train_dataset_id=train_dataset_id,
            student_id=student_id, weights_stat=weights_stat(path), head=head, multi_label=int(info.multi_label),
        )
    except BaseException:
        if copied is not None:  # a copy no teacher row points at
            shutil.rmtree(copied, ignore_errors=True)
        raise
    return teacher, notes


def _new_name(store, info: ModelFolder, name: str | None) -> str:
    name = check_name(default_name(info.path.name) if name is None else name, "teacher")
    existing = store.find_teacher(name=name, fingerprint=info.fingerprint)
    if existing is not None and existing.fingerprint == info.fingerprint:
        raise KamalError(f"these weights are already registered as teacher {existing.name!r}")
    if existing is not None:
        raise KamalError(f"a teacher named {name!r} exists already; choose another --name")
    return name


def _head_of(store, info: ModelFolder, name: str, task: str | None) -> str | None:
    """The task the new teacher answers (None: the shared one), checked against the teachers already there: a
    multi-label teacher's labels are independent, so it shares a task only with multi-label teachers."""
    from kamalcli.heads import DEFAULT, check_task_name

    if task is not None:
        check_task_name(task)
        if task_of_architecture(info.architecture) == "token":
            raise KamalError(f"{name} tags tokens: --task groups text classifiers (drop it)")
    head = None if task in (None, DEFAULT) else task
    if info.multi_label and head is None:
        raise KamalError(f"{name} is multi-label (problem_type multi_label_classification, a sigmoid per label): give "
                         "it a task of its own with --task NAME")
    others = [t for t in store.teachers_of_task("sequence") if t.head == head]
    mixed = [t.name for t in others if t.multi_label != info.multi_label]
    if mixed:
        kind = "multi-label" if info.multi_label else "single-label"
        raise KamalError(f"task {head or DEFAULT} holds {', '.join(mixed)}, which {'are' if len(mixed) > 1 else 'is'} "
                         f"not {kind} like {name}: give {name} a task of its own with --task NAME")
    return head


def _tags_upper_cased(info: ModelFolder, source) -> tuple[ModelFolder, list[str]]:
    """A token teacher's tags with entity types upper-cased (B-per -> B-PER) and checked to pair B-/I-,
    and the note saying what was renamed; a sequence teacher as it is."""
    if task_of_architecture(info.architecture) != "token":
        return info, []
    tags, renamed = bio_tag_set(info.labels, source)
    return replace(info, labels=tuple(tags)), renamed_tags_note(renamed)


def _notes(store, info: ModelFolder, name: str, head: str | None = None) -> list[str]:
    """What the user should know about this teacher beside the others: shared labels, tokenizers, dropout."""
    task = task_of_architecture(info.architecture)
    others = store.teachers_of_task(task)
    if task == "sequence":  # the labels of one task: another task's "positive" is another class
        others = [t for t in others if t.head == head]
    space = store.label_space(others)
    # every token teacher has O: the union has one
    shared = {label: ", ".join(space.owners(label)) for label in info.labels
              if space.knows(label) and not (task == "token" and label == "O")}
    notes = [_shared_labels_note(shared)] if shared else []
    notes += _alike_labels_note(others, info, name, space.aliases)
    tokenizers = {t.tokenizer_fingerprint for t in others if t.tokenizer_fingerprint}
    if others and info.tokenizer_fingerprint and info.tokenizer_fingerprint not in tokenizers:
        notes.append(
            f"{name} uses a different tokenizer from the other teachers: fine, each teacher's "
            "outputs are computed with its own tokenizer and cached."
        )
    if info.dropout in (0, 0.0):
        notes.append(f"{name} has dropout 0: MC-dropout probing needs a rate (kamal probe --teacher {name} --dropout 0.1) "
                     "or --mc-samples 1.")
    return notes


def _alike_labels_note(others, info: ModelFolder, name: str, aliases) -> list[str]:
    """Labels of the new teacher whose names look like another teacher's (kamal labels shows the evidence).
    Names only (no behaviour yet): every proposal is `same`, the new teacher (last) second in each pair."""
    from kamalcli.teachers import label_overlap

    if task_of_architecture(info.architecture) != "sequence" or not others:
        return []
    teachers = [(t.name, list(t.labels)) for t in others] + [(name, list(info.labels))]
    vectors, _ = label_overlap.name_vectors([label for _, labels in teachers for label in labels],
                                            label_overlap.DEFAULT_ENCODER)
    alike = [p for p in label_overlap.propose(teachers, vectors, None, aliases.canonical) if p.teachers[1] == name]
    if not alike:
        return []
    pairs = ", ".join(f"{p.labels[1]!r} ~ {p.labels[0]!r} ({p.teachers[0]})" for p in alike[:6])
    return [f"Labels of {name} look like other teachers' ({pairs}): if they name one class, see `kamal labels` "
            "and merge them with `kamal labels merge`; otherwise they stay separate classes."]


def _shared_labels_note(shared: dict[str, str]) -> str:
    """One note for all the labels other teachers teach too ({label: its other teachers})."""
    then = "stays one label in the union, and the teachers' predictions for it are combined there."
    if len(shared) == 1:
        [(label, owners)] = shared.items()
        return f"Label {label!r} is also taught by {owners}: it {then}"
    names = ", ".join(repr(label) for label in shared)
    if len(set(shared.values())) == 1:
        return f"Labels {names} are also taught by {next(iter(shared.values()))}: each {then}"
    names = ", ".join(f"{label!r} ({owners})" for label, owners in shared.items())
    return f"Labels {names} are also taught by other teachers: each {then}"


def _copy_into(workspace, info: ModelFolder) -> tuple[Path, Path | None]:
    """The teacher's folder copied into the workspace (named by its fingerprint), and the copy made now
    (None when an earlier registration made it)."""
    target = workspace.artifact_dir("teachers") / info.fingerprint[:16]
    if target.exists():
        return target, None
    scratch = workspace.tmp_dir()
    try:
        shutil.copytree(info.path, scratch / "model")
        publish_dir(scratch / "model", target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target, target


def teacher_reading(store, folder: Path, besides=None):
    """The registered teacher (other than `besides`) whose folder is this one, symbolic links resolved; or None."""
    folder = Path(folder).resolve()
    return next((t for t in store.teachers()
                 if Path(t.path).resolve() == folder and (besides is None or t.id != besides.id)), None)


def folder_kamal_made(workspace, store, teacher) -> Path | None:
    """The teacher's folder when kamal made it in this workspace's teachers (train-teacher, add-teacher --copy)
    and no other teacher reads it: what remove-teacher removes with it. None for a user's own folder."""
    path = Path(teacher.path).resolve()
    if path.parent != workspace.artifact_dir("teachers").resolve() or not path.is_dir():
        return None
    return None if teacher_reading(store, path, besides=teacher) else path
