"""The judge reward (issue 47): a model scores each group's episodes relative to each other, 0-1,
against the task file's editable rubric (RULER's idea: OpenPipe ART ranks a group's trajectories
with one LLM call; GRPO needs only their order within the group).

- **Who judges**: an OpenRouter model (`judge.model`, through OpenRouter's chat completions as the
  smoke tests' gateway calls it, with usage accounting on), or `local` (the policy's own server:
  free, for offline runs; a 135M model rarely answers in the format, see the README).
- **Priced**: every paid call's cost is OpenRouter's reported `usage.cost`, else its tokens at the
  model's `/models` price; a model without a price is refused at setup (the cap could not hold).
- **Capped**: before each call, the spend so far plus the call's upper bound (its prompt at two
  characters a token, plus `max_tokens` at the completion price) must stay within
  `judge.max_cost_usd`, over every process of the run (`SpendFile`, `MCP_RL_JUDGE_SPEND_FILE`:
  the training environment and its held-out evaluations); otherwise `JudgeCostCapReached` is raised with the figures, every group
  then fails with it and the run ends with that cause (mcp_rl.supervisor.env_watch).
- **Cached by trajectory**: identical episodes of a group are shown once, and a group whose
  distinct episode texts were judged before (in any order) is scored from memory: no second paid
  call for the same text.
- **Malformed answers**: an answer that is not the asked JSON (or a failed request) is retried once;
  then the group scores 0 with the reason recorded. Only a refused key, missing credits or an
  unknown model id raise (`JudgeUnavailable`): no later call could succeed.

The judge's prompt, scores, reasons and cost travel with the group (`group_overrides["judge"]`)
into the kept rollouts (`rl_get_rollouts`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mcp_rl.atomic import write_text_atomic
from mcp_rl.environments.mcp_family.taskfile import LOCAL_JUDGE, JudgeSpec, Scenario
from mcp_rl.locking import exclusive_lock

TRAJECTORY_CHARS = 12_000  # of one episode shown to the judge (its middle cut when longer)
RECORD_PROMPT_CHARS = 6_000  # of the judge's prompt kept with the rollouts
CHARS_PER_TOKEN_BOUND = 2  # a prompt's tokens are bounded by its characters / 2 (English runs ~4)
CACHE_GROUPS = 4096
ATTEMPTS = 2  # a malformed answer is retried once

INSTRUCTIONS = """\
All of the trajectories below were given the same goal by a user and could call the same tools.
Compare them with each other and give each a score from 0 to 1 (1: best); what matters is how they
rank against each other, so spread the scores when the trajectories differ.

Grading standards:
{rubric}

Answer with only a JSON object, one entry per trajectory in their order:
{{"scores": [{{"trajectory_id": "1", "explanation": "<one sentence>", "score": 0.0}}, ...]}}"""


@dataclass(frozen=True)
class JudgeReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None  # what the provider reported (None: not reported)


# (the judge's messages, the judge's spec) -> its answer
Ask = Callable[[list[dict[str, str]], JudgeSpec], Awaitable[JudgeReply]]


class JudgeCallFailed(Exception):
    """One judge request failed in a way a retry may fix (5xx, 429, a timeout, a connection).
    `maybe_billed`: it was sent and may have been processed (a timeout): counted at its bound."""

    def __init__(self, message: str, maybe_billed: bool = False) -> None:
        super().__init__(message)
        self.maybe_billed = maybe_billed


class JudgeUnavailable(RuntimeError):
    """The judge cannot be used at all (no key, a refused key, no credits, an unknown model, no price)."""


class JudgeCostCapReached(RuntimeError):
    """The next judge call could pass `judge.max_cost_usd`."""


class JudgeAnswerError(ValueError):
    """The judge's answer is not the JSON asked for."""


