"""kamal labels, labels merge, labels split: one class for labels teachers name differently."""

from __future__ import annotations

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.render import emit_json, json_option, note, table


@click.group(invoke_without_command=True)
@click.option("--data", metavar="NAME", help="Compare the teachers' behaviour on this probed dataset "
              "(default: the largest transfer dataset every teacher was probed on).")
@click.option("--threshold", type=float, default=0.6, show_default=True,
              help="Propose pairs whose score reaches this (0-1).")
@click.option("--encoder", metavar="NAME|FOLDER",
              help="The sentence encoder that compares label names (default: minilm-l6, the prototype score's).")
@json_option
@click.pass_context
def labels(ctx: click.Context, data: str | None, threshold: float, encoder: str | None, as_json: bool) -> None:
    """The union label space, the merged classes, and labels that may name one class.

    \b
    Each proposal says why: how alike the names are, and how often the teachers give the same rows
    to the two labels. Apply one with the command it shows:
      kamal labels merge sound audio        # one class, named sound
      kamal labels merge sport Sports --as sports
      kamal labels split sound              # undo
    """
    if ctx.invoked_subcommand is not None:
        return
    from kamalcli.teachers.label_overlap import label_view

    app: App = ctx.obj
    with app.reader() as store:
        view = label_view(store, data=data, encoder=encoder, threshold=threshold)
    if as_json:
        emit_json(view.as_json())
        return
    for line in view.notes:
        note(line)
    if len(view.space) or not len(view.tags):
        click.echo(f"Union label space ({len(view.space)}): {', '.join(view.space.names) or 'empty (add a teacher)'}")
    if len(view.tags):
        click.echo(f"Union tag set of the token teachers ({len(view.tags)}): {', '.join(view.tags.names)}")
    for merged in view.classes:
        click.echo(f"  {merged.name} = {', '.join(merged.aliases)} "
                   f"({_taught(merged)})")
    evidence = ", ".join(filter(None, [f"names by {view.encoder}" if view.encoder else "names by spelling",
                                        f"behaviour on {view.data}" if view.data else None]))
    table(f"Proposals (score >= {threshold:g}; {evidence})", ["kind", "labels", "teachers", "score", "why", "apply"],
          [(p.kind, " / ".join(p.labels), " / ".join(p.teachers), f"{p.score:.2f}", p.reason, p.command)
           for p in view.proposals],
          empty="none: no two teachers' labels look like one class")


@labels.command("merge")
@click.argument("names", nargs=-1, required=True)
@click.option("--as", "as_name", metavar="NAME", help="The merged class's name (default: the first label's).")
@pass_app
def merge(app: App, names: tuple[str, ...], as_name: str | None) -> None:
    """Make labels of different teachers one class of the union (students trained from now on)."""
    from kamalcli.teachers.label_merges import merge_labels

    with app.writer() as store:
        merged = merge_labels(store, list(names), as_name)
    click.echo(f"Merged into one class {merged.name}: {', '.join([merged.name, *merged.aliases])} "
               f"({_taught(merged)}).")
    note("Students trained from now on have one output for it; students trained before keep theirs. "
         "Run `kamal probe` again to refresh the selection figures over the new classes.")


@labels.command("split")
@click.argument("name")
@pass_app
def split(app: App, name: str) -> None:
    """Undo a merge: every name of that class is its own class again."""
    from kamalcli.teachers.label_merges import split_label

    with app.writer() as store:
        merged = split_label(store, name)
    names = merged.taught  # the class's own name, when no teacher has it, is no class after the split
    again = "are separate classes again" if len(names) > 1 else "is its own class again"
    click.echo(f"Split {merged.name}: {', '.join(names)} {again}." if names else
               f"Split {merged.name}: no teacher has any of its names now.")


def _taught(merged) -> str:
    return "; ".join(f"{teacher}: {', '.join(names)}" for teacher, names in merged.teachers.items())


COMMANDS = [labels]
