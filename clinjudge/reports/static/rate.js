// clinjudge rate: keyboard-first scoring and saves that survive a lost connection.
// Loaded from our own file (the CSP forbids inline script). Without it the form still posts.
(function () {
  "use strict";
  const form = document.getElementById("rate-form");
  if (!form) return;
  const sets = Array.from(form.querySelectorAll("fieldset.attr"));
  const status = document.getElementById("status");
  const errors = document.getElementById("errors");

  function say(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }
  function inputs(set) { return Array.from(set.querySelectorAll("input:not([type=hidden])")); }
  function focusSet(i) {
    if (i < 0 || i >= sets.length) {
      document.getElementById("save").focus();
      return;
    }
    const all = inputs(sets[i]);
    const target = all.find((x) => x.checked) || all[0];
    if (target) target.focus();
  }
  function currentSet() {
    return sets.findIndex((s) => s.contains(document.activeElement));
  }
  function showErrors(list) {
    errors.textContent = "";
    const strong = document.createElement("strong");
    strong.textContent = "Not saved:";
    const ul = document.createElement("ul");
    for (const text of list) {
      const li = document.createElement("li");
      li.textContent = text; // text, never HTML
      ul.appendChild(li);
    }
    errors.append(strong, ul);
    errors.hidden = false;
  }

  document.addEventListener("keydown", function (event) {
    const target = event.target;
    if (target && target.tagName === "TEXTAREA") {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        form.requestSubmit();
      }
      return;
    }
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    let i = currentSet();
    if (/^[0-9]$/.test(event.key) || event.key === "n" || event.key === "N") {
      if (i < 0) i = 0;
      const want = /^[0-9]$/.test(event.key) ? event.key : "na";
      const box = inputs(sets[i]).find((x) => x.type === "checkbox");
      if (box) {
        if (want !== "0" && want !== "1") return;
        box.checked = want === "1";
      } else {
        const radio = inputs(sets[i]).find((x) => x.value === want);
        if (!radio) return;
        radio.checked = true;
      }
      event.preventDefault();
      focusSet(i + 1);
    } else if ((event.key === "ArrowDown" || event.key === "ArrowUp") && i >= 0 && inputs(sets[i])[0].type === "checkbox") {
      event.preventDefault();
      focusSet(i + (event.key === "ArrowDown" ? 1 : -1));
    } else if (event.key === "Enter") {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  let busy = false;
  function send(body) {
    return fetch(form.action, {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Accept": "application/json",
        "Content-Type": "application/x-www-form-urlencoded",
        "X-CSRF-Token": form.dataset.csrf,
      },
      body: body,
    });
  }
  async function save(body, attempt) {
    let response;
    try {
      response = await send(body);
    } catch (e) {
      response = null;
    }
    if (response === null || response.status >= 500) {
      // Not acknowledged: the rating is not saved. Retry with the same save id, so a save
      // that did land is not stored twice.
      say("lost", "Connection lost: not saved yet. Retrying (" + attempt + ")…");
      setTimeout(function () { save(body, attempt + 1); }, Math.min(5000, 500 * attempt));
      return;
    }
    let data = {};
    try { data = await response.json(); } catch (e) { data = {}; }
    if (response.ok && data.saved) {
      say("saved", "Saved.");
      window.location.assign(data.next);
      return;
    }
    busy = false;
    say("refused", "Not saved.");
    showErrors(data.errors || ["the server refused the save (" + response.status + ")"]);
  }
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (busy) return;
    busy = true;
    say("saving", "Saving…");
    save(new URLSearchParams(new FormData(form)).toString(), 1);
  });
  // An unticked checkbox is an answer (absent); a group of radios with none chosen is not.
  const firstEmpty = sets.findIndex((s) =>
    inputs(s).every((x) => x.type === "radio" && !x.checked));
  focusSet(firstEmpty >= 0 ? firstEmpty : 0);
})();
