"""Evaluation reports: a markdown page with the metrics and two plots — predicted vs measured score for a
few tasks, and the top-k curve (score@k for k = 1..20) of the model beside PSA's and random's on the same
records — written beside each other in one folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from costlab.common import jsontext
from costlab.common.errors import UsageError
from costlab.common.files import write_atomically
from costlab.costmodels import metrics

KS = range(1, 21)  # the top-k curve's k


def _plots(result: dict, out: Path, curves: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = result["_arrays"]
    task, pred, score = a["task"], a["pred"], a["score"]
    files = []
    tasks = [t for t in np.unique(task) if np.count_nonzero(task == t) >= 2][:6]
    if tasks:
        cols = min(3, len(tasks))
        rows = (len(tasks) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.4 * rows), squeeze=False)
        for ax, t in zip(axes.flat, tasks):
            m = task == t
            ax.scatter(pred[m], score[m], s=8, alpha=0.6)
            ax.set_title(f"task {t} ({np.count_nonzero(m)} programs)", fontsize=9)
            ax.set_xlabel("predicted score")
            ax.set_ylabel("measured best / latency")
        for ax in list(axes.flat)[len(tasks):]:
            ax.axis("off")
        fig.tight_layout()
        fig.savefig(out / "predicted_vs_measured.png", dpi=90)
        plt.close(fig)
        files.append("predicted_vs_measured.png")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for name, curve in curves.items():
        ax.plot(list(KS), curve, marker="o", ms=3, label=name)
    ax.legend(fontsize=8)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("k (programs measured)")
    ax.set_ylabel("mean top-k score over tasks")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "topk_curve.png", dpi=90)
    plt.close(fig)
    files.append("topk_curve.png")
    return files


def topk_curves(result: dict, ks=None) -> dict[str, list[float]]:
    """Mean top-k score over tasks for k in ``ks``: the model's, and PSA's and random's on the same records
    when ``evaluate(..., baselines=True)`` scored them (random: the mean over its draws)."""
    ks = KS if ks is None else ks
    a = result["_arrays"]
    preds = {"model": [a["pred"]], **a.get("baselines", {})}
    return {name: [float(np.mean([np.mean(list(metrics.topk_scores(a["task"], p, a["latency"], k).values())
                                          or [np.nan]) for p in draws])) for k in ks]
            for name, draws in preds.items()}


TAIL_KEYS = ("pairwise_q25", "top1_q25", "pairwise_q10", "top1_q10", "pick1", "pick8", "pick32")
TAIL_NOTES = {"pairwise_q25": " (within each task's best quarter)", "top1_q25": " (within each task's best quarter)",
              "pairwise_q10": " (within each task's best tenth)", "top1_q10": " (within each task's best tenth)",
              "pick1": " (best of the model's 1 pick / task's best)", "pick8": " (best of its 8 picks)",
              "pick32": " (best of its 32 picks)"}


def write_report(result: dict, out) -> Path:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory (the report is a directory of files)")
    out.mkdir(parents=True, exist_ok=True)
    plain = {k: v for k, v in result.items() if not k.startswith("_")}
    write_atomically(out / "metrics.json", jsontext.dumps(plain, indent=2).encode())
    lines = [f"# Evaluation of `{result['model']}`", "",
             f"Dataset `{result['data']}`, platform `{result['platform']}`, split `{result['split']}` "
             f"({result['part']}), {result['records']} records, {len(result['tasks'])} tasks.", "",
             "| metric | value |", "| --- | --- |"]
    over = f" (mean over {result['topk_over']})" if result.get("topk_over") else ""
    for k in ("top1", "top5", "pairwise", "ndcg", *TAIL_KEYS):
        if k in result:
            lines.append(f"| {k}{TAIL_NOTES.get(k, over if k in ('top1', 'top5') else '')} | {result[k]:.4f} |")
    curves = topk_curves(result)  # k = 1..20: the plot's, whose first and fifth the table prints
    if len(curves) > 1:
        lines += ["", "## Beside the baselines (same records, mean top-k over tasks)", "",
                  "| scorer | top-1 | top-5 |", "| --- | --- | --- |"]
        for name, curve in curves.items():
            lines.append(f"| {name} | {curve[0]:.4f} | {curve[4]:.4f} |")
    if result["networks"]:
        title = "Held-out networks" if result.get("topk_over") == "held-out networks" else "Networks"
        lines += ["", f"## {title} (weighted top-k)", "", "| network | top-1 | top-5 |", "| --- | --- | --- |"]
        for n, v in sorted(result["networks"].items()):
            lines.append(f"| {n} | {v['top1']:.4f} | {v['top5']:.4f} |")
    lines += ["", "## Per task", "", "| task | top-1 | top-5 |", "| --- | --- | --- |"]
    for t, v in sorted(result["tasks"].items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {t} | {v['top1']:.4f} | {v['top5']:.4f} |")
    for f in _plots(result, out, curves):
        lines += ["", f"![{f}]({f})"]
    path = out / "report.md"
    write_atomically(path, ("\n".join(lines) + "\n").encode())
    return path
