"""The model engine: batched sampling with log-probs under one version of the weights, and loads."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from gemkit.errors import GemkitError
from gemkit.llm.sampling import SamplingParams
from gemkit.serving import (
    RequestError,
)
from gemkit.train.protocol import Sample
from gemkit.train.sequences import processed_logits

#: what `sample_batch` tells `on_step` after each step: the step, then per row still running
#: `(row, token, logprob, top)` (`top` the step's `(id, logprob)` alternatives, or [])
StepReport = Callable[[int, list[tuple[int, int, float, list[tuple[int, float]]]]], None]


@torch.no_grad()
def sample_batch(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_tokens: Sequence[int],
    *,
    temperature: float | None = None,
    sampling: SamplingParams | None = None,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None = None,
    cache_arg: str | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
    top: int = 0,
    on_step: StepReport | None = None,
) -> list[Sample]:
    """Sample a completion of each prompt with a KV cache; one `Sample` per row.

    Rows are left-padded with positions counted from each row's first real token (as the
    trainer's right-padded rows count them); a row ends at its EOS (kept) or its
    `max_tokens`. The distribution is `sampling` (or plain `temperature`); temperature 0
    decodes greedily and reports log-probs at temperature 1. `generators[i]` draws row `i`'s samples (rows that share one draw from it in order; None:
    `generator`), so a seeded request gets the same tokens whatever else is in the batch.
    `top` asks for the most likely `top` tokens of each step, under the same distribution.
    `on_step` hears each step's tokens as they are sampled (for streaming).
    `cache_arg` is the model's KV-cache argument name (found from its signature when None).
    """
    if sampling is None:
        sampling = SamplingParams(temperature=1.0 if temperature is None else temperature)
    device = model.device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        attn[i, width - len(p) :] = 1
    ids, attn = ids.to(device), attn.to(device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    cache_arg = cache_arg or _cache_argument(model)
    draws = _draw_groups(generators, generator, len(prompts), device)
    out = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True)
    limit = torch.tensor(list(max_tokens), device=device)
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    tokens: list[torch.Tensor] = []
    logps: list[torch.Tensor] = []
    tops: list[tuple[torch.Tensor, torch.Tensor]] = []
    next_pos = positions[:, -1:] + 1
    for step in range(int(limit.max())):
        logits = out.logits[:, -1, :].float()
        if sampling.temperature > 0:
            logp = torch.log_softmax(processed_logits(logits, sampling), dim=-1)
            tok = _draw(logp.exp(), draws)
        else:
            logp = torch.log_softmax(logits, dim=-1)
            tok = logp.argmax(-1)
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        tokens.append(tok)
        logps.append(logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1))
        if top:
            values, which = logp.topk(min(top, logp.shape[-1]), dim=-1)
            values = values.clamp(min=-9999.0)  # a cut token: vLLM's -9999, not -inf
            tops.append((which, values))
        if on_step is not None:
            _report(on_step, step, done, tok, logps[-1], tops[-1] if top else None)
        done = done | (tok == eos_id) | (step + 1 >= limit)
        if bool(done.all()):
            break
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=-1)
        cache = getattr(out, cache_arg)
        out = model(
            input_ids=tok.unsqueeze(-1),
            attention_mask=attn,
            position_ids=next_pos,
            use_cache=True,
            **{cache_arg: cache},
        )
        next_pos = next_pos + 1
    sampled = torch.stack(tokens, dim=1).tolist()
    logprobs = torch.stack(logps, dim=1).tolist()
    if top:
        top_ids = torch.stack([w for w, _ in tops], dim=1).tolist()
        top_values = torch.stack([v for _, v in tops], dim=1).tolist()
    results = []
    for r, (row, lps, cap) in enumerate(zip(sampled, logprobs, max_tokens, strict=True)):
        end = min(cap, len(row))
        if eos_id in row[:end]:
            end = row.index(eos_id) + 1
        alts = (
            [list(zip(top_ids[r][k], top_values[r][k], strict=True)) for k in range(end)]
            if top
            else []
        )
        results.append(Sample(row[:end], lps[:end], alts))
    return results


def _draw_groups(
    generators: Sequence[torch.Generator | None] | None,
    default: torch.Generator | None,
    rows: int,
    device: Any,
) -> list[tuple[torch.Tensor, torch.Generator | None]]:
    """The rows that draw from each generator, in order of first use."""
    if generators is None:
        return [(torch.arange(rows, device=device), default)]
    groups: dict[int, tuple[list[int], torch.Generator | None]] = {}
    for i, g in enumerate(generators):
        g = g if g is not None else default
        groups.setdefault(id(g), ([], g))[0].append(i)
    return [(torch.tensor(idx, device=device), g) for idx, g in groups.values()]


def _draw(probs: torch.Tensor, draws: list[tuple[torch.Tensor, torch.Generator | None]]) -> Any:
    if len(draws) == 1:
        return torch.multinomial(probs, 1, generator=draws[0][1]).squeeze(-1)
    tok = torch.empty(probs.shape[0], dtype=torch.long, device=probs.device)
    for idx, g in draws:
        tok[idx] = torch.multinomial(probs[idx], 1, generator=g).squeeze(-1)
    return tok


def _report(
    on_step: StepReport,
    step: int,
    done: torch.Tensor,
    tok: torch.Tensor,
    logp: torch.Tensor,
    top: tuple[torch.Tensor, torch.Tensor] | None,
) -> None:
    live = (~done).tolist()
    toks, lps = tok.tolist(), logp.tolist()
    which, values = (top[0].tolist(), top[1].tolist()) if top is not None else ([], [])
    rows = []
    for r, running in enumerate(live):
        if running:
            alts = list(zip(which[r], values[r], strict=True)) if top is not None else []
            rows.append((r, toks[r], lps[r], alts))
    on_step(step, rows)


def _cache_argument(model: Any) -> str:
    """The name of the KV-cache argument (and output): `cache` from transformers 5.2x on."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def unique_state(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The model's tensors without tied copies, and each tied name's source name."""
    state: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[int, torch.Size, torch.dtype], str] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tensor.shape, tensor.dtype)
        if key in seen:
            aliases[name] = seen[key]  # e.g. lm_head.weight tied to the embeddings
        else:
            seen[key] = name
            state[name] = tensor
    return state, aliases


