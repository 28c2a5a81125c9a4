"""The figures of tools/report.py (matplotlib, Agg backend: no display needed). Each function
draws measured data it is given into one PNG; the caller decides whether there is data to draw
(no function is called with nothing to show)."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

CLASS_COLOURS = {"memory": "tab:blue", "balanced": "tab:orange", "compute": "tab:red",
                 None: "tab:gray"}
DPI = 110


def _save(fig, path):
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def _short(text, width=48):
    return text if len(text) <= width else text[:width - 1] + "…"


# ---- speed-ups -------------------------------------------------------------------------------


def speedup_bars(title, items, path):
    """items: [(case, peer, ratio)], ratio = peer time / braidinfer time. One group of horizontal
    bars per case (cases top to bottom in the given order), a colour per peer, a line at 1."""
    cases, peers = [], []
    for case, peer, _ in items:
        if case not in cases:
            cases.append(case)
        if peer not in peers:
            peers.append(peer)
    colours = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(peers)}
    y, ticks, ticklabels, separators = 0.0, [], [], []
    bars = []  # (y, ratio, peer)
    for case in cases:
        group = [(p, r) for c, p, r in items if c == case]
        start = y
        for peer, ratio in group:
            bars.append((y, ratio, peer))
            y += 1
        ticks.append((start + y - 1) / 2)
        ticklabels.append(_short(case))
        separators.append(y - 0.5 + 0.25)
        y += 0.5
    ratios = [r for _, r, _ in bars]
    log = max(ratios + [1.0]) / min(ratios + [1.0]) > 20
    # On a log axis the bars start at the left edge (log 0 does not exist), else at 0.
    left = min(ratios + [1.0]) / 1.6 if log else 0.0
    fig, ax = plt.subplots(figsize=(9, max(2.6, 0.32 * len(bars) + 0.3 * len(cases) + 1.2)))
    seen = set()
    for yy, ratio, peer in bars:
        ax.barh(yy, ratio - left, left=left, height=0.8, color=colours[peer],
                label=peer if peer not in seen else None)
        seen.add(peer)
        ax.text(ratio, yy, f" {ratio:.2f}x", va="center", ha="left", fontsize=7)
    for s in separators[:-1]:
        ax.axhline(s, color="0.85", linewidth=0.6)
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    if log:
        ax.set_xscale("log")
        ax.set_xlim(left, max(ratios) * 2.5)
        xticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200,
                              500, 1000) if left <= t <= max(ratios) * 2.5]
        ax.set_xticks(xticks)
        ax.set_xticklabels([f"{t:g}" for t in xticks])
        ax.minorticks_off()
    else:
        ax.set_xlim(0, max(max(ratios), 1.0) * 1.18)
    ax.set_yticks(ticks)
    ax.set_yticklabels(ticklabels, fontsize=8)
    ax.set_ylim(y - 0.75, -0.75)  # first case on top
    ax.set_xlabel("peer time / braidinfer time   (> 1: braidinfer faster; dashed line: equal)")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, title="peer",
              title_fontsize=8, frameon=False)
    ax.grid(axis="x", color="0.9", linewidth=0.6)
    ax.set_axisbelow(True)
    _save(fig, path)


# ---- roofline ----------------------------------------------------------------------------------


def _class_legend(ax, classes):
    for cls in ("memory", "balanced", "compute"):
        if cls in classes:
            ax.scatter([], [], color=CLASS_COLOURS[cls], label=f"{cls} bound")
    if None in classes:
        ax.scatter([], [], color=CLASS_COLOURS[None], label="class unknown (no ridge)")


def _annotate(ax, points, xkey, ykey):
    """When there are few enough points to tell apart: a number beside each and, right of the
    axes, the key from number to row."""
    if len(points) > 14:
        return
    for i, p in enumerate(points):
        ax.annotate(str(i + 1), (p[xkey], p[ykey]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    key = "\n".join(f"{i + 1}: {_short(p['label'], 44)}" for i, p in enumerate(points))
    ax.text(1.02, 0.0, key, transform=ax.transAxes, fontsize=7, va="bottom", ha="left",
            family="monospace")


def roofline_normalised(points, title, path):
    """points: {x: intensity / ridge, y: achieved / attainable, cls, fp8, label}."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for p in points:
        ax.scatter(p["x"], p["y"], color=CLASS_COLOURS.get(p["cls"], "tab:gray"),
                   marker="^" if p["fp8"] else "o", s=28, alpha=0.8, edgecolors="none")
    _class_legend(ax, {p["cls"] for p in points})
    if any(p["fp8"] for p in points):
        ax.scatter([], [], color="0.4", marker="^", label="fp8 (fp8 ridge and roof)")
    _annotate(ax, points, "x", "y")
    xs = [p["x"] for p in points]
    lo, hi = min(xs + [0.25]) / 2, max(xs + [4.0]) * 2
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(0, max(1.15, max(p["y"] for p in points) * 1.1))
    ax.axhline(1.0, color="black", linewidth=1)
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    for b in (0.5, 2.0):
        ax.axvline(b, color="0.6", linestyle=":", linewidth=0.8)
    ax.text(1.0, 0.01, " ridge", fontsize=7, transform=ax.get_xaxis_transform(), va="bottom")
    ax.set_xlabel("arithmetic intensity / ridge point   (dotted: memory < 0.5, compute > 2)")
    ax.set_ylabel("achieved / attainable TFLOP/s")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    ax.grid(color="0.92", linewidth=0.6)
    ax.set_axisbelow(True)
    _save(fig, path)


