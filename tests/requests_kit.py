"""Shared pieces of the request tests (test_requests.py, test_request_validation.py): the ROME-format
fixture file and a folder listing (to check that nothing was written)."""
from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
ROME5 = FIXTURES / "counterfact_rome_5.json"


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())
