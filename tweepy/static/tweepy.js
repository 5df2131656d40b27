// What the pages do in a browser that runs scripts, and nothing they need: without it
// times show exact in UTC, and the server refuses a tweet that is too long.
(function () {
  "use strict";

  var MINUTE = 60 * 1000, HOUR = 60 * MINUTE, DAY = 24 * HOUR;

  // "now", "3 min", "2 h", then the date (UTC, as the title says).
  function relative(then, now) {
    var ago = now - then;
    if (ago < MINUTE) return "now"; // a clock a little behind the server's too
    if (ago < HOUR) return Math.floor(ago / MINUTE) + " min";
    if (ago < DAY) return Math.floor(ago / HOUR) + " h";
    return then.toISOString().slice(0, 10);
  }

  // Tweets carry their exact time (kept fragments must not go stale); it is made relative here.
  function showTimes() {
    var now = Date.now();
    document.querySelectorAll(".tweet time[datetime]").forEach(function (time) {
      var then = new Date(time.getAttribute("datetime"));
      if (!isNaN(then)) time.textContent = relative(then, now);
    });
  }

  // Counted as the server counts: characters (not UTF-16 units) of the trimmed text, a line break
  // being the two characters a browser sends for it.
  function length(text) {
    return Array.from(text.trim().replace(/\r?\n/g, "\r\n")).length;
  }

  function countDown(box) {
    var limit = Number(box.getAttribute("maxlength"));
    var counter = document.createElement("p");
    counter.className = "counter";
    counter.id = box.id + "-left";
    counter.setAttribute("aria-live", "polite");
    box.setAttribute("aria-describedby", counter.id);
    box.insertAdjacentElement("afterend", counter);
    function update() {
      var left = limit - length(box.value);
      counter.textContent = left === 1 || left === -1 ? left + " character left" : left + " characters left";
      counter.classList.toggle("over", left < 0);
    }
    box.addEventListener("input", update);
    update();
  }

  document.addEventListener("DOMContentLoaded", function () {
    showTimes();
    setInterval(showTimes, 30 * 1000);
    document.querySelectorAll("textarea[name=tweet][maxlength]").forEach(countDown);
  });
})();
