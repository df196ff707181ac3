"""rl-kd: the policy-gradient step, the selected targets and rewards (golden values worked out by hand and
written here), and the method through the CLI: both variants, the report, --resume bit for bit."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from kamalcli.methods.rl_kd import Reward, TeacherSelection, pretrain_policy, selected_average, selection_fit
from kamalcli.methods.teacher_policy import TeacherPolicy



def train_args(assets, epochs=1):
    return ["--student", assets["encoder"], "--epochs", epochs, "--lr", "5e-3", "--batch-size", 16,
            "--max-length", 32, "--mc-samples", 4]


# -- golden values ------------------------------------------------------------------------

def test_policy_gradient_step_golden_values():
    policy = TeacherPolicy(state_size=2, teachers=2, lr=0.1, baseline_decay=0.9, seed=0)
    states = torch.tensor([[1.0, 2.0], [-1.0, 0.0]])
    actions = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    # zero weights: pi = 0.5 everywhere; advantage 2 over 2 rows: residual (a - 0.5) * 2 / 2
    # teacher 0: 0.5 * (1, 2) + 0.5 * (-1, 0) = (0, 1); teacher 1: -0.5 * (1, 2) + 0.5 * (-1, 0) = (-1, -1)
    grad_w, grad_b = policy.gradient(states, actions, advantage=2.0)
    assert grad_w.tolist() == [[0.0, 1.0], [-1.0, -1.0]] and grad_b.tolist() == [1.0, 0.0]
    # the first reward only sets the baseline: advantage 0, nothing moves
    assert policy.reinforce(states, actions, reward=1.0) == 0.0
    assert policy.weight.abs().sum().item() == 0.0 and policy.baseline == pytest.approx(1.0)
    # reward 3 against baseline 1: advantage 2, the gradient above; Adam's first step is lr * sign(gradient)
    assert policy.reinforce(states, actions, reward=3.0) == pytest.approx(2.0)
    assert policy.baseline == pytest.approx(0.9 * 1.0 + 0.1 * 3.0)
    assert policy.weight.flatten().tolist() == pytest.approx([0.0, 0.1, -0.1, -0.1], rel=1e-6)
    assert policy.bias.tolist() == pytest.approx([0.1, 0.0], abs=1e-7)
    # teacher 0 on state (1, 2): sigmoid(0.1 * 2 + 0.1) = sigmoid(0.3)
    assert policy.probabilities(states)[0, 0].item() == pytest.approx(0.574442516811659, rel=1e-6)


def test_policy_gradient_ascends_log_pi_not_pi():
    """REINFORCE's (a - pi) s is the gradient of log pi: check it against autograd, pi away from 0.5."""
    policy = TeacherPolicy(state_size=3, teachers=2, lr=0.1, baseline_decay=0.9, seed=0)
    with torch.no_grad():
        policy.weight.copy_(torch.tensor([[0.3, -0.2, 0.5], [1.0, 0.1, -0.4]]))
        policy.bias.copy_(torch.tensor([0.2, -0.3]))
    states = torch.tensor([[1.0, 0.5, -1.0], [0.2, -0.3, 2.0], [0.0, 1.0, 1.0]])
    actions = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    w = policy.weight.detach().clone().requires_grad_(True)
    b = policy.bias.detach().clone().requires_grad_(True)
    pi = torch.sigmoid(states @ w.T + b)
    log_pi = (actions * pi.log() + (1 - actions) * (1 - pi).log()).sum(dim=1).mean() * 1.5
    log_pi.backward()
    grad_w, grad_b = policy.gradient(states, actions, advantage=1.5)
    assert torch.allclose(grad_w, w.grad, atol=1e-6) and torch.allclose(grad_b, b.grad, atol=1e-6)


def test_selected_average_and_the_rows_with_no_teacher():
    padded = torch.tensor([[[1.0, 0.0], [0.5, 0.5]],     # teacher 0 on rows 0, 1
                           [[0.0, 1.0], [0.2, 0.8]]])    # teacher 1
    actions = torch.tensor([[1.0, 1.0], [0.0, 0.0]])     # row 1: nobody selected
    probs = torch.tensor([[0.5, 0.5], [0.3, 0.7]])
    def flat(empty):
        return selected_average(padded, actions, probs, empty).flatten().tolist()

    assert flat("best") == pytest.approx([0.5, 0.5, 0.2, 0.8])    # the teacher the policy rates most likely
    assert flat("all") == pytest.approx([0.5, 0.5, 0.35, 0.65])   # every teacher
    assert flat("skip") == pytest.approx([0.5, 0.5, 0.0, 0.0])    # no target: no distillation term


