"""Learning curves of a run directory as a PNG (``parl plot``).

Example::

    png = plot_run(Path("runs/cartpole"))   # runs/cartpole/learning_curves.png
"""

from __future__ import annotations

from pathlib import Path

from parl.training.metrics_log import read_metrics_csv

__all__ = ["plot_run", "CURVES"]

CURVES = (
    ("train/return_mean", "training episodes (mean return per log row)"),
    ("eval/mean_return", "greedy evaluation (mean return)"),
)
"""(tag, label) of the curves drawn against env steps."""


def plot_run(run_dir: Path, out: Path | None = None) -> Path:
    """Draw the run's returns against env steps; return the PNG path.

    Raises FileNotFoundError when the run has no metrics.csv, ValueError when it holds none of the
    curves, and ImportError (with the pip command) when matplotlib is missing.
    """
    csv_path = run_dir / "metrics.csv"
    if not csv_path.exists():
        raise FileNotFoundError(f"{str(run_dir)!r} has no metrics.csv (is it a parl run directory?)")
    series = read_metrics_csv(csv_path)
    curves = [(tag, label, series[tag]) for tag, label in CURVES if series.get(tag)]
    if not curves:
        raise ValueError(f"{str(csv_path)!r} holds none of {[t for t, _ in CURVES]} yet")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("parl plot needs matplotlib: pip install 'parl-rl[plot]'") from exc
    out = out if out is not None else run_dir / "learning_curves.png"
    fig, ax = plt.subplots(figsize=(7, 4))
    for tag, label, points in curves:
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o" if tag.startswith("eval/") else None,
                label=label)  # fmt: skip
    ax.set_xlabel("env steps (all agents)")
    ax.set_ylabel("episode return")
    ax.set_title(run_dir.name)
    ax.legend(loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
