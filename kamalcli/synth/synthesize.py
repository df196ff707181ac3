"""kamal synthesize: transfer text written by a causal LM, steered by each teacher towards each of its classes.

The work is cut into units (teacher, class, batch of prompts); each unit has
its own seed derived from the run's seed, so a unit's texts do not depend on
which units ran before it. A finished unit is written to the run's folder at
once (temp file + rename): Ctrl-C loses at most the unit under way, and the
same command again continues with the units left. When all are done the texts
become a workspace dataset like `add-data` makes (content-hashed parquet, label
= the class it was steered to), with its provenance and quality figures.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import string
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable, Iterator

from kamalcli.data.text import GENERATED
from kamalcli.errors import KamalError, KamalFailure

DEFAULT_PROMPT = "Write a short text about {label}."
PROMPT_FIELDS = ("label",)  # the class a text is steered to
KIND = "synthesize"
# chunk steering's candidates for a text's later chunks (its first draws --chunk-candidates): the fewest with which
# a judge put as many texts in their class as with 8, at 1.91x plain generation's time against 2.77x; with 1 the
# texts drifted off their class (docs/benchmarks.md, "Fewer candidates for later chunks")
LATER_CANDIDATES = 3
MAX_PER_CLASS = 100_000  # texts per class of each teacher: already days of generation on a GPU


@dataclass(frozen=True)
class SynthesisRequest:
    """`kamal synthesize`'s settings; the defaults here are the command's (its options read them)."""
    name: str
    per_class: int
    lm: str
    teachers: tuple[str, ...]          # empty: every registered teacher
    prompts: tuple[str, ...]
    seed: int
    strength: float = 3.0              # lambda: the teacher's log p(class) against the LM's
    top_m: int = 20
    top_p: float = 0.9
    max_new_tokens: int = 32
    mode: str = "chunk"
    chunk_tokens: int = 8
    chunk_candidates: int = 8
    batch_size: int = 8
    teacher_max_length: int = 128
    later_candidates: int = LATER_CANDIDATES  # chunk steering: candidates for a text's later chunks
    contrast: bool = True              # steer by the teachers' ensemble p(class), not the steering teacher's alone
    min_steering_p: float = 0.0        # drop rows whose steering teacher gives their class less (0: keep every row)
    device: str = "auto"

    @classmethod
    def default(cls, field_name: str):
        return cls.__dataclass_fields__[field_name].default

    def check(self) -> None:
        problems = [
            (self.per_class >= 1, "--per-class must be at least 1"),
            (self.per_class <= MAX_PER_CLASS,
             f"--per-class must be at most {MAX_PER_CLASS} (texts per class of each teacher)"),
            (bool(self.lm.strip()), "--lm is empty: name a causal LM (kamal models) or give its folder"),
            (self.strength >= 0, "--strength (lambda) must be 0 or more"),
            (self.top_m >= 1, "--top-m must be at least 1"),
            (0 < self.top_p <= 1, "--top-p must be in (0, 1]"),
            (self.max_new_tokens >= 1, "--max-new-tokens must be at least 1"),
            (min(self.chunk_tokens, self.chunk_candidates, self.later_candidates) >= 1,
             "--chunk-tokens, --chunk-candidates and --later-candidates must be at least 1"),
            (self.batch_size >= 1, "--batch-size must be at least 1"),
            (0 <= self.min_steering_p < 1, "--min-steering-p must be in [0, 1)"),
        ]
        for ok, message in problems:
            if not ok:
                raise KamalError(message)
        for prompt in self.prompts:
            _check_prompt(prompt)


def _check_prompt(prompt: str) -> None:
    """A template has {label}, filled with a class name as it is: no other field, format spec or conversion."""
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(prompt)
                  if name is not None]
    except ValueError as e:
        raise KamalError(f"--prompt {prompt!r}: {e} (write {{{{ and }}}} for a literal brace)") from None
    unknown = sorted({name for name, _, _ in fields} - set(PROMPT_FIELDS))
    if unknown:
        raise KamalError(f"--prompt {prompt!r}: unknown field {{{unknown[0]}}}; a prompt may use "
                         + ", ".join(f"{{{f}}}" for f in PROMPT_FIELDS))
    if not fields:
        raise KamalError(f"--prompt {prompt!r} has no {{label}}: the class name goes there")
    for _, spec, conversion in fields:
        if spec or conversion:
            shown = (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise KamalError(f"--prompt {prompt!r}: {{label}} takes no format spec or conversion ({shown}); "
                             "write {label} as it is")


@dataclass(frozen=True)
class Unit:
    index: int
    teacher: str
    label: str
    class_index: int
    prompts: tuple[str, ...]
    seed: int


def plan(request: SynthesisRequest, teachers) -> Iterator[Unit]:
    """The batches in order, made one at a time as they are needed (never all held at once)."""
    index = 0
    for teacher in teachers:
        for class_index, label in enumerate(teacher.labels):
            for start in range(0, request.per_class, request.batch_size):
                rows = range(start, min(start + request.batch_size, request.per_class))
                prompts = tuple(request.prompts[r % len(request.prompts)].format(label=_readable(label)) for r in rows)
                digest = hashlib.sha256(f"{request.seed}|{teacher.name}|{label}|{start}".encode()).hexdigest()
                yield Unit(index, teacher.name, label, class_index, prompts, int(digest[:8], 16))
                index += 1


def unit_count(request: SynthesisRequest, teachers) -> int:
    batches = -(-request.per_class // request.batch_size)
    return batches * sum(len(t.labels) for t in teachers)


def _readable(label: str) -> str:
    return label.replace("_", " ").replace("-", " ")


def _unit_path(workdir: Path, unit: Unit) -> Path:
    return workdir / "units" / f"{unit.index:05d}.json"


def has_units(workdir: Path) -> bool:
    """Whether an unfinished synthesize run has written anything (it can be continued)."""
    return any((Path(workdir) / "units").glob("*.json"))


def synthesize(workspace, store, request: SynthesisRequest, *, say=print):
    """Generate (or continue generating) and register the dataset. Returns (dataset, quality)."""
    from kamalcli.names import check_name
    from kamalcli.workspace.runs import recorded_run

    request.check()
    check_name(request.name, "dataset")
    store.claim("dataset", request.name, exclusive=True)
    if store.has_dataset(request.name):
        raise KamalError(f"a dataset named {request.name!r} exists already; choose another --name")
    names = list(dict.fromkeys(request.teachers))  # a teacher named twice steers once
    teachers = [store.teacher(n) for n in names] if names else store.teachers()
    if not teachers:
        raise KamalError("no teachers registered: kamal add-teacher FOLDER first")
    store.claim_inputs(teachers)
    taggers = [t.name for t in teachers if getattr(t, "task", "sequence") == "token"]
    if taggers:  # steering needs one class score per text; a token teacher has one per word
        raise KamalError(f"synthesize steers text towards a teacher's sentence classes, and {', '.join(taggers)} "
                         "tag tokens: name sentence teachers with --teacher")
    from kamalcli.models.bases import recorded_lm_source, resolve_lm_source
    from kamalcli.models.folder import check_causal_lm

    lm_folder = resolve_lm_source(request.lm)
    check_causal_lm(lm_folder, f"--lm {request.lm}")  # before a run is recorded or anything loads
    request = replace(request, lm=recorded_lm_source(request.lm))
    params = {**asdict(request), "teachers": [t.name for t in teachers],
              "teacher_fingerprints": [t.fingerprint for t in teachers], "lm_fingerprint": _lm_fingerprint(lm_folder)}
    params.pop("device")
    params = json.loads(json.dumps(params))  # as stored (tuples become lists), to compare with an earlier run's
    workdir = _resumable_workdir(store, request.name, params)
    total = unit_count(request, teachers)
    with recorded_run(store, KIND, request.name, params) as run:
        workdir = workdir or workspace.artifact_dir("runs") / f"run-{run.id}"
        store.update_run(run.id, workdir=str(workdir))
        (workdir / "units").mkdir(parents=True, exist_ok=True)
        done, texts_done = _written(request, teachers, workdir)
        if done:
            say(f"Continuing {request.name}: {done} of {total} batches were written before.")
        if done < total:
            pending = (u for u in plan(request, teachers) if not _unit_path(workdir, u).is_file())
            texts = request.per_class * sum(len(t.labels) for t in teachers) - texts_done
            _generate(request, lm_folder, teachers, pending, texts, workdir, say)
        dataset, quality = _register(workspace, store, request, params, teachers, plan(request, teachers), workdir,
                                     run.id, say)
        run.result = {"dataset": dataset.name, "rows": dataset.num_rows}
    shutil.rmtree(workdir, ignore_errors=True)  # the written batches matter only to an unfinished run
    return dataset, quality


def _lm_fingerprint(folder: Path) -> str:
    from kamalcli.models.convert.common import fingerprint_of
    from kamalcli.files import sha256_files

    weights = sorted(Path(folder).glob("*.safetensors"))
    return fingerprint_of(folder) or (sha256_files(weights) if weights else "unknown")


def _written(request: SynthesisRequest, teachers, workdir: Path) -> tuple[int, int]:
    """(batches, texts) an earlier, interrupted run of these settings wrote."""
    if not has_units(workdir):
        return 0, 0
    written = [len(u.prompts) for u in plan(request, teachers) if _unit_path(workdir, u).is_file()]
    return len(written), sum(written)


def _resumable_workdir(store, name: str, params: dict) -> Path | None:
    runs = [r for r in store.runs(kind=KIND, name=name) if r.status in ("interrupted", "failed")
            and r.workdir and has_units(Path(r.workdir))]
    if not runs:
        return None
    run = runs[-1]
    if run.params != params:
        changed = sorted(k for k in set(params) | set(run.params) if params.get(k) != run.params.get(k))
        raise KamalError(f"an interrupted synthesize run named {name!r} used other settings ({', '.join(changed)}); "
                         "run it again with the same settings to continue it, or choose another --name")
    return Path(run.workdir)


def _generate(request: SynthesisRequest, lm_folder: Path, teachers, pending: Iterable[Unit], total: int,
              workdir: Path, say) -> None:
    """Generate and write each pending batch; total: the texts they hold (for the progress bar)."""
    import time

    from kamalcli.files import write_json_atomic
    from kamalcli.progress import progress_bar
    from kamalcli.synth.steering import SteeringConfig, generate

    lm, scorers = load_models(lm_folder, teachers, request.teacher_max_length, request.device)
    steer_by = steering_scorer(scorers, teachers, request.contrast)
    config = SteeringConfig(request.strength, request.top_m, request.top_p, request.max_new_tokens, request.mode,
                            request.chunk_tokens, request.chunk_candidates, request.later_candidates)
    with progress_bar(total, f"synthesize {request.name}", unit="text") as bar:
        for unit in pending:
            started = time.perf_counter()
            scorer, column = steer_by(unit)
            texts, timing = generate(lm, scorer, column, list(unit.prompts), config, unit.seed)
            write_json_atomic(_unit_path(workdir, unit), {
                "teacher": unit.teacher, "label": unit.label, "seed": unit.seed, "prompts": list(unit.prompts),
                "texts": texts, "timing": {**asdict(timing), "seconds": time.perf_counter() - started},
            })
            bar.advance(len(texts))


def steering_scorer(scorers: dict, teachers, contrast: bool):
    """unit -> (scorer, column): the teachers' ensemble and the label's column with contrast and several teachers,
    else the unit's own teacher and its class index."""
    from kamalcli.synth.steering import EnsembleScorer

    if not contrast or len(teachers) < 2:
        return lambda unit: (scorers[unit.teacher], unit.class_index)
    ensemble = EnsembleScorer([scorers[t.name] for t in teachers], [list(t.labels) for t in teachers])
    return lambda unit: (ensemble, ensemble.index(unit.label))


