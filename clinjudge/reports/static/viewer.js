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
});
