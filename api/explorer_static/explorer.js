// The Trellis explorer (docs/analysis.md §14): plain JavaScript, no framework, no build step.
//
// Everything shown is fetched with the administrator's zt-session token, kept in this tab's
// sessionStorage (never a cookie), from the management API (lists, searched with ZitiQL, paged)
// and /analysis/v1 (explain, findings, what-if, apply). The DOM is built with textContent only:
// no string from the network is ever parsed as HTML.
"use strict";

const MGMT = "/edge/management/v1";
const A = "/analysis/v1";
const TOKEN_KEY = "trellis.explorer.token";
const PAGE = 25;
// At most this many rows of one list are drawn at once; more come with "Show more".
const DIFF_PAGE = 50;

let token = sessionStorage.getItem(TOKEN_KEY);
let renderSeq = 0;
let firstViewMarked = false;

// -- DOM ------------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const $ = (id) => document.getElementById(id);

function badge(kind, text) {
  return h("span", { class: `badge ${kind}`, text });
}

function okBadge(ok, yes, no) {
  return ok ? badge("ok", yes) : badge("bad", no);
}

function status(text) {
  $("status").textContent = text;
}

function link(href, text, attrs) {
  return h("a", { href, ...(attrs || {}) }, text);
}

function hash(path, params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") query.set(k, String(v));
  }
  const qs = query.toString();
  return `#/${path}${qs ? "?" + qs : ""}`;
}

function plural(n, one, many) {
  return `${n.toLocaleString("en")} ${n === 1 ? one : many || one + "s"}`;
}

// -- the API ------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    const cause = error.cause || {};
    super(cause.reason || error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || "";
    this.body = body;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (token) headers["zt-session"] = token;
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  let json = null;
  try {
    json = await resp.json();
  } catch (_) {
    json = null;
  }
  if (resp.status === 401 && token) {
    signedOut("The session ended or is not an administrator's: log in again.");
  }
  if (!resp.ok) throw new ApiError(resp.status, json);
  return json;
}

