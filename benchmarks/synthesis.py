"""Data-free amalgamation figures: steered generation (speed, faithfulness) and students on generated text.

synthesis-speed: token steering (the paper's) against chunk steering (kamal's) and plain generation,
side by side in one run, with smollm2-135m and the two-halves teachers: texts per minute at a stated
length and m, the share of time in the LM and in the teacher, the steering teacher's mean p(class),
and the share a judge (a classifier fine-tuned on the real labels of all ten topics) assigns to the
class a text was steered to.

data-free: `kamal synthesize` for both teachers, then students trained on the generated text beside
the same methods on the real transfer text, and the ensemble.
"""

from __future__ import annotations

import time

from common import Bench, markdown, pct, summarize, write_results
from scenarios import two_teacher_workspace

LENGTH = 32
# (row label, strength lambda, mode, top-m, chunk tokens, chunk candidates)
CONFIGS = [
    ("plain (lambda 0)", 0.0, "token", 20, 8, 8),
    ("token, m 20", 2.0, "token", 20, 8, 8),
    ("chunk, 8 x 8 tokens, m 20", 2.0, "chunk", 20, 8, 8),
]
PROMPT = "Write a one-sentence description of a Debian software package about {label}."


def _judge(bench: Bench):
    """The supervised classifier over all ten topics (the benchmarks' upper bound), as a judge."""
    from kamalcli.modeling import load_classifier, load_tokenizer

    metrics = bench.supervised(1)
    ws = bench.workspace("supervised")
    [teacher] = [t for t in ws.json("teachers") if t["name"] == "supervised-s1"]
    model, tokenizer = load_classifier(teacher["path"]), load_tokenizer(teacher["path"])
    return model, tokenizer, teacher["labels"], metrics["accuracy"]


def _judge_labels(judge, texts: list[str]) -> list[str]:
    import torch

    model, tokenizer, labels, _ = judge
    with torch.inference_mode():
        encoded = tokenizer(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
        return [labels[i] for i in model(**encoded).logits.argmax(-1).tolist()]


def synthesis_speed(bench: Bench, classes_per_teacher: int = 2, batch: int = 4) -> None:
    from types import SimpleNamespace

    import numpy as np

    from kamalcli.assets import resolve_lm_source
    from kamalcli.steering import SteeringConfig, generate
    from kamalcli.synthesis import load_models

    ws = two_teacher_workspace(bench)
    teachers = [SimpleNamespace(**t) for t in ws.json("teachers") if t["name"] in ("half-a", "half-b")]
    judge = _judge(bench)
    lm, scorers = load_models(resolve_lm_source("smollm2-135m"), teachers, 64, "cpu")
    rows, payload = [], {}
    for label_row, strength, mode, m, chunk, candidates in CONFIGS:
        config = SteeringConfig(strength, m, 0.9, LENGTH, mode, chunk, candidates)
        texts, wanted, steering_p, seconds, lm_s, teacher_s, tokens = [], [], [], 0.0, 0.0, 0.0, 0
        for teacher in teachers:
            for class_index, label in enumerate(teacher.labels[:classes_per_teacher]):
                bench.say(f"{label_row}: {teacher.name} / {label}")
                started = time.perf_counter()
                out, timing = generate(lm, scorers[teacher.name], class_index, [PROMPT.format(label=label)] * batch,
                                       config, seed=class_index)
                seconds += time.perf_counter() - started
                lm_s, teacher_s, tokens = lm_s + timing.lm_seconds, teacher_s + timing.teacher_seconds, tokens + timing.new_tokens
                texts += out
                wanted += [label] * len(out)
                steering_p += np.exp(scorers[teacher.name].log_probs(out)[:, class_index].numpy()).tolist()
        judged = _judge_labels(judge, texts)
        result = {
            "texts": len(texts), "seconds": seconds, "texts_per_minute": 60 * len(texts) / seconds,
            "new_tokens": tokens, "lm_share": lm_s / seconds, "teacher_share": teacher_s / seconds,
            "steering_p": float(np.mean(steering_p)),
            "judge_agrees": float(np.mean([a == b for a, b in zip(judged, wanted)])),
            "examples": texts[:: batch][:4],
        }
        payload[label_row] = result
        rows.append([label_row, f"{result['texts_per_minute']:.1f}", f"{100 * result['lm_share']:.0f}",
                     f"{100 * result['teacher_share']:.0f}", f"{result['steering_p']:.3f}",
                     f"{100 * result['judge_agrees']:.1f}"])
    table = markdown(["generation", "texts / min", "LM time %", "teacher time %", "steering teacher p(class)",
                      "judge agrees %"], rows)
    table += (f"\n\nsmollm2-135m, {LENGTH} new tokens at most, top-p 0.9, lambda as stated in each row's settings; "
              f"{classes_per_teacher} classes of each of the two teachers (minilm-l3, five topics each), {batch} "
              f"texts per class generated together; 2-core CPU shared with other jobs. Judge: the same base "
              f"fine-tuned on the labelled train split of all ten topics ({100 * judge[3]:.1f}% on the test split).")
    write_results(bench, {"configs": payload, "length": LENGTH, "prompt": PROMPT, "judge_accuracy": judge[3]}, table)


def _synthesized(bench: Bench, ws, name: str, per_class: int, strength: float, mode: str) -> None:
    if any(d["name"] == name for d in ws.json("data")):
        return
    bench.say(f"synthesize {name}: {per_class} per class, lambda {strength}, {mode} steering")
    ws("synthesize", "--name", name, "--per-class", per_class, "--strength", strength, "--steer", mode,
       "--max-new-tokens", LENGTH, "--prompt", PROMPT, "--teacher", "half-a", "--teacher", "half-b", quiet=True)


DATA_FREE_METHODS = [("muki-hard", ()), ("vanilla-kd", ()), ("stratanet", ())]


def data_free(bench: Bench, per_class: int = 20) -> None:
    ws = two_teacher_workspace(bench)
    teachers = ["half-a", "half-b"]
    _synthesized(bench, ws, "synth", per_class, 2.0, "chunk")
    ws("probe", "--data", "synth", "--mc-samples", str(bench.profile.mc_samples),
       "--max-length", str(bench.profile.max_length), quiet=True)
    rows, payload = [], {}
    ensemble = bench.baseline(ws, "ensemble")
    rows.append(["ensemble (no training)", "-", f"{100 * ensemble['accuracy']:.1f}"])
    payload["ensemble"] = ensemble["accuracy"]
    for method, options in DATA_FREE_METHODS:
        for data in ("synth", "transfer"):
            results = [bench.student(ws, f"df-{method}-{data}", method, teachers, seed, options, data=data)
                       for seed in bench.seeds]
            acc = summarize([r["accuracy"] for r in results])
            payload[f"{method} on {data}"] = {"accuracy": acc, "train_seconds": [r["train_seconds"] for r in results]}
            rows.append([method, "generated" if data == "synth" else "real transfer text", pct(acc)])
    synth = next(d for d in ws.json("data") if d["name"] == "synth")
    table = markdown(["method", "trained on", "accuracy %"], rows)
    table += (f"\n\nGenerated: {synth['rows']} texts ({per_class} per class, smollm2-135m, chunk steering, "
              f"lambda 2, {LENGTH} tokens); real transfer text: {bench.profile.transfer_rows} rows of the train "
              f"split without labels. Test: {bench.profile.test_rows} rows of the test split, ten topics.")
    write_results(bench, {"rows": payload, "synth": synth["provenance"]}, table)


SCENARIOS = {"synthesis-speed": synthesis_speed, "data-free": data_free}