def load_models(lm_folder: Path, teachers, teacher_max_length: int, device: str):
    """The causal LM and one TeacherScorer per teacher name, on one device."""
    import torch

    from kamalcli.models.batching import clamp_length
    from kamalcli.models.loading import load_causal_lm, load_classifier, load_tokenizer
    from kamalcli.runtime import resolve_device
    from kamalcli.synth.steering import CausalLM, TeacherScorer

    device = torch.device(resolve_device(device))
    model = load_causal_lm(lm_folder).to(device)
    lm = CausalLM(model, load_tokenizer(lm_folder), device)
    scorers = {}
    for teacher in teachers:
        owner = f"teacher {teacher.name}"
        classifier = load_classifier(teacher.path, owner=owner)
        tokenizer = load_tokenizer(teacher.path, owner)
        scorers[teacher.name] = TeacherScorer(classifier, tokenizer,
                                              clamp_length(teacher_max_length, classifier.config, tokenizer), device)
    return lm, scorers


def _register(workspace, store, request, params, teachers, units: Iterable[Unit], workdir: Path, run_id: int, say):
    from kamalcli.data.text import TextTable, write_cache

    rows = []  # (text, label, teacher, prompt)
    timing: dict[str, float] = {}
    for unit in units:
        record = json.loads(_unit_path(workdir, unit).read_text(encoding="utf-8"))
        for text, prompt in zip(record["texts"], record["prompts"]):
            rows.append((text, unit.label, unit.teacher, prompt))
        for key, value in record["timing"].items():
            timing[key] = timing.get(key, 0.0) + value
    empty = sum(1 for r in rows if not r[0].strip())
    rows = [r for r in rows if r[0].strip()]
    if not rows:
        raise KamalFailure("the generator wrote no text at all (every sample ended at once); try another --prompt")
    rows, quality = _keep_rows(request, teachers, rows, say)
    table = TextTable([r[0] for r in rows], [r[1] for r in rows], "text", "label", ["text", "label", "teacher", "prompt"],
                      "synthesized")
    content_hash = table.content_hash()
    cache = workspace.artifact_dir("data") / f"{content_hash[:24]}.parquet"
    if not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_cache(table, cache, {"teacher": [r[2] for r in rows], "prompt": [r[3] for r in rows]})
    provenance = {
        "kind": GENERATED, "run_id": run_id,
        "generator": {"lm": request.lm, "fingerprint": params["lm_fingerprint"]},
        "teachers": [{"name": t.name, "fingerprint": t.fingerprint, "labels": list(t.labels)} for t in teachers],
        "settings": {k: params[k] for k in ("per_class", "strength", "top_m", "top_p", "max_new_tokens", "mode",
                                            "chunk_tokens", "chunk_candidates", "later_candidates", "batch_size", "seed",
                                            "contrast", "min_steering_p")},
        "prompts": list(request.prompts), "empty_texts_dropped": empty,
        "timing": {k: round(v, 3) for k, v in timing.items()}, "quality": quality,
    }
    dataset = store.add_dataset(
        name=request.name, source=f"kamal synthesize ({request.lm})", format="synthesized", role="transfer",
        num_rows=table.num_rows, content_hash=content_hash, text_column="text", label_column="label",
        columns=table.columns, label_counts=table.label_counts(), path=str(cache), provenance=provenance,
    )
    return dataset, quality