// A ZitiQL string literal.
function ql(text) {
  return '"' + String(text).replace(/[\\"]/g, (c) => "\\" + c).replace(/[\x00-\x1f]/g, " ") + '"';
}

function listPath(path, params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") query.set(k, String(v));
  }
  return `${path}?${query.toString()}`;
}

async function list(path, params) {
  const answer = await api("GET", listPath(path, { limit: PAGE, offset: 0, ...params }));
  const pagination = (answer.meta && answer.meta.pagination) || {};
  return { data: answer.data || [], total: pagination.totalCount ?? (answer.data || []).length, answer };
}

// Names of entities by id, fetched in one list call per kind and kept.
const nameCache = new Map();

async function names(kind, ids) {
  const wanted = [...new Set(ids)].filter((id) => id && !nameCache.has(`${kind}/${id}`));
  for (let i = 0; i < wanted.length; i += 100) {
    const chunk = wanted.slice(i, i + 100);
    const filter = `id in [${chunk.map(ql).join(", ")}]`;
    try {
      const { data } = await list(`${MGMT}/${kind}`, { filter, limit: chunk.length });
      for (const e of data) nameCache.set(`${kind}/${e.id}`, e.name);
    } catch (_) {
      // names are a nicety: ids are shown instead
    }
  }
  const out = new Map();
  for (const id of ids) out.set(id, nameCache.get(`${kind}/${id}`) || id);
  return out;
}

// An entity of `kind` by name, else by id: its record, or null.
async function find(kind, text) {
  const { data } = await list(`${MGMT}/${kind}`, { filter: `name = ${ql(text)} or id = ${ql(text)}`, limit: 2 });
  return data[0] || null;
}

// -- log in and out -----------------------------------------------------------------------------

function showLogin(message) {
  $("app").hidden = true;
  $("logout").hidden = true;
  $("who").hidden = true;
  $("login-view").hidden = false;
  $("login-error").textContent = message || "";
  document.title = "Log in: Trellis explorer";
  $("login-username").focus();
}

function signedOut(message) {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin(message);
}

async function onLogin(event) {
  event.preventDefault();
  const form = event.target;
  const username = form.elements.username.value;
  const password = form.elements.password.value;
  $("login-error").textContent = "";
  status("Logging in…");
  let answer;
  try {
    answer = await api("POST", `${MGMT}/authenticate?method=password`, { username, password });
  } catch (ex) {
    status("");
    $("login-error").textContent = ex.status === 401 ? "The username or password is wrong." : ex.message;
    return;
  }
  token = answer.data.token;
  try {
    await api("GET", `${A}/revision`);
  } catch (ex) {
    status("");
    try {
      await fetch(`${MGMT}/current-api-session`, { method: "DELETE", headers: { "zt-session": answer.data.token } });
    } catch (_) {
      // the session expires on its own
    }
    signedOut("Only an administrator may use the explorer.");
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  form.elements.password.value = "";
  await start();
  status("Logged in.");
}

async function onLogout() {
  const old = token;
  signedOut("Logged out.");
  status("Logged out.");
  if (old) {
    try {
      await fetch(`${MGMT}/current-api-session`, { method: "DELETE", headers: { "zt-session": old } });
    } catch (_) {
      // the session expires on its own
    }
  }
}

async function start() {
  $("login-view").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  if (!location.hash.startsWith("#/")) {
    history.replaceState(null, "", "#/services");
  }
  // who is logged in, fetched beside the first view (a refused token shows the login instead)
  const who = api("GET", `${MGMT}/current-api-session`).then(
    (me) => (me.data.identity && me.data.identity.name) || me.data.identityId || "",
    () => "",
  );
  await route(false);
  const name = await who;
  $("who").hidden = !name;
  $("who").textContent = name ? `Logged in as ${name}` : "";
}

// -- routing --------------------------------------------------------------------------------------

const VIEWS = {
  services: { title: "Who can reach a service", render: viewServices },
  identities: { title: "What an identity reaches", render: viewIdentities },
  why: { title: "Why (not)", render: viewWhy },
  findings: { title: "Findings", render: viewFindings },
  "what-if": { title: "What if", render: viewWhatIf },
};

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?", 2);
  const [name, ...rest] = path.split("/").map(decodeURIComponent);
  return { name: name || "services", id: rest[0] || "", params: new URLSearchParams(query || "") };
}

async function route(moveFocus = true) {
  if (!token) {
    showLogin();
    return;
  }
  const { name, id, params } = parseHash();
  const view = VIEWS[name] || VIEWS.services;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.nav === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const seq = ++renderSeq;
  status("Loading…");
  const main = $("main");
  const target = h("div", { id: "view" });
  main.dataset.state = "loading";
  main.dataset.view = name;
  main.setAttribute("aria-busy", "true");
  $("view-title").textContent = view.title;
  document.title = `${view.title}: Trellis explorer`;
  $("view").replaceWith(target);
  try {
    await view.render(target, id, params, () => seq === renderSeq);
  } catch (ex) {
    if (seq !== renderSeq) return;
    if (ex instanceof ApiError && ex.status === 401) return;
    target.append(h("p", { class: "error", role: "alert", text: `Could not load: ${ex.message}` }));
  }
  if (seq !== renderSeq) return;
  status("");
  main.dataset.state = "ready";
  main.removeAttribute("aria-busy");
  if (!firstViewMarked) {
    firstViewMarked = true;
    performance.mark("explorer:first-view");
  }
  if (moveFocus) $("view-title").focus();
}

// -- shared pieces --------------------------------------------------------------------------------

// A search form that navigates to `path` with the query in `param`.
function searchForm(path, label, value, extra) {
  const input = h("input", { id: "search", type: "search", name: "q", value: value || "", autocomplete: "off" });
  return h(
    "form",
    {
      class: "inline",
      role: "search",
      onsubmit: (event) => {
        event.preventDefault();
        location.hash = hash(path, { q: input.value.trim(), ...(extra || {}) });
      },
    },
    h("p", {}, h("label", { for: "search", text: label }), input),
    h("p", {}, h("button", { type: "submit", text: "Search" })),
  );
}

// Previous/next links over a list of `total` rows.
function pager(total, offset, limit, pageHash) {
  const nav = h("div", { class: "pager" });
  const last = Math.min(offset + limit, total);
  nav.append(h("span", { class: "count", text: total ? `${offset + 1}–${last} of ${total.toLocaleString("en")}` : "none" }));
  if (offset > 0) nav.append(link(pageHash(Math.max(0, offset - limit)), "Previous page"));
  if (last < total) nav.append(link(pageHash(offset + limit), "Next page"));
  return nav;
}

// A section listing a paged management sub-list, first page now, "Show more" for the next.
async function pagedSection(parent, { title, path, params, headers, row, empty, alive }) {
  const section = h("section", { "aria-label": title });
  const heading = h("h2", {}, title);
  const count = h("span", { class: "count" });
  heading.append(" ", count);
  const body = h("tbody");
  const table = h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col", text: x })))), body);
  const more = h("button", { type: "button", class: "secondary", hidden: true, text: "Show more" });
  const live = h("p", { class: "count", "aria-live": "polite" });
  section.append(heading, table, more, live);
  parent.append(section);
  let offset = 0;
  let total = 0;
  async function load() {
    more.disabled = true;
    const page = await list(path, { ...params, offset, limit: PAGE });
    if (alive && !alive()) return;
    total = page.total;
    count.textContent = `(${total.toLocaleString("en")})`;
    const rows = await Promise.all(page.data.map(row));
    const first = rows[0];
    for (const r of rows) body.append(r);
    offset += page.data.length;
    table.hidden = total === 0;
    more.hidden = offset >= total;
    more.disabled = false;
    more.textContent = `Show more (${(total - offset).toLocaleString("en")} left)`;
    live.textContent = total === 0 ? empty : `Showing ${offset.toLocaleString("en")} of ${total.toLocaleString("en")}.`;
    return first;
  }
  more.addEventListener("click", async () => {
    const first = await load();
    const focusable = first && first.querySelector("a, button");
    if (focusable) focusable.focus();
  });
  await load();
  return section;
}

function attributes(list) {
  return (list || []).length ? (list || []).map((a) => "#" + a).join(" ") : "—";
}

function roles(list) {
  return (list || []).length ? list.join(" ") : "—";
}

// -- "Who can reach a service" ---------------------------------------------------------------------

async function viewServices(target, id, params, alive) {
  if (id) return viewService(target, id, alive);
  const q = params.get("q") || "";
  const offset = Number(params.get("offset") || 0);
  target.append(searchForm("services", "Service name contains", q));
  const page = await list(`${MGMT}/services`, { filter: q ? `name contains ${ql(q)}` : "", sort: "name asc", offset, limit: PAGE });
  if (!alive()) return;
  const results = h("section", { "aria-label": "Services found", "aria-live": "polite" });
  results.append(h("p", { class: "count", text: `${plural(page.total, "service")}${q ? ` whose name contains “${q}”` : ""}.` }));
  if (page.data.length) {
    results.append(
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, ["Service", "Attributes", ""].map((x) => h("th", { scope: "col", text: x })))),
        h(
          "tbody",
          {},
          page.data.map((s) =>
            h(
              "tr",
              {},
              h("td", {}, link(hash(`services/${s.id}`), s.name)),
              h("td", { class: "mono", text: attributes(s.roleAttributes) }),
              h("td", {}, link(hash(`services/${s.id}`), "who can reach it", { "aria-label": `who can reach ${s.name}` })),
            ),
          ),
        ),
      ),
    );
    results.append(pager(page.total, offset, PAGE, (o) => hash("services", { q, offset: o })));
  }
  target.append(results);
}

