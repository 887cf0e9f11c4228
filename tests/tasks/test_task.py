"""The public task interface (mcp_rl.task): found by discovery from source, made an Atropos
environment by the loader, its held-out items graded by its own score."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_rl.environments.discovery import scan, task_class_names
from mcp_rl.proof.heldout import held_out_set, is_task
from mcp_rl.runconfig import EnvironmentRef
from mcp_rl.task import Task

TASKS = Path(__file__).resolve().parent.parent / "fixtures" / "tasks"
LARGER = TASKS / "larger_number.py"


def _ref(path: Path, class_name: str, name: str) -> EnvironmentRef:
    return EnvironmentRef(name=name, class_name=class_name, file_path=path, project_root=path.parent)


def test_the_public_module_imports_nothing_but_the_standard_library() -> None:
    code = "import sys; import mcp_rl.task; print(sorted(m.split('.')[0] for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out.replace("'", '"')))
    assert not loaded & {"pydantic", "yaml", "atroposlib", "torch", "transformers", "httpx"}


def test_discovery_lists_a_task_beside_environments(tmp_path: Path) -> None:
    (tmp_path / "aliased.py").write_text(
        "from mcp_rl.task import Task as T\n\nclass Base(T):\n    pass\n\nclass Mine(Base):\n"
        "    '''Mine.'''\n    name = 'mine'\n"
    )
    (tmp_path / "other_task.py").write_text("class Task:\n    pass\n\nclass NotOurs(Task):\n    pass\n")
    catalog = scan([TASKS, tmp_path])
    kinds = {env.name: env.kind for env in catalog.environments}
    assert kinds["larger_number"] == "task"
    assert kinds["mine"] == "task" and kinds["aliased"] == "task"  # Base: named after its file
    assert "NotOurs" not in {env.class_name for env in catalog.environments}  # another Task is not ours
    assert task_class_names(tmp_path / "aliased.py") == {"Base", "Mine"}
    arithmetic = scan([Path(__file__).resolve().parents[2] / "mcp_rl" / "environments" / "bundled"])
    assert {env.kind for env in arithmetic.environments} == {"atropos"}


def test_held_out_items_are_the_tasks_own_graded_by_its_score() -> None:
    ref = _ref(LARGER, "LargerNumber", "larger_number")
    assert is_task(ref)
    items = held_out_set(ref, {})
    assert len(items.items) == 200 and items.max_tokens == 16 and items.temperature == 0
    assert len({i.id for i in items.items}) == 200
    first = items.items[0]
    assert first.messages[0]["role"] == "system" and first.id == first.messages[-1]["content"]
    a, b = (int(x) for x in first.id.rstrip("?").split(" or "))
    assert items.grade(first, str(max(a, b))) == 1.0 and items.grade(first, str(min(a, b))) == 0.0
    assert held_out_set(ref, {"max_new_tokens": 4}).max_tokens == 4
    # The same items every time (ids pair evaluations across steps and runs).
    assert [i.id for i in held_out_set(ref, {}).items] == [i.id for i in items.items]


def test_a_held_out_score_outside_the_range_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text(
        "from mcp_rl.task import Task\n\nclass Bad(Task):\n    held_out_seeds = range(3)\n"
        "    def item(self, seed):\n        return {'q': str(seed), 'q2': 'same'}\n"
        "    def prompt(self, item):\n        return item['q2']\n"
        "    def score(self, completion, item):\n        return float(completion)\n"
    )
    items = held_out_set(_ref(path, "Bad", "bad"), {})
    assert [i.id for i in items.items] == ["same", "same #2", "same #3"]  # alike prompts stay apart
    assert items.grade(items.items[0], "1") == 1.0
    for wrong in ("2", "nan", "inf"):
        with pytest.raises(ValueError, match="score_range"):
            items.grade(items.items[0], wrong)


def test_the_default_items_come_from_seeds_and_the_chat_from_the_prompt() -> None:
    class Echo(Task):
        system_prompt = "Repeat."
        train_seeds = range(3)
        held_out_seeds = range(10, 12)

        def item(self, seed: int) -> dict:
            return {"text": f"w{seed}", "answer": f"w{seed}"}

        def prompt(self, item: dict) -> str:
            return item["text"]

    task = Echo()
    assert [i["text"] for i in task.train_items()] == ["w0", "w1", "w2"]
    assert [i["text"] for i in task.held_out_items()] == ["w10", "w11"]
    assert task.messages({"text": "x"}) == [
        {"role": "system", "content": "Repeat."},
        {"role": "user", "content": "x"},
    ]
    assert task.reference({"answer": "x"}) == "x" and task.reference({"answer": 3}) is None
    with pytest.raises(NotImplementedError, match="score"):
        task.score("x", {})


def test_the_runner_makes_a_task_an_atropos_environment() -> None:
    pytest.importorskip("atroposlib")
    from mcp_rl.environments.loader import load_class
    from mcp_rl.environments.task_env import TaskEnv, TaskScoreError, checked_score, env_class_for

    # What load_env_class does in an environment process (here without its change of directory).
    cls = env_class_for(load_class(LARGER, "LargerNumber", TASKS, chdir=False), LARGER)
    assert issubclass(cls, TaskEnv) and cls.name == "larger_number" and cls.__name__ == "LargerNumber"
    config, servers = cls.config_init()
    assert (config.max_new_tokens, config.group_size, servers[0].server_type) == (16, 4, "sglang")

    class Half(Task):
        score_range = (0.0, 0.5)

        def score(self, completion: str, item: dict) -> float:
            return {"a": 0.5, "b": 0.75, "c": math.nan}.get(completion, "x")  # type: ignore[return-value]

    assert checked_score(Half(), "a", {}) == 0.5
    for wrong in ("b", "c", "d"):
        with pytest.raises(TaskScoreError, match="Half.score"):
            checked_score(Half(), wrong, {"q": 1})


def test_the_readme_example_is_a_working_task(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    start = readme.index("```python\nimport random\nimport re\n\nfrom mcp_rl.task import Task")
    code = readme[start + len("```python\n") : readme.index("```", start + 10)]
    path = tmp_path / "larger_number.py"
    path.write_text(code)
    ref = _ref(path, "LargerNumber", "larger_number")
    assert is_task(ref)
    items = held_out_set(ref, {})
    assert len(items.items) == 200 and items.max_tokens == 16
    namespace: dict = {}
    exec(compile(code, str(path), "exec"), namespace)  # the README's own example
    task = namespace["LargerNumber"]()
    item = {"a": 57, "b": 12, "answer": "57"}
    assert task.score("The answer is 57.", item) == 1.0 and task.score("12", item) == 0.0
    assert task.score("The larger of", item) == 0.0
    held = {(i["a"], i["b"]) for i in task.held_out_items()}
    assert not held & {(i["a"], i["b"]) for i in task.train_items()}
