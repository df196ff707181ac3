"""kamal synthesize: steered generation, the generated dataset, resume, seeds, quality figures."""

from __future__ import annotations

import json
import sqlite3
from types import SimpleNamespace

import pytest

import tiny
from kamalcli.synth.quality import distinct_2, near_duplicate_share

SMALL = ["--per-class", 4, "--max-new-tokens", 6, "--batch-size", 2, "--top-m", 5]


@pytest.fixture
def news(kamal, trained):
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    return kamal


def _models(lm, trained):
    from kamalcli.synth.synthesize import load_models

    teacher = SimpleNamespace(name="news", path=trained["news"])
    return load_models(lm, [teacher], 32, "cpu")


# -- golden values ------------------------------------------------------------

def test_distinct_2_golden():
    # bigrams: (a b) (b c) | (a b) (b d) (d e): 5 in all, 4 distinct
    assert distinct_2(["a b c", "A b d e"]) == pytest.approx(4 / 5)
    assert distinct_2(["one", "two"]) is None  # no bigrams at all


def test_near_duplicate_share_golden():
    texts = [
        "the cat sat on the mat",        # trigrams: the cat sat, cat sat on, sat on the, on the mat
        "the cat sat on the rug",        # shares 3 of 5 distinct trigrams with the first: Jaccard 3/5 >= 0.5
        "a dog ran in the park today",
        "completely different words here now",
    ]
    assert near_duplicate_share(texts) == pytest.approx(2 / 4)
    # Jaccard 2/6 < 0.5: "the cat sat on a hat" shares 2 trigrams with the first of 4 + 4 - 2 = 6
    assert near_duplicate_share(["the cat sat on the mat", "the cat sat on a hat"]) == 0.0
    assert near_duplicate_share(["same", "same", "other"]) == pytest.approx(2 / 3)


def test_nucleus_keeps_the_smallest_set_reaching_p():
    import torch

    from kamalcli.synth.steering import nucleus

    kept = nucleus(torch.tensor([[0.5, 0.3, 0.15, 0.05]]), 0.9)
    # 0.5 + 0.3 = 0.8 < 0.9, so 0.15 is needed too; 0.05 goes
    assert torch.allclose(kept, torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)
    assert torch.allclose(nucleus(torch.tensor([[0.95, 0.05]]), 0.9), torch.tensor([[1.0, 0.0]]))


# -- the generator --------------------------------------------------------------

def test_kv_cache_steps_match_a_full_forward(lm, trained):
    """The stepper's incremental log-probabilities (left padding, one cache) equal a forward of the whole text."""
    import torch
    import torch.nn.functional as F

    from kamalcli.synth.steering import _Stepper

    model, _ = _models(lm, trained)
    prompts = [model.prompt_ids("the match today"), model.prompt_ids("goal")]
    stepper = _Stepper(model, prompts)
    fed = [[5, 6], [7, 8]]
    for step in range(2):
        stepper.feed(torch.tensor([fed[0][step], fed[1][step]]))
    for row, prompt in enumerate(prompts):
        ids = torch.tensor([prompt + fed[row]])
        with torch.no_grad():
            full = F.log_softmax(model.model(input_ids=ids).logits[0, -1].float(), dim=-1)
        assert torch.allclose(stepper.logits[row], full, atol=1e-4)


def test_every_candidate_of_a_step_goes_through_the_teacher_in_one_batch(lm, trained, monkeypatch):
    from kamalcli.synth.steering import SteeringConfig, TeacherScorer, generate

    model, scorers = _models(lm, trained)
    calls = []
    real = TeacherScorer.log_probs
    monkeypatch.setattr(TeacherScorer, "log_probs", lambda self, texts: calls.append(len(texts)) or real(self, texts))
    config = SteeringConfig(strength=2.0, top_m=5, max_new_tokens=4)
    texts, timing = generate(model, scorers["news"], 1, ["the", "a match", "goal"], config, seed=1)
    assert len(texts) == 3
    # one forward per step: 3 prompts x 5 candidates (fewer rows once a prompt has ended)
    assert calls[0] == 3 * 5 and len(calls) <= 4 and all(n % 5 == 0 for n in calls)
    assert timing.teacher_rows == sum(calls)


def _greedy(model, scorer, prompts, mode):
    """Token lists under top-m 1, where a text does not depend on the texts generated beside it."""
    import torch

    from kamalcli.synth.steering import SteeringConfig, Timing, _chunk_steering, _Stepper, _token_steering

    config = SteeringConfig(strength=2.0, top_m=1, max_new_tokens=8, mode=mode, chunk_tokens=3, chunk_candidates=4)
    run = _token_steering if mode == "token" else _chunk_steering
    stepper = _Stepper(model, [model.prompt_ids(p) for p in prompts])
    return run(model, stepper, scorer, 0, len(prompts), config, torch.Generator().manual_seed(0), Timing())


