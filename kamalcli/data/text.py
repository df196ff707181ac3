"""Text datasets: read a user's file once, keep a normalised copy in the workspace.

Files are read with `datasets` (csv, json/jsonl, txt, parquet) into a cache
inside the workspace that is deleted afterwards; what kamal keeps is a parquet
file of (text, label) named by the content hash, so the same rows from a csv
and a jsonl are the same data.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kamalcli.errors import KamalError, first_line
from kamalcli.files import open_maybe_gzipped

GENERATED = "synthesized"  # a dataset's provenance kind when kamal synthesize wrote it
LABELLED_ROLES = ("eval", "test")  # add-data --role values whose rows need gold labels

FORMATS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".jsonl": "json",
    ".json": "json",
    ".ndjson": "json",
    ".txt": "text",
    ".parquet": "parquet",
}


@dataclass(frozen=True)
class TextTable:
    texts: list[str]
    labels: list[str] | None
    text_column: str
    label_column: str | None
    columns: list[str]
    format: str
    skipped: int = 0  # rows left out for having no label (add-data --skip-unlabelled)

    @property
    def num_rows(self) -> int:
        return len(self.texts)

    def content_hash(self) -> str:
        digest = hashlib.sha256()
        labels = self.labels or [None] * len(self.texts)
        for text, label in zip(self.texts, labels):
            digest.update(text.encode("utf-8"))
            digest.update(b"\x1f")
            digest.update(("" if label is None else label).encode("utf-8"))
            digest.update(b"\x1e")
        return digest.hexdigest()

    def label_counts(self) -> dict[str, int] | None:
        return dict(Counter(self.labels)) if self.labels is not None else None


def detect_format(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    fmt = FORMATS.get(suffixes[-1] if suffixes else "")
    if fmt is None:
        known = ", ".join(sorted(FORMATS))
        raise KamalError(f"{path.name}: unknown file type (kamal reads {known}, optionally .gz)")
    return fmt


def read_table(
    source: str | Path,
    text_column: str | None,
    label_column: str | None,
    cache_dir: Path,
    want_labels: bool,
) -> TextTable:
    """Read a file into texts (and labels). cache_dir is scratch space, removed afterwards."""
    fmt, columns, rows, _ = read_columns(source, cache_dir)
    return table_of_texts(source, fmt, columns, rows, text_column, label_column, want_labels)


def read_columns(source: str | Path, cache_dir: Path) -> tuple[str, list[str], dict[str, list], list[str]]:
    """(format, column names, values per column, notes for the user) of a csv/json/txt/parquet file."""
    path = Path(source).expanduser()
    if not path.is_file():
        raise KamalError(f"{source}: no such file")
    if path.stat().st_size == 0:
        raise KamalError(f"{source} is empty")
    fmt = detect_format(path)
    delimiter = csv_delimiter(path) if fmt == "csv" else None
    notes = [] if delimiter in (None, _default_delimiter(path)) else [
        f"{path.name}: columns separated by {_shown(delimiter)}, not commas."]
    try:
        columns, rows = _load_columns(path, fmt, cache_dir, delimiter)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return fmt, columns, rows, notes


def table_of_texts(source, fmt: str, columns: list[str], rows: dict[str, list], text_column: str | None,
                   label_column: str | None, want_labels: bool, skip_unlabelled: bool = False) -> TextTable:
    """The texts (and labels) of a file's columns; skip_unlabelled: rows with no label are left out (a label
    queue filled in part way), not refused."""
    if fmt == "text":
        if label_column:
            raise KamalError(f"{source}: a .txt file holds one text per line and no labels; --label-column needs csv, jsonl or parquet")
        texts = [t for t in rows["text"] if t is not None and t.strip()]
        if not texts:
            raise KamalError(f"{source} holds no text")
        return TextTable(texts, None, "text", None, ["text"], fmt)

    if not columns or not rows or len(next(iter(rows.values()))) == 0:
        raise KamalError(f"{source} holds no rows")
    text_column = text_column or _guess_text_column(columns, rows, source)
    if text_column not in columns:
        raise KamalError(f"{source} has no column {text_column!r} (columns: {', '.join(columns)})")
    if label_column is None and want_labels and "label" in columns and text_column != "label":
        label_column = "label"
    if label_column is not None and label_column not in columns:
        raise KamalError(f"{source} has no column {label_column!r} (columns: {', '.join(columns)})")

    texts = list(rows[text_column])
    _check_texts(texts, text_column, source)
    if label_column is None:
        if skip_unlabelled:
            raise KamalError(f"--skip-unlabelled leaves out the rows with no label: name the labels with --label-column "
                             f"(columns: {', '.join(columns)})")
        return TextTable(texts, None, text_column, None, list(columns), fmt)
    values = rows[label_column]
    unlabelled = [i for i, value in enumerate(values) if value is None or (isinstance(value, str) and not value.strip())]
    if len(unlabelled) == len(texts):
        raise KamalError(f"{Path(source).name}: no row has a label in column {label_column!r}")
    if unlabelled and not skip_unlabelled:
        listed = ", ".join(str(i + 1) for i in unlabelled[:5]) + (", ..." if len(unlabelled) > 5 else "")
        one = len(unlabelled) == 1
        raise KamalError(f"{Path(source).name}: {len(unlabelled)} of {len(texts)} rows {'has' if one else 'have'} no "
                         f"label in column {label_column!r} ({'row' if one else 'rows'} {listed}): fill in every "
                         f"label, or pass --skip-unlabelled to leave {'it' if one else 'them'} out")
    skipped = set(unlabelled)
    kept = [i for i in range(len(texts)) if i not in skipped]
    return TextTable([texts[i] for i in kept], [_label_text(values[i]) for i in kept], text_column, label_column,
                     list(columns), fmt, skipped=len(skipped))


def _label_text(value) -> str:
    """A label as stored: a list (a multi-label row's labels, in JSONL or parquet) as a JSON list, which
    kamalcli/heads.py label_set reads back; anything else as its text."""
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ndarray":
        return json.dumps([str(v) for v in value])
    return str(value)


def _check_texts(texts: list, column: str, source) -> None:
    """Every row holds a string: a column of another type is named as such, a missing value by its row."""
    other = next(((i, t) for i, t in enumerate(texts) if t is not None and not isinstance(t, str)), None)
    if other is not None and not any(isinstance(t, str) for t in texts):
        raise KamalError(f"{source}: column {column!r} holds {type(other[1]).__name__} values, not text "
                         "(--text-column names the column that does)")
    if other is not None:
        i, value = other
        raise KamalError(f"{source}: row {i + 1} holds {type(value).__name__} {value!r:.40} in column {column!r}, "
                         "not text")
    missing = next((i for i, t in enumerate(texts) if t is None), None)
    if missing is not None:
        raise KamalError(f"{source}: row {missing + 1} has no text in column {column!r}")


def _guess_text_column(columns: list[str], rows: dict, source) -> str:
    if "text" in columns:
        return "text"
    strings = [c for c in columns if rows[c] and isinstance(rows[c][0], str)]
    if len(strings) == 1:
        return strings[0]
    raise KamalError(f"{source}: which column holds the text? pass --text-column (columns: {', '.join(columns)})")


def _load_columns(path: Path, fmt: str, cache_dir: Path, delimiter: str | None) -> tuple[list[str], dict[str, list]]:
    import datasets

    datasets.disable_progress_bars()
    # datasets logs a parser's failure at ERROR before raising it; kamal reports it itself, once.
    datasets.utils.logging.set_verbosity(datasets.utils.logging.CRITICAL)
    kwargs = {}
    if fmt == "csv":  # only an empty field is missing: NA, N/A, None, null or NaN are texts and labels like any
        kwargs.update(keep_default_na=False, na_values=[""])
    if delimiter not in (None, ","):
        kwargs["sep"] = delimiter
    try:
        loaded = datasets.load_dataset(
            fmt,
            data_files=str(path),
            split="train",
            cache_dir=str(cache_dir),
            keep_in_memory=True,
            **kwargs,
        )
        return list(loaded.column_names), loaded.to_dict()  # strings are decoded here
    except UnicodeDecodeError:
        raise KamalError(f"{path.name} is not valid UTF-8 text") from None
    except Exception as e:  # datasets wraps parser errors in many types
        located = _json_error(path) if fmt == "json" else None
        raise KamalError(located or f"cannot read {path.name} as {fmt}: {_root_message(e)}") from None


def _json_error(path: Path) -> str | None:
    """Where a json or JSON Lines file stops being JSON ("FILE line N: not valid JSON: why"), or that it holds
    nothing but blank lines; None when it parses (the loader failed for another reason). pyarrow's own
    message counts characters, not lines."""
    try:
        with _open_text(path) as f:
            text = f.read()
    except (OSError, EOFError, UnicodeDecodeError):
        return None
    if not text.strip():
        return f"{path.name} holds no rows (only blank lines)"
    whole = _decode_error(text.rstrip())  # rstrip: an unclosed document ends on its last line, not after it
    if whole is None:
        return None
    lines = text.splitlines()
    if not _json_lines(path, lines):
        return _not_json(path, whole.lineno, whole)
    for number, line in enumerate(lines, start=1):
        error = _decode_error(line) if line.strip() else None
        if error is not None:
            return _not_json(path, number, error)
    return None


def _not_json(path: Path, line: int, error: json.JSONDecodeError) -> str:
    return f"{path.name} line {line}: not valid JSON: {error.msg} (column {error.colno})"


def _json_lines(path: Path, lines: list[str]) -> bool:
    """JSON Lines (one document a line): by its name, or a .json whose first line is a document by itself."""
    if path.name.lower().removesuffix(".gz").endswith((".jsonl", ".ndjson")):
        return True
    first = next((s for s in lines if s.strip()), "")
    return _decode_error(first) is None


def _decode_error(text: str) -> json.JSONDecodeError | None:
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return e
    return None


# -- csv: the column separator ------------------------------------------------

CSV_DELIMITERS = ";\t|"  # tried when a .csv header holds no comma
CSV_SAMPLE_BYTES = 1 << 16


def _default_delimiter(path: Path) -> str:
    return "\t" if path.name.lower().removesuffix(".gz").endswith(".tsv") else ","


def _shown(delimiter: str) -> str:
    return "tab" if delimiter == "\t" else repr(delimiter)


def csv_delimiter(path: Path) -> str:
    """The column separator of a csv file: tab for .tsv; for .csv a comma, unless the header holds none and
    csv.Sniffer finds ; tab or | consistent over the header and first lines. Refused: no rows (blank lines,
    or a header alone), and a one-column header over rows the separator splits (pandas would silently read
    each row's first field as an index and keep the rest as the text)."""
    sample, whole = _csv_sample(path)
    delimiter = _default_delimiter(path)
    records = _csv_records(sample, delimiter)
    if records is None:
        return delimiter  # not csv-shaped at all: the loader says what is wrong
    if delimiter == "," and records and len(records[0]) == 1:
        found = _sniffed(sample)
        if found is not None:
            delimiter, records = found, _csv_records(sample, found)
    if whole and not records:
        raise KamalError(f"{path.name} holds no rows (only blank lines)")
    if whole and len(records) == 1:
        raise KamalError(f"{path.name} has a header ({', '.join(records[0])}) but no rows")
    if records and len(records[0]) == 1:
        split = next(((n, len(r)) for n, r in enumerate(records[1:], start=1) if len(r) > 1), None)
        if split is not None:
            raise KamalError(f"{path.name}: the header has one column but row {split[0]} has {split[1]} fields "
                             f"separated by {_shown(delimiter)}; name every column in the header, or quote the "
                             "texts that hold it")
    return delimiter


def _sniffed(sample: str) -> str | None:
    """The separator csv.Sniffer finds among CSV_DELIMITERS, if it splits the header into columns."""
    try:
        found = csv.Sniffer().sniff(sample, delimiters=CSV_DELIMITERS).delimiter
    except csv.Error:
        return None
    records = _csv_records(sample, found)
    return found if records and len(records[0]) > 1 else None


def _csv_records(sample: str, delimiter: str) -> list[list[str]] | None:
    """The sample's non-blank records (None: csv cannot parse it)."""
    try:
        return [r for r in csv.reader(io.StringIO(sample), delimiter=delimiter) if any(f.strip() for f in r)]
    except csv.Error:
        return None


def _csv_sample(path: Path) -> tuple[str, bool]:
    """The file's first CSV_SAMPLE_BYTES as whole lines of text, and whether that is the whole file."""
    try:
        with open_maybe_gzipped(path) as f:
            head = f.read(CSV_SAMPLE_BYTES + 1)
    except (OSError, EOFError):
        return "", False
    whole = len(head) <= CSV_SAMPLE_BYTES
    text = head[:CSV_SAMPLE_BYTES].decode("utf-8-sig", errors="replace")
    return (text if whole else text[: text.rfind("\n") + 1]), whole


def _open_text(path: Path):
    return open_maybe_gzipped(path, "rt", encoding="utf-8-sig")


def _root_message(error: BaseException) -> str:
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    message = first_line(error, None)
    if isinstance(error, UnicodeDecodeError) or any(w in message.lower() for w in ("utf-8", "utf8", "decode")):
        return "the file is not valid UTF-8 text"
    return message[:200]


# -- the workspace copy --------------------------------------------------

def write_cache(table: TextTable, path: Path, extra: dict[str, list[str]] | None = None) -> None:
    """extra: more string columns kept beside text and label (e.g. each generated row's teacher and prompt)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"text": pa.array(table.texts, pa.string())}
    if table.labels is not None:
        columns["label"] = pa.array(table.labels, pa.string())
    columns.update({name: pa.array(values, pa.string()) for name, values in (extra or {}).items()})
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.table(columns), tmp)
    tmp.replace(path)


def read_cache(path: Path) -> tuple[list[str], list[str] | None]:
    import pyarrow.parquet as pq

    if not Path(path).is_file():
        raise KamalError(f"the workspace copy of a dataset is missing: {path} (add the data again)")
    table = pq.read_table(path)
    texts = table.column("text").to_pylist()
    labels = table.column("label").to_pylist() if "label" in table.column_names else None
    return texts, labels


# -- registration -----------------------------------------------------------

def register_dataset(workspace, store, source: str, *, name: str | None, text_column: str | None,
                     label_column: str | None, role: str, data_format: str | None = None,
                     tokens_column: str | None = None, tags_column: str | None = None,
                     max_chars: int | None = None, skip_unlabelled: bool = False):
    """Read, check and record a dataset (texts, or tokens with BIO tags). Returns (dataset, notes for the user).

    data_format: None (from the file), "conll" or "peoples-daily" (kamalcli/data/tokens.py); skip_unlabelled:
    text rows with no label are left out (and counted in a note) instead of refused.
    """
    from kamalcli.data import tokens as token_data
    from kamalcli.names import check_name, default_name

    path = Path(source).expanduser()
    name = check_name(default_name(path.name.split(".")[0]) if name is None else name, "dataset")
    store.claim("dataset", name, exclusive=True)
    if store.has_dataset(name):
        raise KamalError(f"a dataset named {name!r} exists already; choose another --name")
    if max_chars is not None and data_format != "peoples-daily":
        raise KamalError("--max-chars applies to --format peoples-daily only")
    read_notes: list[str] = []
    if data_format is not None or token_data.is_conll(path):
        if not path.is_file():
            raise KamalError(f"{source}: no such file")
        table = (token_data.read_peoples_daily(path, max_chars) if data_format == "peoples-daily"
                 else token_data.read_conll(path))
    else:
        fmt, columns, rows, read_notes = read_columns(path, workspace.tmp_dir())
        if tokens_column is not None or tags_column is not None or token_data.holds_token_lists(columns, rows, None):
            if fmt == "text":
                raise KamalError(f"{source}: a .txt file holds one text per line; token data needs jsonl, csv, "
                                 "parquet or CoNLL")
            table = token_data.table_from_rows(columns, rows, source, fmt, tokens_column, tags_column)
        else:
            table = table_of_texts(path, fmt, columns, rows, text_column, label_column,
                                   want_labels=role in LABELLED_ROLES, skip_unlabelled=skip_unlabelled)
    if isinstance(table, token_data.TokenTable):
        if skip_unlabelled:
            raise KamalError("--skip-unlabelled is for texts with labels; token data keeps every sentence")
        dataset, notes = _record_tokens(workspace, store, table, path, name, role)
        return dataset, read_notes + notes
    if role in LABELLED_ROLES and table.labels is None:
        raise KamalError(f"{source}: the {role} set needs gold labels; pass --label-column (columns: {', '.join(table.columns)})")

    notes = list(read_notes)
    if table.skipped:
        notes.append(f"Left out {table.skipped} of {table.skipped + table.num_rows} rows: they have no label in "
                     f"column {table.label_column!r}.")
    counts = table.label_counts()
    if counts is not None:
        space = store.label_space(store.teachers_of_task("sequence"))
        unknown = {label: n for label, n in counts.items() if not _known_label(label, space)}
        if len(space) and unknown:
            listed = ", ".join(f"{k} ({v})" for k, v in sorted(unknown.items())[:8])
            listed += f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
            notes.append(
                f"{sum(unknown.values())} of {table.num_rows} rows have labels no teacher knows: {listed}. "
                "They are kept; evaluation counts them as errors and reports them separately."
            )
    if role == "transfer" and table.labels is not None:
        notes.append("Labels are stored with this transfer set; amalgamation trains on them only when named with "
                     "`--gold` (kamal amalgamate ... --gold NAME).")

    dataset = _record(workspace, store, table, write_cache, name=name, source=str(path.resolve()), format=table.format,
                      role=role, num_rows=table.num_rows, text_column=table.text_column,
                      label_column=table.label_column, columns=table.columns, label_counts=counts)
    return dataset, notes


def _known_label(value: str, space) -> bool:
    """A label a teacher knows, or a multi-label row's labels (a JSON list, kamalcli/heads.py) that all are."""
    from kamalcli.heads import label_set

    if space.knows(value):
        return True
    if not value.startswith("["):
        return False
    try:
        return all(space.knows(name) for name in label_set(value))
    except KamalError:
        return False


def _record(workspace, store, table, write, **fields):
    """The workspace copy, named by the content hash and written once, then the dataset's record."""
    content_hash = table.content_hash()
    cache = workspace.artifact_dir("data") / f"{content_hash[:24]}.parquet"
    if not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        write(table, cache)
    return store.add_dataset(content_hash=content_hash, path=str(cache), **fields)


def _record_tokens(workspace, store, table, path: Path, name: str, role: str):
    from kamalcli.data.tokens import tidied, write_token_cache

    if role in LABELLED_ROLES and table.tags is None:
        raise KamalError(f"{path}: the {role} set needs gold tags; pass --tags-column (columns: {', '.join(table.columns)})")
    table, notes = tidied(table)
    if role == "transfer" and table.tags is not None:
        notes.append("Tags are stored with this transfer set but amalgamation never trains on them.")
    dataset = _record(workspace, store, table, write_token_cache, name=name, source=str(path.resolve()),
                      format=table.format, role=role, num_rows=table.num_rows, text_column=table.tokens_column,
                      label_column=table.tags_column, columns=table.columns, label_counts=table.tag_counts(),
                      provenance=table.provenance, task="token")
    return dataset, notes


def load_dataset_rows(dataset) -> tuple[list[str], list[str] | None]:
    if dataset.task != "sequence":
        raise KamalError(f"dataset {dataset.name} holds tokens with tags (named entities), not texts with labels; "
                         "use it with token-classification teachers")
    texts, labels = read_cache(Path(dataset.path))
    if len(texts) != dataset.num_rows:
        raise KamalError(f"the workspace copy of dataset {dataset.name} is damaged (row count differs); add it again")
    return texts, labels


def load_labelled_rows(dataset) -> tuple[list[str], list[str]]:
    """(texts, gold labels) of a dataset that has them; one line otherwise."""
    if not dataset.has_labels:
        raise KamalError(f"dataset {dataset.name} has no gold labels: add it with --label-column (role eval)")
    return load_dataset_rows(dataset)


def is_generated(dataset) -> bool:
    """Whether kamal synthesize wrote this dataset (its rows are labelled with the class they were steered to)."""
    return (dataset.provenance or {}).get("kind") == GENERATED


def steered_rows(dataset) -> tuple[list[str], list[str]] | None:
    """For a generated dataset, each row's steering teacher and class; None for data a user added."""
    if not is_generated(dataset):
        return None
    import pyarrow.parquet as pq

    table = pq.read_table(dataset.path, columns=["teacher", "label"])
    return table.column("teacher").to_pylist(), table.column("label").to_pylist()
