"""kamal models, demo."""

from __future__ import annotations

from pathlib import Path

import click

from kamalcli.cli.render import emit_json, json_option, table
from kamalcli.settings import TRAIN


@click.command()
@json_option
def models(as_json: bool) -> None:
    """Pretrained models kamal can name without a model hub (--student / --base NAME, synthesize --lm NAME)."""
    from kamalcli.models.bases import BASES, LMS, base_status

    rows = [{"name": b.name, "kind": kind, "description": b.description, "package": b.package, "layers": b.layers,
             "hidden": b.hidden, "status": base_status(b)}
            for kind, named in (("encoder", BASES), ("causal-lm", LMS)) for b in named.values()]
    if as_json:
        emit_json(rows)
        return
    for kind, title in (("encoder", "Named bases (--student / --base)"), ("causal-lm", "Named causal LMs (synthesize --lm)")):
        table(title, ["name", "model", "package", "status"],
              [(r["name"], r["description"], r["package"], r["status"]) for r in rows if r["kind"] == kind])
    click.echo("Also accepted: a local Hugging Face folder, or a hub id when a hub is reachable.")


@click.command()
@click.option("--dir", "target", default="kamal-demo", show_default=True, type=click.Path(file_okay=False),
              help="Where to build the demo workspace.")
@click.option("--force", is_flag=True, help="Reuse a non-empty folder (an old workspace there is moved aside).")
@click.option("--base", default=TRAIN.student, show_default=True, help="Base model for teachers and students.")
@click.option("--mc-exact", is_flag=True, help="Probe with the paper's K passes of every row instead of the adaptive default.")
def demo(target: str, force: bool, base: str, mc_exact: bool) -> None:
    """The whole pipeline on real data shipped with kamal: teachers, probe, amalgamate, eval, ONNX."""
    from kamalcli.cli.demo import run_demo

    kamal = click.get_current_context().find_root().command
    run_demo(kamal, Path(target), force=force, base=base, mc_exact=mc_exact)


COMMANDS = [models, demo]