def test_a_text_that_ends_leaves_the_batch_and_the_others_go_on_as_alone(lm, trained, monkeypatch):
    from kamalcli.synth.steering import CausalLM, _Stepper

    model, scorers = _models(lm, trained)
    prompts = ["the match today", "goal", "a new", "world news", "money"]
    monkeypatch.setattr(CausalLM, "eos_ids", property(lambda self: set()))
    endless = [_greedy(model, None, [p], "token")[0] for p in prompts]
    # an end-of-text token that ends some texts early and never comes in others
    eos = next(t for tokens in endless for t in tokens[1:5] if any(t not in other for other in endless))
    monkeypatch.setattr(CausalLM, "eos_ids", property(lambda self: {eos}))
    for mode, scorer in (("token", None), ("token", scorers["news"]), ("chunk", scorers["news"])):
        alone = [_greedy(model, scorer, [p], mode)[0] for p in prompts]
        assert min(map(len, alone)) < 5 and max(map(len, alone)) == 8  # they ended at different steps
        fed, feed = [], _Stepper.feed
        monkeypatch.setattr(_Stepper, "feed", lambda self, tokens: fed.append(len(tokens)) or feed(self, tokens))
        assert _greedy(model, scorer, prompts, mode) == alone
        monkeypatch.setattr(_Stepper, "feed", feed)
        open_at_the_end = sum(len(tokens) == 8 for tokens in alone)
        assert fed[0] == len(prompts) * (4 if mode == "chunk" else 1)  # 4 candidates each
        assert fed[-1] == open_at_the_end * (4 if mode == "chunk" else 1) < fed[0]
        if mode == "chunk":  # chunks of 3: two feeds of every candidate, then the kept one's last token alone
            assert fed[2] <= len(prompts) and fed[3] == 4 * fed[2]


def test_later_chunks_draw_later_candidates_and_one_candidate_asks_no_teacher(lm, trained, monkeypatch):
    import torch

    from kamalcli.synth.steering import CausalLM, SteeringConfig, TeacherScorer, Timing, _chunk_steering, _Stepper

    model, scorers = _models(lm, trained)
    monkeypatch.setattr(CausalLM, "eos_ids", property(lambda self: set()))  # every text runs its 8 tokens
    prompts = ["the match today", "goal", "a new"]
    for later, teacher_rows in ((1, [3 * 4]), (2, [3 * 4, 3 * 2, 3 * 2])):
        fed, asked = [], []
        monkeypatch.setattr(_Stepper, "feed", lambda self, tokens, real=_Stepper.feed: fed.append(len(tokens))
                            or real(self, tokens))
        monkeypatch.setattr(TeacherScorer, "log_probs", lambda self, texts, real=TeacherScorer.log_probs:
                            asked.append(len(texts)) or real(self, texts))
        config = SteeringConfig(strength=2.0, top_m=5, max_new_tokens=8, mode="chunk", chunk_tokens=3,
                                chunk_candidates=4, later_candidates=later)
        stepper = _Stepper(model, [model.prompt_ids(p) for p in prompts])
        texts = _chunk_steering(model, stepper, scorers["news"], 0, 3, config, torch.Generator().manual_seed(0),
                                Timing())
        monkeypatch.undo()
        monkeypatch.setattr(CausalLM, "eos_ids", property(lambda self: set()))
        assert [len(t) for t in texts] == [8, 8, 8]
        assert asked == teacher_rows
        # chunks of 3, 3 and 2 tokens: every candidate reads all but its chunk's last token; the kept one reads that
        assert fed == [12, 12, 3, 3 * later, 3 * later, 3, 3 * later]


class _FixedLogits:
    def __init__(self, row):
        self.row = row

    def logits(self, texts):
        import torch

        return torch.tensor([self.row] * len(texts))


def test_the_ensemble_scorer_is_the_softmax_over_every_teachers_logits_with_shared_labels_summed():
    from kamalcli.synth.steering import EnsembleScorer

    two = EnsembleScorer([_FixedLogits([2.0, 0.0]), _FixedLogits([1.0, 1.0])], [["x", "y"], ["y", "z"]])
    assert two.labels == ["x", "y", "z"] and two.index("z") == 2
    # softmax over (2, 0, 1, 1); y is taught by both teachers: its two entries' mass is summed
    both = two.log_probs(["t", "u"])
    assert both.shape == (2, 3) and both[1].tolist() == pytest.approx([-0.62652338, -1.31326169, -1.62652338])
    apart = EnsembleScorer([_FixedLogits([2.0, 0.0]), _FixedLogits([1.0, -1.0])], [["x", "y"], ["v", "w"]])
    assert apart.log_probs(["t"])[0].tolist() == pytest.approx([-0.4401897, -2.4401897, -1.4401897, -3.4401897])


