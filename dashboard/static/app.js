// The dashboard page: hash-routed panels, one EventSource for everything live, fetches on events only.
import { CandleChart } from "./chart.js";
import { tradingPanel } from "./trading.js";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const PAGES = ["markets", "alerts", "notifications", "orders", "health", "trading", "access"];
const charts = new Map(); // "SYMBOL interval" -> {chart, label}
let markets = [];

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const kid of kids) e.append(kid instanceof Node ? kid : document.createTextNode(kid ?? ""));
  return e;
};
const num = (v, d = 8) => (v === null || v === undefined ? "" : Number(v).toLocaleString("en-US", { maximumFractionDigits: d }));
const when = (s) => (s ? new Date(typeof s === "number" ? s * 1000 : s).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "");

async function call(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") opts.headers["X-CSRF-Token"] = CSRF;
  if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
  const resp = await fetch(path, opts);
  if (resp.status === 401) { location.assign("/ui"); throw new Error("signed out"); }
  const data = resp.status === 204 ? {} : await resp.json();
  if (!resp.ok) throw new Error(data.error || `HTTP ${resp.status}`);
  return data;
}

function fillTable(id, rows) {
  const body = $(`#${id} tbody`);
  body.replaceChildren(...rows);
  if (!rows.length) body.append(el("tr", {}, el("td", { colspan: "9", class: "muted" }, "none")));
}

function condition(c) {
  if (!c) return "";
  if (c.indicator_signal) return `${c.indicator_signal.indicator} signal ${c.indicator_signal.signal}`;
  if (c.type === "indicator_signal") return `${c.indicator} signal ${c.signal}`;
  if (c.type) return `${c.type.replace("_", " ")} ${num(c.threshold)}`;
  const [k, v] = Object.entries(c)[0];
  return `${k.replace("_", " ")} ${num(v)}`;
}

function outcome(a) {
  if (!a) return "";
  if (a.status === "Refused") return `order refused: ${a.reason}`;
  return `order ${a.status}${a.filled_quantity ? " " + a.filled_quantity : ""}${a.fill_price ? " @ " + num(a.fill_price) : ""}`;
}

// --- pages -------------------------------------------------------------------------------
function show() {
  const page = PAGES.includes(location.hash.slice(1)) ? location.hash.slice(1) : "markets";
  for (const p of PAGES) $(`#page-${p}`).hidden = p !== page;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.getAttribute("href") === `#${page}`) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  loaders[page]?.();
}

async function loadMarkets() {
  const o = await call("GET", "/ui/api/overview");
  markets = o.markets;
  $("#trading-state").textContent = o.trading.halted ? `Trading HALTED by ${o.trading.holder || o.trading.by || "the operator"}: ${o.trading.reason || "no reason given"}` : `Engine indicators: ${o.indicators.join(", ")}`;
  const box = $("#charts");
  for (const m of markets) {
    const key = `${m.symbol} ${m.interval}`;
    if (charts.has(key)) continue;
    const label = el("span", { class: "last-price" }, m.last_price === null ? `${key} —` : `${key} ${num(m.last_price, 8)}`);
    const canvas = el("canvas", { role: "img", "aria-label": `${key} candlestick chart` });
    box.append(el("article", { class: "chart-card" }, el("h3", {}, el("span", {}, key), label), canvas));
    charts.set(key, { chart: new CandleChart(canvas, m.symbol), label, key });
    loadChart(m.symbol, m.interval);
  }
  const select = $("#alert-market");
  select.replaceChildren(...markets.map((m) => el("option", { value: `${m.symbol}|${m.interval}` }, `${m.symbol} ${m.interval}`)));
}

async function loadChart(symbol, interval) {
  const entry = charts.get(`${symbol} ${interval}`);
  if (!entry) return;
  const payload = await call("GET", `/ui/api/chart?symbol=${encodeURIComponent(symbol)}&interval=${encodeURIComponent(interval)}&bars=200`);
  entry.chart.setData(payload);
  setPrice(entry, entry.chart.lastPrice);
}

function setPrice(entry, price) {
  if (price !== null && price !== undefined) entry.label.textContent = `${entry.key} ${num(price, 8)}`;
}

async function loadAlerts() {
  const { alerts } = await call("GET", "/ui/api/alerts");
  fillTable("alerts-table", alerts.map((a) => el("tr", {},
    el("td", {}, a.symbol), el("td", {}, a.interval), el("td", {}, condition(a.condition)), el("td", {}, a.trigger || "close"),
    el("td", {}, a.note || ""), el("td", {}, a.principal), el("td", {}, a.action ? JSON.stringify(a.action.place_order) : ""),
    el("td", {}, el("button", { type: "button", onclick: () => cancelAlert(a.id), "aria-label": `Cancel alert ${a.id}` }, "Cancel")))));
}

async function cancelAlert(id) {
  try { await call("DELETE", `/ui/api/alerts/${encodeURIComponent(id)}`); } catch (e) { $("#alert-error").textContent = e.message; }
  loadAlerts();
}

