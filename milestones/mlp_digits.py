"""1986, backpropagation: a multi-layer perceptron reads handwritten digits.

Rumelhart, Hinton and Williams showed that backpropagation trains hidden layers that learn
their own features. Here an MLP (64 -> 128 -> 64 -> 10, ReLU) learns the 8x8 UCI digits
with your Linear, ReLU, cross-entropy, autograd, Adam, DataLoader and training loop,
and is scored on a held-out 20% it never trains on. Target: at least 95% test accuracy.
"""

import sys

from _common import (
    Timer,
    console,
    curve_table,
    epoch_rows,
    need_tinytorch,
    parser,
    report_target,
    save_plot,
)
from tito.course.architectures import digits_mlp
from tito.course.datasets import load_digits

TARGET = 0.95


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--plot", metavar="PNG", help="save the training curve as a PNG")
    args = p.parse_args()
    tt = need_tinytorch()
    from tinytorch import accuracy, nn, train
    from tinytorch.data import DataLoader, TensorDataset
    from tinytorch.nn import cross_entropy
    from tinytorch.optim import Adam

    tt.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = load_digits(args.seed)
    console.print(f"digits: {len(x_train)} training and {len(x_test)} held-out test images, "
                  "64 pixels each")
    model = digits_mlp(nn)  # 64 -> 128 -> 64 -> 10
    optimizer = Adam(model.parameters(), lr=2e-3)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=32, shuffle=True,
                        seed=args.seed)
    test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=256)
    epochs = 2 if args.quick else args.epochs
    with Timer() as timer:
        history = train(model, cross_entropy, optimizer, loader, epochs=epochs,
                        eval_loader=test_loader, eval_every=len(loader), metric=accuracy,
                        progress=console)
    rows = epoch_rows(history, len(loader))
    console.print(curve_table("training curve", rows,
                              ["epoch", "train loss", "test loss", "test acc"]))
    model.eval()
    with tt.no_grad():
        train_acc = accuracy(model(tt.Tensor(x_train)), y_train)
    final = rows[-1]["test acc"]
    console.print(f"test accuracy {final:.2%} (train {train_acc:.2%}) after {epochs} epochs in "
                  f"{timer.seconds:.1f} s ({timer.seconds / epochs * 1e3:.0f} ms per epoch)")
    if args.plot:
        save_plot(args.plot, {"train loss": [r["train loss"] for r in rows],
                              "test loss": [r["test loss"] for r in rows],
                              "test accuracy": [r["test acc"] for r in rows]},
                  "epoch", "MLP on 8x8 digits")
    if args.quick:
        return 0
    return report_target(final, TARGET)


if __name__ == "__main__":
    sys.exit(main())
