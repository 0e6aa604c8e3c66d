"""A bandit that waits for rewards before its next release: say so, and say what to change.

A private release reads the rewards of the decisions before it; until each of them is joined or
expired, the bandit's contexts wait ("blocked", ``docs/service.md``, "Episode boundaries and the
swap delay"). Rounds decided between the last round a release reads and the release itself —
FLIPHAT's ``swap_delay``, the other policies' ``feedback_lag_rounds`` — give those rewards time to
arrive; fewer rounds than the traffic of one ``feedback_window`` make the bandit wait at every
release for as long as a missing reward's window takes to close.

* :class:`BlockedWatch` (used by the contexts stage) logs a warning once a bandit has been
  blocked for ``blocked_warning_s``: what it waits for, the traffic seen, and the setting to
  change; and a line when it decides again.
* :func:`blocking_load` is the start-up check of a load whose rate is known (``dpbandit
  loadgen``): the combination that blocks at every release is refused.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BlockedWatch", "blocking_load", "release_lead"]

log = logging.getLogger("streaming_dpbandit.service")


def release_lead(bandit: Any) -> tuple[str, int]:
    """(setting, rounds): what lets a bandit (``BanditSettings``) go on deciding while the
    rewards its next release reads arrive.

    >>> from streaming_dpbandit.settings import BanditSettings
    >>> release_lead(BanditSettings.model_validate(
    ...     {"policy": {"policy": "fliphat", "d": 20, "swap_delay": 300}}))
    ('policy.swap_delay', 300)
    >>> release_lead(BanditSettings.model_validate({"policy": {"policy": "linucb", "d": 4}}))
    ('feedback_lag_rounds', 0)
    """
    policy = bandit.policy
    if "swap_delay" in type(policy).model_fields:  # FLIPHAT: the old model serves W rounds
        return "policy.swap_delay", int(policy.swap_delay)
    return "feedback_lag_rounds", int(bandit.feedback_lag_rounds)


def blocking_load(name: str, bandit: Any, rate: float, reward_probability: float) -> str | None:
    """Why a load of ``rate`` contexts/s, with a reward for ``reward_probability`` of them, would
    block bandit ``name`` at every release (None when it would not).

    A decision without reward holds the release until its window closes: a lead shorter than the
    traffic of one ``feedback_window`` then stalls the bandit at every release.

    >>> from streaming_dpbandit.settings import BanditSettings
    >>> b = BanditSettings.model_validate(
    ...     {"policy": {"policy": "fliphat", "d": 20, "swap_delay": 250}, "feedback_window": 30})
    >>> print(blocking_load("shop", b, rate=100, reward_probability=0.95))
    bandit 'shop': at 100 events/s its feedback_window (30 s) spans 3,000 rounds but \
policy.swap_delay is 250: the 5% of decisions that get no reward would hold every release until \
their window closes (about 30 s) while its contexts wait. Set policy.swap_delay to at least \
3,000, shorten feedback_window, or lower --rate
    >>> blocking_load("shop", b, rate=8, reward_probability=0.95) is None  # 240 rounds: enough
    True
    """
    if reward_probability >= 1.0:
        return None  # every reward comes: a release waits only for the last ones' delay
    setting, lead = release_lead(bandit)
    window = bandit.feedback_window
    needed = math.ceil(rate * window)
    if lead >= needed or not _updates(bandit):
        return None
    return (
        f"bandit {name!r}: at {rate:g} events/s its feedback_window ({window:g} s) spans "
        f"{needed:,} rounds but {setting} is {lead:,}: the {1 - reward_probability:.0%} of "
        "decisions that get no reward would hold every release until their window closes "
        f"(about {window:g} s) while its contexts wait. Set {setting} to at least {needed:,}, "
        "shorten feedback_window, or lower --rate"
    )


def _updates(bandit: Any) -> bool:
    """Does the bandit's policy ever make a release (a frozen policy never waits)?"""
    try:
        policy = bandit.policy.build(seed=0)
    except Exception:  # the service's own start-up reports a policy that cannot be built
        return True
    return policy.max_decide_batch() < (1 << 40)


class BlockedWatch:
    """Warns once a bandit has been blocked for ``after_s`` seconds (once per wait).

    Parameters
    ----------
    after_s
        Seconds blocked before the warning.
    idle_timeout_s
        The service's ``idle_timeout_s`` (named in the warning).
    clock
        Monotonic clock (injectable for tests).
    """

    def __init__(
        self,
        after_s: float,
        idle_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.after_s = after_s
        self.idle_timeout_s = idle_timeout_s
        self.clock = clock
        self.started = clock()
        self._since: dict[str, tuple[float, int, bool]] = {}  # bandit → (since, decided, warned)

    def blocked(self, rt: Any, queued: int) -> None:
        """``rt`` (a bandit runtime) is blocked with ``queued`` contexts waiting behind it."""
        now, name = self.clock(), rt.bandit_id
        decided = rt.stats["decided"] - rt.stats_restored["decided"]  # by this process
        since, before, warned = self._since.setdefault(name, (now, decided, False))
        if warned or now - since < self.after_s:
            return
        self._since[name] = (since, before, True)
        rate = before / (since - self.started) if since - self.started >= 1.0 else None
        log.warning("%s", self.reason(rt, now - since, queued, rate), extra={"bandit": name})

    def decided(self, name: str) -> None:
        """Bandit ``name`` decides again (its release was made)."""
        now = self.clock()
        got = self._since.pop(name, None)
        if got is not None and got[2]:
            log.info(
                "bandit %s: deciding again after %.0f s blocked",
                name,
                now - got[0],
                extra={"bandit": name},
            )

    def reason(self, rt: Any, waited: float, queued: int, rate: float | None) -> str:
        """The warning: what the bandit waits for, and what to change (``rate``: the bandit's
        decisions per second before it was blocked, when known)."""
        b = rt.settings
        if rt.room() <= 0:  # max_pending decisions pending: none expires early
            return (
                f"bandit {rt.bandit_id}: blocked for {waited:.0f} s, {queued:,} contexts waiting: "
                f"{b.max_pending:,} decisions (max_pending) are waiting for their rewards; each "
                f"resolves when its reward arrives, or when the feedback clock passes its time + "
                f"feedback_window, {b.feedback_window:g} s (if the feedback stops, "
                f"idle_timeout_s, {self.idle_timeout_s:g} s, expires them). Set max_pending to "
                f"at least the traffic of one feedback_window, or shorten feedback_window"
            )
        pending, through = rt.waiting_for()
        setting, lead = release_lead(b)
        traffic = ""
        if rate:
            need = math.ceil(rate * b.feedback_window)
            traffic = f"; at the {rate:,.0f} decisions/s seen so far that is about {need:,} rounds"
        return (
            f"bandit {rt.bandit_id}: blocked for {waited:.0f} s, {queued:,} contexts waiting: "
            f"its next release reads the rewards of the decisions up to round {through:,} and "
            f"{pending:,} of them have none yet (each resolves when its reward arrives, or when "
            f"the feedback clock passes its time + feedback_window, {b.feedback_window:g} "
            f"s; if the feedback stops, idle_timeout_s, {self.idle_timeout_s:g} s, expires "
            f"them). To go on deciding meanwhile, set {setting} (now {lead:,}) to at least the "
            f"traffic of one feedback_window{traffic}, or shorten feedback_window"
        )
