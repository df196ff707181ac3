"""Builds kamalcli/resources/demo/ (the data `kamal demo` ships with) from debian-topics.

Run once; its output is committed. Deterministic: rows are picked by sha256 of
the package name, so rerunning gives the same files.

    python benchmarks/make_demo_data.py [--data-dir benchmarks/data/debian-topics]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
from pathlib import Path

from common import DEFAULT_DATA, load_split

LABELS_A = ["games", "graphics", "sound"]
LABELS_B = ["mail", "math", "science"]
PER_LABEL = {"train": 80, "test": 40}


def pick(rows: list[dict], label: str, n: int) -> list[dict]:
    mine = [r for r in rows if r["label"] == label]
    mine.sort(key=lambda r: hashlib.sha256(r["package"].encode()).hexdigest())
    return [{"text": r["text"], "label": r["label"], "package": r["package"]} for r in mine[:n]]


def main() -> None:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    out = here.parent / "kamalcli" / "resources" / "demo"
    out.mkdir(parents=True, exist_ok=True)
    for split, n in PER_LABEL.items():
        rows = load_split(args.data_dir, split)
        picked = [r for label in LABELS_A + LABELS_B for r in pick(rows, label, n)]
        picked.sort(key=lambda r: hashlib.sha256(r["package"].encode()).hexdigest())
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in picked).encode()
        (out / f"{split}.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
        print(f"{split}: {len(picked)} rows")


if __name__ == "__main__":
    main()
