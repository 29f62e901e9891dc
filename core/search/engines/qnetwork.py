"""The Q-network of FlexTensor's direction choice (thesis §4.4.1): four fully connected layers
with ReLU, in numpy, trained with AdaDelta on a squared error.

Input: a point's features; output: one Q value per direction of the space. Only the Q value of
the direction actually taken is trained (the others have no label), so :meth:`QNetwork.train`
takes the taken direction of each sample.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> net = QNetwork(inputs=3, outputs=2, hidden=16, rng=rng)
>>> x = np.array([[0.0, 0.5, 1.0]])
>>> before = net.predict(x)[0, 1]
>>> losses = [net.train(x, np.array([1]), np.array([2.0])) for _ in range(300)]
>>> bool(losses[-1] < losses[0]), bool(abs(net.predict(x)[0, 1] - 2.0) < abs(before - 2.0))
(True, True)
"""

from __future__ import annotations

import numpy as np

from tilecraft.search.errors import SearchError

__all__ = ["AdaDelta", "QNetwork"]


class AdaDelta:
    """Zeiler's AdaDelta (the thesis's optimiser): per-parameter steps from running averages
    of squared gradients and squared updates, no learning rate to tune."""

    def __init__(self, shapes: list[tuple[int, ...]], rho: float = 0.95, eps: float = 1e-6):
        if not 0 < rho < 1 or not eps > 0:
            raise SearchError(f"AdaDelta: rho={rho} must be in (0, 1) and eps={eps} > 0")
        self.rho = rho
        self.eps = eps
        self.square_grads = [np.zeros(shape) for shape in shapes]
        self.square_steps = [np.zeros(shape) for shape in shapes]

    def step(self, params: list[np.ndarray], grads: list[np.ndarray]) -> None:
        """Update ``params`` in place."""
        rho, eps = self.rho, self.eps
        for param, grad, sq_grad, sq_step in zip(params, grads, self.square_grads,
                                                 self.square_steps):
            sq_grad *= rho
            sq_grad += (1 - rho) * grad * grad
            update = -np.sqrt(sq_step + eps) / np.sqrt(sq_grad + eps) * grad
            sq_step *= rho
            sq_step += (1 - rho) * update * update
            param += update


class QNetwork:
    """``inputs -> hidden -> hidden -> hidden -> outputs``, ReLU between layers, He-initialised
    from ``rng``; the output layer's initial weights are scaled by ``output_scale`` (a small
    value starts every Q value near 0 instead of at a random network's arbitrary
    preferences); ``rho`` and ``eps`` are AdaDelta's."""

    LAYERS = 4

    def __init__(self, inputs: int, outputs: int, hidden: int = 64,
                 rng: np.random.Generator | None = None, rho: float = 0.95, eps: float = 1e-6,
                 output_scale: float = 1.0):
        if inputs < 0 or outputs < 1 or hidden < 1:
            raise SearchError(f"QNetwork: inputs={inputs}, outputs={outputs}, hidden={hidden};"
                              " need inputs >= 0, outputs >= 1, hidden >= 1")
        rng = rng if rng is not None else np.random.default_rng(0)
        sizes = [max(inputs, 1), hidden, hidden, hidden, outputs]
        self.inputs = inputs
        self.weights = [rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)
                        for fan_in, fan_out in zip(sizes[:-1], sizes[1:])]
        self.weights[-1] *= output_scale
        self.biases = [np.zeros(fan_out) for fan_out in sizes[1:]]
        self.optimizer = AdaDelta([p.shape for p in self.parameters], rho, eps)

    @property
    def parameters(self) -> list[np.ndarray]:
        return [*self.weights, *self.biases]

    def _prepare(self, x: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        if self.inputs == 0:  # a space without features: a constant input
            return np.ones((x.shape[0], 1))
        if x.shape[1] != self.inputs:
            raise SearchError(f"QNetwork: got {x.shape[1]} features, expected {self.inputs}")
        return x

    def _forward(self, x: np.ndarray) -> list[np.ndarray]:
        activations = [x]
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            out = activations[-1] @ weight + bias
            if layer < self.LAYERS - 1:
                out = np.maximum(out, 0.0)
            activations.append(out)
        return activations

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Q values, shape ``(batch, outputs)``."""
        return self._forward(self._prepare(x))[-1]

    def train(self, x: np.ndarray, actions: np.ndarray, targets: np.ndarray) -> float:
        """One AdaDelta step on the mean squared error between ``Q(x)[action]`` and
        ``target``; returns the loss before the step."""
        x = self._prepare(x)
        actions = np.asarray(actions, dtype=np.int64)
        targets = np.asarray(targets, dtype=np.float64)
        activations = self._forward(x)
        rows = np.arange(x.shape[0])
        error = activations[-1][rows, actions] - targets
        grad_out = np.zeros_like(activations[-1])
        grad_out[rows, actions] = 2.0 * error / x.shape[0]
        grad_weights: list[np.ndarray] = [np.empty(0)] * self.LAYERS
        grad_biases: list[np.ndarray] = [np.empty(0)] * self.LAYERS
        grad = grad_out
        for layer in reversed(range(self.LAYERS)):
            grad_weights[layer] = activations[layer].T @ grad
            grad_biases[layer] = grad.sum(axis=0)
            if layer > 0:
                grad = (grad @ self.weights[layer].T) * (activations[layer] > 0)
        self.optimizer.step(self.parameters, [*grad_weights, *grad_biases])
        return float(np.mean(error * error))

    def copy_from(self, other: QNetwork) -> None:
        """Take ``other``'s parameters (the periodic copy into the target network)."""
        for mine, theirs in zip(self.parameters, other.parameters):
            mine[...] = theirs

    def clone(self) -> QNetwork:
        twin = QNetwork.__new__(QNetwork)
        twin.inputs = self.inputs
        twin.weights = [w.copy() for w in self.weights]
        twin.biases = [b.copy() for b in self.biases]
        twin.optimizer = AdaDelta([p.shape for p in twin.parameters], self.optimizer.rho,
                                  self.optimizer.eps)
        return twin