async function viewService(target, id, alive) {
  const service = (await api("GET", `${MGMT}/services/${encodeURIComponent(id)}`)).data;
  if (!alive()) return;
  $("view-title").textContent = `Who can reach ${service.name}`;
  target.append(
    h("p", {}, "Service ", h("strong", { text: service.name }), " ", h("span", { class: "mono", text: attributes(service.roleAttributes) }), " ", h("span", { class: "count mono", text: service.id })),
    h("p", {}, link(hash("services"), "Back to the services"), " · ", link(hash("why", { service: service.name }), "Why (not) for this service")),
  );
  const identityRow = (type) => async (i) =>
    h(
      "tr",
      {},
      h("td", {}, link(hash(`identities/${i.id}`), i.name)),
      h("td", { class: "mono", text: attributes(i.roleAttributes) }),
      h("td", {}, i.disabled ? badge("bad", "disabled") : badge("ok", "enabled")),
      h("td", {}, link(hash("why", { identity: i.id, service: service.id, type }), "why", { "aria-label": `why ${i.name} may ${type} ${service.name}` })),
    );
  // the sections are placed in this order at once, and filled as their answers come
  const sections = ["Dial", "Bind"].map((type) =>
    pagedSection(target, {
      title: `Identities that may ${type}`,
      path: `${MGMT}/services/${encodeURIComponent(id)}/identities`,
      // no sort: ordering every identity that may reach the service (17,000 at tier L) by name
      // costs the server more than the page it answers
      params: { policyType: type.toLowerCase() },
      headers: ["Identity", "Attributes", "State", ""],
      row: identityRow(type),
      empty: `No identity may ${type} ${service.name}.`,
      alive,
    }),
  );
  sections.push(pagedSection(target, {
    title: "Edge routers it may use",
    path: `${MGMT}/services/${encodeURIComponent(id)}/edge-routers`,
    params: { sort: "name asc" },
    headers: ["Edge router", "Online"],
    row: async (r) => h("tr", {}, h("td", { text: r.name }), h("td", {}, okBadge(r.isOnline, "online", "offline"))),
    empty: "No edge router: no service edge router policy selects it.",
    alive,
  }));
  sections.push(policySection(target, `${MGMT}/services/${encodeURIComponent(id)}/service-policies`, "Service policies selecting it", "service-policies", alive));
  await Promise.all(sections);
}

function policySection(target, path, title, kind, alive) {
  return pagedSection(target, {
    title,
    path,
    params: { sort: "name asc" },
    headers: ["Policy", "Type", "Identities", "Other side", ""],
    row: async (p) =>
      h(
        "tr",
        {},
        h("td", { text: p.name }),
        h("td", { text: p.type || "" }),
        h("td", { class: "mono", text: roles(p.identityRoles) }),
        h("td", { class: "mono", text: roles(p.serviceRoles || p.edgeRouterRoles) }),
        h("td", {}, link(hash("what-if", { kind, id: p.id }), "edit in a what-if", { "aria-label": `edit ${p.name} in a what-if` })),
      ),
    empty: "None.",
    alive,
  });
}

// -- "What an identity reaches" --------------------------------------------------------------------

async function viewIdentities(target, id, params, alive) {
  if (id) return viewIdentity(target, id, alive);
  const q = params.get("q") || "";
  const offset = Number(params.get("offset") || 0);
  target.append(searchForm("identities", "Identity name contains", q));
  const page = await list(`${MGMT}/identities`, { filter: q ? `name contains ${ql(q)}` : "", sort: "name asc", offset, limit: PAGE });
  if (!alive()) return;
  const results = h("section", { "aria-label": "Identities found", "aria-live": "polite" });
  results.append(h("p", { class: "count", text: `${plural(page.total, "identity", "identities")}${q ? ` whose name contains “${q}”` : ""}.` }));
  if (page.data.length) {
    results.append(
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, ["Identity", "Attributes", "State"].map((x) => h("th", { scope: "col", text: x })))),
        h(
          "tbody",
          {},
          page.data.map((i) =>
            h(
              "tr",
              {},
              h("td", {}, link(hash(`identities/${i.id}`), i.name)),
              h("td", { class: "mono", text: attributes(i.roleAttributes) }),
              h("td", {}, i.disabled ? badge("bad", "disabled") : badge("ok", "enabled")),
            ),
          ),
        ),
      ),
    );
    results.append(pager(page.total, offset, PAGE, (o) => hash("identities", { q, offset: o })));
  }
  target.append(results);
}