function feedItem(n) {
  return el("li", {},
    el("strong", {}, `${n.symbol} ${n.interval}: ${condition(n.condition)}`), " ",
    el("span", {}, `value ${num(n.value)}`), " ",
    el("span", { class: "muted" }, `owner ${n.principal}`),
    n.note ? el("div", {}, `note: ${n.note}`) : "",
    n.action ? el("div", {}, outcome(n.action)) : "",
    el("div", { class: "when" }, when(n.triggered_at)));
}

async function loadNotifications() {
  const { notifications } = await call("GET", "/ui/api/notifications?limit=100");
  $("#feed").replaceChildren(...notifications.map(feedItem));
}

async function loadOrders() {
  const o = await call("GET", "/ui/api/orders");
  $("#broker").textContent = o.broker ? `Broker: ${o.broker}` : "No broker: run the daemon with --trade";
  fillTable("orders-open", o.open_orders.map((r) => el("tr", {}, el("td", {}, r.id), el("td", {}, r.symbol), el("td", {}, r.side),
    el("td", {}, r.type), el("td", { class: "num" }, num(r.quantity)), el("td", { class: "num" }, num(r.filled_quantity)), el("td", {}, r.state), el("td", {}, when(r.created_at)))));
  fillTable("orders-lists", o.order_lists.map((l) => el("tr", {}, el("td", {}, l.list_id || l.id || ""), el("td", {}, l.symbol || ""),
    el("td", {}, l.status || l.state || ""), el("td", {}, (l.legs || l.orders || []).map((x) => x.id || x.order_id).join(", ")))));
  fillTable("positions", o.positions.map((p) => el("tr", {}, el("td", {}, p.symbol), el("td", {}, p.side), el("td", { class: "num" }, num(p.quantity)),
    el("td", { class: "num" }, num(p.entry_price)), el("td", { class: "num" }, num(p.current_price)),
    el("td", { class: `num ${p.unrealized_pnl >= 0 ? "up" : "down"}` }, num(p.unrealized_pnl, 2)), el("td", { class: "num" }, num(p.realized_pnl, 2)))));
  fillTable("balances", o.balances.map((b) => el("tr", {}, el("td", {}, b.asset), el("td", { class: "num" }, num(b.free)), el("td", { class: "num" }, num(b.locked)), el("td", { class: "num" }, num(b.total)))));
  fillTable("fills", o.fills.map((f) => el("tr", {}, el("td", {}, when(f.time_ms / 1000)), el("td", {}, f.symbol), el("td", {}, f.side),
    el("td", { class: "num" }, num(f.quantity)), el("td", { class: "num" }, num(f.price)), el("td", { class: "num" }, `${num(f.commission)} ${f.commission_asset}`), el("td", {}, f.order_id))));
}

async function loadHealth() {
  const s = await call("GET", "/ui/api/health");
  $("#readiness").textContent = s.ready === false ? "Degraded" : "Ready";
  $("#readiness").className = s.ready === false ? "down" : "up";
  $("#reasons").replaceChildren(...(s.reasons || []).map((r) => el("li", {}, r)));
  const eng = s.engine || { markets: [], connections: [] };
  const lag = s.lag_s || {};
  $("#weight").textContent = s.request_weight_used === null || s.request_weight_used === undefined ? "" : `Exchange request weight used this minute: ${s.request_weight_used}`;
  fillTable("health-markets", eng.markets.map((m) => el("tr", {}, el("td", {}, `${m.symbol} ${m.interval}`), el("td", { class: "num" }, m.bars),
    el("td", {}, m.live ? "yes" : "no"), el("td", {}, m.warm ? "yes" : "no"), el("td", {}, m.synced ? "yes" : "no"),
    el("td", {}, lag[m.symbol] === undefined ? "" : `${lag[m.symbol]} s`), el("td", {}, when(m.last_bar_time)))));
  fillTable("health-conns", (eng.connections || []).map((c) => el("tr", {}, el("td", {}, `#${c.id} (${c.streams ?? 0} streams)`), el("td", {}, c.connected ? "yes" : "no"),
    el("td", {}, c.messages ?? ""), el("td", {}, Math.max(0, (c.connects ?? 1) - 1)), el("td", {}, c.last_error ? (c.last_error.message || JSON.stringify(c.last_error)) : ""))));
  fillTable("health-channels", Object.entries(s.channels || {}).map(([name, c]) => el("tr", {}, el("td", {}, name), el("td", {}, c.kind),
    el("td", { class: "num" }, c.pending), el("td", { class: "num" }, c.delivered), el("td", { class: `num ${c.failed ? "down" : ""}` }, c.failed),
    el("td", {}, c.oldest_pending_age_s === null ? "" : `${c.oldest_pending_age_s} s`), el("td", {}, c.last_error || ""))));
  const jobs = (s.scheduler && s.scheduler.jobs) || [];
  fillTable("health-jobs", jobs.map((j) => el("tr", {}, el("td", {}, j.name), el("td", {}, when(j.next_run_time)),
    el("td", {}, j.last_outcome ? `${j.last_outcome} (${j.runs} runs, ${j.failures} failed)` : "not run yet"))));
}

