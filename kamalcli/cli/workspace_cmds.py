"""kamal init, status, runs."""

from __future__ import annotations

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.render import emit_json, json_option, note, table


@click.command()
@click.argument("path", default=".", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Start afresh over an existing workspace; its old state is moved aside, not deleted.")
def init(path: str, force: bool) -> None:
    """Make a workspace in PATH (default: here): kamal.toml, database, artifact folders."""
    from kamalcli.api import init as init_workspace

    ws = init_workspace(path, force=force, say=note).session.workspace
    click.echo(f"Initialised a kamal workspace in {ws.root}")
    click.echo(f"  config:   {ws.config_path}")
    click.echo(f"  database: {ws.db_path}")


@click.command()
@json_option
@pass_app
def status(app: App, as_json: bool) -> None:
    """Where the workspace is and what it holds."""
    with app.reader() as store:
        store.mark_stale_runs(read_only_ok=True)
        counts = store.counts()
        space = store.label_space()
        running = store.runs(status="running")
        recent = store.runs()[-5:]
    data = {
        "workspace": str(app.workspace.root),
        "counts": counts,
        "labels": list(space.names),
        "shared_labels": space.shared_labels(),
        "running": [r.as_json() for r in running],
        "recent_runs": [r.as_json() for r in recent],
    }
    if as_json:
        emit_json(data)
        return
    click.echo(f"Workspace {data['workspace']}")
    click.echo("  " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    click.echo(f"  union label space ({len(space)}): {', '.join(space.names) or 'empty (add a teacher)'}")
    if data["shared_labels"]:
        click.echo(f"  labels taught by more than one teacher: {', '.join(data['shared_labels'])}")
    if recent:
        table("Recent runs", ["id", "kind", "name", "status", "started"],
              [(r.id, r.kind, r.name, r.status, r.started_at) for r in recent])


@click.command()
@click.option("--kind", help="Only runs of this kind (probe, amalgamate, train-teacher, extend, export).")
@json_option
@pass_app
def runs(app: App, kind: str | None, as_json: bool) -> None:
    """Every run, with its status: running, done, failed or interrupted."""
    with app.reader() as store:
        store.mark_stale_runs(read_only_ok=True)
        found = store.runs(kind=kind)
    if as_json:
        emit_json([r.as_json() for r in found])
        return
    table("Runs", ["id", "kind", "name", "status", "started", "finished", "error"],
          [(r.id, r.kind, r.name, r.status, r.started_at, r.finished_at, r.error) for r in found],
          empty="no runs yet")


COMMANDS = [init, status, runs]
