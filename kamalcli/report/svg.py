"""Small static charts as inline SVG text: no plotting library, no script, no network.

Each function returns one `<svg>` element. Output is a pure function of the
input (fixed number formatting, no timestamps or random ids), so a report is
reproducible and diffable. Series colours are solid fills (no transparency),
which is also what the screenshot test looks for.
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

# The series colours (Tableau 10); tests look for them in a rendered screenshot.
IN_DOMAIN = "#1f77b4"
OUT_DOMAIN = "#ff7f0e"
PLAIN = "#4e79a7"
MC = "#59a14f"
TRAIN = "#4e79a7"
HELD_OUT = "#e15759"
BAR = "#76b7b2"
GRID = "#e3e3e3"
INK = "#333333"
MUTED = "#777777"

FONT = 'font-family="system-ui, sans-serif" font-size="10"'


def _n(x: float) -> str:
    """Coordinates with at most one decimal: small files, stable text."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, s: str, *, anchor: str = "start", fill: str = INK, size: int | None = None,
          weight: str | None = None, rotate: float | None = None) -> str:
    extra = (f' font-size="{size}"' if size else "") + (f' font-weight="{weight}"' if weight else "")
    if rotate is not None:
        extra += f' transform="rotate({_n(rotate)} {_n(x)} {_n(y)})"'
    return f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}" fill="{fill}"{extra}>{escape(s)}</text>'


def _rect(x: float, y: float, w: float, h: float, fill: str, title: str | None = None) -> str:
    tip = f"<title>{escape(title)}</title>" if title else ""
    end = f">{tip}</rect>" if tip else "/>"
    return f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(max(w, 0))}" height="{_n(max(h, 0))}" fill="{fill}"{end}'


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, *, width: float = 1, dash: str | None = None) -> str:
    d = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" stroke="{stroke}" stroke-width="{_n(width)}"{d}/>'


def _svg(width: float, height: float, body: list[str], label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" height="{_n(height)}" '
            f'viewBox="0 0 {_n(width)} {_n(height)}" role="img" aria-label="{escape(label)}" {FONT}>'
            + "".join(body) + "</svg>")


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values inside [lo, hi], 1, 2 or 5 times a power of ten apart, about `count` of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= 0.75 * raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """As many decimals as the spacing of the ticks needs, so neighbours never read the same."""
    if len(ticks) < 2:
        return [f"{t:.4g}" for t in ticks]
    step = min(abs(b - a) for a, b in zip(ticks, ticks[1:])) or 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return [f"{t:.{decimals}f}" for t in ticks]


class _Frame:
    """A plotting area inside a chart: data -> pixel coordinates, axes and grid."""

    def __init__(self, left: float, top: float, width: float, height: float,
                 x: tuple[float, float], y: tuple[float, float]):
        self.left, self.top, self.width, self.height = left, top, width, height
        self.x0, self.x1 = x
        self.y0, self.y1 = y if y[1] > y[0] else (y[0], y[0] + 1)
        if self.x1 <= self.x0:
            self.x1 = self.x0 + 1

    def px(self, x: float) -> float:
        return self.left + (x - self.x0) / (self.x1 - self.x0) * self.width

    def py(self, y: float) -> float:
        return self.top + self.height - (y - self.y0) / (self.y1 - self.y0) * self.height

    def axes(self, xticks: Sequence[float], yticks: Sequence[float], xlabel: str = "", ylabel: str = "") -> list[str]:
        out = []
        bottom = self.top + self.height
        for t, label in zip(yticks, tick_labels(yticks)):
            y = self.py(t)
            out.append(_line(self.left, y, self.left + self.width, y, GRID))
            out.append(_text(self.left - 3, y + 3, label, anchor="end", fill=MUTED))
        for t, label in zip(xticks, tick_labels(xticks)):
            x = self.px(t)
            out.append(_line(x, bottom, x, bottom + 3, MUTED))
            out.append(_text(x, bottom + 13, label, anchor="middle", fill=MUTED))
        out.append(_line(self.left, bottom, self.left + self.width, bottom, MUTED))
        out.append(_line(self.left, self.top, self.left, bottom, MUTED))
        if xlabel:
            out.append(_text(self.left + self.width / 2, bottom + 25, xlabel, anchor="middle", fill=MUTED))
        if ylabel:
            out.append(_text(10, self.top + self.height / 2, ylabel, anchor="middle", fill=MUTED, rotate=-90))
        return out


def _legend(x: float, y: float, items: Sequence[tuple[str, str]]) -> list[str]:
    out = []
    for name, colour in items:
        out.append(_rect(x, y - 7, 8, 8, colour))
        out.append(_text(x + 11, y, name))
        x += 16 + 5.5 * len(name)
    return out


