"""kamal add-teacher, teachers, remove-teacher."""

from __future__ import annotations

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.render import emit_json, json_option, note, table
from kamalcli.errors import KamalError
from kamalcli.cli.options import distributed_options, train_options
from kamalcli.names import split_labels


@click.command("add-teacher")
@click.argument("source")
@click.option("--name", help="Name to refer to it by (default: the folder's name).")
@click.option("--labels", help="Class names in the model's id order, comma-separated (required for LABEL_0-style names).")
@click.option("--copy", is_flag=True, help="Copy the model into the workspace instead of reading it where it is.")
@click.option("--task", help="The task it answers, e.g. sentiment: the student gets a head per task (default: one "
                             "shared task). A multi-label teacher needs one.")
@pass_app
def add_teacher(app: App, source: str, name: str | None, labels: str | None, copy: bool, task: str | None) -> None:
    """Register a fine-tuned classifier (a local Hugging Face folder) as a teacher."""
    label_list = split_labels(labels) if labels is not None else None
    teacher = app.api().add_teacher(source, name=name, labels=label_list, copy=copy, task=task)
    where = f" for task {teacher.head}" + (" (multi-label)" if teacher.multi_label else "") if teacher.head else ""
    click.echo(
        f"Added teacher {teacher.name}{where}: {len(teacher.labels)} labels ({', '.join(teacher.labels)}); "
        f"{teacher.model_type}, {teacher.num_layers} layers, hidden {teacher.hidden_size}; "
        f"weights {teacher.fingerprint[:12]}"
    )


@click.command()
@json_option
@pass_app
def teachers(app: App, as_json: bool) -> None:
    """The registered teachers and their labels, in registration order."""
    from pathlib import Path

    from kamalcli.heads import several_heads, tasks_of
    from kamalcli.models.folder import missing_folder_line
    from kamalcli.probe.teacher_weights import changed_line, changed_on_disk
    from kamalcli.teachers.label_merges import label_classes

    with app.reader() as store:
        found = store.teachers()
        spaces = {task: store.label_space([t for t in found if t.task == task]) for task in ("sequence", "token")}
        text_teachers = [t for t in found if t.task == "sequence"]  # several tasks: each task's labels apart
        by_task = [(task, store.label_space(list(task.teachers))) for task in tasks_of(text_teachers)] \
            if several_heads(text_teachers) else []
        merged = label_classes(store)
    changed = changed_on_disk(found)  # read without recording: the next probe or amalgamate records it
    missing = {t.id for t in found if not Path(t.path).is_dir()}
    for t in found:
        if t.id in missing:
            note(missing_folder_line(Path(t.path), f"teacher {t.name}"))
        elif t.id in changed:
            note(f"{changed_line(t, changed[t.id])}: the next kamal probe or amalgamate records its new weights "
                 "and probes it again")
    aliases = spaces["sequence"].aliases
    if as_json:
        emit_json([{**t.as_json(), "classes": [aliases.canonical(label) for label in t.labels],
                    "changed_on_disk": t.id in changed, "folder_missing": t.id in missing,
                    **({"fingerprint_on_disk": changed[t.id]} if t.id in changed else {})} for t in found])
        return
    table(
        "Teachers",
        ["name", "task", "labels", "model", "layers", "dropout", "origin", "fingerprint"],
        [(t.name, _task_shown(t), [_as_class(label, aliases) for label in t.labels], t.model_type, t.num_layers,
          t.dropout, t.origin, t.fingerprint[:12] + _disk_state(t.id, changed, missing)) for t in found],
        empty="none yet (kamal add-teacher FOLDER)",
    )
    for task, space in by_task:
        kind = ", multi-label" if task.multi_label else ""
        click.echo(f"Labels of task {task.name} ({len(space)}{kind}): {', '.join(space.names)}")
    if by_task:
        spaces.pop("sequence")
    for task, space in spaces.items():
        if len(space):
            kind = "Union label space" if task == "sequence" else "Union tag set of the token teachers (one O)"
            click.echo(f"{kind} ({len(space)}): {', '.join(space.names)}")
    for one in merged:
        click.echo(f"Merged (kamal labels): {one.name} = {', '.join([one.name, *one.aliases])}")


def _task_shown(teacher) -> str:
    """sequence or token; with the task a text classifier answers when it was added with --task."""
    if teacher.head is None:
        return teacher.task
    return f"{teacher.task}: {teacher.head}" + (" (multi-label)" if teacher.multi_label else "")


