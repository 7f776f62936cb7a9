// MACP web view. Plain DOM, no framework, no build step. Everything a room contains is written
// by agents and may hold anything: it is only ever put on the page as text (textContent,
// createTextNode), never parsed as HTML.
"use strict";

const $main = document.getElementById("main");
const $banner = document.getElementById("banner");
const $crumb = document.getElementById("crumb");
const $user = document.getElementById("user");
let live = null; // the running live-update loop of the open room: {room, stop}
let me = null;

// ------------------------------------------------------------------------------------------
// Small helpers

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "on") for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else if (k === "href" || k === "src") e.setAttribute(k, safeUrl(v));
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Only URLs of this server or http(s) ones: never `javascript:` or `data:` from room content.
function safeUrl(u) {
  const s = String(u);
  if (s.startsWith("/") || s.startsWith("#") || /^https?:\/\//i.test(s)) return s;
  return "#";
}

function badge(text, cls) { return el("span", { class: "badge " + (cls || text) }, text); }
function when(t) { return t ? new Date(t).toLocaleString() : ""; }
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
function showError(msg) { $banner.textContent = msg; $banner.hidden = false; }
function hideError() { $banner.hidden = true; }

async function api(path, opts) {
  const o = Object.assign({ headers: {} }, opts || {});
  if (o.body !== undefined) {
    o.method = o.method || "POST";
    o.headers["Content-Type"] = "application/json";
    o.headers["X-MACP-Web"] = "1";
    // A signed-in browser session's changes carry its CSRF token (from /api/me).
    if (me && me.csrf) o.headers["X-MACP-CSRF"] = me.csrf;
    o.body = JSON.stringify(o.body);
  }
  o.credentials = "same-origin";
  const r = await fetch(path, o);
  let data = null;
  try { data = await r.json(); } catch (_) { data = null; }
  if (!r.ok) {
    const e = (data && data.error) || { code: "http_" + r.status, message: r.statusText };
    const err = new Error(e.code + ": " + e.message);
    err.code = e.code; err.status = r.status; err.signIn = e.sign_in;
    if (r.status === 401 && me) { me = null; setTimeout(route, 0); }
    throw err;
  }
  return data;
}

function act(promise, after) {
  hideError();
  return promise.then(after).catch((e) => showError(e.message));
}

// ------------------------------------------------------------------------------------------
// Routing

function stopLive() { if (live) { live.stop = true; live = null; } }

async function route() {
  stopLive();
  hideError();
  const h = location.hash || "#/";
  try {
    if (!me) {
      me = await api("/api/me");
      clear($user).append(me.user_id + (me.can_write ? "" : " (read only)"));
      if (me.csrf) {
        const out = el("button", { id: "signout", type: "button" }, "Sign out");
        out.addEventListener("click", () => act(api("/auth/logout", { body: {} }), () => { me = null; clear($user); route(); }));
        $user.append(" ", out);
      }
    }
  } catch (e) {
    if (e.status === 401) return signIn(e.signIn);
    return showError(e.message);
  }
  const m = h.match(/^#\/room\/([0-9a-fA-F-]{36})/);
  if (m) return roomPage(m[1]);
  return roomsPage();
}

function signIn(path) {
  stopLive();
  $crumb.textContent = "";
  clear($user);
  if (path) {
    // The server runs the sign-in (code + PKCE) and comes back to this place in the page.
    const href = path + "?next=" + encodeURIComponent(location.hash || "#/");
    clear($main).append(el("div", { class: "panel", id: "signin" },
      el("h4", {}, "Sign in"),
      el("p", {}, "This server requires authentication. Sign in with your organisation's account:"),
      el("p", {}, el("a", { href: href, id: "signin-link", class: "button" }, "Sign in")),
    ));
    return;
  }
  clear($main).append(el("div", { class: "panel", id: "signin" },
    el("h4", {}, "Sign in"),
    el("p", {}, "This server requires authentication, and no browser sign-in is configured (--web-client-id):"),
    el("p", {}, "reach the room through your agent, or with `macp` commands and your token."),
  ));
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);

// ------------------------------------------------------------------------------------------
// Rooms

async function roomsPage() {
  $crumb.textContent = "Rooms";
  const list = await api("/api/rooms").catch((e) => { showError(e.message); return []; });
  const cards = el("div", { class: "cards", id: "rooms" });
  for (const s of list) {
    const r = s.room;
    const phase = r.markers && r.markers.length ? r.markers[r.markers.length - 1] : null;
    const a = s.agents;
    cards.append(el("div", { class: "card", "data-room": r.room_id, on: { click: () => { location.hash = "#/room/" + r.room_id; } } },
      el("h3", {}, r.name || r.room_id),
      el("div", {}, badge(r.status, r.status), phase ? badge("phase: " + phase.label, "phase") : null,
        s.open_decisions.length ? badge(s.open_decisions.length + " open decision(s)", "blocked") : null),
      el("div", { class: "objective" }, r.objective),
      el("div", { class: "muted" },
        `${a.total} agents: ${a.active} active, ${a.idle} idle, ${a.blocked} blocked, ${a.done} done, ${a.stale} stale · `,
        `${s.finding_count} findings · latest ${when(s.latest_activity)}`),
    ));
  }
  clear($main).append(list.length ? cards : el("p", { class: "muted" }, "No rooms yet. An agent creates one with create_room."));
  window.__macpRendered = performance.now();
}

// ------------------------------------------------------------------------------------------
// A room

async function roomPage(roomId) {
  const started = performance.now();
  const [ctx, page, decisions] = await Promise.all([
    api(`/api/rooms/${roomId}/context`),
    api(`/api/rooms/${roomId}/feed?limit=100`),
    api(`/api/rooms/${roomId}/decisions`),
  ]).catch((e) => { showError(e.message); return []; });
  if (!ctx) return;
  const room = ctx.room;
  $crumb.textContent = "Rooms › " + (room.name || room.room_id);
  const state = { roomId, room, ctx, findings: new Map(), tab: "feed", kind: "", agent: "" };

  const side = el("aside", { id: "side" });
  const body = el("section", { id: "body" });
  clear($main).append(
    el("div", { class: "panel", id: "roomhead" },
      el("div", {}, badge(room.status, room.status), ctx.phase ? badge("phase " + ctx.phase.marker_id + ": " + ctx.phase.label, "phase") : null),
      el("div", { class: "objective", id: "objective" }, room.objective)),
    el("div", { class: "layout" }, body, side));
  renderSide(side, state, decisions);
  renderBody(body, state, page);
  window.__macpRendered = performance.now() - started;
}

function renderSide(side, state, decisions) {
  const { roomId, ctx, room } = state;
  clear(side);
  // Decisions first: the people's queue.
  const open = decisions.filter((d) => !d.answer);
  const dp = el("div", { class: "panel", id: "decisions" }, el("h4", {}, `Open decisions (${open.length})`));
  for (const d of open) {
    const input = el("input", { placeholder: "your answer", name: "answer" });
    const form = el("form", { class: "inline", on: { submit: (ev) => {
      ev.preventDefault();
      act(api(`/api/rooms/${roomId}/decisions/${d.decision_id}`, { body: { answer: input.value } }), () => route());
    } } }, input, el("button", { class: "primary", type: "submit" }, "Answer"));
    const opts = (d.options || []).map((o) => el("button", { type: "button", on: { click: () => { input.value = o; } } }, o));
    dp.append(el("div", { class: "decision " + d.urgency, "data-decision": d.decision_id },
      el("div", {}, d.question), el("div", { class: "muted" }, `asked by ${d.asked_by} · ${d.urgency} · ${when(d.asked_at)}`),
      el("div", {}, opts), form));
  }
  const answered = decisions.filter((d) => d.answer).slice(-5);
  for (const d of answered) {
    dp.append(el("div", { class: "muted" }, `✓ ${d.question} → ${d.answer.text} (${d.answer.channel}, ${d.answer.user_id})`));
  }
  side.append(dp);

  const ag = el("div", { class: "panel", id: "agents" }, el("h4", {}, `Agents (${ctx.agents.counts.total})`));
  for (const a of ctx.agents.items) {
    const stale = ctx.agents.stale.includes(a.agent_id);
    ag.append(el("div", {}, el("b", {}, a.agent_id), " ", badge(a.agent_status, a.agent_status), stale ? badge("stale", "stale") : null,
      a.status_reason ? el("div", { class: "muted" }, a.status_reason) : null));
  }
  side.append(ag);

  const cl = el("div", { class: "panel", id: "claims" }, el("h4", {}, `Claims (${ctx.claims_total})`));
  for (const c of ctx.claims) {
    cl.append(el("div", {}, c.subject, el("div", { class: "muted" }, `${c.agent_id} until ${when(c.expires_at)} `,
      el("button", { type: "button", on: { click: () => act(api(`/api/rooms/${roomId}/release`, { body: { subject: c.subject } }), () => route()) } }, "Release"))));
  }
  side.append(cl);

  const steer = el("div", { class: "panel", id: "steer" }, el("h4", {}, "Steer"));
  if (room.status === "active") {
    const marker = el("input", { placeholder: "new phase, e.g. mitigation done, root cause next", maxlength: 120, name: "marker" });
    steer.append(el("form", { class: "inline", id: "mark", on: { submit: (ev) => { ev.preventDefault();
      act(api(`/api/rooms/${roomId}/steer`, { body: { marker: marker.value } }), () => route()); } } },
      marker, el("button", { type: "submit" }, "Mark phase")));
    const objective = el("input", { placeholder: "new objective", name: "objective" });
    steer.append(el("form", { class: "inline", on: { submit: (ev) => { ev.preventDefault();
      act(api(`/api/rooms/${roomId}/steer`, { body: { objective: objective.value } }), () => route()); } } },
      objective, el("button", { type: "submit" }, "Change objective")));
    const resolution = el("textarea", { placeholder: "resolution: what happened and what was done", name: "resolution" });
    const cause = el("input", { placeholder: "root-cause finding ids, comma-separated", name: "root_cause" });
    steer.append(el("form", { on: { submit: (ev) => { ev.preventDefault();
      const ids = cause.value.split(",").map((s) => s.trim()).filter(Boolean);
      act(api(`/api/rooms/${roomId}/close`, { body: { resolution: resolution.value || null, root_cause: ids } }), () => route()); } } },
      resolution, cause, el("button", { type: "submit" }, "Close room")));
  } else {
    if (room.resolution) steer.append(el("div", { class: "objective" }, "Resolution: " + room.resolution.summary));
    steer.append(el("button", { type: "button", on: { click: () => act(api(`/api/rooms/${roomId}/steer`, { body: { reopen: true } }), () => route()) } }, "Reopen"));
  }
  side.append(steer);
}

function renderBody(body, state, page) {
  const tabs = el("div", { class: "tabs" });
  const view = el("div", { id: "view" });
  const names = [["feed", "Live feed"], ["findings", "Findings"], ["search", "Search"], ["graph", "Entities"], ["artifacts", "Files"]];
  for (const [key, label] of names) {
    tabs.append(el("button", { type: "button", "data-tab": key, class: key === state.tab ? "on" : "", on: { click: () => {
      state.tab = key;
      for (const b of tabs.children) b.className = b.dataset.tab === key ? "on" : "";
      showTab(view, state, key);
    } } }, label));
  }
  body.append(tabs, view);
  renderFeed(view, state, page);
}

function showTab(view, state, key) {
  clear(view);
  if (key === "feed") return api(`/api/rooms/${state.roomId}/feed?limit=100`).then((p) => renderFeed(view, state, p)).catch((e) => showError(e.message));
  if (key === "findings") return renderFindings(view, state, {});
  if (key === "search") return renderSearch(view, state);
  if (key === "graph") return renderGraph(view, state);
  if (key === "artifacts") return renderArtifacts(view, state);
}

// A finding, as text, with its standing; its thread opens in place.
function findingRow(state, f, fresh) {
  const badges = [];
  if (f.hypothesis) badges.push(badge("hypothesis"));
  if (f.standing) badges.push(badge(f.standing.verdict === "refutes" ? "refuted" : f.standing.verdict === "confirms" ? "confirmed" : "superseded", f.standing.verdict));
  if (f.verdict) badges.push(badge(f.verdict + " " + (f.reply_to || "").slice(-6), f.verdict));
  for (const t of f.tags) badges.push(badge(t, "tag"));
  const thread = el("div", { class: "thread", hidden: true });
  const row = el("div", { class: "row finding" + (fresh ? " fresh" : ""), "data-finding": f.finding_id },
    el("div", { class: "meta" }, `#${f.seq} · ${f.agent_id} (${f.user_id}) · ${when(f.created_at)} `, badges,
      f.mentions && f.mentions.length ? " → " + f.mentions.join(", ") : ""),
    el("div", { class: "content" }, f.content),
    f.evidence.length ? el("div", { class: "meta evidence" }, "evidence: " + f.evidence.map((e) => e.kind + " " + e.ref).join(" · ")) : null,
    el("button", { type: "button", class: "linkish", on: { click: () => toggleThread(state, f, thread) } }, f.reply_to ? "thread (answers " + f.reply_to.slice(-6) + ")" : "thread"),
    f.erased ? null : el("button", { type: "button", class: "linkish erase", on: { click: () => eraseItem(state, { finding_id: f.finding_id }) } }, "erase"),
    thread);
  if (f.erased) row.classList.add("erased");
  return row;
}

// A person erases a finding or an artifact (anyone's): the reason is asked first, and the
// rows showing it are replaced by the notice the server answers.
function eraseItem(state, what) {
  const reason = window.prompt("Why erase this? Its text, evidence and files are deleted for good; the reason stays on the record (never repeat the secret in it).");
  if (!reason || !reason.trim()) return;
  act(api(`/api/rooms/${state.roomId}/erase`, { body: Object.assign({ reason }, what) }), (out) => showErased(what.finding_id || what.artifact_id, out.notice));
}

function showErased(id, notice) {
  for (const row of document.querySelectorAll(`[data-finding="${id}"], [data-artifact="${id}"]`)) {
    if (row.classList.contains("erased")) continue;
    row.classList.add("erased");
    for (const n of row.querySelectorAll(".evidence, .erase, img")) n.remove();
    const content = row.querySelector(".content");
    if (content) content.textContent = notice;
  }
}

async function toggleThread(state, f, box) {
  if (!box.hidden) { box.hidden = true; return; }
  const root = f.reply_to || f.finding_id;
  const page = await api(`/api/rooms/${state.roomId}/timeline?thread=${root}&limit=200`).catch((e) => { showError(e.message); return null; });
  if (!page) return;
  clear(box);
  for (const x of page.findings) if (x.finding_id !== f.finding_id) box.append(findingRow(state, x));
  if (!box.childNodes.length) box.append(el("div", { class: "muted" }, "no answers yet"));
  box.hidden = false;
}

function eventRow(e, fresh) {
  const cls = "row event" + (e.kind === "phase_marked" ? " marker" : "") + (fresh ? " fresh" : "");
  return el("div", { class: cls, "data-kind": e.kind, "data-agent": e.agent_id || "" },
    el("div", { class: "meta" }, `${when(e.at)} · `, el("span", { class: "kind" }, e.kind), ` · ${e.agent_id || e.user_id + " (person)"}`),
    el("div", { class: "content" }, e.summary));
}

function passes(state, kind, agent) {
  return (!state.kind || state.kind === kind) && (!state.agent || state.agent === agent);
}

function renderFeed(view, state, page) {
  clear(view);
  const kinds = ["", "finding_posted", "status_declared", "entity_added", "artifact_registered", "decision_asked", "decision_answered",
    "phase_marked", "work_claimed", "claim_released", "objective_changed", "room_closed", "room_reopened", "agent_joined", "relationship_added", "entities_merged"];
  const kindSel = el("select", { name: "kind", on: { change: () => { state.kind = kindSel.value; applyFilter(list, state); } } },
    kinds.map((k) => el("option", { value: k }, k || "every kind")));
  const agentSel = el("select", { name: "agent", on: { change: () => { state.agent = agentSel.value; applyFilter(list, state); } } },
    el("option", { value: "" }, "every agent"), state.ctx.agents.items.map((a) => el("option", { value: a.agent_id }, a.agent_id)));
  const list = el("div", { id: "feed" });
  const older = el("button", { type: "button", id: "older" }, "Load older");
  view.append(el("div", { class: "filters" }, kindSel, agentSel), list, older);
  kindSel.value = state.kind; agentSel.value = state.agent;

  const byId = new Map(page.findings.map((f) => [f.finding_id, f]));
  const rowOf = (e, fresh) => {
    if (e.kind === "finding_posted" && byId.has(e.finding_id)) {
      const r = findingRow(state, byId.get(e.finding_id), fresh);
      r.dataset.kind = e.kind; r.dataset.agent = e.agent_id || "";
      return r;
    }
    return eventRow(e, fresh);
  };
  // Newest first.
  for (const e of page.events.slice().reverse()) list.append(rowOf(e));
  applyFilter(list, state);
  let before = page.older;
  older.hidden = !before;
  older.addEventListener("click", async () => {
    const p = await api(`/api/rooms/${state.roomId}/feed?limit=100&before=${before}`).catch((e) => { showError(e.message); return null; });
    if (!p) return;
    for (const f of p.findings) byId.set(f.finding_id, f);
    for (const e of p.events.slice().reverse()) list.append(rowOf(e));
    applyFilter(list, state);
    before = p.older;
    older.hidden = !before;
  });
  if (page.cursor) startLive(state, page.cursor, list, byId);
}

function applyFilter(list, state) {
  for (const r of list.children) r.hidden = !passes(state, r.dataset.kind, r.dataset.agent);
}

// Live: a long poll on the room's feed; each answer comes the moment something commits.
function startLive(state, cursor, list, byId) {
  stopLive();
  const me_ = { room: state.roomId, stop: false };
  live = me_;
  (async () => {
    let c = cursor;
    while (!me_.stop) {
      let u;
      try {
        u = await api(`/api/rooms/${state.roomId}/updates?cursor=${encodeURIComponent(c)}&wait=20`);
      } catch (e) {
        if (me_.stop) return;
        showError("live updates paused: " + e.message);
        await new Promise((r) => setTimeout(r, 2000));
        continue;
      }
      if (me_.stop) return;
      c = u.cursor;
      const rows = [];
      for (const f of u.findings) { byId.set(f.finding_id, f); const r = findingRow(state, f, true); r.dataset.kind = "finding_posted"; r.dataset.agent = f.agent_id; rows.push([f.created_at, r]); }
      for (const e of u.events) rows.push([e.at, eventRow(e, true)]);
      // Erased elsewhere (an agent, another person): the rows already shown lose the text too.
      for (const e of u.events) if (e.kind === "erased") showErased(e.finding_id || e.artifact_id, "[erased] " + e.summary);
      rows.sort((a, b) => (a[0] < b[0] ? -1 : 1));
      for (const [, r] of rows) { list.prepend(r); r.hidden = !passes(state, r.dataset.kind, r.dataset.agent); }
      if (u.events.some((e) => ["decision_asked", "decision_answered", "work_claimed", "claim_released", "status_declared", "phase_marked", "objective_changed", "room_closed", "room_reopened"].includes(e.kind))) {
        refreshSide(state);
      }
    }
  })();
}

async function refreshSide(state) {
  const [ctx, decisions] = await Promise.all([api(`/api/rooms/${state.roomId}/context`), api(`/api/rooms/${state.roomId}/decisions`)]).catch(() => []);
  if (!ctx) return;
  state.ctx = ctx; state.room = ctx.room;
  renderSide(document.getElementById("side"), state, decisions);
  document.getElementById("objective").textContent = ctx.room.objective;
}

// Findings, filtered on the server (tag, agent, phase, entity), a page at a time.
function renderFindings(view, state, f) {
  clear(view);
  const tag = el("input", { placeholder: "tags, comma-separated", name: "tags", value: f.tags || "" });
  const agent = el("select", { name: "agent_id" }, el("option", { value: "" }, "every agent"), state.ctx.agents.items.map((a) => el("option", { value: a.agent_id }, a.agent_id)));
  const phases = (state.room.markers || []);
  const phase = el("select", { name: "after_marker" }, el("option", { value: "" }, "every phase"),
    state.ctx.phase ? el("option", { value: state.ctx.phase.marker_id }, "since " + state.ctx.phase.marker_id + ": " + state.ctx.phase.label) : null,
    phases.map((m) => el("option", { value: m.marker_id }, "since " + m.marker_id + ": " + m.label)));
  agent.value = f.agent_id || ""; phase.value = f.after_marker || "";
  const list = el("div", { id: "findings" });
  const more = el("button", { type: "button" }, "More");
  const go = el("button", { type: "submit", class: "primary" }, "Filter");
  view.append(el("form", { class: "filters", on: { submit: (ev) => { ev.preventDefault();
    renderFindings(view, state, { tags: tag.value, agent_id: agent.value, after_marker: phase.value, entity_id: f.entity_id }); } } },
  tag, agent, phase, go, f.entity_id ? badge("about entity " + (f.entity_name || f.entity_id), "tag") : null), list, more);
  const q = new URLSearchParams({ limit: "100" });
  for (const k of ["tags", "agent_id", "after_marker", "entity_id"]) if (f[k]) q.set(k, f[k]);
  let cursor = null;
  const load = async () => {
    if (cursor) q.set("cursor", cursor);
    const p = await api(`/api/rooms/${state.roomId}/timeline?${q}`).catch((e) => { showError(e.message); return null; });
    if (!p) return;
    for (const x of p.findings) list.append(findingRow(state, x));
    cursor = p.next_cursor;
    more.hidden = !cursor;
    if (!list.childNodes.length) list.append(el("p", { class: "muted" }, "No findings match."));
  };
  more.addEventListener("click", load);
  load();
}

function renderSearch(view, state) {
  const q = el("input", { placeholder: "what are you looking for? words or an identifier", name: "q" });
  const all = el("input", { type: "checkbox", name: "all_rooms" });
  const out = el("div", { id: "results" });
  view.append(el("form", { class: "filters", on: { submit: async (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams({ q: q.value, limit: "20", all_rooms: all.checked ? "true" : "false" });
    const r = await api(`/api/rooms/${state.roomId}/search?${p}`).catch((e) => { showError(e.message); return null; });
    if (!r) return;
    clear(out);
    for (const h of r.results) {
      const row = findingRow(state, h.finding);
      row.prepend(el("div", { class: "meta" }, `score ${h.score.toFixed(3)}` + (h.room ? ` · room: ${h.room.name || h.finding.room_id} (${h.room.status})` : "")));
      out.append(row);
    }
    if (!r.results.length) out.append(el("p", { class: "muted" }, "Nothing found."));
  } } }, q, el("label", {}, all, " every room (past incidents too)"), el("button", { type: "submit", class: "primary" }, "Search")), out);
}

// The entity graph, drawn: entities on a circle (best-connected first), relationships as lines.
async function renderGraph(view, state) {
  const g = await api(`/api/rooms/${state.roomId}/graph`).catch((e) => { showError(e.message); return null; });
  if (!g) return;
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", "0 0 1000 520");
  const n = g.entities.length;
  const pos = new Map();
  g.entities.forEach((e, i) => {
    const a = (2 * Math.PI * i) / Math.max(n, 1);
    const r = n > 12 ? 220 : 180;
    pos.set(e.entity.entity_id, [500 + r * 1.9 * Math.cos(a), 260 + r * Math.sin(a)]);
  });
  for (const rel of g.relationships) {
    const a = pos.get(rel.source_entity_id), b = pos.get(rel.target_entity_id);
    if (!a || !b) continue;
    const line = document.createElementNS(NS, "line");
    line.setAttribute("x1", a[0]); line.setAttribute("y1", a[1]); line.setAttribute("x2", b[0]); line.setAttribute("y2", b[1]);
    const t = document.createElementNS(NS, "title"); t.textContent = rel.relationship_type; line.append(t);
    svg.append(line);
  }
  for (const ge of g.entities) {
    const e = ge.entity;
    const [x, y] = pos.get(e.entity_id);
    const c = document.createElementNS(NS, "circle");
    c.setAttribute("cx", x); c.setAttribute("cy", y); c.setAttribute("r", 9 + Math.min(ge.degree || 0, 8));
    c.setAttribute("data-entity", e.entity_id);
    const t = document.createElementNS(NS, "title");
    t.textContent = `${e.name} (${e.type}) ` + e.identifiers.map((i) => i.type + ":" + i.value).join(", ") + (ge.aliases && ge.aliases.length ? ` · also ${ge.aliases.length} merged id(s)` : "");
    c.append(t);
    c.addEventListener("click", () => { state.tab = "findings"; for (const b of document.querySelectorAll(".tabs button")) b.className = b.dataset.tab === "findings" ? "on" : ""; renderFindings(view, state, { entity_id: e.entity_id, entity_name: e.name }); });
    const label = document.createElementNS(NS, "text");
    label.setAttribute("x", x + 12); label.setAttribute("y", y + 4); label.textContent = e.name;
    svg.append(c, label);
  }
  view.append(el("div", { class: "graph" }, svg),
    el("p", { class: "muted" }, `${g.entities.length} of ${g.total_entities} entities, ${g.relationships.length} of ${g.total_relationships} relationships. Click an entity for the findings about it.`));
}

async function renderArtifacts(view, state) {
  const p = await api(`/api/rooms/${state.roomId}/artifacts`).catch((e) => { showError(e.message); return null; });
  if (!p) return;
  for (const a of p.artifacts) {
    const x = a.artifact;
    const name = x.key.split("/").pop();
    view.append(el("div", { class: "row artifact" + (x.erased ? " erased" : ""), "data-artifact": x.artifact_id },
      el("div", {}, a.download_url ? el("a", { href: a.download_url, download: name }, name) : el("s", {}, name), ` · ${x.content_type} · ${x.size} bytes · ${x.agent_id}`),
      el("div", { class: "content" }, x.description || ""),
      x.content_type.startsWith("image/") && a.download_url ? el("img", { src: a.download_url, alt: x.description || name }) : null,
      x.erased ? null : el("button", { type: "button", class: "linkish erase", on: { click: () => eraseItem(state, { artifact_id: x.artifact_id }) } }, "erase")));
  }
  if (!p.artifacts.length) view.append(el("p", { class: "muted" }, "No files yet."));
}
