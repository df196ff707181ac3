"""The CLI's CUDA paths end to end, on tiny random models (no download): every step a user types, with --device.

    python benchmarks/cuda_walk.py [--device cuda] [--out FOLDER]

Builds two tiny teachers and a synthetic pool (tests/tiny.py), then runs kamal as a user would: init,
add-teacher, add-data, probe, amalgamate (muki-hard; dfa with the teachers in the loop), eval, predict,
export --onnx and predict --onnx, each with --device where the command takes it. Prints one line per step
(exit code, seconds) and whether the device's predictions agree with the CPU's: a path check, not a speed
figure (gpu_figures.py measures speed).
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
    tiny.make_classifier(root / "news", ["world", "sports"], seed=1)
    tiny.make_classifier(root / "money", ["business", "scitech"], seed=2)
    tiny.make_encoder(root / "encoder", seed=6)
    tiny.write_jsonl(root / "pool.jsonl", [{"text": r["text"]} for r in tiny.topic_rows(four, 60, seed=12)])
    tiny.write_jsonl(root / "test.jsonl", tiny.topic_rows(four, 20, seed=13))
    ws, device = root / "ws", args.device
    training = ("--student", root / "encoder", "--steps", 40, "--batch-size", 16, "--max-length", 32, "--device", device)
    steps = [
        ("init", ("init", ws)),
        ("add-teacher news", ("add-teacher", root / "news", "--name", "news")),
        ("add-teacher money", ("add-teacher", root / "money", "--name", "money")),
        ("add-data pool", ("add-data", root / "pool.jsonl", "--name", "pool")),
        ("add-data test", ("add-data", root / "test.jsonl", "--name", "test", "--role", "eval")),
        ("probe", ("probe", "--data", "pool", "--device", device)),
        ("amalgamate muki-hard", ("amalgamate", "--method", "muki-hard", "--data", "pool", "--name", "hard",
                                  *training)),
        ("amalgamate dfa (teachers in the loop)", ("amalgamate", "--method", "dfa", "--data", "pool", "--name",
                                                   "dfa", *training)),
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

    def labels(step: str) -> list[str] | None:
        try:
            return [row["label"] for row in json.loads(outputs[step])]
        except (KeyError, ValueError, TypeError):
            return None

    cpu, gpu, onnx = labels("predict on cpu"), labels("predict"), labels("predict --onnx")
    print(f"\npredictions on {device} {'==' if cpu == gpu else '!='} on cpu: {gpu} / {cpu}")
    print(f"ONNX on {device} {'==' if cpu == onnx else '!='} PyTorch on cpu: {onnx}")
    return 1 if failed or cpu != gpu or cpu != onnx else 0


if __name__ == "__main__":
    sys.exit(main())
