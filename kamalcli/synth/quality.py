"""Label-free figures for generated text: diversity, near-duplicates, and which rows steering failed on.

Words are lower-cased whitespace tokens.
- distinct-2 (Li et al. 2016): distinct word bigrams / all word bigrams, over
  the whole set (1.0: no bigram repeats anywhere; low: the texts say the same).
- near-duplicate share: the share of texts that have another text in the set
  whose word-trigram sets overlap with Jaccard >= 0.5 (texts under three words
  compare their word sets). Exact repeats count.
- a row is weak when its steering teacher gives the class the row was steered
  to p < WEAK_STEERING_P (half the mass makes the class that teacher's top class
  whatever its number of classes). Weak rows are counted and named, and kept:
  a teacher's p is a poor referee of steered text. On the README walk's
  teachers (two seeds), a classifier trained on gold labels put 87.9-94.1% of
  the weak rows in the class they were written for, against 74.4-85.7% of the
  others; whole classes were weak because their teacher is unsure of them,
  not because the text is wrong (docs/benchmarks.md). On unsteered text
  (--strength 0) the rule was right, and it stays an option. `--min-steering-p P` drops
  the rows under P (the rule before, at 0.5).
"""

from __future__ import annotations

from collections import Counter

NEAR_DUPLICATE_JACCARD = 0.5
WEAK_STEERING_P = 0.5
_ADVICE = "name what your texts are in --prompt, or raise --strength (now {strength:g})"


def _words(text: str) -> list[str]:
    return text.lower().split()


def distinct_2(texts: list[str]) -> float | None:
    bigrams = Counter(pair for text in texts for pair in zip(_words(text), _words(text)[1:]))
    total = sum(bigrams.values())
    return len(bigrams) / total if total else None


def _shingles(text: str) -> frozenset:
    words = _words(text)
    if len(words) < 3:
        return frozenset((w,) for w in words)
    return frozenset(zip(words, words[1:], words[2:]))


def near_duplicate_share(texts: list[str], threshold: float = NEAR_DUPLICATE_JACCARD) -> float | None:
    if not texts:
        return None
    sets = [_shingles(t) for t in texts]
    duplicate = [False] * len(texts)
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            if duplicate[i] and duplicate[j]:
                continue
            a, b = sets[i], sets[j]
            union = len(a | b)
            if (union == 0) or len(a & b) / union >= threshold:
                duplicate[i] = duplicate[j] = True
    return sum(duplicate) / len(texts)


def steering_warnings(quality: dict, strength: float) -> list[str]:
    """A line naming the classes with weak rows (kept, or dropped under --min-steering-p), with their figures, and
    one naming the classes that lost every row; none when steering held everywhere."""
    floor = quality.get("min_steering_p") or 0.0
    hit = [g for g in quality["groups"] if g["dropped"] or g.get("weak")]
    if not hit:
        return []
    total = quality["overall"]["rows"] + quality["overall"]["dropped"]
    if floor:
        lines = [f"Warning: steering failed on {quality['overall']['dropped']} of {total} rows "
                 f"(the steering teacher gave its class p < {floor:g}), dropped: " + ", ".join(_dropped(g) for g in hit)]
    else:
        lines = [f"Note: the steering teacher gave its class p < {WEAK_STEERING_P:g} on {quality['overall']['weak']} of "
                 f"{total} rows, kept (a teacher unsure of a class is often unsure of text that is right; "
                 "--min-steering-p 0.5 drops them): " + ", ".join(_weak(g) for g in hit)]
    emptied = [f"{g['teacher']}/{g['label']}" for g in hit if not g["rows"]]
    if emptied:
        lines.append(f"Warning: {', '.join(emptied)} kept no row: the steering teacher did not recognise the class "
                     "in what the LM wrote; " + _ADVICE.format(strength=strength))
    return lines


def _dropped(group: dict) -> str:
    others = group["dropped_others_confidence"]
    return (f"{group['teacher']}/{group['label']} {group['dropped']} of {group['rows'] + group['dropped']} "
            f"(p(class) {group['dropped_steering_p']:.2g}" + ("" if others is None else f", other teachers {others:.2g}")
            + ")")


def _weak(group: dict) -> str:
    return f"{group['teacher']}/{group['label']} {group['weak']} of {group['rows']} (p(class) {group['weak_steering_p']:.2g})"


def steering_failed_everywhere(rows: int, strength: float, floor: float) -> str:
    return (f"steering failed on every one of the {rows} rows (the steering teacher gave its class "
            f"p < {floor:g}); " + _ADVICE.format(strength=strength))
