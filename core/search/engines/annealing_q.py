"""The Q-method (thesis §4.4.1): simulated annealing picks where to start, Q-learning picks
which direction to move.

Each round, :func:`~tilecraft.search.engines.annealing.select_starts` picks a beam of start
points from the evaluated set H. From each start a walker takes up to ``steps`` steps; at each
step a Q-network X (:class:`~tilecraft.search.engines.qnetwork.QNetwork`, four fully connected
layers, input = the point's features, output = one Q value per direction of the space) scores
the directions that lead to unvisited points and the walker takes the best one (or, with
probability epsilon, a random one). The new points of all walkers are evaluated as one batch.
A walker moves on to the new point when it performs better and otherwise stays to try another
direction (``greedy_walk``; with ``greedy_walk=False`` it always moves on, as a plain RL
trajectory — slower on every landscape we tried).

E is performance, ``1 / cost`` (higher is better; 0 for a failed candidate), as in the thesis;
each move from ``p`` to ``e`` is stored as ``(p, d, e, r)`` with reward
``r = (E_e - E_p) / E_p`` (clipped to ``[-1, 1]`` for stability; 1 when a failed start leads to
a working point). Every ``train_every`` steps X is trained on minibatches drawn from this
replay memory towards ``r + discount * max Y(e)`` (``r`` alone when ``e`` failed) with
AdaDelta, where Y is a copy of X refreshed every ``target_sync`` trainings (the thesis writes
the loss on ``X(e)``; this trains ``X(p)[d]``, the Q value of the move taken, as Q-learning
does). A walker never moves onto a failed point, never goes back to a visited one, and no
point is evaluated twice.

>>> from tilecraft.search.space import Space, SplitSpace
>>> space = Space([("a", SplitSpace(64, 3)), ("b", SplitSpace(36, 2))])
>>> def cost(points):  # least when the decoded splits are (4, 4, 4) and (6, 6)
...     values = [space.values(p) for p in points]
...     return [1.0 + sum((f - 4) ** 2 for f in v["a"]) + sum((f - 6) ** 2 for f in v["b"])
...             for v in values]
>>> result = QMethodSearch().search(space, cost, budget_trials=60, seed=1)
>>> space.values(result.best_point), result.best_cost, result.trials
({'a': (4, 4, 4), 'b': (6, 6)}, 1.0, 60)
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from tilecraft.search.engines.annealing import select_starts
from tilecraft.search.engines.base import SearchEngine, TrialLog
from tilecraft.search.engines.qnetwork import QNetwork
from tilecraft.search.errors import SearchError
from tilecraft.search.space import Point, Space

__all__ = ["QMethodSearch", "reward"]


def reward(start: float, end: float) -> float:
    """The normalised reward of moving from performance ``start`` to ``end``.

    >>> reward(2.0, 3.0), reward(2.0, 0.0), reward(0.0, 1.0), reward(1.0, 5.0)
    (0.5, -1.0, 1.0, 1.0)
    """
    if start <= 0:
        return 1.0 if end > 0 else 0.0
    return max(-1.0, min(1.0, (end - start) / start))


class QMethodSearch(SearchEngine):
    """FlexTensor's search: SA start points, Q-learning directions (see the module doc).

    ``starts``: walkers per round (the beam); ``steps``: steps per walker per round;
    ``initial_points``: random points evaluated first; ``gamma``: SA sharpness; ``pool_size``:
    candidates drawn from H per round; ``epsilon`` decays by ``epsilon_decay`` per step down to
    ``epsilon_min``; ``discount``: the thesis's alpha; ``hidden``: width of the hidden layers;
    ``train_every`` steps, ``train_batches`` minibatches of ``batch_size``; ``target_sync``:
    trainings between copies of X into Y; ``replay_size``: transitions remembered;
    ``greedy_walk``: a walker only moves to a better point. The defaults (one walker of eight
    steps) took the fewest trials on synthetic landscapes; larger beams give larger batches.
    """

    name = "q"

    def __init__(self, starts: int = 1, steps: int = 8, initial_points: int = 8,
                 gamma: float = 5.0, pool_size: int = 64, epsilon: float = 0.3,
                 epsilon_min: float = 0.05, epsilon_decay: float = 0.97,
                 discount: float = 0.5, hidden: int = 64, train_every: int = 5,
                 train_batches: int = 8, batch_size: int = 32, target_sync: int = 3,
                 replay_size: int = 4096, greedy_walk: bool = True):
        positive = {"starts": starts, "steps": steps, "initial_points": initial_points,
                    "pool_size": pool_size, "hidden": hidden, "train_every": train_every,
                    "train_batches": train_batches, "batch_size": batch_size,
                    "target_sync": target_sync, "replay_size": replay_size}
        for key, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SearchError(f"QMethodSearch: {key}={value!r} must be an int >= 1")
        for key, value in {"epsilon": epsilon, "epsilon_min": epsilon_min,
                           "epsilon_decay": epsilon_decay, "discount": discount}.items():
            if not 0 <= value <= 1:
                raise SearchError(f"QMethodSearch: {key}={value!r} must lie in [0, 1]")
        if gamma < 0:
            raise SearchError(f"QMethodSearch: gamma={gamma!r} must be >= 0")
        self.starts, self.steps, self.initial_points = starts, steps, initial_points
        self.gamma, self.pool_size = gamma, pool_size
        self.epsilon, self.epsilon_min, self.epsilon_decay = epsilon, epsilon_min, epsilon_decay
        self.discount, self.hidden = discount, hidden
        self.train_every, self.train_batches, self.batch_size = (train_every, train_batches,
                                                                 batch_size)
        self.target_sync, self.replay_size = target_sync, replay_size
        self.greedy_walk = greedy_walk

    def run(self, space: Space, log: TrialLog, rng: np.random.Generator) -> None:
        _QLearner(self, space, log, rng).run()


class _QLearner:
    """The state of one Q-method search."""

    def __init__(self, engine: QMethodSearch, space: Space, log: TrialLog,
                 rng: np.random.Generator):
        self.engine, self.space, self.log, self.rng = engine, space, log, rng
        directions = max(1, len(space.directions))
        self.network = QNetwork(space.feature_size, directions, engine.hidden, rng)
        self.target = self.network.clone()
        self.replay: deque[tuple[np.ndarray, int, float, np.ndarray, np.ndarray, bool]] = \
            deque(maxlen=engine.replay_size)
        self.exhausted: set[Point] = set()
        self.epsilon = engine.epsilon
        self.steps_taken = 0
        self.trainings = 0
        self._features: dict[Point, np.ndarray] = {}

    def features(self, point: Point) -> np.ndarray:
        if point not in self._features:
            self._features[point] = self.space.features(point)
        return self._features[point]

    def run(self) -> None:
        log, engine = self.log, self.engine
        log.evaluate(log.random_unvisited(self.rng, engine.initial_points))
        while not log.done():
            starts = select_starts(log, self.rng, engine.starts, engine.gamma,
                                   engine.pool_size, self.exhausted)
            if not starts:
                fresh = log.random_unvisited(self.rng, engine.starts)
                if not fresh:
                    log.exhausted = True
                    return
                log.evaluate(fresh)
                continue
            self.walk(starts)

    def walk(self, walkers: list[Point]) -> None:
        log = self.log
        for _ in range(self.engine.steps):
            if log.done() or not walkers:
                return
            moves: list[tuple[Point, int, Point]] = []
            taken: set[Point] = set()
            for point in walkers:
                options = [(d, e) for d, e in self.space.neighbours(point)
                           if not log.visited(e) and e not in taken]
                if not options:
                    self.exhausted.add(point)
                    continue
                direction, end = self.choose(point, options)
                taken.add(end)
                moves.append((point, direction, end))
            if not moves:
                return
            log.evaluate([end for _, _, end in moves])
            walkers = []
            for start, direction, end in moves:
                if not log.visited(end):  # cut by the budget
                    continue
                start_perf, end_perf = log.performance(start), log.performance(end)
                failed = end_perf <= 0
                self.replay.append((self.features(start), direction, reward(start_perf, end_perf),
                                    self.features(end), self.valid_mask(end), failed))
                if end_perf > start_perf or (not self.engine.greedy_walk and not failed):
                    walkers.append(end)
                elif self.engine.greedy_walk and start not in walkers:
                    walkers.append(start)  # try another direction from here next step
            self.after_step()

    def choose(self, point: Point, options: list[tuple[int, Point]]) -> tuple[int, Point]:
        """Epsilon-greedy over the directions that lead to unvisited points."""
        if self.rng.random() < self.epsilon:
            return options[int(self.rng.integers(len(options)))]
        q_values = self.network.predict(self.features(point))[0]
        return max(options, key=lambda option: q_values[option[0]])

    def valid_mask(self, point: Point) -> np.ndarray:
        mask = np.zeros(max(1, len(self.space.directions)), dtype=bool)
        for direction, _ in self.space.neighbours(point):
            mask[direction] = True
        return mask

    def after_step(self) -> None:
        engine = self.engine
        self.steps_taken += 1
        self.epsilon = max(engine.epsilon_min, self.epsilon * engine.epsilon_decay)
        if self.steps_taken % engine.train_every == 0 and self.replay:
            for _ in range(engine.train_batches):
                self.train_once()
            self.trainings += 1
            if self.trainings % engine.target_sync == 0:
                self.target.copy_from(self.network)

    def train_once(self) -> None:
        size = min(self.engine.batch_size, len(self.replay))
        picks = self.rng.choice(len(self.replay), size=size, replace=False)
        batch = [self.replay[int(i)] for i in picks]
        starts = np.stack([sample[0] for sample in batch])
        ends = np.stack([sample[3] for sample in batch])
        actions = np.array([sample[1] for sample in batch])
        rewards = np.array([sample[2] for sample in batch])
        masks = np.stack([sample[4] for sample in batch])
        terminal = np.array([sample[5] or not sample[4].any() for sample in batch])
        future = np.where(masks, self.target.predict(ends), -math.inf).max(axis=1)
        future = np.where(terminal, 0.0, future)
        self.network.train(starts, actions, rewards + self.engine.discount * future)
