"""kamal probe, report."""

from __future__ import annotations

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.options import distributed_options, verbose_option
from kamalcli.cli.render import echo, emit_json, evidence, json_option, pct, table
from kamalcli.settings import PROBE, shown


@click.command()
@click.option("--teacher", "teacher_names", multiple=True, metavar="NAME", help="Only this teacher (repeatable; default: all).")
@click.option("--data", "data_names", multiple=True, metavar="NAME", help="Only this dataset (repeatable; default: all).")
@click.option("--mc-samples", type=int, help=f"Monte-Carlo dropout passes K (default {shown(PROBE.mc_samples)}; 1 = no MC dropout).")
@click.option("--dropout", type=float, help="Dropout rate for MC dropout (default: each teacher's own).")
@click.option("--rmd/--no-rmd", default=None, help=f"Relative Mahalanobis OOD scores (default: {'on' if PROBE.rmd else 'off'}).")
@click.option("--rmd-fit", metavar="NAME",
              help="Labelled dataset whose rows of each teacher's classes fit its RMD Gaussians (default, as in "
                   "amalgamate: each teacher's training rows when kamal trained it, else text kamal synthesize wrote "
                   "for these teachers, else the transfer rows each teacher is sure of, which is circular).")
@click.option("--rmd-layers", metavar="LAYERS", help="Layers to pool for RMD: default (middle,last), all, or e.g. 3,6.")
@click.option("--batch-size", type=int, help=f"Rows per forward pass (default {shown(PROBE.batch_size)}).")
@click.option("--max-length", type=int, help=f"Tokens per text (default {shown(PROBE.max_length)}).")
@click.option("--device", help="cpu, cuda or auto.")
@click.option("--mc-mode", type=click.Choice(["auto", "sequential", "batched"]), default="auto", show_default=True,
              help="With --mc-exact: K passes one after another (fast on CPU) or one K-times batch (fast on GPU).")
@click.option("--mc-exact/--mc-adaptive", default=None,
              help="K full fp32 passes of every row (the paper's probe), or the default: each row until its "
                   "confidence converges (at least 2 passes, at most K).")
@click.option("--seed", type=int, help="Seed for the dropout masks (default: the workspace seed).")
@distributed_options
@verbose_option
@pass_app
def probe(app: App, teacher_names, data_names, mc_samples, dropout, rmd, rmd_fit, rmd_layers, batch_size,
          max_length, device, mc_mode, mc_exact, seed, backend) -> None:
    """Measure every teacher on every dataset once: MC-dropout uncertainty, ECE, RMD, selection."""
    from kamalcli.probe.service import generated_against_real_line

    if app.setting("probe", "batch_size", batch_size) < 1:
        raise click.BadParameter("must be at least 1", param_hint="--batch-size")
    summary = app.api().probe(teachers=teacher_names, data=data_names, mc_samples=mc_samples, dropout=dropout, rmd=rmd,
                              rmd_fit=rmd_fit, rmd_layers=rmd_layers, batch_size=batch_size, max_length=max_length,
                              device=device, mc_mode=mc_mode, mc_exact=mc_exact, seed=seed, backend=backend)
    _probed(summary)
    for name, result in summary["selection"].items():
        _selection_table(name, result)
    for check in summary.get("generated_against_real", ()):
        echo(generated_against_real_line(check))
    if summary.get("auto"):  # what kamal amalgamate would train with given the same --rmd-fit
        decided = summary["auto"]
        echo((f"With --rmd-fit {rmd_fit}, " if rmd_fit else "") + f"score=auto selects with {decided['value']}: "
             f"{decided['reason']} (`kamal report`: the whole recipe)")
        if app.verbose:
            evidence(decided["line"])
    click.echo("See `kamal report` for calibration and selection per teacher.")


def _probed(summary: dict) -> None:
    """The pairs computed now (a table, only when there are some), those found cached, and RMD fitted anew on
    cached probes, which is work done too."""
    computed, cached = summary["computed"], summary["cached"]
    if computed:
        rate = lambda p: f"{p['rows'] / p['seconds']:,.1f} ex/s" if p["seconds"] else "-"  # noqa: E731
        table("Probed", ["teacher", "data", "rows", "seconds", "rate"],
              [(p["teacher"], p["data"], p["rows"], p["seconds"], rate(p)) for p in computed])
        if cached:
            click.echo(f"{len(cached)} more were cached.")
    elif summary["rmd"]:
        fitted = ", ".join(sorted({note["teacher"] for note in summary["rmd"]}))
        click.echo(f"All {len(cached)} probes were cached; RMD fitted anew for {fitted} (run {summary['run_id']}).")
    else:
        click.echo(f"Nothing to do: all {len(cached)} probes were cached (run {summary['run_id']}).")