class ModelEngine:
    """A causal LM, its tokenizer and its weight version; all calls on one worker thread.

    `names` are the model names requests may ask for (`name` first; `/v1/models` lists them).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        seed: int = 0,
        version: int = 0,
        names: Sequence[str] = (),
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.names = list(dict.fromkeys([name, *names]))
        self.version = version
        self.vocab_size = int(model.get_input_embeddings().weight.shape[0])
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
        self.eos_id = int(tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_id)
        self.generator = torch.Generator(device=model.device).manual_seed(seed)
        self.tokenizer_hash = vocab_hash(tokenizer)
        state, self._aliases = unique_state(model)
        self._shapes = {k: (v.shape, v.dtype) for k, v in state.items()}
        self.cache_arg = _cache_argument(model)  # once, not per batch

    def generate(
        self,
        prompts: list[list[int]],
        max_tokens: list[int],
        sampling: SamplingParams | float,
        *,
        generators: Sequence[torch.Generator | None] | None = None,
        top: int = 0,
        on_step: StepReport | None = None,
    ) -> tuple[int, list[Sample]]:
        """`(version, samples)`: one batch, all by one version (see `sample_batch`);
        `sampling` is the distribution, or a plain temperature."""
        rows = sample_batch(
            self.model,
            prompts,
            max_tokens,
            sampling=_params(sampling),
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            generator=self.generator,
            cache_arg=self.cache_arg,
            generators=generators,
            top=top,
            on_step=on_step,
        )
        return self.version, rows

    def seeded(self, seed: int) -> torch.Generator:
        """A generator of its own for a request's `seed`."""
        return torch.Generator(device=self.model.device).manual_seed(seed)

    def check_version(self, version: int) -> None:
        """Raise `RequestError(409)` unless `version` is the next one (see `load`)."""
        if version != self.version + 1:
            raise RequestError(
                409,
                f"weight_version must be the next version, {self.version + 1} (the server "
                f"holds {self.version}), got {version}; leave it out to take the next one",
            )

    def check_state(self, state: dict[str, torch.Tensor]) -> None:
        """Raise `RequestError(400)` unless `state` has exactly this model's tensors."""
        missing = sorted(set(self._shapes) - set(state))
        extra = sorted(set(state) - set(self._shapes))
        if missing or extra:
            raise RequestError(
                400,
                f"the weights must name exactly the model's {len(self._shapes)} tensors: "
                f"{len(missing)} missing (e.g. {missing[:2]}), {len(extra)} unknown "
                f"(e.g. {extra[:2]})",
            )
        for key, tensor in state.items():
            shape, _ = self._shapes[key]
            if tensor.shape != shape:
                raise RequestError(
                    400, f"tensor {key!r} has shape {list(tensor.shape)}, expected {list(shape)}"
                )
            if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all()):
                raise RequestError(400, f"tensor {key!r} must hold finite floating-point values")

    def load(self, state: dict[str, torch.Tensor], version: int | None = None) -> int:
        """Swap in checked weights as `version`: the next version (`None`: take it).

        Versions go up by one per update and never jump: no update can set a version that
        its trainer's next update would collide with, so no single request (a stray client,
        a typo) leaves the server refusing its trainer from then on. The operator sets the
        first version when starting the server (`--weight-version`).
        """
        version = self.version + 1 if version is None else version
        self.check_version(version)
        self.check_state(state)
        full = {**state, **{alias: state[source] for alias, source in self._aliases.items()}}
        self.model.load_state_dict(full, strict=True)
        self.version = version
        return version


