// The playground page: a chat over one tokenwire session (tokenwire.js), streaming content and
// reasoning separately, tool calls as they stream, a stop button, model and sampling settings,
// and a live tokens/s readout (from the server's continuous usage counts).
import { connect } from "/static/tokenwire.js";

const $ = (id) => document.getElementById(id);
const state = { session: null, history: [], stream: null, reconnectMs: 500 };
window.playground = state; // for the browser tests and the curious

function setStatus(text, kind) {
  const pill = $("conn");
  pill.textContent = text;
  pill.dataset.state = kind;
}

function setBusy(busy) {
  document.body.dataset.state = busy ? "streaming" : "idle";
  $("send").disabled = busy || !state.session;
  $("stop").disabled = !busy;
}

async function open() {
  setStatus("connecting…", "connecting");
  const apiKey = $("api-key").value.trim() || undefined;
  try {
    const session = await connect({ apiKey });
    state.session = session;
    state.reconnectMs = 500;
    session.onclose = () => {
      state.session = null;
      setStatus(`closed (${session.closeCode})`, "closed");
      setBusy(false);
      setTimeout(open, state.reconnectMs);
      state.reconnectMs = Math.min(state.reconnectMs * 2, 10000);
    };
    $("model-name").textContent = session.model;
    showTools(session.features);
    // "connected" means Send works: the session is usable before the model list arrives, which
    // fills in on its own (a slow /v1/models once left Send disabled under a "connected" pill).
    setBusy(false);
    setStatus("connected", "open");
    fillModels(session.model, apiKey);
  } catch (err) {
    setStatus("disconnected", "closed");
    setTimeout(open, state.reconnectMs);
    state.reconnectMs = Math.min(state.reconnectMs * 2, 10000);
  }
}

// Tools only where the server parses tool calls and allows tool_choice "auto" (what a request
// with tools and no tool_choice means); elsewhere every such request is refused with a 400.
function showTools(features) {
  const why = features.tool_call_parser == null
    ? "this server parses no tool calls: start it with --tool-call-parser NAME (or auto, which picks the "
      + "model's format if its chat template has one) and --enable-auto-tool-choice."
    : !features.auto_tool_choice
      ? `this server parses ${features.tool_call_parser} tool calls but refuses tool_choice "auto": start it `
        + "with --enable-auto-tool-choice."
      : null;
  $("tools-box").hidden = why !== null;
  $("tools-off").hidden = why === null;
  $("tools-off").textContent = why === null ? "" : `Tools are off: ${why}`;
  if (why !== null) $("tools").value = "";
}

async function fillModels(current, apiKey) {
  const select = $("model");
  let names = [current];
  try {
    const res = await fetch("/v1/models", { headers: apiKey ? { Authorization: `Bearer ${apiKey}` } : {} });
    if (res.ok) names = (await res.json()).data.map((m) => m.id);
  } catch { /* the session's model is enough */ }
  const chosen = select.value || current;
  select.replaceChildren(...names.map((name) => new Option(name, name, false, name === chosen)));
}

function numberOf(id) {
  const raw = $(id).value.trim();
  return raw === "" ? undefined : Number(raw);
}

function requestBody() {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...state.history);
  const body = {
    model: $("model").value || undefined,
    messages,
    max_tokens: numberOf("max_tokens"),
    temperature: numberOf("temperature"),
    top_p: numberOf("top_p"),
    seed: numberOf("seed"),
    chat_template_kwargs: { enable_thinking: $("thinking").checked },
    stream_options: { include_usage: true, continuous_usage_stats: true },
  };
  const tools = $("tools-box").hidden ? "" : $("tools").value.trim();
  if (tools) body.tools = JSON.parse(tools);
  for (const key of Object.keys(body)) if (body[key] === undefined) delete body[key];
  return body;
}

function element(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}

function addUserMessage(text) {
  $("empty")?.remove();
  const el = element("div", "msg user", text);
  $("messages").append(el);
}

