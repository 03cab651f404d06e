// detaudit report: draws each drawn series' curves with uPlot (drag to zoom, double-click to
// reset, hover for values; the value and difference charts share one cursor). Without JavaScript
// the page is its tables and text, which hold every figure.
(function () {
  "use strict";
  if (typeof uPlot === "undefined") return;
  var COLOURS = ["#1f5fbf", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#0b7285", "#5c940d", "#862e9c"];
  var DIFF_COLOURS = ["#343a40", "#f08c00"];
  var MARK = "#e03131";
  var INTEGER_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7];

  function markFirst(x, text) {
    return function (u) {
      if (x === null || x === undefined) return;
      var px = u.valToPos(x, "x", true);
      if (!(px >= u.bbox.left && px <= u.bbox.left + u.bbox.width)) return;
      var ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = MARK;
      ctx.setLineDash([5, 4]);
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      ctx.moveTo(px, u.bbox.top);
      ctx.lineTo(px, u.bbox.top + u.bbox.height);
      ctx.stroke();
      if (text) {
        ctx.textAlign = "left";
        ctx.textBaseline = "top";
        ctx.fillStyle = MARK;
        ctx.font = Math.round(11 * devicePixelRatio) + "px sans-serif";
        ctx.fillText(text, px + 5 * devicePixelRatio, u.bbox.top + 4 * devicePixelRatio);
      }
      ctx.restore();
    };
  }

  function chart(host, data, key, width, opts) {
    var series = [{ label: opts.xLabel }];
    data.curves.forEach(function (c, i) {
      var diff = opts.diff;
      series.push({
        label: c.label,
        stroke: diff ? DIFF_COLOURS[c.rel ? 1 : 0] : COLOURS[i % COLOURS.length],
        dash: diff && c.dashed ? [6, 3] : undefined,
        width: !diff && i === 0 ? 1.8 : 1.1,
        spanGaps: !diff,
        points: { show: data.x.length <= 40 },
      });
    });
    var yAxis = { label: opts.diff ? "|difference|" : "value", size: 70 };
    if (opts.diff) {
      yAxis.splits = decades;
      yAxis.values = function (u, splits) { return splits.map(function (v) { return v == null ? "" : v.toExponential(0); }); };
    }
    return new uPlot({
      width: width,
      height: opts.diff ? 170 : 240,
      scales: { x: { time: false }, y: opts.diff ? { distr: 3, log: 10, range: decadeRange } : {} },
      series: series,
      axes: [opts.integral ? { label: opts.xLabel, incrs: INTEGER_STEPS } : { label: opts.xLabel }, yAxis],
      cursor: { sync: { key: key }, drag: { x: true, y: false } },
      hooks: { draw: [markFirst(opts.first, opts.diff ? "" : opts.firstText)] },
      legend: { live: true },
    }, [data.x].concat(data.curves.map(function (c) { return c.y; })), host);
  }

  // A log scale from the decade below the smallest difference to the one above the largest.
  function decadeRange(u, min, max) {
    if (!(min > 0) || !(max > 0)) return [1e-16, 1];
    var lo = Math.floor(Math.log10(min)), hi = Math.ceil(Math.log10(max));
    if (hi <= lo) { lo -= 1; hi += 1; }
    return [Math.pow(10, lo), Math.pow(10, hi)];
  }

  // A log axis labelled at powers of ten only (every decade when there are few, else every other).
  function decades(u, axisIdx, min, max) {
    if (!(min > 0) || !(max > 0)) return [];
    var lo = Math.floor(Math.log10(min)), hi = Math.ceil(Math.log10(max)), out = [];
    var step = Math.max(1, Math.ceil((hi - lo) / 6));
    for (var e = lo; e <= hi; e += step) {
      var v = Math.pow(10, e);
      if (v >= min * 0.999 && v <= max * 1.001) out.push(v);
    }
    return out.length ? out : [min, max];
  }

  function enhance(article, index) {
    var holder = article.querySelector("script.chart-data");
    var figure = article.querySelector("figure.chart");
    if (!holder || !figure) return;
    var data = JSON.parse(holder.textContent);
    if (!data.values) return;
    var live = figure.querySelector(".interactive");
    var width = Math.max(320, Math.min(figure.clientWidth || 760, 980) - 8);
    var key = "s" + index;
    var made = [chart(live, data.values, key, width, { xLabel: data.xLabel, first: data.first, firstText: data.firstText,
                                                      integral: data.integral })];
    if (data.diff) {
      made.push(chart(live, data.diff, key, width, { xLabel: data.xLabel, first: data.first, diff: true,
                                                     integral: data.integral }));
    }
    // one zoom for both charts
    made.forEach(function (u) {
      u.hooks.setScale = u.hooks.setScale || [];
      u.hooks.setScale.push(function (src, scale) {
        if (scale !== "x") return;
        made.forEach(function (other) {
          if (other !== src && (other.scales.x.min !== src.scales.x.min || other.scales.x.max !== src.scales.x.max)) {
            other.setScale("x", { min: src.scales.x.min, max: src.scales.x.max });
          }
        });
      });
    });
    figure.classList.add("enhanced");
  }

  // A chart that cannot be made says so in its place (and why on the console); the figures stay.
  document.querySelectorAll("article.series").forEach(function (article, index) {
    try {
      enhance(article, index);
    } catch (err) {
      var live = article.querySelector(".interactive");
      if (live) { live.textContent = "the chart could not be drawn: " + err; live.classList.add("note"); }
      console.error("detaudit: chart of " + article.dataset.series + " failed: " + err);
    }
  });
  document.documentElement.classList.add("js");
})();
