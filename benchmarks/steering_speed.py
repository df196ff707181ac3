"""What steering costs against plain generation, on any device: time per text, side by side in one run.

    python benchmarks/steering_speed.py                        # smollm2-135m and two minilm-l3 teachers, real weights
    python benchmarks/steering_speed.py --save-shapes DIR      # their configs and tokenizers only (about 4 MB)
    python benchmarks/steering_speed.py --shapes DIR --device cuda   # those shapes with random weights

`kamal synthesize`'s own code (CausalLM, TeacherScorer, EnsembleScorer, generate) with its defaults: chunks of 8
tokens, 8 candidates for a text's first chunk and 3 for its later ones, the teachers' ensemble as the scorer
(contrast), 32 new tokens at most, 8 prompts a batch. The configurations take turns batch by batch, so a slow
spell of the machine falls on all of them alike. Per configuration: texts per minute, time per text against plain
generation, and where the time went (the LM, the teachers, decoding candidates to text).

--shapes builds every model from its config with random weights: speed depends on shapes, not values, so this is
how the figure is taken on a machine the packaged models cannot reach (a lent GPU). A random LM seldom ends a text
early, so every text runs to the token limit; the teachers' scores are random, which changes which candidate wins
but not what scoring costs. Run it both ways on one machine to see what the random weights change.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_figures import sync  # noqa: E402

from kamalcli.runtime import prepare_environment  # noqa: E402

prepare_environment()

PROMPT = "Write one short news sentence about {label}."
LABELS = (("alpha", "beta", "gamma", "delta", "epsilon"), ("zeta", "eta", "theta", "iota", "kappa"))
# name: (lambda, first chunk's candidates, later chunks' candidates); lambda 0 is plain generation. Every steered
# configuration scores by the teachers' ensemble (synthesize's default, contrast).
CONFIGS = {
    "plain": (0.0, 8, 3),
    "steered (default: x8 then x3)": (3.0, 8, 3),
    "steered, x8 every chunk": (3.0, 8, 8),
}
KEEP = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
        "special_tokens_map.json", "vocab.txt")


def save_shapes(folder: Path) -> None:
    """smollm2-135m's and minilm-l3's configs and tokenizers, without weights, into folder/lm and folder/teacher."""
    from kamalcli.models.bases import resolve_lm_source, resolve_model_source

    for name, source in (("lm", resolve_lm_source("smollm2-135m")), ("teacher", resolve_model_source("minilm-l3"))):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for file in KEEP:
            if (source / file).is_file():
                shutil.copy2(source / file, folder / name / file)
    print(f"shapes saved in {folder}")


def models(shapes: Path | None, device: str):
    """(lm, one scorer per teacher of LABELS) as synthesize builds them; random weights of the shapes in `shapes`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    from kamalcli.models.bases import resolve_lm_source, resolve_model_source
    from kamalcli.models.loading import load_causal_lm, load_classifier, load_tokenizer
    from kamalcli.synth.steering import CausalLM, TeacherScorer

    torch.manual_seed(0)
    if shapes is None:
        lm_folder, teacher_folder = resolve_lm_source("smollm2-135m"), resolve_model_source("minilm-l3")
        lm_model = load_causal_lm(lm_folder)
    else:
        lm_folder, teacher_folder = shapes / "lm", shapes / "teacher"
        lm_model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(lm_folder))).float().eval()
    lm = CausalLM(lm_model.to(device), load_tokenizer(lm_folder), torch.device(device))
    tokenizer = load_tokenizer(teacher_folder)
    scorers = []
    for labels in LABELS:
        if shapes is None:
            classifier = _fresh_head(load_classifier(teacher_folder), len(labels))
        else:
            config = AutoConfig.from_pretrained(str(teacher_folder), num_labels=len(labels))
            classifier = AutoModelForSequenceClassification.from_config(config).eval()
        scorers.append(TeacherScorer(classifier, tokenizer, 64, device))
    return lm, scorers


def _fresh_head(classifier, labels: int):
    import torch

    classifier.classifier = torch.nn.Linear(classifier.classifier.in_features, labels)
    return classifier.eval()


def main() -> None:
    import torch

    from kamalcli.synth.steering import EnsembleScorer, SteeringConfig, Timing, generate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", type=Path, help="a folder from --save-shapes: random weights of those shapes")
    parser.add_argument("--save-shapes", type=Path, metavar="DIR", help="write the shapes folder and stop")
    parser.add_argument("--batches", type=int, default=4, help="batches per configuration (after one warm-up each)")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts a batch (synthesize's default: 8)")
    args = parser.parse_args()
    if args.save_shapes:
        save_shapes(args.save_shapes)
        return

    lm, scorers = models(args.shapes, args.device)
    ensemble = EnsembleScorer(scorers, [list(labels) for labels in LABELS])
    seconds = {name: 0.0 for name in CONFIGS}
    timings = {name: Timing() for name in CONFIGS}
    texts = {name: 0 for name in CONFIGS}
    for batch in range(-1, args.batches):  # batch -1 warms every configuration up and is not counted
        label = LABELS[batch % 2][batch % 5]
        for name, (strength, first, later) in CONFIGS.items():
            config = SteeringConfig(strength, 20, 0.9, 32, "chunk", 8, first, later)
            sync(args.device)
            started = time.perf_counter()
            out, timing = generate(lm, ensemble if strength else None, ensemble.index(label),
                                   [PROMPT.format(label=label)] * args.batch_size, config, seed=100 + batch)
            sync(args.device)
            if batch >= 0:
                seconds[name] += time.perf_counter() - started
                timings[name].add(timing)
                texts[name] += len(out)
    on_cuda = args.device.startswith("cuda")
    device_name = torch.cuda.get_device_name() if on_cuda else f"CPU, {torch.get_num_threads()} threads"
    weights = f"random weights of the shapes in {args.shapes}" if args.shapes else "real weights"
    print(f"\nsmollm2-135m and two minilm-l3 teachers of 5 classes ({weights}) on {args.device} ({device_name}); "
          f"torch {torch.__version__}; {args.batches} batches of {args.batch_size} prompts per configuration, "
          f"32 new tokens at most, chunks of 8\n")
    plain = seconds["plain"] / texts["plain"]
    print("| generation | texts / min | time per text / plain | LM s | teachers s | decoding s | teacher rows | "
          "new tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for name in CONFIGS:
        per_text, t = seconds[name] / texts[name], timings[name]
        print(f"| {name} | {60 / per_text:.1f} | {per_text / plain:.2f} | {t.lm_seconds:.2f} | "
              f"{t.teacher_seconds:.2f} | {t.decode_seconds:.2f} | {t.teacher_rows} | {t.new_tokens} |")


if __name__ == "__main__":
    main()