def histogram(values: Sequence[float], lo: float, hi: float, bins: int) -> list[float]:
    """The share of `values` in each of `bins` equal-width bins over [lo, hi] (the last bin closed)."""
    counts = [0] * bins
    width = (hi - lo) / bins if hi > lo else 1.0
    for v in values:
        counts[min(bins - 1, max(0, int((v - lo) / width)))] += 1
    total = len(values)
    return [c / total if total else 0.0 for c in counts]


def distribution_chart(inside: Sequence[float], outside: Sequence[float], *, title: str, note: str,
                       bins: int = 20, width: float = 250, height: float = 170) -> str:
    """MUKI's Figure 2: one score's distribution on in-domain rows (up) and out-of-domain rows (down)."""
    values = list(inside) + list(outside)
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    shares_in, shares_out = histogram(inside, lo, hi, bins), histogram(outside, lo, hi, bins)
    top = max(shares_in + shares_out + [1e-9])
    frame = _Frame(34, 30, width - 44, height - 62, (lo, hi), (-top, top))
    body = [_text(4, 12, title, weight="600", size=11), _text(width - 4, 12, note, anchor="end", weight="600")]
    body += frame.axes(nice_ticks(lo, hi, 4), [], xlabel="")
    mid = frame.py(0)
    step = frame.width / bins
    for i, (a, b) in enumerate(zip(shares_in, shares_out)):
        x = frame.left + i * step + 0.5
        if a:
            body.append(_rect(x, frame.py(a), step - 1, mid - frame.py(a), IN_DOMAIN, f"in domain: {a:.1%}"))
        if b:
            body.append(_rect(x, mid, step - 1, frame.py(-b) - mid, OUT_DOMAIN, f"out of domain: {b:.1%}"))
    body.append(_line(frame.left, mid, frame.left + frame.width, mid, INK))
    body.append(_text(frame.left - 3, frame.top + 8, "in", anchor="end", fill=IN_DOMAIN))
    body.append(_text(frame.left - 3, frame.top + frame.height, "out", anchor="end", fill=OUT_DOMAIN))
    body += _legend(frame.left, height - 4, [(f"in domain ({len(inside)})", IN_DOMAIN),
                                             (f"out of domain ({len(outside)})", OUT_DOMAIN)])
    return _svg(width, height, body, f"{title}: {note}")


def reliability_chart(bin_confidence: Sequence[float | None], bin_accuracy: Sequence[float | None],
                      bin_counts: Sequence[int], *, title: str, note: str, colour: str,
                      width: float = 200, height: float = 190) -> str:
    """Accuracy per confidence bin against the diagonal of perfect calibration (empty bins left out)."""
    bins = len(bin_counts)
    frame = _Frame(34, 22, width - 44, height - 56, (0, 1), (0, 1))
    body = [_text(4, 12, title, weight="600", size=11), _text(width - 4, 12, note, anchor="end", weight="600")]
    body += frame.axes([0, 0.5, 1], [0, 0.5, 1], xlabel="confidence")
    step = frame.width / bins
    for i, (conf, acc, n) in enumerate(zip(bin_confidence, bin_accuracy, bin_counts)):
        if not n or acc is None:
            continue
        x = frame.left + i * step + 0.5
        body.append(_rect(x, frame.py(acc), step - 1, frame.py(0) - frame.py(acc), colour,
                          f"confidence {conf:.2f}: accuracy {acc:.2f} ({n} rows)"))
    body.append(_line(frame.px(0), frame.py(0), frame.px(1), frame.py(1), INK, dash="3 2"))
    body.append(_text(10, frame.top + frame.height / 2, "accuracy", anchor="middle", fill=MUTED, rotate=-90))
    return _svg(width, height, body, f"{title}: {note}")


def _polyline(points: Sequence[tuple[float, float]], colour: str, width: float = 1.5) -> str:
    coords = " ".join(f"{_n(x)},{_n(y)}" for x, y in points)
    return f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="{_n(width)}"/>'


def thin(points: Sequence[tuple[float, float]], most: int) -> tuple[list[tuple[float, float]], int]:
    """At most `most` points: means of consecutive groups of equal size. Returns (points, group size)."""
    points = list(points)
    group = max(1, math.ceil(len(points) / most))
    if group == 1:
        return points, 1
    out = []
    for i in range(0, len(points), group):
        chunk = points[i:i + group]
        out.append((chunk[-1][0], sum(p[1] for p in chunk) / len(chunk)))
    return out, group


