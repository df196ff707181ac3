"""--fit head: a student's head trained alone on its frozen encoder's cached states (kamalcli/train/head.py)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import TRAIN
from kamalcli.models.heads import head_of
from kamalcli.models.batching import encode
from kamalcli.models.inference import first_token_states, predict_logits
from kamalcli.models.loading import load_classifier, load_tokenizer

HEAD_TRAIN = ["--steps", "40", "--lr", "2e-3", "--batch-size", "16", "--max-length", "32"]


def _tiny(kind: str):
    import transformers

    common = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                  max_position_embeddings=40, num_labels=3)
    if kind == "bert":
        return transformers.BertForSequenceClassification(transformers.BertConfig(**common))
    if kind == "roberta":
        return transformers.RobertaForSequenceClassification(transformers.RobertaConfig(**common, pad_token_id=1))
    if kind == "deberta-v2":
        return transformers.DebertaV2ForSequenceClassification(transformers.DebertaV2Config(**common))
    config = transformers.DistilBertConfig(vocab_size=64, dim=16, n_layers=1, n_heads=2, hidden_dim=32,
                                           max_position_embeddings=40, num_labels=3)
    return transformers.DistilBertForSequenceClassification(config)


@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert", "deberta-v2"])
def test_the_head_on_cached_states_gives_the_whole_models_logits(kind):
    from kamalcli.models.batching import Encoded

    torch.manual_seed(0)
    model = _tiny(kind).eval()
    rng = np.random.default_rng(0)
    encoded = Encoded([rng.integers(2, 60, size=n) for n in (5, 9, 3, 12)], pad_id=0,
                      token_type=kind in ("bert", "deberta-v2"))
    states = first_token_states(model, encoded, say_progress=False)
    with torch.no_grad():
        from_head = head_of(model).logits(states).numpy()
    np.testing.assert_allclose(from_head, predict_logits(model, encoded), atol=1e-5)


def test_a_model_whose_head_kamal_does_not_know_is_refused_in_one_line():
    import transformers

    from kamalcli.errors import KamalError

    config = transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, num_labels=2)
    with pytest.raises(KamalError, match="--fit head knows the heads of .*GPT2ForSequenceClassification.*--fit all"):
        head_of(transformers.GPT2ForSequenceClassification(config))


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def _encoder(folder: Path) -> dict[str, torch.Tensor]:
    """The base's weights named as in a sequence classifier built on it."""
    return {(n if n.startswith("bert.") else f"bert.{n}"): w for n, w in _weights(folder).items()}


def test_fit_head_trains_the_head_only_and_the_student_works_as_any_other(two_teachers, assets, tmp_path):
    k = two_teachers
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's on the cached states, a read-only memory map
        out = k("amalgamate", "--method", "vanilla-kd", "--name", "h", "--student", assets["encoder"], "--fit", "head",
                *HEAD_TRAIN).output
    assert "Student: encoder at 32 tokens, only its head trained, on the frozen encoder's states" in out
    student = k.json("students")[0]
    assert student["train"]["config"]["fit"] == "head"
    assert student["train"]["selected_by"] == "transfer-loss" and student["train"]["history"]
    trained, base = _weights(Path(student["path"])), _encoder(assets["encoder"])
    encoder = [n for n in trained if n.startswith(("bert.encoder.", "bert.embeddings."))]
    assert encoder and all(torch.equal(trained[n], base[n]) for n in encoder)  # the encoder is the base's
    assert not torch.equal(trained["bert.pooler.dense.weight"], base["bert.pooler.dense.weight"])  # the head learnt
    assert k.json("eval", "h", "--data", "test")["rows"] == 80  # learning is test_fit_head_learns_the_targets_...
    k("export", "h", "--onnx")  # the export checks its parity with the student
    # the encoder's states were cached in the workspace, and are what the student's own encoder gives
    assert "Cached the first-token states of" in out and "(frozen) on 240 rows" in out
    [cached] = (k.workspace / ".kamal" / "artifacts" / "probes").glob("cls-*/cls.npy")
    model = load_classifier(Path(student["path"]))
    texts = [json.loads(line)["text"] for line in assets["pool"].read_text().splitlines()]
    own = first_token_states(model, encode(load_tokenizer(Path(student["path"])), texts, 32, config=model.config),
                             say_progress=False)
    np.testing.assert_allclose(np.load(cached), own.numpy(), atol=1e-5)
    # a second head student of this base, pool and length reads them: no second pass of the encoder
    again = k("amalgamate", "--method", "vanilla-kd", "--name", "h2", "--seed", "3", "--student", assets["encoder"],
              "--fit", "head", *HEAD_TRAIN)
    assert "first-token states" not in again.output


