"""kamal amalgamate (and extend): probe cache -> method objective -> one training loop -> student.

Teachers never run inside the training loop: their outputs on the transfer
rows come from the probe cache (computed first if missing).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.labels import LabelSpace, label_indices
from kamalcli.probe.runner import ProbeRequest, generated_fit_line
from kamalcli.probe.selection import percentile
from kamalcli.synthesis import is_generated


@dataclass
class AmalgamateRequest:
    method: str
    options: list[str] = field(default_factory=list)
    student: str = "minilm-l6"
    student_layers: int | None = None
    name: str | None = None
    teachers: list[str] = field(default_factory=list)
    data: str | None = None
    select_by: str = "transfer-loss"
    rmd_fit: str | None = None         # labelled data for the teachers' RMD fits (score=rmd)
    parent: str | None = None          # extend: the student that grows
    train: dict = field(default_factory=dict)
    probe: dict = field(default_factory=dict)
    device: str = "auto"
    reprobe: bool = False              # probe again with these settings even if other cached probes exist

    def as_json(self) -> dict:
        return asdict(self)


def teacher_outputs(store, teachers, probes) -> "TeacherOutputs":  # noqa: F821
    """The methods' view of N teachers' cached probes on the same rows."""
    from kamalcli.methods.base import TeacherOutputs
    from kamalcli.probe.arrays import ProbeArrays
    from kamalcli.probe.auto_score import energy
    from kamalcli.probe.figures import SCORES

    space = store.label_space(teachers)
    rows = [store.probe_rows(p.id) for p in probes]
    logits = tuple(np.asarray(ProbeArrays.load(Path(p.path)).logits, dtype=np.float32) for p in probes)
    confidence = {}
    for score, of_rows in SCORES.items():
        columns = [of_rows(r) for r in rows]
        if all(c is not None for c in columns):
            confidence[score] = np.stack(columns, axis=1)
    if "rmd" in confidence:
        confidence["rmd"] = percentile(confidence["rmd"])
    confidence["energy"] = percentile(np.stack([energy(z) for z in logits], axis=1))
    fits = [store.rmd_fit_of(p.id) for p in probes]
    return TeacherOutputs(space, tuple(t.name for t in teachers), logits, confidence,
                          tuple(f.source if f is not None else None for f in fits))


def teachers_task(teachers) -> str:
    """sequence or token: every teacher's task; teachers of both in one amalgamation are refused."""
    tasks = {t.task for t in teachers}
    if len(tasks) > 1:
        tokens = ", ".join(t.name for t in teachers if t.task == "token")
        raise KamalError(f"these teachers mix tasks ({tokens} tag tokens, the others classify texts); "
                         "amalgamate one task at a time with --teacher NAME")
    return tasks.pop()


def check_task(dataset, task: str, role: str) -> None:
    if dataset.task != task:
        holds = "tokens with tags" if dataset.task == "token" else "texts"
        need = "token data (tokens and BIO tags)" if task == "token" else "text data"
        raise KamalError(f"{role} data {dataset.name} holds {holds}; {task} teachers need {need}")


def _transfer_dataset(store, name: str | None, task: str = "sequence"):
    if name:
        return store.dataset(name)
    transfer = [d for d in store.datasets(role="transfer") if d.task == task]
    if not transfer:
        raise KamalError("no transfer data: add unlabelled text with `kamal add-data FILE` (role transfer)")
    if len(transfer) > 1:
        names = ", ".join(d.name for d in transfer)
        raise KamalError(f"several transfer sets ({names}): choose one with --data NAME")
    return transfer[0]


def _default_name(store, method: str) -> str:
    taken = {s.name for s in store.students()} | {r.name for r in store.runs(kind="amalgamate") if r.name}
    i = 1
    while f"{method}-{i}" in taken:
        i += 1
    return f"{method}-{i}"


