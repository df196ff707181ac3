"""The README's path after `kamal synthesize` (issue 34): which transfer set amalgamate takes by default, the rows
where steering failed, and what synthesize prints while it works."""

from __future__ import annotations

import re
import warnings
from types import SimpleNamespace

import pytest

import tiny
from conftest import unfolded

SMALL = ["--per-class", 2, "--max-new-tokens", 4, "--batch-size", 2, "--top-m", 5]
TRAIN = ["--epochs", 1, "--lr", "2e-3", "--batch-size", 16, "--max-length", 32]


@pytest.fixture
def added(kamal, trained, assets):
    """Two teachers trained elsewhere and added as folders (kamal has not their training rows)."""
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal.train = ["--student", assets["encoder"], *TRAIN]
    return kamal


def _trained_rows(kamal, name: str) -> int:
    [student] = [s for s in kamal.json("students") if s["name"] == name]
    return student["train"]["train_rows"] + student["train"]["held_out_rows"]


# -- 1: the default transfer set ------------------------------------------------------------------

def test_real_text_is_the_transfer_set_when_generated_text_is_there_too(added, assets, lm):
    added("add-data", assets["pool"], "--name", "pool")
    added("synthesize", "--lm", lm, "--name", "synth", *SMALL)
    result = added("amalgamate", "--method", "vanilla-kd", "--name", "v1", *added.train)
    assert _trained_rows(added, "v1") == 240  # the pool's rows, not the generated ones
    [line] = [line for line in result.stderr.splitlines() if line.startswith("Transfer data")]
    assert line == ("Transfer data: pool, the real text (generated text in synth serves the scores; "
                    "--data NAME to choose another)")
    # asked for, the generated set is used and kamal has nothing to say about the choice
    result = added("amalgamate", "--method", "vanilla-kd", "--name", "v2", "--data", "synth", *added.train)
    assert "Transfer data" not in result.stderr
    [synth] = [d for d in added.json("data") if d["name"] == "synth"]
    assert _trained_rows(added, "v2") == synth["rows"]


def test_with_only_generated_text_it_is_the_transfer_set(added, lm):
    added("synthesize", "--lm", lm, "--name", "synth", *SMALL)
    result = added("amalgamate", "--method", "vanilla-kd", "--name", "v1", *added.train)
    [line] = [line for line in result.stderr.splitlines() if line.startswith("Transfer data")]
    assert line == ("Transfer data: synth, generated text (there is no real transfer text: "
                    "`kamal add-data FILE` adds some)")


def test_several_real_transfer_sets_are_still_a_choice_for_the_user(added, assets, lm, tmp_path):
    added("add-data", assets["pool"], "--name", "pool")
    added("add-data", tiny.write_jsonl(tmp_path / "more.jsonl", [{"text": "more text here"}] * 4), "--name", "more")
    added("synthesize", "--lm", lm, "--name", "synth", *SMALL)
    before = added.db_snapshot()
    result = added("amalgamate", "--method", "vanilla-kd", "--name", "v1", *added.train, code=2)
    assert result.output.strip() == "Error: several transfer sets of real text (pool, more): choose one with --data NAME"
    assert added.db_snapshot() == before


def test_the_line_comes_only_once_the_request_is_accepted(added, assets):
    added("add-data", assets["pool"], "--name", "pool")
    result = added("amalgamate", "--method", "vanilla-kd", "--name", "v1", *added.train, "--lr", "5", code=2)
    assert len(result.output.strip().splitlines()) == 1 and "Transfer data" not in result.output


# -- 5: rows where steering failed --------------------------------------------------------------------

def _scripted(monkeypatch, steering_p: dict[str, list[float]], others: float = 0.77):
    """Generation writes 'LABEL i'; the steering teacher gives p(LABEL) from steering_p in turn, and the other
    teacher `others` to its first class."""
    import numpy as np

    from kamalcli.synth import steering, synthesize

    monkeypatch.setattr(steering, "generate", lambda lm, scorer, class_index, prompts, config, seed: (
        [f"{p.split('about ')[1].rstrip('.')} {seed % 1000}-{i}" for i, p in enumerate(prompts)], steering.Timing()))

    def probs(teacher, texts, device, max_length):
        import numpy as np

        out, seen = np.zeros((len(texts), len(teacher.labels))), {}
        for row, text in enumerate(texts):
            label = text.split()[0]
            if label in teacher.labels:
                k = teacher.labels.index(label)
                p = steering_p[label][seen.setdefault(label, 0) % len(steering_p[label])]
                seen[label] += 1
                out[row] = (1 - p) / max(len(teacher.labels) - 1, 1)
                out[row, k] = p
            else:
                out[row] = (1 - others) / max(len(teacher.labels) - 1, 1)
                out[row, 0] = others
        return out

    monkeypatch.setattr(synthesize, "_teacher_logits", lambda *args: np.log(probs(*args)))


