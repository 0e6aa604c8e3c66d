"""Counting the noise draws of a continual-release aggregator (tree or matrix factorization)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Self

__all__ = ["DrawCounter"]


class DrawCounter:
    """Mixin for aggregators that count their node and pad draws in ``_draws``.

    The host builds its state in ``_state()`` (River style: constructors only store
    parameters), including ``_draws = {"node": 0, "pad": 0}``.

    Examples
    --------
    >>> class Agg(DrawCounter):
    ...     def _state(self):
    ...         if not hasattr(self, "_draws"):
    ...             self._draws = {"node": 0, "pad": 0}
    ...         return self
    >>> a = Agg()
    >>> a._state()._draws["node"] += 2
    >>> a.draw_counts(), a.draws
    ((2, 0), {'node': 2, 'pad': 0})
    """

    _draws: dict[str, int]

    if TYPE_CHECKING:  # provided by the host class

        def _state(self) -> Self: ...

    def draw_counts(self) -> tuple[int, int]:
        """(node draws, pad draws) so far, without copying the counter dict."""
        d = self._state()._draws
        return d["node"], d["pad"]

    @property
    def draws(self) -> dict[str, int]:

        return dict(self._state()._draws)