def plan(store, request: AmalgamateRequest):
    """Everything checked before any work: method, options, teachers, data, name."""
    from kamalcli.methods import get_method
    from kamalcli.names import check_name

    method = get_method(request.method)
    if not method.trains:
        raise KamalError(f"{method.name} is a baseline with nothing to train: `kamal eval --baseline {method.name} --data NAME`")
    options = method.parse(request.options)
    teachers = [store.teacher(n) for n in request.teachers] if request.teachers else store.teachers()
    if not teachers:
        raise KamalError("no teachers: register some with `kamal add-teacher FOLDER`")
    if len(teachers) < 2 and reads_confidences(method, options):
        raise KamalError(
            f"{method.name} chooses among teachers and needs at least two; there is only {teachers[0].name} "
            "(distil one teacher with vanilla-kd, or add another teacher)"
        )
    if len({t.name for t in teachers}) != len(teachers):
        raise KamalError("a teacher is named twice")
    task = teachers_task(teachers)
    if task == "token" and method.token_build is None:
        raise KamalError(f"{method.name} works on sequence classifiers only; token teachers amalgamate with "
                         "muki-hard, muki-soft, vanilla-kd or uhc")
    if task == "token" and request.reprobe:
        raise KamalError("--reprobe chooses among cached sentence-level probes; token teachers' per-word outputs are "
                         "cached by data, --max-length and --mc-samples: change one of them to compute new ones")
    dataset = _transfer_dataset(store, request.data, task)
    check_task(dataset, task, "transfer")
    if request.select_by != "transfer-loss":
        if not request.select_by.startswith("eval:"):
            raise KamalError(f"--select-by {request.select_by!r}: use transfer-loss or eval:NAME")
        eval_set = store.dataset(request.select_by.split(":", 1)[1])
        if not eval_set.has_labels:
            raise KamalError(f"--select-by {request.select_by}: that dataset has no labels")
    name = check_name(request.name, "student") if request.name is not None else _default_name(store, method.name)
    if store.find_student(name) is not None:
        raise KamalError(f"a student named {name!r} exists already; choose another --name")
    if request.rmd_fit:
        store.dataset(request.rmd_fit)
    if not request.parent:
        check_base(request.student, request.student_layers)
    return method, options, teachers, dataset, name


def check_base(source: str, layers: int | None) -> None:
    """Before any work: the student base exists and has enough layers (config.json only)."""
    from kamalcli.assets import resolve_model_source
    from kamalcli.teachers import read_config

    config = read_config(resolve_model_source(source))
    if config.get("auto_map"):
        raise KamalError(f"{source} needs custom code from its author; kamal never runs remote code")
    total = config.get("num_hidden_layers")
    if layers is not None and (total is None or not 1 <= layers <= total):
        raise KamalError(f"--student-layers {layers}: the base has {total} layers")


