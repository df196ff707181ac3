"""kamal probe / report: computed once, cached by teacher + data + options, safe to interrupt."""

import sqlite3

import pytest


def _probe_count(ws):
    conn = sqlite3.connect(ws / ".kamal" / "kamal.db")
    try:
        return conn.execute("SELECT count(*) FROM probes").fetchone()[0], conn.execute("SELECT count(*) FROM probe_rows").fetchone()[0]
    finally:
        conn.close()


def test_probe_everything_then_a_repeat_does_nothing(two_teachers, ws):
    result = two_teachers("probe", "--mc-samples", "4")
    assert "Teacher selection on test" in result.stdout
    probes, rows = _probe_count(ws)
    assert probes == 4 and rows == 2 * (240 + 80)
    report = two_teachers.json("report")
    assert {p["teacher"] for p in report["probes"]} == {"news", "money"}
    test_news = next(p for p in report["probes"] if p["teacher"] == "news" and p["data"] == "test")
    assert test_news["in_domain_rows"] == 40 and test_news["out_domain_rows"] == 40
    assert test_news["accuracy_in"] > 0.9  # the tiny teachers really learned their topics
    assert test_news["ece_in"] < 0.5 * test_news["ece_out"] and test_news["ece_out"] == pytest.approx(test_news["confidence_out"])
    assert test_news["rmd"]["source"] == "pseudo" and test_news["rmd"]["circular"] is True
    scores = {s["score"] for s in report["selection"] if s["data"] == "test"}
    assert {"mc-dropout", "entropy", "max-prob", "rmd", "oracle"} <= scores

    again = two_teachers("probe", "--mc-samples", "4")
    assert "Nothing to do: all 4 probes were cached" in again.stdout
    assert _probe_count(ws) == (probes, rows)


def test_a_new_teacher_is_probed_alone(two_teachers, assets, ws):
    two_teachers("probe", "--mc-samples", "2", "--no-rmd")
    before = {(p["teacher"], p["data"]): p["probe_id"] for p in two_teachers.json("report")["probes"]}
    two_teachers("add-teacher", assets["teacher_c"], "--name", "third")
    result = two_teachers("probe", "--mc-samples", "2", "--no-rmd")
    assert "2 more were cached" not in result.stdout and "4 more were cached." in result.stdout
    after = {(p["teacher"], p["data"]): p["probe_id"] for p in two_teachers.json("report")["probes"]}
    assert {k: v for k, v in after.items() if k in before} == before
    assert {k for k in after if k not in before} == {("third", "pool"), ("third", "test")}


def test_labelled_rmd_fit_and_k_1(two_teachers):
    two_teachers("probe", "--mc-samples", "1", "--rmd-fit", "test", "--data", "test")
    [news] = [p for p in two_teachers.json("report")["probes"] if p["teacher"] == "news"]
    assert news["rmd"]["source"] == "labelled" and news["rmd"]["fit_rows"] == 40
    assert news["mean_mc_uhat"] == pytest.approx(news["mean_uhat"], abs=1e-6)  # K = 1: no sampling


def test_labelled_rmd_fit_adds_the_prototype_scores_beside_auto(two_teachers, assets, monkeypatch, uninstalled_base):
    monkeypatch.setattr("kamalcli.probe.prototypes.DEFAULT_ENCODER", str(assets["encoder"]))
    two_teachers("add-data", assets["train"], "--name", "train", "--role", "eval")
    out = two_teachers("probe", "--mc-samples", "1", "--rmd-fit", "train", "--data", "test").output
    assert "Cached the sentence vectors" in out
    selection = {s["score"]: s for s in two_teachers.json("report")["selection"] if s["data"] == "test"}
    assert {"prototype", "rmd+prototype"} <= set(selection)
    [auto] = [s for s in selection if s.startswith("auto: ")]  # the row of the score score=auto takes
    assert selection[auto]["accuracy"] == selection[auto.removeprefix("auto: ")]["accuracy"]
    # without the encoder (its package not installed), the table says so and goes without the prototype rows
    monkeypatch.undo()
    uninstalled_base("minilm-l6")
    out = two_teachers("probe", "--mc-samples", "1", "--rmd-fit", "train", "--data", "test").output
    assert "No prototype score in the selection table" in out
    selection = {s["score"]: s for s in two_teachers.json("report")["selection"] if s["data"] == "test"}
    assert "prototype" not in selection and any(s.startswith("auto: ") for s in selection)


