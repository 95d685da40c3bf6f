"""docs/embedding.md runs as written: the service starts, prints its run's result, and stops on
Ctrl-C with exit 0 and no traceback; the nursery-style block runs to its end."""

from __future__ import annotations

import time
from pathlib import Path

from ._blocks import block, start_program

DOC = "docs/embedding.md"


def test_the_twenty_line_service(tmp_path: Path) -> None:
    service = block(DOC, "# service.py")
    assert len(service.text.strip().splitlines()) <= 35  # "about 20 lines" of code, and spacing
    path = tmp_path / "service.py"
    path.write_text(service.text)
    began = time.monotonic()
    program = start_program(path, cwd=tmp_path)
    try:
        program.wait_for("Ctrl-C stops")
        ready_s = time.monotonic() - began
    finally:
        rc = program.interrupt()
    print(f"service ready in {ready_s:.2f} s; exit code {rc} after SIGINT")
    assert rc == 0, program.text
    assert "'hello, world'" in program.text
    assert "SIGINT: stopping" in program.text
    assert "Traceback" not in program.text, program.text


def test_the_nursery_block_runs(tmp_path: Path) -> None:
    script = block(DOC, "import trio")
    path = tmp_path / "nursery.py"
    path.write_text(script.text)
    program = start_program(path, cwd=tmp_path)
    rc = program.finish()
    assert rc == 0, program.text
    assert "Traceback" not in program.text
    assert "[" in program.text  # the list of workflows printed
