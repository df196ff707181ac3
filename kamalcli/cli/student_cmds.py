"""kamal methods, amalgamate, students, remove-student, eval, predict."""

from __future__ import annotations

from pathlib import Path

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.options import (LazyHelpOption, distributed_options, mc_exact_option, reprobe_option,
                                  train_options, trained_methods, verbose_option)
from kamalcli.cli.render import echo, emit_json, json_option, pct, table
from kamalcli.errors import KamalError
from kamalcli.settings import PROBE, shown


@click.command()
@json_option
def methods(as_json: bool) -> None:
    """The amalgamation methods and baselines, with each one's options and defaults."""
    from kamalcli.methods import REGISTRY

    rows = [{"name": m.name, "summary": m.summary, "trains": m.trains, "paper": m.paper, "options": m.defaults(),
             "level": m.level, "features": m.features or None, "labels": m.labels,
             "token_level": m.token_build is not None or m.name in ("ensemble", "teacher")} for m in REGISTRY.values()]
    if as_json:
        emit_json(rows)
        return
    table("Methods (kamal amalgamate --method NAME --option key=value)",
          ["name", "what it does", "teacher features", "gold labels", "token teachers (NER)", "options (defaults)",
           "source"],
          [(r["name"], r["summary"], r["features"] or "-", r["labels"], "yes" if r["token_level"] else "-",
            ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "-", r["paper"] or "-") for r in rows])


@click.command()
@click.option("--method", cls=LazyHelpOption,
              help_text=lambda: f"{', '.join(trained_methods())} (see `kamal methods`).")
@click.option("--student", "student_base", metavar="BASE", help="Named base (kamal models), encoder or classifier folder, or hub id.")
@click.option("--student-layers", type=int, help="Keep only the first N layers of the base (a smaller student).")
@click.option("--init", "init", metavar="merge[:METHOD]",
              help="Start the student's encoder from the teachers' encoders merged in weight space (task-arithmetic, "
                   "ties or average); --student must be the base they were fine-tuned from.")
@click.option("--name", help="Name of the new student (default: METHOD-N).")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE", help="A method option (repeatable).")
@click.option("--teacher", "teacher_names", multiple=True, metavar="NAME", help="Only these teachers (default: all).")
@click.option("--data", metavar="NAME", help="Transfer dataset (default: the only one).")
@click.option("--select-by", metavar="HOW", help="transfer-loss (label-free, default) or eval:NAME (uses labels).")
@click.option("--mc-samples", type=int,
              help=f"Which probe the confidences come from: its MC-dropout passes K (default {shown(PROBE.mc_samples)}).")
@click.option("--rmd-fit", metavar="NAME",
              help="Labelled data to fit the teachers' RMD and prototypes on (default, as in probe: their training "
                   "rows, else text kamal synthesize wrote for them, else circular).")
@click.option("--gold", metavar="NAME",
              help="Labelled rows of the transfer data (kamal label-queue, then add-data --label-column): the student "
                   "also learns their labels, beside the method's loss, and muki-hard's prior adds them to its "
                   "prototypes.")
