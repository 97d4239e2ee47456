// allot dashboard: follows the server-sent event stream (events?...) and
// renders each "state" event. Plain DOM and SVG, no dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const state = {
  resource: params.get("resource") || "",
  q: params.get("q") || "",
  top: params.get("top") || "50",
  points: [],
  claimants: [],
  snapTime: 0,   // server time of the last snapshot (ms)
  recvTime: 0,   // local time it arrived (ms)
  historyMs: 5 * 60 * 1000,
  es: null,
};

function fmt(x) {
  if (x === undefined || x === null) return "–";
  if (!isFinite(x)) return String(x);
  const a = Math.abs(x);
  if (a >= 1e6) return (x / 1e6).toFixed(2) + "M";
  if (a >= 1e4) return (x / 1e3).toFixed(1) + "k";
  // Sums of float grants are off by rounding noise: 100.00000000000345
  // reads as 100.
  const r = Math.round(x * 100) / 100;
  if (Number.isInteger(r)) return String(r);
  return x.toFixed(a >= 100 ? 1 : 2);
}

function ago(ms) {
  const s = Math.round(ms / 1000);
  if (Math.abs(s) < 120) return s + "s";
  return Math.round(s / 60) + "m";
}

function when(iso) {
  if (!iso) return "–";
  const t = Date.parse(iso);
  return new Date(t).toLocaleTimeString() + " (" + ago(serverNow() - t) + " ago)";
}

function serverNow() {
  return state.snapTime ? state.snapTime + (Date.now() - state.recvTime) : Date.now();
}

function text(id, v) {
  const el = $(id);
  if (el.textContent !== v) el.textContent = v;
}

function td(v, cls) {
  const c = document.createElement("td");
  c.textContent = v;
  if (cls) c.className = cls;
  return c;
}

function connect() {
  if (state.es) state.es.close();
  const u = new URLSearchParams();
  if (state.resource) u.set("resource", state.resource);
  if (state.q) u.set("q", state.q);
  u.set("top", state.top);
  history.replaceState(null, "", "?" + u.toString());
  state.points = [];
  const es = new EventSource("events?" + u.toString());
  state.es = es;
  es.addEventListener("state", (m) => render(JSON.parse(m.data)));
  es.onopen = () => { $("conn").className = "conn on"; $("conn").textContent = "live"; };
  es.onerror = () => { $("conn").className = "conn off"; $("conn").textContent = "reconnecting"; };
}

function render(ev) {
  const s = ev.snapshot;
  $("error").hidden = !ev.error;
  if (ev.error) $("error").textContent = "cannot read the coordinator: " + ev.error;
  if (!s) return;
  state.snapTime = Date.parse(s.time);
  state.recvTime = Date.now();
  if (!state.resource && s.resources && s.resources.length) {
    // Nothing chosen yet: follow the busiest resource.
    state.resource = s.resources[0].id;
    connect();
    return;
  }
  renderNode(s, ev.replicas);
  renderConfig(s.config);
  renderResources(s);
  renderResource(s.resource, s);
  if (ev.history_ms) state.historyMs = ev.history_ms;
  if (ev.reset) state.points = [];
  state.points.push(...ev.points);
  const cut = state.snapTime - state.historyMs;
  while (state.points.length && state.points[0].t < cut) state.points.shift();
  renderChart();
  renderQuota(ev.quota || []);
  renderDomain(ev.domain || []);
}

function renderNode(s, replicas) {
  text("node-title", "node " + s.node);
  document.title = "allot · " + s.node;
  text("server-id", s.server_id);
  text("role", s.role || "standalone (no election)");
  text("term", String(s.term));
  text("leader", s.leader || (s.role ? "–" : s.server_id));
  text("serving", s.serving ? "yes" : "no" + (s.failure ? ": " + s.failure : ""));
  $("serving").className = s.serving ? "ok" : "bad";
  text("parent", s.parent ? s.parent : "– (root)");
  text("parent-ok", s.parent ? when(s.parent_last_ok) : "–");
  text("parent-err", s.parent_error || "–");
  $("parent-err").className = s.parent_error ? "bad" : "";
  text("resource-count", String(s.resource_count));
  text("clients", String(s.clients));
  const ul = $("replicas");
  if (replicas && replicas.length) {
    ul.replaceChildren(...replicas.map((r) => {
      const li = document.createElement("li");
      li.textContent = r.server_id + " · " + (r.role || "standalone") + (r.term ? " · term " + r.term : "") + (r.serving ? " · serving" : "");
      if (r.server_id === s.server_id) li.style.fontWeight = "600";
      return li;
    }));
  }
}