def loss_chart(train: Sequence[tuple[float, float]], held_out: Sequence[tuple[float, float]], *,
               best_step: float | None, held_out_name: str, title: str,
               width: float = 420, height: float = 200, most_points: int = 300) -> str:
    """Training loss per step (a line) and the held-out selection metric (dots), the kept step marked."""
    shown, group = thin(train, most_points)
    xs = [p[0] for p in shown] + [p[0] for p in held_out] + [0]
    ys = [p[1] for p in shown] + [p[1] for p in held_out]
    y_lo, y_hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    pad = (y_hi - y_lo) * 0.05 or 0.5
    frame = _Frame(44, 22, width - 56, height - 66, (0, max(xs)), (max(0.0, y_lo - pad), y_hi + pad))
    body = [_text(4, 12, title, weight="600", size=11)]
    body += frame.axes(nice_ticks(0, max(xs), 6), nice_ticks(frame.y0, frame.y1, 5), xlabel="step")
    if best_step is not None:
        x = frame.px(best_step)
        body.append(_line(x, frame.top, x, frame.top + frame.height, MUTED, dash="2 2"))
        right_half = x > frame.left + frame.width / 2
        body.append(_text(x - 3 if right_half else x + 3, frame.top + 8, f"kept step {int(best_step)}", fill=MUTED,
                          anchor="end" if right_half else "start"))
    if shown:
        body.append(_polyline([(frame.px(x), frame.py(y)) for x, y in shown], TRAIN))
    if held_out:
        pts = [(frame.px(x), frame.py(y)) for x, y in held_out]
        if len(pts) > 1:
            body.append(_polyline(pts, HELD_OUT, 1))
        body += [f'<circle cx="{_n(x)}" cy="{_n(y)}" r="3" fill="{HELD_OUT}"><title>step {int(s)}: {v:.4g}</title></circle>'
                 for (x, y), (s, v) in zip(pts, held_out)]
    per_point = f", mean of {group} steps a point" if group > 1 else ""
    items = ([(f"training loss per step{per_point}", TRAIN)] if shown else []) + \
            ([(held_out_name, HELD_OUT)] if held_out else [])
    body += _legend(frame.left, height - 4, items)
    return _svg(width, height, body, title)


def _blend(share: float) -> str:
    """White to IN_DOMAIN blue."""
    r, g, b = (int(IN_DOMAIN[i:i + 2], 16) for i in (1, 3, 5))
    mix = [round(255 + (c - 255) * share) for c in (r, g, b)]
    return "#" + "".join(f"{c:02x}" for c in mix)


def confusion_chart(matrix: Sequence[Sequence[int]], labels: Sequence[str], *, title: str) -> str:
    """Rows: gold label; columns: predicted. Shade = the share of the gold row; counts written in."""
    k = len(labels)
    cell = max(14.0, min(30.0, 320.0 / max(k, 1)))
    margin = 8 + 6 * min(max((len(s) for s in labels), default=1), 16)
    caption = "predicted (columns) · gold (rows)"
    top = 22 + margin * 0.87  # the column labels, turned 60 degrees
    width = max(margin + cell * k + 0.5 * margin, 5.5 * len(caption) + 10)
    height = top + cell * k + 22
    body = [_text(4, 12, title, weight="600", size=11)]
    for i, row in enumerate(matrix):
        total = sum(row)
        for j, count in enumerate(row):
            share = count / total if total else 0.0
            x, y = margin + j * cell, top + i * cell
            body.append(_rect(x, y, cell - 1, cell - 1, _blend(share),
                              f"gold {labels[i]}, predicted {labels[j]}: {count}"))
            if count and cell >= 18:
                body.append(_text(x + cell / 2 - 0.5, y + cell / 2 + 3, str(count), anchor="middle",
                                  fill="#ffffff" if share > 0.5 else INK, size=9))
    for i, name in enumerate(labels):
        short = name if len(name) <= 16 else name[:15] + "…"
        body.append(_text(margin - 4, top + i * cell + cell / 2 + 3, short, anchor="end"))
        body.append(_text(margin + i * cell + cell / 2 + 3, top - 4, short, rotate=-60))
    body.append(_text(4, top + cell * k + 14, caption, fill=MUTED))
    return _svg(width, height, body, title)


def bar_chart(values: Sequence[tuple[str, float]], *, title: str, width: float = 300) -> str:
    """Horizontal bars in [0, 1] with their value written as a percentage (per-class F1)."""
    row = 15.0
    margin = 8 + 6 * min(max((len(s) for s, _ in values), default=1), 16)
    height = 26 + row * len(values) + 18
    frame = _Frame(margin, 22, width - margin - 40, row * len(values), (0, 1), (0, 1))
    body = [_text(4, 12, title, weight="600", size=11)]
    body += frame.axes([0, 0.5, 1], [])
    for i, (name, v) in enumerate(values):
        y = frame.top + i * row
        short = name if len(name) <= 16 else name[:15] + "…"
        body.append(_text(margin - 4, y + row / 2 + 3, short, anchor="end"))
        body.append(_rect(margin, y + 2, frame.px(v) - margin, row - 4, BAR, f"{name}: {v:.1%}"))
        body.append(_text(frame.px(v) + 3, y + row / 2 + 3, f"{100 * v:.1f}", fill=MUTED))
    return _svg(width, height, body, title)
