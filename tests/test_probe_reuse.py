"""kamal amalgamate after kamal probe with other settings: the one cached probe is used; several need a choice."""

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
