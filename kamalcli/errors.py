"""The errors kamal reports as one line (never a traceback)."""


class KamalError(Exception):
    """Something the user can fix: bad input, a missing name, a busy workspace."""

    exit_code = 2


class KamalFailure(KamalError):
    """Work that was started and failed for a reason outside the user's input."""

    exit_code = 1


def first_line(error: BaseException, limit: int | None = 200) -> str:
    """The first line of an error's message (cut at limit), or its type's name when it has none."""
    lines = str(error).strip().splitlines()
    return lines[0][:limit] if lines else type(error).__name__


class StopRequested(KeyboardInterrupt):
    """Ctrl-C arrived; the training loop saved a checkpoint at a step boundary."""