def _keep_rows(request, teachers, rows: list[tuple], say) -> tuple[list[tuple], dict]:
    """The rows kept (all, or those at --min-steering-p and above) and the quality figures (with the weak and
    dropped rows per class); a note or warning naming them, a failure when none is left."""
    from kamalcli.probs import softmax
    from kamalcli.synth.quality import steering_failed_everywhere, steering_warnings

    texts, labels, steered_by = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    logits = {t.name: _teacher_logits(t, texts, request.device, request.teacher_max_length) for t in teachers}
    probs = {name: softmax(z) for name, z in logits.items()}
    kept = steering_teacher_p(teachers, probs, steered_by, labels) >= request.min_steering_p
    quality = measure_quality(teachers, texts, steered_by, labels, logits, kept, request.min_steering_p, probs)
    if not kept.any():
        raise KamalFailure(steering_failed_everywhere(len(rows), request.strength, request.min_steering_p))
    for line in steering_warnings(quality, request.strength):
        say(line)
    return [r for r, k in zip(rows, kept) if k], quality


def steering_teacher_p(teachers, probs: dict, steered_by: list[str], labels: list[str]):
    """Per row: the probability its steering teacher gives the class it was steered to."""
    import numpy as np

    steered_by, labels = np.asarray(steered_by), np.asarray(labels)
    p = np.zeros(len(labels))
    for teacher in teachers:
        for class_index, label in enumerate(teacher.labels):
            rows = (steered_by == teacher.name) & (labels == label)
            p[rows] = probs[teacher.name][rows, class_index]
    return p


