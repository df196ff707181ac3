"""What training a student needs, built the same on every process: the teachers' outputs (from the probe
cache, probed first if missing), the student model, the encoded rows, the method's objective and model selection."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.labels import LabelSpace
from kamalcli.probe.outputs import teacher_outputs
from kamalcli.probe.runner import generated_fit_line
from kamalcli.recipe.recipe import pick_smooth_line, starved_line
from kamalcli.students.plan import AmalgamateRequest, Job, check_task, options_need_rmd, reads_confidences


@dataclass
class Problem:
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
    heads: list | None = None  # a student of several tasks (kamalcli/students/multi_head.py); outputs is then None

    @property
    def labels(self) -> list[str]:
        """The student's columns, as its id2label names them."""
        from kamalcli.heads import column_names

        return column_names(self.heads) if self.heads else list(self.outputs.space.names)


def build_problem(workspace, store, job: Job, probe_request, workdir, run_id, say, read_only: bool = False) -> Problem:
    """job: the checked request, with its recipe (kamalcli/students/plan.py)."""
    from kamalcli.heads import several_heads

    if job.task == "token":
        build = token_problem
    else:
        build = heads_problem if several_heads(job.teachers) else sequence_problem
    return build(workspace, store, job, probe_request, workdir, run_id, say, read_only)


def sequence_problem(workspace, store, job: Job, probe_request, workdir, run_id, say, read_only: bool = False) -> Problem:
    """1. the teachers' outputs (probed first if missing), 2. the student, its objective and model selection."""
    from kamalcli.models.batching import encode
    from kamalcli.data.text import load_dataset_rows
    from kamalcli.train.evaluate import EvalAccuracy, HeldOutLoss
    from kamalcli.train.objective import with_gold

    request, method, options, teachers, dataset, train_config = (job.request, job.method, job.training_options,
                                                                 list(job.teachers), job.dataset, job.train)
    device = train_config.device
    outputs, probes, runner = _probed_outputs(workspace, store, job, probe_request, run_id, say, read_only)

    # 2. the student, over the union label space (an extended student keeps its old label ids)
    model, tokenizer, base_folder = _student_model(store, request, outputs.space, train_config.seed,
                                                   teachers=teachers, say=say)
    texts, gold = load_dataset_rows(dataset)
    encoded = encode(tokenizer, texts, train_config.max_length, config=model.config)
    train_rows, held_out = _split_rows(request.select_by, len(texts), train_config.seed)
    if method.level == "feature":
        context = _feature_context(method, outputs, model, teachers, dataset, runner, texts, encoded, gold,
                                   train_config, device, workdir, say)
        context = replace(context, student=model, base=str(base_folder), train_rows=train_rows, held_out=held_out)
        objective = method.build(context, options)
    else:
        objective = method.build(outputs, options)
    if "pick_smooth" in objective.info:
        say(pick_smooth_line(options.pick_smooth, objective.info["pick_smooth"], dataset.name, options.encoder))
    if "starved" in objective.info:
        say(starved_line(objective.info["starved"], dataset.name))
    if request.gold:
        gold_rows = gold_on_transfer_rows(store, request.gold, texts, outputs.space, say)
        objective = with_gold(_gold_target(workspace, method, options, objective, outputs, dataset, train_config,
                                           gold_rows, say), gold_rows)
        train_rows, held_out = _gold_rows_train(train_rows, held_out, gold_rows)
    selector = None
    if request.select_by == "transfer-loss" and len(held_out):
        selector = HeldOutLoss(objective, encoded, held_out, device)
    elif request.select_by.startswith("eval:"):
        eval_set = store.dataset(request.select_by.split(":", 1)[1])
        eval_texts, gold = load_dataset_rows(eval_set)
        selector = EvalAccuracy(eval_set.name, encode(tokenizer, eval_texts, train_config.max_length, config=model.config),
                                outputs.space.indices(gold), device)
        say(f"Model selection uses the labels of {eval_set.name} (recorded with the student).")
    return Problem(model, tokenizer, base_folder, outputs, probes, encoded, objective, selector, train_rows, held_out)