async function viewIdentity(target, id, alive) {
  const identity = (await api("GET", `${MGMT}/identities/${encodeURIComponent(id)}`)).data;
  if (!alive()) return;
  $("view-title").textContent = `What ${identity.name} reaches`;
  target.append(
    h("p", {}, "Identity ", h("strong", { text: identity.name }), " ", h("span", { class: "mono", text: attributes(identity.roleAttributes) }), " ", identity.disabled ? badge("bad", "disabled") : badge("ok", "enabled"), " ", h("span", { class: "count mono", text: identity.id })),
    h("p", {}, link(hash("identities"), "Back to the identities"), " · ", link(hash("why", { identity: identity.name }), "Why (not) for this identity")),
  );
  const sections = ["Dial", "Bind"].map((type) =>
    pagedSection(target, {
      title: `Services it may ${type}`,
      path: `${MGMT}/identities/${encodeURIComponent(id)}/services`,
      params: { policyType: type.toLowerCase() },
      headers: ["Service", "Attributes", ""],
      row: async (s) =>
        h(
          "tr",
          {},
          h("td", {}, link(hash(`services/${s.id}`), s.name)),
          h("td", { class: "mono", text: attributes(s.roleAttributes) }),
          h("td", {}, link(hash("why", { identity: identity.id, service: s.id, type }), "why", { "aria-label": `why ${identity.name} may ${type} ${s.name}` })),
        ),
      empty: `It may ${type} no service.`,
      alive,
    }),
  );
  sections.push(pagedSection(target, {
    title: "Edge routers it may use",
    path: `${MGMT}/identities/${encodeURIComponent(id)}/edge-routers`,
    params: { sort: "name asc" },
    headers: ["Edge router", "Online", ""],
    row: async (r) =>
      h(
        "tr",
        {},
        h("td", { text: r.name }),
        h("td", {}, okBadge(r.isOnline, "online", "offline")),
        h("td", {}, link(hash("why", { identity: identity.id, router: r.id }), "why", { "aria-label": `why ${identity.name} may use ${r.name}` })),
      ),
    empty: "No edge router: no edge router policy selects it.",
    alive,
  }));
  sections.push(policySection(target, `${MGMT}/identities/${encodeURIComponent(id)}/service-policies`, "Service policies selecting it", "service-policies", alive));
  sections.push(policySection(target, `${MGMT}/identities/${encodeURIComponent(id)}/edge-router-policies`, "Edge router policies selecting it", "edge-router-policies", alive));
  await Promise.all(sections);
}

// -- "Why (not)" and the path view ----------------------------------------------------------------

async function viewWhy(target, _id, params, alive) {
  const identityText = params.get("identity") || "";
  const serviceText = params.get("service") || "";
  const routerText = params.get("router") || "";
  const type = params.get("type") === "Bind" ? "Bind" : "Dial";
  const field = (id, label, value, hint) =>
    h("p", {}, h("label", { for: id, text: label }), h("input", { id, type: "text", value, autocomplete: "off", "aria-describedby": hint ? id + "-hint" : undefined }), hint ? h("span", { id: id + "-hint", class: "hint", text: hint }) : null);
  const typeSelect = h("select", { id: "why-type" }, ["Dial", "Bind"].map((t) => h("option", { value: t, selected: t === type, text: t })));
  const form = h(
    "form",
    {
      class: "inline",
      onsubmit: (event) => {
        event.preventDefault();
        const router = $("why-router").value.trim();
        location.hash = hash("why", {
          identity: $("why-identity").value.trim(),
          service: router ? "" : $("why-service").value.trim(),
          router,
          type: router ? "" : typeSelect.value,
        });
      },
    },
    field("why-identity", "Identity", identityText),
    field("why-service", "Service", serviceText),
    h("p", {}, h("label", { for: "why-type", text: "Type" }), typeSelect),
    field("why-router", "or edge router", routerText),
    h("p", {}, h("button", { type: "submit", text: "Explain" })),
  );
  target.append(h("p", { class: "hint", text: "Name or id of an identity, and of a service (or an edge router instead): whether it may, every granting path, and what is missing when it may not." }), form);
  const out = h("section", { "aria-label": "Explanation", "aria-live": "polite" });
  target.append(out);
  if (!identityText || !(serviceText || routerText)) return;
  const identity = await find("identities", identityText);
  if (!alive()) return;
  if (!identity) {
    out.append(h("p", { class: "error", role: "alert", text: `No identity is named (or has the id) “${identityText}”.` }));
    return;
  }
  if (routerText) {
    const router = await find("edge-routers", routerText);
    if (!router) {
      out.append(h("p", { class: "error", role: "alert", text: `No edge router is named (or has the id) “${routerText}”.` }));
      return;
    }
    const answer = (await api("GET", `${A}/identities/${encodeURIComponent(identity.id)}/edge-routers/${encodeURIComponent(router.id)}`)).data;
    if (!alive()) return;
    renderRouterExplanation(out, answer);
    return;
  }
  const service = await find("services", serviceText);
  if (!service) {
    out.append(h("p", { class: "error", role: "alert", text: `No service is named (or has the id) “${serviceText}”.` }));
    return;
  }
  const answer = (await api("GET", `${A}/identities/${encodeURIComponent(identity.id)}/services/${encodeURIComponent(service.id)}?type=${type}`)).data;
  if (!alive()) return;
  await renderServiceExplanation(out, answer);
}

function hop(state, kind, ...content) {
  const label = { ok: "passes", bad: "blocks", warn: "partly", muted: "not checked" }[state];
  return h("li", { class: state }, h("span", { class: "hop-kind", text: kind }), " ", badge(state, label), " ", ...content);
}

function roleMatch(roles) {
  return roles.length ? h("code", { text: roles.join(" ") }) : h("span", { text: "nothing matched" });
}

const SHOWN_ROUTERS = 20;

