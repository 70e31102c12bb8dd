"""Per-model rate limits: requests and tokens per minute, shared by every agent using a model.

A :class:`RateLimiter` paces calls (GCRA: each request and each token pushes a "theoretical
arrival time" forward) at a little below the configured rate, so that requests are spread evenly
instead of bursting at the start of each minute, and keeps a sliding 60-second log of tokens as a
hard cap: over any 60 s window it never lets more than ``rpm`` requests or ``tpm`` tokens start.
Token counts are estimated before a call (prompt tokens plus ``max_tokens`` or the running average
of completions) and corrected with the API's usage afterwards. A provider's Retry-After holds the
whole model's limiter, so every agent backs off together.

The clock is injectable: tests use :class:`FakeClock` and never sleep for real.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Clock", "FakeClock", "LimitTicket", "MonotonicClock", "RateLimiter"]

WINDOW_S = 60.0
CATCH_UP_S = 0.25


class Clock(Protocol):
    """Time source of a limiter."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class FakeClock:
    """A clock for tests: ``sleep`` advances virtual time at once (never sleeps for real).

    Sleeps that overlap advance time to the latest wake-up, so a waiter never wakes early.

    Args:
        start: Initial time.
    """

    def __init__(self, start: float = 0.0):
        self.time = start
        self.slept = 0.0

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.slept += seconds
            self.time += seconds
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        """Move time forward (simulates time spent in calls)."""
        self.time += seconds


@dataclass
class LimitTicket:
    """One admitted request: when it started and the tokens charged for it."""

    started: float
    tokens: int
    entry: list[float] | None = None


class RateLimiter:
    """Requests-per-minute and tokens-per-minute limiter for one model.

    Args:
        rpm: Requests per minute (None: unlimited).
        tpm: Tokens per minute, prompt plus completion (None: unlimited).
        clock: Time source (real by default).
        headroom: Fraction of the limits to pace at; a little below 1 keeps network jitter from
            pushing a provider's own 60 s window over the limit.
        completion_guess: Completion tokens assumed before any call has finished (the model's
            ``max_tokens``).
    """

    def __init__(
        self,
        rpm: int | None = None,
        tpm: int | None = None,
        *,
        clock: Clock | None = None,
        headroom: float = 0.98,
        completion_guess: int = 400,
    ):
        if not 0 < headroom <= 1:
            raise ValueError("headroom must be in (0, 1]")
        self.rpm = rpm
        self.tpm = tpm
        self.clock: Clock = clock or MonotonicClock()
        self.headroom = headroom
        self.completion_guess = completion_guess
        self._lock = asyncio.Lock()
        self._next_request = float("-inf")
        self._next_token = float("-inf")
        self._held_until = float("-inf")
        self._starts: deque[float] = deque()  # start times of the last rpm requests
        self._tokens: deque[list[float]] = deque()  # [started, tokens, in window] per request
        self._window_tokens = 0.0
        self._completions = 0
        self._completion_total = 0
        self.requests = 0
        self.waited_s = 0.0
        self.first_request: float | None = None
        self.last_request = 0.0

    @property
    def limited(self) -> bool:
        """True when any limit is set."""
        return self.rpm is not None or self.tpm is not None

    @property
    def counts_tokens(self) -> bool:
        """True when calls need a token estimate."""
        return self.tpm is not None

    def expected_completion(self) -> int:
        """Completion tokens to assume for the next call: the running average, else the cap."""
        if self._completions:
            return round(self._completion_total / self._completions)
        return self.completion_guess

    def estimate(self, prompt_tokens: int) -> int:
        """Tokens to charge before a call with ``prompt_tokens`` of prompt."""
        return prompt_tokens + self.expected_completion()

    def hold(self, seconds: float) -> None:
        """Start no request for ``seconds`` (the provider's Retry-After)."""
        self._held_until = max(self._held_until, self.clock.now() + seconds)

    def _expire(self, now: float) -> None:
        while self._tokens and self._tokens[0][0] <= now - WINDOW_S:
            entry = self._tokens.popleft()
            entry[2] = 0.0  # out of the window: later corrections no longer count
            self._window_tokens -= entry[1]

    def _wait_needed(self, now: float, tokens: int) -> float:
        wait = max(self._held_until - now, self._next_request - now, self._next_token - now, 0.0)
        if self.rpm is not None and len(self._starts) >= self.rpm:
            # Hard cap (pacing alone could drift by rounding): the rpm-th last start must be
            # out of the window.
            wait = max(wait, self._starts[-self.rpm] + WINDOW_S - now + 1e-6)
        if self.tpm is not None:
            self._expire(now)
            # Hard cap: the tokens started in the last 60 s plus these must fit under tpm; a
            # request larger than tpm alone waits for an empty window.
            excess = self._window_tokens + min(tokens, self.tpm) - self.tpm
            if excess > 0 and self._tokens:
                freed = 0.0
                for started, charged, _live in self._tokens:
                    freed += charged
                    if freed >= excess - 1e-9:
                        wait = max(wait, started + WINDOW_S - now + 1e-6)
                        break
        return wait

    async def acquire(self, tokens: int = 0) -> LimitTicket:
        """Wait until a request charging ``tokens`` may start, then admit it.

        Args:
            tokens: Estimated prompt plus completion tokens (ignored without a tpm limit).
        """
        async with self._lock:
            while True:
                now = self.clock.now()
                wait = self._wait_needed(now, tokens)
                if wait <= 1e-9:  # below clock resolution: sleeping would not move time
                    break
                self.waited_s += wait
                await self.clock.sleep(wait)
            if self.rpm is not None:
                interval = WINDOW_S / (self.rpm * self.headroom)
                # A waiter woken a little late may catch up (by CATCH_UP_S at most), so event
                # loop delays do not eat into the rate; the hard cap still bounds any window.
                earliest = now if self._next_request < now - WINDOW_S else now - CATCH_UP_S
                self._next_request = max(earliest, self._next_request) + interval
                self._starts.append(now)
                if len(self._starts) > self.rpm:
                    self._starts.popleft()
            entry = None
            if self.tpm is not None:
                charged = min(tokens, self.tpm)
                self._next_token = max(now, self._next_token) + self._token_time(charged)
                entry = [now, float(charged), 1.0]
                self._tokens.append(entry)
                self._window_tokens += charged
            self.requests += 1
            if self.first_request is None:
                self.first_request = now
            self.last_request = now
            return LimitTicket(now, tokens, entry)

    def _token_time(self, tokens: float) -> float:
        assert self.tpm is not None
        return tokens * WINDOW_S / (self.tpm * self.headroom)

    def settle(self, ticket: LimitTicket, actual_tokens: int, completion_tokens: int | None):
        """Correct a request's charge with its actual usage.

        Args:
            ticket: What :meth:`acquire` returned.
            actual_tokens: Prompt plus completion tokens the API reported.
            completion_tokens: Completion tokens (feeds the running average), if known.
        """
        if completion_tokens is not None:
            self._completions += 1
            self._completion_total += completion_tokens
        if ticket.entry is None or self.tpm is None:
            return
        old = ticket.entry[1]
        new = float(min(actual_tokens, self.tpm))
        ticket.entry[1] = new
        if ticket.entry[2]:
            self._window_tokens += new - old
        self._next_token += self._token_time(new - old)

    def achieved_rpm(self) -> float | None:
        """Requests per minute between the first and the last admitted, None before two."""
        if self.first_request is None or self.requests < 2:
            return None
        elapsed = self.last_request - self.first_request
        return (self.requests - 1) / elapsed * WINDOW_S if elapsed > 0 else None
