// clinjudge view: the only script, loaded from our own package (the CSP forbids inline code).
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // The compare button needs two or more selected runs.
  var form = document.getElementById("compare-form");
  var button = document.getElementById("compare-button");
  if (form && button) {
    var update = function () {
      var picked = form.querySelectorAll('input[name="run"]:checked').length;
      button.disabled = picked < 2;
      button.textContent = picked < 2 ? "Compare selected runs" : "Compare " + picked + " runs";
    };
    form.addEventListener("change", update);
    update();
  }
  // A link to a citation opens the collapsed note or source list that holds its target.
  var reveal = function () {
    if (!location.hash) return;
    var target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    for (var node = target; node; node = node.parentElement) {
      if (node.tagName === "DETAILS") node.open = true;
    }
    if (target) target.scrollIntoView();
  };
  window.addEventListener("hashchange", reveal);
  reveal();
  // On an item page, j / k (or the right / left arrow) open the next / previous item of the
  // list it was opened from; never while typing in a field or with a modifier key held.
  var next = document.getElementById("item-next");
  var prev = document.getElementById("item-prev");
  if (next || prev) {
    document.addEventListener("keydown", function (event) {
      if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) return;
      var field = event.target && event.target.closest &&
        event.target.closest("input, textarea, select, [contenteditable]");
      if (field) return;
      var link = null;
      if (event.key === "j" || event.key === "ArrowRight") link = next;
      else if (event.key === "k" || event.key === "ArrowLeft") link = prev;
      if (link) {
        event.preventDefault();
        window.location.href = link.href;
      }
    });
  }
});
