"""Teacher features for feature-level methods (dfa, cfl, mt-bert, stratanet), from one of two sources.

- cached: mean-pooled hidden states of the layers a method asks for, stored by
  the probe (float16, memory-mapped) and read per batch; a repeat costs nothing.
- in the loop: the teachers run under no_grad at every step on the batch's
  rows, for per-token hidden states. Token positions match the student's only
  when a teacher tokenises the text exactly as the student does; kamal checks
  that on every transfer row and never matches misaligned tokens.

Layer alignment: student layer j (1..L_s) takes teacher layer round(j * L_t / L_s),
halves rounded up, at least 1; embeddings (layer 0) are never matched.

What the methods share: choosing the features' source (per-token states need
teachers in the loop and a tokenisation that matches the student's; otherwise,
or when asked, mean-pooled features from the probe cache: kamal says which and
never matches misaligned tokens), reading states, timing (FeatureAuxiliary).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from kamalcli.errors import KamalError
from kamalcli.methods.base import FeatureContext
from kamalcli.models.inference import mean_pool
from kamalcli.train.auxiliary import Auxiliary, StudentView


def aligned_layer(student_layer: int, student_depth: int, teacher_depth: int) -> int:
    """The teacher layer matched to student layer j (1-based hidden-state indices)."""
    return max(1, min(teacher_depth, math.floor(student_layer * teacher_depth / student_depth + 0.5)))


def feature_key(teacher_index: int, layer: int) -> str:
    """The batch key of teacher i's features at a layer (cached pooled or in-loop per token)."""
    return f"feat:{teacher_index}:{layer}"


@dataclass(frozen=True)
class TeacherShape:
    name: str
    layers: int
    hidden: int


class InLoopTeachers:
    """Teachers run inside the training loop (eval mode, no_grad) for per-token hidden states.

    Held by an Auxiliary as a plain attribute, not a submodule: the teachers'
    weights are neither trained nor checkpointed.
    """

    def __init__(self, models: list, encodings: list, layers: list[tuple[int, ...]], device):
        import torch

        self.models, self.encodings, self.layers = models, encodings, layers
        self.device = torch.device(device)
        for model in models:
            model.to(self.device)
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, index: np.ndarray, device) -> dict:
        import torch

        started = time.perf_counter()
        out = {}
        with torch.no_grad():
            for i, (model, encoded, layers) in enumerate(zip(self.models, self.encodings, self.layers)):
                if not layers:
                    continue
                states = model(**encoded.batch(index, device), output_hidden_states=True).hidden_states
                for layer in layers:
                    out[feature_key(i, layer)] = states[layer].float()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return out


@dataclass
class FeatureSources:
    """What amalgamate hands a feature-level method: cached features and teachers for the loop."""

    teachers: list                  # teacher records, in the objective's order
    dataset: object                 # the transfer dataset
    runner: object                  # probe Runner (the cache)
    texts: list[str]
    student_encoding: object        # the student's Encoded transfer rows
    max_length: int
    device: str
    say: Callable[[str], None] = print
    _encodings: dict = field(default_factory=dict, init=False, repr=False)

    def shapes(self) -> tuple[TeacherShape, ...]:
        return tuple(_shape(t) for t in self.teachers)

    def cached(self, layers: dict[int, tuple[int, ...]]) -> dict[str, np.ndarray]:
        """{feature_key(i, layer): (n, d) memory-mapped pooled features} from the probe cache."""
        from kamalcli.probe.arrays import ProbeArrays

        out = {}
        for i, wanted in layers.items():
            if not wanted:
                continue
            teacher = self.teachers[i]
            probe, computed = self.runner.feature_probe(teacher, self.dataset, self.max_length, tuple(wanted))
            if computed:
                self.say(f"Cached the mean-pooled features of {teacher.name}'s layers {', '.join(map(str, wanted))} "
                         f"on {self.dataset.name} (one deterministic pass; reused from now on).")
            arrays = ProbeArrays.load(Path(probe.path))
            for layer in wanted:
                out[feature_key(i, layer)] = arrays.features[layer]
        return out

    def cls_vectors(self, source: str) -> np.ndarray:
        """R(x): a frozen encoder's [CLS] vectors on the transfer rows, cached like a probe."""
        from kamalcli.probe.encoder import cls_vectors

        return cls_vectors(self.runner.workspace, source, self.texts, self.dataset.content_hash, self.max_length,
                           self.device, self.say)

    def _encoding(self, i: int):
        from kamalcli.models.batching import encode
        from kamalcli.models.loading import load_tokenizer

        if i not in self._encodings:
            from kamalcli.models.folder import transformers_config
            from kamalcli.models.loading import model_folder

            teacher = self.teachers[i]
            path = model_folder(teacher.path, f"teacher {teacher.name}")
            self._encodings[i] = encode(load_tokenizer(path), self.texts, self.max_length,
                                        config=transformers_config(path))
        return self._encodings[i]

    def misaligned(self) -> list[str]:
        """Teachers whose token ids differ from the student's on some transfer row."""
        return [t.name for i, t in enumerate(self.teachers) if not _same_tokens(self._encoding(i), self.student_encoding)]

    def shared_encoding(self):
        """The teachers' common tokenisation of the transfer rows, or None if they tokenise differently."""
        first = self._encoding(0)
        if all(_same_tokens(first, self._encoding(i)) for i in range(1, len(self.teachers))):
            return first
        return None

    def in_loop(self, layers: dict[int, tuple[int, ...]], models: list | None = None) -> InLoopTeachers:
        """models: the teachers to run (default: loaded from their folders)."""
        from kamalcli.models.loading import load_classifier

        models = models or [load_classifier(t.path, owner=f"teacher {t.name}") for t in self.teachers]
        encodings = [self._encoding(i) for i in range(len(self.teachers))]
        per_teacher = [tuple(layers.get(i, ())) for i in range(len(self.teachers))]
        return InLoopTeachers(models, encodings, per_teacher, self.device)