async function renderServiceExplanation(out, e) {
  const verb = e.allowed ? "may" : "may not";
  out.append(
    h("p", { class: `verdict ${e.allowed ? "ok" : "bad"}`, dataset: { allowed: String(e.allowed) } }, `${e.identityName} ${verb} ${e.type} ${e.serviceName}`),
    h("p", { class: "count", text: `At revision ${e.revision}.` }),
  );
  const c = e.checks;
  out.append(
    h("h2", { text: "Checks" }),
    h(
      "ul",
      { class: "checks" },
      h("li", {}, "Policy ", okBadge(c.policy, "granted", "none grants")),
      h("li", {}, "Posture ", okBadge(c.posture, "passes", "fails")),
      h("li", {}, "Common router ", okBadge(c.commonRouter, "yes", "none")),
      h("li", {}, "Router online ", okBadge(c.onlineRouter, "yes", "none online")),
      h("li", {}, "Identity ", okBadge(c.identityEnabled, "enabled", "disabled")),
    ),
  );
  if (e.misses.length) {
    out.append(
      h("h2", { text: "Nearest misses, cheapest first" }),
      h("ol", { class: "misses" }, e.misses.map((m) => h("li", {}, badge("warn", `cost ${m.cost}`), " ", h("span", { text: m.message }), " ", h("span", { class: "count", text: `(${m.kind})` })))),
    );
  }
  const routers = e.routers.slice(0, SHOWN_ROUTERS);
  const policyIds = routers.flatMap((r) => r.edgeRouterPolicies);
  const serpIds = routers.flatMap((r) => r.serviceEdgeRouterPolicies);
  const [erpNames, serpNames] = await Promise.all([names("edge-router-policies", policyIds), names("service-edge-router-policies", serpIds)]);
  const online = e.routers.filter((r) => r.isOnline).length;
  const routerHop = () => {
    if (!e.routers.length) {
      return hop("bad", "Common router", `none: the identity has ${plural(e.identityRouterCount, "router")}, the service ${plural(e.serviceRouterCount, "router")}, and they share none`);
    }
    const items = routers.map((r) =>
      h("li", {}, h("strong", { text: r.name }), " ", okBadge(r.isOnline, "online", "offline"), " via ", h("span", { text: r.edgeRouterPolicies.map((id) => erpNames.get(id)).join(", ") || "—" }), " and ", h("span", { text: r.serviceEdgeRouterPolicies.map((id) => serpNames.get(id)).join(", ") || "—" })),
    );
    const more = e.routers.length > routers.length ? h("li", { class: "count", text: `and ${e.routers.length - routers.length} more` }) : null;
    return hop(online ? "ok" : "bad", "Common routers", `${plural(e.routers.length, "router")}, ${online} online`, h("ul", {}, items, more));
  };
  const identityHop = () => hop(c.identityEnabled ? "ok" : "bad", "Identity", h("strong", { text: e.identityName }), c.identityEnabled ? " enabled" : " disabled");
  const serviceHop = () => hop(e.allowed ? "ok" : "muted", "Service", h("strong", { text: e.serviceName }));
  out.append(h("h2", { text: "Paths" }));
  if (!e.grants.length) {
    const miss = e.misses.find((m) => m.kind !== "router-offline" && m.kind !== "no-common-router");
    out.append(
      h(
        "div",
        { class: "card" },
        h("h3", { text: "No granting path" }),
        h("ol", { class: "path", "aria-label": "The path and each hop's status" }, identityHop(), hop("bad", "Service policy", miss ? miss.message : `no ${e.type} service policy selects both`), routerHop(), serviceHop()),
      ),
    );
    return;
  }
  const cards = h("div", { class: "paths" });
  for (const g of e.grants) {
    const posture = g.postureChecks.length
      ? hop(
          g.isPosturePassing ? "ok" : "bad",
          "Posture",
          h("ul", {}, g.postureChecks.map((p) => h("li", {}, h("strong", { text: p.name || p.id }), " ", okBadge(p.isPassing, "passes", "fails"), p.failure ? ` ${typeof p.failure === "string" ? p.failure : JSON.stringify(p.failure)}` : ""))),
        )
      : hop("ok", "Posture", "no posture check");
    cards.append(
      h(
        "div",
        { class: "card" },
        h("h3", {}, "Through ", h("span", { text: g.policyName || g.policyId }), ` (${g.semantic})`),
        h(
          "ol",
          { class: "path", "aria-label": `The path through ${g.policyName || g.policyId} and each hop's status` },
          identityHop(),
          hop("ok", "Identity side", "matched ", roleMatch(g.identityRoles)),
          hop("ok", "Service policy", h("strong", { text: g.policyName || g.policyId }), ` grants ${e.type}`),
          hop("ok", "Service side", "matched ", roleMatch(g.serviceRoles)),
          posture,
          routerHop(),
          serviceHop(),
        ),
      ),
    );
  }
  out.append(cards);
}

