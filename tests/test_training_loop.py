"""The one training loop: learns, checkpoints, stops on Ctrl-C at a step boundary, resumes bit-for-bit."""

import numpy as np
import pytest
import torch

import tiny
from kamalcli.models.batching import encode, training_order
from kamalcli.errors import KamalError
from kamalcli.teachers.train import supervised_objective
from kamalcli.train import checkpoint
from kamalcli.models.inference import predict_logits
from kamalcli.train.evaluate import HeldOutLoss
from kamalcli.errors import StopRequested
from kamalcli.train.loop import TrainConfig, linear_schedule, train


@pytest.fixture
def problem(tmp_path):
    tokenizer = tiny.make_tokenizer(tmp_path / "tok")
    rows = tiny.topic_rows(["world", "sports"], 40, seed=1)
    encoded = encode(tokenizer, [r["text"] for r in rows], 32)
    labels = np.array([0 if r["label"] == "world" else 1 for r in rows])
    return encoded, labels


def fresh_model(seed=0):
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    return BertForSequenceClassification(tiny.tiny_config(2))


CONFIG = TrainConfig(epochs=6, batch_size=8, lr=2e-3, seed=5, checkpoint_every=7)


def test_training_learns_the_task(problem, tmp_path):
    encoded, labels = problem
    model = fresh_model()
    result = train(model, encoded, supervised_objective(labels), CONFIG, tmp_path / "run")
    assert result.steps == 60
    accuracy = (predict_logits(model, encoded).argmax(axis=1) == labels).mean()
    assert accuracy > 0.9
    assert checkpoint.exists(tmp_path / "run")


def test_resume_after_interrupt_is_bit_for_bit(problem, tmp_path):
    encoded, labels = problem
    straight = fresh_model()
    train(straight, encoded, supervised_objective(labels), CONFIG, tmp_path / "a")

    interrupted = fresh_model()

    def stop_at_13(step):
        if step == 13:
            raise KeyboardInterrupt

    with pytest.raises(StopRequested):
        train(interrupted, encoded, supervised_objective(labels), CONFIG, tmp_path / "b", on_step=stop_at_13)
    resumed = fresh_model(seed=99)  # different init: everything must come from the checkpoint
    result = train(resumed, encoded, supervised_objective(labels), CONFIG, tmp_path / "b", resume=True)
    assert result.steps == 60
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name


def test_resume_refuses_changed_settings_and_missing_checkpoints(problem, tmp_path):
    encoded, labels = problem
    with pytest.raises(KamalError, match="no checkpoint"):
        train(fresh_model(), encoded, supervised_objective(labels), CONFIG, tmp_path / "none", resume=True)
    with pytest.raises(StopRequested):
        train(fresh_model(), encoded, supervised_objective(labels), CONFIG, tmp_path / "c",
              on_step=lambda s: (_ for _ in ()).throw(KeyboardInterrupt) if s == 2 else None)
    changed = TrainConfig(**{**CONFIG.as_json(), "lr": 5e-4})
    with pytest.raises(KamalError, match="lr 0.002 -> 0.0005"):
        train(fresh_model(), encoded, supervised_objective(labels), changed, tmp_path / "c", resume=True)


def test_model_selection_keeps_the_best_step(problem, tmp_path):
    encoded, labels = problem
    objective = supervised_objective(labels)
    model = fresh_model()
    selector = HeldOutLoss(objective, encoded, np.arange(10), "cpu")
    result = train(model, encoded, objective, CONFIG, tmp_path / "sel", rows=np.arange(10, 80), selector=selector)
    losses = {h["step"]: h["transfer-loss"] for h in result.history}
    assert result.best_step == min(losses, key=losses.get)
    assert selector.measure(model) == pytest.approx(losses[result.best_step], rel=1e-5)


def test_schedule_and_data_order():
    factor = linear_schedule(total=10, warmup_steps=2)
    assert [round(factor(s), 3) for s in range(10)] == [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]
    assert np.array_equal(training_order(50, 1, 0), training_order(50, 1, 0))
    assert not np.array_equal(training_order(50, 1, 0), training_order(50, 1, 1))
    assert sorted(training_order(50, 1, 3)) == list(range(50))


@pytest.mark.parametrize("field, value, message", [
    ("epochs", 0, "--epochs must be at least 1"),
    ("lr", 0, "--lr must be in"),
    ("batch_size", 0, "--batch-size must be at least 1"),
])
def test_bad_settings(field, value, message):
    with pytest.raises(KamalError, match=message):
        TrainConfig(**{field: value}).validate()


class ScriptedSelector:
    """A held-out figure that follows a script, one value per measurement (lower is better)."""

    name = "scripted"
    higher_is_better = False

    def __init__(self, values):
        self.values, self.steps = list(values), []

    def measure(self, model):
        self.steps.append(len(self.steps))
        return self.values[len(self.steps) - 1]


def test_default_budget_is_steps_with_early_stopping():
    config = TrainConfig()
    assert config.epochs is None and config.early_stopping
    assert (config.steps, config.eval_every, config.patience) == (600, 50, 2)
    assert config.total_steps(steps_per_epoch=63) == 600
    assert TrainConfig(epochs=4).total_steps(steps_per_epoch=63) == 252  # --epochs wins


def test_early_stopping_keeps_the_best_step_and_stops_after_patience(problem, tmp_path):
    encoded, labels = problem
    config = TrainConfig(steps=100, eval_every=5, patience=2, batch_size=8, lr=2e-3, seed=5)
    selector = ScriptedSelector([1.0, 0.5, 0.6, 0.7, 0.1])  # best at the 2nd measurement, then two worse ones
    result = train(fresh_model(), encoded, supervised_objective(labels), config, tmp_path / "run", selector=selector)
    assert result.stopped_early
    assert result.steps == 20 and result.best_step == 10 and result.best_metric == 0.5
    assert [h["step"] for h in result.history] == [5, 10, 15, 20]
    assert result.epochs == 2.0  # 20 steps of 10 per epoch (80 rows, batch 8)