function addAssistantMessage() {
  const el = element("div", "msg assistant");
  el.append(element("div", "role", "assistant"));
  const view = {
    el,
    reasoning: el.appendChild(element("div", "reasoning")),
    content: el.appendChild(element("div", "content")),
    tools: el.appendChild(element("div", "tools")),
    meta: el.appendChild(element("div", "meta")),
    calls: new Map(),
  };
  $("messages").append(el);
  return view;
}

function scrollDown() {
  const box = $("messages");
  box.scrollTop = box.scrollHeight;
}

function toolView(view, call) {
  let entry = view.calls.get(call.index);
  if (!entry) {
    const box = element("div", "tool");
    const name = box.appendChild(element("span", "name", ""));
    const args = box.appendChild(element("pre", "args", ""));
    view.tools.append(box);
    entry = { name, args, id: call.id, fn: { name: "", arguments: "" } };
    view.calls.set(call.index, entry);
  }
  return entry;
}

async function send(text) {
  if (!state.session || state.stream) return;
  state.history.push({ role: "user", content: text });
  addUserMessage(text);
  const view = addAssistantMessage();
  let body;
  try {
    body = requestBody();
  } catch (err) {
    view.meta.textContent = `Tools are not valid JSON: ${err.message}`;
    view.meta.classList.add("error");
    state.history.pop();
    return;
  }
  const started = performance.now();
  let firstAt = null;
  let tokens = 0;
  let finish = null;
  let content = "";
  let thought = "";
  setBusy(true);
  $("tps").textContent = "0.0";
  $("tokens").textContent = "0";
  $("ttft").textContent = "–";
  const stream = state.session.chat(body);
  state.stream = stream;
  try {
    for await (const chunk of stream) {
      const now = performance.now();
      if (chunk.usage) tokens = chunk.usage.completion_tokens ?? tokens;
      for (const choice of chunk.choices) {
        const delta = choice.delta || {};
        if (firstAt === null && (delta.content || delta.reasoning || delta.tool_calls)) {
          firstAt = now;
          $("ttft").textContent = `${Math.round(now - started)} ms`;
        }
        const reasoning = delta.reasoning ?? delta.reasoning_content;
        if (reasoning) { thought += reasoning; view.reasoning.textContent = thought.trimStart(); }
        if (delta.content) { content += delta.content; view.content.textContent = content.trimStart(); }
        for (const call of delta.tool_calls || []) {
          const entry = toolView(view, call);
          if (call.id) entry.id = call.id;
          if (call.function?.name) { entry.fn.name += call.function.name; entry.name.textContent = entry.fn.name; }
          if (call.function?.arguments) {
            entry.fn.arguments += call.function.arguments;
            entry.args.textContent = entry.fn.arguments;
          }
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      $("tokens").textContent = String(tokens);
      if (firstAt !== null && now > firstAt) {
        $("tps").textContent = (tokens / ((now - firstAt) / 1000)).toFixed(1);
      }
      scrollDown();
    }
    const stopped = stream.status === "cancelled";
    view.meta.textContent = stopped ? `stopped · ${tokens} tokens` : `${finish ?? "done"} · ${tokens} tokens`;
    view.el.dataset.status = stopped ? "cancelled" : "completed";
  } catch (err) {
    view.meta.textContent = `${err.code ?? "error"}: ${err.message}`;
    view.meta.classList.add("error");
    view.el.dataset.status = "error";
  } finally {
    const message = { role: "assistant", content };
    const calls = [...view.calls.entries()].sort((a, b) => a[0] - b[0]).map(([, e]) => ({
      id: e.id, type: "function", function: { name: e.fn.name, arguments: e.fn.arguments } }));
    if (calls.length) message.tool_calls = calls;
    if (content || calls.length) state.history.push(message);
    else state.history.pop(); // nothing came back: forget the question too
    state.stream = null;
    setBusy(false);
    scrollDown();
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text) return;
  $("prompt").value = "";
  send(text);
});
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => state.stream?.cancel());
$("clear").addEventListener("click", () => {
  state.history = [];
  $("messages").replaceChildren();
});
$("api-key").value = localStorage.getItem("tokenwire.apiKey") || "";
$("api-key").addEventListener("change", () => {
  localStorage.setItem("tokenwire.apiKey", $("api-key").value.trim());
  state.session?.close();
});
setBusy(false);
open();
