"""Earlier phases of one training run (co-finetuning teachers, pre-training a policy).

Each phase trains a module with the one loop, in a folder of its own inside the
run's folder: Ctrl-C checkpoints it like any step, `--resume` continues it, and
once it has finished its weights are kept there, so a resumed run skips it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kamalcli.train import checkpoint

DONE = "done.safetensors"


def started(workdir: Path) -> bool:
    """Whether a run has progress to resume: its own checkpoint or an earlier phase's."""
    return checkpoint.exists(workdir) or any(checkpoint.exists(p) or (p / DONE).is_file()
                                             for p in Path(workdir).glob("phase-*"))


@dataclass
class Phases:
    workdir: Path
    config: object        # the run's TrainConfig; a phase may change lr and epochs
    say: object = print

    def run(self, name: str, model, encoded, objective, *, lr: float | None = None, epochs: int | None = None,
            rows=None) -> bool:
        """Train `model` for this phase, or restore it if the phase finished before. True if it trained now."""
        from kamalcli.train.loop import train

        folder = self.workdir / f"phase-{name}"
        done = folder / DONE
        if done.is_file():
            model.to(self.config.device)  # where train() would have left it
            checkpoint.load_weights(model, done)
            self.say(f"Phase {name} finished before: its weights are restored.")
            return False
        config = replace(self.config, lr=lr or self.config.lr, epochs=epochs or self.config.epochs)
        train(model, encoded, objective, config, folder, rows=rows, resume=checkpoint.exists(folder),
              description=name)
        checkpoint.save_weights(model, done)
        return True
