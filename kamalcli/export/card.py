"""The model card (README.md) of an exported student: templates/model_card.md, the format's own
sections (templates/card_onnx.md, card_hf.md), and YAML front matter the Hugging Face Hub reads."""

from __future__ import annotations

import json
import string
from importlib import resources
from typing import Any, Iterable

MISSING = "-"

# Fields whose natural "nothing to say" is an empty string, not a dash:
# they are suffixes inside a sentence of the template.
EMPTY_BY_DEFAULT = ("quantization", "select_by_note", "scope_note", "tasks_section")

# Per export format: the library that loads it and the Hub tags.
FORMATS = {
    "onnx": ("onnxruntime", ["kamal", "knowledge-amalgamation", "onnx"]),
    "hf": ("transformers", ["kamal", "knowledge-amalgamation"]),
}


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return "" if key in EMPTY_BY_DEFAULT else MISSING


def template(name: str = "model_card.md") -> str:
    return resources.files("kamalcli.templates").joinpath(name).read_text(encoding="utf-8")


def render_card(fields: dict[str, Any], text: str | None = None, kind: str = "onnx") -> str:
    """The whole card of a `kind` export ("onnx" or "hf"); with `text`, only that template filled.

    fields["hub_metadata"] (base_model, license, datasets, model-index...) joins
    the front matter. A field nobody gave becomes "-".
    """
    if text is not None:
        return fill(text, fields)
    library, tags = FORMATS[kind]
    metadata = {"library_name": library, "pipeline_tag": fields.get("pipeline_task", "text-classification"), "tags": tags,
                **(fields.get("hub_metadata") or {})}
    fields = {"front_matter": front_matter(metadata), **fields}
    fields["format_sections"] = fill(template(f"card_{kind}.md"), fields).rstrip()
    return fill(template(), fields)


def fill(text: str, fields: dict[str, Any]) -> str:
    """Fill the `{field}` placeholders of text; a field nobody gave becomes "-".

    None counts as missing. Only plain `{name}` placeholders are filled: a field
    value is inserted as text (braces in values are safe), and a placeholder
    with an attribute, index or format spec is left as written.
    """
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


def front_matter(metadata: dict[str, Any]) -> str:
    """A YAML block between --- lines (block style; strings JSON-quoted, which YAML reads as written)."""
    return "---\n" + "\n".join(_yaml(metadata, 0)) + "\n---"


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):  # only empty ones get here
        return "{}" if isinstance(value, dict) else "[]"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(str(value), ensure_ascii=False)


def _yaml(value: Any, indent: int) -> list[str]:
    pad = "  " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:")
                lines += _yaml(item, indent + 1)
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
        return lines
    for item in value:  # a list: "- " then the item, its further lines aligned under it
        nested = _yaml(item, indent + 1) if isinstance(item, (dict, list)) and item else [_scalar(item)]
        lines.append(f"{pad}- {nested[0].lstrip()}")
        lines += nested[1:]
    return lines


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    headers = list(headers)
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def labels_table(labels: list[str], aliases: dict[str, str] | None = None) -> str:
    """The card's label table; with aliases (kamal labels merge), a column of each class's other names."""
    if not aliases:
        return markdown_table(["id", "label"], enumerate(labels))
    others = {label: ", ".join(a for a, target in aliases.items() if target == label) or "-" for label in labels}
    return markdown_table(["id", "label", "also called"], [(i, label, others[label]) for i, label in enumerate(labels)])


def tasks_section(heads) -> str:
    """A student of several tasks (kamalcli/heads.py): which columns answer which task, and how to read them;
    nothing for a one-task student."""
    from kamalcli.heads import is_plain

    if is_plain(heads):
        return ""
    rows = [(h.name, "multi-label: a sigmoid per label" if h.multi_label else "one label: softmax over its columns",
             f"{h.start}-{h.start + len(h.labels) - 1}", ", ".join(h.labels)) for h in heads]
    return ("\n## Tasks\n\nThis student answers several tasks with one encoder: each task is a block of the "
            "classifier's columns (named TASK/LABEL in `id2label`, listed under `kamal_heads` in `config.json`). "
            "Read the logits and apply each task's own function to its block; a softmax over every column (what "
            "`pipeline` does by default) mixes the tasks.\n\n"
            + markdown_table(["task", "kind", "columns", "labels"], rows) + "\n")
