"""kamal demo: the whole pipeline on real data shipped with kamal, as the commands a user would type.

Six Debian package sections (resources/demo/README.md): teacher "media" knows
games, graphics and sound; teacher "research" knows mail, math and science.
The demo trains both from the minilm base, probes them, amalgamates a student
with muki-hard and with vanilla-kd (--fit head: a head on the frozen base, so
that the demo takes about 4 minutes on 2 cores; docs/benchmarks.md#demo-time),
evaluates them against the ensemble baseline, exports the muki-hard student to
ONNX and classifies with it.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from pathlib import Path

import click

from kamalcli.errors import KamalError, KamalFailure
from kamalcli.workspace.config import set_config_values

TEACHERS = {"media": "games,graphics,sound", "research": "mail,math,science"}
SETTINGS = {
    ("probe", "mc_samples"): "8",
    ("probe", "max_length"): "64",
    ("train", "max_length"): "64",
    ("train", "epochs"): "2",
    ("train", "batch_size"): "16",
    ("train", "lr"): "3e-4",
}
EXAMPLES = [
    "A fast-paced arcade shooter with joystick support and high-score tables",
    "Library for sparse linear algebra and numerical optimisation",
    "IMAP client that filters and sorts incoming messages",
]


def run_demo(cli: click.Group, target: Path, *, force: bool, base: str, mc_exact: bool = False) -> None:
    """Run each step through `cli`, the kamal command group, as a user would type it.
    mc_exact: the paper's probe (K passes of every row) instead of the adaptive default."""
    started = time.perf_counter()
    root = target.resolve()

    def kamal(*args, workspace: bool = True) -> None:
        argv = (["--workspace", str(root)] if workspace else []) + [str(a) for a in args]
        click.secho(f"\n$ kamal {' '.join(str(a) for a in args)}", bold=True)
        code = cli.main(argv, prog_name="kamal", standalone_mode=False)
        if code:
            raise KamalFailure(f"the demo stopped: `kamal {' '.join(map(str, args))}` failed (exit {code})")

    if root.exists() and any(root.iterdir()) and not force:
        raise KamalError(f"{root} exists and is not empty; choose another --dir or pass --force")
    kamal("init", root, *(["--force"] if force else []), workspace=False)
    set_config_values(root / "kamal.toml", {**SETTINGS, ("train", "student"): json.dumps(base),
                                            ("probe", "mc_exact"): "true" if mc_exact else "false"})
    data = root / "data"
    data.mkdir(exist_ok=True)
    shipped = resources.files("kamalcli.resources").joinpath("demo")
    for name in ("train.jsonl.gz", "test.jsonl.gz", "README.md"):
        (data / name).write_bytes(shipped.joinpath(name).read_bytes())

    kamal("add-data", data / "train.jsonl.gz", "--name", "teacher-data", "--role", "eval")
    kamal("add-data", data / "train.jsonl.gz", "--name", "pool")
    kamal("add-data", data / "test.jsonl.gz", "--name", "test", "--role", "test")
    for name, labels in TEACHERS.items():
        kamal("train-teacher", "teacher-data", "--labels", labels, "--name", name)
    kamal("probe", "--data", "pool", "--data", "test")
    kamal("report")
    for method in ("muki-hard", "vanilla-kd"):
        kamal("amalgamate", "--method", method, "--name", method, "--fit", "head")
        kamal("eval", method, "--data", "test")
    kamal("eval", "--baseline", "ensemble", "--data", "test")
    for name in TEACHERS:
        kamal("eval", "--baseline", f"teacher:{name}", "--data", "test")
    kamal("export", "muki-hard", "--onnx")
    kamal("predict", "muki-hard", "--onnx", *EXAMPLES)
    _summary(root, time.perf_counter() - started)


def _summary(root: Path, seconds: float) -> None:
    from kamalcli.cli.render import pct, table
    from kamalcli.workspace.store import Store
    from kamalcli.workspace.folder import Workspace

    store = Store.open(Workspace(root))
    try:
        rows = []
        for e in store.evaluations():
            subject = e["student"] or f"baseline {e['baseline']}"
            rows.append((subject, pct(e["metrics"]["accuracy"]), pct(e["metrics"]["macro_f1"])))
        selection = [s for s in store.selections() if s["dataset"] == "test"]
        export = store.exports()[-1]
        probe_seconds = sum(p.seconds or 0.0 for p in store.probes())
    finally:
        store.close()
    click.secho("\nThe demo's results on 240 held-out Debian package descriptions (6 sections):", bold=True)
    table(None, ["model", "accuracy %", "macro-F1 %"], rows)
    table(None, ["confidence score", "picks the right teacher %", "AUROC"],
          [(s["score"], pct(s["accuracy"]), "-" if s["auroc"] is None else f"{s['auroc']:.3f}") for s in selection])
    click.echo(f"\nWorkspace:     {root}  (kamal.toml holds the demo's settings)")
    click.echo(f"Students:      {root / '.kamal' / 'artifacts' / 'students'}")
    click.echo(f"ONNX export:   {export.path}  (README.md is its model card)")
    click.echo(f"Next:          cd {root} && kamal status")
    click.echo(f"The demo took {seconds / 60:.1f} minutes, {probe_seconds / 60:.1f} of them probing.")
