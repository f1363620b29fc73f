// Runs tokenwire.test.js in the page and shows the results; the browser tests read
// window.tokenwireTests ({done, results: [{name, ok, skipped, error}]}).
import { run } from "/static/tokenwire.test.js";

const out = { done: false, results: [] };
window.tokenwireTests = out;
const apiKey = localStorage.getItem("tokenwire.apiKey") || undefined;
run({ apiKey, onResult: (r) => {
  out.results.push(r);
  const li = document.createElement("li");
  li.className = "msg assistant";
  if (r.skipped) {
    li.textContent = `– ${r.name} — skipped (${r.skipped})`;
    li.style.color = "var(--muted)";
  } else {
    li.textContent = `${r.ok ? "✔" : "✘"} ${r.name}${r.ok ? "" : ` — ${r.error}`}`;
    li.style.color = r.ok ? "var(--ok)" : "var(--err)";
  }
  document.getElementById("results").append(li);
} }).finally(() => {
  out.done = true;
  const failed = out.results.filter((r) => !r.ok).length;
  const skipped = out.results.filter((r) => r.skipped).length;
  const passed = out.results.length - failed - skipped;
  document.getElementById("summary").textContent =
    `${passed} passed, ${failed} failed` + (skipped ? `, ${skipped} skipped` : "");
});