def amalgamate(workspace, store, request: AmalgamateRequest, *, say=print, resume_run=None):
    """Train a student; returns the Student record. resume_run: the interrupted run to continue."""
    from kamalcli import distributed
    from kamalcli.probe.choice import choose_probes
    from kamalcli.runs import training_run
    from kamalcli.train.loop import TrainConfig

    method, options, teachers, dataset, name = plan(store, request)
    if method.one_process and distributed.current().size > 1:
        raise KamalError(f"{method.name} runs on one process ({method.one_process}); run it without --nproc or torchrun")
    request = replace(request, name=name)
    token_level = teachers_task(teachers) == "token"
    if token_level and distributed.current().size > 1:
        raise KamalError("token-level amalgamation runs on one process; run it without --nproc or torchrun")
    unfitted_auto = False  # score=auto with nothing to fit RMD on that the teachers did not pick themselves
    if not token_level and _auto_fits_generated_text(request, options, teachers):
        generated = generated_rmd_fit(store, teachers)
        if generated is not None:
            request = replace(request, rmd_fit=generated.name)
            say(f"score=auto: RMD fitted on {generated.name}, text kamal synthesize wrote for these teachers "
                "(--rmd-fit NAME for other labelled data)")
        unfitted_auto = generated is None
        score = options.confidence_score
        if generated is None and score != "auto":
            raise KamalError(f"score={score} needs labelled text for every label of these teachers: --rmd-fit NAME, "
                             "or text from `kamal synthesize`")
    train_config = TrainConfig(**request.train)
    train_config.validate()
    probe_request = ProbeRequest(**request.probe)
    if reads_confidences(method, options) and not token_level:  # the others read logits only: any probe serves
        need_rmd = options_need_rmd(options, teachers, request.rmd_fit)
        probe_request = choose_probes(store, teachers, dataset, probe_request, need_rmd=need_rmd,
                                      max_length=train_config.max_length, reprobe=request.reprobe, say=say)
    if unfitted_auto:
        say("score=auto: kamal has neither these teachers' training data nor text written for them, so it "
            "selects by the teachers' confidences; text from `kamal synthesize --prompt 'Write a ... about "
            "{label}.'`, the prompt naming what your texts are, lets it select by distance to each teacher's domain")
    kind = "extend" if request.parent else "amalgamate"
    with training_run(workspace, store, kind, name, request.as_json(), resume_run=resume_run,
                      resume_hint=f"kamal amalgamate --resume {name}", say=say) as (run, workdir):
        student = _train_student(workspace, store, request, method, options, teachers, dataset, probe_request,
                                 train_config, workdir, run, say, resume=resume_run is not None)
        run.result = {"student": student.name, "path": student.path, **student.train}
    return student


@dataclass
class _Problem:
    """What training needs; every process of a torchrun job builds the same one."""

    model: object
    tokenizer: object
    base_folder: object
    outputs: object
    probes: list
    encoded: object
    objective: object
    selector: object
    train_rows: np.ndarray
    held_out: np.ndarray


def _train_student(workspace, store, request, method, options, teachers, dataset, probe_request, train_config,
                   workdir, run, say, resume):
    from kamalcli import distributed
    from kamalcli.fsutil import publish_dir
    from kamalcli.loss_history import LossHistory
    from kamalcli.modeling import save_classifier
    from kamalcli.runtime import resolve_device
    from kamalcli.train import checkpoint
    from kamalcli.train.loop import train

    train_config = replace(train_config, device=resolve_device(request.device))
    task = teachers_task(teachers)
    build = _token_problem if task == "token" else _problem
    problem = build(workspace, store, request, method, options, teachers, dataset, probe_request, train_config,
                    workdir, run.id, say)
    model, objective, train_rows, held_out, outputs = (problem.model, problem.objective, problem.train_rows,
                                                       problem.held_out, problem.outputs)
    resume = resume and checkpoint.exists(workdir)
    world = distributed.current()
    if world.distributed:
        world.dispatch(TrainOnRank(str(workspace.root), request, probe_request, train_config, str(workdir), resume))

    # 3. the one training loop
    losses = LossHistory(workdir)
    try:
        result = train(model, problem.encoded, objective, train_config, workdir, rows=train_rows,
                       selector=problem.selector, resume=resume, on_loss=losses.record,
                       description=f"{method.name} -> {request.name}", world=world)
    finally:
        losses.close()

    if objective.auxiliary is not None:
        objective.info.update(objective.auxiliary.report())
        teacher_seconds = objective.info.get("teacher_seconds")
        if teacher_seconds is not None and result.seconds > 0:
            say(f"Teachers in the loop took {teacher_seconds:.0f} s of {result.seconds:.0f} s training "
                f"({100 * teacher_seconds / result.seconds:.0f}%).")

    # 4. the student folder, then its record (a row points only at finished files)
    train_record = {
        "config": train_config.as_json(), "steps": result.steps, "seconds": result.seconds,
        "examples_per_second": result.examples_per_second, "best_step": result.best_step,
        "best_metric": result.best_metric, "selected_by": result.selected_by or "last step",
        "history": result.history, "stopped_early": result.stopped_early, "epochs": result.epochs,
        "embeddings": result.embeddings,
        "train_rows": int(len(train_rows)), "held_out_rows": int(len(held_out)),
        "objective": objective.info,
    }
    meta = {
        "name": request.name, "method": method.name, "options": asdict(options), "labels": list(outputs.space.names),
        "teachers": [{"name": t.name, "fingerprint": t.fingerprint, "labels": list(t.labels)} for t in teachers],
        "base": request.student, "parent": request.parent, "transfer_data": dataset.name,
        "transfer_hash": dataset.content_hash, "select_by": request.select_by, "seed": train_config.seed,
    }
    staging = workspace.tmp_dir() / "student"
    save_classifier(model, problem.tokenizer, staging, extra=meta)
    final = workspace.artifact_dir("students") / request.name
    publish_dir(staging, final)
    parent = store.find_student(request.parent) if request.parent else None
    return store.add_student(
        teachers=list(zip(teachers, [p.id for p in problem.probes])),
        name=request.name, method=method.name, options=asdict(options), base=str(problem.base_folder), path=str(final),
        labels=list(outputs.space.names), parent_id=parent.id if parent else None, transfer_dataset_id=dataset.id,
        select_by=request.select_by, seed=train_config.seed, train=train_record, metrics={}, run_id=run.id,
        losses=losses.steps(), task=task,
    )


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
        from kamalcli.store import Store
        from kamalcli.train.loop import train
        from kamalcli.workspace import Workspace

        workspace = Workspace(Path(self.root))
        store = Store.open(workspace)
        try:
            method, options, teachers, dataset, _ = plan(store, self.request)
            config = replace(self.train_config, device=resolve_device(self.request.device))
            build = _token_problem if teachers_task(teachers) == "token" else _problem
            problem = build(workspace, store, self.request, method, options, teachers, dataset,
                               self.probe_request, config, Path(self.workdir), None, say=lambda *a, **k: None,
                               read_only=True)
            train(problem.model, problem.encoded, problem.objective, config, Path(self.workdir),
                  rows=problem.train_rows, resume=self.resume, world=world)
        finally:
            store.close()