def heads_problem(workspace, store, job, probe_request, workdir, run_id, say, read_only: bool = False):
    """A student of several tasks (kamalcli/students/multi_head.py): 1. each task's teachers' outputs and objective,
    2. the student over every task's labels, 3. one objective."""
    from kamalcli.data.text import load_dataset_rows
    from kamalcli.models.bases import resolve_model_source
    from kamalcli.models.batching import encode
    from kamalcli.models.loading import build_student, load_tokenizer
    from kamalcli.heads import KEY, Head, column_names, laid_out
    from kamalcli.students.multi_head import combined_objective, task_jobs, task_name
    from kamalcli.train.evaluate import HeldOutLoss

    heads, objectives, probes = [], [], {}
    for sub in task_jobs(job):
        outputs, task_probes, _ = _probed_outputs(workspace, store, sub, probe_request, run_id, say, read_only)
        objectives.append(sub.method.build(outputs, sub.training_options))
        heads.append(Head(task_name(sub), tuple(outputs.space.names), sub.teachers[0].multi_label))
        probes.update({t.id: p for t, p in zip(sub.teachers, task_probes)})
    heads = laid_out(heads)
    request, train_config = job.request, job.train
    if request.parent:
        model, tokenizer, base = _heads_from_parent(store, request.parent, heads, train_config.seed)
    else:
        base = resolve_model_source(request.student)
        model = build_student(base, column_names(heads), num_layers=request.student_layers, seed=train_config.seed)
        tokenizer = load_tokenizer(base)
    model.config.update({KEY: [h.as_json() for h in heads]})
    texts, _ = load_dataset_rows(job.dataset)
    encoded = encode(tokenizer, texts, train_config.max_length, config=model.config)
    train_rows, held_out = _split_rows(request.select_by, len(texts), train_config.seed)
    objective = combined_objective(objectives, heads)
    selector = HeldOutLoss(objective, encoded, held_out, train_config.device) if len(held_out) else None
    return Problem(model, tokenizer, base, None, [probes[t.id] for t in job.teachers], encoded, objective, selector,
                   train_rows, held_out, heads=heads)


def student_heads(store, student) -> list:
    """A student's heads; a one-task student's one head named by the task its teachers answer (kamal extend
    matches its columns with the new teachers' tasks by it)."""
    from kamalcli.heads import heads_of_student, is_plain

    heads = heads_of_student(student)
    if not is_plain(heads):
        return heads
    known = [store.find_teacher(name=t["name"]) for t in student.teachers]
    tasks = {t.head_name for t in known if t is not None}
    return [replace(heads[0], name=tasks.pop())] if len(tasks) == 1 else heads


def _heads_from_parent(store, parent_name: str, heads, seed: int):
    """kamal extend into (or out of) several tasks: the parent's weights, its classifier laid out as `heads`, each
    (task, label) column the parent had keeping its row, a new one drawn as a new student's would be."""
    from kamalcli.heads import column_names
    from kamalcli.models.loading import load_classifier, load_tokenizer, rearrange_classifier

    parent = store.student(parent_name)
    folder = Path(parent.path)
    old = {(h.name, label): h.start + i for h in student_heads(store, parent) for i, label in enumerate(h.labels)}
    new = [(h.name, label) for h in heads for label in h.labels]
    lost = [f"{task}/{label}" for task, label in old if (task, label) not in new]
    if lost:
        raise KamalError(f"{parent.name} was trained over classes this workspace has since merged or moved "
                         f"({', '.join(lost[:5])}): `kamal labels split` them to extend it, or amalgamate a new student")
    model = rearrange_classifier(load_classifier(folder), [old.get(key) for key in new], column_names(heads), seed=seed)
    return model, load_tokenizer(folder), folder


