"""The validator's child process: load a task (or environment) file and check it, sending one
JSON report on the report pipe its parent passed (mcp_rl.environments.child; stdout is just log).

    python -m mcp_rl.environments.validate_child FILE CLASS PROJECT_ROOT [--model DIR] [--samples N]

A task (mcp_rl.task) is checked item by item: its training and held-out items are built, the
held-out prompts must not be training prompts (by the text the model sees), reference answers
must score the top of score_range, a few wrong answers must score within it, and score() runs on
answers the local base model samples (when --model is given), each call timed. Whatever raises
is reported with its exception, file and line. An Atropos environment is run for real against
the local base model (mcp_rl.environments.validate_atropos: setup, items, one group, scores,
evaluate()); without a model it is only imported.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from mcp_rl import redact
from mcp_rl.environments import degenerate_probes
from mcp_rl.environments.child import take_channels, write_report
from mcp_rl.task import prompt_text

# Items whose reference answers and wrong answers are scored (a score() is cheap; this bounds it).
CHECKED_ITEMS = 20
WRONG_ANSWERS = ("", "I don't know.", "0")


def where(exc: BaseException, file_path: Path) -> dict[str, Any]:
    """The exception, and the innermost line of the user's file it passed through (else the
    innermost line at all)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return {"exception": f"SyntaxError: {exc.msg}", "file": exc.filename, "line": exc.lineno}
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if Path(f.filename).resolve() == file_path]
    frame = own[-1] if own else (frames[-1] if frames else None)
    return {
        "exception": redact.scrub(f"{type(exc).__name__}: {exc}")[:500],
        "file": frame.filename if frame else str(file_path),
        "line": frame.lineno if frame else None,
    }


class Report:
    def __init__(self, file_path: Path) -> None:
        self.file_path = file_path
        self.problems: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.facts: dict[str, Any] = {}

    def problem(self, check: str, message: str, exc: BaseException | None = None) -> None:
        entry: dict[str, Any] = {"check": check, "message": message}
        if exc is not None:
            entry.update(where(exc, self.file_path))
        self.problems.append(entry)

    def data(self) -> dict[str, Any]:
        return {"ok": not self.problems, "problems": self.problems, "warnings": self.warnings, **self.facts}


def check_score(report: Report, task: Any, completion: str, item: Any, check: str) -> float | None:
    """task.score, with a raise, a non-number, a non-finite or out-of-range value reported."""
    try:
        value = task.score(completion, item)
    except Exception as exc:  # the user's code: reported with its line
        report.problem(check, f"score({completion!r}, item) raised for item {_short(item)}", exc)
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        report.problem(check, f"score({completion!r}, item) returned {value!r} for item {_short(item)}: not a number")
        return None
    low, high = task.score_range
    if not math.isfinite(number) or not low <= number <= high:
        report.problem(
            check,
            f"score({completion!r}, item) returned {number!r} for item {_short(item)}: outside score_range "
            f"{tuple(task.score_range)} (or not finite)",
        )
        return None
    return number


def _short(item: Any) -> str:
    text = redact.scrub(repr(item))
    return text if len(text) <= 160 else text[:157] + "..."


def _messages(report: Report, task: Any, item: Any, check: str) -> list[dict[str, str]] | None:
    try:
        messages = [dict(m) for m in task.messages(item)]
    except Exception as exc:  # the user's code
        report.problem(check, f"messages(item) raised for item {_short(item)}", exc)
        return None
    if not messages or not all(isinstance(m.get("content"), str) and m.get("role") for m in messages):
        report.problem(check, f"messages(item) for item {_short(item)} is not a list of {{'role', 'content'}} dicts")
        return None
    return messages