def _problem(workspace, store, request, method, options, teachers, dataset, probe_request, train_config, workdir,
             run_id, say, read_only: bool = False) -> _Problem:
    """1. the teachers' outputs (probed first if missing), 2. the student, its objective and model selection."""
    from kamalcli.batching import encode
    from kamalcli.data import load_dataset_rows
    from kamalcli.train.evaluate import EvalAccuracy, HeldOutLoss, holdout_split

    device = train_config.device
    outputs, probes, runner = _teacher_outputs(workspace, store, request, method, options, teachers, dataset,
                                               probe_request, train_config, run_id, say, read_only)

    # 2. the student, over the union label space (an extended student keeps its old label ids)
    model, tokenizer, base_folder = _student_model(store, request, outputs.space, train_config.seed)
    texts, gold = load_dataset_rows(dataset)
    encoded = encode(tokenizer, texts, train_config.max_length, config=model.config)
    if request.select_by == "transfer-loss":  # the held-out slice exists only for label-free selection
        train_rows, held_out = holdout_split(len(texts), train_config.seed)
    else:
        train_rows, held_out = np.arange(len(texts)), np.arange(0)
    if method.level == "feature":
        context = _feature_context(method, outputs, model, teachers, dataset, runner, texts, encoded, gold,
                                   train_config, device, workdir, say)
        context = replace(context, student=model, base=str(base_folder), train_rows=train_rows, held_out=held_out)
        objective = method.build(context, options)
    else:
        objective = method.build(outputs, options)
    selector = None
    if request.select_by == "transfer-loss" and len(held_out):
        selector = HeldOutLoss(objective, encoded, held_out, device)
    elif request.select_by.startswith("eval:"):
        eval_set = store.dataset(request.select_by.split(":", 1)[1])
        eval_texts, gold = load_dataset_rows(eval_set)
        selector = EvalAccuracy(eval_set.name, encode(tokenizer, eval_texts, train_config.max_length, config=model.config),
                                label_indices(gold, outputs.space.names), device)
        say(f"Model selection uses the labels of {eval_set.name} (recorded with the student).")
    return _Problem(model, tokenizer, base_folder, outputs, probes, encoded, objective, selector, train_rows, held_out)


