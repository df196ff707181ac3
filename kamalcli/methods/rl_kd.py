"""rl-kd: reinforced teacher selection (Yuan et al., AAAI 2021), and kamal's label-free variant.

Each row's state s = [R(x), p_1..p_N, e_1..e_N] (columns standardised over the
transfer rows): R(x) a frozen, not fine-tuned encoder's [CLS] vector (cached),
p_i teacher i's probabilities, e_i = CE(y, p_i) with gold labels (the paper) or
teacher i's probe confidence c_i (label-free). A logistic policy per teacher
(teacher_policy.py) samples select/skip; the row learns from the average of the
selected teachers' distributions at temperature T (padded into the union label
space). A row with no teacher selected learns from the teacher the policy
rates most likely (empty=best), from all teachers (empty=all), or from no
teacher (empty=skip: gold CE only, or nothing without labels).

Per row:  labels=true:  alpha * KL(target || q) + (1 - alpha) * CE(y, q)
          label-free:   KL(target || q)                (KL at T, times T^2)

Phases: (1) the student learns from the average of all teachers; (2) the
policy learns with the student fixed (reward: how well the selected average
fits gold, or the reference target); (3) per batch, the policy samples, the
student takes its step, then the policy takes one REINFORCE step on the
batch's delayed reward, measured on the updated student:
    r1 = -CE, r2 = -CE - DL (on the batch), r3 = gamma * r2 + (1 - gamma) * accuracy on a held-out batch,
    agreement (label-free) = -KL(reference || q) on a held-out batch,
the reference being muki-hard's target: the teacher with the highest probe confidence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kamalcli.errors import KamalError
from kamalcli.methods.base import FeatureContext, Objective, gold_over_one_label_set
from kamalcli.methods.feature_options import RLKDOptions
from kamalcli.methods.losses import cross_entropy, kl_to_target
from kamalcli.methods.teacher_policy import TeacherPolicy
from kamalcli.train.auxiliary import Auxiliary


def selected_average(padded: torch.Tensor, actions: torch.Tensor, probs: torch.Tensor, empty: str) -> torch.Tensor:
    """(N, B, Y) teacher distributions, (B, N) actions -> (B, Y): the selected teachers' mean.

    Rows with nothing selected: empty=best takes the most probable teacher, all takes every teacher,
    skip leaves the row's target at zero (KL to a zero target is 0: no distillation term)."""
    actions = actions.to(padded.dtype)
    none = actions.sum(dim=1) == 0
    if empty == "best":
        actions = torch.where(none[:, None], torch.nn.functional.one_hot(probs.argmax(dim=1), actions.shape[1])
                              .to(actions.dtype), actions)
    elif empty == "all":
        actions = torch.where(none[:, None], torch.ones_like(actions), actions)
    total = torch.einsum("bn,nby->by", actions, padded)
    return total / actions.sum(dim=1, keepdim=True).clamp(min=1.0)


