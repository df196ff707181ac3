"""kamal eval: a student, or a no-training baseline, on a labelled dataset: accuracy, macro-F1, per-class F1 and
the confusion matrix for text classifiers; entity-level P/R/F1 (kamalcli/data/entities.py) for token models."""

from __future__ import annotations

import numpy as np

from kamalcli.data.text import load_labelled_rows
from kamalcli.errors import KamalError
from kamalcli.probe.teacher_weights import refresh_teachers
from kamalcli.labels import label_indices
from kamalcli.train.metrics import classification_metrics, multi_label_metrics, subset_accuracy


def evaluate_student(store, student, dataset, *, device: str = "auto", batch_size: int = 64,
                     task: str | None = None) -> dict:
    """task: which of a several-task student's tasks the data's labels are (default: the one they fit)."""
    from kamalcli.heads import heads_of_student, is_plain
    from kamalcli.students.predict import task_calibrations, task_scopes, text_outputs

    if student.task == "token":
        return evaluate_token_student(store, student, dataset, device=device)
    heads = heads_of_student(student)
    if task is not None and is_plain(heads):
        raise KamalError(f"{student.name} answers one task: drop --task")
    student.folder  # noqa: B018 - a folder gone from disk is refused before the data is read
    texts, gold = load_labelled_rows(dataset)
    scopes = task_scopes(student) if not is_plain(heads) else {}
    found = text_outputs(student, texts, device=device, batch_size=batch_size,
                         features=any(s.needs_features for s in scopes.values()))
    if not is_plain(heads):
        metrics = task_metrics(found.logits, gold, heads, task, dataset.name, task_calibrations(student), scopes,
                               found.features)
        metrics.update(_old_and_new_labels(store, student, heads, metrics, found.logits, gold))
        store.add_evaluation(student_id=student.id, dataset_id=dataset.id, metrics=metrics)
        return metrics
    pred = found.logits.argmax(axis=1)
    gold_idx = np.asarray(student.aliases.indices(gold, student.labels))  # the aliases it was trained with
    metrics = classification_metrics(pred, gold_idx, student.labels)
    metrics.update(trust_metrics(found, gold_idx))
    parent = store.find_student(student.parent) if student.parent else None
    if parent is not None:
        metrics.update(old_and_new_accuracy(pred, gold_idx, student.labels, parent.labels))
    store.add_evaluation(student_id=student.id, dataset_id=dataset.id, metrics=metrics)
    return metrics


def _old_and_new_labels(store, student, heads, metrics: dict, logits: np.ndarray, gold: list[str]) -> dict:
    """An extended student's old- and new-label accuracy within the single-label task measured: old, the labels
    its parent's head of that task had (none when the task is new)."""
    from kamalcli.heads import head_named
    from kamalcli.students.problem import student_heads

    parent = store.find_student(student.parent) if student.parent else None
    head = head_named(heads, metrics["task"])
    if parent is None or head.multi_label:
        return {}
    had = next((h.labels for h in student_heads(store, parent) if h.name == head.name), ())
    return old_and_new_accuracy(logits[:, head.columns].argmax(axis=1), label_indices(gold, head.labels),
                                head.labels, had)


def old_and_new_accuracy(pred: np.ndarray, gold_idx: np.ndarray, labels, had) -> dict:
    """Accuracy on the rows whose gold label is one the parent had, and on the others."""
    old = [i for i, label in enumerate(labels) if label in had]
    return {"old_label_accuracy": subset_accuracy(pred, gold_idx, old),
            "new_label_accuracy": subset_accuracy(pred, gold_idx, [i for i in range(len(labels)) if i not in old])}


