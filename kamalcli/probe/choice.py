"""Which cached probe an amalgamation uses: one that matches teacher, data and K, whatever else.

`kamal probe --max-length 64 --mc-samples 8` followed by `kamal amalgamate
--mc-samples 8` uses those probes (and says so) instead of probing again with
the workspace's [probe] defaults. Probing again with other settings while
cached probes exist needs the user's word (--reprobe): it can take long.
"""

from __future__ import annotations

from dataclasses import dataclass
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
                  reprobe: bool = False, say=print) -> ChosenProbes:
    """max_length: the student's; among cached probes with the right K, one cut at that length is preferred."""
    chosen = {}
    for teacher in teachers:
        wanted = request.settings_for(teacher)
        chosen[teacher.id] = wanted if reprobe else _choose(store, teacher, dataset, wanted, need_rmd, max_length, say)
    return ChosenProbes(chosen, request.options_key)


def _choose(store, teacher, dataset, wanted: ProbeSettings, need_rmd: bool, max_length: int, say) -> ProbeSettings:
    usable = [p for p in store.probes(teacher_id=teacher.id, dataset_id=dataset.id)
              if (Path(p.path) / "meta.json").is_file()
              and (not need_rmd or set(wanted.layers) <= set(p.options.get("layers", [])))
              # a deterministic pass (what logits-only methods and feature caches leave) is no MC probe to prefer
              and not (p.options.get("mc_samples") == 1 and wanted.mc_samples > 1)]
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
