"""kamal scope, kamal calibrate: what a student says about itself (kamalcli/trust)."""

from __future__ import annotations

from pathlib import Path

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.render import emit_json, json_option, pct
from kamalcli.errors import KamalError
from kamalcli.students.label_queue import DEFAULT_STRATEGY, STRATEGIES


@click.command()
@click.argument("student_name")
@click.option("--data", "data_name", help="Texts in the student's scope, labelled or not (default: its transfer data).")
@click.option("--keep", type=float, default=0.95, show_default=True,
              help="Share of those texts the threshold keeps in scope.")
@click.option("--score", type=click.Choice(["rmd", "energy", "msp"]), default="rmd", show_default=True,
              help="rmd: relative Mahalanobis distance of the student's features; energy: log-sum-exp of its "
                   "logits; msp: its largest probability.")
@click.option("--device", help="cpu, cuda or auto.")
@json_option
@pass_app
def scope(app: App, student_name, data_name, keep, score, device, as_json) -> None:
    """Fit (again) the score with which a student flags texts none of its teachers knew. amalgamate fits one on
    the transfer data; this refits it, or fits one for a student trained before kamal did. A student of several
    tasks gets one per task."""
    from kamalcli.students.trust import fit_student_scope

    device = app.device(device)
    with app.writer() as store:
        student = store.student(student_name)
        dataset = store.dataset(data_name) if data_name else _transfer_data(store, student)
        store.claim("student", student.name, exclusive=True)
        store.claim_inputs(datasets=[dataset])
        fitted = fit_student_scope(store, student, dataset, keep=keep, score=score, device=device)
    if isinstance(fitted, dict):  # a student of several tasks: a scope per task
        if as_json:
            emit_json({"student": student.name, "tasks": {task: s.as_json() for task, s in fitted.items()}})
            return
        for task, s in fitted.items():
            click.echo(f"student {student.name}, task {task}: scope {s.score} fitted on {s.rows} rows of {s.data}; "
                       f"threshold {s.threshold:.4g} keeps {100 * s.keep:.0f}% of them.")
        click.echo("`kamal predict --json` adds each task's in_scope and scope_score.")
        return
    if as_json:
        emit_json({"student": student.name, **fitted.as_json()})
        return
    click.echo(f"student {student.name}: scope {fitted.score} fitted on {fitted.rows} rows of {fitted.data}; "
               f"threshold {fitted.threshold:.4g} keeps {100 * fitted.keep:.0f}% of them. "
               f"`kamal predict --json` adds in_scope and scope_score.")


def _transfer_data(store, student):
    if student.transfer_dataset_id is None:
        raise KamalError(f"student {student.name}'s transfer data is no longer in the workspace: give --data NAME")
    return store.dataset_by_id(student.transfer_dataset_id)


@click.command()
@click.argument("student_name")
@click.option("--data", "data_name", required=True, help="A labelled dataset of the student's labels (any of their names).")
@click.option("--coverage", type=float, default=0.9, show_default=True,
              help="Probability that a prediction set holds the true label.")
@click.option("--device", help="cpu, cuda or auto.")
@click.option("--task", metavar="NAME", help="A student of several tasks: the task the data's labels are (default: "
                                            "the one they fit).")
@json_option
@pass_app
def calibrate(app: App, student_name, data_name, coverage, device, task, as_json) -> None:
    """Prediction sets with a guarantee (split conformal): after this, `kamal predict --json` adds `set`, the
    labels that hold the true one with probability COVERAGE, and `kamal eval` reports coverage and set size."""
    found = app.api().calibrate(student_name, data=data_name, coverage=coverage, device=device, task=task)
    if as_json:
        emit_json(found)
        return
    for line in found["notes"]:
        click.echo(line)
    click.echo(f"student {found['student']}: calibrated on {found['rows']} rows of {found['data']} for coverage "
               f"{found['coverage']:g} (a label is in the set when its probability is at least "
               f"{max(0.0, 1 - found['threshold']):.4g}).")
    if found["coverage_spread"]:
        from kamalcli.trust.conformal import coverage_spread

        spread, rows = found["coverage_spread"], found["rows"]
        low10, high10 = coverage_spread(10 * rows, found["coverage"])  # what ten times the rows would buy
        click.echo(f"That is the mean over calibration draws: with {rows:,} rows one draw's coverage lies in "
                   f"{pct(spread['low'])}-{pct(spread['high'])}% nine times in ten ({10 * rows:,} rows: "
                   f"{pct(low10)}-{pct(high10)}%).")


@click.command("label-queue")
@click.option("--data", "data_name", required=True, help="The texts to choose from (usually the transfer data).")
@click.option("--n", "n", type=int, required=True, help="How many rows to queue.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="A .csv or .jsonl file to write; fill in its `label` column.")
@click.option("--student", "student_name", help="Also rank by how unsure this student is, and spread rows by its "
                                                "features (default: teachers only).")
@click.option("--strategy", type=click.Choice(STRATEGIES), default=DEFAULT_STRATEGY, show_default=True,
              help="mixed: half disagree's rows, half random ones, in turn; disagree: rows the teachers disagree on, "
                   "spread out; random: a uniform sample; balanced: as many of each predicted class; diverse: each "
                   "region's typical row.")
@click.option("--seed", type=int, default=0, show_default=True, help="The draw of mixed, random, balanced and diverse.")
@click.option("--encoder", help="diverse: the sentence encoder whose vectors it clusters (default: minilm-l6, the "
                                "prior's).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option("--device", help="cpu, cuda or auto.")
@json_option
@pass_app
def label_queue(app: App, data_name, n, out, student_name, strategy, seed, encoder, force, device, as_json) -> None:
    """The N rows whose labels would help most (half where the teachers disagree, the margin is small, the student
    is unsure, spread out; half a random sample), written to a file: fill in `label`, then `kamal add-data FILE --name gold
    --label-column label` and `kamal amalgamate ... --gold gold` or `kamal calibrate STUDENT --data gold`."""
    rows = app.api().label_queue(data_name, n, out, student=student_name, strategy=strategy, seed=seed,
                                 encoder=encoder, force=force, device=device)
    if as_json:
        emit_json({"out": str(out), "strategy": strategy, "rows": rows})
        return
    order = {"disagree": "most useful first", "mixed": "the teachers' doubts and a random sample, in turn"}.get(
        strategy, f"strategy {strategy}")
    click.echo(f"{len(rows)} rows of {data_name} to label in {out} ({order}). Fill in `label`, then:\n"
               f"  kamal add-data {out} --name gold --label-column label\n"
               f"  kamal amalgamate --method muki-hard --data {data_name} --gold gold")


COMMANDS = [scope, calibrate, label_queue]
