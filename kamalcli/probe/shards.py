"""A probe on several processes: each rank writes its shard of the rows, rank 0 merges them.

Rows are dealt out in the probe's own groups of batches (the same batches a
single process forms), so a K = 1 probe is identical bit for bit to one made by
one process; MC-dropout passes draw their masks from seed + rank (recorded in
meta.json as rank_seeds), so they have the same distribution as one process's.
Rank 0 then registers the merged probe in one transaction, as always.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MERGE_ROWS = 65_536  # rows copied at a time: memory stays flat however many rows there are


def shard_dir(staging: Path, rank: int) -> Path:
    return Path(staging) / f"shard-{rank}"


@dataclass(frozen=True)
class ProbeShard:
    """What every rank needs to compute its shard of one (teacher, dataset) probe."""

    teacher_folder: str
    dataset: object          # the store's Dataset record (its file and hash)
    settings: object         # ProbeSettings
    staging: str
    device: str
    batch_size: int
    mode: str

    def run(self, world, model=None, encoded=None, advance=lambda n: None) -> dict:
        """This rank's shard; then all ranks agree it worked, and rank 0 merges. Returns run_teacher's summary."""
        from kamalcli.probe.mc_dropout import run_teacher
        from kamalcli.runtime import resolve_device

        error, passes = None, {}
        try:
            if model is None:
                model, encoded = self._load()
            passes = run_teacher(model, encoded, self.settings, shard_dir(Path(self.staging), world.rank),
                                 device=resolve_device(self.device), batch_size=self.batch_size, mode=self.mode,
                                 advance=advance, part=(world.rank, world.size))
        except Exception as e:  # every rank must reach agree(), or the others would wait forever
            error = e
        world.agree(error)
        if world.main:
            passes = {**passes, **merge_shards(Path(self.staging), world.size, len(encoded), self.settings.seed)}
        return passes

    def _load(self):
        from kamalcli.models.batching import encode
        from kamalcli.data.text import load_dataset_rows
        from kamalcli.models.loading import load_classifier, load_tokenizer

        texts, _ = load_dataset_rows(self.dataset)
        model = load_classifier(Path(self.teacher_folder))
        return model, encode(load_tokenizer(Path(self.teacher_folder)), texts, self.settings.max_length,
                             config=model.config)


def merge_shards(staging: Path, processes: int, rows: int, seed: int) -> dict:
    """Every shard's arrays into full-size arrays in staging (row order restored); shards removed."""
    first = shard_dir(staging, 0)
    names = sorted(p.name for p in first.glob("*.npy") if p.name != "rows.npy")
    for name in names:
        sample = np.load(first / name, mmap_mode="r")
        full = np.lib.format.open_memmap(staging / name, mode="w+", dtype=sample.dtype,
                                         shape=(rows, *sample.shape[1:]))
        for rank in range(processes):
            folder = shard_dir(staging, rank)
            where = np.load(folder / "rows.npy")
            part = np.load(folder / name, mmap_mode="r")
            for start in range(0, len(where), MERGE_ROWS):
                full[where[start : start + MERGE_ROWS]] = part[start : start + MERGE_ROWS]
        full.flush()
        del full, sample
    for rank in range(processes):
        shutil.rmtree(shard_dir(staging, rank))
    passes = np.load(staging / "mc_passes.npy")
    return {"mc_passes_mean": float(passes.mean()) if rows else 0.0, "processes": processes,
            "rank_seeds": [seed + rank for rank in range(processes)]}
