"""Token teachers' outputs per word, computed once per (teacher, data, max length, K) and cached.

Each teacher runs with its own tokenizer and is read at every word's first
sub-token (kamalcli/models/words.py): per word, its logits in eval mode and
the mean softmax of K Monte-Carlo-dropout passes. The arrays live in a probe
folder; the probes table records the probe, and probe_rows one line per
sentence with the per-word scores averaged over the sentence's words
(pred: the number of words the teacher tags as entities; max_prob, entropy:
the mean over words of the plain softmax's; uhat: the mean over words of
1 - the entity-only confidence MUKI selects with, below (uhat is an
uncertainty, as for sequence probes); mc_*: the same from the MC mean). The sentence averages are for `kamal report`; amalgamation reads the
per-word arrays.

Entity-only confidence of a teacher on a word: its distribution over its own
B-/I- tags, renormalised without O, c = 1 - H(p_ent) / log |E| (|E| its number
of entity tags). A teacher predicts O confidently on entity types it does not
know; without O its distribution says which of its own types it would pick.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.labels import LabelSpace
from kamalcli.probs import entropy, normalised_entropy, softmax

ARRAYS = "token_arrays.npz"


@dataclass(frozen=True)
class TokenTeacherOutputs:
    """N token teachers' per-word outputs on the same n sentences, W words at most."""

    space: LabelSpace                       # the union: one O, every teacher's B-/I- tags
    teachers: tuple[str, ...]
    logits: tuple[np.ndarray, ...]          # per teacher (n, W, k_i); 0 where there is no word
    mc_probs: tuple[np.ndarray | None, ...]  # per teacher (n, W, k_i) mean MC-dropout softmax, or None (K = 1)
    words: np.ndarray                       # (n, W) bool: a word every teacher saw

    @property
    def num_rows(self) -> int:
        return self.words.shape[0]

    def probs(self, i: int, temperature: float = 1.0) -> np.ndarray:
        return softmax(self.logits[i].astype(np.float64) / temperature)

    def selection_probs(self, i: int, mc: bool) -> np.ndarray:
        """What a teacher's confidence is computed from: the MC-dropout mean if there is one, else the softmax."""
        return self.mc_probs[i].astype(np.float64) if mc and self.mc_probs[i] is not None else self.probs(i)

    def padded(self, i: int, probs: np.ndarray) -> np.ndarray:
        """(n, W, k_i) -> (n, W, |Y|) in the union (zeros on other teachers' tags; O is shared)."""
        n, w, k = probs.shape
        return self.space.pad(self.teachers[i], probs.reshape(n * w, k)).reshape(n, w, len(self.space))

    def o_index(self, i: int) -> int:
        """The position of O among teacher i's own tags."""
        return [self.space.names[c] for c in self.space.blocks[self.teachers[i]]].index("O")


def entity_confidence(probs: np.ndarray, o_index: int) -> np.ndarray:
    """(..., k) a teacher's tag distribution -> (...) c = 1 - H(p without O, renormalised) / log |E|.

    With one entity tag (|E| = 1) the renormalised distribution is certain: c = 1.
    """
    entity = np.delete(probs, o_index, axis=-1)
    entity = entity / np.maximum(entity.sum(axis=-1, keepdims=True), 1e-30)
    size = entity.shape[-1]
    if size < 2:
        return np.ones(entity.shape[:-1])
    return 1.0 - normalised_entropy(entity)


def entity_confidences(outputs, mc: bool) -> np.ndarray:
    """(n, W, N): each teacher's entity-only confidence on each word."""
    return np.stack([entity_confidence(outputs.selection_probs(i, mc), outputs.o_index(i))
                     for i in range(len(outputs.teachers))], axis=-1)


def every_teacher_says_o(outputs) -> np.ndarray:
    """(n, W) bool: every teacher's most likely tag is O."""
    says_o = [outputs.logits[i].argmax(axis=-1) == outputs.o_index(i) for i in range(len(outputs.teachers))]
    return np.logical_and.reduce(says_o)


def selected_targets(padded: np.ndarray, confidence: np.ndarray, all_o: np.ndarray, tau: float | None) -> np.ndarray:
    """padded (N, n, W, |Y|) teacher distributions in the union, confidence (n, W, N), all_o (n, W) ->
    (n, W, |Y|): the most confident teacher's (tau None: hard) or the softmax(c / tau) mixture (soft);
    the plain mean where every teacher says O."""
    if tau is None:
        chosen = confidence.argmax(axis=-1)                                  # (n, W)
        target = np.take_along_axis(padded, chosen[None, ..., None], axis=0)[0]
    else:
        w = softmax(confidence / tau, axis=-1)
        target = np.einsum("nwt,tnwy->nwy", w, padded)
    return np.where(all_o[..., None], padded.mean(axis=0), target)


