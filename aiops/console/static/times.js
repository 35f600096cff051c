// Times in the viewer's own zone beside UTC: every <time datetime="...Z"> the server wrote (UTC) gets the same
// instant in this browser's zone after it, e.g. "2026-12-05 09:28:47 UTC (10:28:47 CET)". Text only.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
    hour12: false, timeZoneName: "short",
  });
  for (const t of document.querySelectorAll("time[datetime]")) {
    const at = new Date(t.getAttribute("datetime"));
    if (Number.isNaN(at.getTime())) continue;
    const local = document.createElement("span");
    local.className = "local-time";
    local.textContent = ` (${format.format(at)})`;
    t.after(local);
  }
});
