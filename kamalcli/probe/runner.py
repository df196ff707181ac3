"""The probe cache: each teacher runs once per dataset and setting; RMD fits; selection quality.

Steps: (1) ensure a cached probe for every (teacher, dataset) pair; (2) fit
relative-Mahalanobis models per teacher and score every probe; (3) on labelled
datasets, measure how well each confidence score selects the right teacher.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from kamalcli.errors import KamalError
from kamalcli.labels import label_indices
from kamalcli.settings import PROBE, WORKSPACE
from kamalcli.probe.arrays import ProbeArrays, ProbeSettings, default_layers
from kamalcli.probe.figures import row_scores, rmd_split_means, selection_table, summarize
from kamalcli.data.text import is_generated

PSEUDO_CONFIDENCE = 0.9  # max probability above which a transfer row counts as in-distribution
PSEUDO_MIN_SHARE = 0.1   # ...but at least this share of rows, the most confident ones
STEERED_MIN_P = 0.5      # a generated row fits its class's Gaussian only if the teacher gives that class this much


def pseudo_in_distribution(max_prob: np.ndarray) -> np.ndarray:
    """Rows a teacher is confident on: max prob >= 0.9, or else its most confident 10%."""
    keep = max_prob >= PSEUDO_CONFIDENCE
    floor = min(len(max_prob), max(10, int(np.ceil(PSEUDO_MIN_SHARE * len(max_prob)))))
    if keep.sum() < floor:
        keep = np.zeros(len(max_prob), dtype=bool)
        keep[np.argsort(-max_prob, kind="stable")[:floor]] = True
    return keep


def on_steered_class(probs: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Generated rows the teacher itself puts in the class they were written for (p >= STEERED_MIN_P), class by
    class; a class with fewer than 2 such rows keeps all its rows.

    A row the steering could not pull into its class (an LM that wrote about something else) would
    pull that class's mean away from the teacher's domain. But a teacher unsure of one class is unsure
    of every text of it, right or not: filtering such a class would leave it without a Gaussian.
    """
    local = np.asarray(local)
    passed = (local >= 0) & (np.asarray(probs)[np.arange(len(local)), np.maximum(local, 0)] >= STEERED_MIN_P)
    keep = passed.copy()
    for c in np.unique(local[local >= 0]):
        if passed[local == c].sum() < 2:
            keep[local == c] = True
    return keep


def generated_fit_line(note: dict) -> str:
    return (f"RMD for {note['teacher']}: fitted on {note['rows']} of the {note['written_for_it']} rows of "
            f"{note['data']} written for its classes, those it puts in their class (p >= {STEERED_MIN_P:g}; "
            "all of a class's rows when fewer than 2 are)")


