"""kamal label-queue: the rows of a dataset whose labels would help most, spread out, in a file to fill in.

Each row gets up to three label-free signals, each as its percentile among the rows:
- the teachers disagree: 1 - the largest share of the union's probability mass one teacher holds (softmax over
  the concatenated logits, vanilla-kd's target), so rows two teachers both claim come first;
- the margin is small: 1 - (first - second) probability of that union distribution;
- the student is unsure: its normalised entropy (when a student is given).
The priority is their mean. Rows are then taken greedily by priority minus SPREAD x their largest cosine
similarity to a row already taken (the student's features, else the union distribution), and a row closer
than NEAR_DUPLICATE to one taken is never taken: a queue of near copies teaches one thing.

That is the `disagree` strategy. `mixed` takes half its rows that way and half as a seeded uniform sample of the
other rows, in turn: amalgamate --gold reads the gold rows as a sample of the pool too (the selection score's
accuracy, the prior's prototypes, the target they choose), and the rows where the teachers disagree alone are not
one (docs/benchmarks.md). The others choose the rows without the priority (their signals are still written beside
each row):
- `random`: a seeded uniform sample, the rows the recipe can read as a sample of the pool (docs/guide.md);
- `balanced`: as many rows of each class the student (else the teachers' union) predicts, in turn, random within;
- `diverse`: spherical k-means with N clusters over sentence vectors (the prior's encoder), each cluster's
  row nearest its centre, largest clusters first: rows that stand for the pool's regions, not its outliers.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

from kamalcli.errors import KamalError
from kamalcli.files import write_text_atomic

if TYPE_CHECKING:
    import numpy as np

SPREAD = 0.5
NEAR_DUPLICATE = 0.95
CANDIDATES = 10  # times N: rows considered for the spread
STRATEGIES = ("mixed", "disagree", "random", "balanced", "diverse")
DEFAULT_STRATEGY = "mixed"
KMEANS_ROUNDS = 20


def queue_rows(workspace, store, dataset, n: int, *, student=None, max_length: int, device: str,
               strategy: str = DEFAULT_STRATEGY, seed: int = 0, encoder: str | None = None, say=print) -> list[dict]:
    """The N rows to label, in the strategy's order, each with the teachers' suggestion and the signals."""
    import numpy as np

    from kamalcli.data.text import load_dataset_rows
    from kamalcli.heads import several_heads
    from kamalcli.methods.vanilla_kd import union_probs
    from kamalcli.probe.outputs import teacher_outputs
    from kamalcli.probe.runner import Runner
    from kamalcli.probe.teacher_weights import refresh_teachers
    from kamalcli.probs import normalised_entropy, percentile, softmax

    if dataset.task != "sequence":
        raise KamalError(f"dataset {dataset.name} holds tokens with tags; label-queue is for texts")
    dataset.refuse_test(f"kamal label-queue --data {dataset.name}")  # its labelled rows would train a student
    if strategy not in STRATEGIES:
        raise KamalError(f"--strategy {strategy}: choose one of {', '.join(STRATEGIES)}")
    texts, _ = load_dataset_rows(dataset)
    if not 1 <= n <= len(texts):
        raise KamalError(f"--n {n}: dataset {dataset.name} has {len(texts)} rows; ask for 1 to {len(texts)}")
    teachers = store.teachers_of_task("sequence")
    if not teachers:
        raise KamalError("no text teachers registered: the queue ranks rows by how the teachers disagree")
    if several_heads(teachers):
        raise KamalError("the teachers answer several tasks (or one multi-label task), and the queue ranks rows for "
                         "one task's exclusive labels: it is not built for them yet")
    teachers = refresh_teachers(workspace, store, teachers, say)
    runner = Runner(workspace, store, device=device)
    outputs = teacher_outputs(store, teachers, [runner.logits_probe(t, dataset, max_length) for t in teachers])
    union = union_probs(outputs)
    signals = {"teachers_disagree": teachers_disagree(outputs), "small_margin": 1.0 - margin(union)}
    features, predicted = union, union
    if student is not None:
        logits, features = student_outputs(student, texts, device)
        predicted = softmax(logits)
        signals["student_unsure"] = normalised_entropy(predicted)
    ranks = {name: percentile(values) for name, values in signals.items()}
    priority = np.mean(list(ranks.values()), axis=0)

    def sentence_vectors():
        from kamalcli.probe.encoder import sentence_vectors
        from kamalcli.probe.prototypes import DEFAULT_ENCODER
        from kamalcli.runtime import resolve_device

        return np.asarray(sentence_vectors(workspace, encoder or DEFAULT_ENCODER, texts, dataset.content_hash,
                                           max_length, resolve_device(device), say))

    chosen = choose(strategy, n, seed, priority, features, predicted.argmax(axis=1), sentence_vectors)
    names = list(outputs.space.names)
    rows = []
    for i in chosen:
        order = np.argsort(-union[i])[:3]
        rows.append({"row": int(i), "text": texts[i], "label": "", "suggested": names[order[0]],
                     "candidates": " | ".join(names[j] for j in order), "priority": round(float(priority[i]), 4),
                     **{name: round(float(values[i]), 4) for name, values in signals.items()}})
    return rows


def choose(strategy: str, n: int, seed: int, priority: np.ndarray, features: np.ndarray, predicted: np.ndarray,
           sentence_vectors) -> list[int]:
    """The n rows' indices, in the strategy's order (sentence_vectors: computed only for `diverse`)."""
    if strategy == "disagree":
        return spread_out(priority, features, n)
    if strategy == "mixed":
        return mixed(spread_out(priority, features, n - n // 2), n // 2, len(priority), seed)
    if strategy == "random":
        return drawn_rows(len(priority), seed)[:n]
    if strategy == "balanced":
        return balanced(predicted, n, seed)
    return representatives(sentence_vectors(), n, seed)


def teachers_disagree(outputs) -> np.ndarray:
    """1 - the largest share of the union distribution's mass that one teacher's labels hold."""
    import numpy as np

    from kamalcli.probs import logsumexp, softmax

    lse = np.stack([logsumexp(z.astype(np.float64), axis=1) for z in outputs.logits], axis=1)
    return 1.0 - softmax(lse).max(axis=1)


def margin(probs: np.ndarray) -> np.ndarray:
    """The largest probability less the second."""
    import numpy as np

    top = np.sort(probs, axis=1)
    return top[:, -1] - (top[:, -2] if probs.shape[1] > 1 else 0.0)


def student_outputs(student, texts: list[str], device: str) -> tuple[np.ndarray, np.ndarray]:
    """The student's logits and features (the vectors its scope reads) on the texts, in one pass."""
    from kamalcli.models.inference import classifier_logits_and_features
    from kamalcli.runtime import resolve_device
    from kamalcli.students.trust import sequence_student

    folder = sequence_student(student, "label-queue").folder
    return classifier_logits_and_features(folder, texts, student.max_length, device=resolve_device(device))