function renderRouterExplanation(out, e) {
  const verb = e.allowed ? "may" : "may not";
  const c = e.checks;
  out.append(
    h("p", { class: `verdict ${e.allowed ? "ok" : "bad"}`, dataset: { allowed: String(e.allowed) } }, `${e.identityName} ${verb} use ${e.edgeRouterName}`),
    h("p", { class: "count", text: `At revision ${e.revision}.` }),
    h("h2", { text: "Checks" }),
    h("ul", { class: "checks" }, h("li", {}, "Policy ", okBadge(c.policy, "granted", "none grants")), h("li", {}, "Router ", okBadge(c.online, "online", "offline")), h("li", {}, "Identity ", okBadge(c.identityEnabled, "enabled", "disabled"))),
  );
  if (e.misses.length) {
    out.append(h("h2", { text: "Nearest misses, cheapest first" }), h("ol", { class: "misses" }, e.misses.map((m) => h("li", {}, badge("warn", `cost ${m.cost}`), " ", h("span", { text: m.message })))));
  }
  out.append(h("h2", { text: "Paths" }));
  const grants = e.grants.length ? e.grants : [null];
  for (const g of grants) {
    out.append(
      h(
        "ol",
        { class: "path", "aria-label": "The path and each hop's status" },
        hop(c.identityEnabled ? "ok" : "bad", "Identity", h("strong", { text: e.identityName })),
        g ? hop("ok", "Identity side", "matched ", roleMatch(g.identityRoles)) : null,
        g ? hop("ok", "Edge router policy", h("strong", { text: g.policyName || g.policyId }), ` (${g.semantic})`) : hop("bad", "Edge router policy", "none selects both"),
        g ? hop("ok", "Router side", "matched ", roleMatch(g.edgeRouterRoles)) : null,
        hop(c.online ? "ok" : "bad", "Edge router", h("strong", { text: e.edgeRouterName }), c.online ? " online" : " offline"),
      ),
    );
  }
}

// -- Findings ---------------------------------------------------------------------------------------

async function viewFindings(target, _id, params, alive) {
  const statusValue = params.get("status") || "ACTIVE";
  const severity = params.get("severity") || "";
  const extra = params.get("filter") || "";
  const offset = Number(params.get("offset") || 0);
  const select = (id, label, options, value) =>
    h("p", {}, h("label", { for: id, text: label }), h("select", { id }, options.map(([v, t]) => h("option", { value: v, selected: v === value, text: t }))));
  const filterInput = h("input", { id: "findings-filter", type: "text", value: extra, autocomplete: "off", "aria-describedby": "findings-filter-hint" });
  target.append(
    h(
      "form",
      {
        class: "inline",
        role: "search",
        onsubmit: (event) => {
          event.preventDefault();
          location.hash = hash("findings", { status: $("findings-status").value, severity: $("findings-severity").value, filter: filterInput.value.trim() });
        },
      },
      select("findings-status", "Status", [["ACTIVE", "Active"], ["ARCHIVED", "Archived"], ["RESOLVED", "Resolved"], ["any", "Any"]], statusValue),
      select("findings-severity", "Severity", [["", "Any"], ["HIGH", "High"], ["MEDIUM", "Medium"], ["LOW", "Low"]], severity),
      h("p", {}, h("label", { for: "findings-filter", text: "ZitiQL filter" }), filterInput, h("span", { id: "findings-filter-hint", class: "hint", text: ' e.g. kind = "dangling-role"' })),
      h("p", {}, h("button", { type: "submit", text: "Show" })),
    ),
  );
  const clauses = [];
  if (statusValue !== "any") clauses.push(`status = ${ql(statusValue)}`);
  if (severity) clauses.push(`severity = ${ql(severity)}`);
  if (extra) clauses.push(`(${extra})`);
  const waiting = h("p", { class: "count", text: "Reading the findings (the first read after a write evaluates them: seconds on a large network)…" });
  target.append(waiting);
  const page = await list(`${A}/findings`, { filter: clauses.join(" and "), sort: "severity asc", offset, limit: PAGE });
  if (!alive()) return;
  waiting.remove();
  const results = h("section", { "aria-label": "Findings found", "aria-live": "polite" });
  results.append(h("p", { class: "count", text: `${plural(page.total, "finding")}.` }));
  const severityBadge = (s) => badge(s === "HIGH" ? "bad" : s === "MEDIUM" ? "warn" : "muted", s);
  const subject = (f) => {
    const text = `${f.subjectType} ${f.subjectName || f.subjectId}`;
    if (f.subjectType === "identity" || f.subjectType === "identities") return link(hash(`identities/${f.subjectId}`), text);
    if (f.subjectType === "service" || f.subjectType === "services") return link(hash(`services/${f.subjectId}`), text);
    return text;
  };
  if (page.data.length) {
    results.append(
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, ["Severity", "Kind", "Subject", "Message", "Status"].map((x) => h("th", { scope: "col", text: x })))),
        h("tbody", {}, page.data.map((f) => h("tr", {}, h("td", {}, severityBadge(f.severity)), h("td", { class: "mono", text: f.kind }), h("td", {}, subject(f)), h("td", { text: f.message }), h("td", { text: f.status })))),
      ),
      pager(page.total, offset, PAGE, (o) => hash("findings", { status: statusValue, severity, filter: extra, offset: o })),
    );
  }
  target.append(results);
}

// -- What if ----------------------------------------------------------------------------------------

const POLICY_KINDS = {
  "service-policies": { label: "Service policy", roles: [["identityRoles", "Identity roles"], ["serviceRoles", "Service roles"], ["postureCheckRoles", "Posture check roles"]], type: true },
  "edge-router-policies": { label: "Edge router policy", roles: [["identityRoles", "Identity roles"], ["edgeRouterRoles", "Edge router roles"]] },
  "service-edge-router-policies": { label: "Service edge router policy", roles: [["serviceRoles", "Service roles"], ["edgeRouterRoles", "Edge router roles"]] },
};

function parseRoles(text) {
  return text.split(/[\s,]+/).map((r) => r.trim()).filter(Boolean);
}