def task_metrics(logits: np.ndarray, gold: list[str], heads, task: str | None, data_name: str,
                 calibrations: dict | None = None, scopes: dict | None = None, features: np.ndarray | None = None) -> dict:
    """A several-task student's figures on the task whose labels the gold labels are: accuracy and macro-F1 for a
    single-label task; micro- and macro-F1, subset accuracy and per-label F1 at THRESHOLD for a multi-label one.
    With the task's scope or calibration, what they say of these rows (trust_metrics on the task's columns)."""
    from kamalcli.heads import THRESHOLD, task_of_labels
    from kamalcli.students.predict import TextOutputs

    head = task_of_labels(heads, gold, data_name, task)
    if head.multi_label:
        truth, unknown = _label_matrix(gold, head.labels)
        metrics = multi_label_metrics(head.probabilities(logits) >= THRESHOLD, truth, list(head.labels))
        metrics.update(unknown_label_rows=int(unknown.sum()), threshold=THRESHOLD, multi_label=True)
        gold_idx = np.where(unknown, -1, 0)  # the scope's figures only: a multi-label task has no prediction sets
    else:
        gold_idx = label_indices(gold, head.labels)
        metrics = classification_metrics(logits[:, head.columns].argmax(axis=1), gold_idx, list(head.labels))
    scope = (scopes or {}).get(head.name)
    own = TextOutputs(list(head.labels), np.asarray(logits)[:, head.columns], features if scope is not None else None,
                      scope, None if head.multi_label else (calibrations or {}).get(head.name))
    return {"task": head.name, **metrics, **trust_metrics(own, gold_idx)}


def _label_matrix(gold: list[str], labels) -> tuple[np.ndarray, np.ndarray]:
    """(rows, labels) booleans of the gold label sets, and per row whether it names a label the task does not have."""
    from kamalcli.heads import label_set

    index = {name: j for j, name in enumerate(labels)}
    truth = np.zeros((len(gold), len(labels)), dtype=bool)
    unknown = np.zeros(len(gold), dtype=bool)
    for i, value in enumerate(gold):
        names = label_set(value)
        unknown[i] = any(n not in index for n in names)
        for name in names:
            if name in index:
                truth[i, index[name]] = True
    return truth, unknown


def trust_metrics(found, gold_idx: np.ndarray) -> dict:
    """What the student says about itself, measured: the share of rows its scope flags (and, where some gold
    labels are none of its own, how well the scope tells those apart: AUROC), and its prediction sets'
    coverage and mean size over the rows whose gold label it knows."""
    from kamalcli.probs import auroc, softmax
    from kamalcli.trust.conformal import coverage_and_size

    out = {}
    known = gold_idx >= 0
    if found.scope is not None:
        scores = found.scope.scores(found.logits, found.features)
        flagged = ~found.scope.in_scope(scores)
        out["scope"] = {"score": found.scope.score, "keep": found.scope.keep, "flagged": float(flagged.mean()),
                        "flagged_known": float(flagged[known].mean()) if known.any() else None,
                        "flagged_unknown": float(flagged[~known].mean()) if (~known).any() else None,
                        "auroc": auroc(scores[known], scores[~known]) if known.any() and (~known).any() else None}
    if found.calibration is not None and known.any():
        members = found.calibration.members(softmax(found.logits[known]))
        coverage, size = coverage_and_size(members, gold_idx[known])
        out["conformal"] = {"coverage_asked": found.calibration.coverage, "coverage": coverage,
                            "mean_set_size": size, "rows": int(known.sum()), "calibration_rows": found.calibration.rows}
    return out


