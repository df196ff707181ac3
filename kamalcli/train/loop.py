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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Protocol

import numpy as np
import torch

from kamalcli.models.batching import Encoded, training_order
from kamalcli.errors import KamalError, StopRequested
from kamalcli.settings import TRAIN, WORKSPACE
from kamalcli.train.objective import BatchArrays, Objective
from kamalcli.train import checkpoint
from kamalcli.train.checkpoint import TrainState
from kamalcli.train.embeddings import check_mode, embeddings_policy
from kamalcli.train.head import check_fit, train_head
from kamalcli.train.result import TrainResult


# The defaults are kamal.toml's [train] settings (kamalcli/settings.py).
DEFAULT_STEPS = TRAIN.steps            # the budget when no --epochs is given: the steps, at most, that training may take
DEFAULT_EVAL_EVERY = TRAIN.eval_every  # ...with the held-out loss measured every this many steps
DEFAULT_PATIENCE = TRAIN.patience      # ...and training stopped after this many measurements without a better one


SAY_EXPECTED_FROM_S = 60.0  # a training expected to take less does not say how long it will take
MEASURE_STEPS, MEASURE_SECONDS = 3, 10.0  # the expected time is measured on this many steps, or this long


@dataclass(frozen=True)
class TrainConfig:
    epochs: int | None = TRAIN.epochs  # None: a budget of `steps` with early stopping on the selector
    steps: int = TRAIN.steps
    eval_every: int = TRAIN.eval_every
    patience: int = TRAIN.patience
    batch_size: int = TRAIN.batch_size
    lr: float = TRAIN.lr
    max_length: int = TRAIN.max_length
    warmup: float = TRAIN.warmup
    weight_decay: float = TRAIN.weight_decay
    grad_clip: float = TRAIN.grad_clip
    seed: int = WORKSPACE.seed
    checkpoint_every: int = TRAIN.checkpoint_every
    embeddings: str = TRAIN.embeddings  # or "freeze": the input word embeddings stay as they are (train/embeddings.py)
    fit: str = TRAIN.fit                # or "head", "head-then-all": the head first, on cached states (train/head.py)
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
        check_fit(self.fit)

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


class Due(NamedTuple):
    """What falls due after a step."""
    measure: bool  # run the selector
    save: bool  # write a checkpoint
    stop_check: bool  # ask whether training stops early (only a measurement can make the history stale)


def due(step: int, total: int, steps_per_epoch: int, config: TrainConfig) -> Due:
    """The measure/save/stop schedule after `step` (1-based): a pure function of the step and the config.

    With early stopping the selector runs every eval_every steps; with --epochs at every checkpoint and
    epoch boundary. A checkpoint follows every measurement, every checkpoint_every steps and every boundary.
    """
    boundary = step % steps_per_epoch == 0 or step == total
    if config.early_stopping:
        measure = step % config.eval_every == 0 or step == total
    else:
        measure = step % config.checkpoint_every == 0 or boundary
    save = measure or step % config.checkpoint_every == 0 or boundary
    return Due(measure, save, config.early_stopping and measure)