def test_contrast_steers_by_the_ensemble_and_without_it_by_the_unit_teacher():
    from kamalcli.synth.steering import EnsembleScorer
    from kamalcli.synth.synthesize import steering_scorer

    scorers = {"a": _FixedLogits([0.0, 0.0]), "b": _FixedLogits([0.0])}
    teachers = [SimpleNamespace(name="a", labels=["x", "y"]), SimpleNamespace(name="b", labels=["z"])]
    unit = SimpleNamespace(teacher="b", label="z", class_index=0)
    scorer, column = steering_scorer(scorers, teachers, True)(unit)
    assert isinstance(scorer, EnsembleScorer) and column == 2
    assert steering_scorer(scorers, teachers, False)(unit) == (scorers["b"], 0)
    assert steering_scorer(scorers, teachers[1:], True)(unit) == (scorers["b"], 0)  # one teacher: nothing to contrast


def test_steering_raises_the_teachers_probability(lm, trained):
    """Trained teacher, tiny random LM: steering to 'world' (which the teacher gives random text 0.01) works."""
    import numpy as np

    from kamalcli.synth.steering import SteeringConfig, generate

    model, scorers = _models(lm, trained)
    prompts = ["the", "a", "new", "today"] * 2
    p = {}
    for mode in ("token", "chunk"):
        for strength in (0.0, 4.0):
            config = SteeringConfig(strength=strength, top_m=8, max_new_tokens=8, mode=mode, chunk_tokens=4,
                                    chunk_candidates=6)
            texts, _ = generate(model, scorers["news"], 0, prompts, config, seed=3)
            p[mode, strength] = float(np.exp(scorers["news"].log_probs(texts)[:, 0].numpy()).mean())
    assert p["token", 0.0] < 0.1 and p["chunk", 0.0] == p["token", 0.0]  # plain: the same sampler either way
    assert p["token", 4.0] > 0.9
    assert p["chunk", 4.0] > 0.5


# -- the command ------------------------------------------------------------------

def test_synthesize_registers_a_dataset_with_provenance(news, lm, monkeypatch):
    monkeypatch.chdir(lm.parent.parent)  # round 4, item 19: --lm as a relative path is recorded as its folder
    out = news("synthesize", "--lm", f"{lm.parent.name}/{lm.name}", "--name", "synth", *SMALL, "--strength", 2).stdout
    # 16 written, every one kept (weak rows too: the steering teacher's p(class) < 0.5)
    assert "Added transfer data synth: 16 generated rows, 4 classes" in out and "distinct-2" in out
    [data] = news.json("data")
    assert data["role"] == "transfer" and data["rows"] == 16
    assert data["label_counts"] == {"world": 4, "sports": 4, "business": 4, "scitech": 4}
    prov = data["provenance"]
    quality = prov["quality"]
    assert quality["overall"]["dropped"] == 0 and quality["overall"]["weak"] == sum(g["weak"] for g in quality["groups"])
    assert prov["generator"]["lm"] == str(lm.resolve()) and len(prov["generator"]["fingerprint"]) == 64
    assert [t["name"] for t in prov["teachers"]] == ["news", "money"]
    assert prov["settings"]["strength"] == 2.0 and prov["settings"]["top_m"] == 5 and prov["settings"]["seed"] == 0
    assert prov["settings"]["contrast"] is True
    assert prov["prompts"] == ["Write a short text about {label}."]
    quality = prov["quality"]
    assert {(g["teacher"], g["label"]) for g in quality["groups"]} == {
        ("news", "world"), ("news", "sports"), ("money", "business"), ("money", "scitech")}
    assert 0 <= quality["overall"]["steering_p"] <= 1 and 0 <= quality["overall"]["others_confidence"] <= 1
    assert "generated by" in news("data").stdout and data["source"] == f"kamal synthesize ({lm.resolve()})"
    report = news.json("report")
    assert report["generated"][0]["data"] == "synth"
    assert news("report").stdout.count("teacher p(class)") == 1
    import pyarrow.parquet as pq

    [path] = (news.workspace / ".kamal" / "artifacts" / "data").glob("*.parquet")
    stored = pq.read_table(path).to_pydict()
    assert set(stored) == {"text", "label", "teacher", "prompt"}
    assert stored["prompt"][0] == "Write a short text about " + stored["label"][0] + "."
    [run] = [r for r in news.json("runs") if r["kind"] == "synthesize"]
    assert run["status"] == "done" and run["result"] == {"dataset": "synth", "rows": 16}