async function viewWhatIf(target, id, params, alive) {
  const kind = POLICY_KINDS[params.get("kind")] ? params.get("kind") : "service-policies";
  if (id || params.get("id")) return viewWhatIfEdit(target, kind, id || params.get("id"), alive);
  const q = params.get("q") || "";
  const offset = Number(params.get("offset") || 0);
  const kindSelect = h("select", { id: "whatif-kind" }, Object.entries(POLICY_KINDS).map(([k, v]) => h("option", { value: k, selected: k === kind, text: v.label })));
  const input = h("input", { id: "search", type: "search", value: q, autocomplete: "off" });
  target.append(
    h("p", { class: "hint", text: "Pick a policy, edit its roles, and see the access it would add and remove before anything is written." }),
    h(
      "form",
      {
        class: "inline",
        role: "search",
        onsubmit: (event) => {
          event.preventDefault();
          location.hash = hash("what-if", { kind: kindSelect.value, q: input.value.trim() });
        },
      },
      h("p", {}, h("label", { for: "whatif-kind", text: "Kind" }), kindSelect),
      h("p", {}, h("label", { for: "search", text: "Policy name contains" }), input),
      h("p", {}, h("button", { type: "submit", text: "Search" })),
    ),
  );
  const page = await list(`${MGMT}/${kind}`, { filter: q ? `name contains ${ql(q)}` : "", sort: "name asc", offset, limit: PAGE });
  if (!alive()) return;
  const spec = POLICY_KINDS[kind];
  const results = h("section", { "aria-label": "Policies found", "aria-live": "polite" });
  results.append(h("p", { class: "count", text: `${plural(page.total, spec.label.toLowerCase(), spec.label.toLowerCase().replace(/y$/, "ies"))}.` }));
  if (page.data.length) {
    results.append(
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, ["Policy", ...spec.roles.map((r) => r[1]), ""].map((x) => h("th", { scope: "col", text: x })))),
        h("tbody", {}, page.data.map((p) => h("tr", {}, h("td", { text: p.name }), spec.roles.map(([f]) => h("td", { class: "mono", text: roles(p[f]) })), h("td", {}, link(hash("what-if", { kind, id: p.id }), "edit", { "aria-label": `edit ${p.name}` }))))),
      ),
      pager(page.total, offset, PAGE, (o) => hash("what-if", { kind, q, offset: o })),
    );
  }
  target.append(results);
}

async function viewWhatIfEdit(target, kind, id, alive) {
  const spec = POLICY_KINDS[kind];
  const policy = (await api("GET", `${MGMT}/${kind}/${encodeURIComponent(id)}`)).data;
  if (!alive()) return;
  $("view-title").textContent = `What if ${policy.name} changed`;
  const inputs = {};
  const fields = spec.roles.map(([f, label]) => {
    inputs[f] = h("input", { id: `whatif-${f}`, type: "text", value: (policy[f] || []).join(", "), autocomplete: "off", "aria-describedby": "whatif-roles-hint" });
    return h("div", { class: "field" }, h("label", { for: `whatif-${f}`, text: label }), inputs[f]);
  });
  let typeSelect = null;
  if (spec.type) {
    typeSelect = h("select", { id: "whatif-type" }, ["Dial", "Bind"].map((t) => h("option", { value: t, selected: t === policy.type, text: t })));
    fields.push(h("div", { class: "field" }, h("label", { for: "whatif-type", text: "Type" }), typeSelect));
  }
  const semantic = h("select", { id: "whatif-semantic" }, ["AnyOf", "AllOf"].map((s) => h("option", { value: s, selected: s === policy.semantic, text: s })));
  fields.push(h("div", { class: "field" }, h("label", { for: "whatif-semantic", text: "Semantic" }), semantic));
  const result = h("section", { id: "whatif-result", "aria-label": "The access diff", "aria-live": "polite" });
  const applyButton = h("button", { id: "whatif-apply", type: "button", hidden: true, text: "Apply this change" });
  let preview = null;

  const items = () => {
    const body = {};
    for (const [f] of spec.roles) body[f] = parseRoles(inputs[f].value);
    if (typeSelect) body.type = typeSelect.value;
    body.semantic = semantic.value;
    return [{ op: "patch", kind, id: policy.id, body }];
  };
  const invalidate = () => {
    if (preview) {
      preview = null;
      applyButton.hidden = true;
      result.replaceChildren(h("p", { class: "hint", text: "Changed since the preview: preview again before applying." }));
    }
  };
  const form = h(
    "form",
    {
      id: "whatif-form",
      oninput: invalidate,
      onchange: invalidate,
      onsubmit: async (event) => {
        event.preventDefault();
        const batch = items();
        result.dataset.state = "loading";
        result.replaceChildren(h("p", { class: "count", text: "Computing the diff…" }));
        applyButton.hidden = true;
        try {
          const answer = (await api("POST", `${A}/what-if`, { items: batch })).data;
          preview = { items: batch, revision: answer.revision };
          result.replaceChildren(h("h2", { text: "The change would make" }));
          await renderDiff(result, answer);
          result.append(h("p", { class: "count", text: `Computed at revision ${answer.revision}. Nothing is written until you apply.` }));
          applyButton.hidden = false;
          status("What-if computed.");
        } catch (ex) {
          result.replaceChildren(h("p", { class: "error", role: "alert", text: `The change is refused: ${ex.message}` }));
        }
        result.dataset.state = "ready";
      },
    },
    h("p", { id: "whatif-roles-hint", class: "hint", text: "Roles separated by commas or blanks: #attribute, @id or @name, #all." }),
    fields,
    h("div", { class: "actions" }, h("button", { type: "submit", text: "Preview the change" }), applyButton),
  );
  applyButton.addEventListener("click", async () => {
    if (!preview) return;
    applyButton.disabled = true;
    result.dataset.state = "loading";
    try {
      const answer = (await api("POST", `${A}/apply`, { items: preview.items, revision: preview.revision })).data;
      preview = null;
      applyButton.hidden = true;
      result.replaceChildren(h("p", { class: "verdict ok", role: "alert", text: `Applied at revision ${answer.appliedRevision}.` }));
      await renderDiff(result, answer);
      status("Applied.");
    } catch (ex) {
      preview = null;
      applyButton.hidden = true;
      const cause = (ex.body && ex.body.error && ex.body.error.cause) || {};
      result.replaceChildren(h("p", { class: "error", role: "alert", text: ex.status === 409 ? `Not applied: ${ex.message}` : `Not applied: ${ex.message}` }));
      if (ex.status === 409 && cause.changes) {
        result.append(h("h2", { text: `What changed between revision ${cause.revision} and ${cause.currentRevision}` }));
        await renderDiff(result, cause.changes);
        result.append(h("p", { class: "hint", text: "Preview again to see the change against the current policy." }));
      }
    } finally {
      applyButton.disabled = false;
      result.dataset.state = "ready";
    }
  });
  target.append(
    h("p", {}, spec.label, " ", h("strong", { text: policy.name }), " ", h("span", { class: "count mono", text: policy.id }), " · ", link(hash("what-if", { kind }), "Pick another policy")),
    form,
    result,
  );
}

