"""The thesis's MovieLens-1M matroid setup (Sec. 6.1.2, Table 6.2; DP-matroid spec §11.3).

The data is **user-supplied**: the product never downloads it and it is not in the repository.
:func:`load_movielens_1m` reads the latin-1 files ``ratings.dat``
(``UserID::MovieID::Rating::Timestamp``) and ``movies.dat`` (``MovieID::Title::Genres``, genres
separated by ``|``). :class:`MovieLensMatroidEnv` builds the thesis's instance from them:

* items: the ``n_items`` (100) most-rated movies, ties at the cut-off by ascending MovieID;
* features: a 0/1 vector over the 18 genres in the canonical order (:data:`GENRES`), taken from
  ``movies.dat`` (never from the thesis's Table 6.2, whose Wizard of Oz genres look garbled);
* matroid: linear over ℝ on those vectors (the thesis serves K = 17: check ``K``);
* means: w̄(e) = (#ratings of e) / (#users), 6040 users in MovieLens-1M;
* rewards: each round draws one user uniformly at random with replacement; w_t(e) = 1 if that
  user rated e (any star value), else 0. The K rewards of a round come from one user and are
  correlated (the regret model assumes independence; privacy is unaffected).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..matroids import LinearMatroid
from .matroid_env import MatroidEnvironment

__all__ = ["GENRES", "MovieLensData", "MovieLensMatroidEnv", "load_movielens_1m"]

#: The 18 MovieLens-1M genres in the canonical order of the thesis's feature vectors.
GENRES = (
    "Action",
    "Adventure",
    "Animation",
    "Children's",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
)


@dataclasses.dataclass
class MovieLensData:
    """Parsed MovieLens-1M files: ratings as (user index, movie id) pairs, and the catalogue."""

    users: np.ndarray  # (n_ratings,) user index 0..n_users−1
    movies: np.ndarray  # (n_ratings,) MovieID
    n_users: int
    titles: dict[int, str]
    genres: dict[int, tuple[str, ...]]


def _lines(path: Path):
    with Path(path).open("r", encoding="latin-1") as fh:
        for n, line in enumerate(fh, 1):
            line = line.rstrip("\r\n")
            if line.strip():
                yield n, line


def load_movielens_1m(ratings_path, movies_path) -> MovieLensData:
    """Read user-supplied ``ratings.dat`` and ``movies.dat`` (MovieLens-1M format, latin-1)."""
    for p in (ratings_path, movies_path):
        if not Path(p).is_file():
            raise FileNotFoundError(f"no MovieLens file at {p}")
    titles, genres = {}, {}
    for n, line in _lines(movies_path):
        parts = line.split("::")
        if len(parts) != 3:
            raise ValueError(f"{movies_path}:{n}: expected MovieID::Title::Genres")
        mid = int(parts[0])
        gs = tuple(g for g in parts[2].split("|") if g)
        unknown = [g for g in gs if g not in GENRES]
        if unknown:
            raise ValueError(f"{movies_path}:{n}: unknown genre {unknown[0]!r}")
        titles[mid], genres[mid] = parts[1], gs
    users, movies = [], []
    for n, line in _lines(ratings_path):
        parts = line.split("::")
        if len(parts) != 4:
            raise ValueError(f"{ratings_path}:{n}: expected UserID::MovieID::Rating::Timestamp")
        users.append(int(parts[0]))
        movies.append(int(parts[1]))
    if not users:
        raise ValueError(f"{ratings_path} holds no ratings")
    u = np.asarray(users, dtype=np.int64)
    ids, uidx = np.unique(u, return_inverse=True)
    m = np.asarray(movies, dtype=np.int64)
    missing = set(np.unique(m).tolist()) - set(titles)
    if missing:
        raise ValueError(
            f"ratings refer to movies missing from {movies_path}: {sorted(missing)[:5]}"
        )
    return MovieLensData(uidx.astype(np.int64), m, int(ids.size), titles, genres)


class MovieLensMatroidEnv(MatroidEnvironment):
    """The thesis's MovieLens instance (see the module docstring).

    Parameters
    ----------
    data
        Parsed files (:func:`load_movielens_1m`).
    n_items
        How many of the most-rated movies are items (100 in the thesis).

    Examples
    --------
    A toy catalogue in the same format (the real files are user-supplied):

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "movies.dat").write_text(
    ...     "1::A (1990)::Comedy\\n2::B (1991)::Drama|War\\n3::C (1992)::Comedy|Drama\\n",
    ...     encoding="latin-1")
    >>> _ = (d / "ratings.dat").write_text(
    ...     "1::1::5::0\\n1::2::3::0\\n2::2::4::0\\n2::3::1::0\\n3::3::2::0\\n", encoding="latin-1")
    >>> env = MovieLensMatroidEnv(load_movielens_1m(d / "ratings.dat", d / "movies.dat"), 3)
    >>> env.movie_ids.tolist(), env.K, env.means.round(3).tolist()
    ([2, 3, 1], 3, [0.667, 0.667, 0.333])

    """

    name = "movielens-1m"

    def __init__(self, data: MovieLensData, n_items: int = 100):
        counts_ids, counts = np.unique(data.movies, return_counts=True)
        if n_items > counts_ids.size:
            raise ValueError(f"only {counts_ids.size} rated movies; cannot take {n_items}")
        order = np.lexsort((counts_ids, -counts))  # most rated first, ties by ascending MovieID
        top = counts_ids[order[:n_items]]
        self.data = data
        self.movie_ids = top
        self.titles = [data.titles[int(m)] for m in top]
        self.genres = [data.genres[int(m)] for m in top]
        self.vectors = np.array(
            [[1.0 if g in gs else 0.0 for g in GENRES] for gs in self.genres], dtype=np.float64
        )
        self.matroid = LinearMatroid(self.vectors)
        col = {int(m): i for i, m in enumerate(top)}
        pick = np.isin(data.movies, top)
        item = np.array([col[int(m)] for m in data.movies[pick]], dtype=np.int64)
        # who rated what, one bit per (user, item): the reward table of every possible round
        self.rated = np.zeros((data.n_users, n_items), dtype=bool)
        self.rated[data.users[pick], item] = True
        self.means = self.rated.sum(axis=0) / float(data.n_users)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        users = rng.integers(0, self.data.n_users, size=n)
        return self.rated[users].astype(np.float64)

    def describe(self) -> dict:
        out = super().describe()
        out["n_users"] = self.data.n_users
        return out
