"""Training and probe options shared by amalgamate, extend and train-teacher: flags, then kamal.toml, then defaults."""

from __future__ import annotations

import click

from kamalcli.cli.app import App


def train_options(f):
    options = [
        click.option("--epochs", type=int,
                     help="Passes over the data; wins over the default budget of --steps with early stopping."),
        click.option("--steps", type=int,
                     help="Without --epochs: train at most this many steps, stopping early once the held-out "
                          "transfer loss stops improving (default 600)."),
        click.option("--batch-size", type=int, help="Rows per step (default 32)."),
        click.option("--lr", type=float, help="Peak learning rate (default 1e-4)."),
        click.option("--max-length", type=int, help="Tokens per text (default 128)."),
        click.option("--seed", type=int, help="Seed (default: the workspace seed)."),
        click.option("--checkpoint-every", type=int, help="Save a checkpoint every N steps (default 200)."),
        click.option("--embeddings", type=click.Choice(["train", "freeze"]), default=None,
                     help="Update the input word embeddings (default) or keep them frozen: about 1.8x faster "
                          "steps on a CPU for a multilingual base's vocabulary, but slower to learn."),
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
            ctx.exit(distributed.launch(nproc, distributed.without_nproc(ctx.find_root().meta["kamal.argv"])))
        return f(*args, backend=backend, **kwargs)

    return wrapper


reprobe_option = click.option(
    "--reprobe", is_flag=True,
    help="Probe the teachers again with these settings even though cached probes with other settings exist.")


def train_settings(app: App, epochs, steps, batch_size, lr, max_length, seed, checkpoint_every, embeddings=None,
                   default_epochs: int | None = None) -> dict:
    """default_epochs None: the step budget with early stopping unless --epochs (or kamal.toml) says otherwise."""
    from kamalcli.train.embeddings import check_mode
    from kamalcli.train.loop import DEFAULT_EVAL_EVERY, DEFAULT_PATIENCE, DEFAULT_STEPS

    embeddings = app.setting("train", "embeddings", embeddings, "train")
    check_mode(embeddings)  # before any probe or model is loaded
    return {
        # --steps on the command line beats an `epochs` in kamal.toml; --epochs beats both
        "epochs": epochs if epochs is not None or steps is not None else app.setting("train", "epochs", None,
                                                                                      default_epochs),
        "steps": app.setting("train", "steps", steps, DEFAULT_STEPS),
        "eval_every": app.setting("train", "eval_every", default=DEFAULT_EVAL_EVERY),
        "patience": app.setting("train", "patience", default=DEFAULT_PATIENCE),
        "batch_size": app.setting("train", "batch_size", batch_size, 32),
        "lr": float(app.setting("train", "lr", lr, 1e-4)),
        "max_length": app.setting("train", "max_length", max_length, 128),
        "warmup": float(app.setting("train", "warmup", default=0.1)),
        "weight_decay": float(app.setting("train", "weight_decay", default=0.01)),
        "grad_clip": float(app.setting("train", "grad_clip", default=1.0)),
        "seed": app.setting("workspace", "seed", seed, 0),
        "checkpoint_every": app.setting("train", "checkpoint_every", checkpoint_every, 200),
        "embeddings": embeddings,
    }


def mc_exact_option(f):
    return click.option("--mc-exact/--mc-adaptive", default=None,
                        help="Confidences from the exact probe (K full passes) or the adaptive default one.")(f)


def probe_settings(app: App, mc_samples: int | None = None, mc_exact: bool | None = None) -> dict:
    return {
        "mc_samples": app.setting("probe", "mc_samples", mc_samples, 16),
        "mc_exact": bool(app.setting("probe", "mc_exact", mc_exact, False)),
        "dropout": app.setting("probe", "dropout"),
        "max_length": app.setting("probe", "max_length", default=128),
        "layers": "default",
        "seed": app.setting("workspace", "seed", default=0),
    }
