// The web console: polls the REST API (POST JSON under /rest-api) and the console's own
// JSON answers (/console/api) every 2 s, renders tables, starts and stops pulls, pushes,
// recorders, mixers and transcoders with forms, and previews a stream over WHEP. Plain JS
// served as is (no build step); every text from the server goes into the page as text.

/** Interval between two refreshes, in ms. */
const pollIntervalMs = 2000;
/** Longest wait for the preview's ICE candidates before sending the offer, in ms. */
const iceGatheringWaitMs = 2000;
/** Key of the credentials in sessionStorage (this tab only). */
const authKey = "mediaserver.console.authorization";

const $ = (id) => document.getElementById(id);

/** The Authorization header the user gave, if any. */
let authorization = sessionStorage.getItem(authKey) ?? undefined;
/** From /console/api/info once signed in. */
let info;
let pollTimer;
/** Readers by mediaSessionId. */
let readers = {};

/** The API refused the credentials (or there were none). */
class UnauthorizedError extends Error {}

/**
 * Calls the server: POST with a JSON body when `body` is given, GET otherwise. Credentials
 * go in an explicit header with the fetch's own credentials omitted, so a 401 never opens
 * the browser's login dialog and the page's form asks instead.
 */
async function call(path, body) {
  const headers = {};
  if (authorization) headers.Authorization = authorization;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method: body === undefined ? "GET" : "POST",
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
  });
  if (res.status === 401) throw new UnauthorizedError("credentials required");
  const text = await res.text();
  if (!res.ok) {
    let message = text;
    try {
      const error = JSON.parse(text);
      message = error.field ? `${error.field}: ${error.message}` : error.message ?? text;
    } catch { /* not JSON: the text itself */ }
    throw new Error(`${res.status} ${message}`);
  }
  return text === "" ? undefined : JSON.parse(text);
}

/** Calls a management operation, e.g. `rest("/stream/find_all")`. */
const rest = (path, body = {}) => call(`/rest-api${path}`, body);

/** Shows `text` in the status line; `error` marks it as a failure. */
function status(text, error = false) {
  const el = $("status");
  el.textContent = text;
  el.className = error ? "error" : "ok";
}

/** An element with text content and attributes. */
function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  return node;
}

/** A button running `action`; its failure goes to the status line. */
function button(label, action, attrs = {}) {
  const b = el("button", label, { type: "button", ...attrs });
  b.addEventListener("click", () => run(label, action));
  return b;
}

/** Runs a user action, reporting its end in the status line and refreshing the tables. */
async function run(label, action) {
  try {
    await action();
    status(`${label}: done`);
  } catch (err) {
    if (err instanceof UnauthorizedError) return showLogin();
    status(`${label}: ${err.message}`, true);
  }
  refresh();
}

/**
 * Renders `rows` into `table`: `columns` are [heading, value of a row]; `actions(row)` gives
 * the row's buttons; `key(row)` names the row in a `data-key` attribute.
 */
function renderTable(table, columns, rows, { key, actions } = {}) {
  table.replaceChildren();
  const head = el("tr");
  for (const [heading] of columns) head.appendChild(el("th", heading));
  if (actions) head.appendChild(el("th", ""));
  table.appendChild(head);
  if (rows.length === 0) {
    table.appendChild(el("tr")).appendChild(
      el("td", "none", { colspan: String(columns.length + 1), class: "empty" }),
    );
    return;
  }
  for (const row of rows) {
    const tr = el("tr", undefined, key ? { "data-key": key(row) } : {});
    for (const [, value] of columns) tr.appendChild(el("td", value(row)));
    if (actions) {
      const td = el("td", undefined, { class: "actions" });
      for (const b of actions(row)) td.appendChild(b);
      tr.appendChild(td);
    }
    table.appendChild(tr);
  }
}

const field = (name) => (row) => row[name] ?? "";

/**
 * The groups with a list, a start form (and maybe more forms) and a stop button per row.
 * A form field is [name, kind, placeholder]: kind "text", "int", "bool" or "json".
 */