def _token_problem(workspace, store, request, method, options, teachers, dataset, probe_request, train_config, workdir,
                   run_id, say, read_only: bool = False) -> _Problem:
    """The token-level problem (named entities): per-word teacher outputs, a token-classifier student,
    targets per word read at the student's first sub-token of each word (kamalcli/methods/token_level.py)."""
    from kamalcli import token_probe
    from kamalcli.token_data import load_token_rows
    from kamalcli.train.evaluate import HeldOutLoss, holdout_split
    from kamalcli.word_alignment import encode_words

    mc_samples = probe_request.mc_samples if reads_confidences(method, options) else \
        token_probe.cached_passes(store, teachers, dataset, train_config.max_length)
    outputs, probes = token_probe.teacher_outputs(workspace, store, teachers, dataset,
                                                  max_length=train_config.max_length, mc_samples=mc_samples,
                                                  seed=probe_request.seed, device=train_config.device, say=say)
    model, tokenizer, base_folder = _student_model(store, request, outputs.space, train_config.seed, task="token")
    sentences, _ = load_token_rows(dataset)
    aligned = encode_words(tokenizer, sentences, train_config.max_length, config=model.config)
    objective = method.token_build(outputs, options)
    objective.arrays["positions"] = aligned.positions(outputs.words.shape[1])
    if aligned.cut_words():
        say(f"{aligned.cut_words()} words lie beyond --max-length {train_config.max_length} for the student and are "
            "not trained on.")
    if request.select_by == "transfer-loss":
        train_rows, held_out = holdout_split(len(sentences), train_config.seed)
    else:
        train_rows, held_out = np.arange(len(sentences)), np.arange(0)
    selector = None
    if request.select_by == "transfer-loss" and len(held_out):
        selector = HeldOutLoss(objective, aligned.encoded, held_out, train_config.device)
    elif request.select_by.startswith("eval:"):
        from kamalcli.entities import EntityF1Selector

        eval_set = store.dataset(request.select_by.split(":", 1)[1])
        check_task(eval_set, "token", "--select-by")
        selector = EntityF1Selector(eval_set, tokenizer, list(outputs.space.names), train_config.max_length,
                                    train_config.device)
        say(f"Model selection uses the tags of {eval_set.name} (entity F1; recorded with the student).")
    return _Problem(model, tokenizer, base_folder, outputs, probes, aligned.encoded, objective, selector, train_rows,
                    held_out)


