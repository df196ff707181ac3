"""kamal synthesize: what it refuses up front (in one line, changing nothing) and how it plans its batches."""

from __future__ import annotations

from types import SimpleNamespace

import pytest




@pytest.fixture
def news(kamal, assets):
    kamal("add-teacher", assets["teacher_a"], "--name", "news")
    return kamal


def refused(kamal, *args) -> str:
    """kamal synthesize ARGS exits 2 with one line and changes nothing; returns the line."""
    before = kamal.db_snapshot()
    result = kamal("synthesize", "--name", "s", *args, code=2)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert kamal.db_snapshot() == before and kamal.json("runs") == []
    return lines[0]


def _request(**changes):
    from kamalcli.synth.synthesize import DEFAULT_PROMPT, SynthesisRequest

    fields = dict(name="s", per_class=4, lm="lm", teachers=(), prompts=(DEFAULT_PROMPT,), strength=3.0, top_m=5,
                  top_p=0.9, max_new_tokens=4, mode="chunk", chunk_tokens=2, chunk_candidates=2, batch_size=2, seed=0)
    return SynthesisRequest(**{**fields, **changes})


# -- 8: --per-class is bounded, and batches are planned as they are needed -------------------

def test_per_class_above_the_bound_is_refused(news, lm, monkeypatch):
    from kamalcli.synth import synthesize

    monkeypatch.setattr(synthesize, "_generate", lambda *a, **k: pytest.fail("generation started"))
    line = refused(news, "--lm", lm, "--per-class", 100_001)
    assert "--per-class must be at most 100000 (texts per class of each teacher)" in line
    refused(news, "--lm", lm, "--per-class", 10**30)


def test_the_plan_is_made_batch_by_batch(monkeypatch):
    import itertools
    import tracemalloc

    from kamalcli.synth.synthesize import plan

    teachers = [SimpleNamespace(name=f"t{i}", labels=[f"c{j}" for j in range(2)]) for i in range(2)]
    request = _request(per_class=100_000, batch_size=1)
    tracemalloc.start()
    try:
        first = list(itertools.islice(plan(request, teachers), 3))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [u.index for u in first] == [0, 1, 2] and first[0].prompts == ("Write a short text about c0.",)
    assert peak < 1_000_000  # 400,000 batches planned up front take hundreds of megabytes
    from kamalcli.synth.synthesize import unit_count

    assert unit_count(request, teachers) == 2 * 2 * 100_000


def test_a_lazy_plan_gives_the_same_units_as_before():
    """Batch seeds and indexes are what a whole plan made up front gave (an interrupted run continues)."""
    import hashlib

    from kamalcli.synth.synthesize import plan, unit_count

    teachers = [SimpleNamespace(name="a", labels=["x_y", "z"]), SimpleNamespace(name="b", labels=["w"])]
    request = _request(per_class=5, batch_size=2, prompts=("p {label}", "q {label}"))
    units = list(plan(request, teachers))
    assert len(units) == unit_count(request, teachers) == 9
    assert [(u.index, u.teacher, u.label, len(u.prompts)) for u in units[:4]] == [
        (0, "a", "x_y", 2), (1, "a", "x_y", 2), (2, "a", "x_y", 1), (3, "a", "z", 2)]
    assert units[2].prompts == ("p x y",)  # row 4 takes the first prompt again
    digest = hashlib.sha256(b"0|a|z|0").hexdigest()
    assert units[3].seed == int(digest[:8], 16)


# -- 13 (and round 4, item 18): {label} is filled as it is: no format spec, no conversion ------

@pytest.mark.parametrize("prompt, spec", [
    ("about {label:>20000}", ":>20000"),
    ("about {label:d}", ":d"),
    ("about {label!r}", "!r"),
    ("about {label!z}", "!z"),
    ("about {label:>{width}}", ":>{width}"),
])
def test_a_prompt_with_a_format_spec_or_conversion_is_refused(news, lm, prompt, spec):
    line = refused(news, "--lm", lm, "--prompt", prompt)
    assert line == f"Error: --prompt {prompt!r}: {{label}} takes no format spec or conversion ({spec}); write {{label}} as it is"


# -- 15b: an empty --lm ------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_lm_is_refused(news, value, monkeypatch):
    from kamalcli.models import bases

    monkeypatch.setattr(bases, "resolve_lm_source", lambda source: pytest.fail("the default LM was resolved"))
    line = refused(news, "--lm", value)
    assert "--lm is empty: name a causal LM (kamal models) or give its folder" in line
