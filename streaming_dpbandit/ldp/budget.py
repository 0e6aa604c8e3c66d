"""The client's own privacy budget (LDP-GLB spec §1 threat-model limit (1), §8 step 6).

The guarantee is per report: a user who sends n reports within a window spends n·ε (basic
composition). The client keeps its own ledger of what it sent and refuses to send more than
``epsilon_cap`` within ``window_s`` seconds. It holds only times and amounts, on the device.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

__all__ = ["BudgetExceeded", "ClientBudget"]


class BudgetExceeded(RuntimeError):
    """Sending this report would exceed the client's privacy budget."""


class ClientBudget:
    """Sliding-window cap on the ε (and δ) this device spends.

    Parameters
    ----------
    epsilon_cap
        Maximum total ε of the reports sent within any window.
    window_s
        Window length in seconds (``float("inf")``: a lifetime cap).
    delta_cap
        Maximum total δ within a window.
    clock
        Time source (seconds); injectable for tests.

    Examples
    --------
    >>> now = [0.0]
    >>> b = ClientBudget(epsilon_cap=2.0, window_s=86400, clock=lambda: now[0])
    >>> b.charge(1.0); b.charge(1.0); b.spent()
    (2.0, 0.0)
    >>> b.charge(1.0)
    Traceback (most recent call last):
    ...
    streaming_dpbandit.ldp.budget.BudgetExceeded: a report now would spend ε = 3 > 2 within 86400 s
    >>> now[0] = 86401.0; b.charge(1.0); b.spent()
    (1.0, 0.0)
    """

    def __init__(
        self,
        epsilon_cap: float,
        window_s: float = 86400.0,
        delta_cap: float = 1.0,
        clock: Callable[[], float] = time.time,
    ):
        if not (epsilon_cap > 0 and window_s > 0 and delta_cap >= 0):
            raise ValueError("need epsilon_cap > 0, window_s > 0 and delta_cap >= 0")
        self.epsilon_cap = epsilon_cap
        self.window_s = window_s
        self.delta_cap = delta_cap
        self.clock = clock
        self._sent: collections.deque[tuple[float, float, float]] = collections.deque()

    def _expire(self, now: float) -> None:
        while self._sent and self._sent[0][0] <= now - self.window_s:
            self._sent.popleft()

    def spent(self) -> tuple[float, float]:
        """(ε, δ) spent within the current window."""
        self._expire(self.clock())
        return (sum(e for _, e, _ in self._sent), sum(d for _, _, d in self._sent))

    def charge(self, epsilon: float, delta: float = 0.0) -> None:
        """Record one report, or raise :class:`BudgetExceeded` (and record nothing)."""
        now = self.clock()
        self._expire(now)
        eps = sum(e for _, e, _ in self._sent) + epsilon
        dl = sum(d for _, _, d in self._sent) + delta
        if eps > self.epsilon_cap * (1 + 1e-12) or dl > self.delta_cap * (1 + 1e-12):
            raise BudgetExceeded(
                f"a report now would spend ε = {eps:g} > {self.epsilon_cap:g} "
                f"within {self.window_s:g} s"
            )
        self._sent.append((now, float(epsilon), float(delta)))
