"""The judge reward through OpenRouter's real client path (httpx at the loopback fake): scores
relative within a group, prices, the cap, the cache, malformed and refused answers; the key kept
from the MCP server; the verdict kept with the rollouts."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_rl.environments.mcp_family import judge as judge_mod
from mcp_rl.environments.mcp_family.judge import (
    Judge,
    JudgeCostCapReached,
    JudgeReply,
    JudgeUnavailable,
    OpenRouterJudge,
    parse_scores,
)
from mcp_rl.environments.mcp_family.server import mcp_server_env
from mcp_rl.environments.mcp_family.taskfile import JudgeSpec, Scenario, TaskFileError, keys_needed, load
from tests.fakes.fake_openrouter import PRICE_PER_TOKEN_USD, FakeOpenRouter, _tokens
from tests.mcp_family.kit import write_task

MODEL = "fake/judge"
SCENARIO = Scenario(prompt="What is the capital of Peru?", answer="Lima", data={}, line=1)


def episode(answer: str, called: bool = True) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": "tools..."}, {"role": "user", "content": SCENARIO.prompt}]
    if called:
        messages += [
            {
                "role": "assistant",
                "content": '<tool_call>{"name": "capital", "arguments": {"country": "Peru"}}</tool_call>',
            },
            {"role": "user", "content": "<tool_response>\nLima\n</tool_response>"},
        ]
    return [*messages, {"role": "assistant", "content": answer}]


class Responder:
    """A judge that reads the trajectories it was shown: 1 to those ending in Lima, 0.2 to the
    rest; `plan` replaces answers in order ("garbage", "range", "short")."""

    def __init__(self, plan: list[str] | None = None) -> None:
        self.plan = list(plan or [])
        self.shown: list[list[str]] = []
        self.answers: list[str] = []

    def __call__(self, model: str, prompt: str, index: int) -> str:
        bodies = re.findall(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', prompt, flags=re.S)
        self.shown.append([b for _, b in bodies])
        mode = self.plan.pop(0) if self.plan else "ok"
        scores = [
            {
                "trajectory_id": i,
                "explanation": "found it" if b.rstrip().endswith("Lima") else "no",
                "score": 1.0 if b.rstrip().endswith("Lima") else 0.2,
            }
            for i, b in bodies
        ]
        if mode == "garbage":
            answer = "Trajectory 1 is clearly the best, I would say."
        elif mode == "range":
            answer = json.dumps({"scores": [{**s, "score": 7} for s in scores]})
        elif mode == "short":
            answer = json.dumps({"scores": scores[:-1]})
        else:
            answer = "Here you are:\n```json\n" + json.dumps({"scores": scores}) + "\n```"
        self.answers.append(answer)
        return answer


def spec(**kw: Any) -> JudgeSpec:
    return JudgeSpec(model=MODEL, max_cost_usd=kw.pop("max_cost_usd", 1.0), **kw)


async def make_judge(fake: FakeOpenRouter, key: str = "sk-or-test", **kw: Any) -> tuple[Judge, OpenRouterJudge]:
    client = OpenRouterJudge(fake.base_url, key)
    return Judge(spec(**kw), client, await client.price(MODEL)), client


def test_a_group_is_scored_relative_and_priced_as_openrouter_reports() -> None:
    responder = Responder()
    with FakeOpenRouter(
        responder=responder, behaviours={MODEL: "ok"}, api_key="sk-or-test", reported_cost_factor=3.0
    ) as fake:

        async def main() -> Any:
            judge, client = await make_judge(fake)
            try:
                return judge, await judge.score(
                    SCENARIO, ["capital"], [episode("Lima"), episode("Cusco"), episode("Lima", called=False)]
                )
            finally:
                await client.aclose()

        judge, verdict = anyio.run(main)
        (request,) = fake.completions_for(MODEL)
    assert verdict.scores == [1.0, 0.2, 1.0] and verdict.reasons[1] == "no" and verdict.error is None
    assert request.authorization == "Bearer sk-or-test" and request.body["usage"] == {"include": True}
    assert request.body["max_tokens"] == 1024 and request.body["temperature"] == 0.0
    # The rubric and the request are in the prompt; the system prompt (the tool listing) is not.
    system, user = request.body["messages"]
    assert "Grading standards" in system["content"] and "fewer, correct tool calls" in system["content"]
    assert SCENARIO.prompt in user["content"] and "tools..." not in user["content"]
    # Priced as OpenRouter reported it (3x the list price here), not recomputed from the list price.
    prompt = "\n".join(m["content"] for m in request.body["messages"])
    listed = (len(_tokens(prompt)) + len(_tokens(responder.answers[0]))) * PRICE_PER_TOKEN_USD
    assert math.isclose(verdict.cost_usd, 3 * listed, rel_tol=1e-6)
    assert math.isclose(judge.ledger.spent_usd, verdict.cost_usd) and judge.ledger.priced_from_tokens == 0
    record = verdict.record()
    assert record["model"] == MODEL and record["scores"] == [1.0, 0.2, 1.0] and "<trajectory" in record["prompt"]


def test_an_unreported_cost_is_priced_from_the_token_counts() -> None:
    async def ask(messages: list[dict[str, str]], s: JudgeSpec) -> JudgeReply:
        n = len(re.findall("<trajectory ", messages[1]["content"]))
        answer = json.dumps({"scores": [{"trajectory_id": i, "score": 0.5} for i in range(1, n + 1)]})
        return JudgeReply(answer, prompt_tokens=1000, completion_tokens=100, cost_usd=None)

    judge = Judge(spec(), ask, (2e-6, 8e-6))
    verdict = anyio.run(lambda: judge.score(SCENARIO, [], [episode("a"), episode("b")]))
    assert math.isclose(verdict.cost_usd, 1000 * 2e-6 + 100 * 8e-6) and judge.ledger.priced_from_tokens == 1


def test_the_cache_and_duplicates_cost_no_second_call() -> None:
    responder = Responder()
    with FakeOpenRouter(responder=responder, behaviours={MODEL: "ok"}) as fake:

        async def main() -> Any:
            judge, client = await make_judge(fake)
            try:
                first = await judge.score(
                    SCENARIO, [], [episode("Lima"), episode("Cusco"), episode("Lima"), episode("Lima")]
                )
                spent = judge.ledger.spent_usd
                # The same trajectories again, in another order and count: from the cache.
                again = await judge.score(SCENARIO, [], [episode("Cusco"), episode("Lima")])
                return judge, first, again, spent
            finally:
                await client.aclose()

        judge, first, again, spent = anyio.run(main)
        requests = fake.completions_for(MODEL)
    assert len(requests) == 1 and len(responder.shown[0]) == 2  # 4 episodes, 2 distinct texts shown
    assert first.scores == [1.0, 0.2, 1.0, 1.0]
    assert again.cached and again.scores == [0.2, 1.0] and again.cost_usd == 0.0
    assert judge.ledger.spent_usd == spent and judge.ledger.cache_hits == 1


def test_the_cap_is_held_before_each_call() -> None:
    responder = Responder()
    with FakeOpenRouter(responder=responder, behaviours={MODEL: "ok"}) as fake:

        async def main(cap: float, groups: int) -> tuple[Judge, list[Any]]:
            judge, client = await make_judge(fake, max_cost_usd=cap, max_tokens=100)
            out: list[Any] = []
            try:
                for g in range(groups):
                    out.append(await judge.score(SCENARIO, [], [episode(f"Lima {g}"), episode(f"Cusco {g}")]))
            except JudgeCostCapReached as exc:
                out.append(exc)
            finally:
                await client.aclose()
            return judge, out

        # A cap below one call's bound: refused before any request.
        judge, out = anyio.run(main, 0.0001, 3)
        assert isinstance(out[0], JudgeCostCapReached) and fake.completions_for(MODEL) == []
        assert "judge.max_cost_usd $0.0001" in str(out[0]) and "$0.0000 spent on 0 calls" in str(out[0])
        # Room for some calls: it stops before the call that could pass the cap, never after.
        judge, out = anyio.run(main, 0.0045, 50)
        stopped = out[-1]
        assert isinstance(stopped, JudgeCostCapReached) and 1 <= len(out) - 1 < 50
        assert judge.ledger.spent_usd <= 0.0045 and len(fake.completions_for(MODEL)) == len(out) - 1


@pytest.mark.parametrize(
    ("plan", "says"), [(["garbage", "garbage"], "no JSON object"), (["range", "short"], "not trajectories")]
)
def test_a_malformed_answer_is_retried_once_then_scores_zero_with_the_reason(plan: list[str], says: str) -> None:
    with FakeOpenRouter(responder=Responder(plan), behaviours={MODEL: "ok"}) as fake:

        async def main() -> Any:
            judge, client = await make_judge(fake)
            try:
                return judge, await judge.score(SCENARIO, [], [episode("Lima"), episode("Cusco")])
            finally:
                await client.aclose()

        judge, verdict = anyio.run(main)
        assert len(fake.completions_for(MODEL)) == 2
    assert verdict.scores == [0.0, 0.0] and verdict.attempts == 2 and verdict.error is not None
    assert says in verdict.error and verdict.reasons == [verdict.error] * 2
    assert judge.ledger.malformed == 2 and judge.ledger.zeroed_groups == 1 and verdict.cost_usd > 0
    # A retry that answers well is used.
    with FakeOpenRouter(responder=Responder(["garbage"]), behaviours={MODEL: "ok"}) as fake:

        async def again() -> Any:
            judge, client = await make_judge(fake)
            try:
                return await judge.score(SCENARIO, [], [episode("Lima"), episode("Cusco")])
            finally:
                await client.aclose()

        verdict = anyio.run(again)
    assert verdict.scores == [1.0, 0.2] and verdict.attempts == 2 and verdict.error is None


@pytest.mark.parametrize("behaviour", ["malformed", "fail"])
def test_an_answer_without_choices_or_a_server_error_never_crashes(behaviour: str) -> None:
    with FakeOpenRouter(behaviours={MODEL: behaviour}) as fake:

        async def main() -> Any:
            judge, client = await make_judge(fake)
            try:
                return await judge.score(SCENARIO, [], [episode("Lima"), episode("Cusco")])
            finally:
                await client.aclose()

        verdict = anyio.run(main)
        assert len(fake.completions_for(MODEL)) == 2
    assert verdict.scores == [0.0, 0.0] and verdict.error is not None


@pytest.mark.parametrize(
    ("behaviour", "key", "says"), [("nocredits", "sk-or-test", "no credits"), ("ok", "sk-wrong", "refused the key")]
)
def test_a_judge_that_cannot_work_raises_so_the_run_ends_with_the_cause(behaviour: str, key: str, says: str) -> None:
    with FakeOpenRouter(behaviours={MODEL: behaviour}, api_key="sk-or-test") as fake:

        async def main() -> None:
            judge, client = await make_judge(fake, key=key)
            try:
                await judge.score(SCENARIO, [], [episode("Lima"), episode("Cusco")])
            finally:
                await client.aclose()

        with pytest.raises(JudgeUnavailable, match=says) as info:
            anyio.run(main)
    assert key not in str(info.value)


def test_a_model_without_a_price_is_refused_and_the_local_judge_is_free() -> None:
    with FakeOpenRouter(behaviours={MODEL: "ok"}) as fake:

        async def price(model: str) -> Any:
            client = OpenRouterJudge(fake.base_url, "k")
            try:
                return await client.price(model)
            finally:
                await client.aclose()

        assert anyio.run(price, MODEL) == (PRICE_PER_TOKEN_USD, PRICE_PER_TOKEN_USD)
        assert anyio.run(price, "nobody/unlisted") is None
    with pytest.raises(JudgeUnavailable, match="no price"):
        Judge(spec(), OpenRouterJudge("http://127.0.0.1:9", "k"), None)

    async def local(messages: list[dict[str, str]], s: JudgeSpec) -> JudgeReply:
        return JudgeReply(
            '{"scores": [{"trajectory_id": 1, "score": 1}, {"trajectory_id": "2", "score": 0}]}', 10**6, 10**6
        )

    free = Judge(JudgeSpec(model="local"), local, None)
    verdict = anyio.run(lambda: free.score(SCENARIO, [], [episode("a"), episode("b")]))
    assert verdict.scores == [1.0, 0.0] and free.ledger.spent_usd == 0.0


def test_parse_scores_accepts_only_the_asked_shape() -> None:
    good = json.dumps(
        {"scores": [{"trajectory_id": "2", "score": 0.1}, {"trajectory_id": 1, "score": 1, "explanation": "x"}]}
    )
    assert parse_scores("noise " + good + " trailing {", 2) == ([1.0, 0.1], ["x", ""])
    for bad in (
        '{"scores": {}}',
        '{"scores": [{"score": 1}]}',
        '{"scores": [{"trajectory_id": 1, "score": "high"}]}',
        '{"scores": [{"trajectory_id": 1, "score": NaN}]}',
        "[1, 2]",
    ):
        with pytest.raises(judge_mod.JudgeAnswerError):
            parse_scores(bad, 1)


def _judge_task(folder: Path, judge: str) -> Path:
    path = write_task(folder, extra=f"reward: {{kind: judge}}\njudge: {judge}\n")
    return path


def test_the_task_file_judge_section(tmp_path: Path) -> None:
    task = load(_judge_task(tmp_path, "{model: openai/gpt-4o-mini, max_cost_usd: 2, rubric: 'Shorter is better.'}"))
    assert task.spec.judge is not None and task.spec.judge.rubric == "Shorter is better."
    assert task.reward("anything", task.train[0], []) == 0.0  # the group's judge sets it
    with pytest.raises(TaskFileError, match="judge.max_cost_usd is required"):
        load(_judge_task(tmp_path, "{model: openai/gpt-4o-mini}"))
    with pytest.raises(TaskFileError, match="given exactly when reward.kind is judge"):
        load(write_task(tmp_path, extra="judge: {model: local}\n"))
    assert load(_judge_task(tmp_path, "{model: local}")).spec.judge is not None


def test_the_judge_key_reaches_the_environment_process_never_the_server(tmp_path: Path, settings: Any) -> None:
    paid = (
        _judge_task(tmp_path / "a", "{model: openai/gpt-4o-mini, max_cost_usd: 2}")
        if (tmp_path / "a").mkdir() is None
        else None
    )
    local = _judge_task(tmp_path / "b", "{model: local}") if (tmp_path / "b").mkdir() is None else None
    assert paid is not None and local is not None
    assert keys_needed(str(paid)) == ["OPENROUTER_API_KEY", "OPENROUTER_BASE_URL"]
    assert keys_needed(str(local)) == [] and keys_needed(str(tmp_path / "missing.mcp.yaml")) == []
    source = {
        "PATH": "/bin",
        "OPENROUTER_API_KEY": "sk-or-v1-" + "a" * 40,
        "OPENROUTER_BASE_URL": "http://127.0.0.1:1/api/v1",
    }
    env_process = settings.user_code_env(keys_needed(str(paid)), base=source)
    assert env_process.get("OPENROUTER_API_KEY")  # the environment process may call the judge
    assert "OPENROUTER_API_KEY" not in settings.user_code_env(keys_needed(str(local)), base=source)
    task = load(paid)
    server = mcp_server_env([*task.spec.server.env_vars, "OPENROUTER_API_KEY"], env_process)
    assert "OPENROUTER_API_KEY" not in server and server["PATH"] == "/bin"


def test_the_estimate_is_bounded_by_the_cap() -> None:
    s = spec(max_cost_usd=5.0, max_tokens=500)
    found = judge_mod.estimate(
        s, (1e-6, 2e-6), group_size=4, groups=100, evaluations=3, held_out=10, trajectory_chars=4000
    )
    per_call = judge_mod.call_bound_usd(
        len(judge_mod.INSTRUCTIONS) + len(s.rubric) + 1000 + 4 * 4000, 500, (1e-6, 2e-6)
    )
    assert math.isclose(found.per_call_usd, per_call) and found.calls == 130
    assert found.at_most_usd <= 5.0 and "judge.max_cost_usd $5" in found.note
    cheap = judge_mod.estimate(spec(max_cost_usd=1000.0), (1e-7, 1e-7), 2, 3, 2, 1, 100)
    assert 0 < cheap.at_most_usd < 1000.0


def test_the_verdict_is_kept_with_the_rollouts(tmp_path: Path) -> None:
    from mcp_rl.rundir import read_rollouts
    from mcp_rl.trainer.backends.base import TrainingExample
    from mcp_rl.trainer.rollouts import rollout_groups

    verdict = {
        "model": MODEL,
        "prompt": '<trajectory id="1">',
        "scores": [1.0, 0.2],
        "reasons": ["a", "b"],
        "cost_usd": 0.001,
    }
    group = {
        "tokens": [[1, 2, 3], [1, 2, 4]],
        "scores": [1.0, 0.2],
        "messages": [
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": a}] for a in ("Lima", "Cusco")
        ],
        "group_overrides": {"judge": verdict},
    }
    examples = [TrainingExample([1, 2], [2, 3], [0.0, 0.5], None, [False, True]) for _ in range(2)]
    kept = rollout_groups(1, [group], examples)
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(g.model_dump_json() + "\n" for g in kept))
    (back,) = read_rollouts(path)
    assert back.judge == verdict and [a.reward for a in back.answers] == [1.0, 0.2]


def test_the_run_estimate_adds_the_judge_priced_from_openrouter(tmp_path: Path, home: Path) -> None:
    from mcp_rl.config.training_cost import estimate_training
    from mcp_rl.settings import Settings
    from tests.conftest import make_env
    from tests.kit.runs import arithmetic_run_config

    (tmp_path / "t").mkdir()
    task_file = _judge_task(tmp_path / "t", "{model: fake/judge, max_cost_usd: 0.05}")
    with FakeOpenRouter(behaviours={MODEL: "ok"}) as fake:
        settings = Settings.from_env(make_env(home, OPENROUTER_BASE_URL=fake.base_url))
        config = arithmetic_run_config(
            tmp_path / "run",
            tmp_path,
            num_steps=10,
            batch_size=8,
            group_size=4,
            env_overrides={"task_file": str(task_file)},
        )
        estimate = estimate_training(settings, config)
        plain = estimate_training(settings, arithmetic_run_config(tmp_path / "run2", tmp_path))
        assert not fake.completions_for(MODEL)  # an estimate makes no paid call
    judged = estimate.as_dict()["judge"]
    assert judged["model"] == MODEL and judged["calls"] == 10 * 2 + 2 * len(load(task_file).held_out)
    assert 0 < judged["at_most_usd"] <= 0.05 and judged["max_cost_usd"] == 0.05
    assert (
        "Plus the judge: at most $" in estimate.summary() and "held to judge.max_cost_usd $0.05" in estimate.summary()
    )
    assert plain.judge is None and "judge" not in plain.as_dict() and "judge" not in plain.summary()
    with FakeOpenRouter(catalog=["someone/else"]) as fake:
        settings = Settings.from_env(make_env(home, OPENROUTER_BASE_URL=fake.base_url))
        unknown = estimate_training(settings, config).as_dict()["judge"]
    assert unknown["at_most_usd"] is None and "no price for 'fake/judge'" in unknown["summary"]


def test_the_cap_holds_over_every_process_of_a_run_and_survives_a_restart(tmp_path: Path) -> None:
    from mcp_rl.environments.mcp_family.judge import SpendFile

    spend_path = tmp_path / "run" / "judge_spend.json"
    with FakeOpenRouter(responder=Responder(), behaviours={MODEL: "ok"}) as fake:

        async def main() -> tuple[list[Judge], Exception]:
            # Two judges sharing the run's spend file, as the training environment and a held-out
            # evaluation do (separate processes; the file's lock is per open file, so this holds too).
            judges = []
            for _ in range(2):
                client = OpenRouterJudge(fake.base_url, "k")
                judges.append(
                    Judge(
                        spec(max_cost_usd=0.0045, max_tokens=100),
                        client,
                        await client.price(MODEL),
                        SpendFile(spend_path),
                    )
                )
            try:
                for g in range(50):
                    await judges[g % 2].score(SCENARIO, [], [episode(f"Lima {g}"), episode(f"Cusco {g}")])
            except JudgeCostCapReached as exc:
                return judges, exc
            raise AssertionError("the cap never stopped the judges")

        judges, stopped = anyio.run(main)
        calls = len(fake.completions_for(MODEL))
    total = SpendFile(spend_path).total()
    assert total <= 0.0045 and "spent by this run" in str(stopped)
    assert math.isclose(total, sum(j.ledger.spent_usd for j in judges), rel_tol=1e-9)
    assert judges[0].ledger.calls >= 1 and judges[1].ledger.calls >= 1 and calls == sum(j.ledger.calls for j in judges)
    # A resumed run's environment goes on from the spend recorded: it is refused at once.
    with FakeOpenRouter(responder=Responder(), behaviours={MODEL: "ok"}) as fake:

        async def resumed() -> None:
            client = OpenRouterJudge(fake.base_url, "k")
            judge = Judge(
                spec(max_cost_usd=0.0045, max_tokens=100), client, await client.price(MODEL), SpendFile(spend_path)
            )
            await judge.score(SCENARIO, [], [episode("Lima x" * 20), episode("Cusco x" * 20)])  # (a larger call)

        with pytest.raises(JudgeCostCapReached):
            anyio.run(resumed)
        assert fake.completions_for(MODEL) == []


@pytest.mark.parametrize(
    ("judge", "gets_key"), [("{model: fake/judge, max_cost_usd: 1}", True), ("{model: local}", False)]
)
def test_the_run_hands_the_key_and_the_spend_file_to_the_environment_process_only(
    tmp_path: Path, home: Path, judge: str, gets_key: bool
) -> None:
    from mcp_rl.rundir import JUDGE_SPEND_FILE
    from mcp_rl.settings import Settings
    from mcp_rl.supervisor.launch import build_specs
    from mcp_rl.supervisor.supervisor import Policy
    from tests.conftest import make_env
    from tests.kit.runs import arithmetic_run_config

    (tmp_path / "t").mkdir()
    task_file = _judge_task(tmp_path / "t", judge)
    key = "sk-or-v1-" + "b" * 48
    settings = Settings.from_env(make_env(home, OPENROUTER_API_KEY=key))
    config = arithmetic_run_config(tmp_path / "run", tmp_path, env_overrides={"task_file": str(task_file)})
    specs = {s.name: s for s in build_specs(config, config.paths.run_dir / "run.yaml", settings, Policy())}
    assert (specs["env"].env.get("OPENROUTER_API_KEY") == key) is gets_key
    assert specs["env"].env["MCP_RL_JUDGE_SPEND_FILE"] == str(config.paths.run_dir / JUDGE_SPEND_FILE)
    assert "OPENROUTER_API_KEY" not in specs["api"].env
    # ... and from that environment, the MCP server's process never gets it.
    assert "OPENROUTER_API_KEY" not in mcp_server_env(["OPENROUTER_API_KEY"], specs["env"].env)


def test_concurrent_groups_and_a_timed_out_call_are_counted_against_the_cap() -> None:
    release = anyio.Event()
    answered: list[int] = []

    async def slow_ask(messages: list[dict[str, str]], s: JudgeSpec) -> JudgeReply:
        await release.wait()
        answered.append(1)
        return JudgeReply('{"scores": [{"trajectory_id": 1, "score": 1}]}', 10, 10, cost_usd=0.0)

    judge = Judge(spec(max_cost_usd=0.002, max_tokens=1000), slow_ask, (1e-6, 1e-6))
    outcomes: list[Any] = []

    async def one(g: int) -> None:
        try:
            outcomes.append(await judge.score(SCENARIO, [], [episode(f"Lima {g}")]))
        except JudgeCostCapReached as exc:
            outcomes.append(exc)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for g in range(4):
                tg.start_soon(one, g)
            await anyio.wait_all_tasks_blocked()
            release.set()

    anyio.run(main)
    # Each call's bound is ~$0.0016: only one may be in flight under a $0.002 cap, whatever the timing.
    assert len(answered) == 1 and sum(isinstance(o, JudgeCostCapReached) for o in outcomes) == 3

    async def timing_out(messages: list[dict[str, str]], s: JudgeSpec) -> JudgeReply:
        raise judge_mod.JudgeCallFailed("ReadTimeout reaching OpenRouter", maybe_billed=True)

    late = Judge(spec(max_cost_usd=1.0, max_tokens=1000), timing_out, (1e-6, 1e-6))
    verdict = anyio.run(lambda: late.score(SCENARIO, [], [episode("Lima")]))
    assert verdict.error is not None and "ReadTimeout" in verdict.error
    assert verdict.cost_usd > 0.002 and late.ledger.spent_usd == verdict.cost_usd  # two calls at their bound