@dataclass
class _Run:
    """One run's moving parts, between steps: what the loop's steps read and update."""
    model: torch.nn.Module
    auxiliary: object
    optimizer: torch.optim.Optimizer
    scheduler: object
    clipped: list
    train_step: "TrainStep"  # noqa: F821
    state: TrainState
    config: TrainConfig
    workdir: Path
    world: "World"  # noqa: F821
    selector: Selector | None
    steps_per_epoch: int
    total: int

    def save(self) -> None:
        rng = self.train_step.rng_states()  # every rank's, so that the same number of processes resumes bit for bit
        if self.world.main:
            checkpoint.save(self.workdir, self.model, self.optimizer, self.scheduler, self.state, self.config,
                            self.auxiliary, rank_rng=rng)

    def select(self) -> None:
        """Measure the selector; a better figure than any before is saved as the best weights."""
        selector, state = self.selector, self.state
        if selector is None:
            return
        metric = selector.measure(self.model)
        self.model.train()
        if self.auxiliary is not None:
            self.auxiliary.train()
        state.history.append({"step": state.step, selector.name: metric})
        better = state.best_metric is None or (
            metric > state.best_metric if selector.higher_is_better else metric < state.best_metric
        )
        if better:
            state.best_metric, state.best_step = metric, state.step
            checkpoint.save_weights(self.model, self.workdir / checkpoint.BEST)

    def step(self, encoded: Encoded, index: np.ndarray, stop_requested) -> tuple[float, Callable[[], bool]]:
        """One optimiser step on the rows `index`: (the batch's mean loss, stop_now())."""
        loss, view, rows_batch, value, stop_now = self.train_step(encoded, index, stop_requested)
        if not math.isfinite(value):
            raise KamalError(f"the loss became {value} at step {self.state.step + 1}; lower --lr")
        self.optimizer.zero_grad(set_to_none=True)
        self.train_step.backward(loss)
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.clipped, self.config.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.state.step += 1
        if self.auxiliary is not None:
            self.auxiliary.after_step(self.state.step, view, rows_batch)
        return value, stop_now

    def stops_early(self) -> bool:
        """Patience spent on the selector; the same answer on every rank."""
        state = self.state
        early = (self.selector is not None and state.step < self.total
                 and stale_measurements(state.history, state.best_step) >= self.config.patience)
        if self.world.distributed:
            early = self.world.broadcast(early)  # rank 0 alone measures: every rank stops after the same step
        return early

    def hand_back(self, on_step: Callable[[int], None] | None, stop_now: Callable[[], bool]) -> None:
        """The caller's on_step, then a requested stop: either way a checkpoint, then StopRequested."""
        if on_step is not None:
            try:
                on_step(self.state.step)
            except KeyboardInterrupt:
                self.save()
                raise StopRequested() from None
        if stop_now() and self.state.step < self.total:
            self.save()
            raise StopRequested()


def _start(model: torch.nn.Module, objective: Objective, config: TrainConfig, workdir: Path, world,
           rows: np.ndarray, selector: Selector | None, resume: bool) -> _Run:
    """Model and auxiliary on the device, optimiser and schedule, and the state: fresh, or a checkpoint's."""
    from kamalcli.train.data_parallel import TrainStep

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
    if resume:  # a run stopped after its training ended (saving the student, say) goes straight to its result
        state = checkpoint.load(workdir, model, optimizer, scheduler, config, auxiliary, rank=world.rank,
                                processes=world.size)
    else:
        torch.manual_seed(config.seed + world.rank)  # dropout masks
    return _Run(model, auxiliary, optimizer, scheduler, clipped, train_step, state, config, workdir, world,
                selector, steps_per_epoch, total)


class _BatchOrder:
    """The rows of each step's batch: a pure function of (seed, epoch, step), each epoch's shuffle computed once."""

    def __init__(self, rows: np.ndarray, config: TrainConfig, steps_per_epoch: int):
        self.rows, self.config, self.steps_per_epoch = rows, config, steps_per_epoch
        self.epoch, self.order = None, rows

    def batch(self, step: int) -> np.ndarray:
        epoch, offset = divmod(step, self.steps_per_epoch)
        if epoch != self.epoch:
            self.epoch, self.order = epoch, self.rows[training_order(len(self.rows), self.config.seed, epoch)]
        size = self.config.batch_size
        return self.order[offset * size : (offset + 1) * size]


