// Outcome filter for a run page. Without this script every row stays visible.
(function () {
  "use strict";
  function init() {
    var bar = document.getElementById("filters");
    var table = document.getElementById("tests");
    if (!bar || !table) return;
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var buttons = Array.prototype.slice.call(bar.querySelectorAll("button[data-filter]"));
    var search = document.getElementById("search");
    var shown = document.getElementById("shown");
    var current = "all";
    function apply() {
      var needle = (search.value || "").toLowerCase();
      var visible = 0;
      rows.forEach(function (row) {
        var match = (current === "all" || row.getAttribute("data-outcome") === current) &&
          (!needle || row.cells[1].textContent.toLowerCase().indexOf(needle) !== -1);
        row.hidden = !match;
        if (match) visible++;
      });
      buttons.forEach(function (b) {
        b.setAttribute("aria-pressed", String(b.getAttribute("data-filter") === current));
      });
      shown.textContent = visible + " of " + rows.length + " tests shown";
    }
    buttons.forEach(function (b) {
      b.addEventListener("click", function () { current = b.getAttribute("data-filter"); apply(); });
    });
    search.addEventListener("input", apply);
    var wanted = /(?:^|&)outcome=([a-z]+)/.exec(location.hash.slice(1));
    if (wanted && bar.querySelector('button[data-filter="' + wanted[1] + '"]')) current = wanted[1];
    bar.hidden = false;
    apply();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
