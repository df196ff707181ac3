"""kamal.toml: the template parses, and settings can be changed without losing the rest."""

import tomllib

from kamalcli.workspace import set_config_values, template_text


def test_template_parses_with_the_documented_defaults():
    config = tomllib.loads(template_text("kamal.toml"))
    assert config["probe"]["mc_samples"] == 16 and config["train"]["student"] == "minilm-l6"
    assert config["train"]["select_by"] == "transfer-loss" and config["workspace"]["seed"] == 0


def test_set_values_keeps_comments_and_other_keys(tmp_path):
    path = tmp_path / "kamal.toml"
    path.write_text(template_text("kamal.toml"))
    set_config_values(path, {("probe", "mc_samples"): "8", ("probe", "dropout"): "0.2",
                             ("train", "student"): '"minilm-l3"', ("extra", "answer"): "42"})
    config = tomllib.loads(path.read_text())
    assert config["probe"]["mc_samples"] == 8 and config["probe"]["dropout"] == 0.2
    assert config["train"]["student"] == "minilm-l3" and config["train"]["steps"] == 600 and "epochs" not in config["train"]
    assert config["extra"]["answer"] == 42
    assert "# Seed for every random choice" in path.read_text()


def test_a_broken_config_is_one_clear_error(kamal, ws):
    (ws / "kamal.toml").write_text("[probe\nmc_samples = ")
    result = kamal("probe", code=2)
    assert "kamal.toml is not valid TOML" in result.stderr