const groups = [
  {
    id: "vod",
    title: "VOD files",
    list: "/vod/find_all",
    key: (r) => r.localStreamName,
    columns: [["Stream", field("localStreamName")], ["URI", field("uri")], [
      "Status",
      field("status"),
    ]],
    forms: [{
      path: "/vod/startup",
      label: "Start VOD",
      fields: [["uri", "text", "vod-live://file.mp4"], ["localStreamName", "text", "optional"]],
    }],
    stop: {
      path: "/vod/terminate",
      body: (r) => ({ uri: r.uri, localStreamName: r.localStreamName }),
    },
  },
  {
    id: "rtsp",
    title: "RTSP pulls",
    list: "/rtsp/find_all",
    key: (r) => r.uri,
    columns: [["URI", field("uri")], ["Stream", field("toStream")], ["Status", field("status")]],
    forms: [{
      path: "/rtsp/startup",
      label: "Start RTSP pull",
      fields: [["uri", "text", "rtsp://camera/stream"], ["localStreamName", "text", "optional"]],
    }],
    stop: { path: "/rtsp/terminate", body: (r) => ({ uri: r.uri }) },
  },
  {
    id: "rtmp-pulls",
    title: "RTMP pulls",
    list: "/pull/rtmp/find_all",
    key: (r) => r.uri,
    columns: [["URI", field("uri")], ["Stream", field("localStreamName")], [
      "Status",
      field("status"),
    ]],
    forms: [{
      path: "/pull/rtmp/pull",
      label: "Start RTMP pull",
      fields: [["uri", "text", "rtmp://host/app/stream"], ["localStreamName", "text", "optional"]],
    }],
    stop: { path: "/pull/rtmp/terminate", body: (r) => ({ uri: r.uri }) },
  },
  {
    id: "pushes",
    title: "RTMP pushes",
    list: "/push/find_all",
    key: (r) => r.mediaSessionId,
    columns: [["Stream", field("streamName")], ["RTMP URL", field("rtmpUrl")], [
      "mediaSessionId",
      field("mediaSessionId"),
    ]],
    forms: [{
      path: "/push/startup",
      label: "Start push",
      fields: [["streamName", "text", "stream1"], ["rtmpUrl", "text", "rtmp://host/app/key"]],
    }],
    stop: { path: "/push/terminate", body: (r) => ({ mediaSessionId: r.mediaSessionId }) },
  },
  {
    id: "recorders",
    title: "Recorders",
    list: "/recorder/find_all",
    key: (r) => r.mediaSessionId,
    columns: [["File", field("fileName")], ["mediaSessionId", field("mediaSessionId")]],
    forms: [{
      path: "/recorder/startup",
      label: "Start recorder",
      fields: [["mediaSessionId", "text", "of a stream"], [
        "config",
        "json",
        '{"fileTemplate": "{streamName}"}',
      ]],
    }],
    stop: { path: "/recorder/terminate", body: (r) => ({ mediaSessionId: r.mediaSessionId }) },
  },
  {
    id: "mixers",
    title: "Mixers",
    list: "/mixer/find_all",
    key: (r) => r.uri,
    columns: [
      ["URI", field("uri")],
      ["Stream", field("localStreamName")],
      ["Status", field("status")],
      ["Inputs", (r) => (r.mediaSessions ?? []).map((m) => m.localStreamName).join(", ")],
    ],
    forms: [{
      path: "/mixer/startup",
      label: "Start mixer",
      fields: [["uri", "text", "mixer://mixer1"], ["localStreamName", "text", "mixer1"], [
        "hasVideo",
        "bool",
      ], ["hasAudio", "bool"]],
    }, {
      path: "/mixer/add",
      label: "Add stream",
      fields: [["uri", "text", "mixer://mixer1"], ["remoteStreamName", "text", "stream1"]],
    }],
    stop: { path: "/mixer/terminate", body: (r) => ({ uri: r.uri }) },
  },
  {
    id: "transcoders",
    title: "Transcoders",
    list: "/transcoder/find_all",
    key: (r) => r.uri,
    columns: [
      ["URI", field("uri")],
      ["From", field("remoteStreamName")],
      ["Stream", field("localStreamName")],
      ["Status", field("status")],
      [
        "Encoder",
        (r) => r.encoder ? `${r.encoder.width}x${r.encoder.height} ${r.encoder.fps} fps` : "",
      ],
    ],
    forms: [{
      path: "/transcoder/startup",
      label: "Start transcoder",
      fields: [
        ["uri", "text", "transcoder://tcode1"],
        ["remoteStreamName", "text", "stream1"],
        ["localStreamName", "text", "stream1-360p"],
        ["encoder", "json", '{"width":640,"height":360,"keyFrameInterval":30,"fps":30}'],
      ],
    }],
    stop: { path: "/transcoder/terminate", body: (r) => ({ uri: r.uri }) },
  },
];