function renderConfig(c) {
  if (!c) { text("config-gen", "–"); return; }
  text("config-gen", String(c.generation));
  text("config-updated", c.updated ? when(c.updated) : "–");
  text("config-keys", String((c.keys || []).length) + (c.fallback ? " + fallback " + c.fallback : ""));
  let last = null;
  for (const k of c.keys || []) {
    for (const r of k.rejected || []) {
      if (!last || Date.parse(r.time) > Date.parse(last.time)) last = Object.assign({ key: k.key }, r);
    }
  }
  text("config-rejected", last ? last.key + " revision " + last.revision + " at " + new Date(Date.parse(last.time)).toLocaleTimeString() + ": " + last.error : "none");
  $("config-rejected").className = last ? "bad" : "";
}

function renderResources(s) {
  const rows = (s.resources || []).map((r) => {
    const tr = document.createElement("tr");
    tr.dataset.id = r.id;
    if (r.id === state.resource) tr.className = "sel";
    tr.append(td(r.id), td(r.template), td(r.algorithm), td(fmt(r.capacity), "n"), td(fmt(r.granted), "n"),
      td(fmt(r.wants), "n"), td(String(r.claimants), "n"), td(r.learning ? "yes" : ""), td(r.shadow ? "yes" : ""));
    return tr;
  });
  $("resources").tBodies[0].replaceChildren(...rows);
  text("resources-note", s.resource_count > rows.length ? "(" + rows.length + " with the most outstanding of " + s.resource_count + ")" : "(" + rows.length + ")");
}

function renderResource(r, s) {
  text("res-id", state.resource || "–");
  $("res-missing").hidden = !!r || !state.resource;
  if (!r) {
    for (const id of ["res-capacity", "res-granted", "res-wants", "res-outstanding", "res-claimants", "res-safe", "res-learning", "res-shadow", "res-ceiling", "res-lease"]) text(id, "–");
    renderChildren([]);
    state.claimants = [];
    $("claimants").tBodies[0].replaceChildren();
    text("claimants-note", "");
    return;
  }
  text("res-template", "template " + r.template + " · " + r.algorithm);
  text("res-capacity", fmt(r.capacity));
  text("res-granted", fmt(r.granted));
  text("res-wants", fmt(r.wants));
  text("res-outstanding", fmt(r.outstanding));
  text("res-claimants", String(r.claimants));
  text("res-safe", fmt(r.safe_capacity));
  text("res-learning", r.learning ? "until " + new Date(Date.parse(r.learning_until)).toLocaleTimeString() : "no");
  text("res-shadow", r.shadow ? "yes: agents admit their wants" : "no");
  text("res-ceiling", r.ceiling === undefined ? "none" : fmt(r.ceiling));
  text("res-lease", r.lease_known ? fmt(r.lease) + " (" + ago(Date.parse(r.lease_expiry) - state.snapTime) + " left)" : s.parent ? "not yet" : "– (root node)");
  renderChildren(r.children || []);
  state.claimants = r.top || [];
  const rows = state.claimants.map((c) => {
    const tr = document.createElement("tr");
    if (c.lapsed) tr.className = "lapsed";
    tr.append(td(c.id + (c.node ? " (child node)" : "") + (c.lapsed ? " (lapsed)" : "")), td(fmt(c.has), "n"), td(fmt(c.wants), "n"),
      td(String(c.priority), "n"), td(fmt(c.weight), "n"), td("", "n countdown"));
    return tr;
  });
  $("claimants").tBodies[0].replaceChildren(...rows);
  text("claimants-note", "(showing " + rows.length + " of " + r.matching + (state.q ? " matching “" + state.q + "”" : "") + ", " + r.claimants + " in all)");
  tickCountdowns();
}

// renderChildren lists the child nodes claiming the followed resource,
// each over its priority bands.
function renderChildren(children) {
  const items = children.map((c) => {
    const li = document.createElement("li");
    li.textContent = c.node + " · has " + fmt(c.has) + " · wants " + fmt(c.wants) + " · " + fmt(c.clients) + " client" + (c.clients === 1 ? "" : "s") + " in " + c.bands + " band" + (c.bands === 1 ? "" : "s");
    return li;
  });
  if (!items.length) {
    const li = document.createElement("li");
    li.className = "muted";
    li.textContent = "none";
    items.push(li);
  }
  $("children").replaceChildren(...items);
}

