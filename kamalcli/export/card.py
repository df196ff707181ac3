"""The model card (README.md) of an exported student, from templates/model_card.md."""

from __future__ import annotations

import string
from importlib import resources
from typing import Any, Iterable

MISSING = "-"

# Fields whose natural "nothing to say" is an empty string, not a dash:
# they are suffixes inside a sentence of the template.
EMPTY_BY_DEFAULT = ("quantization", "select_by_note")


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return "" if key in EMPTY_BY_DEFAULT else MISSING


def template() -> str:
    return resources.files("kamalcli.templates").joinpath("model_card.md").read_text(encoding="utf-8")


def render_card(fields: dict[str, Any], text: str | None = None) -> str:
    """Fill the card's `{field}` placeholders; a field nobody gave becomes "-".

    None counts as missing. Only plain `{name}` placeholders are filled: a field
    value is inserted as text (braces in values are safe), and a placeholder
    with an attribute, index or format spec is left as written.
    """
    text = template() if text is None else text
    values = _Fields({k: v for k, v in fields.items() if v is not None})
    out = []
    for literal, name, spec, conversion in string.Formatter().parse(text):
        out.append(literal)
        if name is None:
            continue
        if name.isidentifier() and not spec and not conversion:
            out.append(str(values[name]))
        else:  # not ours to interpret: keep it as written
            out.append("{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}")
    return "".join(out)


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    headers = list(headers)
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def labels_table(labels: list[str]) -> str:
    return markdown_table(["id", "label"], enumerate(labels))
