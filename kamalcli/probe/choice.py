"""Which cached probe an amalgamation uses: one that matches teacher, data and K, whatever else.

`kamal probe --max-length 64 --mc-samples 8` followed by `kamal amalgamate
--mc-samples 8` uses those probes (and says so) instead of probing again with
the workspace's [probe] defaults. A plain `kamal amalgamate` after `kamal probe
--mc-samples 4` uses that probe too, when it is the only setting cached (and
says so); with several, it asks which. Probing again with other settings while
cached probes exist needs the user's word (--reprobe): it can take long.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.probe.arrays import ProbeSettings
from kamalcli.probe.runner import ProbeRequest


@dataclass(frozen=True)
class ChosenProbes:
    """Probe settings per teacher id; answers settings_for and options_key like a ProbeRequest."""

    settings: dict
    options_key: str

    def settings_for(self, teacher) -> ProbeSettings:
        return self.settings[teacher.id]


def choose_probes(store, teachers, dataset, request: ProbeRequest, *, need_rmd: bool, max_length: int,
                  reprobe: bool = False, given=(), say=print) -> ChosenProbes:
    """max_length: the student's; among cached probes with the right K, one cut at that length is preferred.
    given: the probe settings named on the command line (mc_samples, mc_exact); those not named follow the
    cached probes when the request's own are not cached (_follow_the_cache)."""
    if not reprobe:
        request = _follow_the_cache(store, teachers, dataset, request, need_rmd, set(given), say)
    chosen = {}
    for teacher in teachers:
        wanted = request.settings_for(teacher)
        chosen[teacher.id] = wanted if reprobe else _choose(store, teacher, dataset, wanted, need_rmd, max_length, say)
    return ChosenProbes(chosen, request.options_key)


def _usable(store, teacher, dataset, wanted: ProbeSettings, need_rmd: bool) -> list:
    return [p for p in store.probes(teacher_id=teacher.id, dataset_id=dataset.id)
            if (Path(p.path) / "meta.json").is_file()
            and (not need_rmd or set(wanted.layers) <= set(p.options.get("layers", [])))
            # a deterministic pass (what logits-only methods and feature caches leave) is no MC probe to prefer
            and not (p.options.get("mc_samples") == 1 and wanted.mc_samples > 1)]


def _follow_the_cache(store, teachers, dataset, request: ProbeRequest, need_rmd: bool, given: set,
                      say) -> ProbeRequest:
    """`kamal probe --mc-samples 4` then `kamal amalgamate`: the request with the K and estimator of the one
    setting the teachers' cached probes share, when the request's own is not among them; with several,
    refused in one line that lists them. Settings named on the command line are kept and narrow the choice."""
    if {"mc_samples", "mc_exact"} <= given:
        return request
    wanted = _kind(ProbeSettings(request.mc_samples, mc_exact=request.mc_exact).cache_fields())
    cached = {}
    for teacher in teachers:
        kinds = {_kind(p.options) for p in _usable(store, teacher, dataset, request.settings_for(teacher), need_rmd)}
        kinds = {k for k in kinds if ("mc_samples" not in given or k[0] == wanted[0])
                 and ("mc_exact" not in given or k[1] == wanted[1])}
        if kinds:
            cached[teacher.name] = kinds
    common = set.intersection(*cached.values()) if cached else set()
    if not common or wanted in common:
        return request  # nothing shared to follow (each teacher's probe is chosen, or refused, alone)
    names, whose = ", ".join(cached), "the settings asked for" if given else "the workspace's settings"
    if len(common) > 1:
        listed = "; ".join(f"{_kind_text(k)} ({_kind_option(k)})" for k in sorted(common))
        raise KamalError(f"the cached probes of {names} on {dataset.name} have several settings, none of them "
                         f"{whose} ({_kind_text(wanted)}): choose one of {listed}; or --reprobe to probe again "
                         f"with {_kind_text(wanted)}")
    [kind] = common
    say(f"No probe with {whose} ({_kind_text(wanted)}) is cached for {names} on {dataset.name}; using the one "
        f"that is: {_kind_text(kind)} (--mc-samples and --mc-exact/--mc-adaptive choose, --reprobe probes again)")
    return replace(request, mc_samples=kind[0], mc_exact=kind[1] == "exact")


def _kind(options: dict) -> tuple[int, str]:
    """What --mc-samples and --mc-exact/--mc-adaptive choose: K, and plain, adaptive or exact."""
    return options.get("mc_samples", 1), _estimator(options)


def _kind_text(kind: tuple[int, str]) -> str:
    return f"K={kind[0]}" + ("" if kind[1] == "plain" else f", {kind[1]}")


def _kind_option(kind: tuple[int, str]) -> str:
    return f"--mc-samples {kind[0]}" + ("" if kind[1] == "plain" else f" --mc-{kind[1]}")


def _choose(store, teacher, dataset, wanted: ProbeSettings, need_rmd: bool, max_length: int, say) -> ProbeSettings:
    usable = _usable(store, teacher, dataset, wanted, need_rmd)
    if not usable:
        return wanted  # nothing cached (or its files are gone): probe with the settings asked for
    exact = [p for p in usable if _without_layers(p.options) == _without_layers(wanted.cache_fields())]
    same_k = [p for p in usable if p.options.get("mc_samples") == wanted.mc_samples
              and _estimator(p.options) == _estimator(wanted.cache_fields())]
    candidates = exact or sorted(same_k, key=lambda p: (p.options.get("max_length") == max_length, p.id))[-1:]
    if not candidates:
        listed = "; ".join(sorted({_describe(p.options) for p in usable}))
        raise KamalError(
            f"teacher {teacher.name}'s cached probes on {dataset.name} ({listed}) have no "
            f"K={wanted.mc_samples}{', exact' if wanted.mc_exact else ''}: pass --mc-samples (and --mc-exact or "
            f"--mc-adaptive) to use one, or --reprobe to probe again with {_describe(wanted.cache_fields())}"
        )
    probe = candidates[0]
    say(f"Using cached probe {probe.id} of {teacher.name} on {dataset.name} ({_describe(probe.options)}).")
    options = probe.options
    adaptive = options.get("mc_adaptive") or {}
    return ProbeSettings(mc_samples=options["mc_samples"], dropout=options.get("dropout"),
                         max_length=options["max_length"], seed=options.get("seed", 0),
                         layers=wanted.layers if need_rmd else tuple(options.get("layers", ())),
                         feature_dtype=options.get("feature_dtype", "float32"),
                         mc_exact=_estimator(options) == "exact",
                         mc_tolerance=adaptive.get("tolerance", wanted.mc_tolerance),
                         mc_min_passes=adaptive.get("min_passes", wanted.mc_min_passes))


def _estimator(options: dict) -> str:
    """How a probe's MC confidences were estimated: K = 1 samples nothing, else adaptive or exact."""
    if options.get("mc_samples", 1) == 1:
        return "plain"
    return "adaptive" if "mc_adaptive" in options else "exact"


def _without_layers(options: dict) -> dict:
    return {k: v for k, v in options.items() if k != "layers"}


def _describe(options: dict) -> str:
    dropout = "" if options.get("dropout") is None else f", dropout {options['dropout']}"
    estimator = {"exact": ", exact", "adaptive": ", adaptive", "plain": ""}[_estimator(options)]
    return f"K={options.get('mc_samples')}{estimator}, max length {options.get('max_length')}{dropout}"
