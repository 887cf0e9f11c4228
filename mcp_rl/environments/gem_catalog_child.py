"""Child program: import GEM and print its registered environments as one JSON document.

Usage: python -m mcp_rl.environments.gem_catalog_child

`import gem` registers 170+ environments (and imports reasoning_gym to do so): a couple of
seconds and a lot of modules, which the MCP server must not pay or carry. The server runs this
once per installed gem-llm version and caches the answer (`mcp_rl.environments.gem_catalog`).
Descriptions come from the entry point module's docstring, read from source (not imported: some
modules pull in `datasets` or docker clients).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
from typing import Any

from mcp_rl.environments.child import child_main

# Entry-point modules that load a Hugging Face dataset (`dataset_name`) when made.
_DATASET_KWARG = "dataset_name"


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _module_facts(module_path: str, cache: dict[str, tuple[str, bool]]) -> tuple[str, bool]:
    """(first docstring line, imports nltk) of a module, from its source."""
    if module_path in cache:
        return cache[module_path]
    doc, uses_nltk = "", False
    try:
        spec = importlib.util.find_spec(module_path)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            with open(spec.origin, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            first = (ast.get_docstring(tree) or "").strip().splitlines()[0:1]
            doc = first[0].strip() if first else ""
            for node in ast.walk(tree):
                if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "nltk" for a in node.names):
                    uses_nltk = True
                elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "nltk":
                    uses_nltk = True
    except (ImportError, OSError, SyntaxError, ValueError):
        pass
    cache[module_path] = (doc, uses_nltk)
    return doc, uses_nltk


def _nltk_words_present() -> bool:
    try:
        # nltk is optional (a GEM dependency); absent means no word list
        import nltk

        nltk.data.find("corpora/words")
        return True
    except (ImportError, LookupError):
        return False


# Seconds per generated item of the reasoning-gym datasets slower than ~0.1 s (reasoning-gym
# 0.1.19 on the 2-core CI machine, 3 items each, seed 1): training waits on them, so they are
# said to be slow when listed. Measured with
#   python -c "import time, reasoning_gym as r; ..." over reasoning_gym.factory.DATASETS.
RG_SLOW_S = {
    "advanced_geometry": 0.12,
    "arc_agi": 0.54,
    "codeio": 0.09,
    "countdown": 0.1,
    "figlet_font": 0.34,
    "group_anagrams": 0.25,
    "intermediate_integration": 0.23,
    "knight_swap": 1.7,
    "puzzle24": 0.27,
    "rearc": 0.09,
    "rubiks_cube": 0.08,
    "sokoban": 0.17,
    "sudoku": 0.09,
    "word_ladder": 0.1,
    "zebra_puzzles": 0.36,
}
RG_SLOW_FROM_S = 0.1


def reasoning_gym_entries() -> list[dict[str, Any]]:
    """Every reasoning-gym dataset as `rg:<name>`: mcp-rl's own reasoning-gym environment, its
    parameters (the dataset's config fields) with their defaults, slow ones said so."""
    # reasoning-gym comes with gem-llm (and mcp-rl[gem]); only this child imports it
    from reasoning_gym.factory import DATASETS

    entries = []
    for name, (dataset_cls, config_cls) in sorted(DATASETS.items()):
        if name == "composite":
            continue  # mixtures are spelled rg:a=0.7,b=0.3
        params = {}
        for f in dataclasses.fields(config_cls):
            if f.name in ("seed", "size"):
                continue  # mcp-rl's own: seed/train_size and held_out_seed/held_out_size
            default = f.default if f.default is not dataclasses.MISSING else None
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            params[f.name] = _json_safe(default)
        doc = ((dataset_cls.__doc__ or "").strip().splitlines() or [""])[0].strip().rstrip(".")
        slow = RG_SLOW_S.get(name, 0.0)
        slow_note = f" Slow to generate: ~{slow:g} s per item on 2 cores." if slow >= RG_SLOW_FROM_S else ""
        entries.append(
            {
                "id": f"rg:{name}",
                "group": "rg",
                "entry_point": f"reasoning_gym:{dataset_cls.__name__}",
                "kwargs": params,
                "description": f"reasoning-gym {name}: {doc or dataset_cls.__name__}. Parameters (set with "
                + "rl_edit_config('params', '{\""
                + name
                + "\": {...}}')): "
                + ", ".join(f"{k}={v!r}" for k, v in params.items())
                + f".{slow_note}",
                "needs": None,
            }
        )
    return entries


def catalog() -> dict[str, Any]:
    # gem-llm is an optional extra: only this child imports it, to list its environments
    import gem  # noqa: F401  (registers every environment)
    from gem.envs.registration import ENV_REGISTRY

    words_present = _nltk_words_present()
    facts: dict[str, tuple[str, bool]] = {}
    entries = []
    for env_id, spec in ENV_REGISTRY.items():
        if env_id.startswith("rg:"):
            continue  # reasoning-gym is a family of its own (below), not GEM's fixed-size wrapper
        entry_point = spec.entry_point if isinstance(spec.entry_point, str) else repr(spec.entry_point)
        module_path, _, class_name = entry_point.partition(":")
        doc, uses_nltk = _module_facts(module_path, facts) if class_name else ("", False)
        kwargs = {k: _json_safe(v) for k, v in spec.kwargs.items()}
        needs = None
        if _DATASET_KWARG in kwargs:
            needs = f"the Hugging Face dataset {kwargs[_DATASET_KWARG]} (downloaded on first use)"
        elif uses_nltk and not words_present:
            needs = "the nltk 'words' corpus (downloaded on first use)"
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if k != _DATASET_KWARG)
        description = " ".join(p for p in (doc, f"{class_name or entry_point}({shown})") if p)
        entries.append(
            {
                "id": env_id,
                "group": env_id.split(":", 1)[0] if ":" in env_id else "other",
                "entry_point": entry_point,
                "kwargs": kwargs,
                "description": description,
                "needs": needs,
            }
        )
    try:
        entries.extend(reasoning_gym_entries())
    except ImportError:
        pass  # no reasoning-gym: no rg: ids
    return {"entries": entries}


def main() -> int:
    return child_main(catalog)


if __name__ == "__main__":
    raise SystemExit(main())
