"""Any MCP server as a training environment: the policy learns to use the server's tools.

Set `task_file` to an `*.mcp.yaml` task file (mcp_rl.environments.mcp_family.taskfile: the
server, the scenarios, the reward, the allowed tools, the limits). Each training item is one
scenario; a group plays it `group_size` times, each episode on a fresh server process, as one
token-level multi-turn sequence (policy tokens trained, tool output masked) scored by the task's
reward; GRPO compares the episodes of a group. evaluate() plays every held-out scenario greedily
(the same ones every time, split from training by the prompt's hash).

An episode the server fails (it did not start, it crashed) is dropped and counted; a group whose
every episode fails ends the run with the server's error (a broken server is a broken environment).

With `reward.kind: judge` a full group is scored by the task's judge (mcp_family/judge.py: an
OpenRouter model, priced and held to `judge.max_cost_usd`, or the local policy server); its prompt,
scores and reasons go with the group (`group_overrides["judge"]`) into the kept rollouts. The
OpenRouter key reaches this process only for such a task (the supervisor names it), never the
MCP server's own process (mcp_family/server.py `mcp_server_env`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from pydantic import Field

from mcp_rl.environments.mcp_family.chat_episode import ChatTurn, episode_facts, run_chat_episode
from mcp_rl.environments.mcp_family.episode import EndReason, Sample, Trajectory, run_episode, scored_group
from mcp_rl.environments.mcp_family.judge import Judge, JudgeReply, JudgeUnavailable, OpenRouterJudge, SpendFile
from mcp_rl.environments.mcp_family.taskfile import LOCAL_JUDGE, JudgeSpec, McpTask, Scenario, load
from mcp_rl.environments.training_order import TrainingOrder

log = logging.getLogger("mcp_rl.mcp_env")
LOCAL_MODEL_NAME = "local"  # the smoke test's name for the local model (mcp_rl.inference_test.runner)


class McpEnvConfig(BaseEnvConfig):
    task_file: str = Field(
        "", description="Path of the *.mcp.yaml task file (server, scenarios, reward, tools, limits)."
    )
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="Sampling temperature of training episodes.")
    eval_scenarios: int = Field(
        0, ge=0, le=100_000, description="Held-out scenarios each evaluation plays (0: all of them)."
    )
    seed: int = Field(0, ge=0, description="Seed of the training order.")
    tool_api: Literal["auto", "tools", "text"] = Field(
        "auto",
        description="How a text-only (OpenAI-type) server's model sees the tools in smoke tests: 'tools' the "
        "OpenAI tools API (hosted models), 'text' the rendered prompt as a completion; 'auto': 'text' for the "
        "local model, 'tools' otherwise. Training (a token server) always uses the rendered prompt.",
    )


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
        self.judge: Judge | None = None

    @classmethod
    def config_init(cls) -> tuple[McpEnvConfig, list[APIServerConfig]]:
        config = McpEnvConfig(
            group_size=4,
            batch_size=8,
            # Atropos's own default is 1000 steps: days of multi-turn episodes on a CPU, and a
            # judge's bound 50x the README's. 20 steps of 2 scenarios x 4 episodes is the run the
            # README prices; an agent sets total_steps for more.
            total_steps=20,
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
        if self.task.spec.judge is not None:
            self.judge = await self._make_judge(self.task.spec.judge)

    async def _make_judge(self, spec: JudgeSpec) -> Judge:
        if spec.model == LOCAL_JUDGE:
            return Judge(spec, self._local_ask, None)
        # mcp_rl.settings reads every variable; the supervisor hands this process the key only
        # for a task with a paid judge, and the run's shared spend file.
        from mcp_rl.settings import Settings

        settings = Settings.from_env()
        spend = SpendFile(settings.judge_spend_file) if settings.judge_spend_file is not None else None
        if settings.openrouter_api_key is None:
            raise JudgeUnavailable(
                f"the task's judge {spec.model!r} runs on OpenRouter: set OPENROUTER_API_KEY in the MCP server's "
                'environment, or use judge.model: "local"'
            )
        client = OpenRouterJudge(settings.openrouter_base_url, settings.openrouter_api_key.get_secret_value())
        return Judge(spec, client, await client.price(spec.model), spend)

    async def _local_ask(self, messages: list[dict[str, str]], spec: JudgeSpec) -> JudgeReply:
        """The local judge: the policy's own server, greedy, through its chat template."""
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        tokens = list(self.tokenizer.encode(text, add_special_tokens=False))
        sample = await self._policy("eval")(tokens, spec.max_tokens)
        return JudgeReply(sample.text)

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
        token_server = not self._text_server()

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

    def _text_server(self) -> bool:
        return any(isinstance(s, OpenAIServer) for s in self.server.servers)

    def _uses_tools_api(self) -> bool:
        """Smoke tests of a hosted model: the OpenAI tools API (the local model has none)."""
        if not self._text_server() or self.config.tool_api == "text":
            return False
        if self.config.tool_api == "tools":
            return True
        return all(s.config.model_name != LOCAL_MODEL_NAME for s in self.server.servers)

    def _chat(self, split: str) -> Any:
        temperature = 0.0 if split == "eval" else self.config.temperature
        max_tokens = self._task().spec.limits.max_tokens_per_turn

        async def chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ChatTurn:
            completion = await self.server.chat_completion(
                messages=messages, tools=tools, max_tokens=max_tokens, temperature=temperature, n=1, split=split
            )
            message = completion.choices[0].message
            calls = [(c.id, c.function.name, c.function.arguments or "") for c in (message.tool_calls or [])]
            return ChatTurn(message.content or "", calls)

        return chat

    def _context(self) -> int:
        limit = self.config.max_token_length
        return min(limit, self.max_token_len) if self.max_token_len and self.max_token_len > 0 else limit

    async def _episodes(self, scenario: Scenario, count: int, split: str) -> list[Trajectory]:
        task = self._task()
        if self._uses_tools_api():
            chat = self._chat(split)
            episodes = [run_chat_episode(task, scenario, chat) for _ in range(count)]
        else:
            policy = self._policy(split)
            episodes = [
                run_episode(task, scenario, self.tokenizer, policy, context_tokens=self._context())
                for _ in range(count)
            ]
        results = await asyncio.gather(*episodes, return_exceptions=True)
        played: list[Trajectory] = []
        errors: list[str] = []
        for result in results:
            if isinstance(result, Trajectory):
                if not result.tokens:  # a chat episode: its text as the sequence Atropos writes
                    text = "\n".join(str(m.get("content") or "") for m in result.messages)
                    result.add(list(self.tokenizer.encode(text, add_special_tokens=False)), trained=True)
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
        if len(played) < self.config.group_size:
            for trajectory in played:
                self._counters.add(trajectory)
            return None, []  # a group of another size would upset Atropos's batching
        verdict = await self._judged(item, played)
        for trajectory in played:
            self._counters.add(trajectory)
        group = ScoredDataGroup(**scored_group(played))
        if verdict is not None:
            group["group_overrides"] = {"judge": verdict}
        if self._text_server():  # a smoke test: each episode's tool use, for its report
            group["overrides"] = [{"mcp": episode_facts(t)} for t in played]
        group["generation_params"] = {"temperature": self.config.temperature}
        if not self.config.include_messages:
            group["messages"] = None
        return group, []

    async def _judged(self, scenario: Scenario, played: list[Trajectory]) -> dict[str, Any] | None:
        """With a judge: the episodes' rewards set from its verdict, and the verdict's record."""
        if self.judge is None:
            return None
        offered = self._offered(played)
        verdict = await self.judge.score(scenario, offered, [t.messages for t in played])
        for trajectory, score in zip(played, verdict.scores, strict=True):
            trajectory.reward = score
        return verdict.record()

    def _offered(self, played: list[Trajectory]) -> list[str]:
        return list(dict.fromkeys(name for t in played for name in t.offered))

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
            await self._judged(scenario, [t])  # a held-out episode is judged alone
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
        if self.judge is not None:
            metrics.update(self.judge.metrics())
        metrics.update(self._eval_metrics)
        self._eval_metrics = {}
        await super().wandb_log(metrics)


if __name__ == "__main__":
    McpEnv.cli()
