"""kamal amalgamate after kamal probe with other settings: the one cached probe is used; several need a choice."""

import json

import pytest

TRAIN = ["--epochs", "1", "--lr", "2e-3", "--batch-size", "16", "--max-length", "32"]
PROBE = ["--no-rmd", "--data", "pool", "--max-length", "32"]


@pytest.fixture
def probed(kamal, assets):
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    kamal("add-teacher", assets["teacher_b"], "--name", "b")
    kamal("add-data", assets["pool"], "--name", "pool")
    return kamal


def _amalgamate(kamal, assets, name, *args, code=0):
    return kamal("amalgamate", "--method", "muki-hard", "--name", name, "--student", assets["encoder"], *TRAIN,
                 *args, code=code)


def _probes(kamal) -> dict:
    """probe id -> (K, estimator) of every cached probe."""
    return {p["probe_id"]: (p["mc_samples"], p["mc_estimator"]) for p in kamal.json("report")["probes"]}


def _used(kamal, name) -> set:
    [student] = [s for s in kamal.json("students") if s["name"] == name]
    return {t["probe_id"] for t in student["teachers"]}


def test_the_only_cached_probe_is_used_whatever_its_k(probed, assets):
    probed("probe", "--mc-samples", "4", *PROBE)
    made = _probes(probed)
    result = _amalgamate(probed, assets, "s")
    assert ("No probe with the workspace's settings (K=16, adaptive) is cached for a, b on pool; using the one "
            "that is: K=4, adaptive") in result.stderr
    assert "first" not in result.stderr
    assert _used(probed, "s") == set(made) and _probes(probed) == made  # nothing probed again


def test_an_exact_probe_is_used_and_said_so(probed, assets):
    probed("probe", "--mc-samples", "2", "--mc-exact", *PROBE)
    result = _amalgamate(probed, assets, "s")
    assert "using the one that is: K=2, exact" in result.stderr and "first" not in result.stderr


def test_several_cached_settings_are_listed_with_the_options_that_pick_one(probed, assets):
    probed("probe", "--mc-samples", "4", *PROBE)
    probed("probe", "--mc-samples", "2", "--mc-exact", *PROBE)
    before = probed.db_snapshot()
    result = _amalgamate(probed, assets, "s", code=2)
    line = result.stderr.strip()
    assert "\n" not in line
    assert "cached probes of a, b on pool have several settings" in line
    assert "K=2, exact (--mc-samples 2 --mc-exact)" in line and "K=4, adaptive (--mc-samples 4 --mc-adaptive)" in line
    assert probed.db_snapshot() == before
    # --mc-samples alone picks one: the estimator is whatever that probe used
    result = _amalgamate(probed, assets, "s", "--mc-samples", "2")
    exact = {i for i, (k, _) in _probes(probed).items() if k == 2}
    assert _used(probed, "s") == exact and "first" not in result.stderr


def test_options_given_on_the_command_line_still_win(probed, assets):
    probed("probe", "--mc-samples", "4", *PROBE)
    result = _amalgamate(probed, assets, "s", "--mc-samples", "8", code=2)
    assert "have no K=8: pass --mc-samples" in result.stderr and "or --reprobe" in result.stderr
    result = _amalgamate(probed, assets, "s", "--mc-exact", code=2)
    assert "have no K=16, exact: pass --mc-samples" in result.stderr


def test_the_workspace_settings_win_when_their_probe_is_cached_beside_others(probed, assets):
    probed("probe", *PROBE)  # the workspace's settings: K=16, adaptive
    probed("probe", "--mc-samples", "4", *PROBE)
    result = _amalgamate(probed, assets, "s")
    default = {i for i, (k, _) in _probes(probed).items() if k == 16}
    assert _used(probed, "s") == default and "No probe with the workspace's settings" not in result.stderr


@pytest.fixture
def taught(kamal, assets):
    """A teacher kamal trained on `train`, whose texts are also added, without labels, as the pool."""
    kamal("add-data", assets["train"], "--name", "train", "--role", "eval")
    kamal("train-teacher", "train", "--labels", "world,sports", "--name", "news", "--base", assets["encoder"], *TRAIN)
    return kamal


def _unlabelled_copy(assets, path, order=slice(None)):
    rows = [json.loads(line) for line in assets["train"].read_text().splitlines()][order]
    path.write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in rows))
    return path


def test_the_rmd_fit_reads_the_pools_probe_when_the_pool_holds_the_teachers_own_texts(taught, assets, tmp_path):
    taught("add-data", _unlabelled_copy(assets, tmp_path / "pool.jsonl"), "--name", "pool")
    taught("probe", "--data", "pool", "--mc-samples", "2", "--max-length", "32")
    [probe] = taught.json("report")["probes"]
    assert probe["data"] == "pool"  # no second pass over the same texts under the name `train`
    assert probe["rmd"]["source"] == "teacher-train" and probe["rmd"]["fit_data"] == "train"
    labels = [json.loads(line)["label"] for line in assets["train"].read_text().splitlines()]
    assert probe["rmd"]["fit_rows"] == sum(label in ("world", "sports") for label in labels)


def test_texts_in_another_order_are_probed_again(taught, assets, tmp_path):
    taught("add-data", _unlabelled_copy(assets, tmp_path / "pool.jsonl", slice(None, None, -1)), "--name", "pool")
    taught("probe", "--data", "pool", "--mc-samples", "2", "--max-length", "32")
    assert sorted(p["data"] for p in taught.json("report")["probes"]) == ["pool", "train"]
