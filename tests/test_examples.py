"""The example workflow file that the quickstart registers is the example module's WORKFLOW."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagnats_trio.dag import WorkflowDef
from examples.agent_turn import WORKFLOW

EXAMPLE_JSON = Path(__file__).resolve().parent.parent / "examples" / "agent_turn.json"


def test_example_workflow_file_matches_the_module() -> None:
    on_disk = json.loads(EXAMPLE_JSON.read_text())
    assert on_disk == WORKFLOW
    assert WorkflowDef.from_json(on_disk).name == WORKFLOW["name"]


def test_the_example_agent_takes_a_prompt_and_refuses_anything_else() -> None:
    from examples.agent_turn import initial_history

    prompt = [{"role": "user", "content": {"text": "book a flight"}}]
    assert initial_history("book a flight") == prompt
    assert initial_history({"task": "book a flight"}) == prompt
    assert initial_history({"text": "book a flight"}) == prompt
    assert initial_history(prompt) == prompt
    for bad in ({}, [], None, "", {"task": 3}, [{"role": "tool"}], [1]):
        with pytest.raises(ValueError, match="must be a prompt"):
            initial_history(bad)
