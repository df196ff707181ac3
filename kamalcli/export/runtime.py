"""Run an exported student with onnxruntime, tokenizers and numpy only (no torch, no transformers).

An export folder (see kamalcli.export.onnx) holds model.onnx, tokenizer.json,
labels.json, config.json and export.json.

Caches: onnxruntime's import writes telemetry files (see import_ort, which keeps
them in kamal's cache); on the CPU execution provider it writes nothing else. The
CUDA execution provider keeps its kernel/algorithm choices in memory; the only
on-disk caches in reach are the TensorRT execution provider's engine and timing
caches (`trt_engine_cache_path` / `trt_timing_cache_path` provider options, or
the ORT_TENSORRT_CACHE_PATH environment variable; only written when engine
caching is switched on) and the CUDA driver's JIT cache for PTX kernels
(CUDA_CACHE_PATH, ~/.nv/ComputeCache by default). kamal never registers the
TensorRT provider; both variables are still pointed at kamal's cache (unless
the user set them) before a GPU session is made, so nothing lands in $HOME.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from kamalcli.errors import KamalError, first_line
from kamalcli.probs import softmax
from kamalcli.runtime import cache_dir, cut_at_model_limit
from kamalcli.trust.conformal import load_calibration
from kamalcli.trust.scope import load_scope

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
QUIET = 3  # onnxruntime severities: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal
SILENT = 4


def ort_cache_dir() -> Path:
    return cache_dir() / "onnxruntime"


def _prepare_gpu_caches(ort) -> None:
    base = ort_cache_dir()
    os.environ.setdefault("ORT_TENSORRT_CACHE_PATH", str(base / "tensorrt"))
    # CUDA and cuDNN installed as pip wheels (as torch installs them) are not on the loader's path:
    # onnxruntime >= 1.21 loads them from there itself. Without it the provider falls back to CPU.
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        import contextlib
        import io

        try:  # it prints when the wheels are absent: then the system's libraries are tried, silently
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                preload()
        except Exception:  # noqa: BLE001
            pass


def import_ort():
    """onnxruntime, quiet. Its first import writes telemetry files (a device id and an event
    database under $XDG_CACHE_HOME, else ~/.cache/Microsoft): pointed at kamal's cache for it."""
    import sys

    if "onnxruntime" not in sys.modules:
        previous = os.environ.get("XDG_CACHE_HOME")
        os.environ["XDG_CACHE_HOME"] = str(ort_cache_dir())
        try:
            import onnxruntime  # noqa: F401
        finally:
            if previous is None:
                del os.environ["XDG_CACHE_HOME"]
            else:
                os.environ["XDG_CACHE_HOME"] = previous
    import onnxruntime as ort

    ort.set_default_logger_severity(QUIET)
    return ort


def session_options(ort, *, threads: int | None = None, severity: int = QUIET):
    options = ort.SessionOptions()
    options.log_severity_level = severity
    if threads:
        options.intra_op_num_threads = threads
    # onnxruntime's worker threads busy-wait between calls by default. Like
    # OMP_WAIT_POLICY=PASSIVE for torch (kamalcli.runtime), passive waiting is
    # the safe choice: measured on 2 cores with another busy process or a second
    # session, spinning made batch-1 calls 2-3x slower; alone it gained nothing.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def create_session(model_path: Path, device: str = "cpu", *, threads: int | None = None):
    """An InferenceSession on 'cpu', 'cuda' (or fail) or 'auto' (CUDA if it really loads, else CPU)."""
    device = (device or "cpu").lower()
    if device not in {"cpu", "cuda", "auto"}:
        raise KamalError(f"unknown device {device!r}: use cpu, cuda or auto")
    ort = import_ort()
    model_path = str(model_path)
    if device == "cpu" or (device == "auto" and CUDA not in ort.get_available_providers()):
        return ort.InferenceSession(model_path, session_options(ort, threads=threads), providers=[CPU])
    if CUDA not in ort.get_available_providers():
        raise KamalError("--device cuda was asked for, but this onnxruntime has no CUDA support "
                         "(pip install onnxruntime-gpu)")
    _prepare_gpu_caches(ort)
    # A CUDA provider that fails to load logs an ERROR and falls back to CPU;
    # that is an expected outcome here (we check get_providers() below), so
    # silence it for the duration of this attempt only.
    ort.set_default_logger_severity(SILENT)
    try:
        session = ort.InferenceSession(model_path, session_options(ort, threads=threads, severity=SILENT),
                                       providers=[(CUDA, {"use_tf32": 0}), CPU])
    finally:
        ort.set_default_logger_severity(QUIET)
    if CUDA in session.get_providers():
        return session
    if device == "cuda":
        raise KamalError("--device cuda was asked for, but onnxruntime could not load its CUDA provider "
                         "(no GPU, or the CUDA and cuDNN libraries it was built for are missing)")
    return session  # auto: CPU, silently


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise KamalError(f"cannot read {path}: {e}") from None


