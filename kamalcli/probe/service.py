"""kamal probe: every requested (teacher, dataset) pair, then RMD fits and selection quality."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kamalcli.errors import KamalError
from kamalcli.probe.cross_fit import is_fitted_score
from kamalcli.probe.fit_plan import FitPlan, rmd_fit_plan
from kamalcli.probe.runner import ProbeRequest, Runner, generated_fit_line
from kamalcli.probe.teacher_weights import refresh_teachers

__all__ = ["ProbeRequest", "Runner", "generated_against_real", "generated_against_real_line", "probe_workspace",
           "selection_groups", "selection_rows"]


def selection_rows(store) -> list[dict]:
    """The stored selection figures with the keys `kamal report --json` and the HTML report show: each with the
    rows it rests on, its 95% Wilson interval and chance (the best constant selector, kamalcli/probe/measured.py;
    None for per-word figures or teachers no longer registered), and whether a fitted score (RMD, the prototype
    score) was fitted on these very rows: in-sample, it measures the fit rather than the selection, unless it was
    cross-fitted (kamalcli/probe/cross_fit.py: cross_fitted, its number of folds)."""
    from kamalcli.data.text import is_generated
    from kamalcli.probe.measured import chance
    from kamalcli.probs import wilson_interval

    teachers = {t.name: t for t in store.teachers()}
    datasets = {d.id: d for d in store.datasets()}
    selections = store.selections()
    fitted_on: dict[int, int | None] = {}  # probe id -> the dataset its RMD was fitted on
    for r in selections:
        for probe_id in r["probe_ids"]:
            if probe_id not in fitted_on:
                fit = store.rmd_fit_of(probe_id)
                fitted_on[probe_id] = fit.dataset_id if fit is not None else None
    out = []
    for r in selections:
        dataset, group = datasets[r["dataset_id"]], [teachers.get(name) for name in r["teachers"]]
        measured = r["accuracy"] is not None and r["num_rows"]
        sentence = dataset.task == "sequence" and dataset.has_labels and None not in group
        out.append({"data": r["dataset"], "generated": is_generated(dataset), "teachers": r["teachers"],
                    "score": r["score"], "accuracy": r["accuracy"],
                    "auroc": r["auroc"], "target_accuracy": r["target_accuracy"], "rows": r["num_rows"],
                    "balanced": r.get("balanced"),
                    "options_key": r["options_key"],
                    "interval": list(wilson_interval(round(r["accuracy"] * r["num_rows"]), r["num_rows"]))
                    if measured else None,
                    "chance": chance(dataset.label_counts, group) if sentence else None,
                    "cross_fitted": r["cross_fitted"],
                    "in_sample": is_fitted_score(r["score"]) and not r["cross_fitted"]
                    and any(fitted_on[i] == r["dataset_id"] for i in r["probe_ids"])})
    return out


def selection_groups(rows: list[dict]) -> list[tuple[str, tuple[str, ...], list[dict], dict | None]]:
    """Selection rows per (dataset, teachers, probe settings): (dataset, teachers, rows, the row of the
    score that selects the right teacher most often, oracle, the auto row and in-sample figures aside; None
    without one). "Most often" is balanced over teachers where that was measured, as score=auto judges it, so
    that a score which always names the teacher of most rows does not lead."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["data"], tuple(r["teachers"]), r["options_key"]), []).append(r)
    out = []
    for (data, names, _), members in groups.items():
        real = [r for r in members if r["score"] != "oracle" and not r["score"].startswith("auto: ")
                and not r.get("in_sample") and r["accuracy"] is not None]
        out.append((data, names, members, max(real, key=_selection_figure) if real else None))
    return out


def _selection_figure(row: dict) -> float:
    return row["balanced"] if row.get("balanced") is not None else row["accuracy"]


def generated_against_real(rows: list[dict]) -> list[dict]:
    """Each selection figure measured on generated text (kamal synthesize) beside the same score's figure for the
    same teachers on every labelled set of real rows: whether the generated rows tell what holds on real text. A
    real figure disagrees when each lies outside the other's 95% interval; real is empty when no real rows
    measure the score. The score compared, per generated group: the one score=auto chose, else the best."""
    from kamalcli.probs import wilson_interval

    def figure(row: dict) -> tuple[float, tuple[float, float]]:
        share = _selection_figure(row)
        return share, wilson_interval(round(share * row["rows"]), row["rows"])

    def measured(members: list[dict], score: str) -> dict | None:
        return next((r for r in members if r["score"] == score and r["accuracy"] is not None and r["rows"]), None)

    groups = selection_groups(rows)
    out = []
    for data, names, members, best in groups:
        if not members[0].get("generated"):
            continue
        auto = next((r for r in members if r["score"].startswith("auto: ") and r["accuracy"] is not None), None)
        score = auto["score"].removeprefix("auto: ") if auto else best["score"] if best else None
        row = measured(members, score)
        if row is None:
            continue
        share, interval = figure(row)
        real = []
        for other_data, other_names, other, _ in groups:
            match = measured(other, score) if set(other_names) == set(names) and not other[0].get("generated") else None
            if match is not None:
                real_share, real_interval = figure(match)
                real.append({"data": other_data, "figure": real_share, "rows": match["rows"],
                             "disagree": not interval[0] <= real_share <= interval[1]
                             and not real_interval[0] <= share <= real_interval[1]})
        out.append({"score": score, "teachers": list(names), "generated": data, "figure": share, "rows": row["rows"],
                    "real": real})
    return out