def _teacher_outputs(workspace, store, request, method, options, teachers, dataset, probe_request, train_config,
                     run_id, say, read_only):
    """1. teachers' outputs on the transfer rows, from the probe cache."""
    from kamalcli.probe.runner import Runner

    runner = Runner(workspace, store, device=train_config.device, batch_size=max(train_config.batch_size, 32),
                    run_id=run_id, options_key=probe_request.options_key, read_only=read_only)
    need_rmd = options_need_rmd(options, teachers, request.rmd_fit)
    settings = {t.id: probe_request.settings_for(t) for t in teachers}
    probes = []
    for teacher in teachers:
        wanted = settings[teacher.id]
        if not reads_confidences(method, options):  # the logits are all it reads: any cached probe, else one plain pass
            cached = runner.logits_cached(teacher, dataset, train_config.max_length, any_length=True)
            if cached is None:
                say(f"Probing {teacher.name} on {dataset.name} first (logits only: {method.name} reads no "
                    f"confidences; max length {wanted.max_length}).")
                cached = runner.logits_probe(teacher, dataset, wanted.max_length)
            else:
                say(f"Using cached probe {cached.id} of {teacher.name} on {dataset.name} for its logits "
                    f"(max length {cached.options.get('max_length')}).")
            probes.append(cached)
            continue
        if not runner.cached(teacher, dataset, wanted, need_rmd):
            say(f"Probing {teacher.name} on {dataset.name} first (K={wanted.mc_samples}, max length "
                f"{wanted.max_length}){_other_probes(store, teacher, dataset)}.")
        probe, _ = runner.ensure(teacher, dataset, wanted, need_layers=need_rmd)
        probes.append(probe)
    if need_rmd:
        fit_dataset = store.dataset(request.rmd_fit) if request.rmd_fit else None
        for teacher, probe in zip(teachers, probes):
            # Without --rmd-fit, keep whatever fit `kamal probe` attached (perhaps a labelled one).
            if fit_dataset is not None or store.rmd_fit_of(probe.id) is None:
                note = runner.fit_rmd(teacher, settings[teacher.id], [probe], fit_dataset)
                if note and note["source"] == "pseudo":
                    say(f"RMD for {teacher.name} is fitted on rows it is itself confident on (circular); "
                        "--rmd-fit NAME gives it labelled data.")
                elif note and note["generated"]:
                    say(generated_fit_line(note))
    outputs = teacher_outputs(store, teachers, probes)
    if reads_confidences(method, options) and _wants_prototypes(options, request, outputs):
        outputs = _with_prototype_score(workspace, store, request, options, teachers, dataset, outputs,
                                        train_config, say)
    return outputs, probes, runner


def _wants_prototypes(options, request, outputs) -> bool:
    """An explicit prototype score, or score=auto with RMD fitted on labelled text (generated or --rmd-fit)."""
    from kamalcli.methods.output_level import PROTOTYPE_SCORES

    score = getattr(options, "confidence_score", None)
    if score in PROTOTYPE_SCORES:
        return True
    return (score == "auto" and request.rmd_fit is not None and "rmd" in outputs.confidence
            and all(s == "labelled" for s in outputs.rmd_sources))


def _with_prototype_score(workspace, store, request, options, teachers, dataset, outputs, train_config, say):
    """outputs with the prototype score and its fusion with RMD (kamalcli/probe/prototypes.py). score=auto
    with the default encoder goes on with RMD alone, saying so, when that encoder is not installed."""
    from kamalcli.probe.prototypes import DEFAULT_ENCODER, confidence_columns, prototype_scores

    encoder = options.encoder
    try:
        scores = prototype_scores(workspace, teachers, dataset, store.dataset(request.rmd_fit), encoder=encoder,
                                  max_length=train_config.max_length, device=train_config.device, say=say)
    except KamalError as error:
        if encoder != DEFAULT_ENCODER or options.confidence_score != "auto":
            raise
        say(f"score=auto: no prototype score ({error}); teachers are selected by RMD alone.")
        return outputs
    confidence = {**outputs.confidence, **confidence_columns(scores, outputs.confidence.get("rmd"))}
    say(f"Prototype score: {encoder}'s sentence vectors of {request.rmd_fit}'s rows, one prototype per label.")
    return replace(outputs, confidence=confidence)


def _feature_context(method, outputs, model, teachers, dataset, runner, texts, encoded, gold, train_config, device,
                     workdir, say):
    """What a feature-level method gets: the student's shape, teacher features (cached or in the loop), labels,
    and earlier training phases of the same run."""
    from kamalcli.features import FeatureSources
    from kamalcli.methods import FeatureContext
    from kamalcli.train.phases import Phases

    sources = FeatureSources(list(teachers), dataset, runner, texts, encoded, train_config.max_length, device, say)
    labels = label_indices(gold, outputs.space.names) if gold is not None and method.labels != "no" else None
    config = model.config
    return FeatureContext(outputs, sources, config.num_hidden_layers, config.hidden_size, labels,
                          train_config.seed, train_config.batch_size, say, Phases(workdir, train_config, say))