def evaluate_baseline(workspace, store, baseline: str, dataset, *, device: str = "auto", max_length: int = 128,
                      teacher_names: tuple[str, ...] = (), base: str | None = None, say=print) -> dict:
    """'ensemble' (argmax of concatenated logits; of teacher_names only when given), 'teacher:NAME' (one teacher,
    other labels at zero), 'merge[:METHOD]' (the teachers' encoders merged in weight space from their base,
    each teacher's head on it, logits concatenated as the ensemble's), 'zero-shot' (no teacher: each text's
    nearest label name in a sentence encoder, base or DEFAULT_ENCODER) or 'prior:DATA' (no teacher: the nearest
    prototype of DATA's labelled rows in that encoder)."""
    from kamalcli.methods.vanilla_kd import union_logits
    from kamalcli.probe.outputs import teacher_outputs
    from kamalcli.probe.runner import Runner

    baseline = canonical_baseline(baseline)
    if base is not None and not baseline.startswith(("merge:", ZERO_SHOT, PRIOR)):
        raise KamalError("--base names the pretrained base of --baseline merge, or the encoder of zero-shot or "
                         "prior:DATA; drop it")
    if dataset.task == "token":
        if baseline.startswith(("merge:", ZERO_SHOT, PRIOR)):
            raise KamalError(f"{baseline} is a baseline for text classifiers, not for token data")
        return evaluate_token_baseline(workspace, store, baseline, dataset, device=device, max_length=max_length,
                                       teacher_names=teacher_names, say=say)
    texts, gold = load_labelled_rows(dataset)
    if baseline == ZERO_SHOT:
        return _zero_shot(workspace, store, dataset, texts, gold, base, teacher_names, device, max_length, say)
    if baseline.startswith(PRIOR):
        return _prior_alone(workspace, store, dataset, baseline, gold, base, teacher_names, device, max_length, say)
    # as probe and amalgamate do: a teacher whose weights changed on disk has its stale cached outputs forgotten
    teachers = refresh_teachers(workspace, store, baseline_teachers(store, baseline, "sequence", teacher_names), say)
    if teachers[0].task == "token":
        raise KamalError(f"teacher {teachers[0].name} tags tokens; measure it on token data with tags")
    task = _one_task(teachers)
    all_teachers = [t for t in store.teachers_of_task("sequence") if t.head_name == task]
    space = store.label_space(all_teachers)
    if baseline.startswith("merge:"):
        outputs, info = _merged_outputs(store, teachers, baseline, base, texts, max_length, device, say)
    else:
        runner = Runner(workspace, store, device=device)
        outputs = teacher_outputs(store, teachers, [runner.logits_probe(t, dataset, max_length) for t in teachers])
        info = None
    if teachers[0].multi_label:
        return _multi_label_baseline(store, baseline, teacher_names, dataset, outputs, gold, task)
    # Score over the whole union so every baseline is measured on the same labels.
    scores = np.full((len(texts), len(space)), -np.inf)
    local = np.log(np.maximum(outputs.padded(0), 1e-30)) if baseline.startswith("teacher:") else union_logits(outputs)
    for j, name in enumerate(outputs.space.names):
        scores[:, space.index(name)] = local[:, j]
    pred = scores.argmax(axis=1)
    metrics = classification_metrics(pred, space.indices(gold), list(space.names))
    if info is not None:
        metrics["merge"] = info
    store.add_evaluation(baseline=baseline_name(baseline, teacher_names), dataset_id=dataset.id, metrics=metrics)
    return metrics


def _one_task(teachers) -> str:
    """The one task these baseline teachers answer; teachers of several tasks are refused in one line."""
    tasks = sorted({t.head_name for t in teachers})
    if len(tasks) > 1:
        raise KamalError(f"these teachers answer several tasks ({', '.join(tasks)}): measure one task's teachers, "
                         "named with --teacher NAME")
    return tasks[0]


def _multi_label_baseline(store, baseline, teacher_names, dataset, outputs, gold, task) -> dict:
    """A multi-label task's teachers: each label on when its mean sigmoid over the teachers that have it is at
    least THRESHOLD (the target kamal's student learns)."""
    from kamalcli.heads import THRESHOLD
    from kamalcli.methods.multi_label import multi_label_target

    names = list(outputs.space.names)
    truth, unknown = _label_matrix(gold, names)
    metrics = {"task": task, **multi_label_metrics(multi_label_target(outputs) >= THRESHOLD, truth, names),
               "unknown_label_rows": int(unknown.sum()), "threshold": THRESHOLD, "multi_label": True}
    store.add_evaluation(baseline=baseline_name(baseline, teacher_names), dataset_id=dataset.id, metrics=metrics)
    return metrics


def canonical_baseline(baseline: str) -> str:
    """ensemble, teacher:NAME, merge:METHOD (merge alone: task arithmetic), zero-shot or prior:DATA; anything else
    refused in one line."""
    if baseline == "merge":
        return "merge:task-arithmetic"
    if baseline in ("ensemble", ZERO_SHOT) or (baseline.startswith(("teacher:", "merge:", PRIOR)) and baseline != PRIOR):
        return baseline
    raise KamalError(f"unknown baseline {baseline!r}: ensemble, teacher:NAME, merge[:METHOD], zero-shot or prior:DATA")


