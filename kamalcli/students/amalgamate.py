"""kamal amalgamate (and extend): probe cache -> method objective -> one training loop -> student.

Teachers never run inside the training loop: their outputs on the transfer
rows come from the probe cache (computed first if missing). plan.py checks the
request, problem.py builds what training needs; this module runs the steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.probe.runner import ProbeRequest
from kamalcli.probe.teacher_weights import refresh_teachers
from kamalcli.recipe.recipe import Recipe, plan_recipe
from kamalcli.students.plan import (AmalgamateRequest, Job, options_need_rmd, pin_label_aliases, plan,
                                    reads_confidences, transfer_note, with_recipe)
from kamalcli.students.problem import build_problem, cached_head_states


def amalgamate(workspace, store, request: AmalgamateRequest, *, say=print, detail=None, resume_run=None):
    """Train a student; returns the Student record. resume_run: the interrupted run to continue; detail: where
    the evidence behind the recipe goes (--verbose), None: nowhere."""
    from kamalcli.workspace.runs import training_run

    job, probe_request = _prepared(workspace, store, request, say, detail, claim=True)
    with training_run(workspace, store, job.kind, job.request.name, job.request.as_json(), resume_run=resume_run,
                      resume_hint=f"kamal amalgamate --resume {job.request.name}", say=say) as (run, workdir):
        student = _train_student(workspace, store, job, probe_request, workdir, run, say,
                                 resume=resume_run is not None)
        run.result = {"student": student.name, "path": student.path, **student.train}
    return student


def dry_run(workspace, store, request: AmalgamateRequest, *, say=print, detail=None) -> dict:
    """amalgamate up to the target, training nothing: the recipe decided, the teachers' outputs (probed first if
    missing), the method's objective built as training would build it (commit's guard, pick_smooth and the picks
    included). Returns what the target is, and a fingerprint: two requests with the same one train the same
    student (kamalcli/students/preview.py)."""
    import tempfile

    from kamalcli.students.preview import preview

    job, probe_request = _prepared(workspace, store, request, say, detail, claim=False)
    job = _on_device(job)
    with tempfile.TemporaryDirectory(prefix="kamal-dry-run-") as workdir:
        problem = build_problem(workspace, store, job, probe_request, Path(workdir), None, say)
    return preview(job, problem)


def _prepared(workspace, store, request: AmalgamateRequest, say, detail, *, claim: bool):
    """The steps before any training: the job and the probe settings it reads, the plan said. claim: the inputs
    claimed against other processes (a dry run claims nothing)."""
    job = plan(store, request)                          # every check, before any work
    if claim:
        job = _claim(workspace, store, job, say)        # teachers' weights checked, inputs claimed, merges pinned
    else:
        teachers = tuple(refresh_teachers(workspace, store, list(job.teachers), say))
        job = replace(job, teachers=teachers, request=pin_label_aliases(store, job.request, teachers))
    job = _decide_recipe(workspace, store, job)         # every auto, once (a resumed run reads its own)
    probe_request = _probe_request(store, job, say)
    _say_plan(store, job, say, detail)
    return job, probe_request


def _on_device(job: Job) -> Job:
    from kamalcli.runtime import resolve_device

    return replace(job, train=replace(job.train, device=resolve_device(job.request.device)))


def _claim(workspace, store, job: Job, say) -> Job:
    """The teachers as they are on disk (before any cached output is read), the student's name and the inputs
    claimed against other processes, and the label merges the run starts with."""
    from kamalcli import distributed

    teachers = tuple(refresh_teachers(workspace, store, list(job.teachers), say))
    request = job.request
    store.claim("student", request.name, exclusive=True)
    store.claim_inputs(list(teachers), [job.dataset] + ([store.dataset(request.gold)] if request.gold else []))
    job = replace(job, teachers=teachers, request=pin_label_aliases(store, request, teachers))
    if job.method.one_process and distributed.current().size > 1:
        raise KamalError(f"{job.method.name} runs on one process ({job.method.one_process}); run it without --nproc "
                         "or torchrun")
    if job.train.fit != "all" and distributed.current().size > 1:
        raise KamalError(f"--fit {job.train.fit} runs on one process; run it without --nproc or torchrun")
    if job.task == "token" and distributed.current().size > 1:
        raise KamalError("token-level amalgamation runs on one process; run it without --nproc or torchrun")
    return job


def _decide_recipe(workspace, store, job: Job) -> Job:
    """The recipe decided once (kamalcli/recipe/recipe.py) and recorded in the request, with what a fitted score's
    RMD and prototypes are fitted on: every process and a resumed run train with the same. A student of several
    tasks records each task's recipe, decided on that task's teachers alone."""
    from kamalcli.heads import several_heads
    from kamalcli.students.multi_head import task_jobs, task_name

    if job.request.recipe is not None or job.task == "token":
        return job
    if several_heads(job.teachers):
        tasks = {task_name(sub): _recipe_of(workspace, store, sub) for sub in task_jobs(job)}
        return replace(job, request=replace(job.request, recipe={"tasks": {k: v for k, v in tasks.items() if v}}))
    recipe = _recipe_of(workspace, store, job)
    return job if recipe is None else replace(job, request=with_recipe(job.request, recipe))


def _recipe_of(workspace, store, job: Job) -> dict | None:
    """The recipe of one task's teachers (as_json); None where the method reads no confidences."""
    if not reads_confidences(job.method, job.options):
        return None
    return plan_recipe(workspace, store, job.teachers, job.dataset, job.options, rmd_fit=job.request.rmd_fit,
                       gold=job.request.gold, device=job.train.device).as_json()


