"""The quickstart's exit-code list says what the CLI exits with for each API answer.

Found from outside: a missing token (the API's 401) made a verb exit 2, which the list did not
name (it named bad JSON and bad flags only), so a script could not tell it from a bug.
"""

from __future__ import annotations

import pathlib
import re

from dagnats_trio.cli._contract import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_USAGE
from dagnats_trio.cli._errors import ApiFailure

QUICKSTART = pathlib.Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def _exit_codes_paragraph() -> str:
    text = QUICKSTART.read_text()
    found = re.search(r"^Exit codes: .*?(?:\n\n|\Z)", text, re.S | re.M)
    assert found is not None, "docs/quickstart.md has no 'Exit codes:' paragraph"
    return " ".join(found.group(0).split())


def test_each_api_refusal_exits_as_the_quickstart_says() -> None:
    said = _exit_codes_paragraph()
    usage = said.split(f"{EXIT_USAGE} a usage or input error", 1)[1].split(f"; {EXIT_NOT_FOUND}")[0]
    for status in (401, 403):
        assert ApiFailure(status, "unauthorized", "no").exit_code == EXIT_USAGE
        assert str(status) in usage, (status, usage)
    assert ApiFailure(413, "input_too_large", "no").exit_code == EXIT_USAGE
    assert "too large" in usage, usage
    assert ApiFailure(404, "run_not_found", "no").exit_code == EXIT_NOT_FOUND
    assert ApiFailure(409, "run_finished", "no").exit_code == EXIT_FAILED
