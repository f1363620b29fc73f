// tokenwire.js — a browser client for the tokenwire WebSocket session (docs/protocol.md), as a
// plain ES module: no build step, no dependencies.
//
//   import { connect } from "/static/tokenwire.js";
//   const session = await connect({ apiKey: "…" });          // same host as the page by default
//   const stream = session.chat({ messages: [{ role: "user", content: "Hi" }], max_tokens: 64 });
//   for await (const chunk of stream) console.log(chunk.choices[0]?.delta);
//   stream.cancel();                                          // ends the request at the server
//
// What it implements: the versioned subprotocol with the API key in the `tokenwire.auth.*`
// subprotocol (browsers cannot set headers on a WebSocket), session.created first, `seq` checked
// to grow by one, many requests multiplexed on one socket by `id`, async-iterator streams of
// OpenAI chunks / Anthropic events / engine steps, `cancel`, the primitive `render`, `generate`
// and `derender` frames (with the derender state carried for you), `session.update`, `ping`
// keep-alive, and typed errors from `error` frames and closes. At most the server's
// `max_in_flight` requests are on the wire at once: later ones wait here, in order, and are sent
// as earlier ones end (never refused with `too_many_requests`); cancelling one that waits ends it
// at once.
//
// Reconnect and resume (docs/protocol.md §8, opt-in per stream as in client_sdk):
//
//   const stream = session.chat(body, { resumable: true });  // or session.update {resumable: true}
//
// Each delta of a resumable stream carries a signed checkpoint; chunks not yet covered by one are
// held back here, so the text reaches you exactly once. When the socket drops (or the server ends
// the session with `session_closed`, or drains with `shutting_down`), the session opens a new
// socket to the same URL (a load balancer picks a replica that shares `--state-secret`), re-applies
// the `session.update` settings, and sends each unfinished resumable stream again with `resume`
// ({request_id: stream_id, checkpoint, output_token_ids}); `engine_unavailable` resumes on the same
// session. The stream's async iterator just goes on; `stream.id` is the id on the wire now and
// `stream.resumes` counts the resumes. A stream resumes at most `maxResumes` (default 3) times in a
// row without a new checkpoint, and a session tries `reconnectAttempts` (default 5) sockets with
// backoff before it gives up; then the error is thrown as before. Requests that are not resumable
// still fail with ConnectionLost when the socket drops; requests that were waiting for a slot are
// sent on the new session. Without a resumable stream in flight a dropped session closes as before.

export const PROTOCOL = "tokenwire.v1";
export const AUTH_PREFIX = "tokenwire.auth.";
const FINAL = new Set(["render.done", "derender.delta", "generate.done", "chat.done", "completion.done",
  "messages.done", "response.done", "error"]);
const PIPELINE_DELTAS = new Set(["chat.delta", "completion.delta", "messages.delta"]);
// error codes after which a resumable stream resumes (docs/protocol.md §3, §8)
const RESUME_ON = new Set(["engine_unavailable", "shutting_down", "session_closed"]);
const DRAIN_CLOSE_MS = 5000; // after shutting_down: wait this long for the close, else use the session again

/** An error the server reported (`error` frame) or a broken connection. */
export class TokenwireError extends Error {
  constructor(message, { code = "internal_error", status = 500, param = null, reason = null } = {}) {
    super(message);
    this.name = "TokenwireError";
    this.code = code;
    this.status = status;
    this.param = param;
    this.reason = reason;
  }
}

/** The connection closed (or never opened) while a request was in flight. */
export class ConnectionLost extends TokenwireError {
  constructor(message, { closeCode = null, closeReason = "" } = {}) {
    super(message, { code: "connection_lost", status: 0 });
    this.name = "ConnectionLost";
    this.closeCode = closeCode;
    this.closeReason = closeReason;
  }
}

