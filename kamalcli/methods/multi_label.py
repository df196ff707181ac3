"""A multi-label task's objective (kamalcli/heads.py): its labels are independent, so each is a yes/no question.

The target of a label is the mean, over the teachers that have it, of their sigmoid probability of it; the student
learns every label by binary cross-entropy on its own logit, summed over the task's labels (the log-likelihood of
the label vector when labels are independent, as cross-entropy is for one label among many). None of the papers'
methods applies: they select among, or mix, softmax distributions over exclusive labels.
"""

from __future__ import annotations

import numpy as np

from kamalcli.heads import sigmoid
from kamalcli.methods.base import Method, Objective, TeacherOutputs
from kamalcli.methods.vanilla_kd import KDOptions


def multi_label_target(outputs: TeacherOutputs, temperature: float = 1.0) -> np.ndarray:
    """(n, |labels|): each label's sigmoid probability, averaged over the teachers that have it."""
    total = np.zeros((outputs.num_rows, len(outputs.space)))
    count = np.zeros(len(outputs.space))
    for i, teacher in enumerate(outputs.teachers):
        cols = np.asarray(outputs.space.blocks[teacher])
        total[:, cols] += sigmoid(outputs.logits[i].astype(np.float64) / temperature)
        count[cols] += 1
    return total / np.maximum(count, 1)


def build_multi_label(outputs: TeacherOutputs, options: KDOptions) -> Objective:
    from kamalcli.methods.losses import binary_kd_loss

    target = multi_label_target(outputs, options.temperature)
    return Objective({"target": target.astype(np.float32)}, binary_kd_loss(options.temperature),
                     info={"mean_labels_on": float((target >= 0.5).sum(axis=1).mean())})


MULTI_LABEL = Method("multi-label", "each label's mean teacher sigmoid, learnt by binary cross-entropy",
                     KDOptions, build_multi_label)
