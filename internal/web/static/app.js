// gpuq dashboard: live updates without a reload. The server renders every
// fragment (escaped by html/template); this script only fetches fragments
// again when an event arrives, and appends job output as text nodes.
"use strict";
(function () {
  const conn = document.getElementById("conn");
  function setConn(state, text) {
    if (!conn) return;
    conn.dataset.state = state;
    conn.textContent = text;
  }

  // refresher fetches el's fragment again, at most one fetch at a time;
  // a request during a fetch makes one more fetch after it.
  function refresher(el) {
    let busy = false, again = false;
    async function run() {
      if (busy) { again = true; return; }
      busy = true;
      try {
        do {
          again = false;
          const r = await fetch(el.dataset.refresh, {cache: "no-store"});
          if (r.ok) {
            el.innerHTML = await r.text(); // server-rendered, already escaped
            el.dispatchEvent(new CustomEvent("gpuq:refreshed", {bubbles: true}));
          }
        } while (again);
      } catch (e) {
        setConn("error", "update failed: " + e);
      } finally {
        busy = false;
      }
    }
    let timer = null;
    return function () { // coalesce bursts of events into one fetch
      if (timer) return;
      timer = setTimeout(() => { timer = null; run(); }, 150);
    };
  }

  const live = document.getElementById("live");
  const usage = document.getElementById("usage");
  const job = document.getElementById("job");
  const refreshLive = live ? refresher(live) : null;
  const refreshUsage = usage ? refresher(usage) : null;
  const refreshJob = job ? refresher(job) : null;
  const finals = new Set(["succeeded", "failed", "cancelled", "rejected"]);

  const es = new EventSource("/events");
  es.addEventListener("open", () => setConn("live", "live"));
  es.addEventListener("error", () => setConn("reconnecting", "reconnecting…"));
  es.addEventListener("gpuq", (m) => {
    const ev = JSON.parse(m.data);
    if (refreshLive) refreshLive();
    if (refreshUsage && finals.has(ev.type)) refreshUsage();
    if (refreshJob && ev.job === job.dataset.job) refreshJob();
  });
  // Heartbeats and the scheduler's explanations change without events:
  // every 5 s, and every second while a waiting job has no explanation yet.
  setInterval(() => { if (refreshLive) refreshLive(); if (refreshJob) refreshJob(); }, 5000);
  if (refreshUsage) setInterval(refreshUsage, 15000);
  function soon() {
    const q = document.querySelector("#queue[data-unseen]");
    if (q && Number(q.dataset.unseen) > 0 && refreshLive) setTimeout(refreshLive, 1000);
  }
  document.addEventListener("gpuq:refreshed", (e) => { if (e.target === live) soon(); });
  soon();

  // A job's output: follow the attempt the page shows, after the chunks
  // it already has; start following once the job has an attempt.
  const out = document.getElementById("output");
  const outEnd = document.getElementById("output-end");
  let following = null;
  function follow(attempt, skip) {
    if (following) following.close();
    if (skip === 0) out.textContent = "";
    out.dataset.attempt = String(attempt);
    outEnd.textContent = "running…";
    const src = new EventSource("/jobs/" + encodeURIComponent(out.dataset.job) +
      "/output?attempt=" + attempt + "&skip=" + skip);
    following = src;
    src.addEventListener("chunk", (m) => {
      const c = JSON.parse(m.data);
      const span = document.createElement("span");
      span.className = c.stream === "stderr" ? "stderr" : "stdout";
      span.textContent = c.text; // text, never markup
      out.appendChild(span);
    });
    src.addEventListener("end", (m) => {
      const e = JSON.parse(m.data);
      outEnd.textContent = "ended: " + e.end + (e.truncated ? " (output past the worker's cap was dropped)" : "");
      out.dataset.ended = "true";
      src.close();
    });
    src.addEventListener("failure", (m) => {
      outEnd.textContent = JSON.parse(m.data);
      src.close();
    });
  }
  if (out) {
    const attempt = Number(out.dataset.attempt);
    if (attempt > 0 && out.dataset.ended !== "true") follow(attempt, Number(out.dataset.skip));
    document.addEventListener("gpuq:refreshed", () => {
      const st = document.getElementById("job-state");
      const a = Number((st && st.dataset.attempt) || 0);
      if (a > Number(out.dataset.attempt)) follow(a, 0);
    });
  }
})();
