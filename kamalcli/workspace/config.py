"""kamal.toml: rendered from the settings dataclasses (kamalcli/settings.py), read, type-checked and edited."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
import typing
from importlib import resources
from pathlib import Path
from typing import Any

from kamalcli.errors import KamalError
from kamalcli.files import write_text_atomic
from kamalcli.settings import HEADER, SECTIONS, default as settings_default, shown

CONFIG_NAME = "kamal.toml"
SETTINGS_DEFAULT: Any = object()  # as a default: the setting's own, from kamalcli/settings.py
_COMMENT_COLUMN = 22  # a comment on a setting's line starts after this column


def _value_type(annotation: Any) -> type:
    """int for `int`, float for `float | None`: the type a value written in kamal.toml must have."""
    types = [t for t in typing.get_args(annotation) if t is not type(None)]
    return types[0] if types else annotation


# The type every kamal.toml setting must have (float settings take integers too).
SETTING_TYPES: dict[tuple[str, str], type] = {
    (section, name): _value_type(annotation)
    for section, cls in SECTIONS.items()
    for name, annotation in typing.get_type_hints(cls).items()
}
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def template_text(name: str) -> str:
    return resources.files("kamalcli.templates").joinpath(name).read_text(encoding="utf-8")


def toml_literal(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else shown(value)


def render_config() -> str:
    """The kamal.toml `kamal init` writes: every setting at its default, with its comment; a setting that is
    off by default is a commented-out line."""
    lines = [f"# {HEADER}"]
    for section, cls in SECTIONS.items():
        lines += ["", f"[{section}]"]
        for f in dataclasses.fields(cls):
            comment, example = f.metadata.get("comment", ""), f.metadata.get("example")
            off = f.default is None
            line = f"{'# ' if off else ''}{f.name} = {toml_literal(example if off else f.default)}"
            if comment and f.metadata.get("above"):
                lines += [f"# {comment}", line]
            else:
                lines.append(f"{line:<{_COMMENT_COLUMN}} # {comment}" if comment else line)
    return "\n".join(lines) + "\n"


def read_config(path: Path) -> dict[str, Any]:
    """kamal.toml as a dict ({} when there is none)."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as e:
        raise KamalError(f"{path} is not valid TOML: {e}") from None


def config_setting(path: Path, section: str, key: str, default: Any = SETTINGS_DEFAULT) -> Any:
    """A kamal.toml value (or the default: the setting's own unless another is given), checked against the
    type the setting must have."""
    table = read_config(path).get(section, {})
    if not isinstance(table, dict):
        raise KamalError(f"{path}: [{section}] must be a table of settings")
    if key not in table:
        return settings_default(section, key) if default is SETTINGS_DEFAULT else default
    value, wanted = table[key], SETTING_TYPES.get((section, key))
    if wanted is not None and not _has_type(value, wanted):
        raise KamalError(f"{path}: [{section}] {key} = {value!r} must be {_TYPE_NAMES[wanted]}")
    return value


def _has_type(value: Any, wanted: type) -> bool:
    if wanted is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if wanted is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, wanted)


def set_config_values(config: Path, values: dict[tuple[str, str], str]) -> None:
    """Set `key = value` (TOML literals) in sections of kamal.toml, keeping the rest of the file."""
    text = config.read_text(encoding="utf-8")
    for (section, key), value in values.items():
        block = re.search(rf"(?ms)^\[{section}\]\n(.*?)(?=^\[|\Z)", text)
        if block is None:
            text = text.rstrip("\n") + f"\n\n[{section}]\n{key} = {value}\n"
            continue
        body = block.group(1)
        line = re.compile(rf"(?m)^#? ?{key} = [^\n#]*")
        new_body = line.sub(f"{key} = {value} ", body, count=1) if line.search(body) else f"{key} = {value}\n" + body
        text = text[: block.start(1)] + new_body + text[block.end(1):]
    write_text_atomic(config, text)
