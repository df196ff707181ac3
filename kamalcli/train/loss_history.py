"""A training run's loss per step, written beside its checkpoint as it happens.

The training loop reports each step's loss to a callback (`on_loss`); this file
is that callback. Lines go to the run's checkpoint folder at once, so a run
that is interrupted and resumed keeps the steps from before the interruption.
A resumed run repeats the steps after its last checkpoint bit for bit; for a
step written twice the later line counts.
"""

from __future__ import annotations

from pathlib import Path

FILE_NAME = "loss_history.tsv"


class LossHistory:
    def __init__(self, workdir: Path):
        self.path = Path(workdir) / FILE_NAME
        self._file = None

    def record(self, step: int, loss: float) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8", buffering=1)
        self._file.write(f"{step}\t{loss!r}\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def steps(self) -> list[tuple[int, float]]:
        """(step, loss) in step order, the last value written for each step."""
        self.close()
        by_step: dict[int, float] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                step, _, loss = line.partition("\t")
                try:
                    by_step[int(step)] = float(loss)
                except ValueError:  # a line cut short by a kill
                    continue
        return sorted(by_step.items())
