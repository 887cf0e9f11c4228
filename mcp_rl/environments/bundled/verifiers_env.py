"""verifiers v1 tasksets (Prime Intellect's `verifiers` 0.4.0), trained through their own harness.

verifiers 0.4.0 pins `mcp==2.0.0`, so it never runs in mcp-rl's interpreter: this Atropos
environment keeps a worker (mcp_rl/environments/verifiers_worker.py) running in the verifiers
family's interpreter (mcp_rl.environments.families) and asks it for rollouts. The worker runs
each task through the taskset's harness (the null harness for a plain taskset: verifiers' own
chat program, synced with `uv`) on the local subprocess runtime against this run's model server
as a token-in `/inference/v1/generate` engine (verifiers' TrainClient), so every trace turn comes
back with the token ids, the sampled mask and the logprobs that were sampled: a turn is one
scored sequence (its prompt masked, its sampled tokens trained on exactly those logprobs), scored
with the trace's reward (`trace.reward`, the weighted sum of the taskset's `@vf.reward`s).

A failed episode (harness error, a stop on error, a worker that gave nothing back) is dropped and
counted, never scored 0: the group is filled from further rollouts. Held-out evaluation (greedy)
plays `eval_items` tasks of a seed range training never reaches: the taskset's own `seed` config
field set to 1e9 (tasks i = 0, 1, ... of it), the same tasks every evaluation.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup
from pydantic import Field

from mcp_rl.environments import families
from mcp_rl.environments.uv_setup import harness_env
from mcp_rl.scored_data import MASKED, PROMPT_LOGPROB
from mcp_rl.settings import Settings

log = logging.getLogger("mcp_rl.verifiers_env")

WORKER = Path(__file__).resolve().parent.parent / "verifiers_worker.py"
EVAL_SEED_BASE = 1_000_000_000
# Rounds of rollouts a group may take to fill before it is given up (every episode failing).
MAX_EMPTY_ROUNDS = 3
# The end of a failed episode's error kept for the message that gives a group up.
LAST_ERROR_CHARS = 600


class VerifiersEnvConfig(BaseEnvConfig):
    taskset: str = Field(
        "",
        description="The verifiers taskset id: its module name as verifiers' loader takes it "
        "(owner/name -> name, - -> _). Set by selecting verifiers:<id>.",
    )
    taskset_paths: str = Field(
        "", description="Folders holding the taskset's module (os.pathsep-separated), put on the worker's sys.path."
    )
    taskset_config: dict[str, Any] = Field(
        default_factory=dict,
        description='The taskset\'s own config fields (its TasksetConfig), e.g. {"seed": 0}; selection lists them.',
    )
    max_tokens: int = Field(64, ge=1, le=32768, description="Most tokens the policy samples per turn.")
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="Sampling temperature of training rollouts.")
    eval_items: int = Field(16, ge=0, le=10_000, description="Held-out tasks played (greedily) by each evaluation.")
    success_reward: float = Field(1.0, description="A trace counts as correct when its reward is at least this.")
    rollout_timeout_s: float = Field(600.0, gt=0, description="Seconds one batch of rollouts may take.")


class Worker:
    """The verifiers worker process: one JSON request a line in, one answer a line out."""

    def __init__(self, python: Path, paths: list[str], family_folder: Path) -> None:
        # The harness's uv is the one beside verifiers (first on PATH), with the machine's package
        # index and CA bundle as pip has them: nothing installed into ~/.local/bin (uv_setup).
        env = harness_env(family_folder, python, dict(os.environ))
        env["PYTHONPATH"] = os.pathsep.join(paths)
        # Our child, in our process group, with the run's marker (inherited): stopped with the run.
        self.proc = subprocess.Popen(
            [str(python), str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # into this environment's log
            env=env,
            text=True,
        )
        self._lock = threading.Lock()

    def ask(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        with self._lock:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"the verifiers worker exited with code {self.proc.returncode} (see this log)")
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            answer: list[str] = []
            reader = threading.Thread(target=lambda: answer.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
            reader.start()
            reader.join(timeout_s)
            if reader.is_alive() or not answer or not answer[0]:
                self.close()
                raise RuntimeError(f"the verifiers worker gave no answer in {timeout_s:g} s")
            data = json.loads(answer[0])
        if not data.get("ok"):
            raise RuntimeError(f"verifiers: {data.get('error')}")
        return data

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class VerifiersEnv(BaseEnv):
    """A verifiers v1 taskset, rolled out through its harness in the verifiers interpreter."""

    name = "verifiers"
    env_config_cls = VerifiersEnvConfig

    def __init__(
        self, config: VerifiersEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False
    ) -> None:
        super().__init__(config, server_configs, slurm, testing)
        self.config: VerifiersEnvConfig = config
        self._worker: Worker | None = None
        self._next = 0
        self._dropped = 0
        self._dropped_by_reason: dict[str, int] = {}
        self._rewards: list[float] = []
        self._eval_metrics: dict[str, float] = {}
        self._has_seed = False
        self._last_error = ""

    @classmethod
    def config_init(cls) -> tuple[VerifiersEnvConfig, list[APIServerConfig]]:
        config = VerifiersEnvConfig(
            group_size=8,
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
        if not self.config.taskset:
            raise ValueError("set taskset (select verifiers:<id>)")
        python = await asyncio.to_thread(families.build, Settings.from_env(), families.Family.VERIFIERS)
        paths = [p for p in self.config.taskset_paths.split(os.pathsep) if p]
        self._worker = Worker(python.python, paths, python.folder)
        atexit.register(self._worker.close)
        described = await asyncio.to_thread(
            self._worker.ask,
            {"op": "describe", "taskset": self.config.taskset, "config": self.config.taskset_config},
            300,
        )
        self._has_seed = any(f["name"] == "seed" for f in described["fields"])
        log.info(
            "verifiers taskset %s (%s) ready; fields %s", self.config.taskset, described["class"], described["fields"]
        )

    def _server(self) -> tuple[str, str, str, str | None]:
        """(base URL, model name, tokenizer, the variable holding the endpoint's key or None)."""
        cfg = self.server.servers[0].config
        base = str(cfg.base_url).rstrip("/").removesuffix("/v1")
        # No key in the config: Atropos's openai client reads OPENAI_API_KEY (a smoke test's
        # gateway token); the worker's client reads the same variable then, and no key otherwise.
        key_var = "OPENAI_API_KEY" if cfg.api_key is None else None
        return base, str(cfg.model_name), str(self.config.tokenizer_name), key_var

    async def _rollouts(self, start: int, count: int, n: int, split: str) -> list[dict[str, Any]]:
        assert self._worker is not None
        base, model, tokenizer, key_var = self._server()
        config = dict(self.config.taskset_config)
        if split == "eval" and self._has_seed:
            config["seed"] = EVAL_SEED_BASE
        request = {
            "op": "rollouts",
            "taskset": self.config.taskset,
            "config": config,
            "start": start,
            "count": count,
            "n": n,
            "base_url": base,
            "model": model,
            "renderer_model": tokenizer,
            "api_key_var": key_var,
            "sampling": {
                "max_tokens": self.config.max_tokens,
                "temperature": 0.0 if split == "eval" else self.config.temperature,
            },
        }
        answer = await asyncio.to_thread(self._worker.ask, request, self.config.rollout_timeout_s)
        episodes: list[dict[str, Any]] = answer["episodes"]
        for episode in episodes:
            if not episode.get("ok") or not episode.get("turns"):
                reason = (episode.get("error") or "no turns").split(":", 1)[0].replace(" ", "_")[:40] or "failed"
                self._dropped += 1
                self._dropped_by_reason[reason] = self._dropped_by_reason.get(reason, 0) + 1
                self._last_error = str(episode.get("error") or "no turns")
                log.warning(
                    "verifiers %s: episode of task %s dropped: %s",
                    self.config.taskset,
                    episode.get("task"),
                    episode.get("error"),
                )
        return [e for e in episodes if e.get("ok") and e.get("turns")]

    async def get_next_item(self) -> int:
        # Task i of the taskset's stream; a resumed run moves past what it may have played.
        if self._next == 0 and self.curr_step > 0:
            self._next = self.curr_step * max(self.config.batch_size, 1)
        item, self._next = self._next, self._next + 1
        return item

    async def collect_trajectories(self, item: int) -> tuple[ScoredDataGroup | None, list[Any]]:
        size = self.config.group_size
        kept: list[dict[str, Any]] = []
        empty = 0
        while len(kept) < size:
            got = await self._rollouts(item, 1, size - len(kept), "train")
            if not got:
                empty += 1
                if empty >= MAX_EMPTY_ROUNDS:
                    # The cause in the message itself: a smoke test's answer shows this line, not the log.
                    cause = self._last_error[-LAST_ERROR_CHARS:]
                    raise RuntimeError(f"every rollout of task {item} failed {empty} times; the last error: {cause}")
            kept.extend(got)
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[], messages=[])
        group["generation_params"] = {"temperature": self.config.temperature}
        sequences = 0
        for episode in kept:
            reward = float(episode["reward"])
            self._rewards.append(reward)
            for turn in episode["turns"]:
                if sequences >= size:
                    break
                tokens, mask, logprobs = turn["token_ids"], turn["mask"], turn["logprobs"]
                group["tokens"].append(tokens)
                group["masks"].append([t if m else MASKED for t, m in zip(tokens, mask, strict=True)])
                group["inference_logprobs"].append(
                    [lp if m else PROMPT_LOGPROB for lp, m in zip(logprobs, mask, strict=True)]
                )
                group["scores"].append(reward)
                group["messages"].append(
                    [{"role": "user", "content": episode["prompt"]}, {"role": "assistant", "content": episode["reply"]}]
                )
                sequences += 1
        return group, []

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        if self.config.eval_items <= 0:
            return
        if not self._has_seed:
            log.warning(
                "verifiers %s: its config has no seed field, so no held-out range: evaluation skipped",
                self.config.taskset,
            )
            return
        start = time.time()
        episodes = await self._rollouts(0, self.config.eval_items, 1, "eval")
        if not episodes:
            return
        rewards = [float(e["reward"]) for e in episodes]
        successes = [1.0 if r >= self.config.success_reward else 0.0 for r in rewards]
        self._eval_metrics = {
            "eval/percent_correct": sum(successes) / len(successes),
            "eval/mean_reward": sum(rewards) / len(rewards),
            "eval/items": float(len(rewards)),
            "eval/seconds": time.time() - start,
        }
        # Per task, for mcp-rl's held-out figures (mcp_rl.proof.env_eval runs this evaluate()
        # against the base and the trained weights and pairs the tasks by index); Atropos writes
        # them only when data_dir_to_save_evals is set.
        if self.config.data_dir_to_save_evals:
            samples = [
                {
                    "id": f"task-{episode['task']}",
                    "score": success,
                    "reward": reward,
                    "question": episode.get("prompt", ""),
                    "response": episode.get("reply", ""),
                }
                for episode, reward, success in zip(episodes, rewards, successes, strict=True)
            ]
            await self.evaluate_log(metrics=dict(self._eval_metrics), samples=samples, verbose=False)

    async def wandb_log(self, wandb_metrics: dict[str, Any] | None = None) -> None:
        metrics = {} if wandb_metrics is None else wandb_metrics
        metrics["verifiers/dropped_episodes"] = float(self._dropped)
        metrics.update({f"verifiers/dropped/{k}": float(v) for k, v in self._dropped_by_reason.items()})
        if self._rewards:
            metrics["verifiers/mean_reward"] = sum(self._rewards) / len(self._rewards)
            metrics["train/percent_correct"] = sum(r >= self.config.success_reward for r in self._rewards) / len(
                self._rewards
            )
            self._rewards = []
        metrics.update(self._eval_metrics)
        self._eval_metrics = {}
        await super().wandb_log(metrics)


if __name__ == "__main__":
    VerifiersEnv.cli()