def spread_out(priority: np.ndarray, features: np.ndarray, n: int) -> list[int]:
    """Greedy: the highest priority - SPREAD x (largest cosine to a row taken); near duplicates never."""
    import numpy as np

    vectors = np.asarray(features, dtype=np.float64)
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    pool = np.argsort(-priority, kind="stable")[: max(n * CANDIDATES, n)]
    closest = np.full(len(pool), -1.0)  # largest cosine to any row taken so far
    taken: list[int] = []
    alive = np.ones(len(pool), dtype=bool)
    while len(taken) < n:
        value = np.where(alive, priority[pool] - SPREAD * np.maximum(closest, 0.0), -np.inf)
        best = int(np.argmax(value))
        if not np.isfinite(value[best]):  # the candidates left are near copies: fill up by priority alone
            rest = [int(i) for i in np.argsort(-priority, kind="stable") if int(i) not in set(taken)]
            return taken + rest[: n - len(taken)]
        taken.append(int(pool[best]))
        alive[best] = False
        closest = np.maximum(closest, vectors[pool] @ vectors[pool[best]])
        alive &= closest < NEAR_DUPLICATE
    return taken


def drawn_rows(rows: int, seed: int) -> list[int]:
    """Every row index in a seeded uniform order: `random`'s draw, and `mixed`'s for its random half."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(seed).permutation(rows)]


def mixed(informed: list[int], drawn: int, rows: int, seed: int) -> list[int]:
    """The informed rows and `drawn` rows of a seeded uniform sample of the others, in turn (informed first)."""
    seen = set(informed)
    sample = [i for i in drawn_rows(rows, seed) if i not in seen][:drawn]
    taken = [i for pair in zip(informed, sample) for i in pair]
    return taken + informed[len(sample):] + sample[len(informed):]


def balanced(predicted: np.ndarray, n: int, seed: int) -> list[int]:
    """n rows, one of each predicted class in turn (classes in order of size, largest first), random within a
    class; a class out of rows drops out of the turn."""
    import numpy as np

    rng = np.random.default_rng(seed)
    classes, counts = np.unique(predicted, return_counts=True)
    queues = [list(rng.permutation(np.flatnonzero(predicted == c))) for c in classes[np.argsort(-counts, kind="stable")]]
    taken: list[int] = []
    while len(taken) < n:
        for queue in queues:
            if queue and len(taken) < n:
                taken.append(int(queue.pop(0)))
    return taken


def representatives(vectors: np.ndarray, n: int, seed: int, rounds: int = KMEANS_ROUNDS) -> list[int]:
    """Spherical k-means (k-means++ start, `rounds` Lloyd steps) with n clusters over unit vectors; each cluster's
    row nearest its centre, the largest clusters first (ties: the earlier row). n distinct rows."""
    import numpy as np

    x = np.asarray(vectors, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    rng = np.random.default_rng(seed)
    centres = [x[int(rng.integers(len(x)))]]
    distance = 1.0 - x @ centres[0]
    for _ in range(1, n):  # k-means++: the next centre drawn in proportion to its squared distance
        weights = np.maximum(distance, 0.0) ** 2
        total = weights.sum()
        i = int(rng.choice(len(x), p=weights / total)) if total > 0 else int(rng.integers(len(x)))
        centres.append(x[i])
        distance = np.minimum(distance, 1.0 - x @ x[i])
    centres = np.stack(centres)
    for _ in range(rounds):  # each centre the unit mean of its rows; a cluster without rows keeps its centre
        assigned = np.argmax(x @ centres.T, axis=1)
        for c in range(n):
            members = x[assigned == c]
            if len(members):
                mean = members.sum(axis=0)
                centres[c] = mean / max(np.linalg.norm(mean), 1e-12)
    similarity = x @ centres.T
    assigned = np.argmax(similarity, axis=1)
    taken: list[int] = []
    for c in np.argsort(-np.bincount(assigned, minlength=n), kind="stable"):
        order = np.argsort(-similarity[:, c], kind="stable")  # nearest the centre first, its own members or not
        seen = set(taken)
        taken.append(next(int(i) for i in order if int(i) not in seen))
    return taken


def check_queue_file(workspace, store, out: Path, force: bool) -> None:
    """Before any teacher runs: report --html's guard (never the workspace's own files or a model's folder, a
    folder that exists), then the file itself (check_out)."""
    from kamalcli.report.target import check_writable

    check_writable(workspace, store, out.expanduser().resolve(), "the queue")
    check_out(out, force)


def check_out(out: Path, force: bool = False) -> Path:
    """A .csv or .jsonl file, not one that exists (labels filled in?) unless force."""
    if out.suffix.lower() not in (".csv", ".jsonl"):
        raise KamalError(f"--out {out}: write the queue to a .csv or .jsonl file")
    if out.exists() and not force:
        raise KamalError(f"{out} exists (labels you filled in?): choose another --out, or --force to replace it")
    return out


def write_queue(rows: list[dict], out: Path, *, force: bool = False) -> None:
    """csv or jsonl by the file's suffix; written whole (temporary file + rename)."""
    check_out(out, force)  # again: the file may have appeared while the rows were chosen
    if out.suffix.lower() == ".jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    else:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        text = buffer.getvalue()
    try:
        write_text_atomic(out, text)
    except OSError as e:  # the folder went away, or is read-only
        raise KamalError(f"cannot write the queue to {out}: {e.strerror or e}") from None
