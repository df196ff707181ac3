"""Feature-level methods (dfa, cfl, mt-bert) and the loop's Auxiliary contract.

Golden values are computed by hand (see each test) and written here; they are
not recomputed by the code under test.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from kamalcli.methods.features import aligned_layer
from kamalcli.labels import LabelSpace
from kamalcli.methods.base import FeatureContext, TeacherOutputs
from kamalcli.methods.losses import masked_mse, mmd_rbf
from kamalcli.train.auxiliary import StudentView


def train_args(assets, epochs=2, lr="5e-3"):
    return ["--student", assets["encoder"], "--epochs", epochs, "--lr", lr, "--batch-size", 16,
            "--max-length", 32, "--mc-samples", 4]


# -- golden values ------------------------------------------------------------------------

def test_masked_mse_ignores_padding():
    a = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]])
    b = torch.tensor([[[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]])
    # tokens: (1 + 4) / 2 = 2.5 and (4 + 9) / 2 = 6.5; the third is padding -> 4.5
    assert masked_mse(a, b, torch.tensor([[1, 1, 0]])).tolist() == [4.5]
    assert masked_mse(torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 0.0]])).tolist() == [5.0]


def test_mmd_golden_value():
    # joint batch 0, 1, 3, 5: mean squared distance between distinct rows m = 118 / 12;
    # k(d2) = sum_s exp(-d2 / (s m)), s in {1/4 .. 4}; MMD^2 = (5 + k(1))/2 + (5 + k(4))/2
    # - (k(9) + k(25) + k(4) + k(16)) / 2, worked out by hand = 5.027485309113974
    value = mmd_rbf(torch.tensor([[0.0], [1.0]]), torch.tensor([[3.0], [5.0]]))
    assert value.item() == pytest.approx(5.027485309113974, rel=1e-6)
    same = torch.tensor([[0.0, 1.0], [2.0, 0.5]])
    assert mmd_rbf(same, same).item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("student, teacher, expected", [
    (3, 6, [2, 4, 6]), (4, 6, [2, 3, 5, 6]), (6, 3, [1, 1, 2, 2, 3, 3]), (2, 12, [6, 12]), (3, 3, [1, 2, 3]),
])
def test_layer_alignment_any_depths(student, teacher, expected):
    assert [aligned_layer(j, student, teacher) for j in range(1, student + 1)] == expected


class FakeSources:
    """FeatureSources stand-in: pooled features given as arrays, no probe cache needed."""

    def __init__(self, shapes, features):
        self._shapes, self._features = shapes, features

    def shapes(self):
        return self._shapes

    def misaligned(self):
        return []

    def cached(self, layers):
        from kamalcli.methods.features import feature_key

        return {feature_key(i, layer): self._features[(i, layer)] for i, ls in layers.items() for layer in ls}


def _context(shapes, features, logits, gold=None, depth=1, hidden=1):
    space = LabelSpace.from_teachers([("a", ["x", "y"]), ("b", ["x", "y"])])
    outputs = TeacherOutputs(space, ("a", "b"), logits, {})
    return FeatureContext(outputs, FakeSources(shapes, features), depth, hidden, gold, seed=0, batch_size=4,
                          say=lambda m: None)


def _set(linear, weight, bias=0.0):
    with torch.no_grad():
        linear.weight.fill_(weight)
        if linear.bias is not None:
            linear.bias.fill_(bias)


def test_dfa_loss_golden_value():
    from kamalcli.methods.features import TeacherShape
    from kamalcli.methods import get_method

    shapes = (TeacherShape("a", 1, 1), TeacherShape("b", 1, 1))
    features = {(0, 1): np.array([[1.0]], dtype=np.float32), (1, 1): np.array([[1.0]], dtype=np.float32)}
    logits = (np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32))
    method = get_method("dfa")
    objective = method.build(_context(shapes, features, logits), method.parse(["features=pooled", "feature_weight=0.5"]))
    aux = objective.auxiliary
    _set(aux.encoders[0], 1.0)    # encoding = 1 + 1 = 2
    _set(aux.decoders[0], 0.25)   # each teacher rebuilt as 0.5: (0.5 - 1)^2 = 0.25, twice
    _set(aux.adapters[0], 1.0)    # student 3 -> 3: (3 - 2)^2 = 1
    view = StudentView(torch.zeros(1, 2), (torch.zeros(1, 1, 1), torch.full((1, 1, 1), 3.0)), torch.ones(1, 1))
    batch = {k: torch.from_numpy(v) for k, v in objective.arrays.items() if k.startswith("feat:")}
    # 0.5 * (1 + 0.25 + 0.25) = 0.75
    assert aux(view, batch).tolist() == pytest.approx([0.75])


def test_mt_bert_golden_values():
    from kamalcli.methods.features import TeacherShape
    from kamalcli.methods import get_method

    shapes = (TeacherShape("a", 1, 1), TeacherShape("b", 1, 1))
    features = {(0, 1): np.array([[1.0]], dtype=np.float32), (1, 1): np.array([[2.0]], dtype=np.float32)}
    logits = (np.array([[0.0, np.log(3.0)]], np.float32), np.array([[np.log(3.0), 0.0]], np.float32))
    method = get_method("mt-bert")
    labelled = method.build(_context(shapes, features, logits, gold=np.array([1])),
                            method.parse(["labels=true", "features=pooled"]))
    batch = {k: torch.from_numpy(np.asarray(v)) for k, v in labelled.arrays.items()}
    # p_a = (.25, .75), p_b = (.75, .25), y = 1: w = 1/(1 - log .75), 1/(1 - log .25);
    # student q = (.5, .5): CE = log 2, KL(p_i || q) = 0.1308...: total 0.8495524594187414
    assert batch["w"][0].tolist() == pytest.approx([0.7765892073778534, 0.41905978419640516], rel=1e-6)
    assert labelled.loss(torch.zeros(1, 2), batch).item() == pytest.approx(0.8495524594187414, rel=1e-6)
    free = method.build(_context(shapes, features, logits), method.parse(["features=pooled"]))
    batch = {k: torch.from_numpy(np.asarray(v)) for k, v in free.arrays.items()}
    # label-free: both weights 1 / (1 + H(.25, .75)); 2 * KL / (1 + H) = 0.16745707397250362
    assert free.loss(torch.zeros(1, 2), batch).item() == pytest.approx(0.16745707397250362, rel=1e-6)
    aux = free.auxiliary
    for w, value in zip(aux.maps, (3.0, 0.5)):
        _set(w, value)
    view = StudentView(torch.zeros(1, 2), (torch.zeros(1, 1, 1), torch.ones(1, 1, 1)), torch.ones(1, 1))
    # (1 - 3 * 1)^2 + (1 - 0.5 * 2)^2 = 4
    assert aux(view, batch).tolist() == pytest.approx([4.0])


def test_mt_bert_labels_need_gold_and_one_label_set():
    from kamalcli.errors import KamalError
    from kamalcli.methods.features import TeacherShape
    from kamalcli.methods import get_method

    shapes = (TeacherShape("a", 1, 1), TeacherShape("b", 1, 1))
    features = {(0, 1): np.ones((1, 1), np.float32), (1, 1): np.ones((1, 1), np.float32)}
    logits = (np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32))
    method = get_method("mt-bert")
    with pytest.raises(KamalError, match="needs transfer data with gold labels"):
        method.build(_context(shapes, features, logits), method.parse(["labels=true", "features=pooled"]))


# -- through the CLI ----------------------------------------------------------------------

@pytest.mark.parametrize("method", ["dfa", "cfl", "mt-bert"])
def test_feature_methods_train_a_student(two_teachers, assets, method):
    two_teachers("amalgamate", "--method", method, "--name", method, *train_args(assets, epochs=4, lr="2e-3"),
                 "--checkpoint-every", 5)
    student = next(s for s in two_teachers.json("students") if s["name"] == method)
    info = student["train"]["objective"]
    expected = "cached, mean-pooled" if method == "cfl" else "in the loop, per token"
    assert info["teacher_features"] == expected
    if method != "cfl":
        assert info["teacher_batches"] > 0 and info["teacher_seconds"] > 0
    losses = _step_losses(two_teachers.workspace, method)  # output-level plus feature terms, per step
    assert len(losses) == 60 and np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5]), losses


def _step_losses(workspace, student: str) -> list[float]:
    import sqlite3

    with sqlite3.connect(workspace / ".kamal" / "kamal.db") as conn:
        return [r[0] for r in conn.execute(
            "SELECT loss FROM loss_history WHERE student_id = (SELECT id FROM students WHERE name = ?) ORDER BY step",
            [student])]


def test_dfa_trains_whole_blocks_not_only_biases(two_teachers, assets, monkeypatch):
    from kamalcli.train import loop

    seen = {}
    real = loop.train

    def spy(model, encoded, objective, *args, **kwargs):
        before = {k: v.detach().cpu().clone() for k, v in objective.auxiliary.state_dict().items()}
        result = real(model, encoded, objective, *args, **kwargs)
        seen.update({k: not torch.equal(before[k].cpu(), v.cpu()) for k, v in objective.auxiliary.state_dict().items()})
        return result

    monkeypatch.setattr(loop, "train", spy)
    two_teachers("amalgamate", "--method", "dfa", "--name", "d", *train_args(assets, epochs=1))
    weights = [k for k in seen if k.endswith("weight")]
    assert weights and all(seen[k] for k in weights), seen


def test_feature_method_resume_is_bit_for_bit(two_teachers, assets, interrupt_training):
    args = ["--method", "dfa", *train_args(assets), "--checkpoint-every", "3"]
    two_teachers("amalgamate", *args, "--name", "straight")
    interrupt_training(5)
    two_teachers("amalgamate", *args, "--name", "cut", code=130)
    interrupt_training(None)
    two_teachers("amalgamate", "--resume", "cut")
    students = {s["name"]: s for s in two_teachers.json("students")}
    a = load_file(str(Path(students["straight"]["path"]) / "model.safetensors"))
    b = load_file(str(Path(students["cut"]["path"]) / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_misaligned_tokenizers_fall_back_to_pooled_features(kamal, assets, trained, tmp_path):
    import shutil

    from transformers import BertTokenizerFast

    import tiny

    other = tmp_path / "other"
    shutil.copytree(trained["money"], other)
    words = tiny.vocabulary()
    reordered = words[:5] + words[5:][::-1]  # same words and size, other ids
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        (other / name).unlink(missing_ok=True)
    BertTokenizerFast(vocab={w: i for i, w in enumerate(reordered)}, do_lower_case=True).save_pretrained(str(other))
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", other, "--name", "money")
    kamal("add-data", assets["pool"], "--name", "pool")
    result = kamal("amalgamate", "--method", "mt-bert", "--name", "m", *train_args(assets, epochs=1))
    assert "tokenise the text differently from the student" in result.stderr
    student = next(s for s in kamal.json("students") if s["name"] == "m")
    assert student["train"]["objective"]["teacher_features"] == "cached, mean-pooled"


def test_cfl_needs_two_rows_a_batch(two_teachers, assets):
    args = train_args(assets)
    args[args.index("--batch-size") + 1] = 1
    result = two_teachers("amalgamate", "--method", "cfl", *args, code=2)
    assert "use --batch-size 2 or more" in result.stderr


def test_mt_bert_with_gold_labels_on_labelled_transfer(kamal, assets, trained):
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["test"], "--name", "labelled", "--label-column", "label")  # transfer, with labels
    result = kamal("amalgamate", "--method", "mt-bert", "--option", "labels=true", "--name", "m",
                   *train_args(assets, epochs=1), code=2)
    assert "teachers over one label set" in result.stderr
    free = kamal("amalgamate", "--method", "mt-bert", "--name", "free", *train_args(assets, epochs=1))
    assert free.exit_code == 0


def test_methods_lists_feature_sources(kamal):
    rows = {m["name"]: m for m in kamal.json("methods")}
    assert rows["dfa"]["level"] == "feature" and "in the loop" in rows["dfa"]["features"]
    assert rows["cfl"]["features"].startswith("cached")
    assert rows["mt-bert"]["labels"] == "optional" and rows["muki-hard"]["level"] == "output"


def test_cached_features_are_read_per_batch_and_a_repeat_is_free(two_teachers, assets, monkeypatch):
    from kamalcli.train import loop

    kinds = {}
    real = loop.train

    def spy(model, encoded, objective, *args, **kwargs):
        kinds.update({k: (type(v), v.dtype) for k, v in objective.arrays.items() if k.startswith("feat:")})
        return real(model, encoded, objective, *args, **kwargs)

    monkeypatch.setattr(loop, "train", spy)
    first = two_teachers("amalgamate", "--method", "cfl", "--name", "c1", *train_args(assets, epochs=1))
    assert "Probing news on pool first" in first.stderr and "Cached the mean-pooled features of news's layers 2" in first.stderr
    assert kinds and all(t is np.memmap and d == np.float16 for t, d in kinds.values()), kinds
    probes = len(two_teachers.json("report")["probes"])
    second = two_teachers("amalgamate", "--method", "cfl", "--name", "c2", *train_args(assets, epochs=1))
    assert "Probing" not in second.stderr and "Cached" not in second.stderr and len(two_teachers.json("report")["probes"]) == probes


def test_mt_bert_with_gold_labels_and_co_finetuning(same_labels, assets, monkeypatch):
    from kamalcli.train import loop

    real, calls = loop.train, []

    def interrupt(call_number, step):
        """Ctrl-C at `step` of the call_number-th training (1: co-finetuning, 2: the student)."""
        def wrapped(*a, **k):
            calls.append(1)
            if len(calls) != call_number:
                return real(*a, **k)

            def stop(at):
                if at == step:
                    raise KeyboardInterrupt
            return real(*a, **{**k, "on_step": stop})

        calls.clear()
        monkeypatch.setattr(loop, "train", wrapped)

    args = ["--method", "mt-bert", "--data", "labelled", *train_args(assets, epochs=1)]
    same_labels("amalgamate", *args, "--option", "labels=true", "--name", "paper")
    paper = next(s for s in same_labels.json("students") if s["name"] == "paper")
    assert paper["train"]["objective"]["variant"] == "paper (gold labels)"
    co = args + ["--option", "labels=true", "--option", "co_finetune=true", "--checkpoint-every", 2]
    straight = same_labels("amalgamate", *co, "--name", "co")
    assert "Co-finetuned 2 teachers" in straight.stderr
    interrupt(1, 3)  # inside co-finetuning
    same_labels("amalgamate", *co, "--name", "cut1", code=130)
    interrupt(1, 99)
    resumed = same_labels("amalgamate", "--resume", "cut1")
    assert "Co-finetuned 2 teachers" in resumed.stderr
    interrupt(2, 3)  # inside the student's training, after co-finetuning finished
    same_labels("amalgamate", *co, "--name", "cut2", code=130)
    interrupt(1, 99)
    resumed = same_labels("amalgamate", "--resume", "cut2")
    assert "Phase co-finetune finished before" in resumed.stderr
    students = {s["name"]: s for s in same_labels.json("students")}
    assert students["co"]["train"]["objective"]["co_finetuned"] is True
    a = load_file(str(Path(students["co"]["path"]) / "model.safetensors"))
    for cut in ("cut1", "cut2"):
        b = load_file(str(Path(students[cut]["path"]) / "model.safetensors"))
        assert all(torch.equal(a[k], b[k]) for k in a), cut


def test_an_auxiliary_gets_its_own_lr_and_a_hook_after_every_step(tmp_path):
    """The loop's contract with an Auxiliary, on a model small enough to follow by hand."""
    from types import SimpleNamespace

    from kamalcli.models.batching import Encoded
    from kamalcli.train.auxiliary import Auxiliary
    from kamalcli.train.loop import TrainConfig, make_optimizer, train
    from kamalcli.train.objective import Objective

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 2)

        def forward(self, input_ids, attention_mask, output_hidden_states=False, **_):
            h = self.embed(input_ids)
            return SimpleNamespace(logits=self.head(h.mean(1)), hidden_states=(h, h) if output_hidden_states else None)

    class Probe(Auxiliary):
        student_layers = (1,)
        lr = 0.5

        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Linear(4, 4)
            self.steps, self.shapes = [], []

        def forward(self, view, batch):
            self.shapes.append(tuple(view.hidden_states[1].shape))
            return (self.scale(view.hidden_states[1]) ** 2).mean(dim=(1, 2))

        def after_step(self, step, view, batch):
            self.steps.append(step)

    aux = Probe()
    config = TrainConfig(epochs=2, batch_size=4, lr=0.01, max_length=8)
    groups = make_optimizer(Model(), aux, config).param_groups
    assert sorted({g["lr"] for g in groups}) == [0.01, 0.5]
    encoded = Encoded([np.array([1, 2, 3]) for _ in range(10)], 0, False)
    objective = Objective({"y": np.zeros(10, dtype=np.int64)},
                          lambda logits, batch: torch.nn.functional.cross_entropy(logits, batch["y"], reduction="none"),
                          auxiliary=aux)
    before = aux.scale.weight.detach().clone()
    train(Model(), encoded, objective, config, tmp_path / "run")
    assert aux.steps == [1, 2, 3, 4, 5, 6]  # ceil(10 / 4) = 3 steps an epoch, 2 epochs
    assert aux.shapes[0] == (4, 3, 4) and aux.shapes[2] == (2, 3, 4)
    assert not torch.equal(before, aux.scale.weight.detach())
