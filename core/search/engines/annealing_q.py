"""The Q-method (thesis §4.4.1): simulated annealing picks where to start, Q-learning picks
which direction to move.

Each round, :func:`~tilecraft.search.engines.annealing.select_starts` picks a beam of start
points from the evaluated set H. From each start a walker takes up to ``steps`` steps; at each
step a Q-network X (:class:`~tilecraft.search.engines.qnetwork.QNetwork`, four fully connected
layers) scores the moves that lead to unvisited points and the walker takes the best one (or,
with probability epsilon, a random one; ties are broken at random). The new points of all
walkers are evaluated as one batch. A walker moves on to the new point when it performs better
and otherwise stays to try another direction (``greedy_walk``; with ``greedy_walk=False`` it
always moves on, as a plain RL trajectory — slower on every landscape we tried).

What X sees (``q_input``):

- ``"move"`` (default): the point's features and the change the move makes to them, one Q
  value out, so what X learns from one direction carries over to every direction making a
  similar change;
- ``"point"`` (the thesis's layout): the point's features in, one Q value per direction out;
- ``"value"``: X learns each evaluated point's log performance relative to the best (every
  trial is a sample, not only neighbour pairs) and a move's Q value is X(e) - X(p).

What the study found (``bench/bench_search.py``, replayed cost tables and synthetic
landscapes, 20-30 seeds): none of the three networks chooses improving directions more often
than a random choice among the same options would, and the learned Q-method needs about as
many trials as its random-direction ablation (``learned=False``) — sometimes fewer, sometimes
more. Its lead over the P-method comes from the greedy walk (try one direction, move on at
the first improvement) rather than from the network. Where a walker stands, usually only one
or two of the directions improve, and which ones is not predictable from a few hundred
samples.

E is performance, ``1 / cost`` (higher is better; 0 for a failed candidate), as in the thesis;
a move from ``p`` along ``d`` to ``e`` is an experience ``(p, d, e, r)`` with reward
``r = (E_e - E_p) / E_p`` (clipped to ``[-1, 1]`` for stability; 1 when a failed start leads to
a working point). With ``hindsight`` (default) every pair of evaluated neighbours is an
experience, whichever step measured them (the random initial points, other walkers), not only
the moves the walkers made. Every ``train_every`` steps X is trained on ``train_batches``
minibatches drawn from this replay memory towards ``r + discount * max Y(e)`` (``r`` alone
when ``e`` failed) with AdaDelta, where Y is a copy of X refreshed every ``target_sync``
trainings. ``discount`` defaults to 0: a greedy walker chooses again from wherever it lands,
and the future term tripled the time without reaching the optimum sooner. X starts with a
near-zero output layer (``output_scale``), so an untrained X ties everywhere and the first
choices are random rather than a random network's fixed preferences; ``adadelta_eps`` sets
AdaDelta's first step size. ``learned=False`` is the ablation: uniformly random directions,
no network. A walker never moves onto a failed point, never goes back to a visited one, and
no point is evaluated twice.

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

from collections import deque
from collections.abc import Callable

import numpy as np

from tilecraft.search.engines.annealing import select_starts
from tilecraft.search.engines.base import SearchEngine, TrialLog
from tilecraft.search.engines.qnetwork import QNetwork
from tilecraft.search.errors import SearchError
from tilecraft.search.space import Point, Space

__all__ = ["ChoiceCallback", "QMethodSearch", "reward"]

#: ``on_choice(point, options, chosen, by_network)``: every direction choice, with the
#: ``(direction, neighbour)`` options it was made among (a diagnostic of the study)
ChoiceCallback = Callable[[Point, list[tuple[int, Point]], tuple[int, Point], bool], None]


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
    trainings between copies of X into Y; ``replay_size``: experiences remembered;
    ``greedy_walk``: a walker only moves to a better point; ``learned``: False for the
    random-direction ablation; ``hindsight``: learn from every evaluated neighbour pair;
    ``q_input``: ``"move"``, ``"point"`` or ``"value"``; ``adadelta_eps``, ``output_scale``:
    see the module doc; ``on_choice(point, options, chosen, by_network)`` is told every
    direction choice (a diagnostic).
    """

    name = "q"

    def __init__(self, starts: int = 1, steps: int = 8, initial_points: int = 8,
                 gamma: float = 5.0, pool_size: int = 64, epsilon: float = 0.3,
                 epsilon_min: float = 0.05, epsilon_decay: float = 0.97,
                 discount: float = 0.0, hidden: int = 64, train_every: int = 5,
                 train_batches: int = 4, batch_size: int = 32, target_sync: int = 3,
                 replay_size: int = 4096, greedy_walk: bool = True, learned: bool = True,
                 hindsight: bool = True, q_input: str = "move", adadelta_eps: float = 1e-4,
                 output_scale: float = 0.01, on_choice: ChoiceCallback | None = None):
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
        self.learned = bool(learned)
        self.hindsight = bool(hindsight)
        if q_input not in ("point", "move", "value"):
            raise SearchError(f"QMethodSearch: q_input={q_input!r}; use 'move' (the point and "
                              "the move's change in, one Q value out), 'point' (one Q value "
                              "per direction) or 'value' (a point's predicted performance)")
        self.q_input = q_input
        self.adadelta_eps, self.output_scale = adadelta_eps, output_scale
        self.on_choice = on_choice

    def run(self, space: Space, log: TrialLog, rng: np.random.Generator) -> None:
        _QLearner(self, space, log, rng).run()