ZERO_SHOT = "zero-shot"
PRIOR = "prior:"  # prior:DATA
# Fixed before any measurement, not tuned: a label's vector is the mean of these sentences' (prompt ensembling).
ZERO_SHOT_TEMPLATES = ("{label}", "This text is about {label}.", "A text about {label}.")


def _zero_shot(workspace, store, dataset, texts, gold, encoder, teacher_names, device, max_length, say) -> dict:
    """What a user can do with no teacher: each text's label is the one whose name, put in ZERO_SHOT_TEMPLATES,
    lies nearest (cosine) in a sentence encoder; over the teachers' union of labels, as every baseline."""
    from kamalcli.probe.prototypes import DEFAULT_ENCODER
    from kamalcli.runtime import resolve_device

    if teacher_names:
        raise KamalError("--teacher picks the members of --baseline ensemble or merge; zero-shot reads no teacher")
    encoder = encoder or DEFAULT_ENCODER
    space = store.label_space(store.teachers_of_task("sequence"))
    scores = zero_shot_scores(workspace, encoder, texts, dataset.content_hash, list(space.names), max_length,
                              resolve_device(device), say)
    metrics = classification_metrics(scores.argmax(axis=1), space.indices(gold), list(space.names))
    metrics["zero_shot"] = {"encoder": encoder, "templates": list(ZERO_SHOT_TEMPLATES)}
    store.add_evaluation(baseline=ZERO_SHOT, dataset_id=dataset.id, metrics=metrics)
    return metrics


def _prior_alone(workspace, store, dataset, baseline, gold, encoder, teacher_names, device, max_length, say) -> dict:
    """muki-hard's prior with no teacher: each text's class is the nearest prototype (mean sentence vector) of a
    labelled dataset's rows, e.g. `kamal synthesize`'s generated text, in a sentence encoder."""
    from kamalcli.probe.prototypes import DEFAULT_ENCODER, fit_prototypes
    from kamalcli.runtime import resolve_device

    if teacher_names:
        raise KamalError("--teacher picks the members of --baseline ensemble or merge; prior:DATA reads no teacher")
    encoder = encoder or DEFAULT_ENCODER
    teachers = store.teachers_of_task("sequence")
    space = store.label_space(teachers)
    fit = fit_prototypes(workspace, teachers, dataset, store.dataset(baseline[len(PRIOR):]), encoder=encoder,
                         max_length=max_length, device=resolve_device(device), say=say,
                         canonical=store.label_aliases().canonical)
    classes = fit.prior(list(space.names))
    metrics = classification_metrics(classes.argmax(axis=1), space.indices(gold), list(space.names))
    metrics["prior"] = {"encoder": encoder, "data": baseline[len(PRIOR):]}
    store.add_evaluation(baseline=baseline, dataset_id=dataset.id, metrics=metrics)
    return metrics


def zero_shot_scores(workspace, encoder: str, texts: list[str], data_hash: str, names: list[str], max_length: int,
                     device: str, say=print) -> np.ndarray:
    """(texts, names): the cosine of each text's sentence vector with each label's template vector."""
    from kamalcli.probe.encoder import sentence_vectors, text_vectors

    rows = np.asarray(sentence_vectors(workspace, encoder, texts, data_hash, max_length, device, say))
    readable = [name.replace("_", " ").replace("-", " ") for name in names]
    sentences = [t.format(label=label) for label in readable for t in ZERO_SHOT_TEMPLATES]
    vectors = text_vectors(encoder, sentences, device=device).reshape(len(names), len(ZERO_SHOT_TEMPLATES), -1)
    labels = vectors.mean(axis=1)
    labels /= np.linalg.norm(labels, axis=1, keepdims=True)
    return rows @ labels.T