@click.option("--resume", metavar="NAME", help="Continue the interrupted run of that student from its checkpoint.")
@click.option("--dry-run", is_flag=True, help="Decide the recipe and build the target, train nothing: say what it would learn.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: print it as JSON (stable keys).")
@reprobe_option
@mc_exact_option
@train_options
@distributed_options
@verbose_option
@pass_app
def amalgamate(app: App, method, student_base, student_layers, init, name, options, teacher_names, data, select_by,
               mc_samples, rmd_fit, gold, resume, dry_run, as_json, reprobe, mc_exact, epochs, steps, batch_size, lr,
               max_length, seed, checkpoint_every, embeddings, fit, device, backend) -> None:
    """Train one student over the union of the teachers' labels, from unlabelled text."""
    if as_json and not dry_run:
        raise KamalError("--json goes with --dry-run (a trained student's record: kamal students --json)")
    if dry_run and resume:
        raise KamalError("--dry-run plans a new student; --resume continues one: choose one")
    if resume:
        given = [o for o, v in (("--method", method), ("--name", name), ("--student", student_base), ("--init", init),
                                ("--gold", gold), ("--option", options), ("--mc-samples", mc_samples), ("--fit", fit),
                                ("--mc-exact/--mc-adaptive", mc_exact is not None)) if v]
        if given:
            raise KamalError(f"--resume continues a run with its own settings; drop {', '.join(given)}")
        _trained(app.api().resume(resume, device=device, backend=backend))
        return
    if not method:
        raise KamalError("choose a method with --method (see `kamal methods`)")
    asked = dict(name=name, student=student_base, student_layers=student_layers, init=init, options=options,
                 teachers=teacher_names, data=data, select_by=select_by, mc_samples=mc_samples, rmd_fit=rmd_fit,
                 gold=gold, reprobe=reprobe, mc_exact=mc_exact, device=device, epochs=epochs, steps=steps,
                 batch_size=batch_size, lr=lr, max_length=max_length, seed=seed, checkpoint_every=checkpoint_every,
                 embeddings=embeddings, fit=fit)
    if dry_run and as_json:
        emit_json(app.api().dry_run(method, **asked))
    elif dry_run:
        _planned(app.api().dry_run(method, **asked))
    else:
        _trained(app.api().amalgamate(method, backend=backend, **asked))


@click.command()
@click.argument("student_name")
@click.option("--teacher", "teacher_names", multiple=True, metavar="NAME", help="A new teacher (repeatable).")
@click.option("--name", help="Name of the new student (default: the next version, e.g. soft-v2).")
@click.option("--method", help="Amalgamation method (default: the student's own).")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE", help="A method option (repeatable).")
@click.option("--data", metavar="NAME", help="Transfer dataset covering old and new labels (default: the only one).")
@click.option("--select-by", metavar="HOW", help="transfer-loss (label-free, default) or eval:NAME (uses labels).")
@click.option("--mc-samples", type=int, help=f"MC-dropout passes K for the teachers' confidences (default {shown(PROBE.mc_samples)}).")
@click.option("--refine", is_flag=True, help="Allow teachers that add no new label (retrain on what they know).")
@reprobe_option
@mc_exact_option
@train_options
@distributed_options
@verbose_option
@pass_app
def extend(app: App, student_name, teacher_names, name, method, options, data, select_by, mc_samples, refine,
           reprobe, mc_exact, epochs, steps, batch_size, lr, max_length, seed, checkpoint_every, embeddings, fit, device, backend) -> None:
    """Grow a student with newly released teachers: old label ids stay, new labels are appended."""
    _trained(app.api().extend(
        student_name, teacher_names, name=name, method=method, options=options, data=data, select_by=select_by,
        mc_samples=mc_samples, refine=refine, reprobe=reprobe, mc_exact=mc_exact, device=device, backend=backend,
        epochs=epochs, steps=steps, batch_size=batch_size, lr=lr, max_length=max_length, seed=seed,
        checkpoint_every=checkpoint_every, embeddings=embeddings, fit=fit))


def _planned(planned: dict) -> None:
    """The dry run in two lines: what would train, and the target as built."""
    target = planned["target"]
    echo(f"Dry run, nothing trained: {planned['name']} ({planned['method']}) would learn {len(planned['labels'])} "
         f"labels from {planned['rows']:,} rows of {planned['data']}.")
    parts = []
    if "commit" in target:
        parts.append("MUKI's target (each row's picked teacher)" if target["commit"] == 1 else
                     "vanilla-kd's target" if target["commit"] == 0 else f"commit {target['commit']:g}")
    if target.get("prior"):
        parts.append(f"times the prior ({target['prior']})")
    if target.get("smooth"):
        parts.append(f"smoothed over {target['smooth']} rows")
    if "chosen_share" in target:
        parts.append("picks: " + ", ".join(f"{name} {pct(share)}%" for name, share in target["chosen_share"].items()))
    if parts:
        echo("Target: " + "; ".join(parts) + ".")


