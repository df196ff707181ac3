"""Named entities from BIO tags, and entity-level precision / recall / F1 (seqeval's definition).

An entity is a maximal span of one type: it starts at B-TYPE, or at I-TYPE
after O or after a tag of another type (seqeval's default, conlleval's
chunking), and continues over I-TYPE. A predicted entity counts as correct only
if a gold entity has exactly the same start, end and type. Per type and micro
overall: precision = correct / predicted, recall = correct / gold, F1 their
harmonic mean (0 where undefined); macro F1 is the mean of the types' F1.
Implemented here (thirty lines, golden-tested against seqeval's published
examples) rather than adding seqeval, which pulls scikit-learn in.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from kamalcli.labels import Aliases


def spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """BIO tags -> (type, start, end exclusive) per entity."""
    out = []
    kind, start = None, 0
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, this = tag.partition("-") if tag != "O" else ("O", "", None)
        begins = prefix == "B" or (prefix == "I" and this != kind)
        if kind is not None and (tag == "O" or begins):
            out.append((kind, start, i))
            kind = None
        if begins:
            kind, start = this, i
    return out


def entity_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """Per type and overall (micro) precision / recall / F1 and support, over sentences of tags."""
    if len(gold) != len(pred):
        raise ValueError("gold and predicted sentences differ in number")
    true, found, correct = Counter(), Counter(), Counter()
    for g, p in zip(gold, pred):
        gs, ps = set(spans(g)), set(spans(p))
        true.update(k for k, _, _ in gs)
        found.update(k for k, _, _ in ps)
        correct.update(k for k, _, _ in gs & ps)
    per_type = {kind: _prf(correct[kind], found[kind], true[kind]) for kind in sorted(set(true) | set(found))}
    overall = _prf(sum(correct.values()), sum(found.values()), sum(true.values()))
    macro = sum(v["f1"] for v in per_type.values()) / len(per_type) if per_type else 0.0
    return {"entity_precision": overall["precision"], "entity_recall": overall["recall"], "entity_f1": overall["f1"],
            "entity_macro_f1": macro, "entities": overall["support"], "per_type": per_type,
            "sentences": len(gold)}


def _prf(correct: int, predicted: int, gold: int) -> dict:
    p = correct / predicted if predicted else 0.0
    r = correct / gold if gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1": f, "support": gold, "predicted": predicted}


def tags_of(word_scores, words_per_sentence: Sequence[int], names: Sequence[str]) -> list[list[str]]:
    """(n, W, |Y|) scores -> the argmax tag of each sentence's words (words beyond W: O)."""
    best = word_scores.argmax(axis=-1)
    out = []
    for i, count in enumerate(words_per_sentence):
        kept = [names[j] for j in best[i, : min(count, best.shape[1])]]
        out.append(kept + ["O"] * (count - len(kept)))
    return out


def student_tags(model, tokenizer, sentences, names, max_length: int, device: str = "cpu",
                 batch_size: int = 64) -> list[list[str]]:
    """A token student's tag per word (read at the word's first sub-token; words cut by max_length: O)."""
    import numpy as np

    from kamalcli.models.words import encode_words, word_logits

    aligned = encode_words(tokenizer, sentences, max_length, config=model.config)
    logits, _ = word_logits(model, aligned, batch_size=batch_size, device=device)
    logits = np.where((aligned.positions(logits.shape[1]) >= 0)[..., None], logits, o_row(names, logits.shape[-1]))
    return tags_of(logits, [len(s) for s in sentences], names)


def o_row(names, k: int):
    """Scores that pick O: for words a model never saw (cut by max_length)."""
    import numpy as np

    row = np.full(k, -np.inf)
    row[list(names).index("O")] = 0.0
    return row


class EntityF1Selector:
    """Model selection on a labelled token set by micro entity F1 (uses labels: runs record that they did)."""

    higher_is_better = True

    def __init__(self, dataset, tokenizer, names, max_length: int, device: str, aliases: Aliases | None = None):
        """aliases: other names of the classes (kamal labels merge) the gold tags may use."""
        from kamalcli.data.tokens import load_token_rows

        self.name = f"eval:{dataset.name}"
        self.sentences, gold = load_token_rows(dataset)
        self.gold = (aliases or Aliases()).canonical_rows(gold)
        self.tokenizer, self.names, self.max_length, self.device = tokenizer, names, max_length, device

    def measure(self, model) -> float:
        pred = student_tags(model, self.tokenizer, self.sentences, self.names, self.max_length, self.device)
        return entity_scores(self.gold, pred)["entity_f1"]


def entities_in_text(text: str, words: Sequence[tuple[str, int, int]], probs, names: Sequence[str]) -> dict:
    """One text's entities from per-word probabilities (W, |Y|) over names (words beyond W: O).

    Each entity: its type, the text it covers (from its first word's start to its last word's end), the
    character offsets, and its score: the mean over its words of the probability of the tag chosen there.
    """
    best = probs.argmax(axis=-1)
    tags = [names[best[i]] if i < len(best) else "O" for i in range(len(words))]
    found = []
    for kind, start, end in spans(tags):
        begin, finish = words[start][1], words[end - 1][2]
        score = float(sum(probs[i, best[i]] for i in range(start, end)) / (end - start))
        found.append({"type": kind, "text": text[begin:finish], "start": begin, "end": finish, "score": score})
    return {"text": text, "entities": found}