def _selection_table(dataset: str, result: dict) -> None:
    rows = [(score, pct(r["accuracy"]), pct(r.get("balanced")), "-" if r["auroc"] is None else f"{r['auroc']:.3f}",
             pct(r.get("target_accuracy"))) for score, r in result.items()]
    table(f"Teacher selection on {dataset} (gold labels)",
          ["score", "selects right teacher %", "balanced over teachers %", "AUROC", "hard target right %"], rows)


@click.command()
@json_option
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True, allow_dash=True), metavar="FILE",
              help="Write the whole report with its plots as one self-contained HTML file (opens offline); "
                   "- writes it to standard output.")
@click.option("--force", is_flag=True,
              help="With --html: replace an existing file that is not a kamal report (never the workspace's "
                   "own files, nor a teacher's, student's or export's folder).")
@verbose_option
@pass_app
def report(app: App, as_json: bool, html_path: str | None, force: bool) -> None:
    """Probe results: uncertainty, calibration (ECE) in and out of domain, and selection quality."""
    from kamalcli.errors import KamalError

    if html_path is not None:
        app.api().say_stale_probes()
        _html_report(app, html_path, as_json, force)
        return
    if force:
        raise KamalError("--force applies to --html only")
    gathered = app.api().report()
    if as_json:
        emit_json(gathered)
        return
    _policy_tables(gathered["policy_selection"])
    _generated_tables(gathered["generated"])
    if not gathered["probes"]:
        click.echo("No probes yet: run `kamal probe`.")
        return
    _probe_tables(gathered["probes"])
    _selection_summaries(gathered["selection"], gathered["recipes"], app.verbose, gathered["generated_against_real"])


def _probe_tables(probe_rows: list[dict]) -> None:
    sentence_rows = [r for r in probe_rows if r.get("task") != "token"]
    token_rows = [r for r in probe_rows if r.get("task") == "token"]
    if sentence_rows:
        table("Teachers on each dataset (c = 1 - normalised entropy; MC = Monte-Carlo dropout; K = its passes per row)",
              ["teacher", "data", "K", "mean c", "mean c MC", "acc in %", "ECE in", "ECE in MC", "ECE out", "ECE out MC",
               "RMD fit"],
              [(r["teacher"], r["data"], _k(r),
                _c(r.get("mean_uhat")), _c(r.get("mean_mc_uhat")), pct(r.get("accuracy_in")),
                _f(r.get("ece_in")), _f(r.get("mc_ece_in")), _f(r.get("ece_out")), _f(r.get("mc_ece_out")),
                _rmd(r["rmd"])) for r in sentence_rows])
        multi_label = sorted({r["teacher"] for r in sentence_rows if r.get("multi_label")})
        if multi_label:
            click.echo(f"{', '.join(multi_label)}: multi-label (a sigmoid per label), so the figures above, which read "
                       f"one softmax over a teacher's labels, are not shown for {'them' if len(multi_label) > 1 else 'it'}.")
    if token_rows:
        table("Token teachers per word (c = 1 - normalised entropy over the teacher's entity tags, O left out; "
              "MC = Monte-Carlo dropout over K passes; no ECE or RMD at token level)",
              ["teacher", "data", "K", "words", "mean c", "mean c MC", "words tagged as entities", "words cut"],
              [(r["teacher"], r["data"], r["mc_samples"], r.get("words"), _f(r.get("mean_entity_confidence")),
                _f(r.get("mean_mc_entity_confidence")), r.get("entity_words"), r.get("cut_words"))
               for r in token_rows])


