"""Per-row costs on a GPU against this CPU: probe (K = 1, K = 16), the training loop, ONNX on CUDA vs PyTorch.

    python benchmarks/gpu_figures.py                 # CUDA when torch sees a GPU; CPU figures beside it
    python benchmarks/gpu_figures.py --small         # CPU only, small sizes (what the test runs)

No network and no packaged models needed: MiniLM-L6 shapes (6 layers, hidden
384, 12 heads) with random weights, random token ids; speed depends on shapes,
not values. Every figure is rows (sequences) per second of kamal's own code:
the probe's run_teacher (K = 1; K = 16 exact, all 16 passes of every row; K =
16 adaptive, the default, whose pass count depends on the model's outputs, so
with random weights it says little), the one training loop with a muki-hard
objective (amalgamate), and kamal's ONNX export, fp32 and converted to fp16,
run by onnxruntime's CUDA provider (checked with session.get_providers()),
against PyTorch at batch 1 and 32, with onnxruntime's own default (TF32 on)
beside kamal's full-fp32 session. The CPU figures use fewer rows (--cpu-rows)
since a row costs the same whatever their number.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loop_speed import minilm_like  # noqa: E402

from kamalcli.runtime import prepare_environment  # noqa: E402

prepare_environment()

WORDS = ("market shares profit merger bank revenue goal match league coach tennis stadium software physics robot "
         "chip genome telescope vaccine doctor clinic disease nurse therapy painting novel museum theatre poetry "
         "election minister treaty embassy parliament border the a today new report said on in big week").split()


def random_encoded(rows: int, length: int, seed: int = 0):
    from kamalcli.models.batching import Encoded

    rng = np.random.default_rng(seed)
    return Encoded([rng.integers(1000, 30000, size=length) for _ in range(rows)], 0, True)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def probe_rate(device: str, rows: int, length: int, k: int, exact: bool, batch_size: int) -> float:
    from kamalcli.probe.arrays import ProbeSettings
    from kamalcli.probe.mc_dropout import pick_mode, run_teacher

    model = minilm_like(5, seed=1)
    settings = ProbeSettings(mc_samples=k, max_length=length, layers=(3, 6), mc_exact=exact)
    encoded = random_encoded(rows, length)
    with tempfile.TemporaryDirectory() as tmp:
        run_teacher(model, random_encoded(batch_size, length, seed=9), settings, Path(tmp) / "warm", device=device,
                    batch_size=batch_size, mode=pick_mode("auto", device))
        sync(device)
        started = time.perf_counter()
        run_teacher(model, encoded, settings, Path(tmp) / "probe", device=device, batch_size=batch_size,
                    mode=pick_mode("auto", device))
        sync(device)
        return rows / (time.perf_counter() - started)


def loop_rate(device: str, rows: int, length: int, batch_size: int) -> float:
    from kamalcli.labels import LabelSpace
    from kamalcli.methods import get_method
    from kamalcli.methods.base import TeacherOutputs
    from kamalcli.train.loop import TrainConfig, train

    rng = np.random.default_rng(0)
    space = LabelSpace.from_teachers([("t0", [f"a{i}" for i in range(5)]), ("t1", [f"b{i}" for i in range(5)])])
    outputs = TeacherOutputs(space, ("t0", "t1"), tuple(rng.standard_normal((rows, 5)).astype(np.float32)
                                                        for _ in range(2)), {"mc-dropout": rng.random((rows, 2))})
    method = get_method("muki-hard")
    objective = method.build(outputs, method.parse([]))
    config = TrainConfig(epochs=1, batch_size=batch_size, lr=1e-4, max_length=length, device=device,
                         checkpoint_every=10**9)
    encoded = random_encoded(rows, length)
    with tempfile.TemporaryDirectory() as tmp:
        train(minilm_like(len(space), seed=3), encoded, objective, config, Path(tmp) / "warm",
              rows=np.arange(min(rows, 2 * batch_size)), description="warm-up")
        student = minilm_like(len(space), seed=3)
        sync(device)
        started = time.perf_counter()
        train(student, encoded, objective, config, Path(tmp) / "run", description="amalgamate (muki-hard)")
        sync(device)
        return rows / (time.perf_counter() - started)


def classifier_folder(folder: Path) -> Path:
    """A MiniLM-L6-shaped classifier with random weights and a small word-level tokenizer (no download)."""
    from transformers import BertTokenizerFast

    model = minilm_like(10, seed=4)
    model.save_pretrained(str(folder), safe_serialization=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(WORDS))]
    BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True).save_pretrained(str(folder))
    return folder


def texts(n: int, words: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=words)) for _ in range(n)]


def onnx_rows(device: str, runs: int, length: int) -> tuple[list[list[str]], list[str]]:
    """(table rows, notes): PyTorch and onnxruntime fp32 / fp16 at batch 1 and 32 (`length` tokens), on device."""
    import torch

    from kamalcli.errors import KamalError
    from kamalcli.export.onnx import export_onnx
    from kamalcli.export.runtime import create_session, import_ort
    from kamalcli.models.loading import load_classifier

    ort = import_ort()
    notes = [f"onnxruntime {ort.__version__}; available providers: {', '.join(ort.get_available_providers())}"]
    work = Path(tempfile.mkdtemp(prefix="kamal-gpu-figures-"))
    student = classifier_folder(work / "student")
    fp32 = export_onnx(student, work / "onnx", parity_texts=texts(16, 12)).model_path
    fp16 = work / "model-fp16.onnx"
    try:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        onnx.save(convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), str(fp16))
    except Exception as e:  # noqa: BLE001 - a figure we cannot take is said, not fatal
        notes.append(f"fp16 conversion failed: {type(e).__name__}: {e}")
        fp16 = None
    ort_device = "cuda" if device.startswith("cuda") else "cpu"
    sessions = {}
    for name, path in (("onnxruntime fp32", fp32), ("onnxruntime fp16", fp16)):
        if path is None:
            continue
        try:
            session = create_session(path, ort_device)
            sessions[f"{name} ({', '.join(session.get_providers())})"] = session
        except KamalError as e:
            notes.append(f"{name} on {ort_device}: NOT MEASURED: {e}")
        except Exception as e:  # noqa: BLE001
            notes.append(f"{name} on {ort_device}: NOT MEASURED: {type(e).__name__}: {str(e).splitlines()[0]}")
    if ort_device == "cuda" and not any("CUDAExecutionProvider" in name for name in sessions):
        notes.append("CUDAExecutionProvider is ABSENT or did not load: no ONNX figure on CUDA "
                     "(pip install onnxruntime-gpu and the CUDA and cuDNN it was built for)")
    elif ort_device == "cuda":
        # kamal's sessions run fp32 matrix products in full fp32 (TF32 moved scope scores by 0.2 on an H100):
        # onnxruntime's own default, beside it, is what that costs.
        sessions["onnxruntime fp32, TF32 on (onnxruntime's default, not kamal's)"] = ort.InferenceSession(
            str(fp32), providers=[("CUDAExecutionProvider", {"use_tf32": 1}), "CPUExecutionProvider"])
    model = load_classifier(student).to(device)
    half = load_classifier(student).to(device).half() if device.startswith("cuda") else None
    engines = {"PyTorch fp32": model, **({"PyTorch fp16": half} if half is not None else {}), **sessions}
    rows = []
    rng = np.random.default_rng(0)
    for batch in (1, 32):
        ids = rng.integers(5, 5 + len(set(WORDS)), size=(batch, length)).astype(np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        times = {}
        for name, engine in engines.items():
            if isinstance(engine, torch.nn.Module):
                tensors = {k: torch.from_numpy(v).to(device) for k, v in feed.items()}

                def call(engine=engine, tensors=tensors):
                    with torch.inference_mode():
                        engine(**tensors)
                    sync(device)
            else:
                inputs = {i.name for i in engine.get_inputs()}

                def call(engine=engine, inputs=inputs):
                    engine.run(["logits"], {k: v for k, v in feed.items() if k in inputs})
            try:
                for _ in range(5):
                    call()
            except Exception as e:  # noqa: BLE001 - e.g. fp16 kernels a provider lacks: said, not fatal
                notes.append(f"{name} at batch {batch}: NOT MEASURED: {type(e).__name__}: {str(e).splitlines()[0]}")
                continue
            samples = []
            for _ in range(runs):
                started = time.perf_counter()
                call()
                samples.append(time.perf_counter() - started)
            times[name] = statistics.median(samples)
        base = times["PyTorch fp32"]
        rows += [[f"batch {batch} x {length}", name, f"{1e3 * t:.2f}", f"{batch / t:.0f}", f"{base / t:.2f}x"]
                 for name, t in times.items()]
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return rows, notes


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows", type=int, default=8192, help="rows on the GPU")
    parser.add_argument("--cpu-rows", type=int, default=256, help="rows on the CPU (a row costs the same)")
    parser.add_argument("--length", type=int, default=64, help="tokens per row (probe and training)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--onnx-runs", type=int, default=50)
    parser.add_argument("--onnx-length", type=int, default=128, help="tokens per row for the ONNX figures")
    parser.add_argument("--small", action="store_true", help="CPU only, tiny sizes: checks that everything runs")
    args = parser.parse_args()
    if args.small:
        args.device, args.cpu_rows, args.length, args.onnx_runs, args.onnx_length = "cpu", 32, 16, 2, 16

    devices = [args.device] if args.device == "cpu" else [args.device, "cpu"]
    figures = {}
    for device in devices:
        rows = args.cpu_rows if device == "cpu" else args.rows
        print(f"[{device}] probe and training loop, {rows} rows x {args.length} tokens ...", file=sys.stderr,
              flush=True)
        figures[device] = {
            "probe K=1": probe_rate(device, rows, args.length, 1, False, args.batch_size),
            "probe K=16 exact": probe_rate(device, rows, args.length, 16, True, args.batch_size),
            "probe K=16 adaptive (default; random weights)": probe_rate(device, rows, args.length, 16, False,
                                                                         args.batch_size),
            "amalgamate (training loop, muki-hard)": loop_rate(device, rows, args.length, args.batch_size),
        }
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "-"
    print(f"\nMiniLM-L6 shapes, random weights, {args.length} tokens a row, batch {args.batch_size}; "
          f"GPU: {name}; CPU: {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)\n")
    gpu = args.device if args.device != "cpu" else None
    headers = ["what", *(f"rows/s on {d}" for d in devices)] + (["GPU / CPU"] if gpu else [])
    body = []
    for what in figures[devices[0]]:
        row = [what, *(f"{figures[d][what]:.1f}" for d in devices)]
        if gpu:
            row.append(f"{figures[gpu][what] / figures['cpu'][what]:.1f}x")
        body.append(row)
    print(table(headers, body))
    per_row = {what: 1 / value for what, value in figures[devices[0]].items()}
    print(f"\nPer-row cost on {devices[0]} (ms): " + "; ".join(f"{w} {1e3 * c:.3f}" for w, c in per_row.items()))

    print(f"\nONNX vs PyTorch on {args.device} (median of {args.onnx_runs} calls, host arrays in and out):\n")
    rows, notes = onnx_rows(args.device, args.onnx_runs, args.onnx_length)
    print(table(["shape", "engine", "ms per call", "rows/s", "x PyTorch fp32"], rows))
    for note in notes:
        print(f"  note: {note}")


if __name__ == "__main__":
    main()
