"""kamal synthesize."""

from __future__ import annotations

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.render import emit_json, json_option, table
from kamalcli.synth.synthesize import SynthesisRequest

_default = SynthesisRequest.default


@click.command("synthesize")
@click.option("--per-class", type=int, default=100, show_default=True,
              help="Texts per class of each teacher (at most 100000).")
@click.option("--name", required=True, help="Name of the generated dataset (the same command again continues it).")
@click.option("--lm", default=None, help="Causal LM: a named one (kamal models), a folder, or a hub id when online "
                                         "(default smollm2-135m).")
@click.option("--teacher", "teacher_names", multiple=True, metavar="NAME", help="Steer with these teachers only (repeatable).")
@click.option("--prompt", "prompts", multiple=True, metavar="TEMPLATE",
              help="Prompt with {label} for the class name (repeatable: rows take them in turn). Name what your "
                   "texts are ('Write a one-sentence description of a Debian package about {label}.'): text in the "
                   "teachers' domain fits their RMD far better. Default: 'Write a short text about {label}.'")
@click.option("--strength", "--lambda", "strength", type=float, default=_default("strength"), show_default=True,
              help="lambda: weight of the teacher's log p(class) against the LM's (0: plain, unsteered generation).")
@click.option("--top-m", type=int, default=_default("top_m"), show_default=True,
              help="The LM's top-m tokens kept per step (the paper: 200).")
@click.option("--top-p", type=float, default=_default("top_p"), show_default=True, help="Nucleus threshold (the paper: 0.9).")
@click.option("--max-new-tokens", type=int, default=_default("max_new_tokens"), show_default=True, help="Tokens per text at most.")
@click.option("--steer", "mode", type=click.Choice(["token", "chunk"]), default=_default("mode"), show_default=True,
              help="chunk: kamal's re-ranking of short continuations (the teacher runs once per chunk; measured "
                   "1.3x faster on a CPU, as faithful); token: the paper's rescoring of every token.")
@click.option("--chunk-tokens", type=int, default=_default("chunk_tokens"), show_default=True, help="chunk steering: tokens per chunk.")
@click.option("--chunk-candidates", type=int, default=_default("chunk_candidates"), show_default=True,
              help="chunk steering: continuations drawn for a text's first chunk, which sets what it is about.")
@click.option("--later-candidates", type=int, default=_default("later_candidates"), show_default=True,
              help="chunk steering: continuations drawn for each later chunk. Fewer are faster; 1 runs the LM "
                   "alone after the first chunk (no teacher asked), and texts drift off their class.")
@click.option("--contrast/--no-contrast", default=_default("contrast"), show_default=True,
              help="Steer by p(class) under the teachers' ensemble (softmax over every teacher's logits), so a text "
                   "must also look like nothing another teacher knows better; --no-contrast: the steering teacher's "
                   "own p(class), as the paper (the same with one teacher).")
@click.option("--min-steering-p", type=float, default=_default("min_steering_p"), show_default=True,
              help="Drop the rows whose steering teacher gives their class less than this (0: keep every row; "
                   "kamal names the rows under 0.5 either way).")
@click.option("--batch-size", type=int, default=_default("batch_size"), show_default=True, help="Prompts generated together.")
@click.option("--seed", type=int, help="Seed (default: the workspace seed); the same seed gives the same texts.")
@click.option("--device", help="cpu, cuda or auto.")
@json_option
@pass_app
def synthesize(app: App, per_class, name, lm, teacher_names, prompts, strength, top_m, top_p, max_new_tokens, mode,
               chunk_tokens, chunk_candidates, later_candidates, contrast, min_steering_p, batch_size, seed, device,
               as_json) -> None:
    """Write transfer text with a causal LM, steered by each teacher towards each of its classes.

    The result is a dataset (label = the class a text was steered to) with its provenance and
    label-free quality figures; Ctrl-C keeps the batches written, the same command continues.
    """
    try:
        dataset, quality = app.api().synthesize(
            name, per_class=per_class, lm=lm, teachers=tuple(teacher_names), prompts=tuple(prompts), seed=seed,
            device=device, strength=strength, top_m=top_m, top_p=top_p, max_new_tokens=max_new_tokens, mode=mode,
            chunk_tokens=chunk_tokens, chunk_candidates=chunk_candidates, later_candidates=later_candidates,
            batch_size=batch_size, contrast=contrast, min_steering_p=min_steering_p)
    except KeyboardInterrupt as e:
        e.reason = f"the batches written so far are kept; `kamal synthesize` with the same settings continues {name}"
        raise
    if as_json:
        emit_json(dataset.as_json())
        return
    click.echo(f"Added transfer data {dataset.name}: {dataset.num_rows} generated rows, "
               f"{len(dataset.label_counts)} classes")
    show_quality(quality)


def provenance_line(provenance: dict) -> str:
    """How a generated dataset was made, in one line."""
    s, lm = provenance["settings"], provenance["generator"]
    steering = "plain (unsteered)" if not s["strength"] else (
        f"{s['mode']} steering, lambda {s['strength']:g}" +
        (_chunk_words(s) if s["mode"] == "chunk" else "") +
        (", by the teachers' ensemble" if s.get("contrast") and len(provenance["teachers"]) > 1 else ""))
    teachers = ", ".join(t["name"] for t in provenance["teachers"])
    return (f"generated by {lm['lm']} (weights {lm['fingerprint'][:12]}), {steering}, top-m {s['top_m']}, "
            f"top-p {s['top_p']:g}, {s['max_new_tokens']} tokens, seed {s['seed']}; teachers {teachers}; "
            f"prompts {' | '.join(provenance['prompts'])}")


def _chunk_words(settings: dict) -> str:
    first, tokens, later = settings["chunk_candidates"], settings["chunk_tokens"], settings.get("later_candidates")
    if later is None or later == first:  # datasets generated before --later-candidates drew as many for every chunk
        return f", {first} candidates for every chunk of {tokens} tokens"
    return f", {first} candidates for the first chunk of {tokens} tokens, {later} for later ones"


def show_quality(quality: dict) -> None:
    """The label-free figures of a generated dataset, per steering teacher and class."""
    keys = ("rows", "dropped", "weak", "steering_p", "others_confidence", "in_domain", "distinct_2", "near_duplicates")
    # .get: datasets generated before kamal dropped rows where steering failed have no "dropped"
    rows = [(g["teacher"], g["label"], *(g.get(k) for k in keys)) for g in quality["groups"]]
    rows.append(("all", "", *(quality["overall"].get(k) for k in keys)))
    floor, weak = quality.get("min_steering_p"), quality.get("weak_steering_p", 0.5)
    table("Generated text (no labels needed" +
          (f"; dropped: the teacher's p(class) < {floor:g}" if floor else "") +
          f"; weak: kept with p(class) < {weak:g})",
          ["teacher", "class", "rows", "dropped", "weak", "teacher p(class)", "others' confidence", "in its domain",
           "distinct-2", "near-duplicates"], rows)


COMMANDS = [synthesize]
