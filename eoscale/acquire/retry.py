"""The retry policy of a download: which failures are retried, how long to wait before the next try, and the budget.

HTTP 429 and 5xx answers, timeouts and broken connections are what users of the big archives hit (Planetary
Computer, Earth Search): they pass if one waits. A 429 or 503 says how long with `Retry-After` (seconds or an HTTP
date), which is honoured; otherwise the wait doubles from `backoff` up to `max_delay`, with jitter so that many
downloads do not come back at once. An asset is given up when it has been tried `attempts` times or when the next wait
would take its total waiting past `budget` seconds: the error then says which.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

RETRIED_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a download is retried (see the module docstring)."""

    attempts: int = 6
    backoff: float = 1.0
    max_delay: float = 60.0
    budget: float = 600.0
    timeout: float = 60.0  # seconds without a byte (connect or read) before a try counts as timed out

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.backoff < 0 or self.max_delay < 0 or self.budget < 0 or self.timeout <= 0:
            raise ValueError(f"attempts ≥ 1, backoff, max_delay, budget ≥ 0 and timeout > 0, got {self}")

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait after failed try number `attempt` (1, 2, …): the server's Retry-After, else exponential
        backoff with full jitter over its upper half."""
        stated = parse_retry_after(retry_after)
        if stated is not None:
            return min(stated, self.max_delay) if self.max_delay else stated
        ceiling = min(self.max_delay, self.backoff * 2 ** (attempt - 1))
        return ceiling * (0.5 + random.random() / 2)


def parse_retry_after(value: str | None) -> float | None:
    """A Retry-After header as seconds from now (RFC 9110: delay-seconds or an HTTP date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