def _other_probes(store, teacher, dataset) -> str:
    others = {(p.options.get("mc_samples"), p.options.get("max_length"))
              for p in store.probes(teacher_id=teacher.id, dataset_id=dataset.id) if (Path(p.path) / "meta.json").is_file()}
    if not others:
        return ""
    listed = "; ".join(f"K={k}, max length {n}" for k, n in sorted(others))
    return f"; its other cached probes ({listed}) are not used (--reprobe)"


def reads_confidences(method, options) -> bool:
    """Whether the method reads the teachers' probe confidences (MC dropout, RMD) with these options."""
    return method.confidences or getattr(options, "confidence_score", None) is not None


def _auto_fits_generated_text(request: AmalgamateRequest, options, teachers) -> bool:
    from kamalcli.methods.output_level import PROTOTYPE_SCORES

    score = getattr(options, "confidence_score", None)
    if request.rmd_fit is not None:
        return False
    # teachers kamal trained have their training rows, the better RMD fit (86.7% against 81.8% selection, measured)
    return score in PROTOTYPE_SCORES or (score == "auto" and not _trained_here(teachers))


def _trained_here(teachers) -> bool:
    """Every teacher came from `kamal train-teacher`: its training rows are in the workspace."""
    return all(t.train_dataset_id is not None for t in teachers)


def generated_rmd_fit(store, teachers):
    """The newest dataset kamal synthesize wrote with every one of these teachers (by fingerprint), or None.

    Its rows are labelled with the class they were steered to, so each teacher's RMD Gaussians can be fitted on
    text written for its own classes: independent of which transfer rows the teacher is confident on.
    """
    wanted = {t.fingerprint for t in teachers}
    for dataset in sorted(store.datasets(), key=lambda d: d.id, reverse=True):
        steered = {t.get("fingerprint") for t in (dataset.provenance or {}).get("teachers", [])}
        if is_generated(dataset) and dataset.has_labels and wanted <= steered:
            return dataset
    return None


def options_need_rmd(options, teachers=(), rmd_fit: str | None = None) -> bool:
    """score=rmd needs RMD; score=auto uses it only when every fit can be independent of the teachers' own picks."""
    score = getattr(options, "confidence_score", None)
    if score == "auto":
        return bool(teachers) and (rmd_fit is not None or _trained_here(teachers))
    return score in ("rmd", "rmd+prototype")


def _student_model(store, request: AmalgamateRequest, space: LabelSpace, seed: int, task: str = "sequence"):
    from kamalcli.assets import resolve_model_source
    from kamalcli.modeling import build_student, grow_classifier, labels_of, load_classifier, load_tokenizer

    if request.parent:
        parent = store.student(request.parent)
        folder = Path(parent.path)
        old = labels_of(folder)
        if list(space.names[: len(old)]) != old:
            raise KamalError(f"internal: the label space does not start with {parent.name}'s labels")
        model = grow_classifier(load_classifier(folder), list(space.names[len(old):]), seed=seed)
        return model, load_tokenizer(folder), folder
    base = resolve_model_source(request.student)
    model = build_student(base, list(space.names), num_layers=request.student_layers, seed=seed, task=task)
    return model, load_tokenizer(base), base


def resume(workspace, store, name: str, *, say=print):
    """Continue an interrupted (or failed) amalgamate/extend run of that name from its checkpoint."""
    from kamalcli.runs import resumable_run

    if store.find_student(name) is not None:
        raise KamalError(f"student {name!r} already finished; nothing to resume")
    run, params = resumable_run(store, ("amalgamate", "extend"), name)
    if run is None:
        raise KamalError(f"no interrupted run named {name!r} with a checkpoint (see `kamal runs`)")
    params.setdefault("probe", {}).setdefault("mc_exact", True)  # runs recorded before the adaptive probe used the exact one
    request = AmalgamateRequest(**params)
    say(f"Resuming {name} from run {run.id}'s checkpoint.")
    return amalgamate(workspace, store, request, say=say, resume_run=run)
