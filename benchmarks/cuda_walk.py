"""The CLI's CUDA paths end to end, on tiny random models (no download): every step a user types, with --device.

    python benchmarks/cuda_walk.py [--device cuda] [--out FOLDER]

Builds a tiny encoder and synthetic topic data (tests/tiny.py), then runs kamal as a user would: init,
add-data, train-teacher (two teachers), probe, amalgamate (muki-hard; dfa with the teachers in the loop), eval, predict,
calibrate, export --onnx and predict --onnx, each with --device where the command takes it. Prints one line
per step (exit code, seconds) and whether the device's predictions (labels, in_scope, prediction sets, scope
scores) agree with the CPU's: a path check, not a speed figure (gpu_figures.py measures speed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import tiny  # noqa: E402

TEXTS = ["the match ended with a late goal", "shares fell after the merger", "the telescope found a comet"]


def kamal(workspace: Path, *args) -> tuple[int, float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kamalcli", "--workspace", str(workspace), *map(str, args)],
                          capture_output=True, text=True)
    return done.returncode, time.perf_counter() - started, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, help="keep the workspace here (default: a temporary folder)")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="kamal-cuda-walk-"))
    root.mkdir(parents=True, exist_ok=True)
    four = ["world", "sports", "business", "scitech"]
    tiny.make_encoder(root / "encoder", seed=6)
    tiny.write_jsonl(root / "train.jsonl", tiny.topic_rows(four, 60, seed=11))
    tiny.write_jsonl(root / "pool.jsonl", [{"text": r["text"]} for r in tiny.topic_rows(four, 60, seed=12)])
    tiny.write_jsonl(root / "test.jsonl", tiny.topic_rows(four, 20, seed=13))
    ws, device = root / "ws", args.device
    teacher_training = ("--base", root / "encoder", "--epochs", 10, "--lr", "3e-3", "--batch-size", 16,
                        "--max-length", 32, "--device", device)
    training = ("--student", root / "encoder", "--epochs", 8, "--lr", "2e-3", "--batch-size", 16, "--max-length", 32,
                "--device", device)
    steps = [
        ("init", ("init", ws)),
        ("add-data train", ("add-data", root / "train.jsonl", "--name", "train", "--role", "eval")),
        ("train-teacher news", ("train-teacher", "train", "--labels", "world,sports", "--name", "news",
                                *teacher_training)),
        ("train-teacher money", ("train-teacher", "train", "--labels", "business,scitech", "--name", "money",
                                 *teacher_training)),
        ("add-data pool", ("add-data", root / "pool.jsonl", "--name", "pool")),
        ("add-data test", ("add-data", root / "test.jsonl", "--name", "test", "--role", "eval")),
        ("probe", ("probe", "--data", "pool", "--device", device)),
        ("amalgamate muki-hard", ("amalgamate", "--method", "muki-hard", "--data", "pool", "--name", "hard",
                                  *training)),
        ("amalgamate dfa (teachers in the loop)", ("amalgamate", "--method", "dfa", "--data", "pool", "--name",
                                                   "dfa", *training)),
        ("calibrate", ("calibrate", "hard", "--data", "test", "--coverage", "0.9", "--device", device)),
        ("eval", ("eval", "hard", "--data", "test", "--device", device)),
        ("predict", ("predict", "hard", *TEXTS, "--device", device, "--json")),
        ("predict on cpu", ("predict", "hard", *TEXTS, "--device", "cpu", "--json")),
        ("export --onnx", ("export", "hard", "--onnx")),
        ("predict --onnx", ("predict", "hard", *TEXTS, "--onnx", "--device", device, "--json")),
    ]
    outputs, failed = {}, 0
    for name, argv in steps:
        code, seconds, output = kamal(ws, *argv) if argv[0] != "init" else kamal(root, *argv)
        outputs[name] = output
        failed += code != 0
        print(f"{'ok ' if code == 0 else 'FAIL'} {name:<40} exit {code}  {seconds:6.1f} s", flush=True)
        if code != 0:
            print("     " + "\n     ".join(output.strip().splitlines()[-6:]))

    def rows(step: str) -> list[dict] | None:
        try:
            return json.loads(outputs[step])
        except (KeyError, ValueError, TypeError):
            return None

    def same(a: list[dict] | None, b: list[dict] | None) -> tuple[bool, float]:
        """Labels, in_scope and sets equal; the largest scope_score difference."""
        if a is None or b is None:
            return False, float("nan")
        keys = ("label", "in_scope", "set")
        equal = all(x.get(k) == y.get(k) for x, y in zip(a, b) for k in keys)
        return equal, max(abs(x["scope_score"] - y["scope_score"]) for x, y in zip(a, b))

    cpu, gpu, onnx = rows("predict on cpu"), rows("predict"), rows("predict --onnx")
    gpu_ok, gpu_diff = same(gpu, cpu)
    onnx_ok, onnx_diff = same(onnx, cpu)
    print(f"\npredict on {device} vs cpu: labels, in_scope and sets {'equal' if gpu_ok else 'DIFFER'}; "
          f"max |scope_score difference| {gpu_diff:.2e}")
    print(f"predict --onnx on {device} vs PyTorch on cpu: labels, in_scope and sets {'equal' if onnx_ok else 'DIFFER'}; "
          f"max |scope_score difference| {onnx_diff:.2e}")
    return 1 if failed or not gpu_ok or not onnx_ok else 0

if __name__ == "__main__":
    sys.exit(main())
