// The ES module's own protocol tests, run in a browser page against the server that serves it
// (test.html). A test that needs what this server does not enable (the scale-out frames, an API
// key) is skipped, and says so: every test runs on a server with scale-out frames and an API key.
import { ConnectionLost, Session, TokenwireError, authSubprotocol, connect, sessionUrl } from "/static/tokenwire.js";

const USER = [{ role: "user", content: "Count to ten, please." }];

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

/** Thrown by a test that cannot run on this server; the runner reports it as skipped, with why. */
class Skip extends Error {}

function skip(reason) {
  throw new Skip(reason);
}

const NOT_ENABLED = "not enabled on this server";

async function collect(stream) {
  const items = [];
  for await (const item of stream) items.push(item);
  return items;
}

function chatText(chunks) {
  return chunks.map((c) => (c.choices[0]?.delta?.content ?? "") + (c.choices[0]?.delta?.reasoning ?? "")).join("");
}

function withTimeout(promise, ms, what) {
  return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: timed out`)), ms))]);
}

/** A WebSocket stand-in that plays scripted server frames (for what a real server never does). */
class ScriptedSocket {
  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.readyState = 1;
    this.protocol = protocols[0];
    this.sent = [];
    setTimeout(() => this.onmessage({ data: JSON.stringify({ type: "session.created", seq: 1, event_id: null,
      session_id: "sess_x", protocol_version: 1, frames: ["chat"], limits: { idle_timeout_s: 300 },
      session: { model: "m" } }) }), 0);
  }
  send(text) {
    this.sent.push(JSON.parse(text));
    const frame = JSON.parse(text);
    if (frame.type === "chat") { // a delta, then a frame that skips a seq number
      setTimeout(() => {
        this.onmessage({ data: JSON.stringify({ type: "chat.delta", seq: 2, event_id: null, id: frame.id, chunks: [] }) });
        this.onmessage({ data: JSON.stringify({ type: "chat.delta", seq: 4, event_id: null, id: frame.id, chunks: [] }) });
      }, 0);
    }
  }
  close(code) { this.readyState = 3; setTimeout(() => this.onclose({ code, reason: "" }), 0); }
}

/** Scripted sockets for resume: each socket plays `script(frame, socket, n)` for a chat frame
 * (`n`: the socket's number, from 1); `sockets` records every socket opened. */
function resumeSockets(script) {
  const sockets = [];
  return { sockets, Impl: class {
    constructor(url, protocols) {
      sockets.push(this);
      this.n = sockets.length;
      this.readyState = 1;
      this.protocol = protocols[0];
      this.sent = [];
      this.seq = 0;
      this.emit({ type: "session.created", event_id: null, session_id: `sess_${this.n}`, protocol_version: 1,
        frames: ["chat"], limits: { idle_timeout_s: 300 }, session: { model: "m" } });
    }
    emit(frame) { setTimeout(() => { if (this.readyState === 1) this.onmessage({ data: JSON.stringify({ ...frame, seq: ++this.seq }) }); }, 0); }
    drop() { setTimeout(() => { this.readyState = 3; this.onclose({ code: 1006, reason: "" }); }, 0); }
    send(text) {
      const frame = JSON.parse(text);
      this.sent.push(frame);
      if (frame.type === "chat") script(frame, this, this.n);
    }
    close(code) { if (this.readyState !== 3) { this.readyState = 3; setTimeout(() => this.onclose({ code, reason: "" }), 0); } }
  } };
}

function chunk(text, finish = null) {
  return { id: "chatcmpl-1", object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: text }, finish_reason: finish }] };
}

export const tests = {
  async "authSubprotocol is base64url of the UTF-8 key, without padding"() {
    assert(authSubprotocol("k") === "tokenwire.auth.aw", authSubprotocol("k"));
    assert(authSubprotocol("ü>?") === "tokenwire.auth.w7w-Pw", authSubprotocol("ü>?"));
    assert(sessionUrl("https://example.com:8443/x/") === "wss://example.com:8443/v1/session", sessionUrl("https://example.com:8443/x/"));
  },

  async "the key in the subprotocol opens a session; the server selects tokenwire.v1"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      assert(s.protocol === "tokenwire.v1", `selected ${s.protocol}`);
      assert(s.info.type === "session.created" && s.lastSeq === 1, "session.created comes first, seq 1");
      assert(s.info.protocol_version === 1, "protocol version 1");
      for (const t of ["chat", "completion", "messages", "response", "cancel", "ping"]) {
        assert(s.frames.includes(t), `frame ${t} enabled`);
      }
      const scaleOut = ["render", "generate", "derender"].filter((t) => s.frames.includes(t));
      assert(scaleOut.length === 0 || scaleOut.length === 3, `the scale-out frames come together (${scaleOut})`);
    } finally { s.close(); }
  },

  async "a wrong key is refused at the upgrade"({ apiKey }) {
    if (!apiKey) skip("no API key on this server");
    let error = null;
    try { (await connect({ apiKey: apiKey + "-wrong" })).close(); } catch (err) { error = err; }
    assert(error instanceof ConnectionLost, `refused (${error})`);
  },

  async "many requests share one socket and each ends with its own final frame"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      const streams = Array.from({ length: 6 }, (_, i) => s.chat({ messages: USER, max_tokens: 6 + i, seed: i, temperature: 1,
        stream_options: { include_usage: true } }));
      const results = await Promise.all(streams.map(collect));
      results.forEach((chunks, i) => {
        assert(streams[i].status === "completed", `stream ${i} completed`);
        assert(new Set(chunks.map((c) => c.id)).size === 1, "one chunk id per stream");
        const usage = chunks[chunks.length - 1].usage;
        assert(usage && usage.completion_tokens <= 6 + i, `usage of stream ${i}`);
      });
      assert(new Set(results.map((r) => r[0].id)).size === 6, "six distinct completions");
      await s.ping();
    } finally { s.close(); }
  },

  async "more requests than max_in_flight wait in the client and each ends with its own final frame"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      const limit = s.limits.max_in_flight;
      assert(Number.isInteger(limit) && limit > 0, `max_in_flight ${limit}`);
      const streams = Array.from({ length: limit + 40 }, (_, i) => s.chat({ messages: USER, max_tokens: 2, seed: i,
        temperature: 1 }));
      const waiting = streams[streams.length - 1];
      waiting.cancel(); // never sent yet: it ends at once, cancelled
      const results = await Promise.allSettled(streams.map(collect));
      const failed = results.filter((r) => r.status === "rejected").map((r) => `${r.reason.code}: ${r.reason.message}`);
      assert(failed.length === 0, `${failed.length} failed, e.g. ${failed[0]}`);
      assert(waiting.status === "cancelled", `the waiting request that was cancelled: ${waiting.status}`);
      const completed = streams.filter((st) => st.status === "completed").length;
      assert(completed === limit + 39, `${completed} completed`);
      await s.ping();
    } finally { s.close(); }
  },

  async "cancel ends a running request with status cancelled; the session lives on"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      const stream = s.chat({ messages: USER, max_tokens: 3000, temperature: 1 });
      let seen = 0;
      for await (const chunk of stream) {
        if (chunk.choices.length) seen += 1;
        if (seen === 2) stream.cancel();
      }
      assert(stream.status === "cancelled", `status ${stream.status}`);
      assert(seen < 3000, "stopped early");
      await s.ping();
    } finally { s.close(); }
  },

  async "leaving a for-await loop early cancels the request"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      const stream = s.chat({ messages: USER, max_tokens: 3000, temperature: 1 });
      for await (const chunk of stream) { if (chunk) break; } // eslint-disable-line no-unreachable-loop
      await withTimeout(stream.final(), 20000, "the cancelled request's final frame");
      assert(stream.status === "cancelled", `status ${stream.status}`);
    } finally { s.close(); }
  },

  async "an error frame fails only its request"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      let error = null;
      try { await collect(s.chat({ max_tokens: 4 })); } catch (err) { error = err; }
      assert(error instanceof TokenwireError, `an error (${error})`);
      assert(error.code === "invalid_request" && error.status === 400 && error.param === "messages", JSON.stringify(error));
      const ok = await collect(s.chat({ messages: USER, max_tokens: 3 }));
      assert(ok.length > 0, "the next request works");
    } finally { s.close(); }
  },

  async "an unknown frame type is answered with unknown_type"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      let error = null;
      try { await s._roundtrip({ type: "bogus" }); } catch (err) { error = err; }
      assert(error && error.code === "unknown_type", `unknown_type (${error && error.code})`);
      await s.ping();
    } finally { s.close(); }
  },

  async "render, generate and derender give the text the chat pipeline gives"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      if (!s.frames.includes("render")) skip(NOT_ENABLED);
      const body = { messages: USER, max_tokens: 8, seed: 11, temperature: 1 };
      const rendered = await s.render("chat", body);
      assert(Array.isArray(rendered.token_ids) && rendered.token_ids.length > 0, "render gives token ids");
      const gen = s.generate({ token_ids: rendered.token_ids, sampling_params: rendered.sampling_params });
      const d = s.derenderer("chat", { request: body, promptTokenIds: rendered.token_ids });
      const derendered = [];
      for await (const chunk of gen) derendered.push(...await d.push(chunk));
      assert(gen.status === "completed" && gen.usage.completion_tokens > 0 && gen.usage.completion_tokens <= 8, `generate usage ${JSON.stringify(gen.usage)}`);
      assert(d.states.get(0), "the state is carried");
      const piped = await collect(s.chat(body));
      assert(chatText(derendered) === chatText(piped), `${chatText(derendered)} != ${chatText(piped)}`);
    } finally { s.close(); }
  },

  async "messages streams Anthropic events from message_start to message_stop"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      const events = await collect(s.messages({ messages: USER, max_tokens: 5 }));
      assert(events[0].type === "message_start", events[0].type);
      assert(events[events.length - 1].type === "message_stop", events[events.length - 1].type);
    } finally { s.close(); }
  },

  async "response streams Responses events whose text is the final response's"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      const events = await collect(s.response({ input: "Count to ten, please.", max_output_tokens: 8 }));
      const last = events[events.length - 1];
      assert(events[0].type === "response.created", events[0].type);
      assert(["response.completed", "response.incomplete"].includes(last.type), last.type);
      assert(events.every((e, i) => e.sequence_number === i), "sequence_number counts up from 0");
      // reasoning (where the server has a reasoning parser) and answer text, in output order
      const deltas = new Set(["response.reasoning_text.delta", "response.output_text.delta"]);
      const text = events.filter((e) => deltas.has(e.type)).map((e) => e.delta).join("");
      const final = last.response.output.filter((i) => i.type === "message" || i.type === "reasoning")
        .flatMap((i) => i.content || []).map((p) => p.text).join("");
      assert(text.length > 0 && text === final, `streamed ${JSON.stringify(text)}, final ${JSON.stringify(final)}`);
      let refused = null;
      try { await collect(s.response({})); } catch (err) { refused = err; }
      assert(refused instanceof TokenwireError && refused.param === "input", `a body without input: ${refused}`);
    } finally { s.close(); }
  },

  async "session.update sets defaults for later requests"({ apiKey }) {
    const s = await connect({ apiKey });
    try {
      const settings = await s.updateSession({ sampling: { max_tokens: 2 } });
      assert(settings.sampling.max_tokens === 2, JSON.stringify(settings));
      const chunks = await collect(s.chat({ messages: USER, stream_options: { include_usage: true } }));
      assert(chunks[chunks.length - 1].usage.completion_tokens <= 2, "max_tokens from the session");
    } finally { s.close(); }
  },

  async "a resumable stream resumes from its last checkpoint on a new socket; held chunks come once"() {
    const { sockets, Impl } = resumeSockets((frame, ws, n) => {
      const delta = (text, checkpoint, ids, finish) => ({ type: "chat.delta", id: frame.id, stream_id: "s1", checkpoint,
        output_token_ids: ids, chunks: [chunk(text, finish)] });
      if (n === 1) { // "ab" covered by cp1, "c" not covered by any checkpoint, then the socket drops
        ws.emit(delta("ab", "cp1", [1, 2]));
        ws.emit(delta("c", null, [3]));
        ws.drop();
      } else {
        ws.emit(delta("cd", "cp2", [3, 4], "stop"));
        ws.emit({ type: "chat.done", id: frame.id, status: "completed" });
      }
    });
    const s = await connect({ url: "http://scripted.invalid", WebSocket: Impl });
    const stream = s.chat({ messages: USER }, { resumable: true });
    const text = chatText(await collect(stream));
    assert(text === "abcd", `text ${text}`);
    assert(stream.status === "completed" && stream.resumes === 1 && s.reconnects === 1 && sockets.length === 2, "resumed once");
    const [first, again] = [sockets[0].sent[0], sockets[1].sent[0]];
    assert(first.resumable === true && first.resume === undefined, JSON.stringify(first));
    assert(again.type === "chat" && again.id !== first.id && again.id === stream.id, "a new id on the wire");
    assert(JSON.stringify(again.body) === JSON.stringify(first.body), "the same body");
    assert(JSON.stringify(again.resume) === JSON.stringify({ request_id: "s1", checkpoint: "cp1", output_token_ids: [1, 2] }),
      JSON.stringify(again.resume));
    s.close();
  },

  async "a resumable stream gives up after maxResumes resumes without a new checkpoint"() {
    const { sockets, Impl } = resumeSockets((frame, ws, n) => {
      if (n === 1) ws.emit({ type: "chat.delta", id: frame.id, stream_id: "s1", checkpoint: "cp1", output_token_ids: [1],
        chunks: [chunk("a")] });
      else ws.emit({ type: "error", id: frame.id, error: { code: "engine_unavailable", message: "gone", status: 503 } });
      ws.drop(); // every socket drops; the later ones after an engine_unavailable too
    });
    const s = await connect({ url: "http://scripted.invalid", WebSocket: Impl, maxResumes: 2 });
    const stream = s.chat({ messages: USER }, { resumable: true });
    const items = [];
    let error = null;
    try { for await (const item of stream) items.push(item); } catch (err) { error = err; }
    assert(chatText(items) === "a", `text ${chatText(items)}`);
    assert(error instanceof TokenwireError && stream.resumes === 2, `gave up after 2 resumes (${error}, ${stream.resumes})`);
    const resumed = sockets.flatMap((ws) => ws.sent).filter((f) => f.resume);
    assert(resumed.length === 2 && resumed.every((f) => f.resume.checkpoint === "cp1"), `${resumed.length} resumes from cp1`);
    s.close();
  },

  async "a seq gap breaks the session and fails its requests"() {
    const s = await connect({ url: "http://scripted.invalid", WebSocket: ScriptedSocket });
    assert(s instanceof Session && s.model === "m", "scripted session");
    let error = null;
    try { await collect(s.chat({ messages: USER })); } catch (err) { error = err; }
    assert(error instanceof ConnectionLost && s.closed, `ConnectionLost (${error})`);
  },
};

/** Run every test in order; `onResult({name, ok, skipped, error})` after each (`skipped`: why a
 * test did not run on this server, else null; a skipped test is ok). */
export async function run({ apiKey, onResult = () => {} } = {}) {
  const results = [];
  for (const [name, fn] of Object.entries(tests)) {
    let result;
    try {
      await withTimeout(fn({ apiKey }), 60000, name);
      result = { name, ok: true, skipped: null, error: null };
    } catch (err) {
      result = err instanceof Skip ? { name, ok: true, skipped: err.message, error: null }
        : { name, ok: false, skipped: null, error: `${err && err.name}: ${err && err.message}` };
    }
    results.push(result);
    onResult(result);
  }
  return results;
}