def _trained(student) -> None:
    train = student.train
    click.echo(
        f"Trained student {student.name} ({student.method}) over {len(student.labels)} labels in "
        f"{train['seconds']:.0f} s ({train['examples_per_second']:.1f} ex/s, {train['steps']} steps); "
        f"kept step {train['best_step'] or train['steps']} by {train['selected_by']}"
        + (" (stopped early: it no longer improved)" if train.get("stopped_early") else "")
    )
    click.echo(f"  saved at {student.path}")
    click.echo(f"  next: kamal eval {student.name} --data NAME   |   kamal export {student.name} --onnx")


@click.command()
@json_option
@pass_app
def students(app: App, as_json: bool) -> None:
    """The trained students, their lineage, teachers and latest evaluations."""
    with app.reader() as store:
        found = store.students()
        evals = {s.id: store.evaluations(s.id) for s in found}
    if as_json:
        emit_json([{**s.as_json(), "evaluations": [{"data": e["data"], "accuracy": e["metrics"].get("accuracy"),
                                                     "macro_f1": e["metrics"].get("macro_f1"), "created_at": e["created_at"]}
                                                    for e in evals[s.id]]} for s in found])
        return
    rows = []
    for s in found:
        latest = {}
        for e in evals[s.id]:
            metrics = e["metrics"]
            latest[e["data"]] = metrics.get("entity_f1" if s.task == "token" else "micro_f1" if metrics.get(
                "multi_label") else "accuracy")
        rows.append((s.name, s.method, s.parent or "-", [t["name"] for t in s.teachers], len(s.labels),
                     ", ".join(f"{d} {pct(a)}%" for d, a in latest.items()) or "-", s.select_by, _trust_cell(s)))
    table("Students", ["name", "method", "parent", "teachers", "labels", "accuracy (entity F1, multi-label micro-F1)",
                       "selected by", "scope / sets"], rows,
          empty="none yet (kamal amalgamate --method muki-hard)")


@click.command("remove-student")
@click.argument("name")
@pass_app
def remove_student(app: App, name: str) -> None:
    """Forget a student: its folder, evaluations, run checkpoints and exports inside the workspace go (an export
    written elsewhere with --out is not touched)."""
    from kamalcli.files import in_artifacts, remove_artifacts

    with app.writer() as store:
        store.claim("student", name, exclusive=True)
        student = store.student(name)
        children = [s.name for s in store.students() if s.parent == student.name]
        if children:
            raise KamalError(f"student {', '.join(children)} extends {student.name}: remove it first")
        as_teacher = next((t for t in store.teachers_of_student(student.id)
                           if Path(t.path).resolve() == Path(student.path).resolve()), None)
        if as_teacher is not None:  # a teacher cut from it to one task has a folder of its own
            raise KamalError(f"teacher {as_teacher.name} reads {student.name}'s folder (extend registered it): "
                             f"`kamal remove-teacher {as_teacher.name}` first")
        exports = [e.path for e in store.exports(student.id)]
        runs = [r.workdir for r in store.runs(name=student.name) if r.id == student.run_id and r.workdir]
        store.remove_student(student.name)
        remove_artifacts(app.workspace, [student.path, *exports, *runs])  # under the claim: the name is free after
    inside = [p for p in exports if in_artifacts(app.workspace, p)]
    kept = f"; {len(exports) - len(inside)} export(s) outside the workspace were not touched" if len(inside) < len(exports) else ""
    click.echo(f"Removed student {student.name}, its folder and {len(inside)} export(s){kept}")


def _trust_cell(student) -> str:
    """What the student says about itself: its scope score and the coverage it was calibrated for."""
    parts = [f"{task + ' ' if task else ''}{s['score']}, keeps {pct(s['keep'])}%"
             for task, s in student.by_task("scope").items()]
    parts += [f"{task + ' ' if task else ''}sets {pct(c['coverage'])}%" for task, c in student.by_task("calibration").items()]
    return "; ".join(parts) or "-"


