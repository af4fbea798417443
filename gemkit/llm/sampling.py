"""Sampling parameters named in full on every token request, and what a server's log-probs mean.

A trainer's importance ratio divides the learner's probability of a sampled token by the
*behaviour* probability: that of the distribution the token was actually drawn from. Two
things a real server does break that unless every request says everything:

- **Server defaults fill what a request leaves open.** vLLM applies a checkpoint's
  `generation_config.json` (the official Qwen folders set top-k 20, top-p 0.8 and a
  repetition penalty of 1.05); llama.cpp samples with top-k 40, top-p 0.95 and min-p 0.05
  unless told otherwise. So `SamplingParams.request_fields` names every parameter, the
  neutral ones too, and each turn records them (`TurnTokens.sampling`).
- **Reported log-probs may be of another distribution.** vLLM reports the raw model's
  log-probs (temperature 1, before top-k/top-p) unless started with
  `--logprobs-mode processed_logprobs`. `gemkit.llm.token_policy.logprobs_kind` asks the
  server once: a request with `top_k=1` leaves one token in the sampling distribution, whose
  processed log-prob is exactly 0, while a raw log-prob is the model's own (below 0).

The learner recomputes under the recorded parameters (`gemkit.train.sequences`); penalties
depend on every earlier token and are not recomputed there, so a trainer refuses them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gemkit.errors import GemkitError

#: log-probs of the distribution the token was sampled from (temperature, top-k, top-p applied)
PROCESSED = "processed"
#: log-probs of the raw model at temperature 1 (vLLM's default `--logprobs-mode raw_logprobs`)
RAW = "raw"


class SamplingError(GemkitError):
    """Sampling parameters that are out of range, or that a trainer cannot recompute."""


@dataclass(frozen=True)
class SamplingParams:
    """Every parameter of the sampling distribution; the defaults sample the full distribution.

    `top_k=-1` and `top_p=1.0` keep every token, `min_p=0.0` drops none, and the penalties
    are off. `temperature=0` decodes greedily.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def __post_init__(self) -> None:
        checks = [
            ("temperature", self.temperature, 0.0, math.inf, "a number >= 0 (0: greedy)"),
            ("top_p", self.top_p, 1e-9, 1.0, "a number in (0, 1] (1: off)"),
            ("min_p", self.min_p, 0.0, 1.0, "a number in [0, 1] (0: off)"),
            (
                "repetition_penalty",
                self.repetition_penalty,
                1e-9,
                math.inf,
                "a number > 0 (1: off)",
            ),
            ("presence_penalty", self.presence_penalty, -2.0, 2.0, "a number in [-2, 2] (0: off)"),
            (
                "frequency_penalty",
                self.frequency_penalty,
                -2.0,
                2.0,
                "a number in [-2, 2] (0: off)",
            ),
        ]
        for name, value, lo, hi, expected in checks:
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (lo <= value <= hi)
            ):
                raise SamplingError(f"{name} must be {expected}, got {value!r}")
        top_k = self.top_k
        if (
            isinstance(top_k, bool)
            or not isinstance(top_k, int)
            or (top_k < 1 and top_k not in (0, -1))
        ):
            raise SamplingError(f"top_k must be an integer >= 1, or -1 for off, got {top_k!r}")
        if top_k == 0:  # vLLM and SGLang read 0 as off too; one spelling is recorded
            object.__setattr__(self, "top_k", -1)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SamplingParams:
        """Parameters from a recorded dict (unknown keys, such as `logprobs`, are ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def truncates(self) -> bool:
        """Whether tokens are cut from the distribution (top-k, top-p or min-p)."""
        return self.top_k != -1 or self.top_p < 1.0 or self.min_p > 0.0

    @property
    def penalised(self) -> bool:
        """Whether a repetition, presence or frequency penalty is on."""
        return (
            self.repetition_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
        )

    @property
    def plain(self) -> bool:
        """Full-distribution sampling at temperature 1: raw and processed log-probs agree."""
        return self.temperature == 1.0 and not self.truncates and not self.penalised

    def to_dict(self) -> dict[str, Any]:
        """The parameters as a plain dict (what a turn records)."""
        return asdict(self)

    def request_fields(self, server: str = "vllm") -> dict[str, Any]:
        """Every parameter, spelled the way `server` reads it, so no server default applies.

        `server` is `"vllm"` (vLLM, SGLang's `sampling_params` and `gemkit serve model` read
        the same names) or `"llama.cpp"` (top-k 0 is off, `repeat_penalty`, and its extra
        samplers, typical-p and XTC, named off).
        """
        fields = self.to_dict()
        if server == "llama.cpp":
            fields["top_k"] = 0 if self.top_k == -1 else self.top_k
            fields["repeat_penalty"] = fields.pop("repetition_penalty")
            fields.update(typical_p=1.0, xtc_probability=0.0, dry_multiplier=0.0, mirostat=0)
        elif server != "vllm":
            raise SamplingError(f"server must be 'vllm' or 'llama.cpp', got {server!r}")
        return fields


def trainable(sampling: Mapping[str, Any] | None, where: str = "the episode") -> SamplingParams:
    """The recorded parameters of a turn, checked to be ones a learner can recompute under.

    Refuses penalties (they depend on every earlier token), raw log-probs of any distribution
    but temperature 1 with nothing cut (the behaviour log-prob is then unknown), and turns
    that recorded no parameters at all.
    """
    if sampling is None:
        raise SamplingError(
            f"{where} recorded no sampling parameters, so its behaviour log-probs cannot be "
            "checked; sample with gemkit.llm.TokenPolicy"
        )
    params = SamplingParams.from_dict(sampling)
    if params.penalised:
        raise SamplingError(
            f"{where} was sampled with a repetition, presence or frequency penalty; a learner "
            "cannot recompute those log-probs: train with the penalties off"
        )
    if params.temperature == 0:
        raise SamplingError(f"{where} was decoded greedily (temperature 0); sample to train on it")
    if sampling.get("logprobs", PROCESSED) == RAW and not params.plain:
        raise SamplingError(
            f"the server reported raw log-probs for {where}, sampled at temperature "
            f"{params.temperature:g}, top-k {params.top_k}, top-p {params.top_p:g}, min-p "
            f"{params.min_p:g}: they are not the behaviour log-probs. Start vLLM with "
            "--logprobs-mode processed_logprobs, or sample at temperature 1 with nothing cut"
        )
    return params