@dataclass
class Verdict:
    scores: list[float]
    reasons: list[str]
    model: str
    prompt: str
    cost_usd: float = 0.0
    cached: bool = False
    attempts: int = 0
    error: str | None = None  # why the group scored 0 (a malformed answer twice)

    def record(self) -> dict[str, Any]:
        """What is kept with the group's rollouts (bounded)."""
        prompt = self.prompt
        if len(prompt) > RECORD_PROMPT_CHARS:
            prompt = prompt[: RECORD_PROMPT_CHARS // 2] + "\n[...]\n" + prompt[-RECORD_PROMPT_CHARS // 2 :]
        return {
            "model": self.model,
            "prompt": prompt,
            "scores": list(self.scores),
            "reasons": [r[:500] for r in self.reasons],
            "cost_usd": round(self.cost_usd, 8),
            "cached": self.cached,
            "attempts": self.attempts,
            "error": self.error,
        }


def _clip_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


def render_trajectory(messages: Sequence[dict[str, Any]]) -> str:
    """An episode as the judge reads it: every message after the system prompt (the tool listing,
    the same for all), as `role: content` blocks."""
    shown = list(messages[1:]) if messages and messages[0].get("role") == "system" else list(messages)
    text = "\n\n".join(f"{m.get('role', '?')}: {m.get('content', '')}" for m in shown)
    return _clip_middle(text, TRAJECTORY_CHARS)


def judge_messages(
    spec: JudgeSpec, scenario: Scenario, tools: Sequence[str], texts: Sequence[str]
) -> list[dict[str, str]]:
    system = INSTRUCTIONS.format(rubric=spec.rubric.strip())
    parts = [
        f"<context>\nThe user's request: {scenario.prompt}\nThe tools offered: {', '.join(tools) or 'none'}\n</context>"
    ]
    parts += [f'<trajectory id="{i}">\n{text}\n</trajectory>' for i, text in enumerate(texts, 1)]
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_scores(text: str, n: int) -> tuple[list[float], list[str]]:
    """The n scores (in trajectory order) and their explanations, or JudgeAnswerError saying why not."""
    start = text.find("{")
    if start < 0:
        raise JudgeAnswerError(f"no JSON object in the judge's answer: {text[:200]!r}")
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        raise JudgeAnswerError(f"the judge's JSON does not parse: {exc}") from None
    entries = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise JudgeAnswerError('the judge\'s JSON has no "scores" list')
    by_id: dict[str, tuple[float, str]] = {}
    for entry in entries:
        if not isinstance(entry, dict) or "trajectory_id" not in entry:
            raise JudgeAnswerError('each score is an object with a "trajectory_id"')
        try:
            score = float(entry.get("score"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise JudgeAnswerError(f"trajectory {entry['trajectory_id']!r} has no numeric score") from None
        if not math.isfinite(score) or not 0.0 <= score <= 1.0:
            raise JudgeAnswerError(f"trajectory {entry['trajectory_id']!r} scored {score!r}, outside 0-1")
        by_id[str(entry["trajectory_id"]).strip()] = (score, str(entry.get("explanation") or ""))
    wanted = [str(i) for i in range(1, n + 1)]
    missing = [i for i in wanted if i not in by_id]
    if missing:
        raise JudgeAnswerError(f"the judge scored {sorted(by_id)} but not trajectories {missing}")
    return [by_id[i][0] for i in wanted], [by_id[i][1] for i in wanted]


def call_bound_usd(prompt_chars: int, max_tokens: int, price: tuple[float, float]) -> float:
    """The most one judge call can cost: its prompt (characters / 2 tokens) and `max_tokens`."""
    return math.ceil(prompt_chars / CHARS_PER_TOKEN_BOUND) * price[0] + max_tokens * price[1]


@dataclass
class Ledger:
    """The judge's spend in this environment process."""

    spent_usd: float = 0.0
    calls: int = 0
    cache_hits: int = 0
    malformed: int = 0
    zeroed_groups: int = 0
    priced_from_tokens: int = 0  # calls whose cost was not reported (priced at the /models rate)


class SpendFile:
    """The judge's spend shared by a run's processes (its environment and each held-out
    evaluation's): `{"spent_usd": ...}` under an exclusive lock. A call reserves its bound before it
    is sent and settles to its real cost after, so processes judging at once never pass the cap
    together, and a resumed run goes on from what was spent."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = path.with_name(path.name + ".lock")

    def _read(self) -> float:
        try:
            value = json.loads(self.path.read_text(encoding="utf-8")).get("spent_usd", 0.0)
        except (OSError, ValueError, AttributeError):
            return 0.0
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else 0.0

    def change(self, delta: float, cap: float | None = None) -> float | None:
        """Add `delta` and return the new total; with `cap`, refuse (None, nothing changed) if the
        total would pass it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(self.lock, timeout_s=30):
            total = self._read() + delta
            if cap is not None and total > cap:
                return None
            write_text_atomic(self.path, json.dumps({"spent_usd": max(0.0, total)}))
            return total

    def total(self) -> float:
        return self._read()


@dataclass
class Judge:
    """Scores groups with `ask`; `price` (USD per prompt and completion token) is required for a
    paid judge. `spend`: the run's shared spend (None: this process's alone). Not thread-safe: one
    environment's groups are judged in its one event loop."""

    spec: JudgeSpec
    ask: Ask
    price: tuple[float, float] | None
    spend: SpendFile | None = None
    ledger: Ledger = field(default_factory=Ledger)
    _reserved_usd: float = 0.0  # bounds of calls in flight (groups are judged concurrently)
    _cache: OrderedDict[str, dict[str, tuple[float, str]]] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        if self.paid and self.price is None:
            raise JudgeUnavailable(
                f"the judge {self.spec.model!r} has no price in OpenRouter's /models answer, so judge.max_cost_usd "
                "could not be held; pick a model OpenRouter lists with a price"
            )

    @property
    def paid(self) -> bool:
        return self.spec.model != LOCAL_JUDGE

    def _cost(self, reply: JudgeReply) -> float:
        if not self.paid:
            return 0.0
        if reply.cost_usd is not None and math.isfinite(reply.cost_usd) and reply.cost_usd >= 0:
            return reply.cost_usd
        assert self.price is not None
        self.ledger.priced_from_tokens += 1
        return reply.prompt_tokens * self.price[0] + reply.completion_tokens * self.price[1]

    def _reserve(self, messages: list[dict[str, str]]) -> float:
        """Hold the cap before a call: its bound is reserved (and returned), or JudgeCostCapReached."""
        if not self.paid or self.spec.max_cost_usd is None:
            return 0.0
        assert self.price is not None
        bound = call_bound_usd(sum(len(m["content"]) for m in messages), self.spec.max_tokens, self.price)
        cap = self.spec.max_cost_usd
        if self.spend is not None:
            if self.spend.change(bound, cap) is not None:
                return bound
            spent, where = self.spend.total(), "by this run"
        elif self.ledger.spent_usd + self._reserved_usd + bound <= cap:
            self._reserved_usd += bound
            return bound
        else:
            spent, where = self.ledger.spent_usd + self._reserved_usd, f"on {self.ledger.calls} calls"
        raise JudgeCostCapReached(
            f"judge cost cap reached: ${spent:.4f} spent {where} on {self.spec.model} (judge.max_cost_usd "
            f"${cap:g}); the next call could cost up to ${bound:.4f}. Raise judge.max_cost_usd in the task file "
            "or use a cheaper judge model"
        )

    def _settle(self, reserved: float, cost: float) -> None:
        if self.spend is not None and (reserved or cost):
            self.spend.change(cost - reserved)
        elif self.spend is None:
            self._reserved_usd = max(0.0, self._reserved_usd - reserved)

    async def score(
        self, scenario: Scenario, tools: Sequence[str], messages: Sequence[Sequence[dict[str, Any]]]
    ) -> Verdict:
        """One score per episode (`messages`: each episode's chat), relative to the others."""
        texts = [render_trajectory(m) for m in messages]
        distinct = list(dict.fromkeys(texts))
        prompt = judge_messages(self.spec, scenario, tools, distinct)
        prompt_text = "\n\n".join(m["content"] for m in prompt)
        key = hashlib.sha256(
            json.dumps([self.spec.model, self.spec.rubric, scenario.prompt, sorted(distinct)]).encode()
        ).hexdigest()
        known = self._cache.get(key)
        if known is not None:
            self._cache.move_to_end(key)
            self.ledger.cache_hits += 1
            return Verdict(
                [known[t][0] for t in texts], [known[t][1] for t in texts], self.spec.model, prompt_text, cached=True
            )
        verdict = Verdict([0.0] * len(texts), [""] * len(texts), self.spec.model, prompt_text)
        problem = ""
        for attempt in range(1, ATTEMPTS + 1):
            reserved = self._reserve(prompt)
            verdict.attempts = attempt
            try:
                reply = await self.ask(prompt, self.spec)
            except JudgeCallFailed as exc:
                billed = reserved if exc.maybe_billed else 0.0
                self._settle(reserved, billed)
                self.ledger.spent_usd += billed
                verdict.cost_usd += billed
                problem = f"the judge request failed: {exc}"
                continue
            except BaseException:
                self._settle(reserved, 0.0)
                raise
            finally:
                self.ledger.calls += 1
            cost = self._cost(reply)
            self._settle(reserved, cost)
            self.ledger.spent_usd += cost
            verdict.cost_usd += cost
            try:
                scores, reasons = parse_scores(reply.text, len(distinct))
            except JudgeAnswerError as exc:
                self.ledger.malformed += 1
                problem = str(exc)
                continue
            by_text = {t: (s, r) for t, s, r in zip(distinct, scores, reasons, strict=True)}
            self._cache[key] = by_text
            while len(self._cache) > CACHE_GROUPS:
                self._cache.popitem(last=False)
            verdict.scores = [by_text[t][0] for t in texts]
            verdict.reasons = [by_text[t][1] for t in texts]
            return verdict
        self.ledger.zeroed_groups += 1
        verdict.error = f"scored 0 after {ATTEMPTS} attempts: {problem}"
        verdict.reasons = [verdict.error] * len(texts)
        return verdict

    def metrics(self) -> dict[str, float]:
        ledger = self.ledger
        return {
            "judge/spent_usd": ledger.spent_usd,
            "judge/calls": float(ledger.calls),
            "judge/cache_hits": float(ledger.cache_hits),
            "judge/malformed_answers": float(ledger.malformed),
            "judge/zeroed_groups": float(ledger.zeroed_groups),
        }


# --- OpenRouter ------------------------------------------------------------------------------
FATAL_STATUS = {400: "refused the request", 401: "refused the key", 402: "has no credits left", 403: "refused the key"}


class OpenRouterJudge:
    """The paid judge's `ask`: OpenRouter's chat completions with usage accounting, as the smoke
    tests' gateway sends them (`usage: {include: true}` makes the answer carry its cost)."""

    def __init__(self, base_url: str, api_key: str, client: httpx.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._key = api_key
        self.client = client or httpx.AsyncClient()

    async def price(self, model: str) -> tuple[float, float] | None:
        """USD per prompt and completion token from OpenRouter's free `/models` list (None: not listed)."""
        try:
            response = await self.client.get(f"{self.base_url}/models", timeout=15)
            entries = response.json().get("data", []) if response.status_code == 200 else []
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("id") == model and isinstance(entry.get("pricing"), dict):
                try:
                    prompt, completion = float(entry["pricing"]["prompt"]), float(entry["pricing"]["completion"])
                except (KeyError, TypeError, ValueError):
                    return None
                if all(math.isfinite(p) and p >= 0 for p in (prompt, completion)):
                    return prompt, completion
        return None

    async def __call__(self, messages: list[dict[str, str]], spec: JudgeSpec) -> JudgeReply:
        body = {
            "model": spec.model,
            "messages": messages,
            "max_tokens": spec.max_tokens,
            "temperature": 0.0,
            "usage": {"include": True},
        }
        try:
            response = await self.client.post(
                f"{self.base_url}/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {self._key}"},
                timeout=spec.timeout_s,
            )
        except httpx.HTTPError as exc:
            # A request that timed out after it was sent may still be billed.
            sent = isinstance(exc, httpx.ReadTimeout | httpx.RemoteProtocolError)
            raise JudgeCallFailed(f"{type(exc).__name__} reaching OpenRouter", maybe_billed=sent) from None
        try:
            parsed = response.json()
        except ValueError:
            parsed = None
        data: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        if response.status_code != 200:
            error = data.get("error")
            message = error.get("message", "") if isinstance(error, dict) else ""
            if response.status_code in FATAL_STATUS:
                raise JudgeUnavailable(
                    f"OpenRouter {FATAL_STATUS[response.status_code]} for the judge {spec.model!r} "
                    f"({response.status_code}: {str(message)[:200]})"
                )
            raise JudgeCallFailed(f"OpenRouter answered {response.status_code}: {str(message)[:200]}")
        choices = data.get("choices")
        raw_usage = data.get("usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        cost = usage.get("cost")
        reply_cost = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
        prompt_tokens, completion_tokens = (
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
        )
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            # Billed or not, an answer without choices is an answer that cannot be read.
            return JudgeReply("(an answer without choices)", prompt_tokens, completion_tokens, reply_cost)
        message = choices[0].get("message") or {}
        text = message.get("content") if isinstance(message, dict) else None
        return JudgeReply(str(text or ""), prompt_tokens, completion_tokens, reply_cost)

    async def aclose(self) -> None:
        await self.client.aclose()


# --- the estimate before a run -------------------------------------------------------------
@dataclass(frozen=True)
class JudgeEstimate:
    calls: int  # without retries
    per_call_usd: float  # upper bound
    at_most_usd: float  # every call at its bound, each retried once, held to the cap
    note: str


def estimate(
    spec: JudgeSpec,
    price: tuple[float, float],
    group_size: int,
    groups: int,
    evaluations: int,
    held_out: int,
    trajectory_chars: int,
) -> JudgeEstimate:
    """The judge's spend over `groups` training groups and `evaluations` x `held_out` held-out
    episodes (judged alone), each call at its bound; never above `max_cost_usd`."""
    fixed = len(INSTRUCTIONS) + len(spec.rubric) + 1000  # + the request and the tool names
    shown = min(trajectory_chars, TRAJECTORY_CHARS)
    train_call = call_bound_usd(fixed + group_size * shown, spec.max_tokens, price)
    eval_call = call_bound_usd(fixed + shown, spec.max_tokens, price)
    calls = groups + evaluations * held_out
    worst = ATTEMPTS * (groups * train_call + evaluations * held_out * eval_call)
    cap = spec.max_cost_usd if spec.max_cost_usd is not None else worst
    at_most = min(worst, cap)
    note = (
        f"judge {spec.model}: {groups} groups of {group_size} and {evaluations} x {held_out} held-out episodes, "
        f"at most ${train_call:.4f} a group (prompt at {CHARS_PER_TOKEN_BOUND} characters a token, "
        f"{spec.max_tokens} answer tokens, OpenRouter's ${price[0] * 1e6:g} / ${price[1] * 1e6:g} per million), "
        f"each retried once at worst: at most ${worst:.4f}, held to judge.max_cost_usd ${cap:g}"
    )
    return JudgeEstimate(calls=calls, per_call_usd=train_call, at_most_usd=at_most, note=note)
