// The admin console (GET /ui on the admin listener; docs/sluiced.md "Admin API and
// console"): one self-contained page, inline CSS and JS, nothing fetched but the admin
// JSON of the listener it came from. Every value from the server is written with
// textContent, never parsed as HTML: keys are the callers' bytes.
#include "service/admin_server.h"

namespace sluice::service {

const std::string& ConsolePage() {
  static const std::string page = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>sluiced console</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1c2430}
header{background:#1c2430;color:#fff;padding:8px 16px;display:flex;gap:12px;align-items:center}
header h1{font-size:16px;margin:0 12px 0 0}
header input{width:22em}
main{display:grid;grid-template-columns:1fr 1fr;gap:12px;padding:12px}
section{background:#fff;border:1px solid #d8dde4;border-radius:6px;padding:8px 12px;overflow:auto}
section.wide{grid-column:1/3}
h2{font-size:14px;margin:4px 0 8px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:3px 6px;border-bottom:1px solid #eef0f3;white-space:nowrap}
td.num,th.num{text-align:right}
tr.domain td{font-weight:600;background:#f0f2f5}
.bad{color:#b3261e;font-weight:600}.ok{color:#1e7b34}.muted{color:#6b7480}
.replaced{text-decoration:line-through;color:#6b7480}
pre{background:#f0f2f5;padding:6px;max-height:20em;overflow:auto}
button{cursor:pointer}
</style></head>
<body>
<header><h1>sluiced console</h1>
<label>admin token <input id="token" type="password" autocomplete="off"></label>
<button id="connect">connect</button><span id="status" class="muted">not connected</span>
</header>
<main>
<section class="wide"><h2>Rules</h2>
<table id="rules"><thead><tr><th>rule</th><th>limit</th><th class="num">decisions/s</th>
<th class="num">denied</th><th class="num">near limit</th><th class="num">total</th></tr></thead>
<tbody></tbody></table></section>
<section><h2>Top limited keys</h2>
<table id="top"><thead><tr><th>rule</th><th>key</th><th class="num">denials</th>
<th class="num">last</th><th></th></tr></thead><tbody></tbody></table></section>
<section><h2>Store</h2><table id="store"><tbody></tbody></table></section>
<section class="wide"><h2>Explain</h2>
<form id="explain-form"><label>domain <input id="explain-domain" size="10"></label>
<label>entries <input id="explain-entries" size="30" placeholder="key=value, key2=value2; other=descriptor"></label>
<button id="explain-go" type="submit">explain</button></form>
<div id="explain-out"></div></section>
<section class="wide"><h2>Reset a key</h2>
<form id="reset-form"><label>domain <input id="reset-domain" size="10"></label>
<label>entries <input id="reset-entries" size="30" placeholder="key=value"></label>
<button id="reset-go" type="submit">reset</button></form>
<div id="reset-out" class="muted"></div></section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("sluicedToken") || "";
let timer = null, last = null, limits = {}, generation = -1;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
  return tr;
}
function num(v, cls) { return el("td", v, "num" + (cls ? " " + cls : "")); }
function pct(a, b) { return b > 0 ? (100 * a / b).toFixed(1) + "%" : "-"; }
function status(text, bad) { const s = $("status"); s.textContent = text; s.className = bad ? "bad" : "muted"; }

async function call(path, init) {
  const opts = Object.assign({headers: {}}, init || {});
  opts.headers["Authorization"] = "Bearer " + token;
  const r = await fetch(path, opts);
  const body = await r.json().catch(() => ({error: "not JSON (HTTP " + r.status + ")"}));
  if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
  return body;
}
// "k=v, k2=v2" -> query pairs of one descriptor.
function descriptorQuery(domain, entries) {
  const q = new URLSearchParams();
  q.append("domain", domain.trim());
  for (const part of entries.split(",")) {
    const p = part.trim();
    if (!p) continue;
    const eq = p.indexOf("=");
    q.append("key", eq < 0 ? p : p.slice(0, eq).trim());
    q.append("value", eq < 0 ? "" : p.slice(eq + 1).trim());
  }
  return q;
}
function entriesText(entries) {
  return (entries || []).map((e) => e.key + "=" + e.value).join(", ");
}
function limitText(l) {
  if (!l) return "";
  if (l.unlimited) return "unlimited";
  if (l.concurrency) return l.capacity + " in flight";
  return l.requests_per_unit + "/" + l.unit + " " + l.algorithm + (l.shadow ? " (shadow)" : "");
}

function renderRules(stats) {
  const now = performance.now();
  const tbody = $("rules").tBodies[0];
  tbody.replaceChildren();
  let domain = null;
  for (const r of stats.rules) {
    const id = r.domain + "\u0000" + r.rule + "\u0000" + r.name;
    const total = r.ok + r.over_limit + r.shadow_over_limit + r.quota_over_limit + r.key_cap;
    const prev = last && last.rules[id];
    const dt = prev ? (now - last.at) / 1000 : 0;
    const d = prev ? total - prev.total : 0, dd = prev ? r.over_limit - prev.over : 0;
    const dok = prev ? r.ok - prev.ok : 0, dn = prev ? r.near_limit - prev.near : 0;
    if (r.domain !== domain) {
      domain = r.domain;
      const tr = row([el("td", "domain " + domain)]);
      tr.className = "domain";
      tr.firstChild.colSpan = 6;
      tbody.appendChild(tr);
    }
    const depth = r.rule.split(".").length - 1;
    const name = el("td", r.rule + (r.name ? " (" + r.name + ")" : ""));
    name.style.paddingLeft = (8 + 16 * depth) + "px";
    const tr = row([name, limitText(limits[r.domain + "\u0000" + r.rule + "\u0000" + r.name]),
                    num(dt > 0 ? (d / dt).toFixed(1) : "-"),
                    num(prev ? pct(dd, d) : pct(r.over_limit, total), r.over_limit > 0 ? "bad" : ""),
                    num(prev ? pct(dn, dok) : pct(r.near_limit, r.ok)), num(total)]);
    tr.dataset.rule = r.rule;
    tr.dataset.denied = String(r.over_limit);
    tbody.appendChild(tr);
  }
  const rules = {};
  for (const r of stats.rules) {
    rules[r.domain + "\u0000" + r.rule + "\u0000" + r.name] = {
      total: r.ok + r.over_limit + r.shadow_over_limit + r.quota_over_limit + r.key_cap,
      over: r.over_limit, ok: r.ok, near: r.near_limit};
  }
  last = {at: now, rules: rules};
}

function renderStore(stats) {
  const s = stats.store, tbody = $("store").tBodies[0];
  tbody.replaceChildren();
  const rows = [["reachable", s.reachable ? "yes" : "NO", s.reachable ? "ok" : "bad"],
    ["store calls", s.calls], ["mean latency", s.mean_latency_us.toFixed(1) + " us"],
    ["errors", s.errors, s.errors ? "bad" : ""], ["fail-open decisions", s.fail_open],
    ["fail-closed decisions", s.fail_closed], ["local fallback decisions", s.local_fallback],
    ["deny cache hits", s.deny_cache_hits],
    ["leases (hits / grants / returns)", s.lease_hits + " / " + s.lease_grants + " / " + s.lease_returns],
    ["decisions / denied", stats.decisions + " / " + stats.denied],
    ["top keys memory", stats.top_keys_bytes + " bytes"]];
  for (const [k, v, cls] of rows) tbody.appendChild(row([k, el("td", v, cls)]));
}

function renderTop(top) {
  const tbody = $("top").tBodies[0];
  tbody.replaceChildren();
  for (const r of top.rules) {
    for (const k of r.keys) {
      const btn = el("button", "reset");
      const resettable = k.entries !== undefined;
      btn.disabled = !resettable;
      btn.addEventListener("click", () => resetKey(k.domain, entriesText(k.entries)));
      const tr = row([r.rule + (r.name ? " (" + r.name + ")" : ""),
                      resettable ? entriesText(k.entries) : k.key, num(k.denials),
                      num((k.last_denied_ms_ago / 1000).toFixed(0) + " s ago"), el("td")]);
      tr.lastChild.appendChild(btn);
      tr.dataset.key = resettable ? entriesText(k.entries) : k.key;
      tbody.appendChild(tr);
    }
  }
  if (!tbody.children.length) tbody.appendChild(row([el("td", "no denials yet", "muted")]));
}

async function refreshLimits() {
  const l = await call("/admin/limits");
  limits = {};
  for (const x of l.limits) limits[x.domain + "\u0000" + x.rule + "\u0000" + x.name] = x;
  generation = l.generation;
}

async function poll() {
  try {
    const [stats, top] = await Promise.all([call("/admin/stats"), call("/admin/top")]);
    if (stats.generation !== generation) await refreshLimits();
    renderRules(stats);
    renderStore(stats);
    renderTop(top);
    status("live, config generation " + stats.generation + ", " + new Date().toLocaleTimeString());
  } catch (e) {
    status(String(e.message || e), true);
  }
}

function connect() {
  token = $("token").value.trim() || token;
  sessionStorage.setItem("sluicedToken", token);
  if (timer) clearInterval(timer);
  last = null;
  generation = -1;
  poll();
  timer = setInterval(poll, 1000);
}

async function explain(ev) {
  ev.preventDefault();
  const out = $("explain-out");
  out.replaceChildren();
  try {
    // Descriptors separated by ';', entries by ',': "api_key=k1; path=/x".
    const descriptors = $("explain-entries").value.split(";").map((d) => ({
      entries: d.split(",").map((p) => p.trim()).filter((p) => p).map((p) => {
        const eq = p.indexOf("=");
        return eq < 0 ? {key: p, value: ""} : {key: p.slice(0, eq).trim(), value: p.slice(eq + 1).trim()};
      })}));
    const j = await call("/admin/explain", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({domain: $("explain-domain").value.trim(), descriptors: descriptors})});
    out.appendChild(el("p", "would be " + j.would_be + " (nothing charged)",
                       j.would_be === "OK" ? "ok" : "bad"));
    const t = el("table");
    t.appendChild(row(["rule", "limit", "store key", "decision"].map((h) => el("th", h))));
    for (const d of j.descriptors) {
      for (const l of d.limits) {
        const dec = l.replaced ? "replaced by " + l.replaced_by
          : l.decision ? (l.decision.allowed ? "allowed" : "denied") + ", " + l.decision.remaining +
            " of " + l.decision.limit + " left, retry in " + l.decision.retry_after_ms + " ms"
          : l.unlimited ? "unlimited" : (l.store_error || "");
        const tr = row([l.rule + (l.name ? " (" + l.name + ")" : ""), limitText(l),
                        l.store_key || "-", dec]);
        if (l.replaced) tr.className = "replaced";
        tr.dataset.replaced = String(!!l.replaced);
        t.appendChild(tr);
      }
      if (!d.limits.length) t.appendChild(row(["no rule matches " + entriesText(d.entries)]));
    }
    out.appendChild(t);
  } catch (e) {
    out.appendChild(el("p", String(e.message || e), "bad"));
  }
}

async function resetKey(domain, entries) {
  const out = $("reset-out");
  if (!confirm("Reset every counter of " + domain + " [" + entries + "]? Its full limit comes back.")) {
    out.textContent = "reset cancelled";
    return;
  }
  try {
    const body = descriptorQuery(domain, entries).toString();
    const j = await call("/admin/reset", {method: "POST", body: body,
      headers: {"Content-Type": "application/x-www-form-urlencoded"}});
    out.textContent = "reset " + j.reset.map((k) => k.store_key).join(", ");
    out.className = "ok";
  } catch (e) {
    out.textContent = String(e.message || e);
    out.className = "bad";
  }
}

$("connect").addEventListener("click", connect);
$("token").addEventListener("keydown", (e) => { if (e.key === "Enter") connect(); });
$("explain-form").addEventListener("submit", explain);
$("reset-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  resetKey($("reset-domain").value, $("reset-entries").value);
});
if (token) connect();
</script>
</body></html>
)html";
  return page;
}

}  // namespace sluice::service
