"""kamal probe: every requested (teacher, dataset) pair, then RMD fits and selection quality."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kamalcli.errors import KamalError
from kamalcli.probe.runner import ProbeRequest, Runner, generated_fit_line
from kamalcli.probe.scores import SCORES
from kamalcli.probe.teacher_weights import refresh_teachers

__all__ = ["ProbeRequest", "Runner", "probe_workspace", "selection_groups", "selection_rows"]

# Scores MUKI's `score` option takes, auto aside (what a report may suggest)
SUGGESTABLE_SCORES = tuple(s for s in SCORES if s != "auto")


def selection_rows(store) -> list[dict]:
    """The stored selection figures with the keys `kamal report --json` and the HTML report show."""
    return [
        {"data": r["dataset"], "teachers": r["teachers"], "score": r["score"], "accuracy": r["accuracy"],
         "auroc": r["auroc"], "target_accuracy": r["target_accuracy"], "rows": r["num_rows"],
         "options_key": r["options_key"]}
        for r in store.selections()
    ]


def selection_groups(rows: list[dict]) -> list[tuple[str, tuple[str, ...], list[dict], dict | None]]:
    """Selection rows per (dataset, teachers, probe settings): (dataset, teachers, rows, the row of the
    score that selects the right teacher most often, oracle aside; None without one)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["data"], tuple(r["teachers"]), r["options_key"]), []).append(r)
    out = []
    for (data, names, _), members in groups.items():
        real = [r for r in members if r["score"] != "oracle" and r["accuracy"] is not None]
        out.append((data, names, members, max(real, key=lambda r: r["accuracy"]) if real else None))
    return out


def _check_token_request(request: ProbeRequest, rmd_fit, teachers, datasets) -> None:
    """What kamal probes for token teachers: per-word MC dropout and entropy only; say so for anything else."""
    names = ", ".join(t.name for t in teachers)
    if rmd_fit or request.layers not in ("default", "", "none"):
        raise KamalError(f"RMD is not computed for token teachers ({names}); drop --rmd-fit/--rmd-layers "
                         "or probe the sequence teachers alone with --teacher NAME")
    if request.dropout is not None or request.mc_exact:
        raise KamalError(f"token teachers ({names}) are probed with their own dropout and K full passes; "
                         "drop --dropout/--mc-exact or probe the sequence teachers alone with --teacher NAME")
    if not datasets:
        raise KamalError(f"token teachers ({names}) are probed on token data (tokens with tags); there is none "
                         "among the datasets asked for")


@dataclass
class _Pairs:
    """What a probe covers: the sequence teachers and datasets, and the token ones."""
    teachers: list
    datasets: list
    token_teachers: list
    token_datasets: list


def _pairs(store, request: ProbeRequest, teacher_names, dataset_names, rmd_fit) -> _Pairs:
    """The teachers and datasets asked for (every one when none is named), split by task and checked."""
    every_teacher = [store.teacher(n) for n in teacher_names] if teacher_names else store.teachers()
    every_dataset = [store.dataset(n) for n in dataset_names] if dataset_names else store.datasets()
    if not every_teacher:
        raise KamalError("no teachers to probe: add one with `kamal add-teacher FOLDER`")
    if not every_dataset:
        raise KamalError("no data to probe on: add some with `kamal add-data FILE`")
    token_teachers = [t for t in every_teacher if t.task == "token"]
    token_datasets = [d for d in every_dataset if d.task == "token"]
    teachers = [t for t in every_teacher if t.task == "sequence"]
    datasets = [d for d in every_dataset if d.task == "sequence"]
    if token_teachers:
        _check_token_request(request, rmd_fit, token_teachers, token_datasets)
    if teachers and not datasets and not token_teachers:
        raise KamalError("sequence teachers are probed on text data; the datasets asked for hold tokens with tags")
    return _Pairs(teachers, datasets, token_teachers, token_datasets)


def _note_unknown_labels(store, teachers, datasets, say) -> None:
    for d in datasets:
        if d.has_labels:
            unknown = sorted(set(d.label_counts) - set(store.label_space(teachers).names))
            if unknown:
                say(f"Note: {d.name} has labels no teacher knows ({', '.join(unknown)}); "
                    "they count as out-of-domain for every teacher.")


def _probe_tokens(workspace, store, pairs: _Pairs, request: ProbeRequest, device: str, batch_size: int,
                  summary: dict, say) -> None:
    """Token teachers on token data (probe/tokens.py), added to the summary."""
    from kamalcli.probe.tokens import probe_token_teachers

    tokens = probe_token_teachers(workspace, store, pairs.token_teachers, pairs.token_datasets,
                                  max_length=request.max_length, mc_samples=request.mc_samples,
                                  seed=request.seed, device=device, batch_size=batch_size, say=say)
    for part in ("computed", "cached"):
        summary[part] += tokens[part]
    summary["selection"].update(tokens["selection"])


