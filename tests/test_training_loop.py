"""The one training loop: learns, checkpoints, stops on Ctrl-C at a step boundary, resumes bit-for-bit."""

import numpy as np
import pytest
import torch

import tiny
from kamalcli.batching import encode, training_order
from kamalcli.errors import KamalError
from kamalcli.teacher_training import supervised_objective
from kamalcli.train import checkpoint
from kamalcli.train.evaluate import HeldOutLoss, predict_logits
from kamalcli.train.loop import StopRequested, TrainConfig, linear_schedule, train


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