def roofline_physical(points, ceilings, title, path):
    """points: {intensity (FLOP/byte), tflops, cls, fp8, label}; ceilings: copy_gbps,
    gemm_tflops, fp8_gemm_tflops (None where not measured). Roofs drawn from the measured
    ceilings only."""
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [p["intensity"] for p in points]
    ys = [p["tflops"] for p in points]
    copy = ceilings.get("copy_gbps")
    peaks = [(ceilings.get("gemm_tflops"), "bf16 GEMM", "-"),
             (ceilings.get("fp8_gemm_tflops"), "fp8 GEMM", "--")]
    ridges = [peak * 1e3 / copy for peak, _, _ in peaks if peak and copy]
    lo = min(xs + ridges) / 4
    hi = max(xs + ridges) * 4
    if hi / lo < 1e3:  # at least three decades, so the log axis has labelled ticks
        mid = math.sqrt(hi * lo)
        lo, hi = mid / 31.6, mid * 31.6
    measured_peaks = [p for p, _, _ in peaks if p]
    if copy:
        # The slope up to the highest measured compute roof (or past the points without one).
        x_end = max(measured_peaks) * 1e3 / copy if measured_peaks else hi
        ax.plot([lo, x_end], [lo * copy / 1e3, x_end * copy / 1e3], color="black", linewidth=1.2,
                linestyle=":", label=f"copy roof {copy:.0f} GB/s")
    for peak, name, style in peaks:
        if not peak:
            continue
        start = peak * 1e3 / copy if copy else lo
        ax.plot([start, hi], [peak, peak], color="black", linestyle=style, linewidth=1.2,
                label=f"{name} roof {peak:.0f} TFLOP/s")
    for p in points:
        ax.scatter(p["intensity"], p["tflops"], color=CLASS_COLOURS.get(p["cls"], "tab:gray"),
                   marker="^" if p["fp8"] else "o", s=28, alpha=0.8, edgecolors="none")
    _class_legend(ax, {p["cls"] for p in points})
    if any(p["fp8"] for p in points):
        ax.scatter([], [], color="0.4", marker="^", label="fp8 rows")
    _annotate(ax, points, "intensity", "tflops")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    peak_max = max(measured_peaks + ys)
    floor = min(ys + ([lo * copy / 1e3] if copy else []))
    ax.set_ylim(min(floor / 2, peak_max / 100), peak_max * 2.2)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right", fontsize=7, frameon=False)
    ax.grid(color="0.92", linewidth=0.6, which="both")
    ax.set_axisbelow(True)
    _save(fig, path)


# ---- histograms ------------------------------------------------------------------------------


def histogram(groups, xlabel, title, path, log=False):
    """groups: {label: [values]}, stacked, one colour per label."""
    labels = [k for k, v in groups.items() if v]
    values = [groups[k] for k in labels]
    flat = [v for vs in values for v in vs]
    fig, ax = plt.subplots(figsize=(8, 4))
    if log:
        lo, hi = min(flat), max(flat)
        lo, hi = (lo / 1.5, hi * 1.5) if lo == hi else (lo, hi)
        bins = [lo * (hi / lo) ** (i / 30) for i in range(31)]
        ax.set_xscale("log")
    else:
        lo, hi = min(flat), max(flat)
        bins = 25 if hi > lo else [lo - 0.5, lo + 0.5]
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    ax.hist(values, bins=bins, stacked=True, label=[_short(k, 64) for k in labels],
            color=[cmap(i % cmap.N) for i in range(len(labels))], edgecolor="white",
            linewidth=0.4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("rows")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=10)
    if len(labels) > 1:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7, frameon=False)
    ax.grid(axis="y", color="0.92", linewidth=0.6)
    ax.set_axisbelow(True)
    _save(fig, path)


def metric_histograms(panels, title, path):
    """panels: [(label, [values])], a grid of small histograms (ncu metrics, 0-100 %)."""
    n = len(panels)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False)
    for ax, (label, values) in zip(axes.flat, panels):
        ax.hist(values, bins=[i * 5 for i in range(21)], color="tab:blue", edgecolor="white",
                linewidth=0.4)
        ax.set_xlim(0, 100)
        ax.set_title(f"{label}  (n={len(values)})", fontsize=8)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
        ax.set_ylabel("kernels", fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _save(fig, path)


# ---- profile ---------------------------------------------------------------------------------


def share_bars(kernels, title, path):
    """kernels: [(label, share in [0, 1])], largest first, drawn top to bottom."""
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.3 * len(kernels) + 1)))
    labels = [_short(k, 60) for k, _ in kernels]
    shares = [100 * s for _, s in kernels]
    ax.barh(range(len(kernels)), shares, color="tab:blue")
    for i, s in enumerate(shares):
        ax.text(s, i, f" {s:.1f}%", va="center", fontsize=7)
    ax.set_yticks(range(len(kernels)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, max(max(shares) * 1.18, 1.0))
    ax.set_xlabel("share of GPU time (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", color="0.92", linewidth=0.6)
    ax.set_axisbelow(True)
    _save(fig, path)