function tickCountdowns() {
  const now = serverNow();
  const rows = $("claimants").tBodies[0].rows;
  for (let i = 0; i < rows.length && i < state.claimants.length; i++) {
    const c = state.claimants[i];
    const left = Date.parse(c.expiry) - now;
    // A lapsed claimant's expiry is when its record is forgotten.
    rows[i].cells[5].textContent = c.lapsed ? "lapsed" : left > 0 ? (left / 1000).toFixed(1) + "s" : "ended";
  }
  text("clock", new Date(now).toLocaleTimeString());
}

function renderChart() {
  const svg = $("chart");
  const W = 900, H = 240, L = 50, R = 10, T = 10, B = 22;
  const now = state.snapTime || Date.now();
  const t0 = now - state.historyMs;
  const pts = state.points;
  let ymax = 1;
  for (const p of pts) ymax = Math.max(ymax, p.capacity, p.granted, p.wants, p.outstanding);
  ymax = niceCeil(ymax * 1.05);
  const x = (t) => L + (W - L - R) * (t - t0) / (now - t0);
  const y = (v) => T + (H - T - B) * (1 - v / ymax);
  const parts = [];
  for (let k = 0; k <= 4; k++) {
    const v = ymax * k / 4;
    parts.push(`<line class="grid" x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}"/><text x="${L - 4}" y="${y(v) + 4}" text-anchor="end">${fmt(v)}</text>`);
  }
  const step = state.historyMs / 5;
  for (let m = 0; m <= 5; m++) {
    const t = now - m * step;
    parts.push(`<text x="${x(t)}" y="${H - 6}" text-anchor="middle">${m ? "-" + ago(m * step) : "now"}</text>`);
  }
  for (const k of ["capacity", "outstanding", "wants", "granted"]) {
    const d = pts.map((p) => x(p.t).toFixed(1) + "," + y(p[k]).toFixed(1)).join(" ");
    parts.push(`<polyline class="${k}" points="${d}"/>`);
  }
  svg.innerHTML = parts.join("");
}

// niceCeil rounds v up to a round multiple of a power of ten, so the axis
// reads in round numbers.
function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function renderQuota(ns) {
  $("quota-empty").hidden = ns.length > 0;
  $("quota").hidden = ns.length === 0;
  $("quota").tBodies[0].replaceChildren(...ns.map((n) => {
    const tr = document.createElement("tr");
    const ev = Object.entries(n.events || {}).filter(([, v]) => v).map(([k, v]) => k + " " + v).join(", ");
    tr.append(td(String(n.partition)), td(n.name), td(ev || "no events yet"));
    return tr;
  }));
}

// renderDomain lists the domain partitions, one row each: its leader and
// term, whether it still learns the live holds (it grants no copies until
// then), holds, copies and staged transfers, and its counters since the
// term began.
function renderDomain(parts) {
  $("domain-empty").hidden = parts.length > 0;
  $("domain").hidden = parts.length === 0;
  $("domain").tBodies[0].replaceChildren(...parts.map((p) => {
    const c = p.counts || {};
    const reqs = c.requests || 0, rejected = c.requests_rejected || 0;
    const reserves = c.reserves || 0, refused = (c.reserves_refused || 0) + (c.learning_refusals || 0);
    const counters = "requests " + (reqs - rejected) + "/" + rejected + " · reserves " + (reserves - refused) + "/" + refused +
      " · expired " + (c.holds_expired || 0);
    const tr = document.createElement("tr");
    tr.append(td(String(p.partition)), td(p.server_id), td(String(p.term), "n"),
      td(p.learning ? "learning until " + new Date(Date.parse(p.learning_until)).toLocaleTimeString() : "serving"),
      td(String(p.holds), "n"), td(String(p.copies_held), "n"), td(String(p.transfers), "n"), td(counters));
    tr.cells[7].title = (c.hits_granted || 0) + " hits and " + (c.copies_granted || 0) + " copies granted, " + (c.learning_refusals || 0) +
      " reserves refused while learning, " + (c.releases || 0) + " releases, " + (c.seized || 0) + " transfers seized";
    return tr;
  }));
}

$("resources").addEventListener("click", (e) => {
  const tr = e.target.closest("tr");
  if (tr && tr.dataset.id) { state.resource = tr.dataset.id; connect(); }
});
$("open-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const id = $("open-id").value.trim();
  $("open-id").value = "";
  if (id) { state.resource = id; connect(); }
});
let searchTimer = 0;
$("search").value = state.q;
$("search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => { state.q = $("search").value; connect(); }, 250);
});
$("search-form").addEventListener("submit", (e) => e.preventDefault());
if (![...$("top").options].some((o) => o.value === state.top)) $("top").add(new Option(state.top));
$("top").value = state.top;
$("top").addEventListener("change", () => { state.top = $("top").value; connect(); });
setInterval(tickCountdowns, 200);
connect();
