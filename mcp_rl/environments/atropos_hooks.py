"""Every patch mcp-rl makes to Atropos (and the libraries an environment process loads with it),
in one place with one marker. Only the environment's process installs them: the runner
(`runner`), a smoke test's child (`mcp_rl.inference_test.child`) and the validator's child
(`validate_atropos`).

    BaseEnv.wandb_log, BaseEnv.evaluate_log    also report what they are given (eval_capture)
    wandb.log                                  also reports what it is given (eval_capture)
    <env>.evaluate                             reports what it left behind (eval_capture)
    <env>.collect_trajectories                 every group scored or raised on (failure_report)
    <env>.handle_send_to_api                   checks a group before it is sent (score_guard)
    <env>.config_init                          the runner's fallback config, the smoke test's one
                                               server (runner, inference_test.child)
    AutoTokenizer.from_pretrained              hands over the prewarmed tokenizer once (runner)

What each hook does is its caller's: here a hook only wraps the original, which it always calls.
Every wrapper carries the marker `MARK`, so installing a hook a second time (or on a class whose
parent has it) changes nothing: the owner of the first install is the one that is called.

Nothing here imports atroposlib or wandb at module level: they are imported by the function that
patches them, in a process that has them loaded.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

MARK = "__mcp_rl_hook__"


def hooked(function: Any) -> bool:
    """True when `function` is one of these wrappers (a bound method reads its function's mark)."""
    return bool(getattr(function, MARK, False))


def _mark(wrapper: Any) -> Any:
    setattr(wrapper, MARK, True)
    return wrapper


# --- Atropos's BaseEnv --------------------------------------------------------------------------
def after_wandb_log(callback: Callable[[Any, dict[str, Any]], None]) -> None:
    """After every `BaseEnv.wandb_log(metrics)` (also one that raised): `callback(env, metrics)`,
    with the dict the base method filled (completion lengths, perf stats: it adds its keys to the
    dict it is given before prefixing a copy for W&B)."""
    # atroposlib is heavy: only the environment process (which has it loaded) installs hooks
    from atroposlib.envs.base import BaseEnv

    original = BaseEnv.wandb_log
    if hooked(original):
        return

    @functools.wraps(original)
    async def wandb_log(self: Any, wandb_metrics: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> None:
        metrics = {} if wandb_metrics is None else wandb_metrics
        try:
            await original(self, metrics, *args, **kwargs)
        finally:
            callback(self, metrics)

    BaseEnv.wandb_log = _mark(wandb_log)


def before_evaluate_log(callback: Callable[[Any, dict[str, Any]], None]) -> None:
    """Before every `BaseEnv.evaluate_log(metrics, ...)`: `callback(env, metrics)`."""
    # atroposlib is heavy: only the environment process (which has it loaded) installs hooks
    from atroposlib.envs.base import BaseEnv

    original = BaseEnv.evaluate_log
    if hooked(original):
        return

    @functools.wraps(original)
    async def evaluate_log(self: Any, metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        callback(self, metrics)
        return await original(self, metrics, *args, **kwargs)

    BaseEnv.evaluate_log = _mark(evaluate_log)


def after_evaluate(cls: Any, callback: Callable[[Any, Any], Awaitable[None]]) -> None:
    """After `cls.evaluate()` returns: `await callback(env, what it returned)`; then it is returned."""
    original = cls.evaluate
    if hooked(original):
        return

    @functools.wraps(original)
    async def evaluate(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, *args, **kwargs)
        await callback(self, result)
        return result

    cls.evaluate = _mark(evaluate)


def around_collect_trajectories(
    cls: Any, returned: Callable[[Any], None], raised: Callable[[BaseException], None]
) -> None:
    """`returned(result)` after each `cls.collect_trajectories(item)` returns, `raised(exc)` when
    it raises (the exception is raised on: Atropos behaves as before)."""
    original = cls.collect_trajectories
    if hooked(original):
        return

    @functools.wraps(original)
    async def collect_trajectories(self: Any, item: Any) -> Any:
        try:
            result = await original(self, item)
        except Exception as exc:
            raised(exc)
            raise
        returned(result)
        return result

    cls.collect_trajectories = _mark(collect_trajectories)


def before_send(cls: Any, check: Callable[[Any, Any], None]) -> None:
    """`check(scored_data, item)` before `cls.handle_send_to_api` sends a group (it may raise)."""
    original = cls.handle_send_to_api
    if hooked(original):
        return

    @functools.wraps(original)
    async def handle_send_to_api(self: Any, scored_data: Any, item: Any = None, *args: Any, **kwargs: Any) -> Any:
        check(scored_data, item)
        return await original(self, scored_data, item, *args, **kwargs)

    cls.handle_send_to_api = _mark(handle_send_to_api)


def around_config_init(cls: Any, wrap: Callable[[Callable[[], Any]], Any]) -> None:
    """`cls.config_init()` becomes `wrap(original config_init)` (what Atropos's CLI calls first)."""
    original = cls.config_init
    if hooked(original):
        return

    def config_init(_cls: Any) -> Any:
        return wrap(original)

    cls.config_init = classmethod(_mark(config_init))


# --- W&B and transformers -------------------------------------------------------------------
def before_wandb_dot_log(wandb: Any, callback: Callable[[Any], None]) -> None:
    """Before every `wandb.log(data)`: `callback(data)`; without a W&B run the data is kept here,
    nothing is sent (an evaluation's W&B is a no-op run)."""
    original = wandb.log
    if hooked(original):
        return

    @functools.wraps(original)
    def log(data: Any = None, *args: Any, **kwargs: Any) -> Any:
        callback(data)
        if wandb.run is not None:
            return original(data, *args, **kwargs)
        return None

    wandb.log = _mark(log)


def hand_over_once(auto: Any, name: str, tokenizer: Any) -> None:
    """The first plain `auto.from_pretrained(name)` returns `tokenizer` instead of loading it
    again (Atropos's BaseEnv loads the run's tokenizer when it starts, which the runner prewarmed
    while held). Only once, so no two users ever share one (mutable) tokenizer object."""
    original = auto.from_pretrained
    waiting = [tokenizer]

    def from_pretrained(name_or_path: Any, *args: Any, **kwargs: Any) -> Any:
        if waiting and name_or_path == name and not args and not kwargs:
            return waiting.pop()
        return original(name_or_path, *args, **kwargs)

    auto.from_pretrained = _mark(from_pretrained)
