// Candlestick chart on a canvas, drawn from generate_chart's series payload (our own code, no library).
// Price pane: candles, volume at its foot, overlay indicators, markers, last-price line.
// One pane below per non-overlay indicator: lines, histograms, horizontal levels, signal dots.

const THEME = {
  bg: "#131722", grid: "#2a2e39", text: "#787b86", up: "#26a69a", down: "#ef5350",
  volUp: "rgba(38,166,154,0.35)", volDown: "rgba(239,83,80,0.35)", last: "#f0b90b",
  lines: ["#2962ff", "#f0b90b", "#ab47bc", "#26c6da", "#ff7043", "#9ccc65", "#ec407a"],
  alert: "#f0b90b", fill: "#42a5f5",
};
const AXIS_W = 64, TIME_H = 20, PANE_GAP = 6, MIN_CANDLE = 5;

export function paintLog() {
  if (!window.__paints) window.__paints = [];
  return window.__paints;
}

function fmt(v) {
  if (v === null || v === undefined || !isFinite(v)) return "";
  const a = Math.abs(v);
  const d = a >= 1000 ? 2 : a >= 1 ? 3 : 6;
  return Number(v).toLocaleString("en-US", { minimumFractionDigits: 0, maximumFractionDigits: d });
}

function range(values, lo = Infinity, hi = -Infinity) {
  for (const v of values) if (v !== null && v !== undefined && isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
  return [lo, hi];
}

export class CandleChart {
  constructor(canvas, symbol) {
    this.canvas = canvas;
    this.symbol = symbol;
    this.bars = [];
    this.indicators = [];
    this.markers = [];
    this.pending = false;
    this.drawnPrice = null;
    this.firstPaint = false;
    new ResizeObserver(() => this.schedule()).observe(canvas);
  }

  setData(payload) {
    this.bars = (payload.bars || []).map((b) => ({ ...b }));
    const inds = payload.indicators || {};
    this.indicators = Array.isArray(inds) ? inds : Object.entries(inds).map(([key, v]) => ({ label: key, ...v, key }));
    this.markers = payload.markers || [];
    this.schedule();
  }

  get lastPrice() { return this.bars.length ? this.bars[this.bars.length - 1].c : null; }

  tick(price, barTime) {
    const last = this.bars[this.bars.length - 1];
    if (last && barTime === last.t) {
      last.c = price; last.h = Math.max(last.h, price); last.l = Math.min(last.l, price);
    } else if (!last || barTime > last.t) {
      this.bars.push({ t: barTime, o: price, h: price, l: price, c: price, v: 0 });
    }
    this.schedule();
  }

  bar(b) {
    const i = this.bars.findIndex((x) => x.t === b.t);
    if (i >= 0) this.bars[i] = { ...b };
    else if (!this.bars.length || b.t > this.bars[this.bars.length - 1].t) this.bars.push({ ...b });
    this.schedule();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  draw() {
    const c = this.canvas, dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight;
    if (!w || !h) return;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = THEME.bg; g.fillRect(0, 0, w, h);
    g.font = "11px system-ui, sans-serif";
    if (!this.bars.length) { g.fillStyle = THEME.text; g.fillText("waiting for data…", 10, 20); return; }
    const plotW = w - AXIS_W;
    const n = Math.min(this.bars.length, Math.max(10, Math.floor(plotW / MIN_CANDLE)));
    const start = this.bars.length - n;
    const step = plotW / n;
    const xOf = (i) => (i - start + 0.5) * step;
    const panes = this.indicators.filter((ind) => !ind.is_overlay).slice(0, 3);
    const paneH = panes.length ? Math.min(120, (h - TIME_H) * 0.2) : 0;
    const priceH = h - TIME_H - panes.length * (paneH + PANE_GAP);
    const shown = this.bars.slice(start);
    // price scale: candles and overlays
    let [lo, hi] = range(shown.flatMap((b) => [b.l, b.h]));
    for (const ind of this.indicators.filter((x) => x.is_overlay)) {
      for (const ln of ind.lines || []) [lo, hi] = range(ln.values.slice(start), lo, hi);
    }
    if (lo === hi) { lo -= 1; hi += 1; }
    const pad = (hi - lo) * 0.06; lo -= pad; hi += pad;
    const yOf = (v) => 4 + (1 - (v - lo) / (hi - lo)) * (priceH - 8);
    this.grid(g, plotW, 0, priceH, lo, hi, yOf);
    // volume at the foot of the price pane
    const vmax = Math.max(...shown.map((b) => b.v || 0), 1e-12);
    const bodyW = Math.max(1, step * 0.7);
    shown.forEach((b, k) => {
      const i = start + k, x = xOf(i), vh = ((b.v || 0) / vmax) * priceH * 0.2;
      g.fillStyle = b.c >= b.o ? THEME.volUp : THEME.volDown;
      g.fillRect(x - bodyW / 2, priceH - vh, bodyW, vh);
    });
    // candles
    shown.forEach((b, k) => {
      const x = xOf(start + k), color = b.c >= b.o ? THEME.up : THEME.down;
      g.strokeStyle = color; g.fillStyle = color;
      g.beginPath(); g.moveTo(Math.round(x) + 0.5, yOf(b.h)); g.lineTo(Math.round(x) + 0.5, yOf(b.l)); g.stroke();
      const top = yOf(Math.max(b.o, b.c)), bot = yOf(Math.min(b.o, b.c));
      g.fillRect(x - bodyW / 2, top, bodyW, Math.max(1, bot - top));
    });
    // overlays
    let color = 0;
    for (const ind of this.indicators.filter((x) => x.is_overlay)) {
      for (const ln of ind.lines || []) this.line(g, ln.values, start, xOf, yOf, THEME.lines[color++ % THEME.lines.length]);
    }
    // markers (alerts fired, fills)
    const index = new Map(this.bars.map((b, i) => [b.t, i]));
    for (const m of this.markers) {
      const i = index.get(m.t);
      if (i === undefined || i < start) continue;
      const x = xOf(i), y = yOf(m.price);
      g.fillStyle = m.kind === "fill" ? THEME.fill : THEME.alert;
      g.beginPath();
      if (m.kind === "fill") g.arc(x, y, 4, 0, Math.PI * 2); else { g.moveTo(x, y - 6); g.lineTo(x - 5, y + 3); g.lineTo(x + 5, y + 3); }
      g.fill();
    }
    // last price line and label
    const last = this.bars[this.bars.length - 1];
    const ly = yOf(last.c);
    g.strokeStyle = THEME.last; g.setLineDash([4, 3]);
    g.beginPath(); g.moveTo(0, ly); g.lineTo(plotW, ly); g.stroke(); g.setLineDash([]);
    g.fillStyle = THEME.last; g.fillRect(plotW + 1, ly - 8, AXIS_W - 2, 16);
    g.fillStyle = "#131722"; g.fillText(fmt(last.c), plotW + 4, ly + 4);
    // indicator panes
    let top = priceH + PANE_GAP;
    for (const ind of panes) { this.pane(g, ind, start, xOf, plotW, top, paneH); top += paneH + PANE_GAP; }
    this.timeAxis(g, shown, start, xOf, h - TIME_H + 13, plotW);
    if (this.drawnPrice !== last.c) {
      const log = paintLog();
      log.push({ symbol: this.symbol, price: last.c, at_ms: performance.timeOrigin + performance.now() });
      if (log.length > 2000) log.splice(0, log.length - 2000);
      this.drawnPrice = last.c;
    }
    if (!this.firstPaint) { this.firstPaint = true; performance.mark("chartgen:first-chart"); }
  }

  grid(g, plotW, top, height, lo, hi, yOf) {
    g.strokeStyle = THEME.grid; g.fillStyle = THEME.text; g.lineWidth = 1;
    for (let k = 0; k <= 4; k++) {
      const v = lo + ((hi - lo) * k) / 4, y = Math.round(yOf(v)) + 0.5;
      g.beginPath(); g.moveTo(0, y); g.lineTo(plotW, y); g.stroke();
      g.fillText(fmt(v), plotW + 4, y + 4);
    }
  }

  line(g, values, start, xOf, yOf, color) {
    g.strokeStyle = color; g.lineWidth = 1.3; g.beginPath();
    let on = false;
    for (let i = start; i < values.length; i++) {
      const v = values[i];
      if (v === null || v === undefined) { on = false; continue; }
      if (on) g.lineTo(xOf(i), yOf(v)); else { g.moveTo(xOf(i), yOf(v)); on = true; }
    }
    g.stroke(); g.lineWidth = 1;
  }

  pane(g, ind, start, xOf, plotW, top, height) {
    const series = [...(ind.lines || []).map((l) => l.values), ...(ind.histogram || []).map((x) => x.values)];
    let [lo, hi] = ind.y_range && ind.y_range[0] !== null ? ind.y_range : [Infinity, -Infinity];
    for (const s of series) [lo, hi] = range(s.slice(start), lo, hi);
    for (const l of ind.hlines || []) if (l.y !== null) [lo, hi] = range([l.y], lo, hi);
    if (!isFinite(lo) || lo === hi) { lo = (isFinite(lo) ? lo : 0) - 1; hi = lo + 2; }
    const yOf = (v) => top + 3 + (1 - (v - lo) / (hi - lo)) * (height - 6);
    g.strokeStyle = THEME.grid; g.strokeRect(0.5, top + 0.5, plotW - 1, height - 1);
    g.fillStyle = THEME.text; g.fillText(ind.key || ind.label || "", 6, top + 12);
    g.fillText(fmt(hi), plotW + 4, top + 10); g.fillText(fmt(lo), plotW + 4, top + height - 2);
    for (const l of ind.hlines || []) {
      if (l.y === null) continue;
      g.setLineDash([2, 3]); g.beginPath(); g.moveTo(0, yOf(l.y)); g.lineTo(plotW, yOf(l.y)); g.stroke(); g.setLineDash([]);
    }
    const zero = yOf(Math.min(Math.max(0, lo), hi));
    for (const hst of ind.histogram || []) {
      hst.values.forEach((v, i) => {
        if (i < start || v === null) return;
        g.fillStyle = v >= 0 ? THEME.volUp : THEME.volDown;
        const y = yOf(v); g.fillRect(xOf(i) - 1.5, Math.min(y, zero), 3, Math.abs(zero - y));
      });
    }
    let color = 0;
    for (const ln of ind.lines || []) this.line(g, ln.values, start, xOf, yOf, THEME.lines[color++ % THEME.lines.length]);
    for (const s of ind.signals || []) {
      if (s.x === undefined || s.x < start || s.y === null) continue;
      g.fillStyle = /buy|bull|oversold|up/i.test(s.label) ? THEME.up : THEME.down;
      g.beginPath(); g.arc(xOf(s.x), yOf(s.y), 2.5, 0, Math.PI * 2); g.fill();
    }
  }

  timeAxis(g, shown, start, xOf, y, plotW) {
    g.fillStyle = THEME.text;
    const every = Math.max(1, Math.ceil(shown.length / Math.max(2, Math.floor(plotW / 90))));
    shown.forEach((b, k) => {
      if (k % every || b.t === null) return;
      const d = new Date(b.t * 1000);
      const label = `${String(d.getUTCHours()).padStart(2, "0")}:${String(d.getUTCMinutes()).padStart(2, "0")}`;
      g.fillText(label, xOf(start + k) - 14, y);
    });
  }
}