def token_problem(workspace, store, job: Job, probe_request, workdir, run_id, say, read_only: bool = False) -> Problem:
    """The token-level problem (named entities): per-word teacher outputs, a token-classifier student,
    targets per word read at the student's first sub-token of each word (kamalcli/methods/muki.py, vanilla_kd.py, uhc.py)."""
    from kamalcli.probe import tokens as token_probe
    from kamalcli.data.tokens import load_token_rows
    from kamalcli.models.words import encode_words
    from kamalcli.train.evaluate import HeldOutLoss

    request, method, options, teachers, dataset, train_config = (job.request, job.method, job.training_options,
                                                                 list(job.teachers), job.dataset, job.train)

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
    train_rows, held_out = _split_rows(request.select_by, len(sentences), train_config.seed)
    selector = None
    if request.select_by == "transfer-loss" and len(held_out):
        selector = HeldOutLoss(objective, aligned.encoded, held_out, train_config.device)
    elif request.select_by.startswith("eval:"):
        from kamalcli.data.entities import EntityF1Selector

        eval_set = store.dataset(request.select_by.split(":", 1)[1])
        check_task(eval_set, "token", "--select-by")
        selector = EntityF1Selector(eval_set, tokenizer, list(outputs.space.names), train_config.max_length,
                                    train_config.device, outputs.space.aliases)
        say(f"Model selection uses the tags of {eval_set.name} (entity F1; recorded with the student).")
    return Problem(model, tokenizer, base_folder, outputs, probes, aligned.encoded, objective, selector, train_rows,
                   held_out)


def gold_on_transfer_rows(store, gold_name: str, texts: list[str], space, say) -> np.ndarray:
    """amalgamate --gold: each transfer row's gold label index (-1: none), from a labelled dataset whose texts
    are rows of the transfer data (as kamal label-queue writes them), matched by text."""
    from kamalcli.data.text import load_labelled_rows

    gold_texts, labels = load_labelled_rows(store.dataset(gold_name))
    index = space.indices(labels)
    by_text: dict[str, list[int]] = {}
    for row, text in enumerate(texts):
        by_text.setdefault(text, []).append(row)
    gold = np.full(len(texts), -1, dtype=np.int64)
    missing = 0
    for text, label in zip(gold_texts, index):
        rows = by_text.get(text)
        if rows is None:
            missing += 1
            continue
        gold[rows] = label
    if missing == len(gold_texts):
        raise KamalError(f"no text of {gold_name} is a row of the transfer data: label rows of it "
                         "(kamal label-queue --data NAME writes them)")
    say(f"Gold labels of {gold_name}: {len(gold_texts) - missing} transfer rows learn their label beside the method's "
        "loss" + (f"; {missing} rows are not in the transfer data and are not used." if missing else "."))
    return gold


def _gold_target(workspace, method, options, objective, outputs, dataset, train_config, gold: np.ndarray, say):
    """--gold: the target the gold rows predict best out of fold (kamalcli/methods/gold_target.py), where the
    method's loss matches one distribution over the union."""
    from kamalcli.methods.gold_target import choice_line, gold_target
    from kamalcli.methods.vanilla_kd import union_probs
    from kamalcli.probe.prototypes import DEFAULT_ENCODER

    if not method.gold_target:
        say(f"{method.name} learns no single target over the union: the gold rows add their cross-entropy alone.")
        return objective
    vectors = np.asarray(_sentence_vectors(workspace, getattr(options, "encoder", DEFAULT_ENCODER), dataset,
                                           train_config, say))
    chosen = gold_target(np.asarray(objective.arrays["target"], dtype=np.float64),
                         union_probs(outputs), outputs.prior, vectors, gold)
    say(choice_line(chosen.info))
    return replace(objective, arrays={**objective.arrays, "target": chosen.target.astype(np.float32)},
                   info={**objective.info, "gold_target": chosen.info})


