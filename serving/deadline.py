"""A request's deadline: when it must be answered by, and whether its caller is still waiting."""

from __future__ import annotations

import time

from . import errors

NO_DEADLINE_BEYOND = 365 * 24 * 3600.0  # seconds: a deadline further away is no deadline


class Deadline:
    """`at`: a time.monotonic() value (None: no deadline); `is_active`: a function that is False once the caller
    has gone (gRPC's `context.is_active`), None if unknown. Shared by every stage a request passes (batch
    queue, session run, the pieces of a long run)."""

    __slots__ = ("at", "_is_active")

    def __init__(self, at=None, is_active=None):
        self.at = at
        self._is_active = is_active

    @classmethod
    def after(cls, seconds, is_active=None):
        """A deadline `seconds` from now (None, or beyond a year: none; gRPC's time_remaining() for a call without
        a deadline is about 2**63 nanoseconds, more than a wait's timeout can hold)."""
        return cls(None if seconds is None or seconds > NO_DEADLINE_BEYOND else time.monotonic() + seconds,
                   is_active)

    def remaining(self):
        """Seconds left (never below 0), or None without a deadline."""
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def expired(self):
        if self.at is not None and time.monotonic() >= self.at:
            return True
        return self._is_active is not None and not self._is_active()

    def check(self, what="the request"):
        """Raises DEADLINE_EXCEEDED (CANCELLED when the caller has gone) once the deadline has passed."""
        if self.at is not None and time.monotonic() >= self.at:
            raise errors.ServingError("DEADLINE_EXCEEDED", f"Deadline exceeded: {what} did not finish in time")
        if self._is_active is not None and not self._is_active():
            raise errors.ServingError("CANCELLED", f"the client cancelled {what}")


NONE = Deadline()  # no deadline
