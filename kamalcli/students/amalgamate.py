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
from kamalcli.students.plan import (AmalgamateRequest, canonical_init, options_need_rmd, pin_label_aliases, plan,
                                    reads_confidences, teachers_task, training_options, transfer_note)
from kamalcli.students.problem import build_problem


def amalgamate(workspace, store, request: AmalgamateRequest, *, say=print, resume_run=None):
    """Train a student; returns the Student record. resume_run: the interrupted run to continue."""
    from kamalcli.train.loop import TrainConfig
    from kamalcli.workspace.runs import training_run

    method, options, teachers, dataset, name = plan(store, request)
    teachers = refresh_teachers(workspace, store, teachers, say)  # before any cached output is read
    store.claim("student", name, exclusive=True)
    store.claim_inputs(teachers, [dataset] + ([store.dataset(request.gold)] if request.gold else []))
    request = pin_label_aliases(store, replace(request, name=name, init=canonical_init(request.init)), teachers)
    token_level = teachers_task(teachers) == "token"
    _check_processes(method, token_level)
    train_config = TrainConfig(**request.train)
    train_config.validate()
    notes = [line for line in [transfer_note(store, request, dataset)] if line]
    if not token_level and reads_confidences(method, options):
        request, fit_notes = _score_and_fit(workspace, store, request, options, teachers, dataset, train_config)
        notes += fit_notes
    probe_request = _probe_request(store, request, method, training_options(options, request), teachers, dataset,
                                   train_config, token_level, say)
    for line in notes:  # once the request is accepted: a refused one is one line
        say(line)
    kind = "extend" if request.parent else "amalgamate"
    with training_run(workspace, store, kind, name, request.as_json(), resume_run=resume_run,
                      resume_hint=f"kamal amalgamate --resume {name}", say=say) as (run, workdir):
        student = _train_student(workspace, store, request, method, options, teachers, dataset, probe_request,
                                 train_config, workdir, run, say, resume=resume_run is not None)
        run.result = {"student": student.name, "path": student.path, **student.train}
    return student


def _check_processes(method, token_level: bool) -> None:
    from kamalcli import distributed

    if method.one_process and distributed.current().size > 1:
        raise KamalError(f"{method.name} runs on one process ({method.one_process}); run it without --nproc or torchrun")
    if token_level and distributed.current().size > 1:
        raise KamalError("token-level amalgamation runs on one process; run it without --nproc or torchrun")


def _score_and_fit(workspace, store, request, options, teachers, dataset, train_config
                   ) -> tuple[AmalgamateRequest, list[str]]:
    """score=auto decided (kamalcli/probe/auto_score.py: the decision kamal report names) and what RMD or the
    prototypes are fitted on (kamalcli/probe/fit_plan.py: the rule kamal probe follows), both recorded in the
    request, so every process and a resumed run train with the same. Before both, whether the prototypes read the
    transfer rows (kamalcli/probe/prior_check.py): where they do not read some teacher's, no prototype score, and
    the prior only within the teachers they read, and RMD fitted again on the transfer rows for the teachers they
    do not read (kamalcli/probe/transfer_refit.py). Returns the request and the lines that say so."""
    from kamalcli.probe.auto_score import FITTED
    from kamalcli.probe.fit_plan import rmd_fit_plan
    from kamalcli.probe.prior_check import transfer_check
    from kamalcli.probe.scores import PROTOTYPE_SCORES, RMD_SCORES
    from kamalcli.probe.transfer_refit import decide_refit

    notes = []
    check = None
    decides_prior = _wants_prior(options, teachers) and request.prior is None
    decides_auto = getattr(options, "confidence_score", None) == "auto" and request.auto is None
    decides_refit = (getattr(options, "refit", "none") == "auto" and not options.paper and request.refit is None
                     and options.confidence_score in ("auto", *RMD_SCORES))
    if decides_prior or decides_auto or decides_refit:
        check = transfer_check(workspace, store, teachers, dataset, request.rmd_fit, encoder=options.encoder,
                               device=train_config.device)
    if decides_prior:
        request = replace(request, prior=_decide_prior(store, teachers, request, options, notes, check))
    if decides_auto:
        decision = _decide_auto(store, teachers, rmd_fit_plan(store, teachers, request.rmd_fit), options, notes,
                                check)
        request = replace(request, auto=decision.as_json())
        notes.append(decision.line)
    score = training_options(options, request).confidence_score
    if decides_refit:
        refit = decide_refit(check, score, dataset.name)
        request = replace(request, refit=refit.as_json())
        notes += [refit.line] if refit.line else []
    plan = rmd_fit_plan(store, teachers, request.rmd_fit, one_dataset=score in PROTOTYPE_SCORES)
    if _commits_by_skill(options) and request.gate is None:
        request = replace(request, gate=_gate(store, teachers, plan, score, notes, request.prior))
    if score not in FITTED:
        return request, notes
    if score in PROTOTYPE_SCORES and plan.dataset is None:
        raise KamalError(f"score={score} needs labelled text for every label of these teachers: --rmd-fit NAME, "
                         "or text from `kamal synthesize`")
    notes.append(plan.line)
    return (replace(request, rmd_fit=plan.dataset.name) if plan.dataset is not None else request), notes


