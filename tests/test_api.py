"""kamal from Python (docs/api.md): the docs' example runs as written on tiny models, trains the same student bit for
bit as the README's commands, returns what `--json` prints, and raises KamalError with the command's line."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

import pytest
from test_readme_walk import DEFAULT_STUDENT_SHA256, _pool, _tiny_settings, _unnamed_copy

import kamalcli
from conftest import Kamal

API_DOC = Path(__file__).parents[1] / "docs" / "api.md"


def docs_example() -> str:
    """The Python block of docs/api.md's "The README's example"."""
    section = API_DOC.read_text(encoding="utf-8").split("## The README's example", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


def test_the_api_example_follows_the_readme_example():
    from test_readme_walk import readme_example

    code = "\n".join(line.split("  #", 1)[0] for line in docs_example().splitlines())
    called = re.findall(r"(?:kamalcli|ws)\.(\w+)\(", code)
    commands = [c[0] for c in readme_example()]
    assert called == ["init", "add_teacher", "add_teacher", "add_data", "add_data", "synthesize", "probe", "report",
                      "amalgamate", "evaluate", "export", "predict"]
    assert [c.replace("_", "-").replace("evaluate", "eval") for c in called] == commands


def test_the_docs_example_runs_and_trains_the_readmes_student_bit_for_bit(tmp_path, monkeypatch, trained, assets, lm):
    """As the README walk does: the same files, the tiny bases set once in kamal.toml after init, synthesize shrunk
    to the tiny LM. The student is the README walk's, byte for byte: one implementation behind both."""
    import torch

    from kamalcli.api import workspace as api

    _unnamed_copy(trained["money"], tmp_path)  # news-b, with LABEL_0-style names
    (tmp_path / "news-a").symlink_to(trained["news"])
    _pool(tmp_path)
    rows = [json.loads(line) for line in assets["test"].read_text().splitlines()]
    with open(tmp_path / "test.csv", "w", newline="") as f:
        csv.writer(f).writerows([["text", "label"], *[[r["text"], r["label"]] for r in rows]])
    monkeypatch.chdir(tmp_path)
    made = []

    def init(path, **kwargs):
        ws = original_init(path, **kwargs)
        _tiny_settings(ws.root, assets)
        made.append(ws)
        return ws

    original_init, original_synthesize = api.init, api.Workspace.synthesize
    monkeypatch.setattr(api, "init", init)
    monkeypatch.setattr(kamalcli.api, "init", init)
    monkeypatch.setattr(api.Workspace, "synthesize", lambda self, name, **kw: original_synthesize(
        self, name, **{**kw, "per_class": 3, "lm": str(lm), "max_new_tokens": 6, "top_m": 5}))
    scope: dict = {}
    exec(compile(docs_example(), str(API_DOC), "exec"), scope)  # noqa: S102

    ws = made[0]
    assert scope["student"].name == "v1" and scope["student"].method == "muki-hard"
    assert 0 <= scope["metrics"]["accuracy"] <= 1 and scope["rows"][0]["label"] in scope["student"].labels
    assert scope["report"]["probes"]
    weights = next((ws.root / ".kamal" / "artifacts" / "students" / "v1").glob("*.safetensors"))
    assert hashlib.sha256(weights.read_bytes()).hexdigest() in DEFAULT_STUDENT_SHA256[torch.get_num_threads()]
    cli = Kamal(ws.root)
    assert json.loads(cli("eval", "v1", "--data", "test", "--json").stdout) == scope["metrics"]
    assert json.loads(cli("predict", "v1", "--onnx", "some text", "--json").stdout) == scope["rows"]
    assert [d.as_json() for d in ws.datasets()] == [d.as_json() for d in kamalcli.open(ws.root).datasets()]


def test_bad_input_raises_kamal_error_with_the_commands_line(tmp_path):
    ws = kamalcli.init(tmp_path / "ws")
    cli = Kamal(ws.root)
    for call, argv in [(lambda: ws.add_data(tmp_path / "missing.csv"), ["add-data", str(tmp_path / "missing.csv")]),
                       (lambda: ws.evaluate("nobody", data="test"), ["eval", "nobody", "--data", "test"]),
                       (lambda: ws.amalgamate("no-such-method"), ["amalgamate", "--method", "no-such-method"])]:
        with pytest.raises(kamalcli.KamalError) as raised:
            call()
        printed = cli(*argv, code=2).stderr.strip()
        assert printed == f"Error: {raised.value}", (printed, raised.value)
    with pytest.raises(kamalcli.KamalError, match="is not a kamal workspace"):
        kamalcli.open(tmp_path / "elsewhere")
    with pytest.raises(kamalcli.KamalError, match="no training setting warmup_steps"):
        ws.amalgamate("vanilla-kd", warmup_steps=3)
    assert ws.teachers() == [] and ws.students() == []  # nothing was half-written


def test_importing_kamalcli_loads_no_api_until_used():
    import subprocess
    import sys

    code = ("import sys, kamalcli; before = 'kamalcli.api' in sys.modules; kamalcli.Workspace; "
            "print(before, 'kamalcli.api' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "False"]