async function loadAccess() {
  const a = await call("GET", "/ui/api/access");
  fillTable("tokens", a.tokens.map((t) => el("tr", {}, el("td", {}, t.name), el("td", {}, t.id), el("td", {}, t.principal), el("td", {}, t.scopes.join(",")),
    el("td", {}, when(t.created_at)), el("td", {}, when(t.last_used_at)),
    el("td", {}, el("button", { type: "button", onclick: () => revoke(`/ui/api/tokens/${t.id}`), "aria-label": `Revoke token ${t.name}` }, "Revoke")))));
  fillTable("clients", a.oauth_clients.map((c) => el("tr", {}, el("td", {}, c.client_name || ""), el("td", {}, c.client_id), el("td", {}, when(c.consented_at)),
    el("td", { class: "num" }, c.grants), el("td", {}, el("button", { type: "button", onclick: () => revoke(`/ui/api/oauth-clients/${c.client_id}`) }, "Revoke")))));
  fillTable("sessions", a.sessions.map((s) => el("tr", {}, el("td", {}, s.current ? `${s.id} (this one)` : s.id), el("td", {}, s.client), el("td", {}, s.user_agent.slice(0, 60)),
    el("td", {}, when(s.created_at)), el("td", {}, when(s.last_seen_at)),
    el("td", {}, el("button", { type: "button", onclick: () => revoke(`/ui/api/sessions/${s.id}`) }, "Revoke")))));
}

async function revoke(path) {
  try { await call("DELETE", path); } catch (e) { $("#token-error").textContent = e.message; }
  loadAccess();
}

const loadTrading = tradingPanel({ call, el, fillTable, when, $ });
const loaders = { markets: loadMarkets, alerts: loadAlerts, notifications: loadNotifications, orders: loadOrders, health: loadHealth, trading: loadTrading, access: loadAccess };
const visible = (page) => !$(`#page-${page}`).hidden;

// --- forms -------------------------------------------------------------------------------
$("#alert-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const [symbol, interval] = $("#alert-market").value.split("|");
  const body = { symbol, interval, condition: { [$("#alert-kind").value]: Number($("#alert-level").value) }, trigger: $("#alert-trigger").value };
  if ($("#alert-note").value) body.note = $("#alert-note").value;
  $("#alert-error").textContent = "";
  try { await call("POST", "/ui/api/alerts", body); $("#alert-level").value = ""; $("#alert-note").value = ""; } catch (e) { $("#alert-error").textContent = e.message; }
  loadAlerts();
});

$("#token-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const scopes = $("#token-scopes").value.split(/[ ,]+/).filter(Boolean);
  $("#token-error").textContent = "";
  try {
    const out = await call("POST", "/ui/api/tokens", { name: $("#token-name").value, ...(scopes.length ? { scopes } : {}) });
    $("#token-value").textContent = out.token; $("#token-shown").hidden = false; $("#token-name").value = "";
  } catch (e) { $("#token-error").textContent = e.message; }
  loadAccess();
});
$("#token-copy").addEventListener("click", () => navigator.clipboard?.writeText($("#token-value").textContent));
$("#sign-out").addEventListener("click", async () => { try { await call("POST", "/ui/logout"); } finally { location.assign("/ui"); } });

// --- live --------------------------------------------------------------------------------
function live() {
  const es = new EventSource("/ui/events");
  const on = (name, fn) => es.addEventListener(name, (e) => fn(JSON.parse(e.data)));
  es.onopen = () => { $("#conn").textContent = "live"; $("#conn").className = "status live"; };
  es.onerror = () => { $("#conn").textContent = "reconnecting…"; $("#conn").className = "status"; };
  on("tick", (t) => {
    const entry = charts.get(`${t.symbol} ${t.interval}`);
    if (entry) { entry.chart.tick(t.price, t.bar_time); setPrice(entry, t.price); }
  });
  on("bar", (b) => charts.get(`${b.symbol} ${b.interval}`)?.chart.bar(b));
  on("indicators", (u) => loadChart(u.symbol, u.interval));
  on("notification", (n) => { $("#feed").prepend(feedItem(n)); if (visible("alerts")) loadAlerts(); });
  on("alerts", () => visible("alerts") && loadAlerts());
  on("notifications", () => { loadNotifications(); if (visible("alerts")) loadAlerts(); });
  on("orders", () => visible("orders") && loadOrders());
  on("access", () => { if (visible("access")) loadAccess(); if (visible("trading")) loadTrading(); });
  on("health", () => visible("health") && loadHealth());
  on("resync", () => { for (const m of markets) loadChart(m.symbol, m.interval); });
  on("bye", () => { es.close(); location.assign("/ui"); });
}

window.addEventListener("hashchange", show);
loadMarkets().then(() => { show(); live(); });
loadNotifications();
