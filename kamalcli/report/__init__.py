"""kamal report --html: the workspace's probes, selection and students as one offline HTML file."""

from __future__ import annotations

from pathlib import Path


def write_html_report(workspace, store, path: Path, *, force: bool = False, student_options=None) -> dict:
    """Check the target (report/target.py), gather, render and write atomically. Returns what was written
    (for the command's line)."""
    from kamalcli.errors import KamalError
    from kamalcli.files import write_text_atomic
    from kamalcli.report.target import check_target

    check_target(workspace, store, path, force)
    text, written = html_report(workspace, store, student_options)
    try:
        write_text_atomic(path, text)
    except OSError as e:
        raise KamalError(f"cannot write {path}: {e.strerror or e}") from None
    return {"path": str(path), **written}


def html_report(workspace, store, student_options=None) -> tuple[str, dict]:
    """The page, and what it holds: its size, teachers, probes and students; student_options: the default
    student's, whose recipe it shows."""
    from kamalcli.report.gather import gather
    from kamalcli.report.html import render

    report = gather(workspace, store, student_options)
    text = render(report)
    return text, {"bytes": len(text.encode("utf-8")), "teachers": len(report.teachers),
                  "probes": len(report.probes), "students": len(report.students)}
