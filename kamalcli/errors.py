"""The errors kamal reports as one line (never a traceback)."""


class KamalError(Exception):
    """Something the user can fix: bad input, a missing name, a busy workspace."""

    exit_code = 2


class KamalFailure(KamalError):
    """Work that was started and failed for a reason outside the user's input."""

    exit_code = 1
