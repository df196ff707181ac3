"""kamal train-teacher: fine-tune a classifier on the labelled rows of some labels, register it.

Users with private labelled data make teachers this way; the demo and the
benchmarks do too. The same training loop as amalgamation, with cross-entropy
on gold labels; a held-out slice of those rows picks the best step.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.settings import TRAIN, WORKSPACE
from kamalcli.train.objective import Objective


@dataclass
class TeacherRequest:
    data: str
    labels: list[str]
    name: str
    base: str = TRAIN.student
    base_layers: int | None = None
    train: dict = field(default_factory=dict)
    device: str = WORKSPACE.device

    def as_json(self) -> dict:
        return asdict(self)


def supervised_objective(label_ids: np.ndarray) -> Objective:
    def loss(logits, batch):
        from kamalcli.methods.losses import cross_entropy

        return cross_entropy(logits, batch["label"])

    return Objective({"label": np.asarray(label_ids, dtype=np.int64)}, loss)


@dataclass
class _TeacherProblem:
    """The rows, the model and the objective; every process of a torchrun job builds the same one."""

    model: object
    tokenizer: object
    texts: list[str]
    label_ids: np.ndarray
    encoded: object
    objective: Objective
    train_rows: np.ndarray
    held_out: np.ndarray

    @classmethod
    def build(cls, request: TeacherRequest, dataset, config) -> "_TeacherProblem":
        if dataset.task == "token":
            return cls.build_token(request, dataset, config)
        from kamalcli.models.bases import resolve_model_source
        from kamalcli.models.batching import encode
        from kamalcli.data.text import load_dataset_rows
        from kamalcli.models.loading import build_student, load_tokenizer
        from kamalcli.train.evaluate import holdout_split

        base = resolve_model_source(request.base)
        texts, gold = load_dataset_rows(dataset)
        index = {label: i for i, label in enumerate(request.labels)}
        keep = np.array([g in index for g in gold])
        texts = [t for t, k in zip(texts, keep) if k]
        label_ids = np.array([index[g] for g, k in zip(gold, keep) if k])
        model = build_student(base, request.labels, num_layers=request.base_layers, seed=config.seed)
        tokenizer = load_tokenizer(base)
        encoded = encode(tokenizer, texts, config.max_length, config=model.config)
        train_rows, held_out = holdout_split(len(texts), config.seed, max_rows=None)
        return cls(model, tokenizer, texts, label_ids, encoded, supervised_objective(label_ids), train_rows, held_out)

    @classmethod
    def build_token(cls, request: TeacherRequest, dataset, config) -> "_TeacherProblem":
        """A token classifier over O and B-/I- tags of the entity types in request.labels; the data's other
        entity types become O (the teacher's annotators knew only its types). texts holds the sentences."""
        from kamalcli.models.bases import resolve_model_source
        from kamalcli.models.loading import build_student, load_tokenizer
        from kamalcli.data.tokens import load_token_rows
        from kamalcli.methods.losses import word_cross_entropy
        from kamalcli.models.words import encode_words, max_words
        from kamalcli.train.evaluate import holdout_split

        base = resolve_model_source(request.base)
        sentences, gold = load_token_rows(dataset)
        names = token_tag_names(request.labels)
        index = {name: i for i, name in enumerate(names)}
        width = max_words(sentences)
        tags = np.full((len(sentences), width), -1, dtype=np.int64)
        for i, row in enumerate(gold):
            tags[i, : len(row)] = [index.get(t, 0) for t in row]  # other types -> O (id 0)
        model = build_student(base, names, num_layers=request.base_layers, seed=config.seed, task="token")
        tokenizer = load_tokenizer(base)
        aligned = encode_words(tokenizer, sentences, config.max_length, config=model.config)
        objective = Objective({"tags": tags, "positions": aligned.positions(width)}, word_cross_entropy)
        train_rows, held_out = holdout_split(len(sentences), config.seed, max_rows=None)
        return cls(model, tokenizer, sentences, tags, aligned.encoded, objective, train_rows, held_out)


def token_tag_names(types: list[str]) -> list[str]:
    """O, then B- and I- of each entity type."""
    return ["O"] + [f"{prefix}-{kind}" for kind in types for prefix in ("B", "I")]


@dataclass(frozen=True)
class TeacherOnRank:
    """A non-zero rank's part of train-teacher (kamalcli/distributed.py): the same problem, trained beside rank 0."""

    request: TeacherRequest
    dataset: object
    config: object
    workdir: str
    resume: bool

    def run(self, world) -> None:
        from pathlib import Path

        from kamalcli.runtime import resolve_device
        from kamalcli.train.loop import train

        config = replace(self.config, device=resolve_device(self.request.device))
        problem = _TeacherProblem.build(self.request, self.dataset, config)
        train(problem.model, problem.encoded, problem.objective, config, Path(self.workdir),
              rows=problem.train_rows, resume=self.resume, world=world)


def _checked_dataset(store, request: TeacherRequest):
    """The dataset to train on, once the teacher's name is free and the data holds the labels asked for."""
    from kamalcli.names import check_name

    check_name(request.name, "teacher")
    if store.find_teacher(name=request.name) is not None:
        raise KamalError(f"a teacher named {request.name!r} exists already; choose another --name")
    dataset = store.dataset(request.data)
    dataset.refuse_test(f"kamal train-teacher {dataset.name}")
    if not dataset.has_labels:
        raise KamalError(f"dataset {dataset.name} has no labels to train on (add it with --label-column)")
    token = dataset.task == "token"
    if len(request.labels) < (1 if token else 2):
        raise KamalError("a teacher needs at least two labels (--labels a,b)")
    known = {t[2:] for t in dataset.label_counts if t != "O"} if token else dataset.label_counts
    missing = [label for label in request.labels if label not in known]
    if token and missing:
        raise KamalError(f"{dataset.name} tags no entities of type {', '.join(missing)} (--labels takes entity "
                         f"types: {', '.join(sorted(known))})")
    if missing:
        raise KamalError(f"{dataset.name} has no rows labelled {', '.join(missing)} (labels: {', '.join(sorted(dataset.label_counts))})")
    return dataset


def _train_problem(request: TeacherRequest, dataset, config, workdir, resume: bool, device: str):
    """The problem built and trained, the held-out loss selecting the step (the other ranks train beside
    this one under distributed); returns (problem, TrainResult)."""
    from kamalcli import distributed
    from kamalcli.train.evaluate import HeldOutLoss
    from kamalcli.train.loop import train

    problem = _TeacherProblem.build(request, dataset, config)
    encoded, held_out = problem.encoded, problem.held_out
    selector = HeldOutLoss(problem.objective, encoded, held_out, device) if len(held_out) else None
    world = distributed.current()
    if world.distributed:
        world.dispatch(TeacherOnRank(request, dataset, config, str(workdir), resume))
    result = train(problem.model, encoded, problem.objective, config, workdir, rows=problem.train_rows,
                   selector=selector, resume=resume, description=f"train-teacher {request.name}",
                   world=world)
    return problem, result


def _held_out_score(problem: _TeacherProblem, config, device: str, token: bool) -> dict:
    """Entity F1 (a token teacher), or accuracy with its 95% Wilson interval, on the held-out rows
    (None without any), and how many rows those are."""
    from kamalcli.models.inference import predict_logits
    from kamalcli.probs import wilson_interval

    model, label_ids, held_out = problem.model, problem.label_ids, problem.held_out
    size = len(held_out)
    score: dict = {"held_out_rows": int(size)}
    if token:
        return {**score, "held_out_entity_f1": _held_out_entity_f1(
            model, problem.tokenizer, problem.texts, label_ids, held_out, config.max_length, device) if size else None}
    if not size:
        return {**score, "held_out_accuracy": None}
    pred = predict_logits(model, problem.encoded, device=device, rows=held_out).argmax(axis=1)
    correct = int((pred == label_ids[held_out]).sum())
    return {**score, "held_out_accuracy": correct / size,
            "held_out_accuracy_interval": list(wilson_interval(correct, size))}


def folder_record(request: TeacherRequest, problem: _TeacherProblem, config, score: dict) -> dict:
    """The teacher folder's kamal.json, which travels with the folder when it is handed on: its labels, base,
    training settings, row count and held-out figures. Nothing that names the trainer's own data or disk
    (dataset name, paths, content hashes): the workspace's database holds the link to the training data."""
    return {"name": request.name, "labels": request.labels, "base": base_for_folder(request.base),
            "rows": int(len(problem.texts)), "train": config.as_json(), **score}


def base_for_folder(base: str) -> str:
    """A named base or hub id as it is; a local folder by its name only (the folder may be handed on)."""
    if os.sep in base and Path(base).expanduser().exists():
        return f"{Path(base).name} (a local folder)"
    return base


def teacher_folder(workspace, store, name: str) -> Path:
    """Where train-teacher saves teacher NAME: the workspace's teachers/NAME, refused (before training) when
    another teacher reads that folder. One no teacher reads is a removed teacher's, which the new one replaces."""
    from kamalcli.teachers.register import teacher_reading

    final = workspace.artifact_dir("teachers") / name
    reader = teacher_reading(store, final)
    if reader is not None:
        raise KamalError(f"{final} is the folder of teacher {reader.name}; choose another --name")
    return final


def _publish_teacher(workspace, store, request: TeacherRequest, dataset, problem: _TeacherProblem, config,
                     score: dict, say):
    """The trained model saved into the workspace's teachers and registered; returns (teacher, folder).
    Refused (nothing left in the workspace's teachers) when a teacher holds the very same weights."""
    from kamalcli.files import publish_dir
    from kamalcli.models.folder import weights_fingerprint
    from kamalcli.models.loading import save_classifier
    from kamalcli.teachers.register import register_teacher

    staging = workspace.tmp_dir() / "teacher"
    try:
        save_classifier(problem.model, problem.tokenizer, staging, extra=folder_record(request, problem, config, score))
        twin = store.find_teacher(fingerprint=weights_fingerprint(staging))
        if twin is not None:
            raise KamalError(f"the trained weights are identical to those of teacher {twin.name!r} (the same rows, "
                             f"labels, base and settings): use {twin.name}, or train with another --seed")
        final = teacher_folder(workspace, store, request.name)
        if final.exists():  # left by a removed teacher of this name (an older kamal's remove-teacher kept it)
            shutil.rmtree(final)
            say(f"Replaced {final}, the folder of a teacher {request.name} removed earlier.")
        publish_dir(staging, final)
    finally:
        shutil.rmtree(staging.parent, ignore_errors=True)
    try:
        teacher, notes = register_teacher(workspace, store, str(final), name=request.name, labels=None,
                                          origin="trained", train_dataset_id=dataset.id)
    except BaseException:  # a folder no teacher row points at would block the next try under this name
        shutil.rmtree(final, ignore_errors=True)
        raise
    for message in notes:
        say(message)
    return teacher, final


def train_teacher(workspace, store, request: TeacherRequest, *, say=print, resume_run=None):
    from kamalcli.models.bases import resolve_model_source
    from kamalcli.workspace.runs import training_run
    from kamalcli.runtime import resolve_device
    from kamalcli.train.loop import TrainConfig

    dataset = _checked_dataset(store, request)
    teacher_folder(workspace, store, request.name)
    store.claim("teacher", request.name, exclusive=True)
    store.claim_inputs(datasets=[dataset])
    token = dataset.task == "token"
    config = TrainConfig(**request.train)
    config.validate()
    resolve_model_source(request.base)

    with training_run(workspace, store, "train-teacher", request.name, request.as_json(), resume_run=resume_run,
                      resume_hint=f"kamal train-teacher --resume {request.name}", say=say) as (run, workdir):
        device = resolve_device(request.device)
        config = replace(config, device=device)
        problem, result = _train_problem(request, dataset, config, workdir, resume_run is not None, device)
        score = _held_out_score(problem, config, device, token)
        teacher, final = _publish_teacher(workspace, store, request, dataset, problem, config, score, say)
        run.result = {"teacher": teacher.name, "path": str(final), "rows": int(len(problem.texts)),
                      "steps": result.steps, "seconds": result.seconds,
                      "examples_per_second": result.examples_per_second, **score,
                      "held_out_loss": result.best_metric, "embeddings": result.embeddings}
    return teacher, run.result


def _held_out_entity_f1(model, tokenizer, sentences, tags, rows, max_length: int, device: str) -> float:
    from kamalcli.data.entities import entity_scores, student_tags

    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    chosen = [sentences[i] for i in rows]
    gold = [[names[t] for t in tags[i, : len(sentences[i])]] for i in rows]
    return entity_scores(gold, student_tags(model, tokenizer, chosen, names, max_length, device))["entity_f1"]


def resume_teacher(workspace, store, name: str, *, say=print):
    from kamalcli.train.phases import started
    from kamalcli.workspace.runs import resumable_run

    if store.find_teacher(name=name) is not None:
        raise KamalError(f"teacher {name!r} already exists; nothing to resume")
    run, params = resumable_run(store, ("train-teacher",), name, has_progress=started)
    if run is None:
        raise KamalError(f"no interrupted train-teacher run named {name!r} with a checkpoint (see `kamal runs`)")
    request = TeacherRequest(**params)
    say(f"Resuming teacher {name} from run {run.id}'s checkpoint.")
    return train_teacher(workspace, store, request, say=say, resume_run=run)
