// The Trading panel: the halt switch (halt / resume, its holder), per-principal suspensions, and every
// principal's active schedules with their next run (cancel). The operator acts with the operator's authority.

const orderText = (o) => {
  const amount = o.quantity !== undefined ? o.quantity : `quote ${o.quote_quantity}`;
  return `${o.side} ${o.symbol} ${amount} ${o.type || "market"}${o.price ? " @ " + o.price : ""}`;
};

// ui: the page's helpers (app.js): call(method, path, body), el(tag, attrs, ...kids), fillTable(id, rows), when(t), $(css)
export function tradingPanel(ui) {
  const { call, el, fillTable, when, $ } = ui;
  const who = (name, principal) => (name ? `${name} (${principal})` : principal || "");

  function showHalt(h) {
    const state = $("#halt-state");
    $("#halt-detail").textContent = h && h.halted && h.lifted_by ? `Who may resume: ${h.lifted_by}.` : "";
    if (!h) {
      state.textContent = "No halt switch in this daemon.";
      state.className = "muted";
      return;
    }
    if (h.halted) {
      let text = `Trading HALTED by ${h.holder || "?"}${h.holder_name ? ` (${h.holder_name})` : ""}: ${h.reason || "no reason given"} (since ${when(h.since)})`;
      if (h.cancel_pending) text += " — cancelling open orders…";
      state.textContent = text;
      state.className = "halted";
    } else {
      state.textContent = "Trading runs: orders are admitted.";
      state.className = "running";
    }
    $("#resume-button").disabled = !h.halted;
    $("#halt-button").textContent = h.halted ? "Halt again" : "Halt trading";
  }

  async function load() {
    const t = await call("GET", "/ui/api/trading");
    $("#trading-off").hidden = t.running;
    $("#trading-off").textContent = t.note || "";
    $("#halt-form").hidden = !t.halt;
    showHalt(t.halt);

    const form = $("#suspend-form");
    form.hidden = t.suspensions === null;
    const free = t.principals.filter((p) => !p.suspended);
    $("#suspend-principal").replaceChildren(...free.map((p) => el("option", { value: p.principal }, `${p.name} (${p.kind} ${p.principal})`)));
    $("#suspend-button").disabled = !free.length;
    fillTable("suspensions", (t.suspensions || []).map((s) => el("tr", {},
      el("td", {}, s.principal), el("td", {}, s.name || ""), el("td", {}, s.reason || ""), el("td", {}, s.by || ""), el("td", {}, when(s.since)),
      el("td", {}, el("button", { type: "button", onclick: () => unsuspend(s.principal), "aria-label": `Unsuspend ${s.name || s.principal}` }, "Unsuspend")))));

    fillTable("schedules", (t.schedules || []).map((s) => el("tr", {},
      el("td", {}, s.schedule_id), el("td", {}, who(s.owner_name, s.owner)), el("td", {}, orderText(s.order)),
      el("td", {}, s.trigger), el("td", {}, s.next_run_at ? when(s.next_run_at) : "none"),
      el("td", { class: "num" }, s.max_runs ? `${s.runs_done} of ${s.max_runs}` : `${s.runs_done}`),
      el("td", {}, el("button", { type: "button", onclick: () => cancelSchedule(s.schedule_id), "aria-label": `Cancel schedule ${s.schedule_id}` }, "Cancel")))));
  }

  async function act(errorId, fn) {
    $(errorId).textContent = "";
    try { await fn(); } catch (e) { $(errorId).textContent = e.message; }
    await load();
  }

  const unsuspend = (principal) => act("#suspend-error", () => call("DELETE", `/ui/api/trading/suspensions/${encodeURIComponent(principal)}`));
  const cancelSchedule = (id) => act("#schedule-error", () => call("DELETE", `/ui/api/trading/schedules/${encodeURIComponent(id)}`));

  $("#halt-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const body = { cancel_open: $("#halt-cancel-open").checked };
    if ($("#halt-reason").value) body.reason = $("#halt-reason").value;
    act("#halt-error", async () => {
      await call("POST", "/ui/api/trading/halt", body);
      $("#halt-reason").value = ""; $("#halt-cancel-open").checked = false;
    });
  });
  $("#resume-button").addEventListener("click", () => act("#halt-error", () => call("POST", "/ui/api/trading/resume")));
  $("#suspend-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const body = { principal: $("#suspend-principal").value, cancel_open: $("#suspend-cancel-open").checked };
    if ($("#suspend-reason").value) body.reason = $("#suspend-reason").value;
    act("#suspend-error", async () => {
      await call("POST", "/ui/api/trading/suspensions", body);
      $("#suspend-reason").value = ""; $("#suspend-cancel-open").checked = false;
    });
  });
  return load;
}