def measure_quality(teachers, texts: list[str], steered_by: list[str], labels: list[str], logits: dict, kept,
                    min_steering_p: float = 0.0, probs: dict | None = None) -> dict:
    """Label-free figures per steering teacher and class, and over all rows kept.

    rows / dropped: the rows kept, and those dropped under --min-steering-p (kamalcli/synth/quality.py); weak: the
    rows kept whose steering teacher gives their class p < WEAK_STEERING_P (weak_steering_p: its mean p on them);
    steering_p: the steering teacher's mean p(class) on the texts kept for that class (dropped_steering_p: on those
    dropped); others_confidence: the other teachers' mean max-probability on them (low is good: the text
    should be outside their domains); in_domain: the share of them whose top class over every teacher's logits
    concatenated is one of the steering teacher's (the teacher the ensemble's target, and energy, pick for
    them: high is good); distinct_2 and near_duplicates as in kamalcli/synth/quality.py.
    """
    import numpy as np

    from kamalcli.probs import softmax
    from kamalcli.synth.quality import WEAK_STEERING_P, distinct_2, near_duplicate_share

    steered_by, labels, kept = np.asarray(steered_by), np.asarray(labels), np.asarray(kept, dtype=bool)
    probs = probs or {name: softmax(z) for name, z in logits.items()}  # the caller's, when it has them
    owner = np.concatenate([[i] * len(t.labels) for i, t in enumerate(teachers)])
    top_teacher = owner[np.concatenate([logits[t.name] for t in teachers], axis=1).argmax(axis=1)]
    groups = []
    for number, teacher in enumerate(teachers):
        others = [o for o in teachers if o.name != teacher.name]
        for class_index, label in enumerate(teacher.labels):
            steered = (steered_by == teacher.name) & (labels == label)
            if not steered.any():
                continue
            rows, dropped = np.flatnonzero(steered & kept), np.flatnonzero(steered & ~kept)
            steering_p, others_confidence = _confidences(probs, teacher, class_index, others, rows)
            dropped_p, dropped_others = _confidences(probs, teacher, class_index, others, dropped)
            kept_p = probs[teacher.name][rows, class_index]
            weak = kept_p < WEAK_STEERING_P
            groups.append({
                "teacher": teacher.name, "label": label, "rows": int(len(rows)), "dropped": int(len(dropped)),
                "weak": int(weak.sum()), "weak_steering_p": _round(float(kept_p[weak].mean())) if weak.any() else None,
                "steering_p": steering_p, "others_confidence": others_confidence,
                "dropped_steering_p": dropped_p, "dropped_others_confidence": dropped_others,
                "in_domain": _round(float((top_teacher[rows] == number).mean())) if others and len(rows) else None,
                "distinct_2": _round(distinct_2([texts[r] for r in rows])),
                "near_duplicates": _round(near_duplicate_share([texts[r] for r in rows])),
            })
    weights = np.array([g["rows"] for g in groups], dtype=float)

    def mean(key):
        values = [(g[key], w) for g, w in zip(groups, weights) if g[key] is not None]
        return round(float(sum(v * w for v, w in values) / sum(w for _, w in values)), 4) if values else None

    kept_texts = [t for t, k in zip(texts, kept) if k]
    overall = {"rows": len(kept_texts), "dropped": int((~kept).sum()), "weak": sum(g["weak"] for g in groups),
               "steering_p": mean("steering_p"),
               "others_confidence": mean("others_confidence"), "in_domain": mean("in_domain"), "distinct_2": _round(distinct_2(kept_texts)),
               "near_duplicates": _round(near_duplicate_share(kept_texts))}
    return {"overall": overall, "groups": groups, "min_steering_p": min_steering_p, "weak_steering_p": WEAK_STEERING_P}


def _confidences(probs: dict, teacher, class_index: int, others, rows) -> tuple[float | None, float | None]:
    """(the teacher's mean p(class), the other teachers' mean max-probability) on these rows; None without rows."""
    if len(rows) == 0:
        return None, None
    steering = _round(float(probs[teacher.name][rows, class_index].mean()))
    if not others:
        return steering, None
    return steering, _round(float(sum(probs[o.name][rows].max(axis=1).mean() for o in others) / len(others)))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _teacher_logits(teacher, texts: list[str], device: str, max_length: int):
    import numpy as np
    import torch

    from kamalcli.models.batching import clamp_length
    from kamalcli.models.loading import load_classifier, load_tokenizer
    from kamalcli.runtime import resolve_device
    from kamalcli.synth.steering import TeacherScorer

    owner = f"teacher {teacher.name}"
    model, tokenizer = load_classifier(teacher.path, owner=owner), load_tokenizer(teacher.path, owner)
    scorer = TeacherScorer(model, tokenizer, clamp_length(max_length, model.config, tokenizer),
                           torch.device(resolve_device(device)))
    return np.concatenate([scorer.logits(texts[i:i + 64]).numpy() for i in range(0, len(texts), 64)])
