"""Child program: import one environment and describe its config fields as JSON.

    python -m mcp_rl.environments.introspect_child FILE CLASS_NAME PROJECT_ROOT   (one shot)
    python -m mcp_rl.environments.introspect_child --worker IDLE_SECONDS           (long-lived)

One shot: the environment may print to stdout while importing, so our own stdout is kept aside
and the JSON document is the only thing written to it, at the end.

Worker (see `introspect_worker`): importing atroposlib costs ~3 s (torch, transformers), more
than most environments' own imports, so the worker imports it once and then forks one child per
request. Each child starts from that warm, clean state (no module of an earlier environment, its
own cwd and sys.path), describes one environment and exits; the worker kills a child that misses
its deadline (it is the child's parent, so the pid is proven ours until reaped). Requests and
answers are JSON lines on stdin/stdout; the worker exits when stdin closes (its server is gone)
or after an idle period.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from mcp_rl.environments.child import child_main
from mcp_rl.environments.config_check_child import answer_check, has_validators
from mcp_rl.environments.loader import load_env_class

# Lines of the child's own output (its log) returned with a failure.
LOG_TAIL_LINES = 15


def _type_name(annotation: Any) -> str:
    name = getattr(annotation, "__name__", None)
    text = str(annotation) if name is None or getattr(annotation, "__args__", None) else name
    return text.replace("typing.", "")


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def describe(config_cls: Any, initial: Any) -> list[dict[str, Any]]:  # a pydantic model class
    schema = config_cls.model_json_schema(mode="validation")
    defs = schema.get("$defs", {})
    properties = schema.get("properties", {})
    initial_values = initial.model_dump(mode="json") if initial is not None else {}
    fields = []
    for name, info in config_cls.model_fields.items():
        field_schema = dict(properties.get(name, {}))
        if defs:
            field_schema["$defs"] = defs
        default: Any = None if info.is_required() else info.get_default(call_default_factory=True)
        if hasattr(default, "model_dump"):
            default = default.model_dump(mode="json")
        fields.append(
            {
                "name": name,
                "type": _type_name(info.annotation),
                "default": _json_safe(default.value if hasattr(default, "value") else default),
                "description": info.description or "",
                "initial": _json_safe(initial_values.get(name, default)),
                "json_schema": field_schema,
            }
        )
    return fields


def _working_dirs(file_path: Path, project_root: Path) -> list[Path]:
    """Where config_init() may expect to run: the project root (as its authors ran it from the
    repository), then the environment's own folder and the folders between."""
    dirs = [project_root]
    folder = file_path.parent
    while folder not in dirs and folder.parent != folder:
        dirs.append(folder)
        if folder == project_root or project_root not in folder.parents:
            break
        folder = folder.parent
    return dirs


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}"


def _call_config_init(env_cls: Any, file_path: Path, project_root: Path) -> tuple[Any, Any, Path, Exception | None]:
    """config_init() run from the project root; when it cannot find a file there, from the
    environment's own folder and those between (some read `configs/x.yaml` next to the file)."""
    first_error: Exception | None = None
    for folder in _working_dirs(file_path, project_root):
        os.chdir(folder)
        try:
            config, servers = env_cls.config_init()
            return config, servers, folder, None
        except OSError as exc:  # a relative path that is not there: try the next folder
            first_error = first_error or exc
        except Exception as exc:  # any failure of the environment's own code is reported, not fatal
            return None, None, project_root, first_error or exc
    os.chdir(project_root)
    return None, None, project_root, first_error


def _fallback(fallback_cls: Any, error: Exception | None) -> dict[str, Any]:
    reason = f"config_init() raised {_one_line(error)}" if error is not None else "config_init() failed"
    try:
        initial = fallback_cls()
    except Exception as exc:  # a config class with required fields: no instance without values
        required = [n for n, f in fallback_cls.model_fields.items() if f.is_required()]
        initial = None
        reason += (
            f"; {fallback_cls.__name__} has required fields without defaults ({', '.join(required)}): "
            "set them with rl_edit_config"
            if required
            else f"; {fallback_cls.__name__}() raised {_one_line(exc)}"
        )
    return {
        "config_class": fallback_cls.__name__,
        "fields": describe(fallback_cls, initial),
        "source": "fallback",
        "fallback_reason": reason,
        "server_configs": [],
        "has_validators": has_validators(fallback_cls),
    }