def test_rows_where_steering_failed_are_dropped_counted_and_named(added, lm, monkeypatch):
    _scripted(monkeypatch, {"world": [0.36], "sports": [0.9], "business": [0.8], "scitech": [0.3, 0.6]})
    result = added("synthesize", "--lm", lm, "--name", "synth", *SMALL, "--min-steering-p", 0.5)
    assert "Added transfer data synth: 5 generated rows, 3 classes" in result.stdout
    warning = [line for line in unfolded(result.stderr).splitlines() if line.startswith("Warning")]
    assert warning == [
        "Warning: steering failed on 3 of 8 rows (the steering teacher gave its class p < 0.5), dropped: "
        "news/world 2 of 2 (p(class) 0.36, other teachers 0.77), money/scitech 1 of 2 (p(class) 0.3, other teachers 0.77)",
        "Warning: news/world kept no row: the steering teacher did not recognise the class in what the LM wrote; "
        "name what your texts are in --prompt, or raise --strength (now 3)",
    ]
    [data] = added.json("data")
    assert data["label_counts"] == {"sports": 2, "business": 2, "scitech": 1}
    quality = data["provenance"]["quality"]
    groups = {(g["teacher"], g["label"]): g for g in quality["groups"]}
    assert {k: (g["rows"], g["dropped"]) for k, g in groups.items()} == {
        ("news", "world"): (0, 2), ("news", "sports"): (2, 0), ("money", "business"): (2, 0),
        ("money", "scitech"): (1, 1)}
    assert groups["news", "world"]["steering_p"] is None and groups["news", "world"]["dropped_steering_p"] == 0.36
    assert groups["money", "scitech"]["steering_p"] == 0.6
    # in its domain: the row's top class over both teachers' logits is its steering teacher's (0.9 and 0.8 beat
    # the other teacher's 0.77, 0.6 does not)
    assert {k: g["in_domain"] for k, g in groups.items()} == {
        ("news", "world"): None, ("news", "sports"): 1.0, ("money", "business"): 1.0, ("money", "scitech"): 0.0}
    assert quality["overall"]["in_domain"] == 0.8
    assert quality["overall"]["rows"] == 5 and quality["overall"]["dropped"] == 3
    assert quality["min_steering_p"] == 0.5
    assert "dropped" in added("report").stdout


def test_by_default_weak_rows_are_kept_counted_and_named(added, lm, monkeypatch):
    _scripted(monkeypatch, {"world": [0.36], "sports": [0.9], "business": [0.8], "scitech": [0.3, 0.6]})
    result = added("synthesize", "--lm", lm, "--name", "synth", *SMALL)
    assert "Added transfer data synth: 8 generated rows, 4 classes" in result.stdout
    assert [line for line in unfolded(result.stderr).splitlines()
            if line.startswith(("Note: the steering", "Warning"))] == [
        "Note: the steering teacher gave its class p < 0.5 on 3 of 8 rows, kept (a teacher unsure of a class is "
        "often unsure of text that is right; --min-steering-p 0.5 drops them): news/world 2 of 2 (p(class) 0.36), "
        "money/scitech 1 of 2 (p(class) 0.3)"]
    quality = added.json("data")[0]["provenance"]["quality"]
    assert quality["overall"]["weak"] == 3 and quality["overall"]["dropped"] == 0 and quality["min_steering_p"] == 0
    assert added.json("data")[0]["label_counts"] == {"world": 2, "sports": 2, "business": 2, "scitech": 2}


def test_when_steering_failed_everywhere_nothing_is_registered(added, lm, monkeypatch):
    _scripted(monkeypatch, {"world": [0.2], "sports": [0.4], "business": [0.1], "scitech": [0.49]})
    result = added("synthesize", "--lm", lm, "--name", "synth", *SMALL, "--strength", 1.5, "--min-steering-p", 0.5,
                   code=1)
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: steering failed on every one of the 8 rows (the steering teacher gave its class p < 0.5); name what "
        "your texts are in --prompt, or raise --strength (now 1.5)")
    assert added.json("data") == []


# -- 6: what synthesize prints while it works ------------------------------------------------------------

def test_a_rate_below_one_per_second_is_shown_as_seconds_per_item(monkeypatch, capsys):
    from kamalcli import progress

    now = [0.0]
    monkeypatch.setattr(progress, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    with progress.progress_bar(3, "synthesize s", unit="text") as bar:
        now[0] = 14.0
        bar.advance(2)
    assert capsys.readouterr().err.strip().splitlines()[-1] == "synthesize s: 2 text at 7.0 s/text"
    assert progress.rate_text(2.5, "ex") == "2.5 ex/s"
    assert progress.rate_text(0.14, "text") == "7.1 s/text"
    assert progress.rate_text(1.0, "step") == "1.0 step/s"


def test_the_lms_past_key_values_warning_is_silenced_and_no_other(lm, added):
    from kamalcli.synth.steering import quiet_lm_warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_lm_warnings():
            warnings.warn("`past_key_values` is deprecated and will be removed in version 5.40.0 for "
                          "`LlamaForCausalLM.forward`. Use `cache` instead.", FutureWarning)
            warnings.warn("something else is deprecated", FutureWarning)
        warnings.warn("`past_key_values` is deprecated (outside kamal's call)", FutureWarning)
    assert [str(w.message) for w in caught] == ["something else is deprecated",
                                                "`past_key_values` is deprecated (outside kamal's call)"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        added("synthesize", "--lm", lm, "--name", "synth", *SMALL)
    assert not [w for w in caught if re.search("past_key_values", str(w.message))]
