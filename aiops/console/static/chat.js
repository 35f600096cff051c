// The chat's only script: POST the question with the CSRF token, read the server-sent events as they come,
// and write every piece as text (textContent): an answer holding HTML stays text.
"use strict";
(function () {
  const form = document.getElementById("chat-form");
  const answer = document.getElementById("answer");
  const status = document.getElementById("chat-status");
  const proposals = document.getElementById("chat-proposals");
  function handle(event) {
    if (event.status !== undefined) { status.textContent = event.status; }
    if (event.text !== undefined) { answer.textContent += event.text; }
    if (event.error !== undefined) { status.textContent = "failed: " + event.error; }
    if (event.proposals !== undefined) {
      proposals.replaceChildren();
      for (const p of event.proposals) {
        const item = document.createElement("li");
        item.textContent = p.id + ": " + p.kind + " on " + p.target + " (" + p.status + ")";
        proposals.appendChild(item);
      }
    }
    if (event.done) { status.textContent = status.textContent + " (done)"; }
  }
  form.addEventListener("submit", async function (e) {
    e.preventDefault();
    answer.textContent = "";
    status.textContent = "asking...";
    const body = new URLSearchParams({ question: document.getElementById("question").value });
    const response = await fetch("/chat/ask", {
      method: "POST", body: body, credentials: "same-origin",
      headers: { "X-CSRF-Token": form.dataset.csrf },
    });
    if (!response.ok || !response.body) { status.textContent = "refused: HTTP " + response.status; return; }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) { break; }
      buffered += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffered.indexOf("\n\n")) >= 0) {
        const line = buffered.slice(0, cut);
        buffered = buffered.slice(cut + 2);
        if (line.startsWith("data: ")) { handle(JSON.parse(line.slice(6))); }
      }
    }
  });
})();
