"""`mcp-rl serve-model` prints no empty lines such as `note: ` (issue 34)."""

from __future__ import annotations

import pytest

from mcp_rl.serve_cli import _emit


def test_empty_fields_are_left_out_of_the_text_answer(capsys: pytest.CaptureFixture[str]) -> None:
    _emit(False, {"serve_id": "s1", "stopped": True, "note": ""})
    assert capsys.readouterr().out == "serve_id: s1\nstopped: True\n"
    _emit(True, {"serve_id": "s1", "note": ""})
    assert capsys.readouterr().out.strip() == '{"serve_id": "s1", "note": ""}'