def _disk_state(teacher_id: int, changed, missing) -> str:
    """What the fingerprint column adds when the folder is not as recorded."""
    return " (folder missing)" if teacher_id in missing else " (changed on disk)" if teacher_id in changed else ""


def _as_class(label: str, aliases) -> str:
    """A teacher's label, and its class's name when a merge renamed it: audio (= sound)."""
    name = aliases.canonical(label)
    return label if name == label else f"{label} (= {name})"


@click.command("remove-teacher")
@click.argument("name")
@pass_app
def remove_teacher(app: App, name: str) -> None:
    """Forget a teacher (its probes go too, and its folder when kamal made it with train-teacher or add-teacher
    --copy; students trained from it keep their record)."""
    from kamalcli.files import remove_artifacts
    from kamalcli.teachers.label_merges import forget_untaught_merges
    from kamalcli.teachers.register import folder_kamal_made

    with app.writer() as store:
        store.claim("teacher", name, exclusive=True)
        teacher = store.teacher(name)
        paths = store.probe_artifacts(teacher_id=teacher.id)
        own = folder_kamal_made(app.workspace, store, teacher)
        store.remove_teacher(name)
        forgotten = forget_untaught_merges(store)
        remove_artifacts(app.workspace, paths + ([str(own)] if own else []))  # under the lock: the name is free
    if own:
        click.echo(f"Removed teacher {teacher.name}, {len(paths)} cached probe folders and the folder kamal made for "
                   f"it ({own})")
    else:
        click.echo(f"Removed teacher {teacher.name} and {len(paths)} cached probe folders "
                   f"(its model files at {teacher.path} were not touched)")
    for merged in forgotten:
        note(f"Forgot the merge {merged.name} = {', '.join([merged.name, *merged.aliases])}: no teacher has those "
             "labels now")


@click.command("train-teacher")
@click.argument("data", required=False)
@click.option("--labels", help="The labels this teacher knows, comma-separated; it trains on the rows of those labels "
              "(token data: the entity types it tags, e.g. PER,LOC; other types become O).")
@click.option("--name", help="Name of the new teacher.")
@click.option("--base", help="Named base (kamal models), encoder folder, or hub id (default: the workspace's student base).")
@click.option("--base-layers", type=int, help="Keep only the first N layers of the base.")
@click.option("--resume", metavar="NAME", help="Continue the interrupted training of that teacher.")
@train_options
@distributed_options
@pass_app
def train_teacher(app: App, data, labels, name, base, base_layers, resume, epochs, steps, batch_size, lr, max_length, seed,
                  checkpoint_every, embeddings, fit, device, backend) -> None:
    """Fine-tune a classifier on a labelled dataset's rows of some labels and register it as a teacher.

    Budget: one epoch, unless --epochs, or --steps for the step budget with early stopping on held-out rows.
    """
    if resume:
        teacher, result = app.api().resume_teacher(resume, device=device, backend=backend)
    else:
        if data is None or labels is None or name is None:
            raise KamalError("give DATA, --labels a,b,... and --name NAME (or --resume NAME)")
        teacher, result = app.api().train_teacher(
            data, split_labels(labels), name, base=base, base_layers=base_layers, device=device, backend=backend,
            epochs=epochs, steps=steps, batch_size=batch_size, lr=lr, max_length=max_length, seed=seed,
            checkpoint_every=checkpoint_every, embeddings=embeddings, fit=fit)
    held = _held_out_accuracy(result)
    if result.get("held_out_entity_f1") is not None:
        held = f"; held-out entity F1 {100 * result['held_out_entity_f1']:.1f}% on {result['held_out_rows']} sentences"
    click.echo(f"Trained teacher {teacher.name} on {result['rows']} rows ({', '.join(teacher.labels)}) in "
               f"{result['seconds']:.0f} s{held}")


def _held_out_accuracy(result: dict) -> str:
    """The message's '; held-out accuracy 62.0% on 100 rows (95% CI 52.2-70.9%)' (a Wilson interval), or
    nothing without held-out rows."""
    accuracy = result.get("held_out_accuracy")
    if accuracy is None:
        return ""
    low, high = result["held_out_accuracy_interval"]
    return (f"; held-out accuracy {100 * accuracy:.1f}% on {result['held_out_rows']} rows "
            f"(95% CI {100 * low:.1f}-{100 * high:.1f}%)")


COMMANDS = [add_teacher, train_teacher, teachers, remove_teacher]
