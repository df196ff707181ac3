"""Training and probe options shared by amalgamate, extend and train-teacher: flags, then kamal.toml, then defaults."""

from __future__ import annotations

from typing import Callable

import click

from kamalcli.cli.app import App
from kamalcli.settings import TRAIN, shown


class LazyHelpOption(click.Option):
    """An option whose help is written when it is shown: a list read from a registry (the methods, say)
    that `kamal --help` does not import."""

    def __init__(self, *args, help_text: Callable[[], str], **kwargs):
        super().__init__(*args, **kwargs)
        self.help_text = help_text

    def get_help_record(self, ctx: click.Context):
        if self.help is None:
            self.help = self.help_text()
        return super().get_help_record(ctx)


def verbose_option(command):
    """--verbose / -v on a command as on `kamal` itself: the evidence behind each decision kamal makes."""
    def turn_on(ctx: click.Context, param, value: bool) -> None:
        if value:
            ctx.ensure_object(App).verbose = True

    return click.option("--verbose", "-v", is_flag=True, expose_value=False, callback=turn_on,
                        help="Also print the evidence behind each decision kamal makes.")(command)


def trained_methods() -> list[str]:
    """The methods that train a student (the baselines ensemble and teacher do not), from the registry."""
    from kamalcli.methods import REGISTRY

    return [m.name for m in REGISTRY.values() if m.trains]


def train_options(f):
    options = [
        click.option("--epochs", type=int,
                     help="Passes over the data; wins over the default budget of --steps with early stopping."),
        click.option("--steps", type=int,
                     help="Without --epochs: train at most this many steps, stopping early once the held-out "
                          f"transfer loss stops improving (default {shown(TRAIN.steps)})."),
        click.option("--batch-size", type=int, help=f"Rows per step (default {shown(TRAIN.batch_size)})."),
        click.option("--lr", type=float, help=f"Peak learning rate (default {shown(TRAIN.lr)})."),
        click.option("--max-length", type=int, help=f"Tokens per text (default {shown(TRAIN.max_length)})."),
        click.option("--seed", type=int, help="Seed (default: the workspace seed)."),
        click.option("--checkpoint-every", type=int,
                     help=f"Save a checkpoint every N steps (default {shown(TRAIN.checkpoint_every)})."),
        click.option("--embeddings", type=click.Choice(["train", "freeze"]), default=None,
                     help="Update the input word embeddings (default) or keep them frozen: about 1.8x faster "
                          "steps on a CPU for a multilingual base's vocabulary, but slower to learn."),
        click.option("--fit", type=click.Choice(["all", "head", "head-then-all"]), default=None,
                     help="Fine-tune the whole model (default), train only its head on the frozen encoder's cached "
                          "states (seconds, not minutes), or the head first and then everything."),
        click.option("--device", help="cpu, cuda or auto."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def distributed_options(f):
    """--nproc N (kamal starts torchrun itself) and --backend; the command gets `backend`."""
    import functools

    @click.option("--nproc", type=int, metavar="N",
                  help="Run on N processes of this machine (kamal starts torchrun; one GPU each on CUDA).")
    @click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default=None,
                  help="How the processes talk (default auto: nccl on CUDA, gloo on CPU).")
    @functools.wraps(f)
    def wrapper(*args, nproc, backend, **kwargs):
        from kamalcli import distributed

        distributed.check_nproc(nproc)
        if nproc is not None and nproc > 1:
            ctx = click.get_current_context()
            device = kwargs.get("device") or ctx.find_object(App).device(None)
            from kamalcli.runtime import resolve_device

            distributed.resolve_backend(backend, resolve_device(device))  # refused here, before any process starts
            code = distributed.launch(nproc, distributed.without_nproc(ctx.find_root().meta["kamal.argv"]))
            if code != 0:  # a rank killed or crashed leaves its run 'running': say now that it was cut off
                with ctx.find_object(App).reader() as store:
                    store.mark_stale_runs()
            ctx.exit(code)
        return f(*args, backend=backend, **kwargs)

    return wrapper


reprobe_option = click.option(
    "--reprobe", is_flag=True,
    help="Probe the teachers again with these settings even though cached probes with other settings exist.")


def mc_exact_option(f):
    return click.option("--mc-exact/--mc-adaptive", default=None,
                        help="Confidences from the exact probe (K full passes) or the adaptive default one.")(f)