def test_interrupted_probe_leaves_no_partial_cache(two_teachers, ws, monkeypatch):
    import kamalcli.probe.mc_dropout as mc

    real = mc.run_teacher

    def interrupted(model, encoded, settings, out_dir, **kwargs):
        real(model, encoded, settings, out_dir, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(mc, "run_teacher", interrupted)
    result = two_teachers("probe", "--mc-samples", "2", code=130)
    assert "Interrupted" in result.stderr
    assert _probe_count(ws) == (0, 0)
    [run] = two_teachers.json("runs")
    assert run["status"] == "interrupted"
    assert not any((ws / ".kamal" / "artifacts" / "probes").iterdir())
    assert not any((ws / ".kamal" / "artifacts" / "tmp").iterdir())
    monkeypatch.setattr(mc, "run_teacher", real)
    two_teachers("probe", "--mc-samples", "2", "--no-rmd")
    assert _probe_count(ws)[0] == 4


@pytest.mark.parametrize("args, message", [
    (["--teacher", "nobody"], "no teacher named 'nobody'"),
    (["--data", "nothing"], "no dataset named 'nothing'"),
    (["--mc-samples", "0"], "--mc-samples must be at least 1"),
    (["--dropout", "1.0"], "--dropout must be in [0, 1)"),
    (["--rmd-layers", "9"], "teacher news has layers 0..2"),
])
def test_bad_probe_options(two_teachers, args, message):
    result = two_teachers("probe", *args, code=2)
    assert message in result.stderr


def test_no_dropout_teacher_gets_a_clear_message(kamal, assets):
    kamal("add-teacher", assets["no_dropout"], "--name", "flat")
    kamal("add-data", assets["pool"], "--name", "pool")
    result = kamal("probe", "--mc-samples", "4", code=2)
    assert "MC dropout is impossible for teacher flat" in result.stderr
    kamal("probe", "--mc-samples", "4", "--dropout", "0.1", "--no-rmd")


def test_eval_labels_outside_the_union_are_reported(kamal, assets):
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    kamal("add-data", assets["test"], "--name", "test", "--role", "eval")
    result = kamal("probe", "--mc-samples", "2", "--no-rmd")
    assert "test has labels no teacher knows (business, scitech)" in result.stderr


def test_probe_without_anything(kamal, assets):
    assert "no teachers to probe" in kamal("probe", code=2).stderr
    kamal("add-teacher", assets["teacher_a"], "--name", "a")
    assert "no data to probe on" in kamal("probe", code=2).stderr


def test_removing_a_teacher_or_dataset_removes_its_cached_probes(two_teachers, ws):
    two_teachers("probe", "--mc-samples", "2")
    probes_dir = ws / ".kamal" / "artifacts" / "probes"
    before = len(list(probes_dir.iterdir()))
    result = two_teachers("remove-teacher", "money")
    assert "and 3 cached probe folders" in result.stdout  # two probes and one RMD fit
    assert len(list(probes_dir.iterdir())) == before - 3
    two_teachers("remove-data", "test")
    assert _probe_count(ws)[0] == 1
    assert len(list((ws / ".kamal" / "artifacts" / "data").iterdir())) == 1


def test_exact_and_adaptive_probes_are_cached_apart(two_teachers, ws):
    from kamalcli.workspace.config import set_config_values

    two_teachers("probe", "--mc-samples", "4", "--no-rmd", "--data", "test")
    assert _probe_count(ws)[0] == 2
    exact = two_teachers("probe", "--mc-samples", "4", "--no-rmd", "--data", "test", "--mc-exact")
    assert "cached" not in exact.stdout and _probe_count(ws)[0] == 4  # the adaptive probe does not serve it
    assert "all 2 probes were cached" in two_teachers("probe", "--mc-samples", "4", "--no-rmd", "--data", "test").stdout
    set_config_values(ws / "kamal.toml", {("probe", "mc_exact"): "true"})
    assert "all 2 probes were cached" in two_teachers("probe", "--mc-samples", "4", "--no-rmd", "--data", "test").stdout
    assert _probe_count(ws)[0] == 4
    report = two_teachers.json("report")
    assert sorted(p["mc_estimator"] for p in report["probes"]) == ["adaptive", "adaptive", "exact", "exact"]
    for p in report["probes"]:
        assert p["mc_passes_mean"] == 4.0 if p["mc_estimator"] == "exact" else 2.0 <= p["mc_passes_mean"] <= 4.0
    assert len({s["options_key"] for s in report["selection"]}) == 2  # one selection table per estimator
