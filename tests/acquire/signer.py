"""A signing hook for the tests (`--sign tests.acquire.signer:sign`), as the Planetary Computer's: a token in the
query, a fresh one each call (`CALLS` counts them)."""

from __future__ import annotations

from tests.acquire.servers import TOKEN

CALLS: list[str] = []


def sign(href: str) -> str:
    CALLS.append(href)
    return f"{href}?token={TOKEN}&se={len(CALLS)}"
