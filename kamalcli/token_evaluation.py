"""kamal eval for token students and token teachers: entity-level P/R/F1 (kamalcli/entities.py)."""

from __future__ import annotations

import numpy as np

from kamalcli.errors import KamalError


def _gold(dataset):
    from kamalcli.token_data import load_token_rows

    if dataset.task != "token":
        raise KamalError(f"dataset {dataset.name} holds texts; token models are measured on token data with tags")
    sentences, tags = load_token_rows(dataset)
    if tags is None:
        raise KamalError(f"dataset {dataset.name} has no gold tags: add it with --tags-column (role eval)")
    return sentences, tags


def evaluate_token_student(store, student, dataset, *, device: str = "auto") -> dict:
    from kamalcli.entities import entity_scores, student_tags
    from kamalcli.modeling import load_classifier, load_tokenizer
    from kamalcli.prediction import student_folder, student_max_length
    from kamalcli.runtime import resolve_device

    folder = student_folder(student)
    sentences, gold = _gold(dataset)
    device = resolve_device(device)
    model = load_classifier(folder).to(device)
    pred = student_tags(model, load_tokenizer(folder), sentences, student.labels, student_max_length(student), device)
    metrics = entity_scores(gold, pred)
    store.add_evaluation(student_id=student.id, dataset_id=dataset.id, metrics=metrics)
    return metrics


def evaluate_token_baseline(workspace, store, baseline: str, dataset, *, device: str = "auto",
                            max_length: int = 128, teacher_names: tuple[str, ...] = ()) -> dict:
    """ensemble: argmax per word over all token teachers' concatenated logits (one O, the teachers' O logits
    log-sum-exp'ed, as vanilla-kd's target); teacher:NAME: that teacher's own tags."""
    from kamalcli import token_probe
    from kamalcli.entities import entity_scores, o_row, tags_of
    from kamalcli.evaluation import baseline_name, baseline_teachers
    from kamalcli.methods.token_level import union_word_logits
    from kamalcli.runtime import resolve_device

    sentences, gold = _gold(dataset)
    teachers = baseline_teachers(store, baseline, "token", teacher_names)
    outputs, _ = token_probe.teacher_outputs(workspace, store, teachers, dataset, max_length=max_length,
                                             mc_samples=token_probe.cached_passes(store, teachers, dataset, max_length),
                                             device=resolve_device(device), say=lambda *a, **k: None)
    scores = union_word_logits(outputs)
    scores = np.where(outputs.words[..., None], scores, o_row(outputs.space.names, scores.shape[-1]))
    pred = tags_of(scores, [len(s) for s in sentences], outputs.space.names)
    metrics = entity_scores(gold, pred)
    store.add_evaluation(baseline=baseline_name(baseline, teacher_names), dataset_id=dataset.id, metrics=metrics)
    return metrics