def generated_against_real_line(check: dict) -> str:
    """A selection figure on generated text against the same score's on real labelled rows, in a sentence."""
    said = (f"{check['score']} picks the right teacher on {100 * check['figure']:.1f}% of {check['rows']:,} generated "
            f"rows ({check['generated']})")
    if not check["real"]:
        return (f"{said}; no labelled real rows measure it: what holds on real text is not known (add some with "
                "add-data --role eval or --role test).")
    real = ", ".join(f"{100 * r['figure']:.1f}% of {r['rows']:,} real rows ({r['data']})" for r in check["real"])
    gaps = [100 * (check["figure"] - r["figure"]) for r in check["real"] if r["disagree"]]
    if not gaps:
        return f"{said}, {real}: the generated rows tell what holds on real text."
    if min(gaps) > 0:
        verdict = f"overstate it by {_span(gaps)} points"
    elif max(gaps) < 0:
        verdict = f"understate it by {_span([-g for g in gaps])} points"
    else:
        verdict = "disagree with the real rows, both ways"
    return f"{said}, but {real}: the generated rows {verdict}; the real figures are what a student meets."


def _span(points: list[float]) -> str:
    return f"{min(points):.1f}" if len(points) == 1 else f"{min(points):.1f} to {max(points):.1f}"


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
    space = store.label_space(teachers)
    for d in datasets:
        if d.has_labels:
            unknown = sorted(label for label in d.label_counts if not space.knows(label))
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


def _fit_rmds(runner: Runner, store, teachers, settings: dict, probes_by_teacher: dict, plan: FitPlan,
              summary: dict, say) -> None:
    """RMD fitted as the plan says (kamalcli/probe/fit_plan.py, the rule kamal amalgamate follows too) for every
    teacher that has in-distribution features; a warning for those that have none."""
    unfit = [t for t in teachers if plan.dataset is None and t.train_dataset_id is None]
    if unfit and not store.datasets(role="transfer"):
        say(f"Warning: RMD skipped for {', '.join(t.name for t in unfit)}: no in-distribution features "
            "(no transfer data to pseudo-label); give labelled data with --rmd-fit NAME to fit it.")
    else:
        unfit = []
    fitted = [t for t in teachers if t not in unfit]
    if fitted:
        say(plan.line)
    for teacher in fitted:
        note = runner.fit_rmd(teacher, settings[teacher.id], probes_by_teacher[teacher.id], plan.dataset)
        if note:
            summary["rmd"].append(note)
            if note["generated"]:
                say(generated_fit_line(note))


def _measure_selection(runner: Runner, store, teachers, datasets, plan: FitPlan, summary: dict,
                       decide_score=None) -> None:
    """Selection figures on every labelled dataset, then, given decide_score (the caller's: kamal probe passes
    the recipe's, kamalcli/recipe/recipe.py probe_score), score=auto decided from them and its row added beside
    theirs."""
    from kamalcli.runtime import resolve_device
    from kamalcli.heads import tasks_of

    # teachers are selected among within a task: a multi-label task's labels are not exclusive, nothing to select
    groups = [list(task.teachers) for task in tasks_of(teachers) if not task.multi_label]
    for group in groups:
        task = "" if len(groups) == 1 else f", task {group[0].head_name}"  # keys name the task when there are several
        for dataset in datasets:
            result = runner.measure_selection(dataset, group)
            if result:
                summary["selection"][dataset.name + task] = result
        if len(group) < 2 or decide_score is None:
            continue
        given = plan.dataset.name if plan.source == "given" else None
        decision = decide_score(runner.workspace, store, group, given, resolve_device(runner.device))
        summary["auto" + task] = decision.as_json()
        for dataset in datasets:
            if dataset.name + task in summary["selection"]:
                runner.add_auto_row(dataset, summary["selection"][dataset.name + task], decision.value, group)


def probe_workspace(workspace, store, request: ProbeRequest, *, teacher_names=(), dataset_names=(),
                    rmd: bool = True, rmd_fit: str | None = None, device: str = "auto",
                    batch_size: int = 32, mode: str = "auto", say=print, decide_score=None) -> dict:
    """Probe every requested (teacher, dataset) pair not yet probed, then RMD and selection (and, given
    decide_score, the score a default student would select with: _measure_selection)."""
    from kamalcli.workspace.runs import recorded_run

    pairs = _pairs(store, request, teacher_names, dataset_names, rmd_fit)
    pairs.teachers = refresh_teachers(workspace, store, pairs.teachers, say)
    pairs.token_teachers = refresh_teachers(workspace, store, pairs.token_teachers, say)
    teachers, datasets = pairs.teachers, pairs.datasets
    plan = rmd_fit_plan(store, teachers, rmd_fit) if teachers else None
    store.claim_inputs([*teachers, *pairs.token_teachers],
                       [*datasets, *pairs.token_datasets, plan.dataset if plan else None])
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
            _fit_rmds(runner, store, teachers, settings, probes_by_teacher, plan, summary, say)
        _measure_selection(runner, store, teachers, datasets, plan, summary, decide_score)
        measured = set(summary["selection"])
        summary["generated_against_real"] = [
            c for c in generated_against_real(selection_rows(store))
            if c["generated"] in measured or any(r["data"] in measured for r in c["real"])]
        run.result = summary
    summary["run_id"] = run.id
    return summary