def probe_key(teacher, dataset, max_length: int, mc_samples: int, seed: int) -> str:
    spec = {"task": "token", "teacher": teacher.fingerprint, "data": dataset.content_hash, "max_length": max_length,
            "mc_samples": mc_samples, "seed": seed}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def sentence_rows(logits: np.ndarray, mc: np.ndarray | None, words: np.ndarray, o_index: int) -> dict[str, np.ndarray]:
    """probe_rows' columns: per sentence, the per-word scores averaged over its words (module docstring)."""
    count = np.maximum(words.sum(axis=1), 1)

    def mean(values):
        return (values * words).sum(axis=1) / count

    def scores(probs, prefix):
        full_entropy = entropy(probs)
        entities = ((probs.argmax(axis=-1) != o_index) & words).sum(axis=1)
        return {f"{prefix}pred": entities, f"{prefix}max_prob": mean(probs.max(axis=-1)),
                f"{prefix}entropy": mean(full_entropy), f"{prefix}uhat": mean(1 - entity_confidence(probs, o_index))}

    plain = softmax(logits.astype(np.float64))
    return {**scores(plain, ""), **scores(plain if mc is None else mc.astype(np.float64), "mc_")}


def ensure_probe(workspace, store, teacher, dataset, *, max_length: int, mc_samples: int, seed: int = 0,
                 device: str = "cpu", batch_size: int = 64, width: int | None = None, say=print):
    """The teacher's cached per-word outputs on dataset (computed and recorded if missing): (probe, arrays)."""
    key = probe_key(teacher, dataset, max_length, mc_samples, seed)
    probe = store.find_probe(key)
    if probe is None or not (Path(probe.path) / ARRAYS).is_file():
        store.claim("probe", key, exclusive=True, wait=True, on_wait=lambda holder: say(
            f"Waiting for {holder}: it is computing the probe of {teacher.name} on {dataset.name}."))
        probe = store.find_probe(key)  # that command may have just made it
    if probe is not None and (Path(probe.path) / ARRAYS).is_file():
        return probe, load_arrays(probe)
    if teacher.task != "token":
        raise KamalError(f"teacher {teacher.name} is a sequence classifier; token-level work needs token teachers")
    import time

    import torch

    from kamalcli.files import publish_dir
    from kamalcli.runtime import resolve_device
    from kamalcli.models.loading import load_classifier, load_tokenizer
    from kamalcli.data.tokens import load_token_rows
    from kamalcli.models.words import encode_words

    say(f"Probing token teacher {teacher.name} on {dataset.name} (K={mc_samples}, max length {max_length}).")
    started = time.perf_counter()
    sentences, _ = load_token_rows(dataset)
    device = resolve_device(device)
    model = load_classifier(teacher.path).to(device)
    aligned = encode_words(load_tokenizer(teacher.path), sentences, max_length, config=model.config)
    torch.manual_seed(seed)
    from kamalcli.models.words import word_logits

    logits, mc = word_logits(model, aligned, batch_size=batch_size, device=device, width=width,
                             passes=mc_samples if mc_samples > 1 else 0)
    words = aligned.positions(width) >= 0
    staging = workspace.tmp_dir() / "probe"
    staging.mkdir(parents=True)
    arrays = {"logits": logits, "words": words, **({"mc": mc} if mc is not None else {})}
    np.savez(staging / ARRAYS, **arrays)
    final = workspace.artifact_dir("probes") / f"token-{key[:24]}"
    publish_dir(staging, final)
    space = store.label_space([teacher])
    o_index = list(space.names).index("O")
    rows = sentence_rows(logits, mc, words, o_index)
    summary = {"task": "token", "words": int(words.sum()), "cut_words": aligned.cut_words(),
               "mean_entity_confidence": float(1 - rows["uhat"].mean()),
               "mean_mc_entity_confidence": float(1 - rows["mc_uhat"].mean()),
               "entity_words": int(rows["pred"].sum())}
    if probe is not None:  # its arrays were removed: record it again
        store.delete_probe(probe.id)
    probe = store.add_probe(rows, teacher_id=teacher.id, dataset_id=dataset.id, key=key,
                            options_key=f"token:K={mc_samples}:L={max_length}",
                            options={"task": "token", "mc_samples": mc_samples, "max_length": max_length, "seed": seed},
                            path=str(final), num_rows=len(sentences), summary=summary,
                            seconds=time.perf_counter() - started)
    return probe, arrays


def cached_passes(store, teachers, dataset, max_length: int) -> int:
    """For methods that read logits only: the K of a token probe every teacher has on this data and length, else 1."""
    common = None
    for teacher in teachers:
        ks = {p.options.get("mc_samples") for p in store.probes(teacher_id=teacher.id, dataset_id=dataset.id)
              if p.options.get("task") == "token" and p.options.get("max_length") == max_length
              and (Path(p.path) / ARRAYS).is_file()}
        common = ks if common is None else common & ks
    return max(common) if common else 1


def load_arrays(probe) -> dict[str, np.ndarray]:
    with np.load(Path(probe.path) / ARRAYS) as f:
        return {k: f[k] for k in f.files}


