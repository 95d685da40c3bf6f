"""Every tag the journal timeline prints is explained in docs/concepts.md (issue 16, item 4:
``[recovered]``, ``[reused]`` and ``[interrupted]`` appeared only in sample output)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from dagnats_trio.cli._journal import Mark

CONCEPTS: Final = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def test_each_timeline_tag_is_explained() -> None:
    text = CONCEPTS.read_text(encoding="utf-8")
    section = text.split("### Reading a timeline", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `\[([a-z_]+)\]` \| [^|]+ \| ([^|]+) \|$", section, re.M))
    tags = {m.value for m in Mark if m is not Mark.NONE}
    print(f"tags explained: {sorted(rows)}")
    assert set(rows) == tags
    assert all(len(why.split()) >= 8 for why in rows.values()), rows