def _merged_outputs(store, teachers, baseline: str, base, texts, max_length, device, say):
    from kamalcli.merge.merged import merged_logits
    from kamalcli.probe.outputs import TeacherOutputs
    from kamalcli.runtime import resolve_device

    logits, merge = merged_logits(teachers, base, baseline.split(":", 1)[1], texts, max_length,
                                  device=resolve_device(device))
    for line in merge.warnings:
        say(line)
    outputs = TeacherOutputs(store.label_space(teachers), tuple(t.name for t in teachers), logits, {})
    return outputs, merge.info


def baseline_teachers(store, baseline: str, task: str, teacher_names: tuple[str, ...] = ()) -> list:
    """The teachers a baseline stands for: teacher:NAME's one, or the ensemble's (the named ones, else every
    teacher of the task)."""
    if baseline.startswith("teacher:"):
        if teacher_names:
            raise KamalError("--teacher picks the members of --baseline ensemble or merge; teacher:NAME is one "
                             "teacher already")
        return [store.teacher(baseline.split(":", 1)[1])]
    if teacher_names:
        if len(set(teacher_names)) != len(teacher_names):
            raise KamalError("a teacher is named twice")
        return [store.teacher(name) for name in teacher_names]
    teachers = store.teachers_of_task(task)
    if not teachers:
        raise KamalError(f"no {'token ' if task == 'token' else ''}teachers registered")
    return teachers


def baseline_name(baseline: str, teacher_names: tuple[str, ...] = ()) -> str:
    return f"{baseline}({','.join(teacher_names)})" if teacher_names else baseline


# -- token models (named entities) ----------------------------------------------

def _tagged(dataset):
    from kamalcli.data.tokens import load_token_rows

    if dataset.task != "token":
        raise KamalError(f"dataset {dataset.name} holds texts; token models are measured on token data with tags")
    sentences, tags = load_token_rows(dataset)
    if tags is None:
        raise KamalError(f"dataset {dataset.name} has no gold tags: add it with --tags-column (role eval)")
    return sentences, tags


def evaluate_token_student(store, student, dataset, *, device: str = "auto") -> dict:
    from kamalcli.data.entities import entity_scores, student_tags
    from kamalcli.models.loading import load_classifier, load_tokenizer
    from kamalcli.runtime import resolve_device

    folder = student.folder
    sentences, gold = _tagged(dataset)
    device = resolve_device(device)
    model = load_classifier(folder).to(device)
    pred = student_tags(model, load_tokenizer(folder), sentences, student.labels, student.max_length, device)
    metrics = entity_scores(student.aliases.canonical_rows(gold), pred)
    store.add_evaluation(student_id=student.id, dataset_id=dataset.id, metrics=metrics)
    return metrics


def evaluate_token_baseline(workspace, store, baseline: str, dataset, *, device: str = "auto",
                            max_length: int = 128, teacher_names: tuple[str, ...] = (), say=print) -> dict:
    """ensemble: argmax per word over all token teachers' concatenated logits (one O, the teachers' O logits
    log-sum-exp'ed, as vanilla-kd's target); teacher:NAME: that teacher's own tags."""
    from kamalcli.data.entities import entity_scores, o_row, tags_of
    from kamalcli.methods.vanilla_kd import union_word_logits
    from kamalcli.probe import tokens as token_probe
    from kamalcli.runtime import resolve_device

    sentences, gold = _tagged(dataset)
    teachers = refresh_teachers(workspace, store, baseline_teachers(store, baseline, "token", teacher_names), say)
    outputs, _ = token_probe.teacher_outputs(workspace, store, teachers, dataset, max_length=max_length,
                                             mc_samples=token_probe.cached_passes(store, teachers, dataset, max_length),
                                             device=resolve_device(device), say=lambda *a, **k: None)
    scores = union_word_logits(outputs)
    scores = np.where(outputs.words[..., None], scores, o_row(outputs.space.names, scores.shape[-1]))
    pred = tags_of(scores, [len(s) for s in sentences], outputs.space.names)
    metrics = entity_scores(outputs.space.aliases.canonical_rows(gold), pred)
    store.add_evaluation(baseline=baseline_name(baseline, teacher_names), dataset_id=dataset.id, metrics=metrics)
    return metrics
