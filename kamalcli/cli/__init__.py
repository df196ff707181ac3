"""The `kamal` command. Commands parse, call and render; no torch import at module level."""

from __future__ import annotations

import os
import sys

import click

from kamalcli import __version__
from kamalcli.cli.app import App
from kamalcli.distributed import WorkerDone
from kamalcli.errors import KamalError
from kamalcli.runtime import prepare_environment


class KamalGroup(click.Group):
    """Turns every failure into one line on stderr and an exit code (KAMAL_DEBUG=1: traceback)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["kamal.argv"] = list(args)  # `--nproc N` starts the same command again under torchrun
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            _usage_error(ctx, e)

    def invoke(self, ctx: click.Context):
        debug = os.environ.get("KAMAL_DEBUG", "") not in ("", "0")
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            _usage_error(ctx, e)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except WorkerDone as e:  # a non-zero rank of a torchrun job: rank 0 speaks for the job
            ctx.exit(e.exit_code)
        except KamalError as e:
            if debug:
                raise
            click.echo(f"Error: {e}", err=True)
            ctx.exit(e.exit_code)
        except BrokenPipeError:  # the reader went away (`kamal methods | head`): click's main exits 1, quietly
            raise
        except KeyboardInterrupt as e:
            if debug:
                raise
            why = getattr(e, "reason", None)
            click.echo(f"Interrupted{f' ({why})' if why else ''}: nothing half-written was kept.", err=True)
            ctx.exit(130)
        except Exception as e:  # a bug or an environment problem: still one line
            if debug:
                raise
            message = str(e).strip().splitlines()[0] if str(e).strip() else ""
            click.echo(f"Error: {type(e).__name__}: {message} (KAMAL_DEBUG=1 shows the traceback)", err=True)
            ctx.exit(1)

    def list_commands(self, ctx):  # keep the order commands were added (the pipeline's order)
        return list(self.commands)


def _usage_error(ctx: click.Context, error: click.UsageError):
    """One line, like every other error (click's own form is three: usage, hint, error)."""
    command = error.ctx.command_path if error.ctx is not None else ctx.command_path
    click.echo(f"Error: {error.format_message().rstrip('.')} (see `{command} --help`)", err=True)
    ctx.exit(error.exit_code)


@click.group(cls=KamalGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--workspace", "-w", metavar="PATH", envvar="KAMAL_WORKSPACE",
    help="Workspace folder (default: $KAMAL_WORKSPACE, else the nearest parent with kamal.toml).",
)
@click.option("--verbose", "-v", is_flag=True, help="Also print the evidence behind each decision kamal makes.")
@click.version_option(__version__, prog_name="kamal")
@click.pass_context
def cli(ctx: click.Context, workspace: str | None, verbose: bool) -> None:
    """Merge fine-tuned text classifiers with different label sets into one student,
    using only unlabelled text (knowledge amalgamation).

    \b
    Typical session:
      kamal init proj && cd proj
      kamal add-teacher ./news-a   kamal add-teacher ./news-b
      kamal add-data pool.jsonl --name pool
      kamal probe && kamal report
      kamal amalgamate --method muki-hard --name v1
      kamal export v1 --onnx
    """
    prepare_environment()
    ctx.obj = App(workspace_option=workspace, verbose=verbose)


def _register() -> None:
    from kamalcli.cli import (data_cmds, export_cmds, label_cmds, model_cmds, probe_cmds, student_cmds, synth_cmds,
                              teacher_cmds, trust_cmds, workspace_cmds)

    for module in (workspace_cmds, teacher_cmds, label_cmds, data_cmds, synth_cmds, probe_cmds, student_cmds, trust_cmds,
                   export_cmds, model_cmds):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main() -> None:
    cli(prog_name="kamal")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
