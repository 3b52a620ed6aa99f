// autotune dashboard: charts from the page's own data, sortable tables, copy buttons,
// and a poll that reloads the page when its study changed. No network but this server.
"use strict";
(function () {
  function data() {
    var el = document.getElementById("page-data");
    return el ? JSON.parse(el.textContent) : {};
  }

  function plot(id, traces, layout) {
    var el = typeof id === "string" ? document.getElementById(id) : id;
    if (!el || typeof Plotly === "undefined") return;
    var base = {margin: {l: 60, r: 20, t: 10, b: 50}, showlegend: true,
                legend: {orientation: "h", y: -0.25}};
    Plotly.newPlot(el, traces, Object.assign(base, layout),
                   {displaylogo: false, responsive: true, staticPlot: false, showLink: false,
                    showSendToCloud: false, showEditInChartStudio: false});
  }

  // A click on a point opens its trial's page (the chart's data-base is the study's URL;
  // the offline report has none, and its points stay where they are).
  function clickThrough(id) {
    var el = document.getElementById(id);
    if (!el || !el.dataset.base || typeof el.on !== "function") return;
    el.on("plotly_click", function (event) {
      var trial = event && event.points && event.points.length ? event.points[0].customdata : null;
      if (trial !== null && trial !== undefined) {
        window.location.href = el.dataset.base + "/trial/" + encodeURIComponent(trial);
      }
    });
  }

  function progressChart(points) {
    if (!points || !points.length) return;
    var own = points.filter(function (p) { return p.speedup !== null; });
    var line = points.filter(function (p) { return p.best !== null; });
    plot("chart-progress", [
      {x: own.map(function (p) { return p.n; }), y: own.map(function (p) { return p.speedup; }),
       customdata: own.map(function (p) { return p.trial; }),
       text: own.map(function (p) { return p.role; }),
       hovertemplate: "trial %{customdata} (%{text}): ×%{y:.3f}, one process<extra></extra>",
       mode: "markers", name: "each process", marker: {color: "#9ab"}},
      {x: line.map(function (p) { return p.n; }), y: line.map(function (p) { return p.best; }),
       customdata: line.map(function (p) { return p.best_trial; }),
       text: line.map(function (p) {
         return p.best_trial === null ? "XLA's defaults"
           : "trial " + p.best_trial + ", pooled over " + p.best_n + " processes";
       }),
       hovertemplate: "best so far: %{text}, ×%{y:.3f}<extra></extra>",
       mode: "lines+markers", marker: {size: 3}, line: {shape: "hv", color: "#1f5fbf"},
       name: "best so far (pooled, backed)"}
    ], {xaxis: {title: {text: "processes measured"}},
        yaxis: {title: {text: "speedup vs defaults"}}});
    clickThrough("chart-progress");
  }

  // Each flag's share of the search's variance, fetched (it needs Optuna's trials).
  function importanceChart() {
    var el = document.getElementById("chart-importance");
    if (!el || !el.dataset.src || typeof fetch !== "function") return;
    fetch(el.dataset.src).then(function (r) { return r.json(); }).then(function (doc) {
      if (!doc.available || !doc.flags.length) {
        el.textContent = doc.reason || "nothing to rank yet: fewer than two complete search trials";
        el.className = "muted";
        return;
      }
      var flags = doc.flags.slice().reverse();
      plot(el, [{
        type: "bar", orientation: "h", name: "share of variance",
        y: flags.map(function (f) { return f.param; }),
        x: flags.map(function (f) { return f.variance_share; }),
        text: flags.map(function (f) {
          var times = function (r) { return r ? "×" + (1 / r).toFixed(3) : "-"; };
          return "best " + f.best_value + " (" + times(f.best_ratio) + "), worst " +
            f.worst_value + " (" + times(f.worst_ratio) + ")";
        }),
        hovertemplate: "%{y}: %{x:.2f} of the variance; %{text}<extra></extra>",
        marker: {color: flags.map(function (f) { return f.above_noise ? "#1f5fbf" : "#c5d3e8"; })}
      }], {showlegend: false, xaxis: {title: {text: "share of variance"}, range: [0, 1]},
           yaxis: {automargin: true}});
    }).catch(function () { el.textContent = "the importance could not be read"; });
  }

  // One small chart per flag: each program's median search speedup against the flag's value.
  function sliceCharts(slices) {
    var box = document.getElementById("chart-slices");
    if (!slices || !slices.length || !box) return;
    slices.forEach(function (slice, i) {
      var el = document.createElement("div");
      el.id = "chart-slice-" + i;
      el.className = "chart slice";
      el.dataset.base = box.dataset.base;
      el.dataset.flag = slice.flag;
      box.appendChild(el);
      plot(el, [{
        type: "scatter", mode: "markers", name: slice.flag,
        x: slice.points.map(function (p) { return p.value; }),
        y: slice.points.map(function (p) { return p.speedup; }),
        customdata: slice.points.map(function (p) { return p.trial; }),
        hovertemplate: "trial %{customdata}: " + slice.flag + "=%{x}, ×%{y:.3f}<extra></extra>",
        marker: {color: "#1f5fbf", opacity: 0.6}
      }], {showlegend: false, margin: {l: 50, r: 10, t: 30, b: 40},
           title: {text: slice.flag, font: {size: 12}},
           xaxis: {type: "category"}, yaxis: {title: {text: "speedup"}}});
      clickThrough(el.id);
    });
  }

  // One horizontal bar per measurement, from its claim to its stored run, a row per worker.
  function timelineChart(bars) {
    if (!bars || !bars.length || !document.getElementById("chart-timeline")) return;
    var roles = [];
    bars.forEach(function (b) { if (roles.indexOf(b.role) < 0) roles.push(b.role); });
    plot("chart-timeline", roles.map(function (role) {
      var mine = bars.filter(function (b) { return b.role === role; });
      return {
        type: "bar", orientation: "h", name: role,
        y: mine.map(function (b) { return b.worker; }),
        base: mine.map(function (b) { return b.start; }),
        x: mine.map(function (b) { return Math.max(1, Date.parse(b.end) - Date.parse(b.start)); }),
        customdata: mine.map(function (b) { return b.trial; }),
        text: mine.map(function (b) { return b.outcome; }),
        hovertemplate: "trial %{customdata} (" + role + "): %{text}<extra></extra>"
      };
    }), {barmode: "overlay", xaxis: {type: "date", title: {text: "time"}},
         yaxis: {title: {text: "worker"}, automargin: true}});
    clickThrough("chart-timeline");
  }

  // The unit the tables use for sizes (KiB, MiB, GiB: powers of 1024), fitted to `most`.
  function binaryUnit(most) {
    var names = ["B", "KiB", "MiB", "GiB", "TiB"], k = 0;
    while (k < names.length - 1 && most >= Math.pow(1024, k + 1)) k++;
    return {name: names[k], size: Math.pow(1024, k)};
  }

  function scatterChart(scatter) {
    if (!scatter || !scatter.points.length) return;
    var pts = scatter.points.filter(function (p) {
      return p.median_step_s !== null && p.peak_memory_bytes !== null;
    });
    var unit = binaryUnit(Math.max.apply(null, pts.map(function (p) {
      return p.peak_memory_bytes; })));
    var traces = [{
      x: pts.map(function (p) { return p.median_step_s * 1e3; }),
      y: pts.map(function (p) { return p.peak_memory_bytes / unit.size; }),
      customdata: pts.map(function (p) { return p.trial; }),
      text: pts.map(function (p) {
        return "×" + (p.speedup === null ? "-" : p.speedup.toFixed(3)) + (p.n > 1 ? " n=" + p.n : "");
      }),
      hovertemplate: "trial %{customdata}: %{text}<br>%{x:.2f} ms, %{y:.1f} " + unit.name +
        "<extra></extra>",
      mode: "markers", name: "programs", marker: {color: "#4a7bd0"}
    }];
    var front = pts.filter(function (p) { return p.pareto; });
    if (scatter.two_objectives && front.length) {
      traces.push({x: front.map(function (p) { return p.median_step_s * 1e3; }),
                   y: front.map(function (p) { return p.peak_memory_bytes / unit.size; }),
                   mode: "lines+markers", name: "Pareto front",
                   marker: {size: 12, color: "rgba(0,0,0,0)", line: {color: "#d04a4a", width: 2}},
                   line: {color: "#d04a4a", dash: "dot"}});
    }
    plot("chart-scatter", traces, {xaxis: {title: {text: "own-process median step (ms)"}},
                                   yaxis: {title: {text: "peak memory (" + unit.name + ")"}}});
    clickThrough("chart-scatter");
  }

  function stepCharts(runs) {
    document.querySelectorAll(".chart.steps").forEach(function (el) {
      var run = (runs || []).filter(function (r) { return String(r.run) === el.dataset.run; })[0];
      if (!run) return;
      var traces = [{y: run.step_times_s.map(function (t) { return t * 1e3; }),
                     mode: "lines+markers", name: "candidate"}];
      if (run.baseline_step_times_s.length) {
        traces.push({y: run.baseline_step_times_s.map(function (t) { return t * 1e3; }),
                     mode: "lines+markers", name: "baseline (same process)"});
      }
      plot(el, traces, {xaxis: {title: {text: "timed step"}}, yaxis: {title: {text: "ms"}}});
    });
  }

  function intervalBars() {
    var bars = document.querySelectorAll(".ci-bar");
    var lo = 1, hi = 1;
    bars.forEach(function (b) {
      lo = Math.min(lo, +b.dataset.low); hi = Math.max(hi, +b.dataset.high);
    });
    var pad = (hi - lo) * 0.05 || 0.05;
    lo -= pad; hi += pad;
    function at(v) { return (100 * (v - lo) / (hi - lo)).toFixed(2) + "%"; }
    bars.forEach(function (b) {
      var range = document.createElement("span"); range.className = "range";
      range.style.left = at(+b.dataset.low);
      range.style.width = "calc(" + at(+b.dataset.high) + " - " + at(+b.dataset.low) + ")";
      var one = document.createElement("span"); one.className = "one"; one.style.left = at(1);
      var point = document.createElement("span"); point.className = "point";
      point.style.left = at(+b.dataset.point);
      b.title = "speedup interval; the thin line is x1.0 (no change)";
      b.append(range, one, point);
    });
  }

  function sortable() {
    document.querySelectorAll("table.sortable").forEach(function (table) {
      var heads = table.querySelectorAll("thead th");
      heads.forEach(function (th, col) {
        th.addEventListener("click", function () {
          var asc = !th.classList.contains("sorted-asc");
          heads.forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
          th.classList.add(asc ? "sorted-asc" : "sorted-desc");
          var body = table.tBodies[0];
          var rows = Array.prototype.slice.call(body.rows);
          function key(row) {
            var cell = row.cells[col];
            var raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
            var num = parseFloat(raw);
            return isNaN(num) ? raw : num;
          }
          rows.sort(function (a, b) {
            var x = key(a), y = key(b);
            var c = x < y ? -1 : x > y ? 1 : 0;
            return asc ? c : -c;
          });
          rows.forEach(function (r) { body.appendChild(r); });
        });
      });
    });
  }

  function copyButtons() {
    document.querySelectorAll("button.copy").forEach(function (button) {
      button.addEventListener("click", function () {
        var text = document.getElementById(button.dataset.copy).textContent;
        var done = function () { button.textContent = "copied"; };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(text).then(done, function () { fallback(text); done(); });
        } else { fallback(text); done(); }
      });
    });
  }

  function fallback(text) {
    var area = document.createElement("textarea");
    area.value = text; document.body.appendChild(area); area.select();
    try { document.execCommand("copy"); } catch (e) { /* nothing more to try */ }
    area.remove();
  }

  function compareForms() {
    var trials = document.getElementById("trial-compare");
    if (trials && trials.form) trials.form.addEventListener("submit", function (e) {
      e.preventDefault();  // Enter in the form: stay (the button below navigates)
    });
    if (trials) trials.addEventListener("click", function () {
      location.href = trials.dataset.base + "/compare/" + document.getElementById("trial-a").value +
        "/" + document.getElementById("trial-b").value;
    });
  }

  function poll() {
    var url = document.body.dataset.poll, every = parseFloat(document.body.dataset.refresh);
    if (!url || !(every > 0)) return;
    var seen = document.body.dataset.version || null;
    function check() {
      fetch(url, {cache: "no-store"}).then(function (r) { return r.ok ? r.json() : null; })
        .then(function (body) {
          if (body === null) return;
          if (seen !== null && body.version !== seen) { location.reload(); return; }
          seen = body.version;
        }, function () { /* the server went away: try again later */ })
        .finally(function () { setTimeout(check, every * 1000); });
    }
    check();
  }

  var d = data();
  progressChart(d.best_so_far);
  timelineChart(d.timeline);
  sliceCharts(d.slices);
  importanceChart();
  scatterChart(d.scatter);
  stepCharts(d.runs);
  intervalBars();
  sortable();
  copyButtons();
  compareForms();
  poll();
})();
