"""kamal.toml: rendered from the settings dataclasses, it parses to their defaults; settings can be changed
without losing the rest; options, help texts and TrainConfig take the same defaults."""

import dataclasses
import re
import tomllib

from conftest import Kamal
from kamalcli.settings import PROBE, SECTIONS, TRAIN, WORKSPACE, shown
from kamalcli.workspace.config import SETTING_TYPES, render_config, set_config_values


def _defaults(keep_unset: bool = False) -> dict:
    return {section: {f.name: f.default for f in dataclasses.fields(cls) if keep_unset or f.default is not None}
            for section, cls in SECTIONS.items()}


def test_template_parses_with_the_documented_defaults():
    config = tomllib.loads(render_config())
    assert config["probe"]["mc_samples"] == 16 and config["train"]["student"] == "minilm-l6"
    assert config["train"]["select_by"] == "transfer-loss" and config["workspace"]["seed"] == 0


def test_set_values_keeps_comments_and_other_keys(tmp_path):
    path = tmp_path / "kamal.toml"
    path.write_text(render_config())
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


def test_init_writes_exactly_the_settings_defaults(tmp_path):
    Kamal(None)("init", tmp_path / "proj")
    text = (tmp_path / "proj" / "kamal.toml").read_text()
    assert text == render_config()
    config = tomllib.loads(text)
    assert config == _defaults()  # the settings off by default (epochs, dropout) are commented out
    assert set(SETTING_TYPES) == {(s, k) for s, table in _defaults(keep_unset=True).items() for k in table}


def test_every_setting_is_in_the_generated_file_with_its_comment():
    text = render_config()
    for section, cls in SECTIONS.items():
        block = re.search(rf"(?ms)^\[{section}\]\n(.*?)(?=^\[|\Z)", text).group(1)
        for f in dataclasses.fields(cls):
            line = re.search(rf"(?m)^(# )?{f.name} = .*$", block)
            assert line is not None, (section, f.name)
            assert (line.group(1) is not None) == (f.default is None), line.group(0)
            if f.metadata["comment"]:
                assert f.metadata["comment"] in block, (section, f.name)
    assert "# epochs = 1 " in text and "# dropout = 0.1 " in text and "lr = 1e-4\n" in text


def test_wrong_types_in_the_config_are_refused(kamal, ws):
    set_config_values(ws / "kamal.toml", {("train", "lr"): '"fast"'})
    result = kamal("amalgamate", "--method", "muki-hard", code=2)
    assert "[train] lr = 'fast' must be a number" in result.stderr


def test_train_config_defaults_are_the_settings_defaults():
    from kamalcli.train.loop import DEFAULT_STEPS, TrainConfig

    for f in dataclasses.fields(TrainConfig):
        if f.name == "device":  # TrainConfig holds the resolved device, never "auto"
            continue
        expected = getattr(WORKSPACE if f.name == "seed" else TRAIN, f.name)
        assert f.default == expected, f.name
    assert DEFAULT_STEPS == TRAIN.steps


def test_help_texts_show_the_settings_defaults():
    amalgamate = Kamal(None)("amalgamate", "--help").stdout
    for value in (TRAIN.steps, TRAIN.batch_size, TRAIN.lr, TRAIN.max_length, TRAIN.checkpoint_every, PROBE.mc_samples):
        assert f"(default {shown(value)})" in " ".join(amalgamate.split()), value
    probe = " ".join(Kamal(None)("probe", "--help").stdout.split())
    for value in (PROBE.mc_samples, PROBE.batch_size, PROBE.max_length):
        assert f"(default {shown(value)}" in probe, value


def test_amalgamate_help_lists_every_method_that_trains():
    from kamalcli.methods import REGISTRY

    text = " ".join(Kamal(None)("amalgamate", "--help").stdout.split())
    trained = [m.name for m in REGISTRY.values() if m.trains]
    assert len(trained) > 4
    assert f"{', '.join(trained)} (see `kamal methods`)" in text
    assert "ensemble," not in text


def test_the_default_student_is_a_named_base():
    from kamalcli.models.bases import BASES, DEFAULT_BASE

    assert TRAIN.student == DEFAULT_BASE and DEFAULT_BASE in BASES