class ExpectedTime:
    """How long the run will take, said once: the median time of the steps after this process's first (which
    warms up), once MEASURE_STEPS of them are done or MEASURE_SECONDS have passed, times the steps left (the
    median: another warm-up step or a busy moment does not scale the whole estimate). Only the main process
    says it; a run expected to end within SAY_EXPECTED_FROM_S says nothing."""

    def __init__(self, total: int, first_step: int, early_stopping: bool, at: float):
        self.total, self.first_step, self.early_stopping, self.started = total, first_step, early_stopping, at
        self.warm: float | None = None  # when the first step ended
        self.last: tuple[int, float] | None = None  # (step, time) of the last step heard
        self.durations: list[float] = []
        self.done = False

    def after_step(self, step: int, at: float) -> str | None:
        """The line to say after `step` ended at time `at` (seconds), or None."""
        if self.done:
            return None
        if self.last is None:
            self.warm, self.last = at, (step, at)
            return None
        self.durations.append((at - self.last[1]) / (step - self.last[0]))
        self.last = (step, at)
        if len(self.durations) < MEASURE_STEPS and at - self.warm < MEASURE_SECONDS:
            return None
        self.done = True
        expected = at - self.started + float(np.median(self.durations)) * (self.total - step)
        if expected < SAY_EXPECTED_FROM_S:
            return None
        sooner = " (early stopping may end sooner)" if self.early_stopping else ""
        return f"about {_duration(expected)} for up to {self.total - self.first_step} steps{sooner}"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _steps(run: _Run, encoded: Encoded, rows: np.ndarray, description: str,
           on_step: Callable[[int], None] | None, on_loss: Callable[[int, float], None] | None) -> bool:
    """Step until the budget is spent or early stopping says so (True), under a progress bar and Ctrl-C."""
    from kamalcli.progress import progress_bar

    config, state = run.config, run.state
    if state.step >= run.total:  # resumed after its training had ended
        return False
    if run.stops_early():  # resumed after early stopping had ended it: not a step more than the run took
        return True
    run.model.train()
    smoothed = None
    started = time.perf_counter() - state.seconds
    examples_before = state.step * config.batch_size
    order = _BatchOrder(rows, config, run.steps_per_epoch)
    planned = len(rows) * config.epochs if config.epochs is not None else run.total * config.batch_size
    expected = ExpectedTime(run.total, state.step, config.early_stopping and run.selector is not None,
                            time.perf_counter())
    with _deferred_interrupt() as stop_requested, progress_bar(
        planned, description, completed=min(examples_before, planned), show=run.world.main,
    ) as bar:
        while state.step < run.total:
            index = order.batch(state.step)
            value, stop_now = run.step(encoded, index, stop_requested)
            state.seconds = time.perf_counter() - started
            smoothed = value if smoothed is None else 0.9 * smoothed + 0.1 * value
            bar.advance(len(index), loss=smoothed)
            line = expected.after_step(state.step, time.perf_counter())
            if line is not None and run.world.main:
                bar.say(line)
            if on_loss is not None:
                on_loss(state.step, value)
            when = due(state.step, run.total, run.steps_per_epoch, config)
            if when.measure:
                run.select()
            if when.save:
                run.save()
            if when.stop_check and run.stops_early():
                return True
            run.hand_back(on_step, stop_now)
    return False


def _result(run: _Run, rows: np.ndarray, stopped_early: bool) -> TrainResult:
    """The selected (best) weights back in the model, and the run's figures."""
    config, state, selector = run.config, run.state, run.selector
    if selector is not None and state.best_step is not None:
        checkpoint.load_weights(run.model, run.workdir / checkpoint.BEST)
    seconds = state.seconds
    trained_examples = state.step * config.batch_size if config.early_stopping else config.epochs * len(rows)
    return TrainResult(
        steps=state.step,
        epochs=config.epochs if config.epochs is not None else round(state.step / run.steps_per_epoch, 2),
        seconds=seconds,
        examples_per_second=trained_examples / max(seconds, 1e-9),
        best_step=state.best_step,
        best_metric=state.best_metric,
        selected_by=selector.name if selector else None,
        history=state.history,
        stopped_early=stopped_early,
    )


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
    head_states: np.ndarray | None = None,
) -> TrainResult:
    """Train in place; at the end the model holds the selected (best) weights.

    on_loss(step, loss) hears every step's training loss (kamalcli/train/loss_history.py records it).
    With a world of several processes (kamalcli/distributed.py) each rank takes its share of every
    batch under DistributedDataParallel (train/data_parallel.py); rank 0 alone selects and checkpoints.
    head_states: with --fit head or head-then-all, the encoder's first-token states of every row if the caller
    has them cached (train/head.py).
    """
    from kamalcli.distributed import SINGLE

    world = world or SINGLE
    rows = np.arange(len(encoded)) if rows is None else np.asarray(rows)
    if len(rows) == 0:
        raise KamalError("no rows to train on")
    head = None
    if config.fit != "all" and not (resume and checkpoint.exists(workdir)):  # a resumed run has its head
        if world.size > 1:
            raise KamalError(f"--fit {config.fit} runs on one process; run it without --nproc or torchrun")
        head = train_head(model, encoded, objective, config, rows=rows, selector=selector, states=head_states)
        if config.fit == "head":
            return head
    run = _start(model, objective, config, workdir, world, rows, selector, resume)
    stopped_early = _steps(run, encoded, rows, description, on_step, on_loss)
    result = _result(run, rows, stopped_early)
    if head is not None:
        result.seconds += head.seconds
    return result
