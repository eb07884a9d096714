// Flow web UI: live refresh of the runs list, time travel and live updates on a run page,
// signal and cancel. Plain script, no dependencies; the pages work without it, only less live.
"use strict";
(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  // csrf is the page's CSRF token, which every POST carries (the history service checks it).
  const csrf = () => { const m = document.querySelector('meta[name="flow-csrf"]'); return m ? m.content : ""; };
  const live = (on) => { const el = $("#live"); if (el) el.classList.toggle("on", on); };

  // Runs list: refresh the rows every 2 s while the tab is visible.
  function runsPage(box) {
    const form = $("#filters");
    if (form) {
      form.querySelectorAll("select").forEach((s) => s.addEventListener("change", () => form.submit()));
    }
    if (new URLSearchParams(location.search).has("cursor")) return; // a later page stays put
    const q = box.dataset.query;
    const url = "/ui/?" + (q ? q + "&" : "") + "fragment=rows";
    let busy = false;
    async function refresh() {
      if (busy || document.visibilityState !== "visible") return;
      busy = true;
      try {
        const res = await fetch(url, { headers: { Accept: "text/html" } });
        if (res.ok) { box.innerHTML = await res.text(); live(true); } else { live(false); }
      } catch (e) { live(false); } finally { busy = false; }
    }
    live(true);
    setInterval(refresh, 2000);
  }

  // Run page.
  function runPage(view) {
    const runID = view.dataset.run;
    const base = "/ui/runs/" + encodeURIComponent(runID);
    let at = Number(view.dataset.at), last = Number(view.dataset.last);
    let following = view.dataset.following === "true";
    let loading = null, again; // again: a show asked for while one loads (null: the latest)
    // reveal keeps a page opened with ?reveal=secrets (hook tokens shown) so as it moves.
    const reveal = new URLSearchParams(location.search).get("reveal") === "secrets" ? "&reveal=secrets" : "";

    // show loads the view at seq n (null: the latest, following the run).
    async function show(n) {
      if (loading) { again = n; return; }
      const url = base + "?fragment=view" + (n == null ? "" : "&at=" + n) + reveal;
      loading = url;
      try {
        const res = await fetch(url, { headers: { Accept: "text/html" } });
        const html = await res.text();
        if (!res.ok) { message(false, "Loading seq " + n + " failed (" + res.status + ")"); return; }
        swap(html);
        history.replaceState(null, "", base + (following ? (reveal ? "?" + reveal.slice(1) : "") : "?at=" + at + reveal));
      } catch (e) {
        message(false, "Loading the run failed: " + e);
      } finally {
        loading = null;
        if (again !== undefined) { const a = again; again = undefined; show(a); }
      }
    }

    function swap(html) {
      const open = new Set([...document.querySelectorAll("#run-view details[open]")].map((d) => d.dataset.seq));
      const old = $("#run-view");
      const tmp = document.createElement("div");
      tmp.innerHTML = html.trim();
      const fresh = tmp.firstElementChild;
      fresh.querySelectorAll("details[data-seq]").forEach((d) => { if (open.has(d.dataset.seq)) d.open = true; });
      old.replaceWith(fresh);
      at = Number(fresh.dataset.at); last = Number(fresh.dataset.last);
      following = fresh.dataset.following === "true";
      const acts = $("#actions");
      if (acts) acts.hidden = fresh.dataset.latestTerminal === "true" || !!$("#actions-off");
    }

    function go(n) {
      if (n == null || n >= last) { following = true; show(null); return; }
      n = Math.max(1, Math.min(last, n));
      following = false;
      show(n);
    }

    document.addEventListener("click", (ev) => {
      const t = ev.target.closest("[data-at],[data-latest]");
      if (!t || !$("#run-view").contains(t) || t.disabled) return;
      ev.preventDefault();
      if (t.hasAttribute("data-latest")) go(null); else go(Number(t.dataset.at));
    });
    document.addEventListener("input", (ev) => {
      if (ev.target.id === "seq-slider") { const i = $("#seq-input"); if (i) i.value = ev.target.value; }
    });
    document.addEventListener("change", (ev) => {
      if (ev.target.id === "seq-slider") go(Number(ev.target.value));
    });
    document.addEventListener("submit", (ev) => {
      if (ev.target.id === "seq-form") { ev.preventDefault(); go(Number($("#seq-input").value)); }
    });
    document.addEventListener("keydown", (ev) => {
      if (ev.target.closest("input,textarea,select") || ev.altKey || ev.ctrlKey || ev.metaKey) return;
      if (ev.key === "ArrowLeft") { ev.preventDefault(); go(at - 1); }
      else if (ev.key === "ArrowRight") { ev.preventDefault(); go(at + 1); }
      else if (ev.key === "Home") { ev.preventDefault(); go(1); }
      else if (ev.key === "End") { ev.preventDefault(); go(null); }
    });

    // Live: the run's events over SSE from the last one shown; each refreshes the view.
    let es = null, timer = null;
    const terminal = new Set(["run.completed", "run.failed", "run.cancelled", "run.continued_as_new"]);
    function refreshSoon() {
      clearTimeout(timer);
      timer = setTimeout(() => show(following ? null : at), 120);
    }
    function watch() {
      if ($("#run-view").dataset.latestTerminal === "true") { live(false); return; }
      es = new EventSource("/v1/runs/" + encodeURIComponent(runID) + "/watch?after=" + last);
      const types = (view.dataset.types || "").split(",").filter(Boolean);
      types.forEach((t) => es.addEventListener(t, (m) => {
        const seq = Number(m.lastEventId);
        if (seq > last) last = seq;
        refreshSoon();
        if (terminal.has(t)) { es.close(); live(false); }
      }));
      es.onopen = () => live(true);
      es.onerror = () => { es.close(); live(false); setTimeout(watch, 2000); };
    }
    watch();

    // Signal and cancel: POST JSON to the history service, which forwards to the ingress.
    async function post(path, body, what) {
      try {
        const res = await fetch(base + path, { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json", "X-Flow-CSRF": csrf() }, body: JSON.stringify(body) });
        let rep = {};
        try { rep = await res.json(); } catch (e) { rep = { error: { code: String(res.status), message: res.statusText } }; }
        if (!res.ok || rep.error) {
          message(false, what + " refused: " + (rep.error ? rep.error.message + " (" + rep.error.code + ")" : res.status));
          return false;
        }
        message(true, what + " recorded in run " + rep.run_id + ".");
        refreshSoon();
        return true;
      } catch (e) {
        message(false, what + " failed: " + e);
        return false;
      }
    }
    const sig = $("#signal-form");
    if (sig) sig.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const name = $("#signal-name").value.trim();
      const raw = $("#signal-payload").value.trim();
      let payload = null;
      if (raw !== "") {
        try { payload = JSON.parse(raw); } catch (e) { message(false, "The payload is not JSON: " + e.message); return; }
      }
      const btn = $("#signal-send");
      btn.disabled = true;
      if (await post("/signal", { name: name, payload: payload }, "Signal \u201c" + name + "\u201d")) $("#signal-payload").value = "";
      btn.disabled = false;
    });
    const can = $("#cancel-form");
    if (can) can.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!confirm("Request cancellation of run " + runID + "?")) return;
      const btn = $("#cancel-send");
      btn.disabled = true;
      await post("/cancel", { reason: $("#cancel-reason").value.trim() }, "Cancellation");
      btn.disabled = false;
    });
    for (const op of ["pause", "unpause"]) {
      const f = $("#" + op + "-form");
      if (f) f.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        const btn = $("#" + op + "-send");
        const reason = $("#" + op + "-reason");
        btn.disabled = true;
        await post("/" + op, { reason: reason ? reason.value.trim() : "" }, op === "pause" ? "Pause" : "Unpause");
        btn.disabled = false;
      });
    }
  }

  function message(ok, text) {
    const el = $("#action-msg");
    if (!el) return;
    el.hidden = false;
    el.className = "msg " + (ok ? "ok" : "err");
    el.textContent = text;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const runs = $("#runs"), view = $("#run-view");
    if (runs) runsPage(runs);
    if (view) runPage(view);
  });
})();