def introspect(file_path: Path, class_name: str, project_root: Path) -> dict[str, Any]:
    # atroposlib is heavy (~3 s): imported by the introspection child, never by the server
    from atroposlib.envs.base import BaseEnvConfig

    env_cls = load_env_class(file_path, class_name, project_root)
    fallback_cls = getattr(env_cls, "env_config_cls", None) or BaseEnvConfig
    config, servers, working_dir, error = _call_config_init(env_cls, file_path.resolve(), project_root.resolve())
    if config is None:
        result = _fallback(fallback_cls, error)
        result["working_dir"] = str(project_root)
        return result
    server_list = servers if isinstance(servers, list) else []
    return {
        "config_class": type(config).__name__,
        "fields": describe(type(config), config),
        "source": "config_init",
        "fallback_reason": None,
        "server_configs": [_json_safe(s.model_dump(mode="json", exclude={"api_key"})) for s in server_list],
        "working_dir": str(working_dir),
        # Edits then run the class's own validators over the whole config (config_check).
        "has_validators": has_validators(type(config)),
    }


def failure(exc: BaseException) -> dict[str, Any]:
    """A load failure as data: a missing module is named, so the parent can say what to install."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    # `from atroposlib.envs import X` where the installed module has no X: a version mismatch.
    missing_name = isinstance(exc, ImportError) and not missing and str(exc).startswith("cannot import name")
    return {
        "kind": "missing_module" if missing else "missing_name" if missing_name else "error",
        "module": missing or (exc.name if isinstance(exc, ImportError) else None),
        "message": _one_line(exc),
        "traceback": traceback.format_exception(exc)[-LOG_TAIL_LINES:],
    }


def _answer(file_path: Path, class_name: str, project_root: Path) -> dict[str, Any]:
    try:
        return {"ok": True, "spec": introspect(file_path, class_name, project_root)}
    except Exception as exc:
        return {"ok": False, "failure": failure(exc)}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        # It exits after this long without a request (it holds torch's memory while it waits).
        return worker(idle_s=float(argv[1]))
    file_path, class_name, project_root = Path(argv[0]), argv[1], Path(argv[2])
    return child_main(lambda: _answer(file_path, class_name, project_root))


# --- the long-lived worker ------------------------------------------------------------------------
def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _log_tail(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return []


def _die_with_parent() -> None:
    """Linux: the child is killed if the worker dies (a killed worker cannot enforce deadlines)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # elsewhere the child still ends at its own pace; it holds no lock of ours


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _serve_one(request: dict[str, Any]) -> dict[str, Any]:
    """Fork a child for one request and wait for its answer until the request's deadline."""
    log_path = Path(request["log"])
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: describe the environment, write the answer, exit without cleanup
        code = 0
        try:
            os.close(read_fd)
            os.setpgid(0, 0)  # its own group: the deadline ends whatever it started, too
            _die_with_parent()
            log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            null_fd = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null_fd, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.environ.update(request.get("env") or {})  # what the environment names (env_vars)
            if "check" in request:  # a whole-config check (config_check) rather than a description
                answer = answer_check(request)
            else:
                answer = _answer(Path(request["file"]), request["class_name"], Path(request["project_root"]))
            data = json.dumps(answer).encode()
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
        except BaseException:
            code = 1
            try:
                traceback.print_exc()
            except BaseException:
                pass
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + float(request["timeout_s"])
    timed_out = True
    while time.monotonic() < deadline:
        ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            timed_out = False
            break
    if timed_out:
        _kill_group(pid)  # unreaped child of ours: its pid (= its group) is proven
        os.waitpid(pid, 0)
        os.close(read_fd)
        return {"ok": False, "timeout": True, "log_tail": _log_tail(log_path)}
    data = _read_all(read_fd)  # EOF comes when the child exits (or closes the pipe)
    os.close(read_fd)
    _kill_group(pid)  # anything it left running in its group
    os.waitpid(pid, 0)
    try:
        answer = json.loads(data)
    except ValueError:
        return {
            "ok": False,
            "failure": {
                "kind": "crash",
                "module": None,
                "message": "the child exited without an answer",
                "traceback": _log_tail(log_path),
            },
        }
    if not answer.get("ok"):
        answer["log_tail"] = _log_tail(log_path)
    return answer


def worker(idle_s: float) -> int:
    # Warm: everything an environment module imports first, once (then shared by every fork).
    import atroposlib.envs.base  # noqa: F401

    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the protocol channel
    print(json.dumps({"ready": True}), file=out, flush=True)
    stdin = sys.stdin.buffer
    while True:
        ready, _, _ = select.select([stdin], [], [], idle_s)
        if not ready:
            return 0  # idle: the server starts another one when it needs it
        # One request at a time (the server waits for each answer), so no second line can sit
        # in the reader's buffer unseen by select().
        line = stdin.readline()
        if not line:
            return 0  # stdin closed: the server is gone
        request = json.loads(line)
        answer = _serve_one(request)
        answer["id"] = request["id"]
        print(json.dumps(answer), file=out, flush=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