def _probe_pairs(runner: Runner, teachers, datasets, settings: dict, summary: dict, run, say) -> dict[int, list]:
    """Every (teacher, dataset) pair, computed or found cached; the run's result follows each one.
    Returns each teacher's probes."""
    probes_by_teacher = {t.id: [] for t in teachers}
    for teacher in teachers:
        for dataset in datasets:
            probe, computed = runner.ensure(teacher, dataset, settings[teacher.id])
            probes_by_teacher[teacher.id].append(probe)
            pair = {"teacher": teacher.name, "data": dataset.name, "probe_id": probe.id,
                    "seconds": probe.seconds, "rows": probe.num_rows}
            (summary["computed"] if computed else summary["cached"]).append(pair)
            if not computed:
                say(f"{teacher.name} on {dataset.name}: cached (probe {probe.id}), nothing to do")
            run.result = summary
    return probes_by_teacher


def _fit_rmds(runner: Runner, store, teachers, settings: dict, probes_by_teacher: dict, fit_dataset,
              summary: dict, say) -> None:
    """RMD fitted for every teacher that has in-distribution features; a warning for those that have none."""
    unfit = [t for t in teachers if fit_dataset is None and t.train_dataset_id is None]
    if unfit and not store.datasets(role="transfer"):
        say(f"Warning: RMD skipped for {', '.join(t.name for t in unfit)}: no in-distribution features "
            "(no transfer data to pseudo-label); give labelled data with --rmd-fit NAME to fit it.")
    else:
        unfit = []
    for teacher in (t for t in teachers if t not in unfit):
        note = runner.fit_rmd(teacher, settings[teacher.id], probes_by_teacher[teacher.id], fit_dataset)
        if note:
            summary["rmd"].append(note)
            if note["source"] == "pseudo":
                say(f"RMD for {teacher.name}: in-distribution features are {note['rows']} rows of "
                    f"{note['data']} it is itself most confident on; this is circular. "
                    "Give labelled data with --rmd-fit NAME for an independent fit.")
            elif note["generated"]:
                say(generated_fit_line(note))


def _measure_selection(runner: Runner, datasets, summary: dict) -> None:
    for dataset in datasets:
        result = runner.measure_selection(dataset)
        if result:
            summary["selection"][dataset.name] = result


def probe_workspace(workspace, store, request: ProbeRequest, *, teacher_names=(), dataset_names=(),
                    rmd: bool = True, rmd_fit: str | None = None, device: str = "auto",
                    batch_size: int = 32, mode: str = "auto", say=print) -> dict:
    """Probe every requested (teacher, dataset) pair not yet probed, then RMD and selection."""
    from kamalcli.workspace.runs import recorded_run

    pairs = _pairs(store, request, teacher_names, dataset_names, rmd_fit)
    pairs.teachers = refresh_teachers(workspace, store, pairs.teachers, say)
    pairs.token_teachers = refresh_teachers(workspace, store, pairs.token_teachers, say)
    teachers, datasets = pairs.teachers, pairs.datasets
    fit_dataset = store.dataset(rmd_fit) if rmd_fit else None
    store.claim_inputs([*teachers, *pairs.token_teachers], [*datasets, *pairs.token_datasets, fit_dataset])
    settings = {t.id: request.settings_for(t) for t in teachers}
    if not rmd:
        settings = {k: replace(v, layers=()) for k, v in settings.items()}
    _note_unknown_labels(store, teachers, datasets, say)

    params = {**request.as_json(), "teachers": [t.name for t in teachers], "datasets": [d.name for d in datasets],
              "rmd": rmd, "rmd_fit": rmd_fit, "device": device, "batch_size": batch_size, "mode": mode}
    key = request.options_key if rmd else request.options_key + "-normd"
    summary = {"computed": [], "cached": [], "rmd": [], "selection": {}}
    with recorded_run(store, "probe", None, params) as run:
        if pairs.token_teachers and pairs.token_datasets:
            _probe_tokens(workspace, store, pairs, request, device, batch_size, summary, say)
            run.result = summary
        if not (teachers and datasets):
            summary["run_id"] = run.id
            return summary
        runner = Runner(workspace, store, device=device, batch_size=batch_size, mode=mode,
                        run_id=run.id, options_key=key, say=say)
        probes_by_teacher = _probe_pairs(runner, teachers, datasets, settings, summary, run, say)
        if rmd:
            _fit_rmds(runner, store, teachers, settings, probes_by_teacher, fit_dataset, summary, say)
        _measure_selection(runner, datasets, summary)
        run.result = summary
    summary["run_id"] = run.id
    return summary