def _token_text(value) -> str | None:
    if isinstance(value, dict):  # older tokenizer_config.json: {"content": "[PAD]", ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


def load_fast_tokenizer(folder: Path):
    """tokenizers.Tokenizer from tokenizer.json, with its baked padding/truncation cleared.

    Returns (tokenizer, pad_id, pad_token, padding_side, truncation_side).
    """
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.is_file():
        raise KamalError(f"{folder} has no tokenizer.json: not an ONNX export of kamal")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a plain Exception
        raise KamalError(f"cannot load {path}: {first_line(e, 160)}") from None
    config = _read_json(folder / "tokenizer_config.json") or {}
    special = _read_json(folder / "special_tokens_map.json") or {}
    baked = tokenizer.padding or {}
    pad_token = _token_text(config.get("pad_token")) or _token_text(special.get("pad_token")) or baked.get("pad_token")
    candidates = [pad_token] if pad_token else ["[PAD]", "<pad>"]
    pad_id = next((tokenizer.token_to_id(t) for t in candidates if tokenizer.token_to_id(t) is not None), None)
    if pad_id is None:
        pad_id, pad_token = baked.get("pad_id", 0), baked.get("pad_token", pad_token or "[PAD]")
    else:
        pad_token = next(t for t in candidates if tokenizer.token_to_id(t) == pad_id)
    padding_side = config.get("padding_side", "right")
    truncation_side = config.get("truncation_side", "right")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer, pad_id, pad_token, padding_side, truncation_side


