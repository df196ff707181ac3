"""Teacher-steered text generation (StrataNet's weighted decoding), batched over prompts.

token steering (the paper): at every step keep the causal LM's top-m tokens,
rescore each by  log p_LM(token) + lambda * log p_T(c | text + token),  and
sample from the nucleus (p = 0.9) of the rescored distribution. The LM's and
the teacher's tokenisers differ: each candidate continuation is decoded to text
and re-encoded by the teacher; all candidates of a step (every row, every
token) go through the teacher in one batched forward. The LM keeps its KV cache
and reads one new token per row per step; a text that has ended leaves the batch.

chunk steering (kamal's cheaper option): each row draws K continuations of a
few tokens from the LM alone (top-m, nucleus), the teacher scores the K texts
once, and one is kept with probability proportional to p_T(c | text)^lambda
(sampling-importance-resampling: the kept text follows p_LM * p_T^lambda up to
the finite K). The teacher runs once per chunk instead of once per token. A text
whose kept continuation has ended leaves the batch with its K rows. K is
chunk_candidates for a text's first chunk and later_candidates after it.

What a candidate is scored by (both modes): with `contrast` (kamal's default) p(c | text)
under the teachers' ensemble, the softmax over every teacher's logits concatenated (the
mass of a label two teachers share summed): the text must then be class c for its teacher
*and* look like nothing another teacher knows better. Without it (the paper), the steering
teacher's own p(c).

lambda = 0 is plain generation (top-m, nucleus): the teacher is never asked.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F

Mode = Literal["token", "chunk"]


@dataclass(frozen=True)
class SteeringConfig:
    strength: float = 3.0        # lambda
    top_m: int = 20              # candidates kept from the LM per step
    top_p: float = 0.9           # nucleus over the (rescored) candidates
    max_new_tokens: int = 32
    mode: Mode = "token"
    chunk_tokens: int = 8        # chunk steering: tokens per chunk
    chunk_candidates: int = 8    # chunk steering: continuations drawn per row for a text's first chunk
    later_candidates: int | None = None  # ... and for its later chunks (None: chunk_candidates)


@dataclass
class Timing:
    lm_seconds: float = 0.0
    teacher_seconds: float = 0.0
    decode_seconds: float = 0.0
    teacher_rows: int = 0
    new_tokens: int = 0

    def add(self, other: "Timing") -> None:
        for name in ("lm_seconds", "teacher_seconds", "decode_seconds", "teacher_rows", "new_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


class TeacherScorer:
    """log p_T(class | text) for many texts in one forward pass of a classifier."""

    def __init__(self, model, tokenizer, max_length: int, device):
        self.model, self.tokenizer, self.max_length, self.device = model, tokenizer, max_length, torch.device(device)
        self.model.to(self.device).eval()

    @torch.inference_mode()
    def logits(self, texts: list[str]) -> torch.Tensor:
        """(n, k) logits over the teacher's classes."""
        encoded = self.tokenizer([t if t.strip() else " " for t in texts], padding=True, truncation=True,
                                 max_length=self.max_length, return_tensors="pt").to(self.device)
        return self.model(**encoded).logits.float().cpu()

    def log_probs(self, texts: list[str]) -> torch.Tensor:
        """(n, k) log-probabilities over the teacher's classes."""
        return F.log_softmax(self.logits(texts), dim=-1)


class EnsembleScorer:
    """log p(label | text) under the teachers' ensemble: the softmax over every teacher's logits concatenated,
    the mass of a label two teachers share summed. Columns follow `labels` (each distinct label once)."""

    def __init__(self, scorers: list[TeacherScorer], teacher_labels: list[list[str]]):
        self.scorers = scorers
        self.labels = list(dict.fromkeys(label for labels in teacher_labels for label in labels))
        columns = [self.labels.index(label) for labels in teacher_labels for label in labels]
        self._sum = F.one_hot(torch.tensor(columns), len(self.labels)).float()  # (all classes, distinct labels)

    def index(self, label: str) -> int:
        return self.labels.index(label)

    def log_probs(self, texts: list[str]) -> torch.Tensor:
        probs = torch.cat([s.logits(texts) for s in self.scorers], dim=1).softmax(dim=-1)
        return (probs @ self._sum).clamp(min=1e-30).log()


