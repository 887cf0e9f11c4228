"""GEM environments (gem-llm): multi-turn games and tasks, trained with per-turn discounted returns.

One Atropos environment drives any GEM environment id (`game:GuessTheNumber-v0-easy`, Wordle,
Sudoku, reasoning_gym tasks, ...). Each episode is played turn by turn against the policy: the
observation is templated, the policy samples an action (token ids and logprobs exactly as
sampled), GEM steps. Every turn is one transition = one Atropos sequence (prompt tokens masked,
action tokens trained); its advantage is the discounted return `G_t = r_t + gamma * G_{t+1}`,
carried in the group's per-token `advantages`. With `batch_normalize` (ReBN) the group asks the
trainer (`group_overrides[REBN_OVER_BATCH]`) to normalise the returns over every transition of
the step's batch, as the recipe normalises over its whole pool.

A submitted group holds exactly `group_size` transitions (Atropos batches whole groups and
expects sizes that divide the batch): a round plays about as many episodes (at most `num_envs`)
as the group still lacks transitions, judged by the turns per episode so far, and a surplus is
carried to the next group, so what is sampled is what is trained. In `process` mode (smoke tests) a group holds
`group_size` whole episodes instead, scored 1 for a success and 0 otherwise.
"""

from __future__ import annotations

import asyncio
import difflib
import itertools
import logging
import math
import random
import time
from typing import Any

from atroposlib.envs.base import APIServerConfig, BaseEnv, ScoredDataGroup
from atroposlib.envs.server_handling.openai_server import OpenAIServer

from mcp_rl.environments.gem_config import GemEnvConfig, eval_seeds, resolve_profile
from mcp_rl.environments.gem_episodes import (
    TEXT_TEMPLATES,
    Counters,
    Episode,
    EpisodeFailed,
    Prompt,
    Turn,
    render,
    root_cause,
)
from mcp_rl.environments.gem_returns import discounted_returns, episode_success, training_rewards
from mcp_rl.scored_data import MASKED, PROMPT_LOGPROB, REBN_OVER_BATCH

log = logging.getLogger("mcp_rl.gem_env")

# Rounds of `num_envs` episodes a group may take before it is given up (every episode failing).
MAX_EMPTY_ROUNDS = 3