class _QLearner:
    """The state of one Q-method search."""

    def __init__(self, engine: QMethodSearch, space: Space, log: TrialLog,
                 rng: np.random.Generator):
        # two streams, so the walk (start points, epsilon coins, random picks) draws the same
        # numbers whether or not a network is learning: the ablation is a paired comparison
        walk_rng, learn_rng = rng.spawn(2)
        self.engine, self.space, self.log = engine, space, log
        self.rng, self.learn_rng = walk_rng, learn_rng
        directions = max(1, len(space.directions))
        if engine.q_input == "move":
            inputs, outputs = 2 * space.feature_size, 1
        elif engine.q_input == "value":
            inputs, outputs = space.feature_size, 1
        else:
            inputs, outputs = space.feature_size, directions
        self.network = QNetwork(inputs, outputs, engine.hidden, learn_rng,
                                eps=engine.adadelta_eps, output_scale=engine.output_scale)
        self.target = self.network.clone()
        self.replay: deque[tuple[Point, int, float, Point, bool]] = \
            deque(maxlen=engine.replay_size)
        self.exhausted: set[Point] = set()
        self.epsilon = engine.epsilon
        self.steps_taken = 0
        self.trainings = 0
        self._features: dict[Point, np.ndarray] = {}
        self._neighbours: dict[Point, list[tuple[int, Point]]] = {}
        self._move_rows: dict[Point, np.ndarray] = {}

    def features(self, point: Point) -> np.ndarray:
        if point not in self._features:
            self._features[point] = self.space.features(point)
        return self._features[point]

    def run(self) -> None:
        log, engine = self.log, self.engine
        self.evaluate(log.random_unvisited(self.rng, engine.initial_points))
        while not log.done():
            starts = select_starts(log, self.rng, engine.starts, engine.gamma,
                                   engine.pool_size, self.exhausted)
            if not starts:
                fresh = log.random_unvisited(self.rng, engine.starts)
                if not fresh:
                    log.exhausted = True
                    return
                self.evaluate(fresh)
                continue
            self.walk(starts)

    def evaluate(self, points: list[Point]) -> None:
        """Evaluate ``points``; with ``hindsight``, every evaluated neighbour pair they
        complete becomes an experience, whichever step measured it."""
        known = len(self.log.history)
        self.log.evaluate(points)
        if self.engine.hindsight:
            for trial in self.log.history[known:]:
                self.remember_pairs(trial.point)

    def remember_pairs(self, point: Point) -> None:
        log = self.log
        for direction, other in self.neighbours(point):
            if log.visited(other):
                self.remember(point, direction, other)
                for back, end in self.neighbours(other):
                    if end == point:
                        self.remember(other, back, point)

    def remember(self, start: Point, direction: int, end: Point) -> None:
        start_perf, end_perf = self.log.performance(start), self.log.performance(end)
        self.replay.append((start, direction, reward(start_perf, end_perf), end,
                            end_perf <= 0))

    def walk(self, walkers: list[Point]) -> None:
        log = self.log
        for _ in range(self.engine.steps):
            if log.done() or not walkers:
                return
            moves: list[tuple[Point, int, Point]] = []
            taken: set[Point] = set()
            for point in walkers:
                options = [(d, e) for d, e in self.neighbours(point)
                           if not log.visited(e) and e not in taken]
                if not options:
                    self.exhausted.add(point)
                    continue
                direction, end = self.choose(point, options)
                taken.add(end)
                moves.append((point, direction, end))
            if not moves:
                return
            self.evaluate([end for _, _, end in moves])
            walkers = []
            for start, direction, end in moves:
                if not log.visited(end):  # cut by the budget
                    continue
                if not self.engine.hindsight:
                    self.remember(start, direction, end)
                start_perf, end_perf = log.performance(start), log.performance(end)
                if end_perf > start_perf or (not self.engine.greedy_walk and end_perf > 0):
                    walkers.append(end)
                elif self.engine.greedy_walk and start not in walkers:
                    walkers.append(start)  # try another direction from here next step
            self.after_step()

    def choose(self, point: Point, options: list[tuple[int, Point]]) -> tuple[int, Point]:
        """Epsilon-greedy over the directions that lead to unvisited points (uniformly
        random in the ablation, ``learned=False``)."""
        coin = self.rng.random()
        chosen = options[int(self.rng.integers(len(options)))]
        by_network = self.engine.learned and coin >= self.epsilon
        if by_network:
            q_values = self.q_values(self.network, point, options)
            best = max(q_values)
            ties = [option for option, q in zip(options, q_values) if q >= best - 1e-9]
            chosen = ties[int(self.learn_rng.integers(len(ties)))] if len(ties) > 1 else ties[0]
        if self.engine.on_choice is not None:
            self.engine.on_choice(point, options, chosen, by_network)
        return chosen

    def train_value(self) -> None:
        """``value`` mode: X learns every evaluated point's log performance relative to the
        best, ``log(E_p / E*)`` (floored at -3; failures at the floor); the Q value of a move
        is then X(e) - X(p), the predicted log of ``1 + reward``."""
        points = list(self.log.costs)
        size = min(self.engine.batch_size, len(points))
        picks = self.learn_rng.choice(len(points), size=size, replace=False)
        best = self.log.best_performance
        inputs = np.stack([self.features(points[int(i)]) for i in picks])
        targets = np.array([max(-3.0, np.log(max(self.log.performance(points[int(i)]), 1e-300)
                                             / best)) if best > 0 else 0.0 for i in picks])
        self.network.train(inputs, np.zeros(size, dtype=np.int64), targets)

    def neighbours(self, point: Point) -> list[tuple[int, Point]]:
        if point not in self._neighbours:
            self._neighbours[point] = self.space.neighbours(point)
        return self._neighbours[point]

    def future(self, batch: list[tuple[Point, int, float, Point, bool]]) -> np.ndarray:
        """``max Y(e)`` of each sample's end point ``e`` over its moves (0 where ``e`` failed
        or has none), in one prediction of the target network Y."""
        future = np.zeros(len(batch))
        if self.engine.q_input == "point":
            ends = np.stack([self.features(sample[3]) for sample in batch])
            masks = np.zeros((len(batch), self.network.weights[-1].shape[1]), dtype=bool)
            for row, sample in enumerate(batch):
                for direction, _ in self.neighbours(sample[3]):
                    masks[row, direction] = True
            best = np.where(masks, self.target.predict(ends), -np.inf).max(axis=1)
            live = masks.any(axis=1) & ~np.array([sample[4] for sample in batch])
            future[live] = best[live]
            return future
        rows, owners = [], []
        for row, (_, _, _, end, failed) in enumerate(batch):
            options = self.neighbours(end)
            if failed or not options:
                continue
            rows.append(self.all_move_inputs(end))
            owners.extend([row] * len(options))
        if rows:
            values = self.target.predict(np.concatenate(rows))[:, 0]
            best = np.full(len(batch), -np.inf)
            np.maximum.at(best, np.array(owners), values)
            future = np.where(np.isfinite(best), best, 0.0)
        return future

    def all_move_inputs(self, point: Point) -> np.ndarray:
        """:meth:`move_inputs` of every move from ``point`` (cached: replay asks often)."""
        if point not in self._move_rows:
            self._move_rows[point] = self.move_inputs(point, [e for _, e in
                                                              self.neighbours(point)])
        return self._move_rows[point]

    def move_inputs(self, point: Point, ends: list[Point]) -> np.ndarray:
        """Inputs of the ``move`` network: the point's features and each move's change."""
        here = self.features(point)
        changes = np.stack([self.features(end) for end in ends]) - here
        return np.concatenate([np.broadcast_to(here, changes.shape), changes], axis=1)

    def q_values(self, network: QNetwork, point: Point,
                 options: list[tuple[int, Point]]) -> list[float]:
        """``network``'s Q value of each ``(direction, neighbour)`` option from ``point``."""
        if self.engine.q_input == "value":
            ends = np.stack([self.features(end) for _, end in options])
            return [float(v) for v in network.predict(ends)[:, 0]]
        if self.engine.q_input == "move":
            return [float(q) for q in network.predict(
                self.move_inputs(point, [end for _, end in options]))[:, 0]]
        row = network.predict(self.features(point))[0]
        return [float(row[direction]) for direction, _ in options]

    def after_step(self) -> None:
        engine = self.engine
        self.steps_taken += 1
        self.epsilon = max(engine.epsilon_min, self.epsilon * engine.epsilon_decay)
        if engine.learned and self.steps_taken % engine.train_every == 0 and self.replay:
            for _ in range(engine.train_batches):
                self.train_once()
            self.trainings += 1
            if self.trainings % engine.target_sync == 0:
                self.target.copy_from(self.network)

    def train_once(self) -> None:
        if self.engine.q_input == "value":
            self.train_value()
            return
        size = min(self.engine.batch_size, len(self.replay))
        picks = self.learn_rng.choice(len(self.replay), size=size, replace=False)
        batch = [self.replay[int(i)] for i in picks]
        targets = np.array([sample[2] for sample in batch])
        if self.engine.discount > 0:
            targets += self.engine.discount * self.future(batch)
        if self.engine.q_input == "move":
            inputs = np.concatenate([self.move_inputs(start, [end])
                                     for start, _, _, end, _ in batch])
            actions = np.zeros(len(batch), dtype=np.int64)
        else:
            inputs = np.stack([self.features(sample[0]) for sample in batch])
            actions = np.array([sample[1] for sample in batch])
        self.network.train(inputs, actions, targets)