class OnnxClassifier:
    """A text classifier from an export folder: onnxruntime + tokenizers + numpy."""

    def __init__(self, folder: Path, device: str = "cpu", *, threads: int | None = None):
        self.folder = Path(folder)
        model = self.folder / "model.onnx"
        if not model.is_file():
            raise KamalError(f"{self.folder} has no model.onnx: not an ONNX export of kamal")
        labels = _read_json(self.folder / "labels.json")
        if not isinstance(labels, list) or not labels:
            raise KamalError(f"{self.folder} has no usable labels.json")
        self.labels: list[str] = [str(x) for x in labels]
        info = _read_json(self.folder / "export.json") or {}
        config = _read_json(self.folder / "config.json") or {}
        self.max_positions: int | None = info.get("max_length") or config.get("max_position_embeddings")
        (self.tokenizer, self.pad_id, self.pad_token,
         self.padding_side, self.truncation_side) = load_fast_tokenizer(self.folder)
        try:
            self.session = create_session(model, device, threads=threads)
        except KamalError:
            raise
        except Exception as e:  # onnxruntime's own errors: a broken or foreign model file
            raise KamalError(f"onnxruntime cannot load {model}: {first_line(e, 160)}") from None
        self.providers: list[str] = list(self.session.get_providers())
        self.input_names: list[str] = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        self.output_name = "logits" if "logits" in outputs else outputs[0]
        self.has_features = "features" in outputs  # exports before kamal's scope have logits only
        self.scope = load_scope(self.folder)
        self.calibration = load_calibration(self.folder)

    def _feed(self, texts: Sequence[str], max_length: int) -> dict[str, np.ndarray]:
        self.tokenizer.enable_truncation(max_length, direction=self.truncation_side)
        self.tokenizer.enable_padding(pad_id=self.pad_id, pad_token=self.pad_token, direction=self.padding_side)
        encodings = self.tokenizer.encode_batch(list(texts))
        columns = {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
        }
        return {name: np.asarray(columns[name], dtype=np.int64) for name in self.input_names}

    def predict_logits(self, texts: Sequence[str], batch_size: int = 32, max_length: int = 128) -> np.ndarray:
        return self.predict_outputs(texts, batch_size=batch_size, max_length=max_length)[0]

    def predict_outputs(self, texts: Sequence[str], batch_size: int = 32, max_length: int = 128, *,
                        features: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """(logits, features): features (the last layer's first-token vectors) only when asked for and the
        export has them, else None."""
        texts = [str(t) for t in texts]
        if batch_size < 1:
            raise KamalError(f"batch size must be at least 1 (got {batch_size})")
        if max_length < 2:
            raise KamalError(f"max length must be at least 2 (got {max_length})")
        if self.max_positions and max_length > int(self.max_positions):
            max_length = cut_at_model_limit(int(self.max_positions), max_length)
        out = np.zeros((len(texts), len(self.labels)), dtype=np.float32)
        names = [self.output_name] + (["features"] if features and self.has_features else [])
        vectors = None
        # Similar lengths share a batch: less padding, same results.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            feed = self._feed([texts[i] for i in rows], max_length)
            got = self.session.run(names, feed)
            out[rows] = got[0]
            if len(got) > 1:
                if vectors is None:
                    vectors = np.zeros((len(texts), got[1].shape[-1]), dtype=np.float32)
                vectors[rows] = got[1]
        return out, vectors

    def predict_word_proba(self, sentences: Sequence[Sequence[str]], batch_size: int = 32,
                           max_length: int = 128) -> np.ndarray:
        """A token classifier's tag probabilities per word (n, W, |Y|), each word read where kamal trained it
        (kamalcli/models/words.py); words cut by max_length are O."""
        from kamalcli.models.words import word_probabilities
        from kamalcli.models.words import BOUNDARY, first_positions, max_words

        sentences = [list(s) or ["."] for s in sentences]
        if self.max_positions and max_length > int(self.max_positions):
            max_length = cut_at_model_limit(int(self.max_positions), max_length)
        width = max_words(sentences)
        logits = np.zeros((len(sentences), width, len(self.labels)), dtype=np.float32)
        seen = np.zeros((len(sentences), width), dtype=bool)
        self.tokenizer.enable_truncation(max_length, direction=self.truncation_side)
        self.tokenizer.enable_padding(pad_id=self.pad_id, pad_token=self.pad_token, direction=self.padding_side)
        for start in range(0, len(sentences), batch_size):
            part = sentences[start:start + batch_size]
            encodings = self.tokenizer.encode_batch(part, is_pretokenized=True)
            columns = {"input_ids": [e.ids for e in encodings], "attention_mask": [e.attention_mask for e in encodings],
                       "token_type_ids": [e.type_ids for e in encodings]}
            feed = {name: np.asarray(columns[name], dtype=np.int64) for name in self.input_names}
            out = self.session.run([self.output_name], feed)[0]
            for j, (e, words) in enumerate(zip(encodings, part)):
                positions = first_positions(e.word_ids, [t == BOUNDARY for t in e.tokens], len(words))
                found = positions >= 0
                logits[start + j, np.flatnonzero(found)] = out[j, positions[found]]
                seen[start + j, : len(words)] = found
        return word_probabilities(logits, seen, self.labels)

    def predict_proba(self, texts: Sequence[str], batch_size: int = 32, max_length: int = 128) -> np.ndarray:
        return softmax(self.predict_logits(texts, batch_size=batch_size, max_length=max_length))

    def predict(self, texts: Sequence[str], batch_size: int = 32, max_length: int = 128) -> list[str]:
        if not len(texts):
            return []
        probs = self.predict_proba(texts, batch_size=batch_size, max_length=max_length)
        return [self.labels[i] for i in probs.argmax(axis=-1)]
