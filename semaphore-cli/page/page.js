// The page of `semaphore serve`: reads the API once a second and draws
// the pools, or one pool's slots and waiters. Every label is set as text
// (textContent), never as markup. No library, no build step.
"use strict";

const POLL_MS = 1000;
const TOKEN_KEY = "semaphore-token";
const page = {
  token: sessionStorage.getItem(TOKEN_KEY),
  // Whether the server asked for a token (or one was given earlier in
  // this tab): the page's acts need one.
  auth: sessionStorage.getItem(TOKEN_KEY) !== null,
  timer: null,
};

const $ = (id) => document.getElementById(id);

/** An element with attributes and children (text is set as text). */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

class Unauthorized extends Error {}

/** Calls the API; its JSON answer, or an Error with its message. */
async function api(method, path, body) {
  const headers = {};
  if (page.token) headers.Authorization = "Bearer " + page.token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const answer = await fetch(path, {
    method,
    headers,
    cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (answer.status === 401) {
    page.auth = true;
    throw new Unauthorized("this server needs its bearer token");
  }
  const json = await answer.json().catch(() => ({}));
  if (!answer.ok) throw new Error(json.error || answer.status + " " + answer.statusText);
  return json;
}

/** The pool the address names (#pool=UUID), or null. */
function selected() {
  const m = /^#pool=([0-9a-fA-F-]{36})$/.exec(location.hash);
  return m ? m[1].toLowerCase() : null;
}

/** count cells, in_use of them filled. */
function fill(count, inUse) {
  const cells = Math.min(count, 40);
  const held = count === 0 ? 0 : Math.round((Math.min(inUse, count) * cells) / count);
  const bar = el("span", { class: "fill", title: inUse + " of " + count + " in use" });
  for (let i = 0; i < cells; i++) bar.append(el("span", { class: i < held ? "cell held" : "cell" }));
  return bar;
}

function seconds(s) {
  if (s < 60) return Math.floor(s) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

function drawPools(answer) {
  const body = $("pools").tBodies[0];
  body.replaceChildren(
    ...answer.pools.map((p) =>
      el(
        "tr",
        { "data-pool": p.id },
        el("td", {}, el("a", { href: "#pool=" + p.id }, p.id)),
        el("td", {}, p.count),
        el("td", {}, p.in_use),
        el("td", {}, p.waiting),
        el("td", {}, p.draining ? "draining" : ""),
        el("td", {}, fill(p.count, p.in_use)),
      ),
    ),
  );
  $("no-pools").hidden = answer.pools.length > 0;
  $("more-pools").hidden = answer.next === null;
}

function drawPool(id, state, holders) {
  $("pool-id").textContent = id;
  $("draining").hidden = !state.draining;
  $("pool-summary").textContent =
    state.in_use + " of " + state.count + " slots in use, " + holders.waiting + " waiting";
  const byPosition = new Map();
  for (const lease of holders.leases) for (const p of lease.positions) byPosition.set(p, lease);
  const highest = Math.max(state.count, ...holders.leases.flatMap((l) => l.positions.map((p) => p + 1)));
  const now = performance.now();
  const cells = [];
  for (let position = 0; position < highest; position++) {
    const lease = byPosition.get(position);
    const cell = el(
      "div",
      { class: lease ? "slot held" : "slot free", "data-position": position },
      el("span", { class: "position" }, position),
    );
    if (position >= state.count) cell.classList.add("above-count");
    if (lease) {
      cell.append(
        el("span", { class: "owner" }, lease.owner === null ? "-" : lease.owner),
        el("span", { class: "token" }, "token " + lease.token),
        el("span", { class: "ttl", "data-deadline": now + lease.expires_in_ms }, ""),
      );
      if (page.auth && page.token) {
        const button = el("button", { class: "force", type: "button" }, "force return");
        button.addEventListener("click", () => forceReturn(id, position, lease));
        cell.append(button);
      }
    } else {
      cell.append(el("span", { class: "owner" }, "free"));
    }
    cells.push(cell);
  }
  $("slots").replaceChildren(...cells);
  $("waiters").replaceChildren(
    ...holders.queue.map((w) =>
      el(
        "li",
        { "data-waited": now - w.waited * 1000 },
        el("span", { class: "kind" }, { here: "a borrow here", ticket: "a ticket", process: "another process (more may wait behind it)" }[w.kind] || w.kind),
        el("span", { class: "weight" }, w.slots === 1 ? "1 slot" : w.slots + " slots"),
        el("span", { class: "waited" }, ""),
      ),
    ),
  );
  $("no-waiters").hidden = holders.queue.length > 0;
  tick();
}

/** Counts the ttls down and the waits up, between polls. */
function tick() {
  const now = performance.now();
  for (const ttl of document.querySelectorAll(".ttl[data-deadline]")) {
    ttl.textContent = seconds(Math.max(0, (Number(ttl.dataset.deadline) - now) / 1000)) + " left";
  }
  for (const li of document.querySelectorAll("#waiters li[data-waited]")) {
    li.querySelector(".waited").textContent = "waiting " + seconds((now - Number(li.dataset.waited)) / 1000);
  }
}

async function forceReturn(id, position, lease) {
  const who = lease.owner === null ? "token " + lease.token : lease.owner;
  if (!confirm("End the lease of " + who + " on slot " + position + "? Its holder loses it.")) return;
  try {
    await api("POST", "/l/" + id + "/force-return", { position });
  } catch (e) {
    showError(e);
  }
  poll();
}

function showError(e) {
  $("error").textContent = e.message;
  $("error").hidden = false;
  $("login").hidden = !(e instanceof Unauthorized);
}

/** One look: the pools, or the selected pool; then the next in a second. */
async function poll() {
  clearTimeout(page.timer);
  const id = selected();
  $("pools-view").hidden = id !== null;
  $("pool-view").hidden = id === null;
  try {
    if (id === null) {
      drawPools(await api("GET", "/l?limit=1000"));
    } else {
      const [state, holders] = await Promise.all([api("GET", "/l/" + id), api("GET", "/l/" + id + "/leases")]);
      drawPool(id, state, holders);
    }
    $("error").hidden = true;
    $("login").hidden = true;
    $("live").textContent = "live, read at " + new Date().toLocaleTimeString();
  } catch (e) {
    showError(e);
    $("live").textContent = "not live";
  }
  page.timer = setTimeout(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    page.token = $("token").value.trim();
    sessionStorage.setItem(TOKEN_KEY, page.token);
    poll();
  });
  window.addEventListener("hashchange", poll);
  setInterval(tick, 250);
  poll();
});
