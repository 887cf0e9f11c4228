"""Every call the Tinker backend makes into the SDK binds against the installed tinker package:
the calls are read from the backend's source, so a new call is checked without editing this test."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import tinker
from tinker import types
from tinker.lib.public_interfaces.sampling_client import SamplingClient
from tinker.lib.public_interfaces.training_client import TrainingClient

import mcp_rl.trainer.backends.tinker as backend_module

# What each receiver in the backend's source is.
RECEIVERS = {
    "self.service": tinker.ServiceClient,
    "self.training": TrainingClient,
    "self.sampling": SamplingClient,
    "types": types,
    "self._types": types,
    "tinker": tinker,
}


def _sdk_calls() -> list[tuple[str, str, ast.Call]]:
    tree = ast.parse(Path(backend_module.__file__).read_text())
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = ast.unparse(node.func.value)
            if receiver in RECEIVERS:
                calls.append((receiver, node.func.attr, node))
    return calls


def test_the_backend_makes_the_calls_this_test_expects_to_check() -> None:
    names = {f"{r}.{a}" for r, a, _ in _sdk_calls()}
    for expected in (
        "self.service.close",
        "self.service.create_lora_training_client",
        "self.service.create_training_client_from_state_with_optimizer",
        "self.training.forward",
        "self.training.forward_backward",
        "self.training.optim_step",
        "self.training.save_weights_and_get_sampling_client",
        "self.training.save_state",
        "self.training.save_weights_for_sampler",
        "self.training.get_tokenizer",
        "self.sampling.sample",
        "tinker.ServiceClient",
    ):
        assert expected in names, expected


def test_every_sdk_call_binds_against_the_installed_signatures() -> None:
    for receiver, attr, call in _sdk_calls():
        target = getattr(RECEIVERS[receiver], attr)
        signature = inspect.signature(target)
        args = [object()] * len(call.args)
        kwargs = {k.arg: object() for k in call.keywords if k.arg is not None}
        if inspect.isfunction(target) and "self" in signature.parameters:
            args = [object(), *args]  # an unbound method: the instance comes first
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise AssertionError(f"{receiver}.{attr}({ast.unparse(call)}) does not match {signature}: {exc}") from exc