// The access diff of a what-if, an apply or a 409: counts, then the pairs, a page at a time.
async function renderDiff(parent, d) {
  const s = d.summary;
  parent.append(
    h(
      "ul",
      { class: "summary", "aria-label": "Counts" },
      h("li", { class: "diff-added", text: `+${s.servicesAdded.toLocaleString("en")} service access` }),
      h("li", { class: "diff-removed", text: `−${s.servicesRemoved.toLocaleString("en")} service access` }),
      h("li", { class: "diff-added", text: `+${s.routersAdded.toLocaleString("en")} router access` }),
      h("li", { class: "diff-removed", text: `−${s.routersRemoved.toLocaleString("en")} router access` }),
      h("li", { text: `${plural(s.identities, "identity", "identities")} affected` }),
    ),
  );
  if ((d.guardrails || []).length) {
    parent.append(
      h("h3", { text: "Guardrails it would violate" }),
      h("ul", {}, d.guardrails.map((g) => h("li", {}, h("strong", { text: g.name }), ` (${g.form}, ${g.mode}): ${plural(g.count, "pair")}`))),
    );
  }
  const sections = [
    ["Service access added", d.services.added, "added", "service"],
    ["Service access removed", d.services.removed, "removed", "service"],
    ["Router access added", d.routers.added, "added", "router"],
    ["Router access removed", d.routers.removed, "removed", "router"],
  ];
  const identityNames = new Map((d.identities || []).map((i) => [i.id, i.name]));
  for (const [title, pairs, change, what] of sections) {
    if (!pairs.length) continue;
    const section = h("section", { "aria-label": title, dataset: { diff: `${what}-${change}` } });
    const body = h("tbody");
    const headers = what === "service" ? ["Identity", "Service", "Type"] : ["Identity", "Edge router"];
    const more = h("button", { type: "button", class: "secondary", text: "Show more" });
    section.append(h("h3", { class: `diff-${change}`, text: `${title} (${pairs.length.toLocaleString("en")}${d.truncated ? "+" : ""})` }), h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col", text: x })))), body), more);
    let shown = 0;
    const draw = async () => {
      const chunk = pairs.slice(shown, shown + DIFF_PAGE);
      const other = what === "service" ? await names("services", chunk.map((p) => p.serviceId)) : await names("edge-routers", chunk.map((p) => p.edgeRouterId));
      const missing = chunk.map((p) => p.identityId).filter((id) => !identityNames.has(id));
      const extraNames = missing.length ? await names("identities", missing) : new Map();
      const sign = change === "added" ? "+ " : "− ";
      for (const p of chunk) {
        const who = identityNames.get(p.identityId) || extraNames.get(p.identityId) || p.identityId;
        const cells = [h("td", { class: `diff-${change}`, text: sign + who })];
        if (what === "service") cells.push(h("td", { text: other.get(p.serviceId) }), h("td", { text: p.type }));
        else cells.push(h("td", { text: other.get(p.edgeRouterId) }));
        body.append(h("tr", {}, cells));
      }
      shown += chunk.length;
      more.hidden = shown >= pairs.length;
      more.textContent = `Show more (${(pairs.length - shown).toLocaleString("en")} left)`;
    };
    more.addEventListener("click", draw);
    await draw();
    parent.append(section);
  }
  if (!s.servicesAdded && !s.servicesRemoved && !s.routersAdded && !s.routersRemoved) {
    parent.append(h("p", { text: "No access would change." }));
  }
}

// -- start ---------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", onLogin);
  $("logout").addEventListener("click", onLogout);
  document.querySelector(".skip").addEventListener("click", (event) => {
    event.preventDefault();
    $("main").focus();
  });
  document.querySelector(".skip").addEventListener("click", (event) => {
    event.preventDefault();
    $("main").focus();
  });
  window.addEventListener("hashchange", () => route(true));
  if (token) start();
  else showLogin();
});