@click.command("eval")
@click.argument("student_name", required=False)
@click.option("--data", "data_name", required=True, metavar="NAME", help="A labelled dataset.")
@click.option("--baseline", help="Instead of a student (no training): ensemble, teacher:NAME, merge[:METHOD] "
                                 "(the teachers' encoders merged from their base: task-arithmetic, the default, "
                                 "ties or average; each teacher's head on the merged encoder), zero-shot (no "
                                 "teacher: each text's nearest label name in a sentence encoder), or prior:DATA (no "
                                 "teacher: the nearest class prototype of DATA's labelled rows, e.g. generated text, "
                                 "in that encoder).")
@click.option("--teacher", "teacher_names", multiple=True, metavar="NAME",
              help="With --baseline ensemble or merge: only these teachers (default: every teacher of the data's "
                   "task).")
@click.option("--base", metavar="NAME|FOLDER",
              help="With --baseline merge: the pretrained base the teachers were fine-tuned from (default: the one "
                   "their kamal.json records); with zero-shot or prior:DATA: the sentence encoder (default minilm-l6).")
@click.option("--task", metavar="NAME", help="A student of several tasks: the task the data's labels are (default: "
                                            "the one they fit).")
@click.option("--device", help="cpu, cuda or auto.")
@json_option
@pass_app
def eval_cmd(app: App, student_name, data_name, baseline, teacher_names, base, task, device, as_json) -> None:
    """Accuracy, macro-F1, per-class F1 and the confusion matrix of a student (or baseline)."""
    from kamalcli.students.evaluate import baseline_name, canonical_baseline

    metrics = app.api().evaluate(student_name, data=data_name, baseline=baseline, teachers=teacher_names, base=base,
                                 device=device, task=task)
    subject = (f"baseline {baseline_name(canonical_baseline(baseline), teacher_names)}" if baseline
               else f"student {student_name}")
    if as_json:
        emit_json(metrics)
        return
    if "entity_f1" in metrics:
        _entity_table(subject, data_name, metrics)
        return
    if "task" in metrics:
        subject += f", task {metrics['task']},"
    if metrics.get("multi_label"):
        click.echo(f"{subject} on {data_name}: micro-F1 {pct(metrics['micro_f1'])}%, macro-F1 "
                   f"{pct(metrics['macro_f1'])}%, exact label sets {pct(metrics['subset_accuracy'])}% ({metrics['rows']} "
                   f"rows; a label is on at probability {metrics['threshold']})")
        if metrics["unknown_label_rows"]:
            click.echo(f"  {metrics['unknown_label_rows']} rows name labels outside the task (left out of the figures)")
        table(None, ["label", "precision %", "recall %", "F1 %", "support"],
              [(name, pct(v["precision"]), pct(v["recall"]), pct(v["f1"]), v["support"])
               for name, v in metrics["per_class"].items()])
        return
    line = f"{subject} on {data_name}: accuracy {pct(metrics['accuracy'])}%, macro-F1 {pct(metrics['macro_f1'])}% ({metrics['rows']} rows)"
    click.echo(line)
    for key, label in (("old_label_accuracy", "old labels"), ("new_label_accuracy", "new labels")):
        if key in metrics:
            click.echo(f"  {label}: {pct(metrics[key])}%")
    if metrics["unknown_label_rows"]:
        click.echo(f"  {metrics['unknown_label_rows']} rows have gold labels outside the label space (counted wrong)")
    _trust_lines(metrics)
    table(None, ["label", "precision %", "recall %", "F1 %", "support"],
          [(name, pct(v["precision"]), pct(v["recall"]), pct(v["f1"]), v["support"]) for name, v in metrics["per_class"].items()])


def _trust_lines(metrics: dict) -> None:
    scope, sets = metrics.get("scope"), metrics.get("conformal")
    if scope:
        line = f"  scope ({scope['score']}): {pct(scope['flagged'])}% of rows flagged out of scope"
        if scope["flagged_unknown"] is not None:
            line += (f"; {pct(scope['flagged_unknown'])}% of those with labels it does not know, "
                     f"{pct(scope['flagged_known'])}% of the others (AUROC {scope['auroc']:.3f})")
        click.echo(line)
    if sets:
        click.echo(f"  prediction sets: {pct(sets['coverage'])}% hold the gold label (asked: "
                   f"{pct(sets['coverage_asked'])}%), {sets['mean_set_size']:.2f} labels on average, over "
                   f"{sets['rows']} rows of its labels")


