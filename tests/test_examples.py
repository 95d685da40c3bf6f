"""The example workflow file that the quickstart registers is the example module's WORKFLOW."""

from __future__ import annotations

import json
from pathlib import Path

from dagnats_trio.dag import WorkflowDef
from examples.agent_turn import WORKFLOW

EXAMPLE_JSON = Path(__file__).resolve().parent.parent / "examples" / "agent_turn.json"


def test_example_workflow_file_matches_the_module() -> None:
    on_disk = json.loads(EXAMPLE_JSON.read_text())
    assert on_disk == WORKFLOW
    assert WorkflowDef.from_json(on_disk).name == WORKFLOW["name"]
