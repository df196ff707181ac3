"""One job on several processes (torchrun, or `--nproc N`): who this process is, and how ranks agree.

The engine is torchrun (torch.distributed.run) with DistributedDataParallel:
it ships with torch, so nothing new is installed, and it reads the same
environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) that
`accelerate launch` and cluster schedulers set up.

Rank 0 drives the job. It alone holds the workspace's write lock (for the
whole job), decides what to compute, and writes the database and every
checkpoint. The other ranks never write the database and never take the
lock: they wait in `serve()` for jobs that rank 0 broadcasts (a probe shard,
a training run), run them on the same workspace files, and leave when rank 0
says so. So no rank ever decides from a database that another rank is
changing at the same moment.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Protocol

from kamalcli.errors import KamalError, KamalFailure, StopRequested, first_line

BACKENDS = ("auto", "gloo", "nccl")


class RankLost(KeyboardInterrupt):
    """A collective failed because another process of the job is gone: the run stops as interrupted."""

    reason = "a process of the job was lost"


class RankFailed(KamalFailure):
    """A job step failed on some rank; every rank raises this, so all stay in step."""


class WorkerDone(Exception):
    """A non-zero rank finished serving rank 0; the command exits with this code, silently."""

    def __init__(self, exit_code: int = 0):
        super().__init__(exit_code)
        self.exit_code = exit_code


class Job(Protocol):
    """Work rank 0 broadcasts to the other ranks (picklable); rank 0 does its own part itself."""

    def run(self, world: "World") -> None: ...


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Several processes, and they are connected (App.job connected them)."""
        if self.size < 2:
            return False
        import torch.distributed as dist

        return dist.is_available() and dist.is_initialized()

    def start(self, backend: str) -> None:
        """Join the process group (rendezvous through torchrun's environment)."""
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend=backend, rank=self.rank, world_size=self.size)

    # -- collectives: a failure means a lost rank ------------------------------
    def broadcast(self, obj=None):
        """Rank 0's object, on every rank."""
        import torch.distributed as dist

        box = [obj]
        with lost_rank_guard():
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather(self, obj) -> list:
        import torch.distributed as dist

        out = [None] * self.size
        with lost_rank_guard():
            dist.all_gather_object(out, obj)
        return out

    def all_sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks of a few numbers (one small all-reduce)."""
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64)
        if dist.get_backend() == "nccl":
            tensor = tensor.to(f"cuda:{self.local_rank}")
        with lost_rank_guard():
            dist.all_reduce(tensor)
        return tensor.cpu().tolist()

    def agree(self, error: BaseException | None) -> None:
        """After work every rank did: raise RankFailed on all ranks if any rank failed."""
        said = self.all_gather(None if error is None else first_line(error, 300))
        failed = [(rank, message) for rank, message in enumerate(said) if message is not None]
        if failed:
            rank, message = failed[0]
            raise RankFailed(f"process {rank} of {self.size}: {message}")

    def dispatch(self, job: Job) -> None:
        """Rank 0: start a job on the other ranks."""
        assert self.main
        self.broadcast(job)


SINGLE = World()


_PEER_GONE = re.compile(r"gloo|nccl|connection|peer|socket|broken pipe|timed out", re.IGNORECASE)


class lost_rank_guard:
    """Turns the error a collective raises when a peer is gone into RankLost (not, say, an out-of-memory)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if kind is None or not issubclass(kind, RuntimeError):
            return False
        import torch

        if isinstance(error, torch.OutOfMemoryError):
            return False
        if isinstance(error, torch.distributed.DistError) or _PEER_GONE.search(str(error)):
            raise RankLost(first_line(error)) from error
        return False


def current() -> World:
    """This process, from the environment torchrun sets (one process without it)."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size < 2:
            return SINGLE
        return World(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))
    except (KeyError, ValueError):
        raise KamalError("WORLD_SIZE is set but RANK is missing or not a number: start kamal with torchrun") from None


def resolve_backend(backend: str | None, device: str) -> str:
    """gloo on CPU, NCCL on CUDA; NCCL without a GPU is refused (exit 2)."""
    backend = (backend or "auto").lower()
    if backend not in BACKENDS:
        raise KamalError(f"--backend {backend!r}: use auto, gloo or nccl")
    if backend == "gloo":
        return backend
    import torch

    gpu = torch.cuda.is_available() and device != "cpu"
    if backend == "nccl" and not gpu:
        raise KamalError("--backend nccl needs CUDA GPUs and torch sees none (or --device cpu); "
                         "use --backend gloo, the default on CPU")
    return "nccl" if gpu else "gloo"


def check_nproc(nproc: int | None) -> None:
    if nproc is None:
        return
    if nproc < 1:
        raise KamalError(f"--nproc must be at least 1 (got {nproc})")
    if current().size > 1:
        raise KamalError("--nproc starts the processes itself; under torchrun leave it out")


def serve(world: World) -> None:
    """A non-zero rank: run the jobs rank 0 sends until it sends None."""
    while True:
        job = world.broadcast(None)
        if job is None:
            return
        try:
            job.run(world)
        except (RankFailed, StopRequested):
            continue  # every rank saw it; rank 0 reports it and decides what follows


def stop_workers(world: World) -> None:
    """Rank 0, at the end of the command however it ends: release the other ranks."""
    try:
        world.broadcast(None)
    except RankLost:
        pass  # they are gone already
    leave()


def leave() -> None:
    """Leave the process group (every rank, at the end of its command)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def launch(nproc: int, argv: list[str]) -> int:
    """`kamal ... --nproc N`: run the same command under torchrun on this machine; its exit code.

    torchrun's own launcher runs in this process (no second Python start-up);
    Ctrl-C reaches it, and it passes SIGINT to the workers, which stop at a
    step boundary together and checkpoint.
    """
    import logging
    import tempfile

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    # torchrun sets 1 thread per process (and warns) unless told; share this machine's cores instead
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)  # each rank says its own error
    # torchrun's per-worker log folders would otherwise stay behind in /tmp, one torchelastic_* per job
    logs = tempfile.TemporaryDirectory(prefix="kamal-torchrun-")
    args = get_args_parser().parse_args(
        ["--standalone", f"--nproc-per-node={nproc}", f"--log-dir={logs.name}", "--module", "kamalcli", *argv])
    try:
        run(args)
    except ChildFailedError as e:
        _, failure = e.get_first_failure()
        if failure.exitcode < 0:
            print(f"Error: process {failure.local_rank} of the job died (signal {-failure.exitcode})",
                  file=sys.stderr)
            return 1
        return failure.exitcode
    except SignalException:
        return 130
    finally:
        logs.cleanup()
    return 0


def without_nproc(argv: list[str]) -> list[str]:
    """The command line minus `--nproc N` (the launched processes must not launch again)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            out.append(arg)
    return out
