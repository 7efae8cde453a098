"""Every document the code points to is in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_code_points_only_inside_the_repo():
    missing, outside = [], []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(ROOT)
        if "DESIGN.md" in text:  # the direction document lives outside the repo
            outside.append(str(where))
        for ref in re.findall(
            r"\b((?:docs|bench|infra|tools|scripts)/[\w./-]+\.(?:md|py|png))", text
        ):
            if not (ROOT / ref).exists():
                missing.append(f"{where}: {ref}")
    assert outside == [] and missing == []