def test_same_seed_same_text_other_seed_other_text(news, lm):
    news("synthesize", "--lm", lm, "--name", "a", *SMALL, "--teacher", "news")
    news("synthesize", "--lm", lm, "--name", "b", *SMALL, "--teacher", "news")
    news("synthesize", "--lm", lm, "--name", "c", *SMALL, "--teacher", "news", "--seed", 9)
    hashes = {d["name"]: d["content_hash"] for d in news.json("data")}
    assert hashes["a"] == hashes["b"] != hashes["c"]


@pytest.fixture
def interrupt_batch(monkeypatch):
    """interrupt_batch(n): Ctrl-C comes while the n-th batch is generated; interrupt_batch(None) undoes it."""
    from kamalcli.synth import steering

    real = steering.generate

    def arm(n: int | None) -> None:
        calls = []

        def interrupted(*args, **kwargs):
            calls.append(1)
            if len(calls) == n:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(steering, "generate", real if n is None else interrupted)

    return arm


def test_interrupted_synthesis_keeps_what_was_written_and_continues(news, lm, interrupt_batch):
    interrupt_batch(3)
    result = news("synthesize", "--lm", lm, "--name", "s", *SMALL, code=130)
    assert "kept" in result.output
    assert news.json("data") == []
    [run] = news.json("runs")[-1:]
    assert run["status"] == "interrupted"
    units = list((news.workspace / ".kamal" / "artifacts" / "runs").glob("run-*/units/*.json"))
    assert len(units) == 2
    news("status")  # another command that takes the write lock must not clean the written batches away
    news("add-data", tiny.write_jsonl(news.workspace.parent / "x.jsonl", [{"text": "a b"}]), "--name", "x")
    interrupt_batch(None)
    out = news("synthesize", "--lm", lm, "--name", "s", *SMALL).output
    assert "2 of 8 batches were written before" in out
    news("synthesize", "--lm", lm, "--name", "whole", *SMALL)
    hashes = {d["name"]: d["content_hash"] for d in news.json("data")}
    assert hashes["s"] == hashes["whole"]
    assert not list((news.workspace / ".kamal" / "artifacts" / "runs").glob("run-*"))


def test_continuing_with_other_settings_is_refused(news, lm, interrupt_batch):
    interrupt_batch(2)
    news("synthesize", "--lm", lm, "--name", "s", *SMALL, code=130)
    result = news("synthesize", "--lm", lm, "--name", "s", *SMALL, "--strength", 5, code=2)
    assert "used other settings (strength)" in result.output


@pytest.mark.parametrize("args, message", [
    (["--per-class", 0], "--per-class must be at least 1"),
    (["--prompt", "no placeholder"], "has no {label}"),
    (["--prompt", "about {lable}"], "unknown field {lable}; a prompt may use {label}"),
    (["--prompt", "about {label} {"], "Single '{' encountered"),
    (["--lm", "/no/such/folder"], "not a named causal LM"),
    (["--teacher", "nobody"], "nobody"),
    (["--top-p", 1.5], "--top-p must be in (0, 1]"),
    (["--later-candidates", 0], "--chunk-tokens, --chunk-candidates and --later-candidates must be at least 1"),
])
def test_bad_input_is_one_line_and_changes_nothing(news, lm, args, message):
    before = news.db_snapshot()
    result = news("synthesize", "--name", "s", *(["--lm", lm] if "--lm" not in args else []), *args, code=2)
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert news.db_snapshot() == before


def test_old_workspaces_get_the_provenance_column(news, lm):
    conn = sqlite3.connect(news.workspace / ".kamal" / "kamal.db")
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(datasets)")]
        names = [r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations")]
    finally:
        conn.close()
    assert "provenance" in columns and "m007_dataset_provenance" in names
    news("add-data", tiny.write_jsonl(news.workspace.parent / "y.jsonl", [{"text": "a b"}]), "--name", "y")
    assert news.json("data")[0]["provenance"] is None
    assert json.loads(json.dumps(news.json("report")))["generated"] == []


def test_the_provenance_line_names_the_later_candidates_when_recorded():
    from kamalcli.cli.synth_cmds import provenance_line

    settings = {"strength": 3.0, "mode": "chunk", "chunk_candidates": 8, "chunk_tokens": 8, "contrast": True,
                "top_m": 20, "top_p": 0.9, "max_new_tokens": 32, "seed": 1}
    provenance = {"settings": settings, "generator": {"lm": "smollm2-135m", "fingerprint": "0123456789abcdef"},
                  "teachers": [{"name": "a"}, {"name": "b"}], "prompts": ["about {label}"]}
    before = provenance_line(provenance)  # a dataset generated before --later-candidates existed
    assert "chunk steering, lambda 3, 8 candidates for every chunk of 8 tokens, by the teachers' ensemble" in before
    provenance["settings"] = {**settings, "later_candidates": 2}
    assert ("8 candidates for the first chunk of 8 tokens, 2 for later ones, by the teachers' ensemble"
            in provenance_line(provenance))
