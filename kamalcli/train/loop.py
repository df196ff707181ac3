"""The one training loop. Every method, the supervised baseline and train-teacher use it.

AdamW with linear warm-up and decay, gradient clipping, a data order that is a
pure function of (seed, epoch), checkpoints every N steps and at the end, model
selection on a Selector, and Ctrl-C that finishes the current step, saves a
checkpoint and stops: `resume=True` then continues bit-for-bit.

A method's Auxiliary (train/objective.py) is wrapped with the student in one
module list: optimised (at its own learning rate if it asks), clipped,
checkpointed and restored with it, and fed the student's hidden states from the
same forward pass.
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
import torch

from kamalcli.batching import Encoded, training_order
from kamalcli.errors import KamalError
from kamalcli.train.objective import BatchArrays, Objective
from kamalcli.train import checkpoint
from kamalcli.train.embeddings import check_mode, embeddings_policy


DEFAULT_STEPS = 600      # the budget when no --epochs is given: the steps, at most, that training may take
DEFAULT_EVAL_EVERY = 50  # ...with the held-out loss measured every this many steps
DEFAULT_PATIENCE = 2     # ...and training stopped after this many measurements without a better one


@dataclass(frozen=True)
class TrainConfig:
    epochs: int | None = None  # None: a budget of `steps` with early stopping on the selector
    steps: int = DEFAULT_STEPS
    eval_every: int = DEFAULT_EVAL_EVERY
    patience: int = DEFAULT_PATIENCE
    batch_size: int = 32
    lr: float = 1e-4
    max_length: int = 128
    warmup: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 200
    embeddings: str = "train"  # or "freeze": the input word embeddings stay as they are (train/embeddings.py)
    device: str = "cpu"

    def validate(self) -> None:
        checks = [
            (self.epochs is None or self.epochs >= 1, f"--epochs must be at least 1 (got {self.epochs})"),
            (self.steps >= 1, f"--steps must be at least 1 (got {self.steps})"),
            (self.eval_every >= 1, f"eval_every must be at least 1 (got {self.eval_every})"),
            (self.patience >= 1, f"patience must be at least 1 (got {self.patience})"),
            (self.batch_size >= 1, f"--batch-size must be at least 1 (got {self.batch_size})"),
            (0 < self.lr < 1, f"--lr must be in (0, 1) (got {self.lr})"),
            (self.max_length >= 2, f"--max-length must be at least 2 (got {self.max_length})"),
            (0 <= self.warmup < 1, f"warmup must be in [0, 1) (got {self.warmup})"),
            (self.grad_clip >= 0, f"grad_clip must be 0 (off) or more (got {self.grad_clip})"),
            (self.checkpoint_every >= 1, f"checkpoint_every must be at least 1 (got {self.checkpoint_every})"),
        ]
        for ok, message in checks:
            if not ok:
                raise KamalError(message)
        check_mode(self.embeddings)

    def as_json(self) -> dict:
        return asdict(self)

    def total_steps(self, steps_per_epoch: int) -> int:
        return steps_per_epoch * self.epochs if self.epochs is not None else self.steps

    @property
    def early_stopping(self) -> bool:
        """With no --epochs, the step budget is a ceiling: training stops once the selector stops improving."""
        return self.epochs is None


def stale_measurements(history: list[dict], best_step: int | None) -> int:
    """How many selector measurements came after the best one (early stopping counts them)."""
    return sum(1 for h in history if best_step is not None and h["step"] > best_step)


class Selector(Protocol):
    """Model selection: a figure measured on held-out data (higher or lower is better)."""

    name: str
    higher_is_better: bool

    def measure(self, model: torch.nn.Module) -> float: ...


@dataclass
class TrainState:
    step: int = 0
    best_metric: float | None = None
    best_step: int | None = None
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class TrainResult:
    steps: int
    epochs: float
    seconds: float
    examples_per_second: float
    best_step: int | None
    best_metric: float | None
    selected_by: str | None
    history: list[dict]
    stopped_early: bool = False
    embeddings_frozen: bool = False

    @property
    def embeddings(self) -> str:
        """What runs and students record."""
        return "frozen" if self.embeddings_frozen else "trained"


class StopRequested(KeyboardInterrupt):
    """Ctrl-C arrived; the loop saved a checkpoint at a step boundary."""


@contextlib.contextmanager
def _deferred_interrupt():
    """First Ctrl-C sets a flag the loop checks between steps; a second one stops at once."""
    flag = {"stop": False}
    if threading.current_thread() is not threading.main_thread():
        yield lambda: flag["stop"]
        return

    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        flag["stop"] = True
        signal.signal(signal.SIGINT, previous if callable(previous) else signal.default_int_handler)

    signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: flag["stop"]
    finally:
        signal.signal(signal.SIGINT, previous)


def _parameter_groups(model: torch.nn.Module, weight_decay: float, lr: float) -> list[dict]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay, "lr": lr}, {"params": no_decay, "weight_decay": 0.0, "lr": lr}]
    return [g for g in groups if g["params"]]


def make_optimizer(model: torch.nn.Module, auxiliary, config: "TrainConfig") -> torch.optim.Optimizer:
    groups = _parameter_groups(model, config.weight_decay, config.lr)
    if auxiliary is not None:
        groups += _parameter_groups(auxiliary, config.weight_decay, auxiliary.lr or config.lr)
    try:  # one fused kernel per step: the same AdamW, several times faster on a CPU for a large vocabulary
        return torch.optim.AdamW(groups, lr=config.lr, fused=True)
    except (RuntimeError, ValueError):  # torch before 2.4 fuses on CUDA only; other devices not at all
        return torch.optim.AdamW(groups, lr=config.lr)


def linear_schedule(total: int, warmup_steps: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total - step) / max(1, total - warmup_steps))

    return factor


def _with_embeddings_policy(train_fn):
    """Freeze the word embeddings for the run where the config asks (train/embeddings.py), and say so."""
    @functools.wraps(train_fn)
    def wrapper(model, encoded, objective, config, workdir, **kwargs):
        config.validate()
        with embeddings_policy(model, config.embeddings) as frozen:
            result = train_fn(model, encoded, objective, config, workdir, **kwargs)
        result.embeddings_frozen = frozen
        return result

    return wrapper


@_with_embeddings_policy
def train(
    model: torch.nn.Module,
    encoded: Encoded,
    objective: Objective,
    config: TrainConfig,
    workdir: Path,
    *,
    rows: np.ndarray | None = None,
    selector: Selector | None = None,
    resume: bool = False,
    on_step: Callable[[int], None] | None = None,
    on_loss: Callable[[int, float], None] | None = None,
    description: str = "train",
    world: "World | None" = None,  # noqa: F821
) -> TrainResult:
    """Train in place; at the end the model holds the selected (best) weights.

    on_loss(step, loss) hears every step's training loss (kamalcli/loss_history.py records it).
    With a world of several processes (kamalcli/distributed.py) each rank takes its share of every
    batch under DistributedDataParallel (train/data_parallel.py); rank 0 alone selects and checkpoints.
    """
    from kamalcli.distributed import SINGLE
    from kamalcli.progress import progress_bar
    from kamalcli.train.data_parallel import TrainStep

    world = world or SINGLE

    rows = np.arange(len(encoded)) if rows is None else np.asarray(rows)
    if len(rows) == 0:
        raise KamalError("no rows to train on")
    device = torch.device(config.device)
    model.to(device)
    auxiliary = objective.auxiliary
    if auxiliary is not None:
        auxiliary.to(device)
        auxiliary.train()
    optimizer = make_optimizer(model, auxiliary, config)
    clipped = [p for g in optimizer.param_groups for p in g["params"]]
    steps_per_epoch = math.ceil(len(rows) / config.batch_size)
    total = config.total_steps(steps_per_epoch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(total, int(config.warmup * total)))
    train_step = TrainStep(model, objective, BatchArrays(objective), world, device)

    workdir.mkdir(parents=True, exist_ok=True)
    state = TrainState()
    if resume:
        state = checkpoint.load(workdir, model, optimizer, scheduler, config, auxiliary, rank=world.rank,
                                processes=world.size)
        if state.step >= total:
            raise KamalError("that run had already finished training; nothing to resume")
    else:
        torch.manual_seed(config.seed + world.rank)  # dropout masks

    def save() -> None:
        rng = train_step.rng_states()  # every rank's, so that the same number of processes resumes bit for bit
        if world.main:
            checkpoint.save(workdir, model, optimizer, scheduler, state, config, auxiliary, rank_rng=rng)

    def select() -> None:
        if selector is None:
            return
        metric = selector.measure(model)
        model.train()
        if auxiliary is not None:
            auxiliary.train()
        state.history.append({"step": state.step, selector.name: metric})
        better = state.best_metric is None or (
            metric > state.best_metric if selector.higher_is_better else metric < state.best_metric
        )
        if better:
            state.best_metric, state.best_step = metric, state.step
            checkpoint.save_weights(model, workdir / checkpoint.BEST)

    model.train()
    smoothed = None
    started = time.perf_counter() - state.seconds
    examples_before = state.step * config.batch_size
    order_epoch, order = None, rows
    stopped_early = False
    planned = len(rows) * config.epochs if config.epochs is not None else total * config.batch_size
    with _deferred_interrupt() as stop_requested, progress_bar(
        planned, description, completed=min(examples_before, planned), show=world.main,
    ) as bar:
        while state.step < total:
            epoch, offset = divmod(state.step, steps_per_epoch)
            if epoch != order_epoch:
                order_epoch, order = epoch, rows[training_order(len(rows), config.seed, epoch)]
            index = order[offset * config.batch_size : (offset + 1) * config.batch_size]
            loss, view, rows_batch, value, stop_now = train_step(encoded, index, stop_requested)
            if not math.isfinite(value):
                raise KamalError(f"the loss became {value} at step {state.step + 1}; lower --lr")
            optimizer.zero_grad(set_to_none=True)
            train_step.backward(loss)
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(clipped, config.grad_clip)
            optimizer.step()
            scheduler.step()
            state.step += 1
            if auxiliary is not None:
                auxiliary.after_step(state.step, view, rows_batch)
            state.seconds = time.perf_counter() - started
            smoothed = value if smoothed is None else 0.9 * smoothed + 0.1 * value
            bar.advance(len(index), loss=smoothed)
            if on_loss is not None:
                on_loss(state.step, value)
            boundary = state.step % steps_per_epoch == 0 or state.step == total
            if config.early_stopping:
                measure = state.step % config.eval_every == 0 or state.step == total
            else:
                measure = state.step % config.checkpoint_every == 0 or boundary
            if measure:
                select()
            if measure or state.step % config.checkpoint_every == 0 or boundary:
                save()
            if config.early_stopping and measure:  # only a measurement can make the selector's history stale
                early = (selector is not None and state.step < total
                         and stale_measurements(state.history, state.best_step) >= config.patience)
                if world.distributed:
                    early = world.broadcast(early)  # rank 0 alone measures: every rank stops after the same step
                if early:
                    stopped_early = True
                    break
            if on_step is not None:
                try:
                    on_step(state.step)
                except KeyboardInterrupt:
                    save()
                    raise StopRequested() from None
            if stop_now() and state.step < total:
                save()
                raise StopRequested()

    if selector is not None and state.best_step is not None:
        checkpoint.load_weights(model, workdir / checkpoint.BEST)
    seconds = state.seconds
    trained_examples = state.step * config.batch_size if config.early_stopping else config.epochs * len(rows)
    return TrainResult(
        steps=state.step,
        epochs=config.epochs if config.epochs is not None else round(state.step / steps_per_epoch, 2),
        seconds=seconds,
        examples_per_second=trained_examples / max(seconds, 1e-9),
        best_step=state.best_step,
        best_metric=state.best_metric,
        selected_by=selector.name if selector else None,
        history=state.history,
        stopped_early=stopped_early,
    )
