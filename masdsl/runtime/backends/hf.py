"""The `hf` engine: batched sampling with transformers `generate` and left padding.

The fallback when vLLM is not available, and the reference the tests compare against.

- Every request becomes `n` rows; rows with the same sampling parameters (temperature,
  top_p, max_tokens, stop, top_k, min_p, repetition_penalty) are padded on the left and
  sampled in one `generate` call (chunked by `max_batch_rows`). `top_k` is off unless a
  request sets it (`top_k <= 0`: the full distribution, unlike transformers' default
  `top_k=50`); `min_p` likewise (0: off). Warpers apply in transformers' order: temperature,
  top-k, top-p, min-p.
- `temperature == 0` is greedy decoding (top_k, top_p, min_p do not apply; a
  `repetition_penalty` does, as in vLLM).
- `repetition_penalty != 1` runs transformers' `RepetitionPenaltyLogitsProcessor` (prompt and
  generated tokens, like vLLM) *after* the log-prob recorder, so log-probs stay raw.
- The rows of one request share its prompt: each distinct prompt is prefilled once and its KV
  cache copied to its rows (`_shared_prompt_cache`), about 10 % faster generation at K = 4 on
  chat prompts of ~40 tokens, more with longer prompts.
- Token ids are exactly the sampled ids, including the eos token when the model emitted it
  (the learner must see the stop decision). A stop string ends the row at the token that
  completes it (kept in `token_ids`, like vLLM); `text` is cut before the stop string.
- Log-probs: for each sampled token, `log_softmax(raw logits)[token]`, i.e. the policy's own
  log-probability at temperature 1 — *not* the tempered / top-p-truncated sampling
  distribution. This is what the PPO ratio `pi_new / pi_old` needs, since the learner computes
  `pi_new` with a plain forward pass. For `temperature == 1, top_p == 1` the two coincide;
  vLLM's `logprobs_mode="raw_logprobs"` returns the same quantity.
- `autocast="bfloat16"` (a GPU run with `runtime.dtype=bfloat16`, sampling from the learner's
  float32 object): the prefill and `generate` run under that autocast; log-probs are then those
  of the half-precision forward (the learner recomputes the old log-probs itself for a half
  dtype: `train.old_logprobs=auto`).
- Determinism: each generate call runs under `torch.random.fork_rng` seeded from the engine's
  seed (or the request's `seed`) and a call counter, so the same sequence of calls gives the
  same samples on CPU and the global RNG of the learner is left untouched.

The engine holds the *same* model object the learner trains (pass it in), so weights are
shared: `update_weights` is a no-op for tensors that already are the model's own, and a
`load_state_dict` copy otherwise (a state dict from another copy of the model).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from masdsl.errors import ModelError
from masdsl.runtime.backends.base import Candidate, GenRequest, LocalEngine

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase


def _group_key(r: GenRequest) -> tuple:
    # no seed in the key: requests with different seeds still share one batch (see _mix_seeds)
    return (float(r.temperature), float(r.top_p), int(r.max_tokens), tuple(r.stop),
            int(getattr(r, "top_k", 0) or 0), float(getattr(r, "min_p", 0.0) or 0.0),
            float(getattr(r, "repetition_penalty", 1.0) or 1.0), bool(getattr(r, "logprobs", True)))


def generation_config(key: tuple, eos_ids: list[int], pad_id: int) -> Any:
    """The transformers `GenerationConfig` of one row group (`_group_key`), penalty aside.

    >>> c = generation_config((0.7, 0.9, 8, (), 5, 0.05, 1.0), [2], 0)
    >>> c.do_sample, c.temperature, c.top_p, c.top_k, c.min_p, c.max_new_tokens
    (True, 0.7, 0.9, 5, 0.05, 8)
    >>> c = generation_config((0.0, 0.9, 8, (), 5, 0.05, 1.0), [2], 0)
    >>> c.do_sample, c.top_k, c.min_p
    (False, None, None)
    """
    from transformers import GenerationConfig  # heavy: transformers is optional (the train extra)

    temperature, top_p, max_tokens, _stops, top_k, min_p = key[:6]
    greedy = temperature <= 0.0
    return GenerationConfig(
        do_sample=not greedy,
        temperature=None if greedy else temperature,
        top_p=None if greedy else top_p,
        top_k=None if greedy else (top_k if top_k > 0 else 0),
        min_p=None if greedy or min_p <= 0 else min_p,
        max_new_tokens=max_tokens,
        eos_token_id=eos_ids,
        pad_token_id=pad_id,
        bos_token_id=None,
    )


def _mix_seeds(seeds: Sequence[int | None]) -> int:
    """One batch seed from the rows' request seeds: the same requests give the same samples.

    >>> _mix_seeds([1, 2]) == _mix_seeds([1, 2]) != _mix_seeds([2, 1])
    True
    """
    return int.from_bytes(hashlib.sha256(repr(list(seeds)).encode()).digest()[:4], "big") & 0x7FFFFFFF


def first_stop(text: str, stops: list[str] | tuple[str, ...]) -> int:
    """Index in `text` of the earliest stop string, or -1.

    >>> first_stop("abc```\\n\\nxyz", ["```\\n\\n", "xyz"])
    3
    >>> first_stop("abc", ["z"])
    -1
    """
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(hits) if hits else -1


@dataclass
class _Row:
    req: int  # request index
    prompt: list[int]


class HFEngine(LocalEngine):
    """`Engine` over a transformers causal LM (see the module docstring for the semantics)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        seed: int = 0,
        max_batch_rows: int = 64,
        adapter: str | None = None,
        autocast: str | None = None,
    ) -> None:
        self.model = model
        self.autocast = autocast  # "bfloat16" / "float16": sample under that autocast (a GPU's learner object)
        self.tokenizer = tokenizer
        self.seed = seed
        self.max_batch_rows = max_batch_rows
        self.adapter = adapter  # peft: the adapter to activate before generating
        self.takes_adapter = adapter is not None  # a copy's update_weights takes the adapter's weights
        self._rng = random.Random(seed)
        tokenizer.padding_side = "left"
        eos = getattr(model.generation_config, "eos_token_id", None)
        eos = eos if isinstance(eos, list) else [eos] if eos is not None else []
        if tokenizer.eos_token_id is not None:
            eos.append(tokenizer.eos_token_id)
        self.eos_ids = sorted({int(e) for e in eos})
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_ids[0])

    # -- Engine API ---------------------------------------------------------------------------

    def generate(self, requests: list[GenRequest]) -> list[list[Candidate]]:
        """One list of `request.n` candidates per request, in request order."""
        out: list[list[Candidate]] = [[] for _ in requests]
        groups: dict[tuple, list[_Row]] = {}
        for i, r in enumerate(requests):
            if r.max_tokens < 1:
                raise ValueError(f"request {i}: max_tokens must be >= 1, got {r.max_tokens}")
            if not r.prompt_ids:
                raise ValueError(f"request {i}: empty prompt_ids")
            groups.setdefault(_group_key(r), []).extend(
                _Row(i, list(r.prompt_ids)) for _ in range(r.n)
            )
        for key, rows in groups.items():
            for start in range(0, len(rows), self.max_batch_rows):
                chunk = rows[start : start + self.max_batch_rows]
                seeds = [requests[row.req].seed for row in chunk]
                seed = self._rng.randrange(2**31) if None in seeds else _mix_seeds(seeds)
                for row, cand in zip(chunk, self._generate_rows(chunk, key, seed)):
                    out[row.req].append(cand)
        return out

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Make the next `generate` use `state_dict`'s weights.

        Tensors that already are this model's own parameters (the learner trains the same
        object) are skipped; others are copied in place. Keys must all be known. An adapter
        engine takes the adapter's weights as peft saves them (`get_peft_model_state_dict`).
        """
        import torch  # heavy: torch is optional (the train extra)

        if self.adapter is not None and hasattr(self.model, "peft_config"):  # a copy's adapter, as peft names it
            from peft import set_peft_model_state_dict  # heavy: peft only for LoRA policies

            set_peft_model_state_dict(self.model, state_dict, adapter_name=self.adapter)
            return
        own = self.model.state_dict()
        unknown = [k for k in state_dict if k not in own]
        if unknown:
            raise ModelError(f"update_weights: unknown parameter names {unknown[:5]}")
        with torch.no_grad():
            for name, value in state_dict.items():
                dst = own[name]
                if dst.data_ptr() == value.data_ptr() and dst.shape == value.shape:
                    continue  # shared: already in place
                dst.copy_(value.to(device=dst.device, dtype=dst.dtype))

    def close(self) -> None:
        self.model = None

    # -- internals ----------------------------------------------------------------------------

    def _generate_rows(self, rows: list[_Row], key: tuple, seed: int) -> list[Candidate]:
        import torch  # heavy: torch is optional (the train extra)
        from transformers import (  # heavy: transformers is optional (the train extra)
            LogitsProcessorList,
            RepetitionPenaltyLogitsProcessor,
            StoppingCriteriaList,
        )

        stops, penalty, wants_logprobs = key[3], key[6], key[7]
        model = self.model
        device = next(model.parameters()).device
        width = max(len(r.prompt) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r.prompt) :] = torch.tensor(r.prompt)
            mask[i, width - len(r.prompt) :] = 1
        cfg = generation_config(key, self.eos_ids, self.pad_id)
        recorder = _LogprobRecorder() if wants_logprobs else None
        processors: list[Any] = [recorder] if recorder else []  # first: it records the raw logits
        if penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(penalty=penalty))
        criteria = StoppingCriteriaList([_StopStrings(self.tokenizer, stops, width)] if stops else [])
        was_training = model.training
        if self.adapter is not None and hasattr(model, "set_adapter"):
            model.set_adapter(self.adapter)
        model.eval()
        half = (torch.autocast(device.type, dtype=getattr(torch, self.autocast)) if self.autocast
                else contextlib.nullcontext())
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad(), half:
                torch.manual_seed(seed)
                seqs = model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    generation_config=cfg,
                    logits_processor=LogitsProcessorList(processors),
                    stopping_criteria=criteria,
                    past_key_values=_shared_prompt_cache(model, ids, mask, [tuple(r.prompt) for r in rows]),
                )
        finally:
            model.train(was_training)
        gen = seqs[:, width:].cpu()
        logps = recorder.finish(gen).tolist() if recorder else [[] for _ in rows]
        return [self._candidate(gen[i].tolist(), logps[i], stops) for i in range(len(rows))]

    def _candidate(self, ids: list[int], logps: list[float], stops: tuple[str, ...]) -> Candidate:
        eos = set(self.eos_ids)
        end, reason = len(ids), "length"
        for i, t in enumerate(ids):
            if t in eos:
                end, reason = i + 1, "stop"
                break
        if stops:
            k = self._stop_end(ids[:end], stops)
            if k is not None:
                end, reason = k, "stop"
        text = self.tokenizer.decode(ids[:end], skip_special_tokens=True)
        cut = first_stop(text, stops)
        if cut >= 0:
            text = text[:cut]
        return Candidate(token_ids=ids[:end], text=text, logprobs=logps[:end], finish_reason=reason)

    def _stop_end(self, ids: list[int], stops: tuple[str, ...]) -> int | None:
        """Smallest k such that decode(ids[:k]) contains a stop string (binary search)."""

        def hit(k: int) -> bool:
            return first_stop(self.tokenizer.decode(ids[:k], skip_special_tokens=True), stops) >= 0

        if not ids or not hit(len(ids)):
            return None
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if hit(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo


def _shared_prompt_cache(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, prompts: list[tuple[int, ...]]) -> Any:
    """A KV cache of every row's prompt but its last token, each distinct prompt run once.

    The K candidates of one request are K rows with the same prompt; `generate` would run that
    prompt K times. Here the distinct prompts run once (left-padded like the rows, positions
    counting real tokens only, as `generate` counts them) and the cache is gathered to one row
    per candidate; `generate` then starts from the prompts' last token. None (let `generate`
    prefill) when no prompt repeats or a prompt is a single token.
    """
    import torch  # heavy: torch is optional (the train extra)

    slot: dict[tuple[int, ...], int] = {}  # distinct prompt -> its row in the prefill batch
    first_rows: list[int] = []
    for i, p in enumerate(prompts):
        if p not in slot:
            slot[p] = len(first_rows)
            first_rows.append(i)
    if len(first_rows) == len(prompts) or ids.shape[1] < 2:
        return None
    rows = torch.tensor(first_rows)
    pick = torch.tensor([slot[p] for p in prompts])
    device = next(model.parameters()).device
    att = mask[rows, :-1]
    pos = (att.cumsum(-1) - 1).masked_fill(att == 0, 1)
    out = model(input_ids=ids[rows, :-1].to(device), attention_mask=att.to(device), position_ids=pos.to(device),
                use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.batch_select_indices(pick.to(device))
    return cache


class _LogprobRecorder:
    """A logits processor that sees the raw logits first and records the sampled tokens'
    log-softmax (one step late, when the sampled token appears in `input_ids`)."""

    def __init__(self) -> None:
        self.prev: torch.Tensor | None = None  # log-softmax of the last scores seen
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch  # heavy: torch is optional (the train extra)

        if self.prev is not None:
            self.steps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, gen: torch.Tensor) -> torch.Tensor:
        import torch  # heavy: torch is optional (the train extra)

        g = gen.shape[1]
        steps = self.steps[:g]
        if len(steps) < g:  # the last sampled token was never fed back
            assert self.prev is not None  # its scores were (every sampled token had scores)
            steps.append(self.prev.gather(1, gen[:, g - 1 : g].to(self.prev.device)).squeeze(1))
        return torch.stack(steps, dim=1).cpu() if steps else torch.zeros((gen.shape[0], 0))


class _StopStrings:
    """Stopping criterion: a row is done once the tail of its generated text holds a stop string."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stops: tuple[str, ...], prompt_len: int) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.prompt_len = prompt_len
        self.tail = max(len(s.encode()) for s in stops) + 2

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
        import torch  # heavy: torch is optional (the train extra)

        gen = input_ids[:, self.prompt_len :]
        tails = gen[:, -self.tail :].tolist()
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=True)
        done = [first_stop(t, self.stops) >= 0 for t in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
