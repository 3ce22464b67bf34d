"""1957, Rosenblatt's perceptron: one neuron learns to separate two clouds of points.

Rosenblatt's rule nudges the weights towards every point the neuron gets wrong and leaves
the others alone. That rule is exactly gradient descent on the "perceptron criterion"
    loss = mean(relu(-y * (w . x + b)))      with labels y in {-1, +1}
since the gradient is -y * x for a misclassified point and 0 otherwise. So we write the
loss with your Tensor ops, call your backward(), and step with your SGD. On linearly
separable data the perceptron convergence theorem promises 100% accuracy in finitely many
updates.
"""

import sys

import numpy as np

from _common import Timer, console, need_tinytorch, parser, report_verdict


def make_data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0).astype(np.float32)
    centers = np.stack([y * 2.0, y * 1.5], axis=1)  # two clouds on either side of a line
    x = (centers + rng.standard_normal((n, 2)) * 0.7).astype(np.float32)
    return x, y


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()
    tt = need_tinytorch()
    from tinytorch.nn import Linear, relu
    from tinytorch.optim import SGD

    tt.manual_seed(args.seed)
    x, y = make_data(60 if args.quick else 400, args.seed)
    neuron = Linear(2, 1)
    optimizer = SGD(neuron.parameters(), lr=0.5)
    xs, ys = tt.Tensor(x), tt.Tensor(y.reshape(-1, 1))
    epochs = 30 if args.quick else 200
    with Timer() as timer:
        for epoch in range(1, epochs + 1):  # noqa: B007 (printed after the loop)
            scores = neuron(xs)
            loss = relu(-(ys * scores)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            acc = float((np.sign(neuron(xs).data) == ys.data).mean())
            if acc == 1.0:
                break
    w, b = neuron.weight.data.ravel(), neuron.bias.data.item()
    console.print(f"epochs: {epoch}, accuracy: {acc:.1%}, time: {timer.seconds:.2f} s")
    console.print(f"decision line: {w[0]:+.3f}*x1 {w[1]:+.3f}*x2 {b:+.3f} = 0")
    status = report_verdict(acc == 1.0,
                            "100% accuracy: the classes are separated by one straight line.",
                            "The perceptron did not separate the data.")
    return 0 if args.quick else status


if __name__ == "__main__":
    sys.exit(main())