def _say_plan(store, job: Job, say, detail) -> None:
    """Once the request is accepted (a refused one is one line): the transfer set chosen and the recipe's table;
    with --verbose (detail), the evidence behind each decision."""
    from kamalcli.heads import several_heads
    from kamalcli.students.multi_head import method_line, task_jobs, task_name

    for line in [transfer_note(store, job), _student_line(job), *job.recipe.table()]:
        if line:
            say(line)
    for line in job.recipe.lines() if detail else []:
        detail(line)
    for sub in task_jobs(job) if job.task == "sequence" and several_heads(job.teachers) else []:
        for line in [method_line(sub), *sub.recipe.table(f"Recipe of task {task_name(sub)}:")]:
            say(line)
        for line in sub.recipe.lines() if detail else []:
            detail(line)


def _student_line(job: Job) -> str:
    """The student chosen: its base (or the student it grows) and what trains (--fit, kamalcli/train/head.py)."""
    from pathlib import Path

    from kamalcli.models.bases import BASES
    from kamalcli.train.head import EPOCHS as HEAD_EPOCHS

    request = job.request
    base = request.student if request.student in BASES else Path(request.student).name
    what = f"grows {request.parent}" if request.parent else f"{base} at {job.train.max_length} tokens"
    fit = {"all": "every layer trained (--fit head trains its head alone, in a fraction of the time)",
           "head": f"only its head trained, on the frozen encoder's states of the transfer rows (up to {HEAD_EPOCHS} "
                   "passes; --epochs and --steps budget fine-tuning)",
           "head-then-all": "its head trained first, on the frozen encoder's states, then every layer"}[job.train.fit]
    return f"Student: {what}, {fit}."


def _probe_request(store, job: Job, say) -> ProbeRequest:
    """The probe settings to use: a method reading confidences takes the cached probes that fit (choose_probes);
    the others read logits only, and any probe serves."""
    from kamalcli.probe.choice import choose_probes

    request, options = job.request, job.training_options
    probe_request = ProbeRequest(**request.probe)
    if reads_confidences(job.method, options) and job.task != "token":
        need_rmd = options_need_rmd(options, job.teachers, request.rmd_fit)
        probe_request = choose_probes(store, list(job.teachers), job.dataset, probe_request, need_rmd=need_rmd,
                                      max_length=job.train.max_length, reprobe=request.reprobe,
                                      given=request.probe_given, say=say)
    return probe_request


