/* The Kyma page follows changes without a reload: every few seconds it asks its own live/ URL
   (same origin, the admin session's cookie) for the status, conditions, modules and timeline as
   HTML and swaps them in when they changed. Open <details> stay open; a hidden tab does not poll;
   a failed request says so and keeps the last content. No framework. */
(function () {
  "use strict";
  var box = document.getElementById("cp-live");
  if (!box || !window.fetch) { return; }
  var url = box.getAttribute("data-live-url");
  var seconds = Math.max(1, parseInt(box.getAttribute("data-live-seconds"), 10) || 3);
  var state = document.getElementById("cp-live-state");
  var last = box.innerHTML;
  var busy = false;

  function say(text) { if (state) { state.textContent = text; } }

  function openDetails() {
    var open = [];
    box.querySelectorAll("details[open][id]").forEach(function (d) { open.push(d.id); });
    return open;
  }

  function poll() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch(url, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}, cache: "no-store"})
      .then(function (response) {
        if (response.redirected || !response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        say(" (updated " + new Date().toLocaleTimeString([], {hour12: false}) + ")");
        if (html === last) { return; }
        var open = openDetails();
        box.innerHTML = html;
        last = html;
        open.forEach(function (id) { var d = document.getElementById(id); if (d) { d.open = true; } });
        box.setAttribute("data-live-updates", String(parseInt(box.getAttribute("data-live-updates") || "0", 10) + 1));
      })
      .catch(function (error) { say(" — live updates paused: " + error.message); })
      .then(function () { busy = false; });
  }

  last = null;  // the first answer is compared with what the server renders, not the DOM's text
  window.setInterval(poll, seconds * 1000);
  document.addEventListener("visibilitychange", poll);
})();