@dataclass
class CausalLM:
    model: object
    tokenizer: object
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    def prompt_ids(self, prompt: str) -> list[int]:
        """The prompt as the LM expects it: its chat template when it has one (an instruct model)."""
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                          tokenize=True)
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids
            return list(ids)
        return list(tok(prompt)["input_ids"])

    @property
    def eos_ids(self) -> set[int]:
        eos = self.tokenizer.eos_token_id
        return set(eos if isinstance(eos, list) else [eos]) - {None}

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else min(self.eos_ids or {0})

    def decode(self, rows: list[list[int]]) -> list[str]:
        return self.tokenizer.batch_decode(rows, skip_special_tokens=True)


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero all but the smallest set of highest probabilities whose sum reaches top_p; renormalised. (..., n)"""
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered
    kept = torch.where(before < top_p, ordered, torch.zeros_like(ordered))
    out = torch.zeros_like(probs).scatter(-1, order, kept)
    return out / out.sum(dim=-1, keepdim=True)


@contextlib.contextmanager
def quiet_lm_warnings():
    """transformers' FutureWarning that `past_key_values` is deprecated (kamal passes the KV cache it was given
    back): silenced for kamal's own calls of the LM only; every other warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`past_key_values` is deprecated", category=FutureWarning)
        yield