def standardise(columns: np.ndarray) -> np.ndarray:
    """Each column to mean 0, standard deviation 1 (constant columns to 0): R(x) coordinates, probabilities
    and losses live on different scales, and the logistic policy takes one learning rate for all."""
    columns = columns.astype(np.float64)
    std = columns.std(axis=0)
    return ((columns - columns.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)


def per_row_loss(labels: bool, alpha: float, temperature: float):
    def loss(logits, batch):
        distil = kl_to_target(logits, batch["target"], temperature)
        if not labels:
            return distil
        return alpha * distil + (1 - alpha) * cross_entropy(logits, batch["gold"])

    return loss


@dataclass
class Reward:
    """The batch's delayed reward, measured on the student after its step (eval mode, no gradient)."""

    kind: str                       # r1, r2, r3, agreement
    student: torch.nn.Module
    encoded: object                 # the student's Encoded transfer rows
    gold: torch.Tensor | None       # (n,) union label ids (labels=true)
    reference: torch.Tensor         # (n, Y) the held-out target (label-free: muki-hard's)
    held_out: np.ndarray            # rows for r3's accuracy and the agreement reward
    batch_size: int
    temperature: float
    gamma: float

    def _logits(self, rows: np.ndarray) -> torch.Tensor:
        device = next(self.student.parameters()).device
        was_training = self.student.training
        self.student.eval()
        with torch.no_grad():
            logits = self.student(**self.encoded.batch(rows, device)).logits.float().cpu()
        self.student.train(was_training)
        return logits

    def _held_out_batch(self, generator: torch.Generator) -> np.ndarray:
        picks = torch.randint(len(self.held_out), (min(self.batch_size, len(self.held_out)),), generator=generator)
        return self.held_out[picks.numpy()]

    def __call__(self, index: np.ndarray, target: torch.Tensor, generator: torch.Generator) -> float:
        if self.kind == "agreement":
            rows = self._held_out_batch(generator)
            return -kl_to_target(self._logits(rows), self.reference[rows], self.temperature).mean().item()
        logits = self._logits(index)
        fit = -cross_entropy(logits, self.gold[index]).mean().item()
        if self.kind == "r1":
            return fit
        fit -= kl_to_target(logits, target.cpu(), self.temperature).mean().item()
        if self.kind == "r2":
            return fit
        rows = self._held_out_batch(generator)
        accuracy = (self._logits(rows).argmax(dim=1) == self.gold[rows]).float().mean().item()
        return self.gamma * fit + (1 - self.gamma) * accuracy


class TeacherSelection(Auxiliary):
    """The policy inside the training loop: it chooses each batch's targets and learns after each step.

    It adds no loss of its own: it replaces the batch's "target" with the selected teachers' average."""

    def __init__(self, policy: TeacherPolicy, states: np.ndarray, padded: np.ndarray, empty: str,
                 reward: Reward, classes: np.ndarray, summary=None):
        super().__init__()
        self.summary = summary or (lambda selection: {})  # the figures report() adds (see _selection_report)
        self.policy = policy
        self.states = torch.from_numpy(states)
        self.padded = torch.from_numpy(padded)          # (N, n, Y)
        self.empty, self.reward, self.classes = empty, reward, classes
        teachers, labels = padded.shape[0], padded.shape[2]
        self.counts = torch.zeros(labels, teachers + 1, dtype=torch.int64)  # per class: each teacher, then "none"
        self.rewards = 0.0
        self.updates = 0
        self._episode = None

    def _apply(self, fn, recurse=True):
        return self  # the policy stays on the CPU beside its arrays (it is tiny); targets go to the device per batch

    def choose(self, index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(states, actions, target) for these rows, sampled from the policy."""
        states = self.states[index]
        probabilities = self.policy.probabilities(states)
        actions = self.policy.sample(probabilities)
        target = selected_average(self.padded[:, index], actions, probabilities, self.empty)
        return states, actions, target

    def batch(self, index: np.ndarray, device) -> dict[str, torch.Tensor]:
        states, actions, target = self.choose(index)
        self._episode = (index, states, actions, target)
        classes = torch.as_tensor(self.classes[index])
        none = (actions.sum(dim=1) == 0).long()
        self.counts.index_put_((classes,), torch.cat([actions.long(), none[:, None]], dim=1), accumulate=True)
        return {"target": target.to(device)}

    def forward(self, view, batch) -> torch.Tensor:
        return view.logits.new_zeros(())

    def after_step(self, step, view, batch) -> None:
        index, states, actions, target = self._episode
        reward = self.reward(index, target, self.policy.generator)
        self.policy.reinforce(states, actions, reward)
        self.rewards += reward
        self.updates += 1

    def report(self) -> dict:
        return self.summary(self)

    def extra_state(self) -> dict:
        return {"policy": self.policy.extra_state(), "counts": self.counts.clone(), "rewards": self.rewards,
                "updates": self.updates}

    def load_extra_state(self, state: dict) -> None:
        self.policy.load_extra_state(state["policy"])
        self.counts = state["counts"].clone()
        self.rewards, self.updates = state["rewards"], state["updates"]


def pretrain_policy(selection: TeacherSelection, rows: np.ndarray, epochs: int, batch_size: int, fit) -> list[float]:
    """The policy learns with the student fixed: per batch, reward = fit(rows, selected average).
    Returns the mean reward of each epoch."""
    means = []
    for _ in range(epochs):
        order = rows[torch.randperm(len(rows), generator=selection.policy.generator).numpy()]
        rewards = []
        for start in range(0, len(order), batch_size):
            index = order[start:start + batch_size]
            states, actions, target = selection.choose(index)
            rewards.append(fit(index, target))
            selection.policy.reinforce(states, actions, rewards[-1])
        means.append(float(np.mean(rewards)))
    return means


FLOOR = 1e-6  # a selected average with no mass where the reference has some: a large, finite penalty


def selection_fit(gold: torch.Tensor | None, reference: torch.Tensor):
    """The policy's pre-training reward for a batch, the student fixed: how well the selected average fits
    gold, -CE(y, target), or without labels the reference target, -KL(reference || target)."""
    def fit(index: np.ndarray, target: torch.Tensor) -> float:
        target = target.clamp(min=FLOOR)
        if gold is not None:
            return torch.log(target[torch.arange(len(index)), gold[index]]).mean().item()
        ref = reference[index]
        return -(torch.xlogy(ref, ref) - torch.xlogy(ref, target)).sum(dim=1).mean().item()

    return fit


def _state_columns(context: FeatureContext, options: RLKDOptions, gold: np.ndarray | None) -> np.ndarray:
    outputs = context.outputs
    source = options.encoder or context.base
    if source is None:
        raise KamalError("rl-kd needs an encoder for R(x): --option encoder=BASE")
    represent = np.asarray(context.sources.cls_vectors(str(source)), dtype=np.float32)
    probs = [outputs.probs(i) for i in range(len(outputs.teachers))]
    if gold is not None:
        rows = np.arange(outputs.num_rows)
        last = np.stack([-np.log(np.clip(p[rows, gold], 1e-30, None)) for p in probs], axis=1)  # CE_i
    else:
        last = outputs.score(options.score)                                                  # c_i
    return standardise(np.concatenate([represent, *probs, last], axis=1))


def build_rl_kd(context: FeatureContext, options: RLKDOptions) -> Objective:
    from kamalcli.methods.muki import hard_target

    outputs = context.outputs
    N, T = len(outputs.teachers), options.temperature
    if N < 2:
        raise KamalError("rl-kd selects among teachers and needs at least two")
    if context.student is None or context.phases is None:
        raise KamalError("internal: rl-kd needs the student and the run's training phases")
    gold = gold_over_one_label_set(context, "rl-kd") if options.labels else None
    padded = np.stack([outputs.padded(i, T) for i in range(N)]).astype(np.float32)     # (N, n, Y)
    average = padded.mean(axis=0)
    reference = average if gold is not None else hard_target(padded, outputs.score(options.score))
    states = _state_columns(context, options, gold)
    train_rows = context.train_rows if context.train_rows is not None else np.arange(outputs.num_rows)
    held_out = context.held_out if context.held_out is not None and len(context.held_out) else train_rows
    if options.chosen_reward in ("r3", "agreement") and held_out is train_rows:
        context.say("rl-kd: no held-out rows (few rows, or --select-by eval:NAME): the reward's held-out batch "
                    "is drawn from the training rows.")
    loss = per_row_loss(gold is not None, options.alpha, T)
    arrays = {"target": reference.astype(np.float32)}
    if gold is not None:
        arrays["gold"] = gold
    encoded = context.sources.student_encoding

    # 1. the student learns from the average of all teachers
    if options.pretrain_epochs:
        pretrain = Objective({**arrays, "target": average}, loss)
        if context.phases.run("average", context.student, encoded, pretrain, epochs=options.pretrain_epochs,
                              rows=train_rows):
            context.say(f"rl-kd: the student pre-trained on the average of all {N} teachers.")

    # 2. the policy learns with the student fixed
    policy = TeacherPolicy(states.shape[1], N, options.policy_lr, options.baseline_decay, context.seed)
    gold_t = torch.from_numpy(gold) if gold is not None else None
    reference_t = torch.from_numpy(reference.astype(np.float32))
    reward = Reward(options.chosen_reward, context.student, encoded, gold_t, reference_t, held_out,
                    context.batch_size, T, options.gamma)
    classes = gold if gold is not None else _classes(context, reference)
    info = {"variant": "paper (gold labels)" if gold is not None else "kamal label-free",
            "reward": options.chosen_reward}
    selection = TeacherSelection(policy, states, padded, options.empty, reward, classes,
                                 lambda s: {**info, **_selection_report(s, outputs, context.gold, options)})
    fit = selection_fit(gold_t, reference_t)
    curve = pretrain_policy(selection, train_rows, options.policy_pretrain_epochs, context.batch_size, fit)
    if curve:
        context.say(f"rl-kd: the policy pre-trained with the student fixed (mean reward per epoch "
                    f"{', '.join(f'{r:.3f}' for r in curve)}).")

    info["policy_pretrain_rewards"] = [round(r, 4) for r in curve]
    return Objective(arrays, loss, info=info, auxiliary=selection)


def _classes(context: FeatureContext, reference: np.ndarray) -> np.ndarray:
    """The class each row is counted under: its gold label where known, else the reference target's argmax."""
    classes = reference.argmax(axis=1)
    if context.gold is not None:
        classes = np.where(context.gold >= 0, context.gold, classes)
    return classes.astype(np.int64)


def _selection_report(selection: TeacherSelection, outputs, gold: np.ndarray | None, options: RLKDOptions) -> dict:
    """How often the policy selected each teacher, per class; with gold labels, how often the teacher it
    rates most likely owns the row's label (and muki-hard's choice, for comparison)."""
    counts = selection.counts.numpy()
    names = list(outputs.space.names)
    report = {
        "selection": {"teachers": list(outputs.teachers), "classes": names,
                      "counts": counts[:, :-1].tolist(), "none": counts[:, -1].tolist()},
        "mean_reward": round(selection.rewards / max(1, selection.updates), 4),
        "policy_updates": selection.updates,
    }
    if gold is None or options.labels:  # one label set: every teacher owns every label
        return report
    known = gold >= 0
    owners = np.zeros((len(outputs.teachers), len(names)), dtype=bool)
    for i, teacher in enumerate(outputs.teachers):
        owners[i, list(outputs.space.blocks[teacher])] = True
    with torch.no_grad():
        greedy = selection.policy.probabilities(selection.states).argmax(dim=1).numpy()
    accuracy = {"policy": float(owners[greedy[known], gold[known]].mean())}
    if not options.labels:
        chosen = outputs.score(options.score).argmax(axis=1)
        accuracy[f"muki-hard ({options.score})"] = float(owners[chosen[known], gold[known]].mean())
    report["selection_accuracy"] = {k: round(v, 4) for k, v in accuracy.items()}
    return report
