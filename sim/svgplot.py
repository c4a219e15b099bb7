"""A small SVG chart renderer for report.html: scatter, lines, stacked and grouped bars with error bars.

Pure functions from data to an SVG string: no JavaScript, no network, no dependency. Every mark carries
an SVG <title>, which browsers show as a hover label (a point's layout and figures, a bar's op and
milliseconds). Axes are linear (or log10 for the x of a scatter), ticks at 1-2-5 steps.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

W, H = 760, 380  # px of one chart
LEFT, RIGHT, TOP, BOTTOM = 72, 190, 34, 64  # margins (px): the legend sits right of the plot
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d")


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """About `n` round tick values (steps of 1, 2 or 5 x 10^k) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int(math.ceil((hi - start) / step)) + 1)]


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1e4:
        return f"{v:,.0f}"
    if a >= 10 or v == int(v):
        return f"{v:g}" if a < 1e4 else f"{v:,.0f}"
    return f"{v:.3g}"


@dataclass
class Frame:
    """Pixel mapping of one chart's plot area."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    log_x: bool = False
    parts: list[str] = field(default_factory=list)

    def px(self, x: float) -> float:
        lo, hi, v = self.x_lo, self.x_hi, x
        if self.log_x:
            lo, hi, v = math.log10(lo), math.log10(hi), math.log10(max(x, 1e-300))
        return LEFT + (v - lo) / (hi - lo) * (W - LEFT - RIGHT)

    def py(self, y: float) -> float:
        return H - BOTTOM - (y - self.y_lo) / (self.y_hi - self.y_lo) * (H - TOP - BOTTOM)


def _axes(f: Frame, title: str, xlabel: str, ylabel: str, xticks: list | None = None) -> None:
    p = f.parts
    p.append(f'<text x="{W / 2:.0f}" y="18" text-anchor="middle" font-size="13" font-weight="bold">{esc(title)}</text>')
    p.append(f'<rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{H - TOP - BOTTOM}" fill="none" '
             'stroke="#999"/>')
    for y in nice_ticks(f.y_lo, f.y_hi):
        if f.y_lo <= y <= f.y_hi:
            yy = f.py(y)
            p.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>'
                     f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end" font-size="11">{_fmt(y)}</text>')
    if xticks is None:
        if f.log_x:
            xticks = [10.0 ** k for k in range(math.floor(math.log10(f.x_lo)), math.ceil(math.log10(f.x_hi)) + 1)]
        else:
            xticks = nice_ticks(f.x_lo, f.x_hi)
        for x in xticks:
            if f.x_lo <= x <= f.x_hi:
                xx = f.px(x)
                p.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#f2f2f2"/>'
                         f'<text x="{xx:.1f}" y="{H - BOTTOM + 16}" text-anchor="middle" font-size="11">'
                         f'{_fmt(x)}</text>')
    p.append(f'<text x="{(LEFT + W - RIGHT) / 2:.0f}" y="{H - 12}" text-anchor="middle" font-size="12">'
             f'{esc(xlabel)}</text>')
    p.append(f'<text transform="translate(16 {(TOP + H - BOTTOM) / 2:.0f}) rotate(-90)" text-anchor="middle" '
             f'font-size="12">{esc(ylabel)}</text>')


def _legend(f: Frame, items: list[tuple[str, str, str]]) -> None:
    """Legend entries (label, colour, marker kind: 'dot', 'line', 'box', 'star', 'x') right of the plot."""
    x0, y = W - RIGHT + 12, TOP + 8
    for label, colour, kind in items:
        f.parts.append(_marker(kind, x0 + 6, y, colour, 5) + f'<text x="{x0 + 16}" y="{y + 4}" font-size="11">'
                       f'{esc(label)}</text>')
        y += 17


def _marker(kind: str, x: float, y: float, colour: str, r: float, title: str = "") -> str:
    t = f"<title>{esc(title)}</title>" if title else ""
    if kind == "line":
        return f'<line x1="{x - 7}" x2="{x + 7}" y1="{y}" y2="{y}" stroke="{colour}" stroke-width="2">{t}</line>'
    if kind == "box":
        return f'<rect x="{x - 5}" y="{y - 5}" width="10" height="10" fill="{colour}">{t}</rect>'
    if kind == "x":
        return (f'<path d="M{x - r},{y - r}L{x + r},{y + r}M{x - r},{y + r}L{x + r},{y - r}" stroke="{colour}" '
                f'stroke-width="2">{t}</path>')
    if kind == "star":
        pts = " ".join(f"{x + (r if i % 2 == 0 else r / 2.2) * math.sin(i * math.pi / 5):.1f},"
                       f"{y - (r if i % 2 == 0 else r / 2.2) * math.cos(i * math.pi / 5):.1f}" for i in range(10))
        return f'<polygon points="{pts}" fill="{colour}" stroke="#000" stroke-width="0.8">{t}</polygon>'
    if kind == "ring":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="none" stroke="{colour}">{t}</circle>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{colour}">{t}</circle>'


def _svg(f: Frame, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="{esc(label)}" '
            f'width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">' + "".join(f.parts) + "</svg>")


def _span(values: list[float], pad: float = 0.05, zero: bool = False) -> tuple[float, float]:
    vals = [v for v in values if math.isfinite(v)] or [0.0, 1.0]
    lo, hi = min(vals + ([0.0] if zero else [])), max(vals + ([0.0] if zero else []))
    d = (hi - lo) or abs(hi) or 1.0
    return lo - (0 if zero and lo >= 0 else pad * d), hi + pad * d


@dataclass(frozen=True)
class Series:
    """Points (x, y, hover label) drawn one way; `line` joins them in order."""

    name: str
    points: list[tuple[float, float, str]]
    colour: str
    marker: str = "dot"  # dot, ring, x, star, none
    size: float = 4.0
    line: bool = False


def scatter(title: str, xlabel: str, ylabel: str, series: list[Series], log_x: bool = False,
            vline: tuple[float, str] | None = None) -> str:
    """Points and lines with a hover label each; `vline`: (x, label) a dashed vertical guide."""
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] for s in series for p in s.points]
    if log_x:
        pos = [x for x in xs if x > 0] or [1.0]
        x_lo, x_hi = min(pos) / 1.3, max(pos) * 1.3
    else:
        x_lo, x_hi = _span(xs)
    f = Frame(x_lo, x_hi, *_span(ys, zero=True), log_x=log_x)
    _axes(f, title, xlabel, ylabel)
    if vline and f.x_lo < vline[0] < f.x_hi:
        xx = f.px(vline[0])
        f.parts.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#888" '
                       f'stroke-dasharray="5,4"><title>{esc(vline[1])}</title></line>')
    for s in series:
        pts = [(f.px(x), f.py(y), t) for x, y, t in s.points if math.isfinite(x) and math.isfinite(y)
               and (x > 0 or not log_x)]
        if s.line and len(pts) > 1:
            d = "M" + "L".join(f"{x:.1f},{y:.1f}" for x, y, _ in pts)
            f.parts.append(f'<path d="{d}" fill="none" stroke="{s.colour}" stroke-width="1.6" opacity="0.8">'
                           f'<title>{esc(s.name)}</title></path>')
        if s.marker != "none":
            f.parts.append('<g class="marks">' + "".join(_marker(s.marker, x, y, s.colour, s.size, t)
                                                         for x, y, t in pts) + "</g>")
    _legend(f, [(s.name, s.colour, s.marker if s.marker != "none" else "line") for s in series]
            + ([(vline[1], "#888", "line")] if vline else []))
    return _svg(f, title)


def bars(title: str, ylabel: str, categories: list[str], series: list[tuple[str, list[float]]],
         stacked: bool = True, errors: list[list[float]] | None = None, unit: str = "",
         notes: list[str] | None = None) -> str:
    """Bars per category, one colour per series: stacked (a step's ops) or grouped (what-if deltas, with
    `errors` [series][category] drawn as error bars). Category labels wrap under the axis, never overlap:
    each takes its own slot and breaks at ', '. `notes` [category] prints above a category's bars."""
    n, k = len(categories), max(len(series), 1)
    if stacked:
        tops = [sum(max(v[i], 0.0) for _, v in series) for i in range(n)]
        lows = [sum(min(v[i], 0.0) for _, v in series) for i in range(n)]
        vals = tops + lows
    else:
        vals = [v[i] + s * (errors[j][i] if errors else 0.0) for j, (_, v) in enumerate(series)
                for i in range(n) for s in (-1, 1) if math.isfinite(v[i])]
    f = Frame(0.0, float(n), *_span(vals, zero=True))
    slot = (W - LEFT - RIGHT) / max(n, 1)
    _axes(f, title, "", ylabel, xticks=[])
    f.parts.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{f.py(0):.1f}" y2="{f.py(0):.1f}" stroke="#333"/>')
    for i, cat in enumerate(categories):
        x0 = LEFT + i * slot
        lines = _wrap(cat, max(6, int(slot / 6.5)))
        f.parts.append("".join(f'<text x="{x0 + slot / 2:.1f}" y="{H - BOTTOM + 14 + 12 * j}" text-anchor="middle" '
                               f'font-size="10">{esc(line)}</text>' for j, line in enumerate(lines[:3])))
        up = down = 0.0
        for j, (name, v) in enumerate(series):
            val = v[i]
            if not math.isfinite(val):
                continue
            colour = PALETTE[j % len(PALETTE)]
            label = f"{cat}: {name} {val:,.4g}{unit}"
            if stacked:
                base = up if val >= 0 else down
                y0, y1 = f.py(base), f.py(base + val)
                up, down = (up + val, down) if val >= 0 else (up, down + val)
                bx, bw = x0 + 0.2 * slot, 0.6 * slot
            else:
                bw = 0.8 * slot / k
                bx = x0 + 0.1 * slot + j * bw
                y0, y1 = f.py(0.0), f.py(val)
                if errors:
                    label += f" +- {errors[j][i]:,.3g}{unit}"
            f.parts.append(f'<rect x="{bx:.1f}" y="{min(y0, y1):.1f}" width="{bw:.1f}" height="{abs(y1 - y0):.1f}" '
                           f'fill="{colour}"><title>{esc(label)}</title></rect>')
            if errors and not stacked and math.isfinite(errors[j][i]) and errors[j][i] > 0:
                cx, lo, hi = bx + bw / 2, f.py(val - errors[j][i]), f.py(val + errors[j][i])
                f.parts.append(f'<path d="M{cx:.1f},{lo:.1f}V{hi:.1f}M{cx - 3:.1f},{lo:.1f}h6M{cx - 3:.1f},{hi:.1f}h6" '
                               f'stroke="#000" stroke-width="1"/>')
        if notes and notes[i]:
            f.parts.append(f'<text x="{x0 + slot / 2:.1f}" y="{TOP + 14}" text-anchor="middle" font-size="10" '
                           f'fill="#c00">{esc(notes[i])}</text>')
    _legend(f, [(name, PALETTE[j % len(PALETTE)], "box") for j, (name, _) in enumerate(series)])
    return _svg(f, title)


def _wrap(text: str, width: int) -> list[str]:
    """Lines of at most about `width` characters, broken at ', ' and spaces."""
    words, lines, cur = text.replace(", ", ",  ").split(" "), [], ""
    for w in (w for w in words if w):
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    return lines + ([cur] if cur else [])
