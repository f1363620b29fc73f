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

export const PROTOCOL = "tokenwire.v1";
export const AUTH_PREFIX = "tokenwire.auth.";
const FINAL = new Set(["render.done", "derender.delta", "generate.done", "chat.done", "completion.done",
  "messages.done", "error"]);

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
 * `WebSocket` (an implementation to use instead of the global one).
 * Resolves once `session.created` arrived; rejects with a ConnectionLost when the server refuses
 * the upgrade (the browser does not say why: a 401 / 403 / 400 all look the same).
 */
export function connect({ url, apiKey, keepaliveMs, WebSocket: Impl = globalThis.WebSocket } = {}) {
  const protocols = [PROTOCOL];
  if (apiKey) protocols.push(authSubprotocol(apiKey));
  const ws = new Impl(sessionUrl(url), protocols);
  return new Promise((resolve, reject) => {
    const session = new Session(ws, { keepaliveMs });
    session._opened = { resolve, reject };
  });
}

export class Session {
  constructor(ws, { keepaliveMs } = {}) {
    this.ws = ws;
    this.info = null; // the session.created frame
    this.lastSeq = 0;
    this.closed = false;
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
    ws.onmessage = (event) => this._onMessage(event);
    ws.onclose = (event) => this._onClose(event);
    ws.onerror = () => {}; // a close event always follows
  }

  /** Request frame types the server enables (docs/protocol.md §11). */
  get frames() { return this.info ? this.info.frames : []; }
  get model() { return this.info ? this.info.session.model : null; }
  get limits() { return this.info ? this.info.limits : {}; }
  /** The subprotocol the server selected (always "tokenwire.v1" for this module). */
  get protocol() { return this.ws.protocol; }

  /** A streaming OpenAI chat completion: an async iterator of `chat.completion.chunk` objects. */
  chat(body, options) { return this._pipeline("chat", body, options); }
  /** A streaming OpenAI completion: an async iterator of `text_completion` chunks. */
  completion(body, options) { return this._pipeline("completion", body, options); }
  /** A streaming Anthropic message: an async iterator of Anthropic stream events. */
  messages(body, options) { return this._pipeline("messages", body, options); }

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
    if (waiting < 0) { this._send({ type: "cancel", id }); return; }
    // never sent: end it here, as the server would have
    this._queue.splice(waiting, 1);
    this._requests.delete(id);
    request._push(request.type === "render" || request.type === "derender"
      ? { type: "error", id, error: { code: "cancelled", message: `The ${request.type} request was cancelled.`, status: 499 } }
      : { type: `${request.type}.done`, id, status: "cancelled" });
  }

  /** `session.update`: resolves with the effective settings. */
  async updateSession(patch) {
    const frame = await this._roundtrip({ type: "session.update", session: patch });
    this.info.session = frame.session;
    return frame.session;
  }

  /** A `ping` / `pong` round trip (also keeps an idle session open). */
  async ping() { await this._roundtrip({ type: "ping" }); }

  close(code = 1000, reason = "") {
    if (!this.closed) this.ws.close(code, reason);
  }

  // -- internals -----------------------------------------------------------------------------------
  _pipeline(type, body, { resumable } = {}) {
    const frame = { type, body };
    if (resumable !== undefined) frame.resumable = resumable;
    return this._start(frame);
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
      return;
    }
    if (frame.id != null) {
      const request = this._requests.get(frame.id);
      if (!request) return; // e.g. unknown_id for a cancel that crossed the final frame
      if (frame.type === "error" && frame.error.code === "unknown_id") return;
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

  _onClose(event) {
    if (this.closed) return;
    this.closed = true;
    this.closeCode = event.code;
    this.closeReason = event.reason || "";
    clearInterval(this._timer);
    const error = new ConnectionLost(
      this.info ? `the session closed (${event.code}${event.reason ? ": " + event.reason : ""})`
        : "the server refused the session (check the URL, the API key and the Origin)",
      { closeCode: event.code, closeReason: event.reason || "" });
    if (this._opened) { this._opened.reject(error); this._opened = null; }
    for (const request of this._requests.values()) request._fail(error);
    this._requests.clear();
    this._queue = [];
    for (const waiter of this._waiters.values()) waiter.reject(error);
    this._waiters.clear();
    if (this.onclose) this.onclose(this);
  }

  _startKeepalive() {
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
        else if (frame.type === "messages.delta") yield* frame.events;
        else if (frame.type === "generate.delta") yield frame.chunk;
        else if (frame.type === "generate.done") this.usage = frame.usage;
      }
    } finally {
      if (!this._ended) this.cancel(); // leaving the loop early stops the request
    }
  }

  _push(frame) {
    this._frames.push(frame);
    this._notify();
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

function toError(error) {
  return new TokenwireError(error.message || error.code, {
    code: error.code, status: error.status, param: error.param ?? null, reason: error.reason ?? null,
  });
}