def _wants_prior(options, teachers) -> bool:
    return (getattr(options, "prior", "none") != "none" and not options.paper
            and all(t.task == "sequence" for t in teachers))


def _decide_prior(store, teachers, request, options, notes: list[str], check) -> dict:
    """muki-hard prior=auto|prototype (kamalcli/probe/auto_score.py decide_prior): the prototypes' labelled text,
    recorded in the request so every process and a resumed run train with the same."""
    from kamalcli.models.bases import resolve_model_source
    from kamalcli.probe.auto_score import decide_prior
    from kamalcli.probe.fit_plan import rmd_fit_plan

    try:
        resolve_model_source(options.encoder)
        encoder_error = None
    except KamalError as error:
        encoder_error = str(error)
    space = store.label_space(teachers)
    prior = decide_prior(rmd_fit_plan(store, teachers, request.rmd_fit, one_dataset=True), space.names,
                         store.label_aliases().canonical, options.encoder, encoder_error,
                         check=check if options.prior == "auto" else None,
                         unchecked="not checked against the transfer rows: kamal probe caches what it reads"
                         if options.prior == "auto" else "prior=prototype: not checked")
    if options.prior == "prototype" and prior.data is None:
        raise KamalError(f"prior=prototype: {prior.reason}")
    notes.append(prior.line)
    return prior.as_json()


def _commits_by_skill(options) -> bool:
    return getattr(options, "commit", None) == "auto" and not options.paper


def _gate(store, teachers, plan, score: str, notes: list[str], prior: dict | None) -> dict:
    """muki-hard commit=auto (kamalcli/probe/auto_score.py decide_commitment; beside a prior, prior_commitment)."""
    from kamalcli.probe.auto_score import decide_commitment, prior_commitment

    if prior and prior["data"] and prior.get("teachers") is None:  # a prior over every label carries the selection
        decision = prior_commitment(prior["data"])
    else:
        decision = decide_commitment(store, teachers, plan, score)
    notes.append(decision.line)
    return decision.as_json()


def _decide_auto(store, teachers, fit_plan, options, notes: list[str], check=None):
    """decide_auto over the scores this student can compute: MC dropout unless mc=false; the prototype scores
    with the encoder their figures were measured with, when it is installed and its prototypes read the transfer
    rows (check: kamalcli/probe/prior_check.py)."""
    from kamalcli.models.bases import resolve_model_source
    from kamalcli.probe.auto_score import USABLE, decide_auto
    from kamalcli.probe.prototypes import DEFAULT_ENCODER
    from kamalcli.probe.scores import PROTOTYPE_SCORES

    available = tuple(s for s in USABLE if (s != "mc-dropout" or getattr(options, "mc", True))
                      and (s not in PROTOTYPE_SCORES or getattr(options, "encoder", None) == DEFAULT_ENCODER))
    decision = decide_auto(store, teachers, fit_plan, available, check)
    if decision.score in PROTOTYPE_SCORES:
        try:
            resolve_model_source(DEFAULT_ENCODER)
        except KamalError as error:
            notes.append(f"score=auto: no prototype score ({error}); deciding without it.")
            decision = decide_auto(store, teachers, fit_plan, tuple(s for s in available if s not in PROTOTYPE_SCORES))
    return decision


def _probe_request(store, request, method, options, teachers, dataset, train_config, token_level, say) -> ProbeRequest:
    """The probe settings to use: a method reading confidences takes the cached probes that fit (choose_probes);
    the others read logits only, and any probe serves."""
    from kamalcli.probe.choice import choose_probes

    probe_request = ProbeRequest(**request.probe)
    if reads_confidences(method, options) and not token_level:
        need_rmd = options_need_rmd(options, teachers, request.rmd_fit)
        probe_request = choose_probes(store, teachers, dataset, probe_request, need_rmd=need_rmd,
                                      max_length=train_config.max_length, reprobe=request.reprobe,
                                      given=request.probe_given, say=say)
    return probe_request