def teacher_outputs(workspace, store, teachers, dataset, *, max_length: int, mc_samples: int, seed: int = 0,
                    device: str = "cpu", say=print) -> tuple[TokenTeacherOutputs, list]:
    """Every teacher's per-word outputs on dataset, as one object methods read (probed first if missing)."""
    from kamalcli.data.tokens import load_token_rows
    from kamalcli.models.words import max_words

    sentences, _ = load_token_rows(dataset)
    width = max_words(sentences)
    probes, logits, mc, words = [], [], [], None
    for teacher in teachers:
        probe, arrays = ensure_probe(workspace, store, teacher, dataset, max_length=max_length,
                                     mc_samples=mc_samples, seed=seed, device=device, width=width, say=say)
        probes.append(probe)
        logits.append(_width(arrays["logits"], width))
        mc.append(_width(arrays["mc"], width) if "mc" in arrays else None)
        seen = _width(arrays["words"], width)
        words = seen if words is None else words & seen
    space = store.label_space(teachers)
    return TokenTeacherOutputs(space, tuple(t.name for t in teachers), tuple(logits), tuple(mc), words), probes


def _width(array: np.ndarray, width: int) -> np.ndarray:
    if array.shape[1] == width:
        return array
    if array.shape[1] > width:
        return array[:, :width]
    pad = [(0, 0), (0, width - array.shape[1])] + [(0, 0)] * (array.ndim - 2)
    return np.pad(array, pad)


def probe_token_teachers(workspace, store, teachers, datasets, *, max_length: int, mc_samples: int, seed: int,
                         device: str, batch_size: int, say=print) -> dict:
    """kamal probe for token teachers on token data: per-word outputs cached, and on tagged data with two
    teachers or more, per-word selection figures stored beside the sentence-level ones
    (token_selection below; score names say 'per word')."""
    from kamalcli.data.tokens import load_token_rows

    summary = {"computed": [], "cached": [], "selection": {}}
    for dataset in datasets:
        for teacher in teachers:
            key = probe_key(teacher, dataset, max_length, mc_samples, seed)
            cached = store.find_probe(key) is not None
            probe, _ = ensure_probe(workspace, store, teacher, dataset, max_length=max_length, mc_samples=mc_samples,
                                    seed=seed, device=device, batch_size=batch_size,
                                    width=_words_width(dataset), say=say)
            pair = {"teacher": teacher.name, "data": dataset.name, "probe_id": probe.id, "seconds": probe.seconds,
                    "rows": probe.num_rows}
            (summary["cached"] if cached else summary["computed"]).append(pair)
        if dataset.has_labels and len(teachers) > 1:
            outputs, probes = teacher_outputs(workspace, store, teachers, dataset, max_length=max_length,
                                              mc_samples=mc_samples, seed=seed, device=device, say=say)
            _, gold = load_token_rows(dataset)
            gold = outputs.space.aliases.canonical_rows(gold)
            results = {}
            for mc in ((True, False) if mc_samples > 1 else (False,)):
                s = token_selection(outputs, gold, mc=mc)
                name = "mc-dropout" if mc else "entropy"
                rows = s["entity_words"]
                results[f"{name}, entity tags only (per word)"] = {
                    "accuracy": s["selection_entity_only"], "auroc": None,
                    "target_accuracy": s["hard_target_right_entity_words"], "rows": rows}
                results[f"{name}, O included (per word)"] = {"accuracy": s["selection_with_o"], "auroc": None,
                                                             "target_accuracy": None, "rows": rows}
            store.replace_selection(dataset.id, f"token:K={mc_samples}:L={max_length}", [t.name for t in teachers],
                                    [p.id for p in probes], results)
            summary["selection"][dataset.name] = results
    return summary


def _words_width(dataset) -> int:
    from kamalcli.data.tokens import load_token_rows
    from kamalcli.models.words import max_words

    return max_words(load_token_rows(dataset)[0])


# -- selection on tagged data --------------------------------------------------

def token_selection(outputs, gold: list[list[str]], mc: bool = True) -> dict:
    """How well token teachers' confidences pick the right teacher, word by word, on tagged data.

    On the words of gold entities (each entity type belongs to the teachers that
    tag it), for the entity-only confidence MUKI uses at token level and, beside
    it, the confidence over the teacher's whole distribution (O included, the
    score the paper says misleads at token level): how often the most confident
    teacher owns the gold type. Also how often MUKI-hard's per-word target
    (selected_targets above) has the gold tag as its most likely tag,
    over entity words and over all words, and how many entity words every teacher
    tags O (no selection happens there: the target is the teachers' mean).
    """
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
    full = np.stack([1.0 - normalised_entropy(outputs.selection_probs(i, mc)) for i in range(len(outputs.teachers))], axis=-1)
    padded = np.stack([outputs.padded(i, outputs.probs(i)) for i in range(len(outputs.teachers))])
    all_o = every_teacher_says_o(outputs)
    target = selected_targets(padded, confidence, all_o, None).argmax(axis=-1)

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
