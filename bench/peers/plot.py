#!/usr/bin/env python3
"""p99 latency against offered load, one line per daemon, as a small standalone SVG.

Usage: plot.py SWEEP.tsv OUT.svg   (rows: name, offered/s, achieved/s, p50 ms, p99 ms;
written by bench/peers/run.sh). The y axis is logarithmic; a point whose achieved rate
fell more than 5% short of the offered one is drawn hollow (the daemon was saturated).
"""
import math
import sys

LABELS = {
    "sluiced": "sluiced (Redis)",
    "ratelimit": "envoyproxy/ratelimit (Redis)",
    "limitador-redis": "limitador (Redis)",
    "limitador-cached": "limitador (cached Redis)",
}
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def main(src, dst):
    series = {}
    for line in open(src):
        f = line.rstrip("\n").split("\t")
        if len(f) < 5 or not f[4]:
            continue
        series.setdefault(f[0], []).append((float(f[1]), float(f[2] or 0), float(f[4])))
    if not series:
        sys.exit("plot.py: no rows")
    w, h, left, right, top, bottom = 720, 420, 70, 230, 30, 50
    xmax = max(p[0] for s in series.values() for p in s) * 1.05
    ys = [p[2] for s in series.values() for p in s if p[2] > 0]
    ylo = 10 ** math.floor(math.log10(min(ys)))
    yhi = 10 ** math.ceil(math.log10(max(ys)))

    def x(v):
        return left + (w - left - right) * v / xmax

    def y(v):
        v = max(v, ylo)
        return top + (h - top - bottom) * (1 - (math.log10(v) - math.log10(ylo)) /
                                           (math.log10(yhi) - math.log10(ylo)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>']
    d = ylo
    while d <= yhi * 1.001:
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{y(d):.1f}" y2="{y(d):.1f}" '
                   f'stroke="#ddd"/><text x="{left - 6}" y="{y(d) + 4:.1f}" '
                   f'text-anchor="end">{d:g}</text>')
        d *= 10
    step = 10 ** math.floor(math.log10(xmax / 2))
    v = 0.0
    while v <= xmax:
        out.append(f'<text x="{x(v):.1f}" y="{h - bottom + 18}" text-anchor="middle">'
                   f'{v / 1000:g}k</text>')
        v += step
    out.append(f'<line x1="{left}" x2="{w - right}" y1="{h - bottom}" y2="{h - bottom}" '
               f'stroke="black"/><line x1="{left}" x2="{left}" y1="{top}" y2="{h - bottom}" '
               f'stroke="black"/>')
    out.append(f'<text x="{(left + w - right) / 2}" y="{h - 10}" text-anchor="middle">'
               f'offered load, gRPC calls/s (open loop)</text>')
    out.append(f'<text x="16" y="{(top + h - bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(top + h - bottom) / 2})">p99 latency, ms (log)</text>')
    for i, (name, pts) in enumerate(series.items()):
        c = COLORS[i % len(COLORS)]
        pts.sort()
        path = " ".join(f"{x(o):.1f},{y(p99):.1f}" for o, _, p99 in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        for o, a, p99 in pts:
            fill = c if a >= 0.95 * o else "white"
            out.append(f'<circle cx="{x(o):.1f}" cy="{y(p99):.1f}" r="3.5" fill="{fill}" '
                       f'stroke="{c}" stroke-width="1.5"/>')
        ly = top + 10 + 20 * i
        out.append(f'<line x1="{w - right + 15}" x2="{w - right + 40}" y1="{ly}" y2="{ly}" '
                   f'stroke="{c}" stroke-width="2"/><text x="{w - right + 46}" y="{ly + 4}">'
                   f'{LABELS.get(name, name)}</text>')
    ly = top + 10 + 20 * len(series) + 10
    out.append(f'<text x="{w - right + 15}" y="{ly + 4}" fill="#555">hollow: achieved &lt; 95%'
               f'</text><text x="{w - right + 15}" y="{ly + 20}" fill="#555">of offered '
               f'(saturated)</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