def check_task(report: Report, task: Any, model: str | None, samples: int) -> None:
    items: dict[str, list[Any]] = {}
    for split, method in (("train", task.train_items), ("held_out", task.held_out_items)):
        began = time.monotonic()
        try:
            items[split] = list(method())
        except Exception as exc:  # the user's code
            report.problem("items", f"{method.__name__}() raised", exc)
            return
        report.facts[f"{split}_items"] = len(items[split])
        report.facts[f"{split}_items_seconds"] = round(time.monotonic() - began, 3)
    if not items["train"]:
        report.problem("items", "train_items() is empty: give train_seeds (with item(seed)) or a train_items()")
    if not items["held_out"]:
        report.problem("items", "held_out_items() is empty: without held-out items mcp-rl cannot show it learned")
    elif len(items["held_out"]) < 100:
        report.warnings.append(
            f"{len(items['held_out'])} held-out items: fewer than ~100 rarely show a gain at p < 0.05 (200 is a good size)"
        )
    prompts: dict[str, dict[str, int]] = {"train": {}, "held_out": {}}
    chats: dict[str, list[list[dict[str, str]] | None]] = {"train": [], "held_out": []}
    for split in ("train", "held_out"):
        for i, item in enumerate(items[split]):
            messages = _messages(report, task, item, "messages")
            chats[split].append(messages)
            if messages is None:
                return
            prompts[split].setdefault(prompt_text(messages), i)
    shared = [text for text in prompts["held_out"] if text in prompts["train"]]
    if shared:
        i = prompts["held_out"][shared[0]]
        report.problem(
            "overlap",
            f"{len(shared)} held-out item(s) are also training items (same prompt), e.g. held-out item {i} "
            f"{_short(items['held_out'][i])} asks {shared[0]!r} like training item {prompts['train'][shared[0]]}: "
            "keep held_out_seeds apart from train_seeds",
        )
    if len(prompts["held_out"]) < len(items["held_out"]):
        report.warnings.append(
            f"{len(items['held_out']) - len(prompts['held_out'])} held-out items repeat another's prompt"
        )
    checked = items["held_out"][:CHECKED_ITEMS] + items["train"][: max(0, CHECKED_ITEMS // 2)]
    references = 0
    top_for_wrong = 0
    timings: list[float] = []
    for item in checked:
        try:
            reference = task.reference(item)
        except Exception as exc:  # the user's code
            report.problem("reference", f"reference(item) raised for item {_short(item)}", exc)
            return
        if reference is not None:
            references += 1
            began = time.perf_counter()
            value = check_score(report, task, reference, item, "reference")
            timings.append(time.perf_counter() - began)
            if value is not None and value < task.score_range[1]:
                report.problem(
                    "reference",
                    f"the reference answer {reference!r} of item {_short(item)} scores {value}, not the top of "
                    f"score_range ({task.score_range[1]}): score() or reference() is wrong",
                )
        for wrong in WRONG_ANSWERS:
            if wrong == reference:
                continue
            value = check_score(report, task, wrong, item, "wrong_answer")
            if value is not None and value >= task.score_range[1] and reference is not None:
                top_for_wrong += 1
        if len(report.problems) > 10:
            break
    report.facts["references_scored"] = references
    if top_for_wrong:
        report.warnings.append(
            f"{top_for_wrong} wrong answer(s) ('', 'I don't know.', '0') got the top score: check score()"
        )
    if timings:
        report.facts["score_ms_max"] = round(1000 * max(timings), 3)
    if items["held_out"] and not report.problems:
        probe_task(report, task, items["held_out"], chats["held_out"])
    if model and items["held_out"] and not report.problems:
        sample_base_model(report, task, model, [c for c in chats["held_out"][:samples] if c], items["held_out"])


def probe_task(report: Report, task: Any, held_out: list[Any], chats: list[list[dict[str, str]] | None]) -> None:
    """What degenerate replies score over the first held-out items (degenerate_probes): an empty
    reply, a long digit string, the prompt echoed, the most common reference answer to every item."""
    sample = list(zip(held_out, chats, strict=True))[: degenerate_probes.PROBE_ITEMS]
    references = []
    for item, _ in sample:
        try:
            references.append(task.reference(item))
        except Exception:  # the checked items' references were reported above; a probe is no place for it
            references.append(None)
    constant = degenerate_probes.most_common(references)
    low, high = task.score_range
    results = []
    for probe in degenerate_probes.PROBES:
        if probe == "constant" and constant is None:
            continue
        scores = []
        for item, chat in sample:
            reply = degenerate_probes.reply_for(probe, degenerate_probes.last_user(chat or []), constant)
            value = check_score(report, task, reply, item, "degenerate_answer")
            if value is None:
                return  # a score() that fails on a reply a model can give: reported as a problem
            scores.append(value)
        shown = "(each item's own prompt)" if probe == "echo" else degenerate_probes.reply_for(probe, "", constant)
        results.append(degenerate_probes.result(probe, shown, scores, low))
    report.facts["degenerate_replies"] = [r.report() for r in results]
    report.warnings.extend(degenerate_probes.warnings(results, low, high))


def sample_base_model(
    report: Report, task: Any, model_dir: str, chats: list[list[dict[str, str]]], held_out: list[Any]
) -> None:
    """Score the local base model's sampled answers (temperature 1, two per item), timed."""
    began = time.monotonic()
    try:
        # torch and transformers: only when the validator samples the base model
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
        model.eval()
    except Exception as exc:  # not the task's fault: said, not counted as a problem
        report.warnings.append(f"the base model could not be loaded ({type(exc).__name__}: {exc}); no answers sampled")
        return
    loaded = time.monotonic() - began
    answers: list[dict[str, Any]] = []
    torch.manual_seed(0)
    began = time.monotonic()
    for chat, item in zip(chats, held_out, strict=False):
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **ids,
                do_sample=True,
                temperature=1.0,
                max_new_tokens=task.max_tokens,
                num_return_sequences=2,
                pad_token_id=tokenizer.eos_token_id,
            )
        for row in out:
            completion = tokenizer.decode(row[ids["input_ids"].shape[1] :], skip_special_tokens=True)
            t0 = time.perf_counter()
            value = check_score(report, task, completion, item, "base_model_answer")
            answers.append(
                {
                    "prompt": redact.scrub(prompt_text(chat))[:200],
                    "answer": redact.scrub(completion)[:200],
                    "score": value,
                    "score_ms": round(1000 * (time.perf_counter() - t0), 3),
                }
            )
    scores = [a["score"] for a in answers if a["score"] is not None]
    report.facts["base_model"] = {
        "model": model_dir,
        "load_seconds": round(loaded, 2),
        "sample_seconds": round(time.monotonic() - began, 2),
        "temperature": 1.0,
        "answers": answers,
        "mean_score": sum(scores) / len(scores) if scores else None,
    }
    if scores and len(set(scores)) == 1:
        report.warnings.append(
            f"every sampled base-model answer scored {scores[0]}: if that holds for most items, training has little "
            "to learn from (answers of a group must differ); make the format easier (a system prompt, worked examples)"
        )


def run_atropos(report: Report, cls: Any, file_path: Path, ns: argparse.Namespace) -> None:
    """An Atropos environment run for real (validate_atropos), its findings into the report."""
    # only this kind of file runs an environment (atroposlib is loaded by then)
    from mcp_rl.environments import validate_atropos

    with tempfile.TemporaryDirectory(prefix="mcp-rl-validate-") as work:
        found = validate_atropos.check(
            cls,
            file_path,
            model_dir=ns.model,
            base_url=ns.base_url,
            tokenizer=ns.tokenizer,
            server_type="openai" if ns.base_url and ns.server_type == "sglang" else ns.server_type,
            work_dir=Path(work),
            preset=json.loads(ns.preset) if ns.preset else None,
        )
    report.problems.extend(found.problems)
    report.warnings.extend(found.warnings)
    report.facts["atropos"] = json.loads(json.dumps(found.facts, default=str))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("file", type=Path)
    parser.add_argument("class_name")
    parser.add_argument("project_root", type=Path)
    parser.add_argument("--model", default=None)
    parser.add_argument("--samples", type=int, default=4)
    # An Atropos environment is run against --model served locally, or (tests) this server.
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--server-type", default="sglang")
    # An environment selected with preset config values (rg:<dataset>): JSON of them.
    parser.add_argument("--preset", default=None)
    ns = parser.parse_args(argv)
    take_channels()  # the report pipe and the lifeline, before any of the user's code is imported
    file_path = ns.file.resolve()
    report = Report(file_path)
    try:
        # the user's file and what it imports: the reason this is a child process
        from mcp_rl.environments.loader import load_class
        from mcp_rl.task import Task

        cls = load_class(file_path, ns.class_name, ns.project_root.resolve(), chdir=False)
    except Exception as exc:  # any import failure is the report
        report.problem("import", f"{file_path.name} does not import", exc)
        write_report(report.data())
        return 0
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        report.facts["kind"] = "atropos"
        if ns.model is None and ns.base_url is None:
            report.warnings.append(
                "an Atropos environment: it imports; no local base model here, so it was not run "
                "(rl_test_inference runs it against a model)"
            )
        else:
            run_atropos(report, cls, file_path, ns)
        write_report(report.data())
        return 0
    report.facts["kind"] = "task"
    try:
        task = cls()
    except Exception as exc:  # the user's code
        report.problem("init", f"{ns.class_name}() raised", exc)
        write_report(report.data())
        return 0
    report.facts["score_range"] = list(task.score_range)
    report.facts["max_tokens"] = task.max_tokens
    check_task(report, task, ns.model, ns.samples)
    write_report(report.data())
    return 0


if __name__ == "__main__":
    sys.exit(main())