def test_the_step_budget_runs_out_without_a_selector_and_epochs_win(problem, tmp_path):
    encoded, labels = problem
    budget = TrainConfig(steps=12, eval_every=5, batch_size=8, lr=2e-3, seed=5)
    result = train(fresh_model(), encoded, supervised_objective(labels), budget, tmp_path / "a")
    assert result.steps == 12 and not result.stopped_early
    epochs = TrainConfig(epochs=1, steps=3, batch_size=8, lr=2e-3, seed=5)
    selector = ScriptedSelector([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    result = train(fresh_model(), encoded, supervised_objective(labels), epochs, tmp_path / "b", selector=selector)
    assert result.steps == 10 and not result.stopped_early  # one epoch of 10 steps: no early stopping with --epochs


def test_a_checkpoint_saved_before_the_step_budget_existed_resumes(problem, tmp_path):
    encoded, labels = problem
    with pytest.raises(StopRequested):
        train(fresh_model(), encoded, supervised_objective(labels), CONFIG, tmp_path / "old",
              on_step=lambda s: (_ for _ in ()).throw(KeyboardInterrupt) if s == 3 else None)
    path = tmp_path / "old" / checkpoint.FOLDER / "trainer.pt"
    trainer = torch.load(path, weights_only=True)
    for key in ("steps", "eval_every", "patience"):
        del trainer["config"][key]
    torch.save(trainer, path)
    result = train(fresh_model(), encoded, supervised_objective(labels), CONFIG, tmp_path / "old", resume=True)
    assert result.steps == 60


@pytest.mark.parametrize("mode, frozen", [("train", False), ("freeze", True)])
def test_the_word_embeddings_stay_as_they_are_only_when_frozen(problem, tmp_path, mode, frozen):
    encoded, labels = problem
    model = fresh_model()
    words, before = model.get_input_embeddings().weight, {k: v.clone() for k, v in model.state_dict().items()}
    config = TrainConfig(**{**CONFIG.as_json(), "epochs": 1, "embeddings": mode})
    result = train(model, encoded, supervised_objective(labels), config, tmp_path / "run")
    assert result.embeddings_frozen is frozen
    assert torch.equal(words, before["bert.embeddings.word_embeddings.weight"]) is frozen
    assert not torch.equal(model.classifier.weight, before["classifier.weight"])  # the rest trained either way
    assert words.requires_grad  # given back as it was


def test_the_fused_optimizer_is_adamw(problem, tmp_path, monkeypatch):
    """make_optimizer asks torch for its fused AdamW; the weights it trains match the plain loop's."""
    from kamalcli.train.loop import make_optimizer

    encoded, labels = problem
    model = fresh_model()
    assert make_optimizer(model, None, CONFIG).defaults["fused"] is True
    train(model, encoded, supervised_objective(labels), CONFIG, tmp_path / "fused")
    original = torch.optim.AdamW
    monkeypatch.setattr(torch.optim, "AdamW", lambda groups, lr, fused=None: original(groups, lr=lr))
    plain = fresh_model()
    train(plain, encoded, supervised_objective(labels), CONFIG, tmp_path / "plain")
    for (name, a), (_, b) in zip(model.state_dict().items(), plain.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-4), name


def test_frozen_embeddings_resume_bit_for_bit_and_a_changed_policy_is_refused(problem, tmp_path):
    encoded, labels = problem
    config = TrainConfig(**{**CONFIG.as_json(), "embeddings": "freeze"})
    straight = fresh_model()
    train(straight, encoded, supervised_objective(labels), config, tmp_path / "a")
    with pytest.raises(StopRequested):
        train(fresh_model(), encoded, supervised_objective(labels), config, tmp_path / "b",
              on_step=lambda s: (_ for _ in ()).throw(KeyboardInterrupt) if s == 9 else None)
    with pytest.raises(KamalError, match="embeddings freeze -> train"):
        train(fresh_model(), encoded, supervised_objective(labels),
              TrainConfig(**{**config.as_json(), "embeddings": "train"}), tmp_path / "b", resume=True)
    resumed = fresh_model()
    train(resumed, encoded, supervised_objective(labels), config, tmp_path / "b", resume=True)
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name


def test_an_unknown_embeddings_policy_is_refused():
    with pytest.raises(KamalError, match="embeddings must be one of train, freeze"):
        TrainConfig(embeddings="thaw").validate()


@pytest.mark.parametrize("early", [True, False])
def test_resuming_a_run_whose_training_had_ended_takes_no_more_steps(problem, tmp_path, early):
    """Killed while the student was being saved (its scope fitted, say): --resume finishes the run with the
    weights it had selected, where it used to train past its early stop or refuse ("nothing to resume")."""
    encoded, labels = problem
    config = TrainConfig(steps=100, eval_every=5, patience=2, batch_size=8, lr=2e-3, seed=5) if early else CONFIG
    selector = (lambda: ScriptedSelector([1.0, 0.5, 0.6, 0.7, 0.1])) if early else (lambda: None)
    first = fresh_model()
    done = train(first, encoded, supervised_objective(labels), config, tmp_path / "run", selector=selector())
    resumed = fresh_model(seed=99)
    again = train(resumed, encoded, supervised_objective(labels), config, tmp_path / "run", selector=selector(),
                  resume=True)
    assert (again.steps, again.best_step, again.stopped_early) == (done.steps, done.best_step, done.stopped_early)
    for (name, a), (_, b) in zip(first.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