def vocab_hash(tokenizer: Any) -> str:
    """A short hash of the tokenizer's vocabulary: client and server must share one."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab).encode()).hexdigest()[:16]


def _params(sampling: SamplingParams | float) -> SamplingParams:
    """A distribution from parameters or a plain temperature."""
    if isinstance(sampling, SamplingParams):
        return sampling
    return SamplingParams(temperature=float(sampling))


def load_engine(
    path: str | None = None,
    *,
    tiny: str | None = None,
    seed: int = 0,
    device: str = "cpu",
    names: Sequence[str] = (),
    version: int = 0,
) -> ModelEngine:
    """A `ModelEngine` over a local model folder, or over `--tiny ENV`'s tiny random model.

    Requests may name the model by `names` (vLLM's `--served-model-name`; the folder, or
    `tiny:ENV`, when none are given); its weights start as `version`.
    """
    from gemkit.train.tiny import load_policy, tiny_policy

    if (path is None) == (tiny is None):
        raise GemkitError("pass a model folder PATH or --tiny ENV_ID (one of them)")
    if path is not None and not Path(path).is_dir():
        raise GemkitError(
            f"{path!r} is not a folder; pass a local Hugging Face model folder (config.json, "
            "weights, tokenizer files) or --tiny ENV_ID for a tiny random model"
        )
    try:
        model, tokenizer = tiny_policy(tiny, seed=seed) if tiny else load_policy(str(path))
    except OSError as e:
        raise GemkitError(f"cannot load the model in {path!r}: {e}") from None
    if version < 0:
        raise GemkitError(f"--weight-version must be 0 or more, got {version}")
    default = f"tiny:{tiny}" if tiny else str(path)
    names = list(names) or [default]
    return ModelEngine(
        model.to(device), tokenizer, name=names[0], names=names, seed=seed, version=version
    )
