"""Any MCP server as a training environment: the policy learns to use the server's tools.

Set `task_file` to an `*.mcp.yaml` task file (mcp_rl.environments.mcp_family.taskfile: the
server, the scenarios, the reward, the allowed tools, the limits). Each training item is one
scenario; a group plays it `group_size` times, each episode on a fresh server process, as one
token-level multi-turn sequence (policy tokens trained, tool output masked) scored by the task's
reward; GRPO compares the episodes of a group. evaluate() plays every held-out scenario greedily
(the same ones every time, split from training by the prompt's hash).

An episode the server fails (it did not start, it crashed) is dropped and counted; a group whose
every episode fails ends the run with the server's error (a broken server is a broken environment).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from pydantic import Field

from mcp_rl.environments.mcp_family.episode import EndReason, Sample, Trajectory, run_episode, scored_group
from mcp_rl.environments.mcp_family.taskfile import McpTask, Scenario, load
from mcp_rl.environments.training_order import TrainingOrder

log = logging.getLogger("mcp_rl.mcp_env")


class McpEnvConfig(BaseEnvConfig):
    task_file: str = Field(
        "", description="Path of the *.mcp.yaml task file (server, scenarios, reward, tools, limits)."
    )
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="Sampling temperature of training episodes.")
    eval_scenarios: int = Field(
        0, ge=0, le=100_000, description="Held-out scenarios each evaluation plays (0: all of them)."
    )
    seed: int = Field(0, ge=0, description="Seed of the training order.")


@dataclass
class Counters:
    episodes: int = 0
    rewards: list[float] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    tool_calls: list[int] = field(default_factory=list)
    malformed: list[int] = field(default_factory=list)
    tool_errors: list[int] = field(default_factory=list)
    ends: dict[str, int] = field(default_factory=dict)
    dropped_total: int = 0

    def add(self, t: Trajectory) -> None:
        self.episodes += 1
        self.rewards.append(t.reward)
        self.turns.append(t.turns)
        self.tool_calls.append(t.tool_calls)
        self.malformed.append(t.malformed_calls)
        self.tool_errors.append(t.tool_errors)
        self.ends[t.end.value] = self.ends.get(t.end.value, 0) + 1

    def drain(self) -> dict[str, float]:
        out: dict[str, float] = {"mcp/dropped_episodes": float(self.dropped_total)}
        if self.rewards:
            n = len(self.rewards)
            calls = sum(self.tool_calls)
            out |= {
                "mcp/episodes": float(n),
                "mcp/reward": sum(self.rewards) / n,
                "mcp/turns_per_episode": sum(self.turns) / n,
                "mcp/tool_calls_per_episode": calls / n,
                "mcp/tool_call_validity": 1.0 - sum(self.malformed) / calls if calls else 1.0,
                "mcp/executed_calls_per_episode": (calls - sum(self.malformed)) / n,
                "mcp/tool_errors_per_episode": sum(self.tool_errors) / n,
                **{f"mcp/end/{reason}": count / n for reason, count in self.ends.items()},
                "train/percent_correct": sum(1.0 for r in self.rewards if r >= 1.0) / n,
            }
        self.rewards, self.turns, self.tool_calls, self.malformed, self.tool_errors = [], [], [], [], []
        self.ends = {}
        return out


class McpEnv(BaseEnv):
    """Teach a model to use an MCP server's tools (set task_file to an *.mcp.yaml task file)."""

    name = "mcp"
    env_config_cls = McpEnvConfig

    def __init__(self, config: McpEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False) -> None:
        super().__init__(config, server_configs, slurm, testing)
        self.config: McpEnvConfig = config
        self.task: McpTask | None = None
        self._order = TrainingOrder(config.seed)
        self._counters = Counters()
        self._eval_metrics: dict[str, float] = {}

    @classmethod
    def config_init(cls) -> tuple[McpEnvConfig, list[APIServerConfig]]:
        config = McpEnvConfig(
            group_size=4,
            batch_size=8,
            max_token_length=2048,
            ensure_scores_are_not_same=False,
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

    async def setup(self) -> None:
        if not self.config.task_file:
            raise ValueError("set task_file to an *.mcp.yaml task file (rl_edit_config field task_file)")
        self.task = load(self.config.task_file)
        log.info(
            "MCP task %s: %d training, %d held-out scenarios",
            self.task.name,
            len(self.task.train),
            len(self.task.held_out),
        )

    def _task(self) -> McpTask:
        if self.task is None:
            raise RuntimeError("setup() has not loaded the task file")
        return self.task

    async def get_next_item(self) -> Scenario:
        task = self._task()
        # A resumed run continues its data order (the single-turn environments' training order).
        self._order.skip_trained(
            self.curr_step,
            self.config.batch_size,
            self.config.group_size,
            lambda: self._order.next_index(len(task.train)),
        )
        return task.train[self._order.next_index(len(task.train))]

    # --- sampling ---------------------------------------------------------------------------
    def _policy(self, split: str) -> Any:
        temperature = 0.0 if split == "eval" else self.config.temperature
        token_server = not any(isinstance(s, OpenAIServer) for s in self.server.servers)

        async def policy(tokens: list[int], max_tokens: int) -> Sample:
            if token_server:
                _, tokens_n, logprobs_n, _ = await self.server.tokens_and_logprobs_completion(
                    input_ids=tokens, max_tokens=max_tokens, temperature=temperature, n=1, split=split
                )
                out = list(tokens_n[0])
                return Sample(
                    out, [float(x) for x in logprobs_n[0]], self.tokenizer.decode(out, skip_special_tokens=True)
                )
            # A text-only server (smoke tests with an OpenAI-type model): the prompt as text.
            prompt = self.tokenizer.decode(tokens)
            completion = await self.server.completion(
                prompt=prompt, max_tokens=max_tokens, temperature=temperature, n=1, split=split
            )
            text = completion.choices[0].text or ""
            return Sample(list(self.tokenizer.encode(text, add_special_tokens=False)), None, text)

        return policy

    def _context(self) -> int:
        limit = self.config.max_token_length
        return min(limit, self.max_token_len) if self.max_token_len and self.max_token_len > 0 else limit

    async def _episodes(self, scenario: Scenario, count: int, split: str) -> list[Trajectory]:
        task = self._task()
        policy = self._policy(split)
        results = await asyncio.gather(
            *(
                run_episode(task, scenario, self.tokenizer, policy, context_tokens=self._context())
                for _ in range(count)
            ),
            return_exceptions=True,
        )
        played: list[Trajectory] = []
        errors: list[str] = []
        for result in results:
            if isinstance(result, Trajectory):
                played.append(result)
            elif isinstance(result, Exception):
                errors.append(f"{type(result).__name__}: {result}")
            else:
                raise result
        self._counters.dropped_total += len(errors)
        for error in errors:
            log.warning("MCP %s: episode dropped: %s", task.name, error)
        if not played:
            raise RuntimeError(f"every episode of the scenario failed; the first error: {errors[0]}")
        return played

    async def collect_trajectories(self, item: Scenario) -> tuple[ScoredDataGroup | None, list[Any]]:
        played = await self._episodes(item, self.config.group_size, "train")
        for trajectory in played:
            self._counters.add(trajectory)
        if len(played) < self.config.group_size:
            return None, []  # a group of another size would upset Atropos's batching
        group = ScoredDataGroup(**scored_group(played))
        group["generation_params"] = {"temperature": self.config.temperature}
        if not self.config.include_messages:
            group["messages"] = None
        return group, []

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        task = self._task()
        scenarios = list(task.held_out)
        if self.config.eval_scenarios:
            scenarios = scenarios[: self.config.eval_scenarios]
        start = time.time()
        samples: list[dict[str, Any]] = []
        for scenario in scenarios:
            try:
                (t,) = await self._episodes(scenario, 1, "eval")
            except RuntimeError as exc:
                log.warning("MCP %s: held-out scenario not played: %s", task.name, exc)
                continue
            samples.append(
                {
                    "id": hashlib.sha256(scenario.prompt.encode()).hexdigest()[:16],
                    "score": t.reward,
                    "turns": t.turns,
                    "tool_calls": t.tool_calls,
                    "answered": t.end is EndReason.ANSWER,
                    "response": t.answer or "",
                }
            )
        if not samples:
            return
        n = len(samples)
        self._eval_metrics = {
            "eval/percent_correct": sum(s["score"] for s in samples) / n,
            "eval/tool_calls_per_episode": sum(s["tool_calls"] for s in samples) / n,
            "eval/seconds": time.time() - start,
        }
        if self.config.data_dir_to_save_evals:
            await self.evaluate_log(metrics=dict(self._eval_metrics), samples=samples, verbose=False)

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        metrics = {} if wandb_metrics is None else wandb_metrics
        metrics.update(self._counters.drain())
        metrics.update(self._eval_metrics)
        self._eval_metrics = {}
        await super().wandb_log(metrics)


if __name__ == "__main__":
    McpEnv.cli()
