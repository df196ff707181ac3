"""What `kamal amalgamate --dry-run` says: the target a student would learn, and a fingerprint of its training.

The fingerprint hashes everything training reads: the student's starting weights, the encoded rows, the objective's
arrays and row weights, the rows trained on and held out, the method and its loss's temperature, the training
settings. Two requests with the same fingerprint train the same student on the same machine (the loop is seeded);
the benches use it to skip an ablation that changes nothing (benchmarks/default_student.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

TARGET_KEYS = ("score", "commit", "starved", "prior", "smooth", "pick_smooth", "chosen_share", "refit", "reweight", "gold_target")


def preview(job, problem) -> dict:
    """The dry run's answer (--json): the student, the recipe, the target as built, and the fingerprint."""
    info = problem.objective.info
    return {"name": job.request.name, "method": job.method.name, "teachers": [t.name for t in job.teachers],
            "data": job.dataset.name, "rows": len(problem.encoded), "labels": problem.labels,
            "recipe": job.request.recipe, "target": {k: info[k] for k in TARGET_KEYS if k in info},
            "fingerprint": fingerprint(job, problem)}


def fingerprint(job, problem) -> str | None:
    """sha256 of what training reads; None where the teachers run inside the loop (a feature-level method's
    auxiliary) or the rows are not token ids per text, which no array here records."""
    objective = problem.objective
    if objective.auxiliary is not None or not hasattr(problem.encoded, "ids"):
        return None
    digest = hashlib.sha256()
    train = {k: v for k, v in dataclasses.asdict(job.train).items() if k != "device"}
    options = job.training_options
    digest.update(json.dumps({"method": job.method.name, "train": train, "labels": problem.labels,
                              "temperature": getattr(options, "temperature", None)}, sort_keys=True).encode())
    for name, tensor in problem.model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    _arrays(digest, {f"encoded.{k}": v for k, v in _encoded(problem.encoded).items()})
    _arrays(digest, {f"objective.{k}": v for k, v in objective.arrays.items()})
    weights = objective.weights  # a weight of 1 on every row is the loss unweighted, bit for bit
    weights = None if weights is not None and np.all(np.asarray(weights) == 1) else weights
    _arrays(digest, {"weights": weights, "train_rows": problem.train_rows, "held_out": problem.held_out})
    return digest.hexdigest()


def _encoded(encoded) -> dict:
    """The encoded rows as flat arrays: every row's token ids end to end, and each row's length."""
    ids = list(encoded.ids)
    lengths = np.array([len(row) for row in ids], dtype=np.int64)
    flat = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    return {"ids": flat, "lengths": lengths, "pad": np.array([encoded.pad_id]), "token_type": np.array([encoded.token_type])}


def _arrays(digest, arrays: dict) -> None:
    for name in sorted(arrays):
        value = arrays[name]
        digest.update(name.encode())
        if value is None:
            digest.update(b"none")
            continue
        array = np.ascontiguousarray(np.asarray(value))
        digest.update(str(array.dtype).encode() + str(array.shape).encode())
        digest.update(array.tobytes())
