"""One training step's forward pass, on one process or as every rank's share under DistributedDataParallel.

The student and the method's Auxiliary sit in one module, so DDP wraps them
together: one gradient all-reduce covers the student and every parameter the
objective owns (feature-level projections, encoders, decoders).

With P processes each rank takes its slice of the step's batch (the same
global batch one process would take: the data order, the number of steps and
the schedule do not depend on P, which is why `--resume` may change P). Each
rank's mean loss is scaled by its share of the rows times P, so DDP's average
of the gradients is the gradient of the batch's mean loss. One small
all-reduce per step sums the loss for the progress bar and the loss history,
and makes every rank stop (Ctrl-C, SIGTERM) after the same step.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from kamalcli.train.auxiliary import StudentView
from kamalcli.train.objective import output_loss


class _Forward(nn.Module):
    """student + auxiliary: the loss of some rows, and what the auxiliary's hook needs."""

    def __init__(self, model, objective, arrays):
        super().__init__()
        self.model = model
        self.auxiliary = objective.auxiliary
        self.objective = objective
        self.arrays = arrays
        self.hidden = bool(self.auxiliary is not None and self.auxiliary.student_layers)

    def forward(self, encoded, index: np.ndarray, device):
        batch = encoded.batch(index, device)
        out = self.model(**batch, output_hidden_states=self.hidden)
        rows_batch = self.arrays(index, device)
        if self.auxiliary is not None:  # before the output-level term, which may read what it adds (rl-kd's targets)
            rows_batch.update(self.auxiliary.batch(index, device))
        loss = output_loss(self.objective, out.logits, rows_batch, self.arrays.weights(index, device))
        view = None
        if self.auxiliary is not None:
            view = StudentView(out.logits, out.hidden_states if self.hidden else None, batch["attention_mask"])
            loss = loss + self.auxiliary(view, rows_batch).mean()
        return loss, view, rows_batch


class TrainStep:
    def __init__(self, model, objective, arrays, world, device):
        self.world = world
        self.forward = _Forward(model, objective, arrays)
        self.runner = self.forward
        if world.distributed:
            from torch.nn.parallel import DistributedDataParallel

            self.runner = DistributedDataParallel(
                self.forward, device_ids=[device.index] if device.type == "cuda" else None,
                find_unused_parameters=objective.auxiliary is not None)

    def __call__(self, encoded, index: np.ndarray, stop_requested):
        """(loss to backpropagate, view, rows_batch, the batch's mean loss, stop_now())."""
        if not self.world.distributed:
            loss, view, rows_batch = self.forward(encoded, index, self.device_of())
            return loss, view, rows_batch, loss.item(), stop_requested
        from kamalcli.distributed import lost_rank_guard

        mine = np.array_split(index, self.world.size)[self.world.rank]
        share = len(mine) / len(index)
        if len(mine) == 0:  # fewer rows than processes: a weightless row keeps this rank in step
            mine = index[:1]
        with lost_rank_guard():
            loss, view, rows_batch = self.runner(encoded, mine, self.device_of())
        total, stop = self.world.all_sum([loss.item() * share, float(stop_requested())])
        agreed = stop > 0
        return loss * (share * self.world.size), view, rows_batch, total, lambda: agreed

    def backward(self, loss) -> None:
        if not self.world.distributed:
            loss.backward()
            return
        from kamalcli.distributed import lost_rank_guard

        with lost_rank_guard():
            loss.backward()

    def rng_states(self) -> list | None:
        """Every rank's random state (a collective: every rank calls it at the same step); None on one process."""
        if not self.world.distributed:
            return None
        state = {"cpu": torch.get_rng_state()}
        if self.device_of().type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device_of())
        return self.world.all_gather(state)

    def device_of(self) -> torch.device:
        return next(self.forward.model.parameters()).device