def _train_student(workspace, store, job: Job, probe_request, workdir, run, say, resume):
    """The problem, the one training loop (beside the other ranks under torchrun), then the student saved."""
    from kamalcli import distributed
    from kamalcli.train import checkpoint
    from kamalcli.train.loop import train
    from kamalcli.train.loss_history import LossHistory

    job = _on_device(job)
    problem = build_problem(workspace, store, job, probe_request, workdir, run.id, say)
    score, refit = job.recipe.get("score"), job.recipe.evidence("refit")
    if score is not None:
        problem.objective.info["auto"] = score.as_json()
    if refit and refit["teachers"] and "rmd" in problem.outputs.confidence:
        problem.objective.info["refit"] = refit["teachers"]
    resume = resume and checkpoint.exists(workdir)
    world = distributed.current()
    if world.distributed:
        world.dispatch(TrainOnRank(str(workspace.root), job.request, probe_request, job.train, str(workdir), resume))
    states = None if resume else cached_head_states(workspace, job, say)
    losses = LossHistory(workdir)
    try:
        result = train(problem.model, problem.encoded, problem.objective, job.train, workdir,
                       rows=problem.train_rows, selector=problem.selector, resume=resume, on_loss=losses.record,
                       description=f"{job.method.name} -> {job.request.name}", world=world, head_states=states)
    finally:
        losses.close()
    _report_auxiliary(problem.objective, result, say)
    scope = _fit_scope(problem, job.dataset, job.train, token_level=job.task == "token", say=say,
                       states=result.encoder_states)
    return _save_student(workspace, store, job, problem, result, run, losses.steps(), scope)


def _fit_scope(problem, dataset, train_config, *, token_level: bool, say, states=None):
    """The student's scope score, fitted on its transfer rows (kamalcli/trust/scope.py); none for token students.
    states: the encoder's first-token states of those rows when --fit head cached them (no second pass)."""
    from kamalcli.students.trust import scope_from_model, scope_from_states
    from kamalcli.trust.scope import MIN_ROWS

    if token_level:
        return None
    if len(problem.encoded) < MIN_ROWS:
        say(f"No scope score: {len(problem.encoded)} transfer rows are too few to fit one (at least {MIN_ROWS}); "
            f"`kamal scope STUDENT --data NAME` fits one on more text.")
        return None
    if problem.heads:
        scopes = scope_from_model(problem.model, problem.encoded, data=dataset.name, device=train_config.device,
                                  seed=train_config.seed, heads=problem.heads)
        first = next(iter(scopes.values()))
        say(f"Scope: a score per task fitted on {first.rows} rows of {dataset.name}; texts scoring below a task's are "
            f"flagged out of its scope (it keeps {100 * first.keep:.0f}% of them).")
        return scopes
    if states is not None:
        scope = scope_from_states(problem.model, states, data=dataset.name, seed=train_config.seed)
    else:
        scope = scope_from_model(problem.model, problem.encoded, data=dataset.name, device=train_config.device,
                                 seed=train_config.seed)
    say(f"Scope: {scope.score} fitted on {scope.rows} rows of {dataset.name}; texts scoring below it are flagged "
        f"out of scope (it keeps {100 * scope.keep:.0f}% of them).")
    return scope


def _report_auxiliary(objective, result, say) -> None:
    """A feature-level method's own figures join the objective's info; teachers run in the loop are timed."""
    if objective.auxiliary is None:
        return
    objective.info.update(objective.auxiliary.report())
    teacher_seconds = objective.info.get("teacher_seconds")
    if teacher_seconds is not None and result.seconds > 0:
        say(f"Teachers in the loop took {teacher_seconds:.0f} s of {result.seconds:.0f} s training "
            f"({100 * teacher_seconds / result.seconds:.0f}%).")


