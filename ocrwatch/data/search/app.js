// The search page: search as you type, filters, pages of hits, open a hit.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const fields = ["q", "name", "folder", "type", "from", "to"];
  let page = 1;
  let seq = 0;
  const per = new URLSearchParams(location.search).get("per"); // hits a page (default 20)
  let inflight = null;
  // The question last asked. A field fires "change" when it loses focus, after the
  // "input" events that asked already; asked again, the hits were drawn anew under the
  // pointer, and the click that took the focus away was lost.
  let asked = null;

  function params() {
    const p = new URLSearchParams();
    for (const f of fields) {
      const v = $(f).value.trim();
      if (v) p.set(f, v);
    }
    p.set("page", String(page));
    p.set("prefix", "1"); // the last word as typed so far is a prefix
    if (per) p.set("per", per);
    return p;
  }

  async function run() {
    const mine = ++seq;
    const p = params();
    asked = p.toString();
    document.body.dataset.asked = String(mine); // for tests: a question was put
    // Nothing asked yet: the files read last, to pick up where one left off.
    const recent = !p.get("q") && !p.get("name");
    let reply;
    if (inflight) inflight.abort(); // only the latest keystroke's answer matters
    inflight = new AbortController();
    try {
      const r = await fetch(recent ? "/api/recent" : "/api/search?" + p.toString(),
                            { credentials: "same-origin", signal: inflight.signal });
      reply = await r.json();
      if (!r.ok) throw new Error(reply.error || r.statusText);
    } catch (e) {
      if (mine !== seq || e.name === "AbortError") return;
      $("summary").textContent = String(e.message || e);
      $("summary").className = "error";
      return;
    }
    if (mine !== seq) return; // a later keystroke's answer wins
    render(reply);
    document.body.dataset.rendered = String(mine); // for tests and the benchmark
  }

  function render(reply) {
    const list = $("hits");
    const tpl = $("hit");
    const items = reply.hits.map((h) => {
      const li = tpl.content.firstElementChild.cloneNode(true);
      li.dataset.job = h.job_id;
      li.dataset.page = h.page;
      const img = li.querySelector(".thumb");
      if (h.thumb) img.src = h.thumb; else img.classList.add("none");
      const name = li.querySelector(".name");
      name.textContent = h.name;
      name.title = h.path;
      name.addEventListener("click", (ev) => { ev.preventDefault(); open(h, "original"); });
      li.querySelector(".folder").textContent = h.folder;
      li.querySelector(".where").textContent = reply.recent
        ? (h.pages > 1 ? `${h.pages} pages` : "1 page")
        : (h.pages > 1 ? `page ${h.page} of ${h.pages}` : "1 page");
      li.querySelector(".date").textContent = h.date || "";
      const side = li.querySelector(".sidecar");
      if (h.sidecar) side.addEventListener("click", (ev) => { ev.preventDefault(); open(h, "md"); });
      else side.remove();
      const doubt = li.querySelector(".doubt");
      if (h.doubt) { doubt.hidden = false; doubt.title = h.doubt; } // its reason on hover
      li.querySelector(".snippet").innerHTML = h.snippet; // escaped by the server, <mark> only
      return li;
    });
    list.replaceChildren(...items);
    const first = (reply.page - 1) * reply.per + 1;
    $("summary").className = "";
    $("summary").textContent = reply.recent
      ? (items.length ? "Read last:" : "")
      : items.length
      ? `hits ${first}–${first + items.length - 1}${reply.more ? "" : " (all)"} · ${reply.ms} ms`
      : "no matches";
    $("pager").hidden = reply.page === 1 && !reply.more;
    $("prev").disabled = reply.page === 1;
    $("next").disabled = !reply.more;
    $("pageno").textContent = `page ${reply.page}`;
  }

  async function open(hit, what) {
    const r = await fetch("/api/open", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ job_id: hit.job_id, page: hit.page, what: what }),
    });
    if (!r.ok) {
      const reply = await r.json().catch(() => ({}));
      $("summary").textContent = reply.error || "could not open the file";
      $("summary").className = "error";
    }
  }

  function soon() {
    page = 1;
    if (params().toString() === asked) return; // nothing new to ask
    run(); // search as you type: every keystroke asks, a newer question cancels an older
  }

  async function loadFilters() {
    const r = await fetch("/api/folders", { credentials: "same-origin" });
    if (!r.ok) return;
    const reply = await r.json();
    // The watched folders' tree: each folder indented under its inbox, its full name
    // (from the inbox) shown when pointed at.
    for (const f of reply.folders) {
      const name = f.depth ? f.label.split("/").pop() : f.label;
      const option = new Option("\u00a0\u00a0".repeat(f.depth) + name, f.path);
      option.title = f.label;
      $("folder").add(option);
    }
    for (const t of reply.types) $("type").add(new Option(t.toUpperCase(), t));
  }

  for (const f of fields) {
    $(f).addEventListener("input", soon);
    $(f).addEventListener("change", soon);
  }
  $("filters").addEventListener("submit", (ev) => ev.preventDefault());
  $("prev").addEventListener("click", () => { page = Math.max(1, page - 1); run(); });
  $("next").addEventListener("click", () => { page += 1; run(); });
  loadFilters();
  run(); // the files read last, until something is typed
})();
