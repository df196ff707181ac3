"""How well token teachers' confidences pick the right teacher, word by word, on tagged data.

On the words of gold entities (each entity type belongs to the teachers that
tag it), for the entity-only confidence MUKI uses at token level and, beside
it, the confidence over the teacher's whole distribution (O included, the
score the paper says misleads at token level): how often the most confident
teacher owns the gold type. Also how often MUKI-hard's per-word target
(kamalcli/methods/token_level.py) has the gold tag as its most likely tag,
over entity words and over all words, and how many entity words every teacher
tags O (no selection happens there: the target is the teachers' mean).
"""

from __future__ import annotations

import numpy as np


def _full_confidence(probs: np.ndarray) -> np.ndarray:
    k = probs.shape[-1]
    h = -(probs * np.log(np.maximum(probs, 1e-30))).sum(axis=-1)
    return 1.0 - h / np.log(k)


def token_selection(outputs, gold: list[list[str]], mc: bool = True) -> dict:
    from kamalcli.methods.token_level import entity_confidences, every_teacher_says_o, muki_targets

    names = list(outputs.space.names)
    n, width = outputs.words.shape
    gold_ids = np.full((n, width), -1, dtype=np.int64)
    for i, tags in enumerate(gold):
        row = [names.index(t) if t in names else -1 for t in tags[:width]]
        gold_ids[i, : len(row)] = row
    seen = outputs.words & (gold_ids >= 0)
    owners = np.zeros((len(names), len(outputs.teachers)), dtype=bool)
    for j, teacher in enumerate(outputs.teachers):
        owners[list(outputs.space.blocks[teacher]), j] = True
    entity = seen & (gold_ids != names.index("O"))
    right = owners[gold_ids.clip(min=0)]                                      # (n, W, N)

    confidence = entity_confidences(outputs, mc)
    full = np.stack([_full_confidence(outputs.selection_probs(i, mc)) for i in range(len(outputs.teachers))], axis=-1)
    padded = np.stack([outputs.padded(i, outputs.probs(i)) for i in range(len(outputs.teachers))])
    all_o = every_teacher_says_o(outputs)
    target = muki_targets(padded, confidence, all_o, None).argmax(axis=-1)

    def picks(scores):
        chosen = scores.argmax(axis=-1)
        return float(np.take_along_axis(right, chosen[..., None], axis=-1)[..., 0][entity].mean()) if entity.any() else None

    return {
        "entity_words": int(entity.sum()),
        "selection_entity_only": picks(confidence),
        "selection_with_o": picks(full),
        "entity_words_all_teachers_o": float((all_o & entity).sum() / max(1, entity.sum())),
        "hard_target_right_entity_words": float((target == gold_ids)[entity].mean()) if entity.any() else None,
        "hard_target_right_all_words": float((target == gold_ids)[seen].mean()) if seen.any() else None,
        "score": "mc-dropout" if mc and outputs.mc_probs[0] is not None else "entropy",
    }
