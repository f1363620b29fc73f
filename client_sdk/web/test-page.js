// Runs tokenwire.test.js in the page and shows the results; the browser tests read
// window.tokenwireTests ({done, results: [{name, ok, error}]}).
import { run } from "/static/tokenwire.test.js";

const out = { done: false, results: [] };
window.tokenwireTests = out;
const apiKey = localStorage.getItem("tokenwire.apiKey") || undefined;
run({ apiKey, onResult: (r) => {
  out.results.push(r);
  const li = document.createElement("li");
  li.className = "msg assistant";
  li.textContent = `${r.ok ? "✔" : "✘"} ${r.name}${r.ok ? "" : ` — ${r.error}`}`;
  li.style.color = r.ok ? "var(--ok)" : "var(--err)";
  document.getElementById("results").append(li);
} }).finally(() => {
  out.done = true;
  const failed = out.results.filter((r) => !r.ok).length;
  document.getElementById("summary").textContent = `${out.results.length - failed} passed, ${failed} failed`;
});