def test_fit_head_learns_the_targets_it_is_given():
    """The objective's loss on the training rows falls, and the selected epoch is the best held-out one."""
    from kamalcli.models.batching import Encoded
    from kamalcli.train.evaluate import HeldOutLoss
    from kamalcli.train.head import RATES, train_head
    from kamalcli.train.loop import TrainConfig
    from kamalcli.train.objective import Objective

    torch.manual_seed(0)
    model = _tiny("bert")
    rng = np.random.default_rng(1)
    encoded = Encoded([rng.integers(2, 60, size=8) for _ in range(90)], pad_id=0, token_type=True)
    states = first_token_states(model, encoded, say_progress=False).numpy()
    targets = (states @ rng.normal(size=(16, 3))).argmax(axis=1)  # classes a head on these states can tell apart

    def loss(logits, batch):
        return torch.nn.functional.cross_entropy(logits, batch["target"], reduction="none")

    objective = Objective({"target": targets}, loss)
    rows, held = np.arange(80), np.arange(80, 90)
    selector = HeldOutLoss(objective, encoded, held, "cpu")
    before = selector.measure(model)
    result = train_head(model, encoded, objective, TrainConfig(batch_size=16, fit="head"), rows=rows,
                        selector=selector, say_progress=False)
    figures = [h["transfer-loss"] for h in result.history]
    assert {h["rate"] for h in result.history} == set(RATES)  # the rate is chosen like the pass, by the selector
    assert result.best_metric == min(figures) and selector.measure(model) == pytest.approx(min(figures), abs=1e-5)
    assert selector.measure(model) < before
    with torch.no_grad():
        fitted = torch.nn.functional.cross_entropy(torch.from_numpy(predict_logits(model, encoded, rows=rows)),
                                                   torch.as_tensor(targets[rows]))
    assert float(fitted) < 0.5 < before  # three classes start near ln 3 = 1.1


def test_head_then_all_fine_tunes_from_the_fitted_head(two_teachers, assets, tmp_path):
    k = two_teachers
    k("amalgamate", "--method", "vanilla-kd", "--name", "hta", "--student", assets["encoder"], "--fit",
      "head-then-all", *TRAIN)
    student = k.json("students")[0]
    assert student["train"]["config"]["fit"] == "head-then-all"
    trained, base = _weights(Path(student["path"])), _encoder(assets["encoder"])
    assert not torch.equal(trained["bert.encoder.layer.0.attention.self.query.weight"],
                           base["bert.encoder.layer.0.attention.self.query.weight"])


def test_fit_head_refuses_a_feature_level_method(two_teachers, assets):
    k = two_teachers
    before = k.db_snapshot()
    out = k("amalgamate", "--method", "cfl", "--fit", "head", "--student", assets["encoder"], *HEAD_TRAIN, code=2).output
    assert "--fit head: cfl trains on the student's hidden states" in out and "Traceback" not in out
    assert k.db_snapshot() == before


def test_fit_head_runs_on_one_process(tmp_path):
    from kamalcli.errors import KamalError
    from kamalcli.models.batching import Encoded
    from kamalcli.train.loop import TrainConfig, train
    from kamalcli.train.objective import Objective

    class TwoProcesses:
        size, rank, main, distributed = 2, 0, True, True

    encoded = Encoded([np.arange(2, 8)] * 4, pad_id=0, token_type=True)
    objective = Objective({}, lambda logits, batch: logits.sum(dim=1))
    with pytest.raises(KamalError, match="--fit head-then-all runs on one process"):
        train(_tiny("bert"), encoded, objective, TrainConfig(fit="head-then-all"), tmp_path, world=TwoProcesses())


def test_a_fit_kamal_toml_does_not_know_is_one_line(kamal, ws):
    config = ws / "kamal.toml"
    config.write_text(config.read_text().replace('fit = "all"', 'fit = "encoder"'))
    out = kamal("amalgamate", "--method", "vanilla-kd", code=2).output
    assert "fit must be one of all, head, head-then-all (got 'encoder')" in out


def test_train_teacher_fit_head_is_a_head_on_the_frozen_base(kamal, ws, assets):
    """The supervised reference a user with labels makes first: a head on the frozen base's states."""
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    kamal("train-teacher", "train", "--labels", "world,sports", "--name", "h", "--base", assets["encoder"],
          "--fit", "head", "--max-length", "32")
    folder = Path(kamal.json("teachers")[0]["path"])
    trained, base = _weights(folder), _encoder(assets["encoder"])
    assert all(torch.equal(trained[n], base[n]) for n in trained if n.startswith("bert.encoder."))
    assert not torch.equal(trained["bert.pooler.dense.weight"], base["bert.pooler.dense.weight"])


def test_the_scope_from_cached_states_is_the_scope_from_a_forward_pass():
    from kamalcli.models.batching import Encoded
    from kamalcli.students.trust import scope_from_model, scope_from_states

    torch.manual_seed(0)
    model = _tiny("bert").eval()
    rng = np.random.default_rng(2)
    encoded = Encoded([rng.integers(2, 60, size=int(n)) for n in rng.integers(3, 12, size=60)], pad_id=0,
                      token_type=True)
    states = first_token_states(model, encoded, say_progress=False)
    cached = scope_from_states(model, states, data="pool")
    passed = scope_from_model(model, encoded, data="pool", device="cpu")
    assert cached.score == passed.score and cached.threshold == pytest.approx(passed.threshold, rel=1e-5)