class FixedStudent(torch.nn.Module):
    """Row i's logits are logits[i], whatever the text: rewards by hand."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.tensor(logits))

    def forward(self, input_ids, **_):
        return SimpleNamespace(logits=self.logits[input_ids[:, 0]])


class RowIds:
    def batch(self, rows, device="cpu"):
        return {"input_ids": torch.as_tensor(np.asarray(rows))[:, None]}


@pytest.mark.parametrize("kind, held_out, expected", [
    # CE: log 2 (row 0), log 4 (row 1): mean 1.0397207708399179
    ("r1", [0], -1.0397207708399179),
    # DL: KL((1, 0) || (.5, .5)) = log 2, KL((.5, .5) || (.75, .25)) = .5 log(4/3): mean 0.4184941084...
    ("r2", [0], -1.4582148792328358),
    # gamma .5: .5 * r2 + .5 * accuracy on held-out row 0 (predicted 0, gold 0: 1)
    ("r3", [0], -0.2291074396164179),
    # -KL(reference row 1 = (.25, .75) || (.75, .25)) = -.5 log 3
    ("agreement", [1], -0.5493061443340549),
])
def test_rewards_golden_values(kind, held_out, expected):
    student = FixedStudent([[0.0, 0.0], [float(np.log(3.0)), 0.0]])
    reward = Reward(kind, student, RowIds(), torch.tensor([0, 1]), torch.tensor([[1.0, 0.0], [0.25, 0.75]]),
                    np.array(held_out), batch_size=2, temperature=1.0, gamma=0.5)
    target = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    assert reward(np.array([0, 1]), target, torch.Generator().manual_seed(0)) == pytest.approx(expected, rel=1e-6)


def test_selection_fit_golden_values():
    gold, reference = torch.tensor([0, 1]), torch.tensor([[1.0, 0.0], [0.25, 0.75]])
    target = torch.tensor([[0.5, 0.5], [0.0, 1.0]])
    # -CE: (log 2 + 0) / 2; -KL: (log 2 + (.25 log(.25 / 1e-6) + .75 log .75)) / 2
    assert selection_fit(gold, reference)(np.array([0, 1]), target) == pytest.approx(-0.34657359027997264, rel=1e-6)
    assert selection_fit(None, reference)(np.array([0, 1]), target) == pytest.approx(-1.7923448377161026, rel=1e-6)


def test_policy_pretraining_learns_which_teacher_owns_a_row():
    """The state says which teacher owns the row; the reward is -KL(reference || selected average)."""
    rng = np.random.default_rng(0)
    n = 256
    owner = rng.integers(0, 2, n)
    states = np.stack([2.0 * owner - 1, rng.normal(size=n)], axis=1).astype(np.float32)
    padded = np.zeros((2, n, 4), np.float32)
    padded[0, :, 0], padded[1, :, 2] = 1.0, 1.0          # teacher 0 owns label 0, teacher 1 label 2
    reference = torch.from_numpy(padded[owner, np.arange(n)])
    policy = TeacherPolicy(2, 2, lr=0.05, baseline_decay=0.9, seed=0)
    selection = TeacherSelection(policy, states, padded, "best", None, owner)
    curve = pretrain_policy(selection, np.arange(n), epochs=30, batch_size=16, fit=selection_fit(None, reference))
    greedy = policy.probabilities(torch.from_numpy(states)).argmax(dim=1).numpy()
    assert curve[-1] > curve[0] and (greedy == owner).mean() > 0.9, (curve, (greedy == owner).mean())


# -- through the CLI ----------------------------------------------------------------------

def test_methods_lists_both_variants(kamal):
    rows = {m["name"]: m for m in kamal.json("methods")}
    rl = rows["rl-kd"]
    assert rl["labels"] == "optional" and rl["options"]["labels"] is False and rl["options"]["reward"] is None
    assert "label-free" in rl["summary"] and "r1/r2/r3" in rl["summary"]


def test_label_free_rl_kd_trains_and_reports_selection_per_class(kamal, assets, trained):
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["test"], "--name", "labelled", "--label-column", "label")  # gold read for the report only
    result = kamal("amalgamate", "--method", "rl-kd", "--name", "rl", *train_args(assets))
    assert "the student pre-trained on the average of all 2 teachers" in result.stderr
    assert "the policy pre-trained with the student fixed" in result.stderr
    assert "Cached R(x)" in result.stderr
    info = next(s for s in kamal.json("students") if s["name"] == "rl")["train"]["objective"]
    assert info["variant"] == "kamal label-free" and info["reward"] == "agreement"
    counts = np.array(info["selection"]["counts"])
    assert counts.shape == (4, 2) and counts.sum() + sum(info["selection"]["none"]) >= 76  # every training row
    assert 0.0 <= info["selection_accuracy"]["policy"] <= 1.0 and "muki-hard (mc-dropout)" in info["selection_accuracy"]
    report = kamal.json("report")["policy_selection"]
    assert report[0]["student"] == "rl" and report[0]["selection_accuracy"] == info["selection_accuracy"]
    text = kamal("report").stdout
    assert "Teacher selection by rl-kd students" in text and "world" in text
    again = kamal("amalgamate", "--method", "rl-kd", "--name", "rl2", *train_args(assets))
    assert "Cached R(x)" not in again.stderr  # computed once


def test_paper_variant_needs_gold_and_one_label_set(kamal, assets, trained):
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["pool"], "--name", "pool")
    result = kamal("amalgamate", "--method", "rl-kd", "--option", "labels=true", *train_args(assets), code=2)
    assert "needs transfer data with gold labels" in result.stderr
    result = kamal("amalgamate", "--method", "rl-kd", "--option", "reward=r1", *train_args(assets), code=2)
    assert "need gold labels (labels=true)" in result.stderr
    kamal("add-data", assets["test"], "--name", "labelled", "--label-column", "label")
    result = kamal("amalgamate", "--method", "rl-kd", "--option", "labels=true", "--data", "labelled",
                   *train_args(assets), code=2)
    assert "teachers over one label set" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("reward", ["r1", "r2", "r3"])
def test_paper_variant_trains_with_each_reward(same_labels, assets, reward):
    result = same_labels("amalgamate", "--method", "rl-kd", "--option", "labels=true", "--option", f"reward={reward}",
                         "--data", "labelled", "--name", reward, *train_args(assets))
    assert "Probing" not in result.stderr or "logits only" in result.stderr  # no MC dropout: it reads no confidences
    info = next(s for s in same_labels.json("students") if s["name"] == reward)["train"]["objective"]
    assert info["variant"] == "paper (gold labels)" and info["reward"] == reward
    assert info["policy_updates"] == 5 and "selection_accuracy" not in info  # 76 training rows, batch 16


def _final_auxiliaries(monkeypatch):
    """The Auxiliary of every finished student training, as it stood at the end."""
    from kamalcli.train import loop

    seen, real = [], loop.train

    def spy(model, encoded, objective, *args, **kwargs):
        result = real(model, encoded, objective, *args, **kwargs)
        if objective.auxiliary is not None:
            seen.append(objective.auxiliary)
        return result

    monkeypatch.setattr(loop, "train", spy)
    return seen


def _policy_state(aux) -> list[torch.Tensor]:
    state = aux.extra_state()
    adam = state["policy"]["optimizer"]["state"]
    return [aux.policy.weight, aux.policy.bias, state["counts"], torch.tensor(state["rewards"]),
            *[adam[k][name] for k in sorted(adam) for name in ("step", "exp_avg", "exp_avg_sq")]]


@pytest.mark.slow  # make test's budget: resuming bit for bit is in make test for muki, feature and token methods
def test_rl_kd_resume_is_bit_for_bit_with_the_policy(kamal, assets, trained, interrupt_training, monkeypatch):
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["pool"], "--name", "pool")
    args = ["--method", "rl-kd", *train_args(assets, epochs=2), "--checkpoint-every", "2"]
    seen = _final_auxiliaries(monkeypatch)
    kamal("amalgamate", *args, "--name", "straight")
    straight = _policy_state(seen[-1])
    for cut_at in (3, 9):  # 3: inside the student's pre-training phase; 9: in the alternation
        cut = f"cut-at-{cut_at}"
        if cut_at == 3:
            interrupt_training(3)                      # the first training to reach step 3: the pre-training phase
        else:
            interrupt_training(None)
            from kamalcli.train import loop

            real = loop.train

            def second_only(*a, step=cut_at, **k):
                if k.get("description", "").startswith("rl-kd"):
                    def stop(at):
                        if at == step:
                            raise KeyboardInterrupt
                    return real(*a, **{**k, "on_step": stop})
                return real(*a, **k)

            monkeypatch.setattr(loop, "train", second_only)
        kamal("amalgamate", *args, "--name", cut, code=130)
        interrupt_training(None)
        seen = _final_auxiliaries(monkeypatch)
        kamal("amalgamate", "--resume", cut)
        resumed = _policy_state(seen[-1])
        assert len(straight) == len(resumed) > 5
        assert all(torch.equal(a, b) for a, b in zip(straight, resumed)), cut
        students = {s["name"]: s for s in kamal.json("students")}
        a = load_file(str(Path(students["straight"]["path"]) / "model.safetensors"))
        b = load_file(str(Path(students[cut]["path"]) / "model.safetensors"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), cut
        sa, sb = students["straight"]["train"]["objective"], students[cut]["train"]["objective"]
        assert sa["selection"] == sb["selection"] and sa["mean_reward"] == sb["mean_reward"], cut