def _selection_summaries(selections: list[dict], recipes: list[dict], verbose: bool = False,
                         checks: tuple[dict, ...] = ()) -> None:
    """Per dataset and teachers: each score's selection quality and the best one, with the rows it rests on;
    each figure on generated text against real rows' (checks: probe.service.generated_against_real); then per set
    of teachers the recipe the next kamal amalgamate would decide (kamalcli/recipe/recipe.py), with its evidence
    under --verbose."""
    from kamalcli.probe.measured import USABLE
    from kamalcli.probe.service import generated_against_real_line, selection_groups
    from kamalcli.recipe.recipe import Recipe, unread_sentence

    for data, names, rows, best in selection_groups(selections):
        _selection_table(f"{data} ({', '.join(names)})", {r["score"]: r for r in rows})
        where = f"{data} (text kamal generated)" if rows[0].get("generated") else data
        in_sample = [r["score"] for r in rows if r.get("in_sample")]
        if in_sample:
            echo(f"On {data}, {', '.join(in_sample)} are fitted on these very rows: in-sample, not counted.")
        cross_fitted = [r for r in rows if r.get("cross_fitted")]
        if cross_fitted:
            echo(f"On {data}, {', '.join(r['score'] for r in cross_fitted)} are fitted on these rows and measured "
                 f"cross-fitted: each of {cross_fitted[0]['cross_fitted']} folds scored by a fit on the others.")
        if best:
            only = "" if best["score"] in USABLE else " (measured only: no student selects with it)"
            balanced = f" (balanced {pct(best['balanced'])}%)" if best.get("balanced") is not None else ""
            echo(f"On {where}, {best['score']} picks the right teacher most often{balanced}: {_figure(best)}{only}.")
    for check in checks:
        echo(generated_against_real_line(check))
    for entry in recipes:
        title = f"{', '.join(entry['teachers'])}: the next `kamal amalgamate --method muki-hard` decides"
        recipe = Recipe.from_json(entry["recipe"])
        for line in recipe.table(title):
            echo(line)
        if verbose:
            for line in recipe.lines():
                evidence(line)
            if entry.get("unread"):
                evidence(unread_sentence(entry["unread"]))


def _figure(row: dict) -> str:
    """A selection figure in words: the share, the rows it rests on, its 95% interval and chance."""
    text = f"{pct(row['accuracy'])}% of {row['rows']:,} rows"
    if row.get("interval") is None or row.get("chance") is None:
        return text
    low, high = row["interval"]
    text += f" (95% interval {pct(low)}-{pct(high)}%; chance {pct(row['chance'])}%)"
    return text if low > row["chance"] else text + ", not clearly above chance"


def _generated_tables(generated: list[dict]) -> None:
    from kamalcli.cli.synth_cmds import provenance_line, show_quality

    for g in generated:
        echo(f"{g['data']}: {provenance_line(g)}")
        show_quality(g["quality"])


def _policy_tables(policies: list[dict]) -> None:
    for p in policies:
        teachers = p["teachers"]
        rows = []
        for name, counts, none in zip(p["classes"], p["counts"], p["none"]):
            seen = sum(counts) + none
            if seen:
                rows.append((name, *[f"{100 * c / seen:.0f}% ({c})" for c in counts], f"{100 * none / seen:.0f}% ({none})"))
        table(f"Teacher selection by rl-kd students: {p['student']} ({p['variant']}, reward {p['reward']}; "
              "per class, each teacher's share of the selections over the alternation's epochs, and their "
              "number; a row may select several teachers)", ["class", *teachers, "none selected"], rows)
        accuracy = p.get("selection_accuracy")
        if accuracy:
            listed = ", ".join(f"{k} {pct(v)}%" for k, v in accuracy.items())
            click.echo(f"  Its selected teacher owns the gold label: {listed}.")


def _html_report(app: App, path: str, as_json: bool, force: bool) -> None:
    from kamalcli.api.workspace import default_student_options

    from pathlib import Path

    from kamalcli.errors import KamalError
    from kamalcli.report import html_report, write_html_report
    from kamalcli.report.target import is_stdout

    if not path.strip():
        raise KamalError("--html needs a file name (or - for standard output)")
    if is_stdout(path):
        if as_json:
            raise KamalError("--html - and --json would both write to standard output: choose one")
        with app.reader() as store:
            text, _ = html_report(app.workspace, store, default_student_options())
        click.echo(text, nl=False)
        return
    with app.reader() as store:
        written = write_html_report(app.workspace, store, Path(path).expanduser().resolve(), force=force,
                                    student_options=default_student_options())
    if as_json:
        emit_json(written)
        return
    click.echo(f"Wrote {written['path']} ({written['bytes'] / 1024:.0f} KB: {written['teachers']} teachers, "
               f"{written['probes']} probes on labelled data, {written['students']} students); "
               "open it in any browser, offline.")


def _k(row) -> str:
    """K, or for the adaptive probe the mean passes a row took out of at most K."""
    if row.get("mc_estimator") == "adaptive":
        return f"{row['mc_passes_mean']:.1f} of {row['mc_samples']}"
    return str(row["mc_samples"])


def _c(uhat):
    return "-" if uhat is None else f"{1 - uhat:.3f}"


def _f(v):
    return "-" if v is None else f"{v:.3f}"


def _rmd(info):
    if not info:
        return "-"
    return f"{info['source']}: {info['fit_data']} ({info['fit_rows']})" + (" circular" if info.get("circular") else "")


COMMANDS = [probe, report]