class _Stepper:
    """The LM over a batch of left-padded prompts, one KV cache, fed one token per row per step."""

    def __init__(self, lm: CausalLM, prompts: list[list[int]]):
        self.lm = lm
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), lm.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - len(p):] = torch.tensor(p)
            mask[r, width - len(p):] = 1
        self.mask = mask.to(lm.device)
        self.positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        self.cache = None
        self.logits = self._forward(ids.to(lm.device), self.positions)

    @torch.inference_mode()
    def _forward(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        with quiet_lm_warnings():
            out = self.lm.model(input_ids=ids, attention_mask=self.mask, position_ids=positions,
                                past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        return F.log_softmax(out.logits[:, -1].float(), dim=-1).cpu()

    def feed(self, tokens: torch.Tensor) -> None:
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        self.positions = self.positions[:, -1:] + 1
        self.logits = self._forward(tokens.view(-1, 1).to(self.lm.device), self.positions)

    def select(self, rows: torch.Tensor) -> None:
        """Keep (and repeat) these rows: the cache, the mask and the last log-probabilities follow."""
        self.cache.reorder_cache(rows.to(self.lm.device))
        self.mask = self.mask[rows.to(self.mask.device)]
        self.positions = self.positions[rows.to(self.positions.device)]
        self.logits = self.logits[rows]


def generate(lm: CausalLM, scorer: TeacherScorer | EnsembleScorer | None, class_index: int, prompts: list[str],
             config: SteeringConfig, seed: int) -> tuple[list[str], Timing]:
    """One text per prompt, steered towards column `class_index` of the scorer's log_probs (same seed, same
    texts)."""
    generator = torch.Generator().manual_seed(seed)
    timing = Timing()
    steer = scorer is not None and config.strength != 0
    started = time.perf_counter()
    stepper = _Stepper(lm, [lm.prompt_ids(p) for p in prompts])
    timing.lm_seconds += time.perf_counter() - started
    run = _token_steering if config.mode == "token" or not steer else _chunk_steering
    rows = run(lm, stepper, scorer if steer else None, class_index, len(prompts), config, generator, timing)
    return [t.strip() for t in lm.decode(rows)], timing


def _candidates(log_probs: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    return log_probs.topk(min(m, log_probs.shape[-1]), dim=-1)


def _teacher_log_prob(scorer: TeacherScorer | EnsembleScorer, lm: CausalLM, rows: list[list[int]], class_index: int,
                      timing: Timing) -> torch.Tensor:
    started = time.perf_counter()
    texts = lm.decode(rows)
    timing.decode_seconds += time.perf_counter() - started
    started = time.perf_counter()
    scores = scorer.log_probs(texts)[:, class_index]
    timing.teacher_seconds += time.perf_counter() - started
    timing.teacher_rows += len(rows)
    return scores


def _token_steering(lm, stepper, scorer, class_index, n, config, generator, timing) -> list[list[int]]:
    generated: list[list[int]] = [[] for _ in range(n)]
    alive = list(range(n))  # the prompt each of the stepper's rows belongs to: a text that has ended leaves
    for step in range(config.max_new_tokens):
        lp_lm, ids = _candidates(stepper.logits, config.top_m)            # (rows, m)
        score = lp_lm
        if scorer is not None:
            rows = [generated[r] + [t] for r, tokens in zip(alive, ids.tolist()) for t in tokens]
            lp_t = _teacher_log_prob(scorer, lm, rows, class_index, timing).view(len(alive), -1)
            score = lp_lm + config.strength * lp_t
        pick = torch.multinomial(nucleus(score.softmax(dim=-1), config.top_p), 1, generator=generator).flatten()
        tokens = ids.gather(1, pick[:, None]).flatten()
        going = []
        for row, (r, token) in enumerate(zip(alive, tokens.tolist())):
            if token not in lm.eos_ids:
                generated[r].append(token)
                going.append(row)
        timing.new_tokens += len(going)
        if not going or step == config.max_new_tokens - 1:  # nothing more to read the LM's next token for
            break
        started = time.perf_counter()
        if len(going) < len(alive):
            stepper.select(torch.tensor(going))
            alive, tokens = [alive[row] for row in going], tokens[going]
        stepper.feed(tokens)
        timing.lm_seconds += time.perf_counter() - started
    return generated


def _chunk_steering(lm, stepper, scorer, class_index, n, config, generator, timing) -> list[list[int]]:
    """Each open text draws candidate continuations of a chunk, the scorer reads every one of them in one batch,
    and one is kept per text. A text that has ended leaves the batch. A chunk's last token is fed to the LM for the
    kept continuation only (one row a text). A text's first chunk draws chunk_candidates continuations and its
    later chunks later_candidates: the first chunk sets what a text is about, and there the teacher's weights
    tell the candidates apart most. One candidate needs no teacher."""
    text: list[list[int]] = [[] for _ in range(n)]
    owner = list(range(n))  # the text each of the stepper's rows belongs to, one row per open text
    produced = 0
    while owner and produced < config.max_new_tokens:
        k = config.chunk_candidates if produced == 0 else (config.later_candidates or config.chunk_candidates)
        if k > 1:  # owner[i]'s candidates: rows i*k .. i*k+k-1 (with one, the stepper's rows already are)
            stepper.select(torch.arange(len(owner)).repeat_interleave(k))
        steps = min(config.chunk_tokens, config.max_new_tokens - produced)
        produced += steps
        chunk, done = _draw_chunk(lm, stepper, len(owner) * k, steps, config, generator, timing)
        chosen = torch.zeros(len(owner), dtype=torch.long)
        if k > 1:
            rows = [text[r] + c for r, c in zip((r for r in owner for _ in range(k)), chunk)]
            lp_t = _teacher_log_prob(scorer, lm, rows, class_index, timing).view(len(owner), k)
            chosen = torch.multinomial((config.strength * lp_t).softmax(dim=-1), 1, generator=generator).flatten()
        winners = [i * k + int(c) for i, c in enumerate(chosen)]
        for r, w in zip(owner, winners):
            text[r] += chunk[w]
        going = [w for w in winners if not done[w]]
        owner = [r for r, w in zip(owner, winners) if not done[w]]
        if going and produced < config.max_new_tokens:
            started = time.perf_counter()
            stepper.select(torch.tensor(going))
            stepper.feed(torch.tensor([chunk[w][-1] for w in going]))
            timing.lm_seconds += time.perf_counter() - started
    timing.new_tokens += sum(len(t) for t in text)
    return text


def _draw_chunk(lm, stepper, rows: int, steps: int, config, generator, timing) -> tuple[list[list[int]], list[bool]]:
    """`steps` tokens for every row from the LM alone (top-m, nucleus). The stepper reads every token but the
    last: the caller feeds that one for the continuations it keeps."""
    chunk: list[list[int]] = [[] for _ in range(rows)]
    done = [False] * rows
    for step in range(steps):
        lp_lm, ids = _candidates(stepper.logits, config.top_m)
        pick = torch.multinomial(nucleus(lp_lm.softmax(dim=-1), config.top_p), 1, generator=generator).flatten()
        tokens = ids.gather(1, pick[:, None]).flatten()
        for row, token in enumerate(tokens.tolist()):
            if done[row] or token in lm.eos_ids:
                done[row] = True
                tokens[row] = lm.pad_id
            else:
                chunk[row].append(token)
        if all(done) or step == steps - 1:
            break
        started = time.perf_counter()
        stepper.feed(tokens)
        timing.lm_seconds += time.perf_counter() - started
    return chunk, done
