"""kamal demo runs the whole pipeline (here on a tiny base, so it takes seconds)."""

import pytest

from conftest import Kamal


@pytest.mark.slow  # make test's budget: each step of the demo is in make test on its own
def test_demo_end_to_end_on_a_tiny_base(assets, tmp_path):
    target = tmp_path / "demo"
    result = Kamal(None)("demo", "--dir", target, "--base", assets["encoder"])
    out = result.stdout
    for step in ("$ kamal train-teacher teacher-data --labels games,graphics,sound --name media",
                 "$ kamal probe --data pool --data test", "$ kamal amalgamate --method muki-hard --name muki-hard --fit head",
                 "$ kamal eval --baseline ensemble --data test", "$ kamal export muki-hard --onnx"):
        assert step in out, step
    assert "The demo's results on 240 held-out Debian package descriptions" in out
    assert "baseline ensemble" in out and "vanilla-kd" in out
    assert (target / ".kamal" / "artifacts" / "exports" / "muki-hard" / "model.onnx").is_file()
    assert 'lr = 3e-4' in (target / "kamal.toml").read_text()
    # the pool holds the teachers' own texts: their RMD fit reads its probe, no pass over teacher-data
    assert {p["data"] for p in Kamal(target).json("report")["probes"]} == {"pool", "test"}
    again = Kamal(None)("demo", "--dir", target, code=2)
    assert "exists and is not empty" in again.stderr


@pytest.mark.slow  # the whole demo again, with the other probe
def test_demo_with_the_exact_probe(assets, tmp_path):
    target = tmp_path / "demo"
    result = Kamal(None)("demo", "--dir", target, "--base", assets["encoder"], "--mc-exact")
    assert "mc_exact = true" in (target / "kamal.toml").read_text()
    probes = Kamal(target).json("report")["probes"]
    assert probes and all(p.get("mc_estimator") == "exact" for p in probes if p["mc_samples"] > 1)
    assert "of them probing" in result.stdout
