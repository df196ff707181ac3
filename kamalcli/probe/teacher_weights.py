"""Whether a teacher's weights on disk are still those its cached outputs came from.

A teacher fine-tuned again into the folder it was added from keeps its name and
path, but every probe cached from its old weights is stale. The size and mtime
of each weight file are recorded when it is added; only when they differ are the
files hashed again. probe and amalgamate, before they read the cache, record the
new fingerprint and forget the stale probes; `kamal teachers` only says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.files import remove_artifacts
from kamalcli.models.folder import check_registered_teacher, weight_files, weights_fingerprint


def weights_stat(folder) -> tuple[tuple[str, int, int], ...]:
    """(file name, size, mtime in ns) of each weight file in the folder."""
    return tuple((f.name, s.st_size, s.st_mtime_ns) for f in weight_files(Path(folder)) for s in [f.stat()])


@dataclass(frozen=True)
class OnDisk:
    fingerprint: str
    stat: tuple


def on_disk(teacher) -> OnDisk | None:
    """The teacher's weights now, when their sizes or times differ from those recorded (or none were);
    None when they match, or when the folder holds no weights (a probe that needs them says so)."""
    folder = Path(teacher.path)
    if not folder.is_dir() or not weight_files(folder):
        return None
    stat = weights_stat(folder)
    if stat == teacher.weights_stat:
        return None
    return OnDisk(weights_fingerprint(folder), stat)


def changed_line(teacher, fingerprint: str) -> str:
    return (f"teacher {teacher.name} changed on disk since it was added "
            f"(fingerprint {teacher.fingerprint[:12]} -> {fingerprint[:12]})")


def changed_on_disk(teachers) -> dict[int, str]:
    """For a reader: teacher id -> the fingerprint of its weights now, for each teacher whose weights are no
    longer those recorded. A teacher added by an older kamal (nothing recorded to compare) is left to the
    next probe or amalgamate: here it would be hashed at every listing."""
    changed = {}
    for teacher in teachers:
        now = on_disk(teacher) if teacher.weights_stat is not None else None
        if now is not None and now.fingerprint != teacher.fingerprint:
            changed[teacher.id] = now.fingerprint
    return changed


def stale_probe_lines(teachers) -> list[str]:
    """For a reader that shows cached probes and cannot record anything (report, labels): one line per teacher
    whose weights changed on disk since its probes were made."""
    changed = changed_on_disk(teachers)
    return [f"{changed_line(t, changed[t.id])}: its probes are stale until kamal probe runs again"
            for t in teachers if t.id in changed]


def refresh_teachers(workspace, store, teachers, say) -> list:
    """For a writer, before it reads any cached output: the teachers as recorded once their weights on disk
    are checked. A changed teacher gets its new fingerprint, and its cached probes are forgotten; a teacher
    kamal cannot read (a multi-label one) is refused first."""
    for teacher in teachers:
        check_registered_teacher(teacher)
    return [_refreshed(workspace, store, teacher, say) for teacher in teachers]


def _refreshed(workspace, store, teacher, say):
    now = on_disk(teacher)
    if now is None:
        return teacher
    if now.fingerprint == teacher.fingerprint:  # touched, or added by an older kamal: the same bytes
        store.record_teacher_weights(teacher.id, now.stat)
        return store.teacher_by_id(teacher.id)
    twin = store.find_teacher(fingerprint=now.fingerprint)
    if twin is not None and twin.id != teacher.id:
        raise KamalError(f"{changed_line(teacher, now.fingerprint)} and its weights are now those of teacher "
                         f"{twin.name}: put its own weights back, or remove one of them (kamal remove-teacher NAME)")
    store.claim("teacher", teacher.name, exclusive=True)  # no other command is reading its probes
    current = store.teacher_by_id(teacher.id)
    if current.fingerprint == now.fingerprint:  # another command recorded it meanwhile
        return current
    remove_artifacts(workspace, store.replace_teacher_weights(teacher.id, now.fingerprint, now.stat))
    say(f"{changed_line(teacher, now.fingerprint)}: its cached probes are stale and will be recomputed")
    return store.teacher_by_id(teacher.id)