def _shape(teacher) -> TeacherShape:
    """A teacher's depth and width as recorded, else read from its folder (an older kamal recorded none
    for configs with other key names, such as GPT-2's n_layer / n_embd)."""
    layers, hidden = teacher.num_layers, teacher.hidden_size
    if not layers or not hidden:
        from kamalcli.models.folder import depth_and_width
        from kamalcli.models.loading import model_folder

        read = depth_and_width(model_folder(teacher.path, f"teacher {teacher.name}"))
        layers, hidden = layers or read[0], hidden or read[1]
    if not layers or not hidden:
        raise KamalError(f"feature-level methods need the number of layers and hidden size of teacher "
                         f"{teacher.name}, and kamal cannot read them from its config.json; choose an "
                         "output-level method (kamal methods)")
    return TeacherShape(teacher.name, layers, hidden)


def _same_tokens(a, b) -> bool:
    """Two encodings of the same texts give every row the same token ids."""
    return len(a.ids) == len(b.ids) and all(len(x) == len(y) and np.array_equal(x, y) for x, y in zip(a.ids, b.ids))


# -- what the methods build on --------------------------------------------------

@dataclass
class TeacherFeatures:
    pooled: bool
    arrays: dict[str, np.ndarray]   # cached pooled features (memory-mapped), merged into the objective's arrays
    stream: object | None           # InLoopTeachers, when per token


def teacher_features(context: FeatureContext, layers: dict[int, tuple[int, ...]], source: str,
                     method: str, models: list | None = None) -> TeacherFeatures:
    """source: "tokens" (teachers in the loop; `models` replace the registered ones) or "pooled" (the probe cache)."""
    if source == "tokens":
        misaligned = context.sources.misaligned()
        if misaligned and models is not None:
            raise KamalError(f"{method}: {', '.join(misaligned)} tokenise the text differently from the student; "
                             "fine-tuned teachers can only be matched per token")
        if misaligned:
            context.say(f"{method}: {', '.join(misaligned)} tokenise the text differently from the student, so "
                        "per-token states cannot be matched; using mean-pooled features from the probe cache.")
            source = "pooled"
    if source == "pooled":
        return TeacherFeatures(True, context.sources.cached(layers), None)
    return TeacherFeatures(False, {}, context.sources.in_loop(layers, models))


class FeatureAuxiliary(Auxiliary):
    """An Auxiliary over teacher features: per token (teachers in the loop) or pooled (cached)."""

    def __init__(self, features: TeacherFeatures, weight: float = 1.0):
        super().__init__()
        self.pooled = features.pooled
        self.weight = weight
        self.__dict__["stream"] = features.stream  # a plain attribute: teachers are not trained or checkpointed

    def batch(self, index: np.ndarray, device) -> dict[str, torch.Tensor]:
        return self.stream(index, device) if self.stream is not None else {}

    def student(self, view: StudentView, layer: int) -> torch.Tensor:
        states = view.hidden_states[layer]
        return mean_pool(states, view.attention_mask) if self.pooled else states

    @staticmethod
    def teacher(batch: dict[str, torch.Tensor], i: int, layer: int) -> torch.Tensor:
        return batch[feature_key(i, layer)]

    def mask(self, view: StudentView) -> torch.Tensor | None:
        return None if self.pooled else view.attention_mask

    def report(self) -> dict:
        if self.stream is None:
            return {"teacher_features": "cached, mean-pooled"}
        return {"teacher_features": "in the loop, per token", "teacher_seconds": round(self.stream.seconds, 3),
                "teacher_batches": self.stream.calls}