/** Builds each group's section: a table and its forms. */
function buildGroups() {
  const container = $("groups");
  for (const group of groups) {
    const section = el("section", undefined, { id: `${group.id}-section` });
    section.appendChild(el("h2", group.title));
    section.appendChild(el("table", undefined, { id: group.id }));
    for (const form of group.forms) section.appendChild(buildForm(form));
    container.appendChild(section);
  }
}

/** A form calling `path` with its filled fields; empty fields are left out of the body. */
function buildForm({ path, label, fields }) {
  const form = el("form", undefined, { "data-path": path, class: "operation" });
  for (const [name, kind, placeholder] of fields) {
    const input = kind === "bool"
      ? el("select", undefined, { name })
      : kind === "json"
      ? el("textarea", undefined, { name, rows: "1", placeholder: placeholder ?? "" })
      : el("input", undefined, { name, placeholder: placeholder ?? "" });
    if (kind === "bool") {
      for (const value of ["", "true", "false"]) input.appendChild(el("option", value, { value }));
    }
    input.dataset.kind = kind;
    const wrap = el("label", `${name} `);
    wrap.appendChild(input);
    form.appendChild(wrap);
  }
  form.appendChild(el("button", label, { type: "submit" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    run(label, () => rest(path, formBody(form)));
  });
  return form;
}

/** The JSON body of a form: typed values of its filled fields. */
function formBody(form) {
  const body = {};
  for (const input of form.querySelectorAll("[name]")) {
    const text = input.value.trim();
    if (text === "") continue;
    const kind = input.dataset.kind;
    if (kind === "int") body[input.name] = Number(text);
    else if (kind === "bool") body[input.name] = text === "true";
    else if (kind === "json") {
      try {
        body[input.name] = JSON.parse(text);
      } catch {
        throw new Error(`${input.name}: not valid JSON`);
      }
    } else body[input.name] = text;
  }
  return body;
}

/** Stream size as WxH, codecs as video/audio. */
const size = (s) => (s.width > 0 && s.height > 0 ? `${s.width}x${s.height}` : "");
const codecs = (s) =>
  [s.hasVideo ? s.videoCodec : "", s.hasAudio ? s.audioCodec : ""].filter((c) => c).join(" / ");

function renderStreams(streams) {
  renderTable(
    $("streams"),
    [
      ["Name", field("name")],
      ["Provider", field("mediaProvider")],
      ["Type", (s) => (s.published ? "publish" : "play")],
      ["Status", field("status")],
      ["Codecs", codecs],
      ["Size", size],
      ["Bitrate (kbps)", (s) => s.bitrate || ""],
      ["FPS", (s) => s.fps || ""],
      ["Readers", (s) => readers[s.mediaSessionId] ?? ""],
    ],
    streams,
    {
      key: (s) => s.mediaSessionId,
      actions: (s) => [
        ...(s.published
          ? [button("Preview", () => startPreview(s.name), { class: "preview" })]
          : []),
        ...(s.published
          ? [
            button("Record", () => rest("/recorder/startup", { mediaSessionId: s.mediaSessionId })),
          ]
          : []),
        button("Stop", () => rest("/stream/terminate", { mediaSessionId: s.mediaSessionId })),
      ],
    },
  );
}

function renderSessions(sessions) {
  renderTable(
    $("sessions"),
    [
      ["Session", field("sessionId")],
      ["App", field("appKey")],
      ["Origin", field("origin")],
      ["Providers", (c) => (c.mediaProviders ?? []).join(", ")],
      ["Client", (c) => [c.clientVersion, c.clientBrowserVersion].filter((v) => v).join(" ")],
    ],
    sessions,
    {
      key: (c) => c.sessionId,
      actions: (c) => [
        button("Disconnect", () => rest("/connection/terminate", { sessionId: c.sessionId })),
      ],
    },
  );
}

function renderRecords(files) {
  renderTable(
    $("records"),
    [
      ["File", field("name")],
      ["Size (bytes)", field("bytes")],
      ["Modified", (f) => (f.modified ? new Date(f.modified).toLocaleString() : "")],
    ],
    files,
    {
      key: (f) => f.name,
      actions: (f) => [button("Download", () => download(f.url, f.name))],
    },
  );
}

/**
 * Downloads a recording: with credentials through fetch (a plain link would carry none),
 * else as a plain link the browser streams to disk.
 */
async function download(url, name) {
  const a = el("a", undefined, { download: name });
  let objectUrl;
  if (authorization) {
    const res = await fetch(url, {
      headers: { Authorization: authorization },
      credentials: "omit",
    });
    if (res.status === 401) throw new UnauthorizedError("credentials required");
    if (!res.ok) throw new Error(`${res.status} ${await res.text()}`);
    objectUrl = URL.createObjectURL(await res.blob());
    a.href = objectUrl;
  } else {
    a.href = url;
  }
  document.body.appendChild(a);
  a.click();
  a.remove();
  if (objectUrl) setTimeout(() => URL.revokeObjectURL(objectUrl), 60_000);
}

function renderLog({ lines }) {
  const shown = [];
  for (const line of lines) {
    let entry;
    try {
      entry = JSON.parse(line);
    } catch {
      shown.push(line); // a line cut at its length cap
      continue;
    }
    const { time, level, msg, ...fields } = entry;
    shown.push(`${time} ${level.toUpperCase()} ${msg} ${JSON.stringify(fields)}`);
  }
  const pre = $("log");
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = shown.join("\n");
  if (atBottom) pre.scrollTop = pre.scrollHeight;
}

let refreshing = false;
let refreshAgain = false;

/**
 * Reads everything and renders it, then again in `pollIntervalMs`; a part that fails says so
 * in the status line. A call while one runs makes one more run after it, not a second loop.
 */
async function refresh() {
  if (refreshing) {
    refreshAgain = true;
    return;
  }
  refreshing = true;
  clearTimeout(pollTimer);
  try {
    await refreshOnce();
  } finally {
    refreshing = false;
  }
  if (refreshAgain) {
    refreshAgain = false;
    return refresh();
  }
  if (!$("main").hidden) pollTimer = setTimeout(refresh, pollIntervalMs);
}

async function refreshOnce() {
  const parts = [
    call("/console/api/readers").then((r) => (readers = r)),
    rest("/stream/find_all").then(renderStreams),
    rest("/connection/find_all").then(renderSessions),
    ...groups.map((g) =>
      rest(g.list).then((rows) =>
        renderTable($(g.id), g.columns, rows, {
          key: g.key,
          actions: (r) => [button("Stop", () => rest(g.stop.path, g.stop.body(r)))],
        })
      )
    ),
    call("/console/api/records").then(renderRecords),
    call("/console/api/logs").then(renderLog),
  ];
  const results = await Promise.allSettled(parts);
  const failed = results.filter((r) => r.status === "rejected").map((r) => r.reason);
  if (failed.some((err) => err instanceof UnauthorizedError)) return showLogin();
  if (failed.length > 0) status(`refresh: ${failed[0].message}`, true);
  document.body.dataset.refreshed = String(Date.now());
}

// --- Preview over WHEP ----------------------------------------------------------------------

let preview;

/** Plays `name` over WHEP into the preview video. */
async function startPreview(name) {
  await stopPreview();
  $("preview").hidden = false;
  $("preview-name").textContent = name;
  $("preview-state").textContent = "connecting";
  // Only host candidates: the console reaches the server directly.
  const pc = new RTCPeerConnection({ iceServers: [] });
  const video = $("preview-video");
  const media = new MediaStream();
  video.srcObject = media;
  pc.addTransceiver("video", { direction: "recvonly" });
  pc.addTransceiver("audio", { direction: "recvonly" });
  pc.ontrack = (event) => media.addTrack(event.track);
  pc.onconnectionstatechange = () => ($("preview-state").textContent = pc.connectionState);
  preview = { pc, name };
  await pc.setLocalDescription(await pc.createOffer());
  await gathered(pc);
  const headers = { "Content-Type": "application/sdp" };
  if (authorization) headers.Authorization = authorization;
  const res = await fetch(`${info.whepPath}/${encodeURIComponent(name)}`, {
    method: "POST",
    headers,
    body: pc.localDescription.sdp,
    credentials: "omit",
  });
  if (res.status === 401) throw new UnauthorizedError("credentials required");
  if (res.status !== 201) throw new Error(`WHEP ${res.status} ${await res.text()}`);
  preview.resource = res.headers.get("Location");
  await pc.setRemoteDescription({ type: "answer", sdp: await res.text() });
}

/** Waits until ICE gathering completes (or a short while): the offer carries the candidates. */
function gathered(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, iceGatheringWaitMs);
    pc.addEventListener("icegatheringstatechange", () => {
      if (pc.iceGatheringState === "complete") {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}

/** Ends the preview: DELETE on the WHEP resource, then the peer connection. */
async function stopPreview() {
  const current = preview;
  preview = undefined;
  $("preview").hidden = true;
  $("preview-video").srcObject = null;
  if (!current) return;
  current.pc.close();
  if (current.resource) {
    const headers = authorization ? { Authorization: authorization } : {};
    await fetch(current.resource, { method: "DELETE", headers, credentials: "omit" }).catch(
      () => {},
    );
  }
}

// --- Sign-in --------------------------------------------------------------------------------

function showLogin() {
  clearTimeout(pollTimer);
  $("main").hidden = true;
  $("login").hidden = false;
  $("sign-out").hidden = true;
  $("login-error").textContent = authorization ? "the server refused these credentials" : "";
  status("");
}

/** The Authorization header of the login form's fields. */
function loginHeader(form) {
  const token = form.elements.token.value.trim();
  if (token) return `Bearer ${token}`;
  const user = form.elements.user.value;
  const password = form.elements.password.value;
  if (!user) return undefined;
  // btoa takes Latin-1 only: encode the UTF-8 bytes (the server reads Basic as UTF-8).
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  return `Basic ${btoa(String.fromCharCode(...bytes))}`;
}

async function signIn(event) {
  event.preventDefault();
  const header = loginHeader(event.target);
  if (!header) {
    $("login-error").textContent = "give a user and password, or a token";
    return;
  }
  authorization = header;
  try {
    await start();
    sessionStorage.setItem(authKey, header);
    event.target.reset();
  } catch (err) {
    if (!(err instanceof UnauthorizedError)) $("login-error").textContent = err.message;
  }
}

function signOut() {
  sessionStorage.removeItem(authKey);
  authorization = undefined;
  stopPreview();
  showLogin();
}

/** Reads the server's info (the first call that needs credentials) and starts polling. */
async function start() {
  try {
    info = await call("/console/api/info");
  } catch (err) {
    if (err instanceof UnauthorizedError) showLogin();
    throw err;
  }
  $("server-info").textContent = `version ${info.version}`;
  $("login").hidden = true;
  $("main").hidden = false;
  $("sign-out").hidden = !authorization;
  await refresh();
}

buildGroups();
$("login").addEventListener("submit", signIn);
$("sign-out").addEventListener("click", signOut);
$("preview-close").addEventListener("click", () => stopPreview());
globalThis.addEventListener("pagehide", () => stopPreview());
start().catch((err) => {
  if (!(err instanceof UnauthorizedError)) status(err.message, true);
});
