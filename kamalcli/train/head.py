"""`--fit head`: train a classifier's head alone, on its frozen encoder's cached first-token states.

A pretrained sentence encoder's first-token state already separates the classes of most text sets; a head
on it learns a method's targets in seconds where fine-tuning the encoder takes minutes, and cannot bend the
encoder to the targets' mistakes. The head is the classifier's own (kamalcli/models/heads.py), trained in
place, so the student saves, exports and predicts as any other. `head-then-all` then fine-tunes everything
from that head (LP-FT, Kumar et al. 2022: a fitted head keeps the first steps from distorting the encoder).

The head has a budget of its own: at each of RATES, EPOCHS passes at most (a pass over cached states takes a
fraction of a second), stopping once PATIENCE passes in a row brought no better selector figure; the best pass of
the best rate is kept. --epochs and --steps budget fine-tuning: `--fit all`, or the second stage of `head-then-all`.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.train.objective import BatchArrays, Objective, output_loss
from kamalcli.train.result import TrainResult

if TYPE_CHECKING:  # check_fit runs before any model is loaded: torch stays out until a head trains
    import torch

    from kamalcli.models.batching import Encoded

FITS = ("all", "head", "head-then-all")
# The rate is chosen like the pass: by the selector's figure (label-free by default). A head that holds a
# pretrained layer (BERT's pooler) can lose it at a rate a plain linear head takes in its stride.
RATES = (3e-4, 1e-3, 3e-3, 1e-2)
FALLBACK_RATE = 1e-3  # no selector (too few rows for a held-out slice): one rate
EPOCHS = 50        # at most, at each rate
PATIENCE = 5       # epochs without a better selector figure before training stops


def check_fit(fit: str) -> None:
    if fit not in FITS:
        raise KamalError(f"fit must be one of {', '.join(FITS)} (got {fit!r})")


def train_head(model: "torch.nn.Module", encoded: "Encoded", objective: Objective, config, *, rows: np.ndarray,
               selector=None, states: np.ndarray | None = None, say_progress: bool = True) -> TrainResult:
    """Train the model's head in place on its encoder's states of every row (rows: the ones it learns from);
    at the end the model holds the selected head. config: the loop's TrainConfig; selector: its Selector;
    states: those states when the caller has them (a workspace cache of the frozen base's), else computed here."""
    from kamalcli.models.heads import head_of
    from kamalcli.models.inference import first_token_states

    if objective.auxiliary is not None:
        raise KamalError("--fit head trains the head on cached encoder states; this method also trains on the "
                         "student's hidden states: use --fit all")
    head = head_of(model)
    started = time.perf_counter()
    model.to(config.device)
    if states is None:
        states = first_token_states(model, encoded, device=config.device, say_progress=say_progress)
    else:
        import torch

        if states.shape != (len(encoded), model.config.hidden_size):
            raise KamalError(f"internal: {states.shape} cached encoder states for {len(encoded)} rows")
        states = torch.from_numpy(np.array(states, dtype=np.float32))  # a copy: the cache is a read-only memory map
    states = states.to(config.device)
    arrays = BatchArrays(objective)
    measure = _measure(selector, model, head, states, objective, arrays, config.device)
    initial = [copy.deepcopy(m.state_dict()) for m in head.modules]
    fits = [_fit(head, initial, states, arrays, objective, config, rows, rate, measure) for rate in
            (RATES if measure is not None else (FALLBACK_RATE,))]
    chosen = fits[0]
    for fit in fits[1:]:  # more than one only with a measure
        if measure.better(fit.best, chosen.best):
            chosen = fit
    for module, state in zip(head.modules, chosen.weights):
        module.load_state_dict(state)
    model.eval()
    seconds = time.perf_counter() - started
    trained = sum(f.epochs for f in fits) * len(rows)
    return TrainResult(steps=chosen.steps, epochs=chosen.epochs, seconds=seconds,
                      examples_per_second=trained / max(seconds, 1e-9), best_step=chosen.best_step,
                      best_metric=chosen.best, selected_by=selector.name if measure is not None else None,
                      history=[entry for f in fits for entry in f.history], stopped_early=chosen.epochs < EPOCHS,
                      encoder_states=states.cpu())


@dataclass
class _Fit:
    """One rate's training: its best weights, and where and how well it got there."""
    weights: list
    best: float | None
    best_step: int | None
    steps: int
    epochs: int
    history: list[dict]


def _fit(head, initial, states, arrays, objective, config, rows, rate: float, measure) -> _Fit:
    """The head from its initial weights at one rate: up to EPOCHS passes, the best measured pass kept."""
    import torch

    from kamalcli.models.batching import training_order

    for module, state in zip(head.modules, initial):
        module.load_state_dict(state)
    optimizer = torch.optim.AdamW(head.parameters(), lr=rate, weight_decay=config.weight_decay)
    torch.manual_seed(config.seed)  # dropout masks
    history, best, weights, best_step, step, stale = [], None, None, None, 0, 0
    for epoch in range(EPOCHS):
        for module in head.modules:
            module.train()
        order = rows[training_order(len(rows), config.seed, epoch)]
        for start in range(0, len(order), config.batch_size):
            index = order[start:start + config.batch_size]
            loss = output_loss(objective, head.logits(states[torch.as_tensor(index)]), arrays(index, config.device),
                               arrays.weights(index, config.device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(head.parameters(), config.grad_clip)
            optimizer.step()
            step += 1
        if measure is None:
            continue
        figure = measure()
        history.append({"rate": rate, "step": step, "epoch": epoch + 1, measure.name: figure})
        if best is None or measure.better(figure, best):
            best, weights, best_step, stale = figure, [copy.deepcopy(m.state_dict()) for m in head.modules], step, 0
        else:
            stale += 1
            if stale >= PATIENCE:
                break
    if weights is None:  # nothing measured: the last pass
        weights = [copy.deepcopy(m.state_dict()) for m in head.modules]
    return _Fit(weights, best, best_step, step, epoch + 1, history)


def _measure(selector, model, head, states, objective, arrays, device):
    """The selector's figure: the held-out transfer loss on the cached states (what HeldOutLoss measures with a
    forward pass, without one); any other selector measures the whole model."""
    import torch

    from kamalcli.train.evaluate import HeldOutLoss

    if selector is None:
        return None
    if not isinstance(selector, HeldOutLoss):
        return _Measure(lambda: selector.measure(model), selector.name, selector.higher_is_better)
    rows = selector.rows

    def held_out_loss() -> float:
        model.eval()
        with torch.no_grad():
            logits = head.logits(states[torch.as_tensor(rows)])
            return float(output_loss(objective, logits, arrays(rows, device), arrays.weights(rows, device)))

    return _Measure(held_out_loss, selector.name, higher_is_better=False)


@dataclass(frozen=True)
class _Measure:
    figure: object  # () -> float
    name: str
    higher_is_better: bool

    def __call__(self) -> float:
        return self.figure()

    def better(self, figure: float, than: float) -> bool:
        return figure > than if self.higher_is_better else figure < than