# --- the environment --------------------------------------------------------------------------
class GemEnv(BaseEnv):
    """GEM environments (gem-llm): multi-turn games and tasks with per-turn discounted returns."""

    name = "gem"
    env_config_cls = GemEnvConfig

    def __init__(self, config: GemEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False) -> None:
        config = resolve_profile(config)
        super().__init__(config, server_configs, slurm, testing)
        self.config: GemEnvConfig = config
        self._pool: list[Any] = []
        self._wrappers: list[Any] = []
        self._dataset: Any = None
        self._next_seed = config.seed
        self._groups_started = 0
        # Filled by resolve_profile: typed here once instead of re-checked at every use.
        self._template = str(config.template)
        self._turn_tokens = int(config.max_tokens_per_turn or 0)
        self._num_envs = int(config.num_envs or 1)
        self._rng = random.Random(config.seed)
        self._counters = Counters()
        self._eval_metrics: dict[str, float] = {}
        # Transitions played but not yet submitted (with their returns): the next group's start.
        self._carry: list[tuple[Turn, float]] = []
        self._played_episodes = 0
        self._played_turns = 0

    @classmethod
    def config_init(cls) -> tuple[GemEnvConfig, list[APIServerConfig]]:
        config = GemEnvConfig(
            group_size=16,
            max_token_length=2048,
            # Groups whose returns are all equal still go (their advantages are 0): steps keep flowing.
            ensure_scores_are_not_same=False,
            # One group per step is common here; log the env metrics at every step.
            min_items_sent_before_logging=1,
            use_wandb=False,
        )
        server = APIServerConfig(
            model_name="default",
            base_url="http://127.0.0.1:8001/v1",
            api_key="x",
            server_type="sglang",
            health_check=False,
        )
        return config, [server]

    # --- GEM instances --------------------------------------------------------------------
    async def setup(self) -> None:
        # gem-llm is an optional extra (the `gem` one): only a GEM run imports it
        import gem
        from gem.envs.registration import ENV_REGISTRY
        from gem.wrappers.wrapper_factory import WRAPPER_FACTORY, get_wrapper_fns

        if self.config.env_id not in ENV_REGISTRY:
            close = difflib.get_close_matches(self.config.env_id, list(ENV_REGISTRY), n=5, cutoff=0.5)
            hint = f" Closest matches: {', '.join(close)}." if close else ""
            raise ValueError(f"Unknown GEM environment {self.config.env_id!r}.{hint}")
        names = [w.strip() for w in self.config.wrappers.split(",") if w.strip()]
        unknown = [w for w in names if w not in WRAPPER_FACTORY]
        if unknown:
            raise ValueError(f"Unknown GEM wrappers {unknown}; known: {', '.join(WRAPPER_FACTORY)}.")
        self._gem = gem
        self._wrappers = get_wrapper_fns(",".join(names), tokenizer=self.tokenizer) if names else []
        self._pool.append(self._make())  # fail now, not mid-run, if the environment cannot be made
        log.info("GEM %s ready (gem-llm, wrappers %s, template %s)", self.config.env_id, names, self.config.template)

    def _make(self) -> Any:
        kwargs = dict(self.config.env_kwargs)
        if self._dataset is not None:
            kwargs.setdefault("dataset", self._dataset)  # dataset envs: load it once, as the recipe does
        env = self._gem.make(self.config.env_id, **kwargs)
        if self._dataset is None and getattr(env, "dataset", None) is not None:
            self._dataset = env.dataset
        for wrapper in self._wrappers:
            env = wrapper(env)
        return env

    def _borrow(self) -> Any:
        return self._pool.pop() if self._pool else self._make()

    async def get_next_item(self) -> int:
        """Items only number the groups: a group plays as many episodes as it needs, each with
        the next unused seed (`seed`, `seed + 1`, ...), so no two episodes of a run repeat."""
        if self._groups_started == 0 and self.curr_step > 0:
            # A resumed run plays new episodes: at most one episode per trained transition was
            # played before, so seeds from there on were never used.
            self._next_seed = max(self._next_seed, self.config.seed + self.curr_step * max(self.config.batch_size, 0))
        self._groups_started += 1
        return self._groups_started

    # --- sampling -------------------------------------------------------------------------
    def _token_server(self) -> bool:
        """sglang/vllm/trl servers give token ids and logprobs; OpenAI-type ones only text."""
        return not any(isinstance(s, OpenAIServer) for s in self.server.servers)

    async def _sample(self, prompt: Prompt, split: str) -> tuple[list[int], list[float] | None, str, bool]:
        """(action tokens, their logprobs, action text, cut by the token limit)."""
        temperature = 0.0 if split == "eval" else self.config.temperature
        stop = list(prompt.stop)
        if self._token_server():
            prompt_tokens = self.tokenizer.encode(prompt.text, add_special_tokens=False)
            kwargs: dict[str, Any] = {
                "input_ids": prompt_tokens,
                "max_tokens": self.config.max_tokens_per_turn,
                "temperature": temperature,
                "n": 1,
                "split": split,
            }
            if stop:
                kwargs["stop"] = stop
            _, tokens_N, logprobs_N, finish_N = await self.server.tokens_and_logprobs_completion(**kwargs)
            tokens, logprobs = list(tokens_N[0]), [float(x) for x in logprobs_N[0]]
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            finish = finish_N[0]
            reason = finish.get("type") if isinstance(finish, dict) else finish
            return tokens, logprobs, text, reason == "length"
        common: dict[str, Any] = {
            "max_tokens": self.config.max_tokens_per_turn,
            "temperature": temperature,
            "n": 1,
            "split": split,
        }
        if self.config.template in TEXT_TEMPLATES:
            # The qwen3_* templates are raw ChatML prompts (the very text the trainer samples
            # from): sent as a text completion so a prefill and its stop keep working.
            if stop:
                common["stop"] = stop
            completion = await self.server.completion(prompt=prompt.text, **common)
            choice = completion.choices[0]
            text = choice.text or ""
        else:
            completion = await self.server.chat_completion(
                messages=[{"role": "user", "content": prompt.user}], **common
            )
            choice = completion.choices[0]
            text = choice.message.content or ""
        tokens = self.tokenizer.encode(text, add_special_tokens=False)
        return tokens, None, text, choice.finish_reason == "length"

    def _context_limit(self) -> int:
        limit = self.config.max_token_length
        if self.max_token_len and self.max_token_len > 0:
            limit = min(limit, self.max_token_len)
        return limit

    # --- one episode ----------------------------------------------------------------------
    async def play_episode(self, seed: int, split: str = "train") -> Episode:
        """Play one episode; raises EpisodeFailed when the environment or the server fails."""
        env = self._borrow()
        episode = Episode(seed=seed)
        healthy = False
        try:
            try:
                observation, _ = env.reset(seed=seed)
            except Exception as exc:
                raise EpisodeFailed(f"reset raised {type(exc).__name__}: {exc}") from exc
            turns = range(self.config.max_turns) if self.config.max_turns is not None else itertools.count()
            for _turn in turns:
                prompt = render(self._template, observation, self.tokenizer)
                prompt_tokens = self.tokenizer.encode(prompt.text, add_special_tokens=False)
                if len(prompt_tokens) + self._turn_tokens >= self._context_limit():
                    episode.cut = "context"  # the trainer would refuse a longer sequence
                    break
                try:
                    tokens, logprobs, text, unfinished = await self._sample(prompt, split)
                except Exception as exc:
                    cause = root_cause(exc)
                    raise EpisodeFailed(f"sampling failed: {type(cause).__name__}: {cause}") from exc
                if not tokens:
                    raise EpisodeFailed("the server returned an empty action")
                action = prompt.prefill + text
                try:
                    next_observation, reward, terminated, truncated, _info = env.step(action)
                except Exception as exc:
                    raise EpisodeFailed(f"step raised {type(exc).__name__}: {exc}") from exc
                episode.turns.append(
                    Turn(
                        observation=prompt.user,
                        prompt_tokens=prompt_tokens,
                        action_tokens=tokens,
                        action_logprobs=logprobs,
                        action_text=action,
                        reward=float(reward),
                        unfinished=unfinished,
                    )
                )
                observation = next_observation
                if terminated or truncated:
                    break
            else:
                episode.cut = "max_turns"
            episode.final_observation = str(observation)
            if not episode.turns:
                raise EpisodeFailed(f"no turn fits in {self._context_limit()} tokens")
            healthy = True
            return episode
        finally:
            if healthy:
                self._pool.append(env)  # a failed instance is not reused

    async def _play_round(self, split: str, count: int | None = None, seeds: list[int] | None = None) -> list[Episode]:
        """`count` episodes (default `num_envs`) played at once, each with the next unused seed
        (or exactly `seeds`: the fixed eval seeds)."""
        if seeds is None:
            count = self._num_envs if count is None else count
            seeds = [self._next_seed + i for i in range(count)]
            self._next_seed += count
        results = await asyncio.gather(*(self.play_episode(s, split) for s in seeds), return_exceptions=True)
        episodes = []
        for seed, result in zip(seeds, results, strict=True):
            if isinstance(result, Episode):
                episodes.append(result)
            elif isinstance(result, EpisodeFailed):
                self._drop(seed, result.reason)
            elif isinstance(result, Exception):
                self._drop(seed, f"{type(result).__name__}: {result}")
            else:
                raise result  # cancellation and the like end the group
        return episodes

    def _drop(self, seed: int, reason: str) -> None:
        key = reason.split(":", 1)[0].replace(" ", "_")[:40]
        self._counters.dropped_total += 1
        self._counters.dropped_by_reason[key] = self._counters.dropped_by_reason.get(key, 0) + 1
        log.warning("GEM %s: episode (seed %s) dropped: %s", self.config.env_id, seed, reason)

    async def _collect_episodes(self, enough: Any, split: str = "train") -> list[Episode]:
        episodes: list[Episode] = []
        empty_rounds = 0
        while not enough(episodes):
            played = await self._play_round(split)
            if not played:
                empty_rounds += 1
                if empty_rounds >= MAX_EMPTY_ROUNDS:
                    raise RuntimeError(
                        f"every episode of {empty_rounds} rounds failed (see the warnings above); group given up"
                    )
                continue
            for episode in played:
                self._counters.add(episode, self.config.success_reward)
            episodes.extend(played)
        return episodes

    def _round_size(self, transitions: int) -> int:
        """Episodes to play for about `transitions` more transitions (by the turns per episode so
        far; at most `num_envs`): a paid sampler plays little more than what is trained."""
        per_episode = self._played_turns / self._played_episodes if self._played_episodes else 1.0
        return max(1, min(self._num_envs, math.ceil(transitions / max(per_episode, 1.0))))

    # --- groups -----------------------------------------------------------------------------
    async def collect_trajectories(self, item: int) -> tuple[ScoredDataGroup | None, list[Any]]:
        if getattr(self, "process_mode", False):
            return await self._episode_group(), []
        return await self._transition_group(), []

    async def _transition_group(self) -> ScoredDataGroup:
        """`group_size` transitions, each with its discounted return; the surplus of the last
        round is carried to the next group (played episodes are never thrown away)."""
        size = self.config.group_size
        empty_rounds = 0
        while len(self._carry) < size:
            played = await self._play_round("train", self._round_size(size - len(self._carry)))
            if not played:
                empty_rounds += 1
                if empty_rounds >= MAX_EMPTY_ROUNDS:
                    raise RuntimeError(
                        f"every episode of {empty_rounds} rounds failed (see the warnings above); group given up"
                    )
                continue
            for episode in played:
                self._counters.add(episode, self.config.success_reward)
                self._played_episodes += 1
                self._played_turns += len(episode.turns)
                rewards = training_rewards(episode.rewards, self.config.success_reward, self.config.partial_credit)
                self._carry.extend(zip(episode.turns, discounted_returns(rewards, self.config.gamma), strict=True))
        chosen, self._carry = self._carry[:size], self._carry[size:]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], advantages=[], inference_logprobs=[])
        group["messages"] = [] if self.config.include_messages else None
        if self.config.batch_normalize:
            # ReBN over the step's whole pool: the trainer normalises these returns together with
            # every other such group of its batch (per group, a group of lost episodes would get
            # +-1-scale advantages and the differences between groups would be erased).
            group["group_overrides"] = {REBN_OVER_BATCH: True}
        # What the actions were sampled at: the trainer refuses to train another temperature than 1.
        group["generation_params"] = {"temperature": self.config.temperature}
        for turn, ret in chosen:
            adv = ret
            n_prompt, n_action = len(turn.prompt_tokens), len(turn.action_tokens)
            group["tokens"].append(turn.prompt_tokens + turn.action_tokens)
            group["masks"].append([MASKED] * n_prompt + turn.action_tokens)
            group["scores"].append(ret)
            group["advantages"].append([0.0] * n_prompt + [adv] * n_action)
            sampled = turn.action_logprobs if turn.action_logprobs is not None else [0.0] * n_action
            group["inference_logprobs"].append([PROMPT_LOGPROB] * n_prompt + sampled)
            if group["messages"] is not None:
                group["messages"].append(
                    [
                        {"role": "user", "content": turn.observation},
                        {"role": "assistant", "content": turn.action_text, "reward": turn.reward},
                    ]
                )
        if any(t.action_logprobs is None for t, _ in chosen):
            group["inference_logprobs"] = None  # text-only server: nothing exact to train against
        return group

    async def _episode_group(self) -> ScoredDataGroup:
        """`group_size` whole episodes, scored 1 for a success and 0 otherwise (smoke tests)."""
        size = self.config.group_size
        episodes = (await self._collect_episodes(lambda eps: len(eps) >= size))[:size]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        for episode in episodes:
            last = episode.turns[-1]
            group["tokens"].append(last.prompt_tokens + last.action_tokens)
            group["masks"].append([MASKED] * len(last.prompt_tokens) + last.action_tokens)
            group["scores"].append(1.0 if episode_success(episode.rewards, self.config.success_reward) else 0.0)
            conversation: list[dict[str, Any]] = []
            for turn in episode.turns:
                conversation.append({"role": "user", "content": turn.observation})
                conversation.append({"role": "assistant", "content": turn.action_text, "reward": turn.reward})
            conversation.append({"role": "user", "content": f"[episode end] {episode.final_observation}"})
            group["messages"].append(conversation)
        return group

    # --- evaluation and metrics ---------------------------------------------------------------
    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        if self.config.eval_episodes <= 0:
            return
        start = time.time()
        episodes: list[Episode] = []
        # The same held-out games every evaluation (eval_seeds), never a training seed; a failed
        # episode is not replaced (another seed would make the evaluations incomparable).
        seeds = eval_seeds(self.config.eval_episodes)
        for i in range(0, len(seeds), self._num_envs):
            episodes.extend(await self._play_round("eval", seeds=seeds[i : i + self._num_envs]))
        if not episodes:
            return
        successes = [1.0 if episode_success(e.rewards, self.config.success_reward) else 0.0 for e in episodes]
        self._eval_metrics = {
            "eval/percent_correct": sum(successes) / len(successes),
            "eval/episode_return": sum(sum(e.rewards) for e in episodes) / len(episodes),
            "eval/turns_per_episode": sum(len(e.turns) for e in episodes) / len(episodes),
            "eval/seconds": time.time() - start,
        }
        # Per seed, for mcp-rl's held-out figures (mcp_rl.proof.env_eval runs this evaluate()
        # against the base and the trained weights and pairs the games by seed); Atropos writes
        # them only when data_dir_to_save_evals is set.
        if self.config.data_dir_to_save_evals:
            samples = [
                {
                    "id": f"seed-{episode.seed}",
                    "score": success,
                    "return": sum(episode.rewards),
                    "turns": len(episode.turns),
                    "response": episode.turns[-1].action_text if episode.turns else "",
                }
                for episode, success in zip(episodes, successes, strict=True)
            ]
            await self.evaluate_log(metrics=dict(self._eval_metrics), samples=samples, verbose=False)

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        metrics = {} if wandb_metrics is None else wandb_metrics
        metrics.update(self._counters.drain())
        metrics.update(self._eval_metrics)
        self._eval_metrics = {}
        await super().wandb_log(metrics)


if __name__ == "__main__":
    GemEnv.cli()