/** The `tokenwire.auth.*` subprotocol that carries `key`: base64url of its UTF-8 bytes, no padding. */
export function authSubprotocol(key) {
  const bytes = new TextEncoder().encode(key);
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return AUTH_PREFIX + btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** The session URL for a server base URL (http(s):// or ws(s)://); default: the page's own host. */
export function sessionUrl(base) {
  const url = new URL(base ?? globalThis.location.href);
  if (url.protocol === "http:") url.protocol = "ws:";
  else if (url.protocol === "https:") url.protocol = "wss:";
  const path = url.pathname.replace(/\/+$/, "");
  url.pathname = path.endsWith("/v1/session") ? path : "/v1/session";
  url.search = "";
  url.hash = "";
  return url.toString();
}

/**
 * Open a session. Options: `url` (server base URL; default the page's host), `apiKey`,
 * `keepaliveMs` (ping interval; default a third of the server's idle timeout, at most 30 s; 0 off),
 * `WebSocket` (an implementation to use instead of the global one), `reconnectAttempts` (sockets
 * tried when resumable streams must resume; default 5, 0: never reconnect), `maxResumes` (resumes
 * of one stream in a row without a new checkpoint; default 3).
 * Resolves once `session.created` arrived; rejects with a ConnectionLost when the server refuses
 * the upgrade (the browser does not say why: a 401 / 403 / 400 all look the same).
 */
export function connect({ url, apiKey, keepaliveMs, WebSocket: Impl = globalThis.WebSocket, reconnectAttempts = 5,
  maxResumes = 3 } = {}) {
  const protocols = [PROTOCOL];
  if (apiKey) protocols.push(authSubprotocol(apiKey));
  const target = sessionUrl(url);
  const open = () => new Impl(target, protocols);
  const ws = open();
  return new Promise((resolve, reject) => {
    const session = new Session(ws, { keepaliveMs, open, reconnectAttempts, maxResumes });
    session._opened = { resolve, reject };
  });
}

export class Session {
  constructor(ws, { keepaliveMs, open = null, reconnectAttempts = 5, maxResumes = 3 } = {}) {
    this.info = null; // the session.created frame (of the current socket)
    this.closed = false;
    this.reconnects = 0; // sockets reopened to resume streams
    this.closeCode = null;
    this.closeReason = "";
    this.onclose = null; // callback(session) when the socket closes
    this._requests = new Map(); // id → RequestStream (sent or waiting)
    this._queue = []; // [frame, stream] waiting for a free slot (max_in_flight)
    this._inFlight = 0; // requests sent whose final frame has not arrived
    this._waiters = new Map(); // event_id → {resolve, reject}
    this._counter = 0;
    this._keepaliveMs = keepaliveMs;
    this._timer = null;
    this._opened = null;
    this._open = open; // () => a new WebSocket to the same URL (null: no reconnect)
    this._reconnectAttempts = open ? reconnectAttempts : 0;
    this.maxResumes = maxResumes;
    this._settingsPatch = null; // what session.update set, re-applied on a new socket
    this._created = null; // {resolve, reject} while a new socket waits for session.created
    this._reconnecting = false;
    this._draining = false; // shutting_down: send nothing more on this socket
    this._userClosed = false;
    this._lostWs = null;
    this._attach(ws);
  }

  _attach(ws) {
    this.ws = ws;
    this.lastSeq = 0;
    ws.onmessage = (event) => { if (this.ws === ws) this._onMessage(event); };
    ws.onclose = (event) => this._onClose(event, ws);
    ws.onerror = () => {}; // a close event always follows
  }

  /** Request frame types the server enables (docs/protocol.md §11). */
  get frames() { return this.info ? this.info.frames : []; }
  get model() { return this.info ? this.info.session.model : null; }
  get limits() { return this.info ? this.info.limits : {}; }
  /** What the server's request handling supports (docs/protocol.md §5.1): `tool_call_parser`,
   *  `auto_tool_choice`, `reasoning_parser`; `{}` from a server that does not say. */
  get features() { return (this.info && this.info.features) || {}; }
  /** The subprotocol the server selected (always "tokenwire.v1" for this module). */
  get protocol() { return this.ws.protocol; }

  /** A streaming OpenAI chat completion: an async iterator of `chat.completion.chunk` objects. */
  chat(body, options) { return this._pipeline("chat", body, options); }
  /** A streaming OpenAI completion: an async iterator of `text_completion` chunks. */
  completion(body, options) { return this._pipeline("completion", body, options); }
  /** A streaming Anthropic message: an async iterator of Anthropic stream events. */
  messages(body, options) { return this._pipeline("messages", body, options); }
  /** A streaming OpenAI Responses request (docs/protocol.md §4.5): an async iterator of Responses
   *  stream events, `response.created` to `response.completed`; never resumable. */
  response(body) {
    const stream = this._start({ type: "response", body });
    stream.resumable = false;
    return stream;
  }

  /** Render a request body: a GenerateRequest object (a list of them for "completion"). */
  async render(kind, body) {
    const stream = this._start({ type: "render", kind, body });
    return (await stream.final()).result;
  }

  /** Token-in / token-out generation: an async iterator of engine steps; `usage` after the end. */
  generate(body) { return this._start({ type: "generate", body }); }

  /** One derender step (you carry `stream_state`); see `derenderer` for the state handled for you. */
  async derender(kind, body) {
    const stream = this._start({ type: "derender", kind, body });
    return (await stream.final()).result;
  }

  /** A streaming derender that carries the signed state per choice: `await d.push(generateChunk)`. */
  derenderer(kind, { request = null, promptTokenIds = null } = {}) {
    const states = new Map();
    const base = { prompt_token_ids: promptTokenIds };
    if (request) base[kind === "chat" ? "chat_request" : "completion_request"] = request;
    return {
      states,
      push: async (chunk) => {
        const out = [];
        for (const choice of chunk.choices || []) {
          const index = choice.index ?? 0;
          const result = await this.derender(kind, {
            ...base, stream_state: states.get(index) ?? null,
            generate_chunk: { request_id: chunk.request_id, choices: [choice] },
          });
          states.set(index, result.stream_state);
          out.push(result.chunk);
        }
        return out;
      },
    };
  }

  /** Cancel a request by id; its stream ends with status "cancelled". */
  cancel(id) {
    const request = this._requests.get(id);
    if (!request || request.cancelling) return;
    request.cancelling = true;
    const waiting = this._queue.findIndex(([, stream]) => stream === request);
    if (waiting < 0 && !request._pendingResume) { this._send({ type: "cancel", id }); return; }
    // never sent, or waiting to resume: end it here, as the server would have
    if (waiting >= 0) this._queue.splice(waiting, 1);
    request._pendingResume = false;
    this._requests.delete(id);
    request._push(request.type === "render" || request.type === "derender"
      ? { type: "error", id, error: { code: "cancelled", message: `The ${request.type} request was cancelled.`, status: 499 } }
      : { type: `${request.type}.done`, id, status: "cancelled" });
  }

  /** `session.update`: resolves with the effective settings. */
  async updateSession(patch) {
    const frame = await this._roundtrip({ type: "session.update", session: patch });
    this.info.session = frame.session;
    this._settingsPatch = mergePatch(this._settingsPatch ?? {}, patch);
    return frame.session;
  }

  /** A `ping` / `pong` round trip (also keeps an idle session open). */
  async ping() { await this._roundtrip({ type: "ping" }); }

  close(code = 1000, reason = "") {
    this._userClosed = true;
    if (!this.closed) this.ws.close(code, reason);
  }

  // -- internals -----------------------------------------------------------------------------------
  _pipeline(type, body, { resumable } = {}) {
    const frame = { type, body };
    if (resumable !== undefined) frame.resumable = resumable;
    const stream = this._start(frame);
    stream.resumable = resumable ?? Boolean(this.info && this.info.session && this.info.session.resumable);
    stream._frame = frame;
    return stream;
  }

  _start(frame) {
    if (this.closed) throw new ConnectionLost("the session is closed", { closeCode: this.closeCode });
    const id = `${frame.type}-${++this._counter}`;
    const stream = new RequestStream(this, id, frame.type);
    this._requests.set(id, stream);
    this._queue.push([{ ...frame, id }, stream]);
    this._pump();
    return stream;
  }

  /** Send waiting requests while the server's max_in_flight allows (docs/protocol.md §10). */
  _pump() {
    if (this._reconnecting || this._draining) return; // sent on the next socket
    const limit = this.limits.max_in_flight ?? Infinity;
    while (this._queue.length > 0 && this._inFlight < limit) {
      const [frame] = this._queue.shift();
      this._inFlight += 1;
      this._send(frame);
    }
  }

  _send(frame) {
    if (this.ws.readyState === 1) this.ws.send(JSON.stringify(frame));
  }

  _roundtrip(frame) {
    const eventId = `ev-${++this._counter}`;
    return new Promise((resolve, reject) => {
      if (this.closed) { reject(new ConnectionLost("the session is closed")); return; }
      if (this.ws.readyState !== 1) { reject(new ConnectionLost("the session is reconnecting")); return; }
      this._waiters.set(eventId, { resolve, reject });
      this._send({ ...frame, event_id: eventId });
    });
  }

  _onMessage(event) {
    if (typeof event.data !== "string") return this._fail("the server sent a binary message");
    let frame;
    try { frame = JSON.parse(event.data); } catch { return this._fail("a frame is not JSON"); }
    if (frame.seq !== this.lastSeq + 1) return this._fail(`seq ${frame.seq} after ${this.lastSeq}`);
    this.lastSeq = frame.seq;
    if (frame.type === "session.created") {
      this.info = frame;
      this._startKeepalive();
      if (this._opened) { this._opened.resolve(this); this._opened = null; }
      if (this._created) { this._created.resolve(); this._created = null; }
      return;
    }
    if (frame.id != null) {
      const request = this._requests.get(frame.id);
      if (!request) return; // e.g. unknown_id for a cancel that crossed the final frame
      if (frame.type === "error" && frame.error.code === "unknown_id") return;
      if (frame.type === "error" && RESUME_ON.has(frame.error.code) && request.resumable && request._finished
          && !request.cancelling) { // only usage / the done frame were missing
        frame = { type: `${request.type}.done`, id: frame.id, status: "completed" };
      } else if (frame.type === "error" && RESUME_ON.has(frame.error.code) && request._canResume()) {
        this._inFlight -= 1; // the server ended it; it continues from its checkpoint
        request._interrupted();
        if (frame.error.code === "engine_unavailable") { this._resend(request); return; }
        request._pendingResume = true; // on the next socket (session_closed: the close follows)
        if (frame.error.code === "shutting_down" && !this._draining) {
          this._draining = true;
          const ws = this.ws;
          setTimeout(() => { // a front end that does not drain reports its engine's drain so
            if (this.ws !== ws || this._lostWs === ws || !this._draining) return;
            this._draining = false;
            this._resumePending();
            this._pump();
          }, DRAIN_CLOSE_MS);
        }
        return;
      }
      request._push(frame);
      if (FINAL.has(frame.type)) {
        this._requests.delete(frame.id);
        this._inFlight -= 1;
        this._pump();
      }
      return;
    }
    const waiter = this._waiters.get(frame.event_id);
    if (waiter) {
      this._waiters.delete(frame.event_id);
      if (frame.type === "error") waiter.reject(toError(frame.error));
      else waiter.resolve(frame);
    }
  }

  _fail(why) {
    // The connection is broken (docs/protocol.md §14.4): close it; every request ends in error.
    this.ws.close(1002, "protocol error");
    this._onClose({ code: 1002, reason: why });
  }

  _onClose(event, ws = this.ws) {
    if (this.closed || ws !== this.ws || this._lostWs === ws) return;
    this._lostWs = ws;
    clearInterval(this._timer);
    this._draining = false;
    const error = new ConnectionLost(
      this.info ? `the session closed (${event.code}${event.reason ? ": " + event.reason : ""})`
        : "the server refused the session (check the URL, the API key and the Origin)",
      { closeCode: event.code, closeReason: event.reason || "" });
    for (const waiter of this._waiters.values()) waiter.reject(error);
    this._waiters.clear();
    if (this._created) { this._created.reject(error); this._created = null; return; } // a reconnect attempt failed
    if (this._opened || this._userClosed || this._reconnectAttempts <= 0) { this._closeFor(event, error); return; }
    // Which requests live on: resumable streams (from their checkpoint) and those never sent.
    const waiting = new Set(this._queue.map(([, stream]) => stream));
    let resuming = 0;
    for (const [id, request] of [...this._requests]) {
      if (waiting.has(request)) continue;
      if (request._pendingResume) { resuming += 1; continue; }
      if (request._finished && !request.cancelling) { // only usage / the done frame were missing
        this._requests.delete(id);
        request._push({ type: `${request.type}.done`, id, status: "completed" });
      } else if (request.cancelling) {
        this._requests.delete(id);
        request._push({ type: `${request.type}.done`, id, status: "cancelled" });
      } else if (request._canResume()) {
        request._interrupted();
        request._pendingResume = true;
        resuming += 1;
      } else {
        this._requests.delete(id);
        request._fail(error);
      }
    }
    this._inFlight = 0;
    if (resuming === 0) { this._closeFor(event, error); return; }
    this._reconnect(event, error);
  }

  /** Open sockets (with backoff) until one gives session.created; then resume and send. */
  async _reconnect(event, error) {
    this._reconnecting = true;
    let delay = 250;
    for (let attempt = 0; attempt < this._reconnectAttempts && !this._userClosed; attempt++) {
      if (attempt) {
        await new Promise((resolve) => { setTimeout(resolve, delay * (0.5 + Math.random() / 2)); });
        delay = Math.min(delay * 2, 4000);
        if (this._userClosed) break;
      }
      try {
        await new Promise((resolve, reject) => {
          this._created = { resolve, reject };
          this._attach(this._open());
        });
        if (this._settingsPatch) {
          const frame = await this._roundtrip({ type: "session.update", session: this._settingsPatch });
          this.info.session = frame.session;
        }
      } catch (err) {
        if (err instanceof ConnectionLost) continue;
        error = err; // the settings were refused on the new session
        break;
      }
      this._reconnecting = false;
      this.reconnects += 1;
      this._resumePending();
      this._pump();
      return;
    }
    this._reconnecting = false;
    if (this.ws.readyState <= 1) this.ws.close(1000, "");
    this._lostWs = this.ws;
    this._closeFor(event, error);
  }

  _resumePending() {
    for (const request of [...this._requests.values()]) if (request._pendingResume) this._resend(request);
  }

  /** Send a resumable stream again, under a new id, from its last checkpoint (docs/protocol.md §8). */
  _resend(request) {
    request._pendingResume = false;
    const id = `${request.type}-${++this._counter}`;
    this._requests.delete(request.id);
    request.id = id;
    this._requests.set(id, request);
    const frame = { ...request._frame, id, resumable: true };
    const resume = request._resumeField();
    if (resume) frame.resume = resume;
    this._inFlight += 1;
    this._send(frame);
  }

  _closeFor(event, error) {
    this.closed = true;
    this.closeCode = event.code;
    this.closeReason = event.reason || "";
    clearInterval(this._timer);
    if (this._opened) { this._opened.reject(error); this._opened = null; }
    for (const request of this._requests.values()) request._fail(error);
    this._requests.clear();
    this._queue = [];
    for (const waiter of this._waiters.values()) waiter.reject(error);
    this._waiters.clear();
    if (this.onclose) this.onclose(this);
  }

  _startKeepalive() {
    clearInterval(this._timer);
    const idle = (this.info.limits.idle_timeout_s ?? 90) * 1000;
    const every = this._keepaliveMs ?? Math.min(idle / 3, 30000);
    if (every > 0) this._timer = setInterval(() => { this.ping().catch(() => {}); }, every);
  }
}

/** One request's frames. Async-iterate it for its items; `cancel()` stops it at the server. */
export class RequestStream {
  constructor(session, id, type) {
    this.session = session;
    this.id = id;
    this.type = type;
    this.status = null; // "completed" / "cancelled" once ended
    this.usage = null; // generate: usage from generate.done
    this.cancelling = false;
    // resumable pipeline streams (docs/protocol.md §8)
    this.resumable = false;
    this.resumes = 0; // how many times this stream resumed
    this._frame = null; // the request frame as first sent
    this._streamId = null;
    this._checkpoint = null;
    this._coveredIds = []; // every output token id up to the latest checkpoint
    this._pendingIds = []; // ids of held frames (no checkpoint yet)
    this._held = null; // a delta frame whose payloads no checkpoint covers yet
    this._finished = false; // a finish reason was delivered: only usage / done can be missing
    this._noProgress = 0; // resumes since the last new checkpoint
    this._pendingResume = false;
    this._frames = [];
    this._error = null;
    this._ended = false;
    this._wake = null;
  }

  cancel() { this.session.cancel(this.id); }

  /** Wait for the final frame (the items before it are dropped); returns it. */
  async final() {
    for (;;) {
      const frame = await this._next();
      if (frame === null) throw new TokenwireError("the request ended without a result");
      if (FINAL.has(frame.type)) return frame;
    }
  }

  async *[Symbol.asyncIterator]() {
    try {
      for (;;) {
        const frame = await this._next();
        if (frame === null) return;
        if (frame.type === "chat.delta" || frame.type === "completion.delta") yield* frame.chunks;
        else if (frame.type === "messages.delta" || frame.type === "response.delta") yield* frame.events;
        else if (frame.type === "generate.delta") yield frame.chunk;
        else if (frame.type === "generate.done") this.usage = frame.usage;
      }
    } finally {
      if (!this._ended) this.cancel(); // leaving the loop early stops the request
    }
  }

  _push(frame) {
    if (this.resumable && PIPELINE_DELTAS.has(frame.type)) {
      const field = frame.type === "messages.delta" ? "events" : "chunks";
      if (this._held) frame = { ...frame, [field]: [...this._held[field], ...frame[field]] };
      this._held = null;
      if (frame.stream_id) this._streamId = frame.stream_id;
      const ids = frame.output_token_ids || [];
      if (!frame.checkpoint) { // not covered yet: a resume would send these chunks again
        this._pendingIds.push(...ids);
        this._held = frame;
        return;
      }
      this._coveredIds.push(...this._pendingIds, ...ids);
      this._pendingIds = [];
      this._checkpoint = frame.checkpoint;
      this._noProgress = 0;
      if (frame[field].some(finishes)) this._finished = true;
    } else if (FINAL.has(frame.type) && this._held) {
      this._frames.push(this._held);
      this._held = null;
    }
    this._frames.push(frame);
    this._notify();
  }

  /** Whether a break now resumes: at most `maxResumes` in a row without a new checkpoint. */
  _canResume() {
    return this.resumable && !this.cancelling && !this._finished && this._noProgress < this.session.maxResumes;
  }

  /** The connection (or the path to an engine) broke: what no checkpoint covers comes again. */
  _interrupted() {
    this._held = null;
    this._pendingIds = [];
    this.resumes += 1;
    this._noProgress += 1;
  }

  _resumeField() {
    if (this._checkpoint === null || this._streamId === null) return null; // nothing delivered: start over
    return { request_id: this._streamId, checkpoint: this._checkpoint, output_token_ids: [...this._coveredIds] };
  }

  _fail(error) {
    this._error = error;
    this._notify();
  }

  _notify() {
    if (this._wake) { const wake = this._wake; this._wake = null; wake(); }
  }

  async _next() {
    while (this._frames.length === 0) {
      if (this._ended) return null;
      if (this._error) { this._ended = true; throw this._error; }
      await new Promise((resolve) => { this._wake = resolve; });
    }
    const frame = this._frames.shift();
    if (frame.type === "error") { this._ended = true; throw toError(frame.error); }
    if (FINAL.has(frame.type)) { this._ended = true; this.status = frame.status ?? "completed"; }
    return frame;
  }
}

function finishes(payload) {
  if (payload.type === "message_stop") return true;
  return (payload.choices || []).some((choice) => choice.finish_reason != null);
}

function mergePatch(acc, patch) {
  const out = { ...acc };
  for (const [key, value] of Object.entries(patch)) {
    out[key] = (key === "sampling" || key === "chat_template_kwargs") && value && typeof value === "object"
      ? { ...(out[key] || {}), ...value } : value;
  }
  return out;
}

function toError(error) {
  return new TokenwireError(error.message || error.code, {
    code: error.code, status: error.status, param: error.param ?? null, reason: error.reason ?? null,
  });
}
