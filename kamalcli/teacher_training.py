"""kamal train-teacher: fine-tune a classifier on the labelled rows of some labels, register it.

Users with private labelled data make teachers this way; the demo and the
benchmarks do too. The same training loop as amalgamation, with cross-entropy
on gold labels; a held-out slice of those rows picks the best step.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.methods.base import Objective

HOLDOUT_SHARE = 0.05


@dataclass
class TeacherRequest:
    data: str
    labels: list[str]
    name: str
    base: str = "minilm-l6"
    base_layers: int | None = None
    train: dict = field(default_factory=dict)
    device: str = "auto"

    def as_json(self) -> dict:
        return asdict(self)


def supervised_objective(label_ids: np.ndarray) -> Objective:
    def loss(logits, batch):
        from kamalcli.methods.losses import cross_entropy

        return cross_entropy(logits, batch["label"])

    return Objective({"label": np.asarray(label_ids, dtype=np.int64)}, loss)


def train_teacher(workspace, store, request: TeacherRequest, *, say=print, resume_run=None, on_step=None):
    from kamalcli.assets import resolve_model_source
    from kamalcli.batching import encode
    from kamalcli.data import load_dataset_rows
    from kamalcli.fsutil import publish_dir
    from kamalcli.modeling import build_student, load_tokenizer, save_classifier
    from kamalcli.names import check_name
    from kamalcli.runs import recorded_run
    from kamalcli.runtime import resolve_device
    from kamalcli.teachers import register_teacher
    from kamalcli.train.evaluate import HeldOutLoss, predict_logits
    from kamalcli.train.loop import StopRequested, TrainConfig, train

    check_name(request.name, "teacher")
    if store.find_teacher(name=request.name) is not None:
        raise KamalError(f"a teacher named {request.name!r} exists already; choose another --name")
    dataset = store.dataset(request.data)
    if not dataset.has_labels:
        raise KamalError(f"dataset {dataset.name} has no labels to train on (add it with --label-column)")
    if len(request.labels) < 2:
        raise KamalError("a teacher needs at least two labels (--labels a,b)")
    missing = [label for label in request.labels if label not in dataset.label_counts]
    if missing:
        raise KamalError(f"{dataset.name} has no rows labelled {', '.join(missing)} (labels: {', '.join(sorted(dataset.label_counts))})")
    config = TrainConfig(**request.train)
    config.validate()
    base = resolve_model_source(request.base)

    texts, gold = load_dataset_rows(dataset)
    index = {label: i for i, label in enumerate(request.labels)}
    keep = np.array([g in index for g in gold])
    texts = [t for t, k in zip(texts, keep) if k]
    label_ids = np.array([index[g] for g, k in zip(gold, keep) if k])

    params = request.as_json()
    if resume_run:
        params["resumed_from"] = resume_run.id
    with recorded_run(store, "train-teacher", request.name, params) as run:
        workdir = Path(resume_run.workdir) if resume_run else workspace.artifact_dir("runs") / f"run-{run.id}"
        store.update_run(run.id, workdir=str(workdir))
        device = resolve_device(request.device)
        config = replace(config, device=device)
        model = build_student(base, request.labels, num_layers=request.base_layers, seed=config.seed)
        tokenizer = load_tokenizer(base)
        encoded = encode(tokenizer, texts, config.max_length)
        order = np.random.default_rng(config.seed).permutation(len(texts))
        size = max(1, round(HOLDOUT_SHARE * len(texts))) if len(texts) >= 40 else 0
        held_out, train_rows = np.sort(order[:size]), np.sort(order[size:])
        objective = supervised_objective(label_ids)
        selector = HeldOutLoss(objective, encoded, held_out, device) if size else None
        try:
            result = train(model, encoded, objective, config, workdir, rows=train_rows,
                           selector=selector, resume=resume_run is not None, on_step=on_step,
                           description=f"train-teacher {request.name}")
        except StopRequested:
            say(f"Stopped: a checkpoint was saved. Continue with `kamal train-teacher --resume {request.name}`.")
            raise
        accuracy = None
        if size:
            pred = predict_logits(model, encoded, device=device, rows=held_out).argmax(axis=1)
            accuracy = float((pred == label_ids[held_out]).mean())
        staging = workspace.tmp_dir() / "teacher"
        save_classifier(model, tokenizer, staging, extra={
            "name": request.name, "labels": request.labels, "base": request.base, "data": dataset.name,
            "rows": int(len(texts)), "train": config.as_json(), "held_out_accuracy": accuracy,
        })
        final = workspace.artifact_dir("teachers") / request.name
        if final.exists():
            raise KamalError(f"{final} exists already (a teacher of that name was removed?); move it away first")
        publish_dir(staging, final)
        teacher, notes = register_teacher(workspace, store, str(final), name=request.name, labels=None,
                                          origin="trained", train_dataset_id=dataset.id)
        for message in notes:
            say(message)
        run.result = {"teacher": teacher.name, "path": str(final), "rows": int(len(texts)), "steps": result.steps,
                      "seconds": result.seconds, "examples_per_second": result.examples_per_second,
                      "held_out_accuracy": accuracy, "held_out_loss": result.best_metric, "held_out_rows": int(size)}
    shutil.rmtree(workdir, ignore_errors=True)  # checkpoints matter only to an unfinished run
    return teacher, run.result


def resume_teacher(workspace, store, name: str, *, say=print, on_step=None):
    from kamalcli.train import checkpoint

    if store.find_teacher(name=name) is not None:
        raise KamalError(f"teacher {name!r} already exists; nothing to resume")
    candidates = [r for r in store.runs(kind="train-teacher", name=name)
                  if r.status in ("interrupted", "failed") and r.workdir and checkpoint.exists(Path(r.workdir))]
    if not candidates:
        raise KamalError(f"no interrupted train-teacher run named {name!r} with a checkpoint (see `kamal runs`)")
    run = candidates[-1]
    request = TeacherRequest(**{k: v for k, v in run.params.items() if k != "resumed_from"})
    say(f"Resuming teacher {name} from run {run.id}'s checkpoint.")
    return train_teacher(workspace, store, request, say=say, resume_run=run, on_step=on_step)
