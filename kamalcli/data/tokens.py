"""Token-level data (named-entity recognition): sentences as tokens, gold tags in BIO.

Read from jsonl/json/parquet/csv with a tokens column (a list of strings; in
csv a JSON list) and a tags column (a list of B-/I-/O tags), or CoNLL-style
files (one token per line, the tag in the last column, a blank line between
sentences), or the People's Daily 1998 corpus (kamalcli/data/peoples_daily.py).
The workspace copy is a parquet file of (text, tokens, tags), named by the
content hash like text data.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.files import open_maybe_gzipped
from kamalcli.labels import renamed_tags_note, upper_tag

CONLL_SUFFIXES = (".conll", ".conllu", ".bio", ".iob", ".iob2")
TOKEN_FORMATS = ("conll", "peoples-daily")


@dataclass(frozen=True)
class TokenTable:
    tokens: list[list[str]]
    tags: list[list[str]] | None
    tokens_column: str
    tags_column: str | None
    columns: list[str]
    format: str
    provenance: dict | None = field(default=None)

    @property
    def num_rows(self) -> int:
        return len(self.tokens)

    def texts(self) -> list[str]:
        """For display only: the tokens joined by spaces."""
        return [" ".join(t) for t in self.tokens]

    def content_hash(self) -> str:
        digest = hashlib.sha256(b"tokens\x1d")
        tags = self.tags or [None] * len(self.tokens)
        for tokens, row_tags in zip(self.tokens, tags):
            digest.update("\x1f".join(tokens).encode("utf-8"))
            digest.update(b"\x1d")
            digest.update("\x1f".join(row_tags or ()).encode("utf-8"))
            digest.update(b"\x1e")
        return digest.hexdigest()

    def tag_counts(self) -> dict[str, int] | None:
        if self.tags is None:
            return None
        return dict(Counter(t for row in self.tags for t in row))


def is_conll(path: Path) -> bool:
    name = path.name.lower().removesuffix(".gz")
    return name.endswith(CONLL_SUFFIXES)


def check_bio(tags: list[str], where: str) -> None:
    for tag in tags:
        if tag != "O" and not (tag[:2] in ("B-", "I-") and len(tag) > 2):
            raise KamalError(f"{where}: tag {tag!r} is not BIO (O, B-TYPE or I-TYPE)")


def read_conll(path: Path) -> TokenTable:
    sentences: list[list[str]] = []
    tag_rows: list[list[str]] = []
    tokens, tags = [], []
    for number, line in enumerate(_text_lines(path), start=1):
        line = line.rstrip("\n").rstrip("\r")
        if not line.strip() or line.startswith("-DOCSTART-"):
            if tokens:
                sentences.append(tokens)
                tag_rows.append(tags)
                tokens, tags = [], []
            continue
        parts = line.split()
        if len(parts) < 2:
            raise KamalError(f"{path.name}: line {number} has no tag (CoNLL: the token, then its tag in the last column)")
        check_bio([parts[-1]], f"{path.name}: line {number}")
        tokens.append(parts[0])
        tags.append(parts[-1])
    if tokens:
        sentences.append(tokens)
        tag_rows.append(tags)
    if not sentences:
        raise KamalError(f"{path} holds no sentences")
    return TokenTable(sentences, tag_rows, "tokens", "tags", ["tokens", "tags"], "conll")


def _text_lines(path: Path):
    try:
        with open_maybe_gzipped(path, "rt", encoding="utf-8") as f:
            yield from f
    except UnicodeDecodeError:
        raise KamalError(f"{path.name} is not valid UTF-8 text") from None


def table_from_rows(columns: list[str], rows: dict[str, list], source, fmt: str, tokens_column: str | None,
                    tags_column: str | None) -> TokenTable:
    """A table read by kamalcli/data/text.py whose tokens column holds lists (csv: JSON lists)."""
    tokens_column = tokens_column or "tokens"
    if tokens_column not in columns:
        raise KamalError(f"{source} has no column {tokens_column!r} (columns: {', '.join(columns)})")
    if tags_column is None and "tags" in columns:
        tags_column = "tags"
    if tags_column is not None and tags_column not in columns:
        raise KamalError(f"{source} has no column {tags_column!r} (columns: {', '.join(columns)})")
    tokens = [_string_list(v, source, i, tokens_column) for i, v in enumerate(rows[tokens_column])]
    tags = None
    if tags_column is not None:
        tags = [_string_list(v, source, i, tags_column) for i, v in enumerate(rows[tags_column])]
        for i, (tok, tag) in enumerate(zip(tokens, tags)):
            if len(tok) != len(tag):
                raise KamalError(f"{source}: row {i + 1} has {len(tok)} tokens but {len(tag)} tags")
            check_bio(tag, f"{source}: row {i + 1}")
    for i, tok in enumerate(tokens):
        if not tok:
            raise KamalError(f"{source}: row {i + 1} has no tokens")
    return TokenTable(tokens, tags, tokens_column, tags_column, list(columns), fmt)


def _string_list(value, source, i: int, column: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise KamalError(f"{source}: row {i + 1}: column {column!r} holds neither a list nor a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise KamalError(f"{source}: row {i + 1}: column {column!r} must hold a list of strings")
    return value


def holds_token_lists(columns: list[str], rows: dict[str, list], tokens_column: str | None) -> bool:
    """Whether a table read as text data is token data: a tokens column of lists."""
    column = tokens_column or ("tokens" if "tokens" in columns else None)
    values = rows.get(column) if column else None
    return bool(values) and isinstance(values[0], list)


def read_peoples_daily(path: Path, max_chars: int | None) -> TokenTable:
    from kamalcli.data import peoples_daily

    text, origin = peoples_daily.read_corpus(path)
    sentences, tags, counts = peoples_daily.convert_lines(text.splitlines(), max_chars=max_chars)
    if not sentences:
        raise KamalError(f"{path.name} holds no sentences in the People's Daily format (word/POS ...)")
    return TokenTable(sentences, tags, "tokens", "tags", ["tokens", "tags"], "peoples-daily",
                      provenance=peoples_daily.provenance(origin, counts, max_chars))


def tidied(table: TokenTable) -> tuple[TokenTable, list[str]]:
    """The table with its tags' entity types upper-cased (B-per -> B-PER, as teachers' tags are), and notes:
    the tags renamed, and how many entities begin with I- (IOB1-style corpora: kept, read as seqeval does)."""
    if table.tags is None:
        return table, []
    tags = [[upper_tag(t) for t in row] for row in table.tags]
    renamed = {old: new for row, new_row in zip(table.tags, tags) for old, new in zip(row, new_row) if old != new}
    notes = renamed_tags_note(dict(sorted(renamed.items())))
    opened = sum(_entities_opened_by_i(row) for row in tags)
    if opened:
        notes.append(f"{opened} {'entity begins' if opened == 1 else 'entities begin'} with I- rather than B- "
                     "(IOB1 style, e.g. I-PER after O): each is read as an entity starting there, as seqeval does.")
    return replace(table, tags=tags), notes


def _entities_opened_by_i(tags: list[str]) -> int:
    """Tags I-TYPE that begin an entity: at the start, after O, or after a tag of another type."""
    return sum(tag.startswith("I-") and (i == 0 or tags[i - 1][2:] != tag[2:]) for i, tag in enumerate(tags))


# -- the workspace copy --------------------------------------------------

def write_token_cache(table: TokenTable, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"text": pa.array(table.texts(), pa.string()),
               "tokens": pa.array(table.tokens, pa.list_(pa.string()))}
    if table.tags is not None:
        columns["tags"] = pa.array(table.tags, pa.list_(pa.string()))
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.table(columns), tmp)
    tmp.replace(path)


def load_token_rows(dataset) -> tuple[list[list[str]], list[list[str]] | None]:
    """(tokens, tags or None) of a token dataset."""
    import pyarrow.parquet as pq

    if getattr(dataset, "task", "sequence") != "token":
        raise KamalError(f"dataset {dataset.name} holds texts, not tokens with tags (add token data: a tokens "
                         "column, CoNLL, or --format peoples-daily)")
    path = Path(dataset.path)
    if not path.is_file():
        raise KamalError(f"the workspace copy of a dataset is missing: {path} (add the data again)")
    table = pq.read_table(path)
    tokens = table.column("tokens").to_pylist()
    tags = table.column("tags").to_pylist() if "tags" in table.column_names else None
    if len(tokens) != dataset.num_rows:
        raise KamalError(f"the workspace copy of dataset {dataset.name} is damaged (row count differs); add it again")
    return tokens, tags


def entity_types(tags) -> list[str]:
    """The entity types in BIO tags, in order of first appearance."""
    seen: dict[str, None] = {}
    for tag in tags:
        if tag != "O":
            seen.setdefault(tag[2:], None)
    return list(seen)