def _train_student(workspace, store, request, method, options, teachers, dataset, probe_request, train_config,
                   workdir, run, say, resume):
    """The problem, the one training loop (beside the other ranks under torchrun), then the student saved."""
    from kamalcli import distributed
    from kamalcli.runtime import resolve_device
    from kamalcli.train import checkpoint
    from kamalcli.train.loop import train
    from kamalcli.train.loss_history import LossHistory

    train_config = replace(train_config, device=resolve_device(request.device))
    problem = build_problem(workspace, store, request, method, training_options(options, request), teachers,
                            dataset, probe_request, train_config, workdir, run.id, say)
    if request.auto:
        problem.objective.info["auto"] = request.auto
    if request.refit and request.refit["teachers"] and "rmd" in problem.outputs.confidence:
        problem.objective.info["refit"] = request.refit["teachers"]
    resume = resume and checkpoint.exists(workdir)
    world = distributed.current()
    if world.distributed:
        world.dispatch(TrainOnRank(str(workspace.root), request, probe_request, train_config, str(workdir), resume))
    losses = LossHistory(workdir)
    try:
        result = train(problem.model, problem.encoded, problem.objective, train_config, workdir,
                       rows=problem.train_rows, selector=problem.selector, resume=resume, on_loss=losses.record,
                       description=f"{method.name} -> {request.name}", world=world)
    finally:
        losses.close()
    _report_auxiliary(problem.objective, result, say)
    scope = _fit_scope(problem, dataset, train_config, token_level=teachers_task(teachers) == "token", say=say)
    return _save_student(workspace, store, request, method, options, teachers, dataset, train_config, problem,
                         result, run, losses.steps(), scope)


def _fit_scope(problem, dataset, train_config, *, token_level: bool, say):
    """The student's scope score, fitted on its transfer rows (kamalcli/trust/scope.py); none for token students."""
    from kamalcli.students.trust import scope_from_model
    from kamalcli.trust.scope import MIN_ROWS

    if token_level:
        return None
    if len(problem.encoded) < MIN_ROWS:
        say(f"No scope score: {len(problem.encoded)} transfer rows are too few to fit one (at least {MIN_ROWS}); "
            f"`kamal scope STUDENT --data NAME` fits one on more text.")
        return None
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


def _save_student(workspace, store, request, method, options, teachers, dataset, train_config, problem, result, run,
                  losses, scope=None):
    """The student folder, then its record (a row points only at finished files)."""
    from kamalcli.files import publish_dir
    from kamalcli.models.loading import save_classifier

    labels = list(problem.outputs.space.names)
    aliases = request.label_aliases or {}  # pinned when the run started (plan.pin_label_aliases)
    meta = {
        "name": request.name, "method": method.name, "options": asdict(options), "labels": labels,
        "label_aliases": aliases,
        "teachers": [{"name": t.name, "fingerprint": t.fingerprint, "labels": list(t.labels)} for t in teachers],
        "base": request.student, "parent": request.parent, "transfer_data": dataset.name,
        "transfer_hash": dataset.content_hash, "select_by": request.select_by, "seed": train_config.seed,
        "init": request.init, "gold": request.gold,
    }
    if aliases:  # config.json travels with every export: the other names of its classes go with it
        problem.model.config.label_aliases = aliases
    staging = workspace.tmp_dir() / "student"
    save_classifier(problem.model, problem.tokenizer, staging, extra=meta)
    if scope is not None:
        scope.save(staging)
    final = workspace.artifact_dir("students") / request.name
    publish_dir(staging, final)
    parent = store.find_student(request.parent) if request.parent else None
    return store.add_student(
        teachers=list(zip(teachers, [p.id for p in problem.probes])),
        name=request.name, method=method.name, options=asdict(options), base=str(problem.base_folder), path=str(final),
        labels=labels, parent_id=parent.id if parent else None, transfer_dataset_id=dataset.id,
        select_by=request.select_by, seed=train_config.seed,
        train={**_train_record(train_config, result, problem), "init": request.init, "label_aliases": aliases,
               "gold": request.gold},
        metrics={}, run_id=run.id, losses=losses, task=teachers_task(teachers),
        scope=scope.as_json() if scope is not None else None,
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
            method, options, teachers, dataset, _ = plan(store, self.request)
            config = replace(self.train_config, device=resolve_device(self.request.device))
            problem = build_problem(workspace, store, self.request, method, training_options(options, self.request),
                                    teachers, dataset, self.probe_request, config, Path(self.workdir), None, say=lambda *a, **k: None,
                                    read_only=True)
            train(problem.model, problem.encoded, problem.objective, config, Path(self.workdir),
                  rows=problem.train_rows, resume=self.resume, world=world)
        finally:
            store.close()


def resume(workspace, store, name: str, *, say=print):
    """Continue an interrupted (or failed) amalgamate/extend run of that name from its checkpoint."""
    from kamalcli.train.phases import started
    from kamalcli.workspace.runs import resumable_run

    if store.find_student(name) is not None:
        raise KamalError(f"student {name!r} already finished; nothing to resume")
    run, params = resumable_run(store, ("amalgamate", "extend"), name, has_progress=started)
    if run is None:
        raise KamalError(f"no interrupted run named {name!r} with a checkpoint (see `kamal runs`)")
    params.setdefault("probe", {}).setdefault("mc_exact", True)  # runs recorded before the adaptive probe used the exact one
    request = AmalgamateRequest(**params)
    say(f"Resuming {name} from run {run.id}'s checkpoint.")
    return amalgamate(workspace, store, request, say=say, resume_run=run)
