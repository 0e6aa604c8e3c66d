"""Logged data shipped with the package."""

from __future__ import annotations

from pathlib import Path

__all__ = ["obd_sample"]

_DATA = Path(__file__).resolve().parents[1] / "data"


def obd_sample(behavior: str = "random", campaign: str = "men") -> Path:
    """Directory of the bundled Open Bandit Dataset slice (first 3,000 rows of the ``men``
    campaign; CC BY 4.0, Saito et al. 2021 — see ``data/obd/README.md``).

    >>> obd_sample("bts").name
    'men'
    """
    if behavior not in ("random", "bts"):
        raise ValueError("behavior must be 'random' or 'bts'")
    path = _DATA / "obd" / behavior / campaign
    if not path.is_dir():
        raise FileNotFoundError(f"no bundled OBD slice for {behavior}/{campaign} (only men)")
    return path
