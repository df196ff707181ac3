"""Label reconciliation: aliases in the union, proposals with golden scores, kamal labels merge / split."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tiny
from kamalcli.labels import Aliases, LabelSpace
from kamalcli.teachers.label_overlap import co_assignment, name_key, name_similarity, propose


def test_aliases_join_columns_and_read_gold_by_any_name():
    aliases = Aliases({"audio": "sound", "PERSON": "PER"})
    space = LabelSpace.from_teachers([("a", ["sound", "x"]), ("b", ["audio", "y"])], aliases=aliases)
    assert space.names == ("sound", "x", "y")
    assert space.blocks == {"a": (0, 1), "b": (0, 2)}
    assert space.indices(["audio", "sound", "y", "z"]).tolist() == [0, 0, 2, -1]
    assert space.pad("b", np.array([[0.25, 0.75]])).tolist() == [[0.25, 0.0, 0.75]]
    assert [aliases.canonical(t) for t in ("B-PERSON", "I-PERSON", "O", "B-LOC")] == ["B-PER", "I-PER", "O", "B-LOC"]
    assert aliases.within(["sound", "x"]).as_json() == {"audio": "sound"}
    # a student trained before the merge keeps its own names; the new teacher's alias finds its column
    grown = LabelSpace.from_teachers([("c", ["audio", "new"])], start=["sound", "x"], aliases=aliases)
    assert grown.names == ("sound", "x", "new") and grown.blocks["c"] == (0, 2)


def test_kappa_and_conditionals_golden():
    seen = co_assignment(np.array([0, 0, 1, 1]), np.array([0, 0, 1, 0]), 0, 0, "d")
    # observed agreement 3/4, chance (2*3 + 2*1)/16 = 1/2, kappa (0.75 - 0.5) / 0.5
    assert (seen.forward, seen.backward, seen.kappa, seen.together, seen.rows) == (1.0, 2 / 3, 0.5, 2, 4)


def test_names_match_by_spelling_or_by_vectors():
    assert name_key("Sports") == name_key("sport") and name_key("gaming") == name_key("games")
    assert name_similarity("Sports", "sport", None) == 1.0
    assert name_similarity("net", "network", None) == 0.0
    vectors = {"net": np.array([1.0, 0.0]), "network": np.array([0.6, 0.8]), "web": np.array([-1.0, 0.0])}
    assert name_similarity("net", "network", vectors) == pytest.approx(0.6)
    assert name_similarity("net", "web", vectors) == 0.0  # floored


def test_proposals_same_and_nested_golden():
    vectors = {"sound": [1, 0, 0], "audio": [0.8, 0.6, 0], "science": [0, 1, 0], "math": [0, 0.6, 0.8],
               "web": [0, 0, 1]}
    vectors = {k: np.array(v, dtype=float) for k, v in vectors.items()}
    top = {"a": np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1] * 3), "b": np.array([0, 0, 0, 0, 1, 1, 2, 2, 2, 2] * 3)}
    found = propose([("a", ["sound", "science"]), ("b", ["audio", "math", "web"])], vectors, top, lambda x: x,
                    data="pool")
    assert [(p.kind, p.labels, p.teachers) for p in found] == [("same", ("sound", "audio"), ("a", "b")),
                                                               ("nested", ("science", "math"), ("a", "b"))]
    # same: sqrt(names 0.8 * kappa 1); nested: sqrt(names 0.6 * P(science | math) 1), P(math | science) = 1/3
    assert found[0].score == pytest.approx(0.894427, abs=1e-6)
    assert found[1].score == pytest.approx(0.774597, abs=1e-6)
    assert found[0].command == "kamal labels merge sound audio"
    # labels already one class are not proposed again; without behaviour the names decide alone
    assert propose([("a", ["sound"]), ("b", ["audio"])], vectors, top, lambda x: "sound") == []
    alone = propose([("a", ["sound"]), ("b", ["audio"])], vectors, None, lambda x: x)
    assert [(p.kind, round(p.score, 6)) for p in alone] == [("same", 0.8)]


def test_no_pair_is_proposed_that_would_make_two_labels_of_one_teacher_one_class():
    # a sentence encoder finds antonyms alike; both teachers know both sentiments, so neither pair is one class
    vectors = {"negative": np.array([1.0, 0.0]), "positive": np.array([0.9, np.sqrt(1 - 0.81)]),
               "games": np.array([0.0, 1.0])}
    assert propose([("zh", ["negative", "positive"]), ("all", ["games", "negative", "positive"])], vectors, None,
                   lambda x: x) == []
    # with positive known to both, negative ~ positive would join zh's two labels too
    assert propose([("zh", ["negative", "positive"]), ("one", ["games", "positive"])], vectors, None,
                   lambda x: x) == []
    # a name neither teacher shares stays a candidate for each, by its names (cosine 1.0 and 0.9)
    found = propose([("zh", ["negative", "positive"]), ("en", ["games", "bad"])],
                    {**vectors, "bad": np.array([1.0, 0.0])}, None, lambda x: x)
    assert [(p.labels, round(p.score, 6)) for p in found] == [(("negative", "bad"), 1.0), (("positive", "bad"), 0.9)]


def test_a_label_its_teacher_never_gives_is_judged_by_name():
    vectors = {"email": np.array([1.0, 0.0]), "mail": np.array([0.85, np.sqrt(1 - 0.85 ** 2)])}
    top = {"a": np.zeros(50, dtype=int) + 1, "b": np.zeros(50, dtype=int)}  # a never says email (index 0)
    [found] = propose([("a", ["email", "other"]), ("b", ["mail"])], vectors, top, lambda x: x, data="pool")
    assert found.labels == ("email", "mail") and found.score == pytest.approx(0.85)
    assert found.behaviour.silent and "too few" in found.reason


@pytest.fixture
def renamed(kamal, assets, trained, tmp_path):
    """news (world, sports) and club (sport, business): one class under two names."""
    club = tiny.make_classifier(tmp_path / "club", ["sport", "business"], seed=8)
    kamal("add-teacher", trained["news"], "--name", "news")
    added = kamal("add-teacher", club, "--name", "club")
    kamal("add-data", assets["pool"], "--name", "pool")
    return kamal, added


def test_add_teacher_points_to_kamal_labels(renamed):
    _, added = renamed
    assert "'sport' ~ 'sports' (news)" in added.output and "kamal labels" in added.output


def test_merge_applies_to_union_students_eval_and_split_undoes(renamed, assets, tmp_path):
    kamal, _ = renamed
    kamal("probe", "--data", "pool", "--mc-samples", 2, "--no-rmd")
    view = kamal.json("labels")
    assert set(view) == {"labels", "tags", "aliases", "classes", "proposals", "evidence", "notes"}
    assert view["labels"] == ["world", "sports", "sport", "business"]
    same = [p for p in view["proposals"] if p["kind"] == "same"]
    assert [(p["labels"], p["names"]) for p in same][:1] == [(["sports", "sport"], 1.0)]
    assert view["evidence"] == {"data": "pool", "encoder": None} and same[0]["behaviour"]["rows"] == 240
    assert "by spelling only" in view["notes"][0]  # the sentence encoder is not installed in unit tests

    before = kamal.db_snapshot()["selection"]
    kamal("labels", "merge", "sports", "sport")
    assert kamal.json("labels")["labels"] == ["world", "sports", "business"]
    assert all("sports" not in p["labels"] for p in kamal.json("labels")["proposals"])
    teachers = {t["name"]: t for t in kamal.json("teachers")}
    assert teachers["club"]["classes"] == ["sports", "business"]
    assert "sport (= sports)" in kamal("teachers").output
    assert before is not None and kamal.db_snapshot()["selection"] == []

    kamal("amalgamate", "--method", "vanilla-kd", "--name", "s", "--student", assets["encoder"], "--epochs", 1,
          "--batch-size", 16, "--max-length", 32)
    student = next(s for s in kamal.json("students") if s["name"] == "s")
    assert student["labels"] == ["world", "sports", "business"]
    assert student["label_aliases"] == {"sport": "sports"}
    config = json.loads((Path(student["path"]) / "config.json").read_text())
    assert config["label_aliases"] == {"sport": "sports"}

    gold = [{"text": r["text"], "label": "sport" if r["label"] == "sports" else r["label"]}
            for r in tiny.topic_rows(["world", "sports", "business"], 5, seed=3)]
    added = kamal("add-data", tiny.write_jsonl(tmp_path / "gold.jsonl", gold), "--name", "gold", "--role", "eval")
    assert "no teacher knows" not in added.output
    metrics = kamal.json("eval", "s", "--data", "gold")
    assert metrics["rows"] == 15 and metrics.get("unknown_label_rows", 0) == 0

    kamal("labels", "split", "sport")
    assert kamal.json("labels")["labels"] == ["world", "sports", "sport", "business"]
    # the student keeps the classes it was trained over
    assert next(s for s in kamal.json("students") if s["name"] == "s")["label_aliases"] == {"sport": "sports"}


@pytest.mark.parametrize("args, message", [
    (("merge", "world", "sports"), "'world' and 'sports' are both labels of teacher news"),
    (("merge", "sports", "nope"), "no label 'nope'"),
    (("merge", "sports", "sport", "--as", "business"), "'business' is already the name of another class"),
    (("merge", "sports"), "give two labels or more"),
    (("split", "world"), "'world' was never merged"),
    (("split", "nope"), "no label 'nope'"),
])
def test_bad_merges_change_nothing(renamed, args, message):
    kamal, _ = renamed
    before = kamal.db_snapshot()
    result = kamal("labels", *args, code=2)
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert kamal.db_snapshot() == before


def test_extend_refines_with_a_renamed_teacher(renamed, assets, tmp_path):
    kamal, _ = renamed
    kamal("amalgamate", "--method", "vanilla-kd", "--name", "s", "--student", assets["encoder"], "--epochs", 1,
          "--batch-size", 16, "--max-length", 32, "--mc-samples", 1)
    copy = tiny.make_classifier(tmp_path / "copy", ["Sports", "World"], seed=9)
    kamal("add-teacher", copy, "--name", "copy")
    kamal("labels", "merge", "sports", "Sports")
    kamal("labels", "merge", "world", "World")
    kamal("extend", "s", "--teacher", "copy", "--name", "s2", "--refine", "--epochs", 1, "--batch-size", 16,
          "--mc-samples", 1)
    grown = next(s for s in kamal.json("students") if s["name"] == "s2")
    assert grown["labels"] == ["world", "sports", "sport", "business"]  # refined: no duplicate classes
    assert grown["label_aliases"] == {"Sports": "sports", "World": "world"}


def test_exports_carry_the_aliases(renamed, assets, tmp_path):
    kamal, _ = renamed
    kamal("labels", "merge", "sports", "sport")
    kamal("amalgamate", "--method", "vanilla-kd", "--name", "s", "--student", assets["encoder"], "--epochs", 1,
          "--batch-size", 16, "--max-length", 32, "--mc-samples", 1)
    kamal("export", "s", "--onnx")
    folder = kamal.workspace / ".kamal" / "artifacts" / "exports" / "s"
    assert json.loads((folder / "config.json").read_text())["label_aliases"] == {"sport": "sports"}
    card = (folder / "README.md").read_text()
    assert "| id | label | also called |" in card and "| 1 | sports | sport |" in card
    kamal("export", "s", "--hf", "--out", tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["label_aliases"] == {"sport": "sports"}
    assert "| 1 | sports | sport |" in (tmp_path / "hf" / "README.md").read_text()


def test_entity_types_merge_for_token_teachers(kamal, tmp_path):
    """PERSON into PER: one B-/I- pair in the union, gold tags under either name."""
    encoder = tiny.make_encoder(tmp_path / "encoder", seed=6)
    kamal("add-teacher", tiny.make_token_classifier(tmp_path / "t1", ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"],
                                                    seed=1), "--name", "perloc")
    kamal("add-teacher", tiny.make_token_classifier(tmp_path / "t2", ["O", "B-PERSON", "I-PERSON"], seed=2),
          "--name", "person")
    kamal("add-data", tiny.write_jsonl(tmp_path / "pool.jsonl", tiny.ner_rows(40, seed=2, tagged=False)),
          "--name", "pool")
    renamed = [{**r, "tags": [t.replace("PER", "PERSON") for t in r["tags"]]} for r in tiny.ner_rows(12, seed=3)]
    kamal("add-data", tiny.write_jsonl(tmp_path / "test.jsonl", renamed), "--name", "test", "--role", "eval")
    view = kamal.json("labels")
    assert view["tags"] == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-PERSON", "I-PERSON"]
    assert [(p["kind"], p["labels"]) for p in view["proposals"]] == []  # PER and PERSON differ in spelling
    kamal("labels", "merge", "PER", "PERSON")
    assert kamal.json("labels")["tags"] == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    assert "B-PERSON (= B-PER)" in kamal("teachers").output
    kamal("amalgamate", "--method", "vanilla-kd", "--name", "s", "--student", encoder, "--data", "pool",
          "--epochs", 1, "--batch-size", 16, "--max-length", 32, "--mc-samples", 1)
    student = next(s for s in kamal.json("students") if s["name"] == "s")
    assert student["labels"] == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    assert student["label_aliases"] == {"PERSON": "PER"}
    metrics = kamal.json("eval", "s", "--data", "test")
    assert "PERSON" not in metrics["per_type"] and metrics["per_type"]["PER"]["support"] > 0


def test_a_run_resumes_only_under_the_merges_it_started_with(renamed, assets, interrupt_training):
    kamal, _ = renamed
    kamal("labels", "merge", "sports", "sport")
    interrupt_training(3)
    kamal("amalgamate", "--method", "vanilla-kd", "--name", "cut", "--student", assets["encoder"], "--epochs", 2,
          "--batch-size", 16, "--max-length", 32, "--mc-samples", 1, "--checkpoint-every", 2, code=130)
    interrupt_training(None)
    kamal("labels", "split", "sports")
    refused = kamal("amalgamate", "--resume", "cut", code=2)
    assert "the label merges changed since cut started (then: sport = sports; now: none)" in refused.output
    kamal("labels", "merge", "sports", "sport")
    kamal("amalgamate", "--resume", "cut")
    assert next(s for s in kamal.json("students") if s["name"] == "cut")["labels"] == ["world", "sports", "business"]


def test_probe_figures_read_gold_labels_through_the_merge(renamed, tmp_path):
    kamal, _ = renamed
    kamal("labels", "merge", "sports", "sport")
    gold = tiny.topic_rows(["world", "sports", "business"], 5, seed=4)  # gold says sports, club says sport
    kamal("add-data", tiny.write_jsonl(tmp_path / "gold.jsonl", gold), "--name", "gold", "--role", "eval")
    kamal("probe", "--data", "gold", "--mc-samples", 2, "--no-rmd")
    probes = {p["teacher"]: p for p in kamal.json("report")["probes"] if p["data"] == "gold"}
    assert probes["club"]["in_domain_rows"] == 10 and probes["news"]["in_domain_rows"] == 10
    assert [s for s in kamal.json("report")["selection"] if s["data"] == "gold"]
