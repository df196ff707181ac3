"""Label-free figures for generated text: diversity and near-duplicates.

Words are lower-cased whitespace tokens.
- distinct-2 (Li et al. 2016): distinct word bigrams / all word bigrams, over
  the whole set (1.0: no bigram repeats anywhere; low: the texts say the same).
- near-duplicate share: the share of texts that have another text in the set
  whose word-trigram sets overlap with Jaccard >= 0.5 (texts under three words
  compare their word sets). Exact repeats count.
"""

from __future__ import annotations

from collections import Counter

NEAR_DUPLICATE_JACCARD = 0.5


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