def _save_student(workspace, store, job: Job, problem, result, run, losses, scope=None):
    """The student folder, then its record (a row points only at finished files)."""
    from kamalcli.files import publish_dir
    from kamalcli.models.loading import save_classifier
    from kamalcli.students.trust import scope_record, write_scopes

    request, options, teachers, dataset, train_config = job.request, job.options, job.teachers, job.dataset, job.train
    labels = problem.labels
    heads = {"heads": [h.as_json() for h in problem.heads]} if problem.heads else {}
    aliases = request.label_aliases or {}  # pinned when the run started (plan.pin_label_aliases)
    meta = {
        "name": request.name, "method": job.method.name, "options": asdict(options), "labels": labels,
        "label_aliases": aliases, **heads,
        "teachers": [{"name": t.name, "fingerprint": t.fingerprint, "labels": list(t.labels),
                      **({"task": t.head_name, "multi_label": t.multi_label} if heads else {})} for t in teachers],
        "base": request.student, "parent": request.parent, "transfer_data": dataset.name,
        "transfer_hash": dataset.content_hash, "select_by": request.select_by, "seed": train_config.seed,
        "init": request.init, "gold": request.gold,
    }
    if aliases:  # config.json travels with every export: the other names of its classes go with it
        problem.model.config.label_aliases = aliases
    staging = workspace.tmp_dir() / "student"
    save_classifier(problem.model, problem.tokenizer, staging, extra=meta)
    if scope is not None:
        write_scopes(staging, scope)
    final = workspace.artifact_dir("students") / request.name
    publish_dir(staging, final)
    parent = store.find_student(request.parent) if request.parent else None
    return store.add_student(
        teachers=list(zip(teachers, [p.id for p in problem.probes])),
        name=request.name, method=job.method.name, options=asdict(options), base=str(problem.base_folder),
        path=str(final), labels=labels, parent_id=parent.id if parent else None, transfer_dataset_id=dataset.id,
        select_by=request.select_by, seed=train_config.seed,
        train={**_train_record(train_config, result, problem), "init": request.init, "label_aliases": aliases,
               "gold": request.gold, "recipe": request.recipe, **heads},
        metrics={}, run_id=run.id, losses=losses, task=job.task,
        scope=scope_record(scope) if scope is not None else None,
    )


def _train_record(train_config, result, problem) -> dict:
    """What the student's record says of its training."""
    return {
        "config": train_config.as_json(), "steps": result.steps, "seconds": result.seconds,
        "examples_per_second": result.examples_per_second, "best_step": result.best_step,
        "best_metric": result.best_metric, "selected_by": result.selected_by or "last step",
        "history": result.history, "stopped_early": result.stopped_early, "epochs": result.epochs,
        "embeddings": result.embeddings,
        "train_rows": int(len(problem.train_rows)), "held_out_rows": int(len(problem.held_out)),
        "objective": problem.objective.info,
    }


@dataclass(frozen=True)
class TrainOnRank:
    """A non-zero rank's part of amalgamate / extend (kamalcli/distributed.py): rebuild the same problem
    from the cache rank 0 has just filled (reading only), then train beside rank 0."""

    root: str
    request: AmalgamateRequest
    probe_request: ProbeRequest
    train_config: object
    workdir: str
    resume: bool

    def run(self, world) -> None:
        from kamalcli.runtime import resolve_device
        from kamalcli.train.loop import train
        from kamalcli.workspace.folder import Workspace
        from kamalcli.workspace.store import Store

        workspace = Workspace(Path(self.root))
        store = Store.open(workspace)
        try:
            job = plan(store, self.request)
            job = replace(job, train=replace(self.train_config, device=resolve_device(self.request.device)))
            problem = build_problem(workspace, store, job, self.probe_request, Path(self.workdir), None,
                                    say=lambda *a, **k: None, read_only=True)
            train(problem.model, problem.encoded, problem.objective, job.train, Path(self.workdir),
                  rows=problem.train_rows, resume=self.resume, world=world)
        finally:
            store.close()


def resume(workspace, store, name: str, *, say=print, detail=None):
    """Continue an interrupted (or failed) amalgamate/extend run of that name from its checkpoint."""
    from kamalcli.train.phases import started
    from kamalcli.workspace.runs import resumable_run

    if store.find_student(name) is not None:
        raise KamalError(f"student {name!r} already finished; nothing to resume")
    running = [r for r in store.runs(name=name, status="running") if r.kind in ("amalgamate", "extend")]
    if running:  # a run still marked running holds its run lock: the app marked the dead ones interrupted
        raise KamalError(f"{name} is still running (kamal {running[-1].kind}, pid {running[-1].pid}): nothing to "
                         f"resume until it stops (Ctrl-C there, or kill {running[-1].pid})")
    run, params = resumable_run(store, ("amalgamate", "extend"), name, has_progress=started)
    if run is None:
        raise KamalError(f"no interrupted run named {name!r} with a checkpoint (see `kamal runs`)")
    params.setdefault("probe", {}).setdefault("mc_exact", True)  # runs recorded before the adaptive probe used the exact one
    params.setdefault("recipe", Recipe.from_legacy(params))  # runs recorded before the recipe decided apart
    request = AmalgamateRequest(**params)
    say(f"Resuming {name} from run {run.id}'s checkpoint.")
    return amalgamate(workspace, store, request, say=say, detail=detail, resume_run=run)
