"""GEM episodes as mcp-rl's GEM environment (`bundled/gem_env.py`) plays them: the observation
templates (the recipe's prompts and a prefilled short-answer variant for small models), a turn and
an episode as played, why an episode was dropped, and the counters of what happened since the
last metrics line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mcp_rl.environments.gem_returns import episode_success, token_entropy_estimate

Template = Literal["qwen3_game", "qwen3_general", "qwen3_game_prefill", "chat", "no"]
# Templates that render raw ChatML text; OpenAI-type servers get them as text completions.
TEXT_TEMPLATES = ("qwen3_game", "qwen3_general", "qwen3_game_prefill")


# --- templates --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prompt:
    """One turn's prompt: the text given to the model, the user message (chat servers), what
    the assistant turn starts with (part of the prompt, prepended to the action) and stops."""

    text: str
    user: str
    prefill: str = ""
    stop: tuple[str, ...] = ()


def _game_user(observation: str, *, reason: bool) -> str:
    ask = (
        "Please reason step by step, and put your final answer within \\boxed{}."
        if reason
        else ("Put your final answer within \\boxed{}.")
    )
    return f"You are playing language games. Make valid actions to win.\nObservation: {observation}\n{ask}"


def _chatml(user: str, prefill: str = "") -> str:
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{prefill}"


def render(template: str, observation: str, tokenizer: Any) -> Prompt:
    """The recipe's templates (qwen3_game, qwen3_general, no), a prefilled short-answer variant
    for small models, and `chat`: the model's own chat template around the game prompt."""
    if template == "qwen3_game":
        user = _game_user(observation, reason=True)
        return Prompt(text=_chatml(user), user=user)
    if template == "qwen3_general":
        user = f"Question: {observation}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
        return Prompt(text=_chatml(user), user=user)
    if template == "qwen3_game_prefill":
        user = _game_user(observation, reason=False)
        return Prompt(text=_chatml(user, "\\boxed{"), user=user, prefill="\\boxed{", stop=("}",))
    if template == "chat":
        user = _game_user(observation, reason=True)
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )
        return Prompt(text=text, user=user)
    if template == "no":
        return Prompt(text=observation, user=observation)
    raise ValueError(f"unknown template {template!r}")


# --- episodes ---------------------------------------------------------------------------------
@dataclass
class Turn:
    observation: str
    prompt_tokens: list[int]
    action_tokens: list[int]
    # None when the server gives no logprobs (OpenAI-type servers in smoke tests).
    action_logprobs: list[float] | None
    action_text: str
    reward: float
    unfinished: bool  # cut by max_tokens_per_turn


@dataclass
class Episode:
    seed: int
    turns: list[Turn] = field(default_factory=list)
    cut: str | None = None  # why we ended it before GEM did ("max_turns", "context")
    final_observation: str = ""

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.turns]


def root_cause(exc: BaseException) -> BaseException:
    """The error under Atropos's retry wrapper (tenacity's RetryError says nothing by itself)."""
    last = getattr(exc, "last_attempt", None)
    if last is not None and getattr(last, "failed", False):
        inner = last.exception()
        if inner is not None:
            return inner
    return exc


class EpisodeFailed(Exception):
    """The GEM environment or the policy's server failed mid-episode; the episode is dropped."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Counters:
    """What happened since the last metrics line (and dropped episodes since the start)."""

    returns: list[float] = field(default_factory=list)
    successes: list[float] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    action_tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    unfinished: list[float] = field(default_factory=list)
    cut: int = 0
    dropped_total: int = 0
    dropped_by_reason: dict[str, int] = field(default_factory=dict)

    def add(self, episode: Episode, success_reward: float) -> None:
        self.returns.append(sum(episode.rewards))
        self.successes.append(1.0 if episode_success(episode.rewards, success_reward) else 0.0)
        self.turns.append(len(episode.turns))
        self.action_tokens.append(sum(len(t.action_tokens) for t in episode.turns))
        for turn in episode.turns:
            if turn.action_logprobs is not None:
                self.logprobs.extend(turn.action_logprobs)
            self.unfinished.append(1.0 if turn.unfinished else 0.0)
        if episode.cut:
            self.cut += 1

    def drain(self) -> dict[str, float]:
        def mean(values: list[float] | list[int]) -> float:
            return float(sum(values)) / len(values)

        out: dict[str, float] = {
            "gem/dropped_episodes": float(self.dropped_total),
            **{f"gem/dropped/{reason}": float(n) for reason, n in self.dropped_by_reason.items()},
        }
        if self.returns:
            out.update(
                {
                    "gem/episodes": float(len(self.returns)),
                    "gem/episode_return": mean(self.returns),
                    "gem/success_rate": mean(self.successes),
                    "gem/turns_per_episode": mean(self.turns),
                    "gem/action_tokens": mean(self.action_tokens),
                    "gem/unfinished_turns": mean(self.unfinished) if self.unfinished else 0.0,
                    "gem/cut_episodes": float(self.cut),
                    # The recipe's percent-correct for GEM: what rl_check_status shows.
                    "train/percent_correct": mean(self.successes),
                }
            )
            if self.logprobs:
                out["gem/token_entropy"] = token_entropy_estimate(self.logprobs)
        self.returns, self.successes, self.turns, self.action_tokens = [], [], [], []
        self.logprobs, self.unfinished, self.cut = [], [], 0
        return out
