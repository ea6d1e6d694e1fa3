// `sluice simulate --svg`: one lane per algorithm, hand-written SVG.
//
// In each lane, grey bars are the requests offered per second and blue bars the ones
// allowed (left scale); the orange line is the most one key had allowed within its
// trailing window at that time (right scale), against the limit (red dashes). The
// fixed window's line climbs to twice the limit after the article's boundary burst.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "cli/simulate.h"

namespace sluice::cli {
namespace {

constexpr int kWidth = 960;
constexpr int kLeft = 78;
constexpr int kRight = 78;
constexpr int kPlotW = kWidth - kLeft - kRight;
constexpr int kLaneH = 100;
constexpr int kLaneGap = 44;
constexpr int kTop = 96;

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// 1, 2, 2.5, 5 x 10^n at or above v.
double NiceCeil(double v) {
  if (v <= 0) return 1;
  const double e = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * e >= v * (1 - 1e-12)) return m * e;
  }
  return 10 * e;
}

std::string Num(double v) {
  char buf[32];
  if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
  } else if (v >= 1e4) {
    std::snprintf(buf, sizeof buf, "%gk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

std::string F(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// Clock time (UTC) when the traffic looks like epoch time, else seconds from the start.
std::string TimeLabel(Micros t, Micros begin, Micros step) {
  char buf[48];
  if (begin >= 1'000'000'000LL * kSec) {
    const Micros s = ((t / kSec) % 86400 + 86400) % 86400;
    const int n = std::snprintf(buf, sizeof buf, "%02d:%02d:%02d", static_cast<int>(s / 3600),
                                static_cast<int>(s / 60 % 60), static_cast<int>(s % 60));
    if (step < kSec && n > 0) {
      std::snprintf(buf + n, sizeof buf - static_cast<std::size_t>(n), ".%03d",
                    static_cast<int>(t % kSec / 1000));
    }
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%gs", static_cast<double>(t - begin) / 1e6);
  return buf;
}

// What every lane of a picture shares: the time axis, the bins and the two scales.
struct Geometry {
  Micros begin = 0;
  std::size_t bins = 0;
  double bin_seconds = 0, bin_px = 0, span = 0;
  double rate_max = 0, win_max = 0;
  Micros tick = 0;
  std::uint64_t limit = 0;
  std::string w;  // the window, formatted
  double XOf(Micros t) const { return kLeft + static_cast<double>(t - begin) / span * kPlotW; }
};

// The title and the legend.
void AppendHeader(std::string& s, const Traffic& traffic, const SimPolicy& p, const std::string& w,
                  int height) {
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(kWidth) +
       "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(kWidth) +
       " " + std::to_string(height) +
       "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + std::to_string(kLeft) + "\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" +
       Escape(traffic.title) + "</text>\n";
  s += "<text x=\"" + std::to_string(kLeft) + "\" y=\"42\">limit " + std::to_string(p.limit) +
       " per " + w + " for every algorithm (token bucket and GCRA: burst " +
       std::to_string(p.burst == 0 ? p.limit : p.burst) + ", refill " + std::to_string(p.limit) +
       " per " + w + ")</text>\n";
  // Legend.
  s += "<g transform=\"translate(" + std::to_string(kLeft) + ",58)\">";
  s += "<rect width=\"12\" height=\"10\" fill=\"#cfcfcf\"/><text x=\"16\" y=\"10\">offered "
       "req/s</text>";
  s += "<rect x=\"110\" width=\"12\" height=\"10\" fill=\"#3b7dd8\"/><text x=\"126\" "
       "y=\"10\">allowed req/s (left scale)</text>";
  s += "<line x1=\"300\" y1=\"5\" x2=\"322\" y2=\"5\" stroke=\"#e07000\" "
       "stroke-width=\"2.5\"/><text x=\"326\" y=\"10\">most allowed to one key in the last " +
       w + " (right scale)</text>";
  s += "<line x1=\"660\" y1=\"5\" x2=\"682\" y2=\"5\" stroke=\"#d62020\" stroke-width=\"1.5\" "
       "stroke-dasharray=\"5,3\"/><text x=\"686\" y=\"10\">limit</text>";
  s += "</g>\n";
}

// One algorithm's lane: heading, time grid, bars, the trailing-window line and scales.
// `last`: the lane that carries the time labels.
void AppendLane(std::string& s, const Geometry& g, const AlgorithmRun& r, int top, bool last) {
  const int bottom = top + kLaneH;
  const auto y_rate = [&](double v) { return bottom - v / g.rate_max * kLaneH; };
  const auto y_win = [&](double v) { return bottom - v / g.win_max * kLaneH; };
  char head[256];
  std::snprintf(head, sizeof head,
                "%s: allowed %" PRIu64 " of %" PRIu64 ", at most %" PRIu64
                " in one %s window (limit %" PRIu64 ")",
                AlgorithmName(r.algorithm), r.allowed, r.allowed + r.denied, r.max_in_window,
                g.w.c_str(), g.limit);
  s += "<text x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(top - 6) +
       "\" font-weight=\"bold\">" + Escape(head) + "</text>\n";
  s += "<rect x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(top) + "\" width=\"" +
       std::to_string(kPlotW) + "\" height=\"" + std::to_string(kLaneH) +
       "\" fill=\"#fafafa\" stroke=\"#999\" stroke-width=\"0.8\"/>\n";
  // Time grid.
  for (Micros t = (g.begin + g.tick - 1) / g.tick * g.tick;
       static_cast<double>(t - g.begin) <= g.span; t += g.tick) {
    const double x = g.XOf(t);
    s += "<line x1=\"" + F(x) + "\" y1=\"" + std::to_string(top) + "\" x2=\"" + F(x) + "\" y2=\"" +
         std::to_string(bottom) + "\" stroke=\"#e4e4e4\"/>\n";
    if (last) {
      s += "<text x=\"" + F(x) + "\" y=\"" + std::to_string(bottom + 15) +
           "\" text-anchor=\"middle\" fill=\"#444\">" + TimeLabel(t, g.begin, g.tick) + "</text>\n";
    }
  }
  // Bars: offered behind allowed.
  std::string offered, allowed;
  for (std::size_t i = 0; i < g.bins; ++i) {
    const double x = kLeft + static_cast<double>(i) * g.bin_px;
    const double bw = std::max(g.bin_px - (g.bin_px > 4 ? 1.0 : 0.0), 0.6);
    if (r.offered_per_bin[i] > 0) {
      const double y = y_rate(static_cast<double>(r.offered_per_bin[i]) / g.bin_seconds);
      offered += "<rect x=\"" + F(x) + "\" y=\"" + F(y) + "\" width=\"" + F(bw) + "\" height=\"" +
                 F(bottom - y) + "\"/>";
    }
    if (r.allowed_per_bin[i] > 0) {
      const double y = y_rate(static_cast<double>(r.allowed_per_bin[i]) / g.bin_seconds);
      allowed += "<rect x=\"" + F(x) + "\" y=\"" + F(y) + "\" width=\"" + F(bw) + "\" height=\"" +
                 F(bottom - y) + "\"/>";
    }
  }
  s += "<g fill=\"#cfcfcf\">" + offered + "</g>\n";
  s += "<g fill=\"#3b7dd8\">" + allowed + "</g>\n";
  // The trailing-window line, as steps.
  std::string pts;
  for (std::size_t i = 0; i < g.bins; ++i) {
    const double y = y_win(static_cast<double>(r.window_peak_per_bin[i]));
    const double x0 = kLeft + static_cast<double>(i) * g.bin_px;
    pts += F(x0) + "," + F(y) + " " + F(x0 + g.bin_px) + "," + F(y) + " ";
  }
  s += "<polyline fill=\"none\" stroke=\"#e07000\" stroke-width=\"2.2\" points=\"" + pts + "\"/>\n";
  const double yl = y_win(static_cast<double>(g.limit));
  s += "<line x1=\"" + std::to_string(kLeft) + "\" y1=\"" + F(yl) + "\" x2=\"" +
       std::to_string(kLeft + kPlotW) + "\" y2=\"" + F(yl) +
       "\" stroke=\"#d62020\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>\n";
  // Scales: left (rate), right (per window).
  s += "<g fill=\"#3b7dd8\" text-anchor=\"end\">";
  s += "<text x=\"" + std::to_string(kLeft - 5) + "\" y=\"" + std::to_string(top + 10) + "\">" +
       Num(g.rate_max) + "/s</text>";
  s += "<text x=\"" + std::to_string(kLeft - 5) + "\" y=\"" + std::to_string(bottom) +
       "\">0</text></g>\n";
  s += "<g fill=\"#c05000\">";
  s += "<text x=\"" + std::to_string(kLeft + kPlotW + 5) + "\" y=\"" + std::to_string(top + 10) +
       "\">" + Num(g.win_max) + "</text>";
  s += "<text x=\"" + std::to_string(kLeft + kPlotW + 5) + "\" y=\"" + F(yl + 4) +
       "\" fill=\"#d62020\">limit " + Num(static_cast<double>(g.limit)) + "</text>";
  s += "<text x=\"" + std::to_string(kLeft + kPlotW + 5) + "\" y=\"" + std::to_string(bottom) +
       "\">0</text></g>\n";
}

}  // namespace

std::string RenderSvg(const Traffic& traffic, const SimPolicy& p,
                      const std::vector<AlgorithmRun>& runs) {
  Geometry g;
  g.begin = traffic.begin;
  g.bins = runs.empty() ? 0 : runs[0].offered_per_bin.size();
  const Micros range = std::max<Micros>(1, traffic.end - traffic.begin);
  const Micros bin_width = g.bins == 0 ? range : runs[0].bin_width;
  g.bin_seconds = static_cast<double>(bin_width) / 1e6;
  g.bin_px = g.bins == 0 ? 0 : static_cast<double>(kPlotW) / static_cast<double>(g.bins);
  // Bins are whole, so the last one may end after `end`: x spans the bins.
  g.span = static_cast<double>(bin_width) * static_cast<double>(std::max<std::size_t>(g.bins, 1));
  double peak_max = 0;
  for (const AlgorithmRun& r : runs) {
    for (std::size_t i = 0; i < g.bins; ++i) {
      g.rate_max = std::max(g.rate_max, static_cast<double>(r.offered_per_bin[i]) / g.bin_seconds);
      peak_max = std::max(peak_max, static_cast<double>(r.window_peak_per_bin[i]));
    }
  }
  g.rate_max = NiceCeil(g.rate_max);
  g.win_max = NiceCeil(std::max(peak_max * 1.1, static_cast<double>(p.limit) * 1.2));
  g.tick = NiceBinWidth(range, 8);
  g.limit = p.limit;
  g.w = FormatDuration(p.window);
  const int height = kTop + static_cast<int>(runs.size()) * (kLaneH + kLaneGap) + 20;
  std::string s;
  AppendHeader(s, traffic, p, g.w, height);
  for (std::size_t lane = 0; lane < runs.size(); ++lane) {
    const int top = kTop + static_cast<int>(lane) * (kLaneH + kLaneGap) + 18;
    AppendLane(s, g, runs[lane], top, lane + 1 == runs.size());
  }
  s += "</svg>\n";
  return s;
}

}  // namespace sluice::cli