def _entity_table(subject: str, data_name: str, metrics: dict) -> None:
    click.echo(f"{subject} on {data_name}: entity F1 {pct(metrics['entity_f1'])}% (precision "
               f"{pct(metrics['entity_precision'])}%, recall {pct(metrics['entity_recall'])}%; micro over "
               f"{metrics['entities']} entities in {metrics['sentences']} sentences; exact span and type)")
    table(None, ["type", "precision %", "recall %", "F1 %", "support", "predicted"],
          [(kind, pct(v["precision"]), pct(v["recall"]), pct(v["f1"]), v["support"], v["predicted"])
           for kind, v in metrics["per_type"].items()])


@click.command()
@click.argument("student_name")
@click.argument("texts", nargs=-1)
@click.option("--file", "file", type=click.Path(dir_okay=False, allow_dash=True),
              help="A file with one text per line (- reads stdin; texts piped on stdin are read without it).")
@click.option("--onnx", is_flag=True, help="Use the student's ONNX export (kamal export STUDENT --onnx).")
@click.option("--device", help="cpu, cuda or auto.")
@click.option("--top", type=click.IntRange(min=1), default=1, show_default=True, help="Show the N most likely labels.")
@json_option
@pass_app
def predict(app: App, student_name, texts, file, onnx, device, top, as_json) -> None:
    """Classify texts with a student (a token student prints the entities it finds): one result per text or
    line, in order; a blank line gets a row that says it was not classified."""
    from kamalcli.students.predict import gather_texts

    rows = app.api().predict(student_name, gather_texts(texts, file), onnx=onnx, top=top, device=device)
    if as_json:
        emit_json(rows)
    elif any("entities" in r for r in rows):
        _print_entities(rows)
    elif any("tasks" in r for r in rows):
        _print_tasks(rows)
    else:
        _print_labels(rows)


def _print_tasks(rows: list[dict]) -> None:
    """One line per text: each task's label and probability (a multi-label task's labels that are on), the text."""
    for r in rows:
        if "note" in r:
            click.echo(f"-\t{r['text'][:80]}\t({r['note']})")
            continue
        answers = "  ".join((f"{name}: {a['label']} {a['probability']:.3f}" if "label" in a
                             else f"{name}: {{{', '.join(a['labels'])}}}")
                            + (" [out of scope]" if a.get("in_scope") is False else "") for name, a in r["tasks"].items())
        if len(answers) > 96:  # the line stays within 160 characters; --json has every answer
            answers = answers[:93] + "..."
        click.echo(f"{answers}\t{r['text'][:60]}")


def _print_labels(rows: list[dict]) -> None:
    """One line per text: label, probability, text, the other top labels, then [out of scope] and the prediction
    set where the student has them; - - for a text not classified."""
    for r in rows:
        if "note" in r:
            click.echo(f"-\t-\t{r['text'][:80]}\t({r['note']})")
            continue
        alternatives = "  ".join(f"{t['label']} {t['probability']:.3f}" for t in r["top"][1:])
        extra = (f"\t({alternatives})" if alternatives else "") + ("\t[out of scope]" if r.get("in_scope") is False else "")
        if "set" in r:
            extra += f"\tset: {{{', '.join(r['set'])}}}"
        click.echo(f"{r['label']}\t{r['probability']:.3f}\t{r['text'][:80]}{extra}")


def _print_entities(rows: list[dict]) -> None:
    """One line per text: its entities as TYPE "text" [start:end] score (character offsets)."""
    for r in rows:
        found = "  ".join(f'{e["type"]} "{e["text"]}" [{e["start"]}:{e["end"]}] {e["score"]:.3f}'
                          for e in r["entities"]) or (f"({r['note']})" if "note" in r else "(no entities)")
        click.echo(f"{found}\t{r['text'][:80]}")


COMMANDS = [methods, amalgamate, extend, students, remove_student, eval_cmd, predict]