def _gold_rows_train(train_rows: np.ndarray, held_out: np.ndarray, gold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows a user labelled are trained on, never held out for model selection."""
    labelled = gold >= 0
    return np.union1d(train_rows, np.flatnonzero(labelled)), held_out[~labelled[held_out]]


def _split_rows(select_by: str, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows to train on, held-out rows): the held-out slice exists only for label-free selection
    (select_by transfer-loss); eval:NAME selects on its own labelled data."""
    from kamalcli.train.evaluate import holdout_split

    if select_by == "transfer-loss":
        return holdout_split(rows, seed)
    return np.arange(rows), np.arange(0)


def _probed_outputs(workspace, store, job: Job, probe_request, run_id, say, read_only):
    """1. teachers' outputs on the transfer rows, from the probe cache."""
    from kamalcli.probe.runner import Runner

    request, method, options, teachers, dataset, train_config = (job.request, job.method, job.training_options,
                                                                 list(job.teachers), job.dataset, job.train)

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
    recipe = job.recipe
    refit, prior = recipe.evidence("refit"), recipe.evidence("prior")
    if refit and refit["teachers"] and "rmd" in outputs.confidence:
        from kamalcli.probe.transfer_refit import refitted_outputs

        outputs = refitted_outputs(store, probes, outputs, refit, say)
    fits = {}  # (fit dataset, gold) names -> PrototypeFit: the score and the prior read the sentence vectors once

    def prototypes(fit_name: str, say, gold: str | None = None):
        from kamalcli.probe.prototypes import fit_prototypes

        if (fit_name, gold) not in fits:
            fits[fit_name, gold] = fit_prototypes(workspace, teachers, dataset, store.dataset(fit_name),
                                                  encoder=options.encoder, max_length=train_config.max_length,
                                                  device=train_config.device, say=say,
                                                  canonical=store.label_aliases().canonical,
                                                  gold=store.dataset(gold) if gold else None)
        return fits[fit_name, gold]

    if reads_confidences(method, options) and _wants_prototypes(options, request, outputs):
        outputs = _with_prototype_score(request, options, outputs, prototypes, say)
    if prior and prior.get("data"):  # muki-hard's prior: the prototypes' class probabilities
        classes = prototypes(prior["data"], lambda _: None, prior.get("gold")).prior(list(outputs.space.names))
        within = prior.get("teachers")
        outputs = replace(outputs, prior=classes, prior_teachers=tuple(within) if within is not None else None)
    fit = fits.get((prior["data"], prior.get("gold"))) if prior and prior.get("data") else None
    outputs = _with_neighbours(workspace, recipe, method, options, outputs, dataset, train_config, say, fit)
    return outputs, probes, runner


def _with_neighbours(workspace, recipe, method, options, outputs, dataset, train_config, say, fit=None):
    """Each transfer row's nearest rows in the prototype encoder's sentence vectors (the prior's, fit, where it has
    them), found once for both of muki's uses: muki-hard's smooth (smooth=auto: as the recipe decided) and muki's
    pick_smooth (the recipe's rule, for auto, whether it averages over them; pick_smooth=auto goes on without
    them, saying so, when the encoder is not installed)."""
    from kamalcli.probe.neighbours import OWN_SHARE, nearest_rows

    k_smooth = getattr(options, "neighbours", 0)
    if k_smooth and options.smooth == "auto":
        k_smooth = recipe.value("smooth", 0)
    reads_pick = reads_confidences(method, options) and getattr(options, "committed", 1.0) > 0  # commit=0 does not
    k_pick = getattr(options, "pick_neighbours", 0) if reads_pick else 0
    if not (k_smooth or k_pick):
        return outputs
    try:
        vectors = fit.vectors if fit is not None else _sentence_vectors(workspace, options.encoder, dataset,
                                                                          train_config, say)
    except KamalError as error:
        if k_smooth or options.pick_smooth != "auto":
            raise
        say(f"pick_smooth=auto: none ({error}).")
        return outputs
    nearest = nearest_rows(vectors, max(k_smooth, k_pick))
    if k_smooth:
        if options.smooth != "auto":  # smooth=auto: the recipe's table says so
            say(f"smooth={options.smooth}: each row's target is {OWN_SHARE:.0%} its own and {1 - OWN_SHARE:.0%} the "
                f"mean of its {k_smooth} nearest rows of {dataset.name} in {options.encoder} (no labels; smooth=0 turns it "
                "off).")
        outputs = replace(outputs, neighbours=nearest[:, :k_smooth])
    return replace(outputs, pick_neighbours=nearest[:, :k_pick]) if k_pick else outputs


def _sentence_vectors(workspace, encoder: str, dataset, train_config, say):
    from kamalcli.data.text import load_dataset_rows
    from kamalcli.probe.encoder import sentence_vectors

    return sentence_vectors(workspace, encoder, load_dataset_rows(dataset)[0], dataset.content_hash,
                            train_config.max_length, train_config.device, say)


def cached_head_states(workspace, job: Job, say) -> np.ndarray | None:
    """With --fit head or head-then-all, the student's frozen encoder's first-token states of the transfer rows
    from the workspace's cache (one pass serves every such student of this base, pool and length), when that
    encoder is the base as installed; None when it is not (grown from a student, merged, cut to fewer layers)."""
    from kamalcli.data.text import load_dataset_rows
    from kamalcli.probe.encoder import head_states

    request = job.request
    if job.train.fit == "all" or job.task == "token" or request.parent or request.init or request.student_layers:
        return None
    return head_states(workspace, request.student, load_dataset_rows(job.dataset)[0], job.dataset.content_hash,
                       job.train.max_length, job.train.device, say)


def _wants_prototypes(options, request, outputs) -> bool:
    """An explicit prototype score, or score=auto with RMD fitted on labelled text (generated or --rmd-fit)."""
    from kamalcli.probe.scores import PROTOTYPE_SCORES

    score = getattr(options, "confidence_score", None)
    if score in PROTOTYPE_SCORES:
        return True
    return (score == "auto" and request.rmd_fit is not None and "rmd" in outputs.confidence
            and all(s == "labelled" for s in outputs.rmd_sources))


def _with_prototype_score(request, options, outputs, prototypes, say):
    """outputs with the prototype score and its fusion with RMD (kamalcli/probe/prototypes.py). score=auto
    with the default encoder goes on with RMD alone, saying so, when that encoder is not installed."""
    from kamalcli.probe.prototypes import DEFAULT_ENCODER, confidence_columns

    encoder = options.encoder
    try:
        scores = prototypes(request.rmd_fit, say).shares()
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
    from kamalcli.methods.features import FeatureSources
    from kamalcli.methods import FeatureContext
    from kamalcli.train.phases import Phases

    sources = FeatureSources(list(teachers), dataset, runner, texts, encoded, train_config.max_length, device, say)
    labels = outputs.space.indices(gold) if gold is not None and method.labels != "no" else None
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


def _student_model(store, request: AmalgamateRequest, space: LabelSpace, seed: int, task: str = "sequence",
                   teachers=(), say=print):
    from kamalcli.models.bases import resolve_model_source
    from kamalcli.models.loading import build_student, grow_classifier, labels_of, load_classifier, load_tokenizer

    if request.parent:
        parent = store.student(request.parent)
        folder = Path(parent.path)
        old = labels_of(folder)
        if list(space.names[: len(old)]) != old:
            renamed = [f"{a} is now {b}" for a, b in zip(old, space.names) if a != b]
            raise KamalError(f"{parent.name} was trained over classes this workspace has since merged "
                             f"({', '.join(renamed) or 'its labels changed'}): `kamal labels split` them to extend it, "
                             "or amalgamate a new student")
        model = grow_classifier(load_classifier(folder), list(space.names[len(old):]), seed=seed)
        return model, load_tokenizer(folder), folder
    base = resolve_model_source(request.student)
    model = build_student(base, list(space.names), num_layers=request.student_layers, seed=seed, task=task)
    if request.init:
        _start_from_merge(model, request, teachers, say)
    return model, load_tokenizer(base), base


def _start_from_merge(model, request: AmalgamateRequest, teachers, say) -> None:
    """--init merge[:METHOD]: the student's encoder is the teachers' encoders merged from the student's base, which
    has to be the base they were fine-tuned from."""
    from kamalcli.merge.merged import load_merged, merge_method, merge_teachers

    merge = merge_teachers(teachers, request.student, merge_method(request.init))
    for line in merge.warnings:
        say(line)
    load_merged(model, merge)
    say(f"The student starts from the teachers' encoders merged from {request.student} ({merge.info['method']}).")