def _digest(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class ProbeRequest:
    """What the user asked for; per-teacher settings are derived from it."""

    mc_samples: int = PROBE.mc_samples
    dropout: float | None = PROBE.dropout
    max_length: int = PROBE.max_length
    layers: str = "default"  # "default", "all" or "3,6"
    seed: int = WORKSPACE.seed
    mc_exact: bool = PROBE.mc_exact

    @property
    def options_key(self) -> str:
        fields = {"mc": self.mc_samples, "p": self.dropout, "len": self.max_length, "layers": self.layers,
                  "seed": self.seed}
        adaptive = ProbeSettings(self.mc_samples, mc_exact=self.mc_exact)
        if adaptive.adaptive:  # exact keys stay those of probes made before the adaptive probe
            fields["adaptive"] = adaptive.adaptive_fields()
        return _digest(fields)[:16]

    def settings_for(self, teacher) -> ProbeSettings:
        depth = teacher.num_layers or 1
        if self.layers == "default":
            layers = default_layers(depth)
        elif self.layers == "all":
            layers = tuple(range(1, depth + 1))
        elif self.layers in ("", "none"):
            layers = ()
        else:
            try:
                layers = tuple(sorted({int(x) for x in self.layers.split(",")}))
            except ValueError:
                raise KamalError(f"--rmd-layers {self.layers!r}: give layer numbers like 3,6, or all") from None
            bad = [x for x in layers if not 0 <= x <= depth]
            if bad:
                raise KamalError(f"--rmd-layers: teacher {teacher.name} has layers 0..{depth} (got {bad})")
        settings = ProbeSettings(self.mc_samples, self.dropout, self.max_length, layers, self.seed,
                                 mc_exact=self.mc_exact)
        settings.validate()
        return settings

    def as_json(self) -> dict:
        return {"mc_samples": self.mc_samples, "dropout": self.dropout, "max_length": self.max_length,
                "layers": self.layers, "seed": self.seed, "mc_exact": self.mc_exact}


def probe_key(teacher, dataset, settings: ProbeSettings) -> str:
    return _digest({"teacher": teacher.fingerprint, "data": dataset.content_hash, **settings.cache_fields()})


@dataclass
class Runner:
    """Runs probes for one `kamal probe` (or amalgamate) invocation."""

    workspace: object
    store: object
    device: str = "auto"  # resolved when a model first has to run (a cache hit never loads torch)
    batch_size: int = 32
    mode: str = "auto"
    run_id: int | None = None
    options_key: str = ""
    read_only: bool = False  # a non-zero rank rebuilding what rank 0 built: every probe must be cached
    say: Callable[[str], None] = print
    _gold_labels: dict = field(default_factory=dict, init=False, repr=False)
    _aliases: object = field(default=None, init=False, repr=False)  # the workspace's label merges, read once

    # -- (1) probes ------------------------------------------------------------
    def ensure(self, teacher, dataset, settings: ProbeSettings, *, need_layers: bool = True):
        """The cached probe for this pair and setting, computing it if needed. Returns (probe, computed).

        A probe with more pooled layers serves a request for fewer; with
        need_layers=False (no RMD wanted) any pooled layers will do.
        """
        key = probe_key(teacher, dataset, settings)
        found = self._usable(teacher, dataset, settings, need_layers)
        if found is None:
            self.store.claim("probe", key, exclusive=True, wait=True, on_wait=lambda holder: self.say(
                f"Waiting for {holder}: it is computing the probe of {teacher.name} on {dataset.name}."))
            found = self._usable(teacher, dataset, settings, need_layers)  # that command may have just made it
        if found is not None:
            return found, False
        return self._compute(teacher, dataset, settings, key), True

    def _usable(self, teacher, dataset, settings: ProbeSettings, need_layers: bool):
        for found in self._compatible(teacher, dataset, settings, need_layers):
            if (Path(found.path) / "meta.json").is_file():
                return found
            self.store.delete_probe(found.id)  # its files are gone: recompute
        return None

    def cached(self, teacher, dataset, settings: ProbeSettings, need_layers: bool = True) -> bool:
        return any((Path(p.path) / "meta.json").is_file() for p in self._compatible(teacher, dataset, settings, need_layers))

    def _finished(self, teacher, dataset) -> list:
        """The pair's cached probes whose files are all there."""
        return [p for p in self.store.probes(teacher_id=teacher.id, dataset_id=dataset.id)
                if (Path(p.path) / "meta.json").is_file()]

    def logits_cached(self, teacher, dataset, max_length: int, *, any_length: bool = False):
        """A cached probe of the pair at this max length (or, with any_length, at any length, this one
        preferred): every probe holds the deterministic logits. None if there is none."""
        found = [p for p in self._finished(teacher, dataset)
                 if any_length or p.options.get("max_length") == max_length]
        found.sort(key=lambda p: (p.options.get("max_length") != max_length, p.id))
        return found[0] if found else None

    def logits_probe(self, teacher, dataset, max_length: int):
        """A probe with the deterministic logits at this max length: a cached one, else a K=1 one."""
        found = self.logits_cached(teacher, dataset, max_length)
        if found is not None:
            return found
        settings = ProbeSettings(mc_samples=1, dropout=None, max_length=max_length, layers=(), seed=0)
        probe, _ = self.ensure(teacher, dataset, settings, need_layers=False)
        return probe

    def feature_probe(self, teacher, dataset, max_length: int, layers: tuple[int, ...]):
        """A probe of the pair with pooled features of these layers (any K: features come from the
        deterministic pass); else one deterministic pass storing them in float16. Returns (probe, computed)."""
        for p in self._finished(teacher, dataset):
            if p.options.get("max_length") == max_length and set(layers) <= set(p.options.get("layers", [])):
                return p, False
        settings = ProbeSettings(mc_samples=1, dropout=None, max_length=max_length, layers=tuple(sorted(set(layers))),
                                 seed=0, feature_dtype="float16")
        return self.ensure(teacher, dataset, settings)

    def _compatible(self, teacher, dataset, settings: ProbeSettings, need_layers: bool) -> list:
        exact = self.store.find_probe(probe_key(teacher, dataset, settings))
        wanted = {k: v for k, v in settings.cache_fields().items() if k != "layers"}
        others = []
        for p in self.store.probes(teacher_id=teacher.id, dataset_id=dataset.id):
            if exact is not None and p.id == exact.id:
                continue
            same = {k: v for k, v in p.options.items() if k != "layers"} == wanted
            layers_ok = not need_layers or set(settings.layers) <= set(p.options.get("layers", []))
            if same and layers_ok:
                others.append(p)
        return ([exact] if exact is not None else []) + others

    def _compute(self, teacher, dataset, settings: ProbeSettings, key: str):
        from kamalcli.files import publish_dir, removed_on_failure
        from kamalcli.probe.mc_dropout import pick_mode

        if self.read_only:
            raise KamalError(f"internal: probe of {teacher.name} on {dataset.name} missing on a worker process")
        folder, texts, labels, model, encoded = self._load_pair(teacher, dataset, settings)
        from kamalcli.runtime import resolve_device

        self.device = resolve_device(self.device)
        mode = pick_mode(self.mode, self.device)
        staging = self.workspace.tmp_dir()
        started = time.perf_counter()
        with removed_on_failure(staging):
            passes = self._passes(teacher, dataset, settings, folder, model, encoded, len(texts), staging, mode)
            seconds = time.perf_counter() - started
            rows, summary = self._summarize_staged(teacher, dataset, settings, staging, mode, seconds, passes,
                                                   labels, len(texts))
            final = self.workspace.artifact_dir("probes") / key[:32]
            publish_dir(staging, final)
        return self.store.add_probe(
            rows, teacher_id=teacher.id, dataset_id=dataset.id, key=key,
            options_key=self.options_key, options=settings.cache_fields(), path=str(final),
            num_rows=len(texts), summary=summary, seconds=seconds, run_id=self.run_id,
        )

    def _load_pair(self, teacher, dataset, settings: ProbeSettings):
        """(folder, texts, labels, model, encoded texts) of a pair, once the teacher is checked to be
        the one registered."""
        from kamalcli.models.batching import encode
        from kamalcli.data.text import load_dataset_rows
        from kamalcli.models.loading import load_classifier, load_tokenizer, model_folder
        from kamalcli.probe.mc_dropout import check_dropout
        from kamalcli.probe.teacher_weights import on_disk

        owner = f"teacher {teacher.name}"
        folder = model_folder(teacher.path, owner)
        # rewritten after this command checked them, or a command that does not check: sizes and times first,
        # the hash only when they differ
        now = on_disk(teacher)
        if now is not None and now.fingerprint != teacher.fingerprint:
            raise KamalError(
                f"teacher {teacher.name}'s weights at {folder} changed on disk; `kamal probe --teacher "
                f"{teacher.name}` records its new weights and probes it again"
            )
        texts, labels = load_dataset_rows(dataset)
        model = load_classifier(folder, owner=owner)
        if model.config.num_labels != len(teacher.labels):
            raise KamalError(f"teacher {teacher.name} now has {model.config.num_labels} classes, not {len(teacher.labels)}")
        check_dropout(model, settings, teacher.name)
        encoded = encode(load_tokenizer(folder, owner), texts, settings.max_length, config=model.config)
        return folder, texts, labels, model, encoded

    def _passes(self, teacher, dataset, settings: ProbeSettings, folder: Path, model, encoded, total: int,
                staging: Path, mode: str) -> dict:
        """The teacher's passes over the data into `staging`, on this process or shared among the ranks."""
        from kamalcli import distributed
        from kamalcli.probe.mc_dropout import run_teacher
        from kamalcli.probe.shards import ProbeShard
        from kamalcli.progress import progress_bar

        how = "adaptive, at most " if settings.adaptive else ""
        label = f"probe {teacher.name} on {dataset.name} (K={how}{settings.mc_samples})"
        with progress_bar(total, label) as bar:
            world = distributed.current()
            if world.distributed:
                kind = "cpu" if self.device == "cpu" else "cuda"  # each rank resolves its own GPU
                shard = ProbeShard(str(folder), dataset, settings, str(staging), kind, self.batch_size, mode)
                world.dispatch(shard)
                passes = shard.run(world, model, encoded, advance=bar.advance)
                bar.advance(total - bar.done)  # the other ranks' rows
            else:
                passes = run_teacher(model, encoded, settings, staging, device=self.device,
                                     batch_size=self.batch_size, mode=mode, advance=bar.advance)
        return passes

    def _summarize_staged(self, teacher, dataset, settings: ProbeSettings, staging: Path, mode: str,
                          seconds: float, passes: dict, labels, num_rows: int):
        """meta.json written beside the staged arrays; (per-row scores, summary) of them."""
        from kamalcli.files import write_json_atomic

        write_json_atomic(staging / "meta.json", {
            "teacher": teacher.name, "fingerprint": teacher.fingerprint, "dataset": dataset.name,
            "content_hash": dataset.content_hash, "settings": settings.cache_fields(),
            "layers": list(settings.layers), "labels": list(teacher.labels), "rows": num_rows,
            "mode": mode, "device": self.device, "batch_size": self.batch_size, "seconds": seconds, **passes,
        })
        arrays = ProbeArrays.load(staging)
        rows = row_scores(arrays)
        summary = summarize(rows, self._own(teacher), self._canonical(labels))
        summary["examples_per_second"] = num_rows / max(seconds, 1e-9)
        summary.update(passes)
        return rows, summary

    # -- (2) relative Mahalanobis ---------------------------------------------------
    def fit_rmd(self, teacher, settings: ProbeSettings, probes: list, fit_dataset=None) -> dict | None:
        """Fit the teacher's RMD models and score its probes. Returns a note, or None without layers."""
        from kamalcli.trust.mahalanobis import RMDModel

        if not settings.layers or not probes:
            return None
        source, dataset = self._rmd_source(teacher, fit_dataset, probes)
        generated = is_generated(dataset)
        key = {"teacher": teacher.fingerprint, "source": source, "data": dataset.content_hash,
               "layers": list(settings.layers), "len": settings.max_length,
               "pseudo": [PSEUDO_CONFIDENCE, PSEUDO_MIN_SHARE] if source == "pseudo" else None}
        if generated:
            key["steered_min_p"] = STEERED_MIN_P  # fits from before the filter are not reused
            key["steered_filter"] = "per-class"  # nor those from before its fallback was per class
        fit_key = _digest(key)
        fit = self.store.find_rmd_fit(fit_key)
        if fit is not None and not Path(fit.path).is_dir():
            self.store.delete_rmd_fit(fit.id)
            fit = None
        if fit is None:
            fit = self._fit(teacher, settings, source, dataset, fit_key)
        probes = [p for p in probes if getattr(self.store.rmd_fit_of(p.id), "id", None) != fit.id]
        if not probes:
            return None
        last = max(settings.layers)
        model = RMDModel.load(Path(fit.path) / f"rmd-L{last}.npz")
        for probe in probes:
            values = model.score(ProbeArrays.load(Path(probe.path)).features[last])
            summary = dict(probe.summary)
            summary["rmd"] = {"source": source, "fit_data": dataset.name, "fit_rows": fit.num_rows,
                              "layer": last, "circular": source == "pseudo",
                              **rmd_split_means(values, self._in_domain(teacher, probe))}
            self.store.set_probe_rmd(probe.id, fit.id, values, summary)
        note = {"teacher": teacher.name, "source": source, "data": dataset.name, "rows": fit.num_rows,
                "generated": generated}
        if generated:
            note["written_for_it"] = int((label_indices(self._gold(dataset), self._own(teacher)) >= 0).sum())
        return note

    def _fit(self, teacher, settings: ProbeSettings, source: str, dataset, fit_key: str):
        from kamalcli.files import publish_dir, removed_on_failure
        from kamalcli.trust.mahalanobis import fit_rmd

        source_probe = self._features_probe(teacher, dataset, settings, replace(settings, mc_samples=1))
        arrays = ProbeArrays.load(Path(source_probe.path))
        if source == "pseudo":
            probs = arrays.probs()
            keep = pseudo_in_distribution(probs.max(axis=1))
            local = probs.argmax(axis=1)
            everything = np.ones(len(local), dtype=bool)
        else:
            local = label_indices(self._gold(dataset), self._own(teacher))
            keep = on_steered_class(arrays.probs(), local) if is_generated(dataset) else local >= 0
            # The teacher's own training rows are all in-distribution; a labelled
            # set may hold other classes too, which only the background sees.
            everything = keep if source == "teacher-train" else np.ones(len(local), dtype=bool)
        if keep.sum() < 2:
            raise KamalError(
                f"cannot fit relative Mahalanobis for {teacher.name}: only {int(keep.sum())} in-distribution "
                f"rows in {dataset.name} ({source}); give labelled data with --rmd-fit or use --no-rmd"
            )
        staging = self.workspace.tmp_dir()
        with removed_on_failure(staging):
            for layer in settings.layers:
                features = np.asarray(arrays.features[layer])
                fit_rmd(features[keep], local[keep], features[everything]).save(staging / f"rmd-L{layer}.npz")
            final = self.workspace.artifact_dir("probes") / f"rmd-{fit_key[:32]}"
            publish_dir(staging, final)
        return self.store.add_rmd_fit(teacher_id=teacher.id, key=fit_key, source=source, dataset_id=dataset.id,
                                      layers=list(settings.layers), num_rows=int(keep.sum()), path=str(final))

    def _rmd_other_layers(self, teachers, probes: dict) -> dict[str, dict]:
        """Confidence -RMD at each fitted layer but the last (that one is in the rows), per teacher."""
        from kamalcli.trust.mahalanobis import RMDModel

        fits = {t.id: self.store.rmd_fit_of(probes[t.id].id) for t in teachers}
        if any(f is None for f in fits.values()):
            return {}
        shared = set.intersection(*(set(f.layers[:-1]) for f in fits.values()))
        arrays = {t.id: ProbeArrays.load(Path(probes[t.id].path)) for t in teachers}
        return {
            f"rmd@L{layer}": {t.id: -RMDModel.load(Path(fits[t.id].path) / f"rmd-L{layer}.npz").score(arrays[t.id].features[layer])
                              for t in teachers}
            for layer in sorted(shared)
        }

    def _label_free_candidates(self, teachers, probes: dict, rows: dict, dataset, fold=None) -> dict[str, dict]:
        """energy, RMD compared per teacher (its percentile among its own rows), and the prototype score and its
        fusion with RMD (when every RMD was fitted on one labelled dataset)."""
        from kamalcli.probe.selection import per_teacher_rank
        from kamalcli.probe.measured import energy
        from kamalcli.probe.figures import SCORES

        out = {"energy": {t.id: energy(ProbeArrays.load(Path(probes[t.id].path)).logits) for t in teachers}}
        columns = {name: [fn(rows[t.id]) for t in teachers] for name, fn in SCORES.items()}
        confidence = {name: np.stack(c, axis=1) for name, c in columns.items() if all(x is not None for x in c)}
        confidence["energy"] = np.stack([out["energy"][t.id] for t in teachers], axis=1)
        fits = [self.store.rmd_fit_of(probes[t.id].id) for t in teachers]
        if "rmd" in confidence:
            ranked = per_teacher_rank(confidence["rmd"])
            out["rmd, per-teacher rank"] = {t.id: ranked[:, i] for i, t in enumerate(teachers)}
            prototype = self._prototype_scores(teachers, dataset, fits, probes, fold)
            if prototype is not None:
                from kamalcli.probe.prototypes import confidence_columns

                columns = confidence_columns(prototype, confidence["rmd"])
                confidence.update(columns)
                out.update({name: {t.id: c[:, i] for i, t in enumerate(teachers)} for name, c in columns.items()})
        return out

    def _prototype_scores(self, teachers, dataset, fits, probes: dict, fold=None) -> np.ndarray | None:
        """The prototype score on dataset's rows, when every teacher's RMD was fitted on the same labelled
        dataset (the prototypes come from it; cross-fitted by `fold` when that is dataset itself); None otherwise,
        or without the default encoder installed."""
        from kamalcli.probe.cross_fit import cross_fitted_shares
        from kamalcli.probe.prototypes import DEFAULT_ENCODER, fit_prototypes
        from kamalcli.runtime import resolve_device

        if any(f is None or f.source != "labelled" for f in fits) or len({f.dataset_id for f in fits}) != 1:
            return None
        fit_dataset = self.store.dataset_by_id(fits[0].dataset_id)
        if fit_dataset.id == dataset.id and fold is None:
            return None
        try:
            fit = fit_prototypes(self.workspace, teachers, dataset, fit_dataset, encoder=DEFAULT_ENCODER,
                                 max_length=max(p.options.get("max_length", 128) for p in probes.values()),
                                 device=resolve_device(self.device), say=self.say,
                                 canonical=lambda label: self._canonical([label])[0])
        except KamalError as error:
            self.say(f"No prototype score in the selection table: {error}")
            return None
        if fit_dataset.id == dataset.id:
            return cross_fitted_shares(fit.vectors, self._gold(dataset), fit.names, fit.owns, fold)
        return fit.shares()

    def _gold(self, dataset) -> list[str]:
        """A labelled dataset's gold labels, read once per run, each as the name of its class (kamal labels
        merge: any of a class's names may be used)."""
        from kamalcli.data.text import load_dataset_rows

        if dataset.id not in self._gold_labels:
            self._gold_labels[dataset.id] = self._canonical(load_dataset_rows(dataset)[1])
        return self._gold_labels[dataset.id]

    def _canonical(self, labels):
        if labels is None:
            return None
        if self._aliases is None:
            self._aliases = self.store.label_aliases()
        return [self._aliases.canonical(label) for label in labels]

    def _own(self, teacher) -> list[str]:
        """The teacher's labels as the names of their classes (what gold labels are compared with)."""
        return self._canonical(teacher.labels)

    def _in_domain(self, teacher, probe) -> np.ndarray | None:
        dataset = self.store.dataset_by_id(probe.dataset_id)
        if not dataset.has_labels:
            return None
        owned = set(self._own(teacher))
        return np.array([g in owned for g in self._gold(dataset)], dtype=bool)

    def _rmd_source(self, teacher, fit_dataset, probes):
        if fit_dataset is not None:
            fit_dataset.refuse_test(f"--rmd-fit {fit_dataset.name}")
            if not fit_dataset.has_labels:
                raise KamalError(f"--rmd-fit {fit_dataset.name}: that dataset has no labels")
            return "labelled", fit_dataset
        if teacher.train_dataset_id is not None:
            return "teacher-train", self.store.dataset_by_id(teacher.train_dataset_id)
        transfer = [self.store.dataset_by_id(p.dataset_id) for p in probes]
        transfer = [d for d in transfer if d.role == "transfer"] or self.store.datasets(role="transfer")
        if not transfer:
            raise KamalError(
                f"relative Mahalanobis for {teacher.name} needs in-distribution features: add transfer data, "
                "give labelled data with --rmd-fit NAME, or use --no-rmd"
            )
        return "pseudo", transfer[0]

    def _features_probe(self, teacher, dataset, settings, feature_settings):
        """Any probe of this teacher with the same features will do: K does not change them, nor do labels or a
        name (the rows a teacher was trained on, added again without labels as the pool, have the same)."""
        for candidate in (settings, feature_settings):
            found = self.store.find_probe(probe_key(teacher, dataset, candidate))
            if found is not None and (Path(found.path) / "meta.json").is_file():
                return found
        found = self._probe_of_same_texts(teacher, dataset, feature_settings)
        if found is not None:
            return found
        probe, _ = self.ensure(teacher, dataset, feature_settings)
        return probe

    def _probe_of_same_texts(self, teacher, dataset, settings: ProbeSettings):
        """A finished probe of the teacher, at this max length with these layers, on another dataset holding
        exactly this dataset's texts in the same order (its rows line up with this dataset's labels)."""
        from kamalcli.data.text import load_dataset_rows

        texts = None
        for other in self.store.datasets():
            if other.id == dataset.id or other.num_rows != dataset.num_rows or other.task != dataset.task:
                continue
            found = [p for p in self._finished(teacher, other) if p.options.get("max_length") == settings.max_length
                     and set(settings.layers) <= set(p.options.get("layers", []))]
            if not found:
                continue
            texts = load_dataset_rows(dataset)[0] if texts is None else texts
            if load_dataset_rows(other)[0] == texts:
                return found[0]
        return None

    # -- (3) selection quality -------------------------------------------------------
    def measure_selection(self, dataset, among=None) -> dict | None:
        """Per score: how often the most confident teacher owns the gold label; stored. A fitted score measured on
        the rows it is fitted on is cross-fitted (kamalcli/probe/cross_fit.py). among: the teachers of one task
        (kamalcli/heads.py), who are selected among; None: every teacher probed on dataset."""
        from kamalcli.probe.cross_fit import fold_of, is_fitted_score

        if not dataset.has_labels:
            return None
        teachers, latest = self._selection_probes(dataset, among)
        if len(teachers) < 2:
            return None
        space = self.store.label_space(teachers)
        rows = {t.id: self.store.probe_rows(latest[t.id].id) for t in teachers}
        fits = {t.id: self.store.rmd_fit_of(latest[t.id].id) for t in teachers}
        fitted_here = [t for t in teachers if getattr(fits[t.id], "dataset_id", None) == dataset.id]
        fold = fold_of(self._gold(dataset)) if fitted_here else None
        other_layers = self._rmd_other_layers(teachers, latest)
        for teacher in fitted_here:
            by_layer = self._cross_fitted_rmd(teacher, latest[teacher.id], fits[teacher.id], dataset, fold)
            last = max(fits[teacher.id].layers)
            cross_fitted = by_layer.pop(last).tolist() if by_layer else [None] * len(rows[teacher.id]["pred"])
            rows[teacher.id] = {**rows[teacher.id], "rmd": cross_fitted}
            for name, by_teacher in other_layers.items():
                by_teacher[teacher.id] = -by_layer[int(name.split("@L")[1])] if by_layer else None
        other_layers = {name: c for name, c in other_layers.items() if all(v is not None for v in c.values())}
        extra = {**other_layers, **self._label_free_candidates(teachers, latest, rows, dataset, fold)}
        results = selection_table(self._gold(dataset), space, teachers, rows, extra)
        if fold is not None:
            for score, quality in results.items():
                if is_fitted_score(score):
                    quality["cross_fitted"] = int(fold.max()) + 1
        self.store.replace_selection(dataset.id, self.options_key, [t.name for t in teachers],
                                     [latest[t.id].id for t in teachers], results)
        return results

    def _cross_fitted_rmd(self, teacher, probe, fit, dataset, fold) -> dict:
        """layer -> RMD of every row of dataset under fits on the other folds, kept as this fit keeps rows
        (_fit); empty when it cannot be cross-fitted (a label with one row, a fold with too few kept rows)."""
        from kamalcli.probe.cross_fit import cross_fitted_rmd

        if fold is None or fit.source != "labelled":
            return {}
        arrays = ProbeArrays.load(Path(probe.path))
        local = label_indices(self._gold(dataset), self._own(teacher))
        keep = on_steered_class(arrays.probs(), local) if is_generated(dataset) else local >= 0
        out = {}
        for layer in fit.layers:
            values = cross_fitted_rmd(arrays.features[layer], local, keep, fold)
            if values is None:
                return {}
            out[layer] = values
        return out

    def _selection_probes(self, dataset, among=None) -> tuple[list, dict]:
        """The teachers probed on dataset with this run's settings (of those among, when given), and each one's
        newest such probe."""
        latest = {}
        for p in self.store.probes(dataset_id=dataset.id, options_key=self.options_key):
            latest[p.teacher_id] = p
        wanted = {t.id for t in among} if among is not None else set(latest)
        return [t for t in self.store.teachers() if t.id in latest and t.id in wanted], latest

    def add_auto_row(self, dataset, results: dict, score: str, decided_for) -> None:
        """The figures of the score score=auto selects with for the teachers decided_for
        (kamalcli/probe/measured.py), as the row `auto: SCORE` beside the others (oracle last); stored again.
        Nothing to add when that score was not measured here, or here on other teachers."""
        teachers, latest = self._selection_probes(dataset, decided_for)
        if score not in results or {t.name for t in teachers} != {t.name for t in decided_for}:
            return
        oracle = results.pop("oracle")
        results.update({f"auto: {score}": results[score], "oracle": oracle})
        self.store.replace_selection(dataset.id, self.options_key, [t.name for t in teachers],
                                     [latest[t.id].id for t in teachers], results)
