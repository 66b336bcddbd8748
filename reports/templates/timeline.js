// vramlab report: interactive memory timelines, written for this report (no library).
// Each figure[data-timeline] holds its data as JSON; the chart is an SVG drawn here,
// with a legend (allocated, reserved, peak) and the device, y ticks on round byte steps
// (1, 2 or 5 of a binary unit: 0, 200 MiB, 400 MiB), x ticks on round time steps, and a
// left margin measured from the widest y label so no label is cut. The x axis starts on
// the work: where the case's setup before its first phase (or, without phases, before
// its first allocation) is over 5 % of the recording and holds no peak, the axis starts
// at the work and a note under the chart says what is hidden (a button shows it).
// Hover shows time, allocated, reserved and phase; drag selects a range to zoom;
// double-click resets. `#hover=F` (or `?hover=F`) in the URL hovers every timeline at
// fraction F of its time axis (used by the browser test and handy for sharing a moment),
// opening the collapsed timeline sections first. A timeline inside a closed <details>
// is drawn when the reader opens it, so a page with dozens costs nothing until then.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  function fmtBytes(b) {
    if (b < 1024) return b + " B";
    var u = ["KiB", "MiB", "GiB", "TiB"], v = b / 1024, i = 0;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return v.toFixed(2) + " " + u[i];
  }
  function fmtNs(ns) {
    var a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + " ns";
    if (a < 1e6) return (ns / 1e3).toFixed(2) + " \u00b5s";
    if (a < 1e9) return (ns / 1e6).toFixed(2) + " ms";
    return (ns / 1e9).toFixed(2) + " s";
  }
  function valueAt(s, t) {
    var lo = 0, hi = s.time_ns.length;
    while (lo < hi) { var m = (lo + hi) >> 1; if (s.time_ns[m] <= t) lo = m + 1; else hi = m; }
    return lo === 0 ? 0 : s.bytes[lo - 1];
  }
  function phaseAt(phases, t) {
    var best = null;
    for (var i = 0; i < phases.length; i++) {
      var p = phases[i];
      if (p.start_ns <= t && t <= p.end_ns && (!best || p.depth > best.depth)) best = p;
    }
    return best ? best.path : "(none)";
  }
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  var BYTE_UNITS = [["B", 1], ["KiB", 1024], ["MiB", 1048576], ["GiB", 1073741824], ["TiB", 1099511627776]];
  // The round step (1, 2 or 5 times a power of ten, of the largest binary unit not above
  // it) that splits `max` into at most `n` parts, and its unit: [step, unit index].
  function byteStep(max, n) {
    var raw = Math.max(1, max / n), k = 0;
    while (k < BYTE_UNITS.length - 1 && raw >= BYTE_UNITS[k + 1][1]) k++;
    var u = BYTE_UNITS[k][1], m = raw / u, p = Math.pow(10, Math.floor(Math.log10(m))), f = m / p;
    var mult = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    if (mult * p >= 1000 && k < BYTE_UNITS.length - 1) return [BYTE_UNITS[k + 1][1], k + 1];
    return [Math.max(1, mult * p) * u, k];
  }
  function fmtTick(b, k) { return (b / BYTE_UNITS[k][1]).toString() + " " + BYTE_UNITS[k][0]; }
  // A round time step (1, 2 or 5 times a power of ten nanoseconds) splitting `span` into at most `n`.
  function timeStep(span, n) {
    var raw = Math.max(1, span / n), p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
  }
  // Where the work starts: the first top-level phase, or without phases the first allocator
  // event; 0 when the setup before it is short (5 % or less) or holds the peak.
  function workStart(d) {
    var start = null, i;
    for (i = 0; i < d.phases.length; i++) {
      if (d.phases[i].depth === 1 && (start === null || d.phases[i].start_ns < start)) start = d.phases[i].start_ns;
    }
    var what = "the first phase begins";
    if (start === null) {
      what = "the case first allocates";
      [d.allocated, d.reserved].forEach(function (s) {
        for (var j = 0; j < s.time_ns.length; j++) {
          if (s.bytes[j] > 0) { if (start === null || s.time_ns[j] < start) start = s.time_ns[j]; break; }
        }
      });
    }
    if (start === null || start <= 0.05 * d.duration_ns || d.peak_time_ns < start) return { at: 0, what: null };
    return { at: start, what: what };
  }
  function Timeline(fig) {
    var id = fig.getAttribute("data-timeline");
    this.data = JSON.parse(document.getElementById(id + "-data").textContent);
    this.box = document.getElementById(id);
    this.readout = document.getElementById(id + "-readout");
    this.work = workStart(this.data);
    this.t0 = this.work.at; this.t1 = Math.max(this.t0 + 1, this.data.duration_ns);
    var self = this, holder = fig.closest("details");
    if (this.work.what) {
      var note = document.createElement("p"), show = document.createElement("button");
      note.className = "tl-note";
      note.textContent = "The time axis starts at " + fmtNs(this.work.at) + ", where " + this.work.what +
        ": the case's setup before it (" + Math.round(100 * this.work.at / this.data.duration_ns) +
        " % of the recording) is left out. ";
      show.type = "button"; show.textContent = "Show the setup too";
      show.addEventListener("click", function () { self.t0 = 0; self.t1 = Math.max(1, self.data.duration_ns); self.draw(); });
      note.appendChild(show);
      this.box.parentNode.insertBefore(note, this.readout.nextSibling);
    }
    this.svg = null;
    if (!holder || holder.open) this.draw();
    if (holder) holder.addEventListener("toggle", function () { if (holder.open && !self.svg) self.draw(); });
    window.addEventListener("resize", function () { if (self.box.clientWidth > 0) self.draw(); });
  }
  Timeline.prototype.draw = function () {
    var d = this.data, box = this.box;
    var W = Math.max(200, box.clientWidth), H = Math.max(160, box.clientHeight);
    var maxB = 1;
    [d.allocated, d.reserved].forEach(function (s) { s.bytes.forEach(function (b) { if (b > maxB) maxB = b; }); });
    var step = byteStep(maxB * 1.05, 5), yMax = Math.ceil(maxB * 1.05 / step[0]) * step[0];
    var yTicks = [];
    for (var b = 0; b <= yMax; b += step[0]) yTicks.push(b);
    while (box.firstChild) box.removeChild(box.firstChild);
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img" }, box);
    // Text widths as drawn (an estimate where the page has not laid the SVG out).
    function width(text, size) {
      var t = el("text", { x: 0, y: -100, "font-size": size }, svg);
      t.textContent = text;
      var w = t.getComputedTextLength ? t.getComputedTextLength() : 0;
      svg.removeChild(t);
      return w > 0 ? w : text.length * size * 0.62;
    }
    var labelW = 0;
    yTicks.forEach(function (v) { labelW = Math.max(labelW, width(fmtTick(v, step[1]), 11)); });
    var L = Math.ceil(labelW) + 10, R = 12, T = 26, B = 24;
    var pw = W - L - R, ph = H - T - B;
    var t0 = this.t0, t1 = this.t1;
    var x = function (t) { return L + (t - t0) / (t1 - t0) * pw; };
    var y = function (v) { return T + ph - v / yMax * ph; };
    // The legend and the device, above the plot.
    var legend = el("g", { "class": "tl-legend" }, svg), lx = L;
    [["allocated", "#1f64b4"], ["reserved", "#e6781e"]].forEach(function (item) {
      el("line", { x1: lx, x2: lx + 16, y1: 12, y2: 12, stroke: item[1], "stroke-width": 2 }, legend);
      el("text", { x: lx + 20, y: 16, "font-size": 11, fill: "#333" }, legend).textContent = item[0];
      lx += 28 + width(item[0], 11);
    });
    el("circle", { cx: lx + 4, cy: 12, r: 4, fill: "#c81e1e" }, legend);
    el("text", { x: lx + 12, y: 16, "font-size": 11, fill: "#333" }, legend).textContent = "peak";
    lx += 24 + width("peak", 11);
    var dev = "device " + d.device;
    if (lx + width(dev, 11) <= W - 2) {
      el("text", { x: W - 2, y: 16, "text-anchor": "end", "font-size": 11, fill: "#555", "class": "tl-device" }, legend).textContent = dev;
    }
    var clipId = box.id + "-clip";
    var defs = el("defs", {}, svg);
    el("rect", { x: L, y: T, width: pw, height: ph }, el("clipPath", { id: clipId }, defs));
    var plot = el("g", { "clip-path": "url(#" + clipId + ")" }, svg);
    var colors = ["#deebf7", "#fdebd2", "#e5f5e0", "#efe5f5"], k = 0;
    d.phases.forEach(function (p) {
      if (p.depth !== 1) return;
      el("rect", { x: x(p.start_ns), y: T, width: Math.max(0.5, x(p.end_ns) - x(p.start_ns)), height: ph, fill: colors[k++ % colors.length] }, plot);
    });
    yTicks.forEach(function (v) {
      var ty = y(v);
      el("line", { x1: L, x2: L + pw, y1: ty, y2: ty, stroke: "#eee" }, svg);
      el("text", { x: L - 5, y: ty + 4, "text-anchor": "end", "font-size": 11, fill: "#555", "class": "tl-ytick" }, svg).textContent = fmtTick(v, step[1]);
    });
    function path(s, color) {
      var pts = [], last = null;
      for (var i = 0; i < s.time_ns.length; i++) {
        var px = x(s.time_ns[i]).toFixed(1);
        if (last !== null) pts.push(px + "," + last);
        last = y(s.bytes[i]).toFixed(1);
        pts.push(px + "," + last);
      }
      if (last !== null) pts.push(x(d.duration_ns).toFixed(1) + "," + last);
      el("polyline", { points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 2 }, plot);
    }
    path(d.reserved, "#e6781e");
    path(d.allocated, "#1f64b4");
    el("circle", { cx: x(d.peak_time_ns), cy: y(d.peak_allocated_bytes), r: 4, fill: "#c81e1e" }, plot);
    // Round time ticks, as many as fit (about one per 90 px), each label kept inside the canvas.
    var nt = Math.max(2, Math.min(6, Math.floor(pw / 90))), ts = timeStep(t1 - t0, nt);
    // At least two ticks: a narrow plot of a short span could round to one.
    while (Math.floor(t1 / ts) - Math.ceil(t0 / ts) < 1 && nt < 12) ts = timeStep(t1 - t0, ++nt);
    for (var tt = Math.ceil(t0 / ts) * ts; tt <= t1 + 1e-9 * ts; tt += ts) {
      var label = fmtNs(tt), half = width(label, 11) / 2, cx = Math.min(W - 2 - half, Math.max(2 + half, x(tt)));
      el("line", { x1: x(tt), x2: x(tt), y1: T + ph, y2: T + ph + 4, stroke: "#999" }, svg);
      el("text", { x: cx, y: H - 6, "text-anchor": "middle", "font-size": 11, fill: "#555", "class": "tl-xtick" }, svg).textContent = label;
    }
    el("rect", { x: L, y: T, width: pw, height: ph, fill: "none", stroke: "#999" }, svg);
    var cursor = el("line", { x1: 0, x2: 0, y1: T, y2: T + ph, stroke: "#333", "stroke-dasharray": "3 3", visibility: "hidden" }, svg);
    var sel = el("rect", { x: 0, y: T, width: 0, height: ph, fill: "rgba(31,100,180,0.15)", visibility: "hidden" }, svg);
    var self = this, dragFrom = null;
    function timeOf(ev) {
      var r = svg.getBoundingClientRect();
      var px = (ev.clientX - r.left) * W / Math.max(1, r.width);
      return { px: Math.min(L + pw, Math.max(L, px)), t: t0 + (Math.min(L + pw, Math.max(L, px)) - L) / pw * (t1 - t0) };
    }
    this.hover = function (ev) {
      var h = timeOf(ev);
      cursor.setAttribute("x1", h.px); cursor.setAttribute("x2", h.px); cursor.setAttribute("visibility", "visible");
      self.readout.textContent = "t = " + fmtNs(h.t) + " \u00b7 allocated " + fmtBytes(valueAt(d.allocated, h.t)) +
        " \u00b7 reserved " + fmtBytes(valueAt(d.reserved, h.t)) + " \u00b7 phase " + phaseAt(d.phases, h.t);
      if (dragFrom !== null) {
        sel.setAttribute("x", Math.min(dragFrom.px, h.px)); sel.setAttribute("width", Math.abs(h.px - dragFrom.px));
        sel.setAttribute("visibility", "visible");
      }
    };
    svg.addEventListener("mousemove", this.hover);
    svg.addEventListener("mousedown", function (ev) { dragFrom = timeOf(ev); ev.preventDefault(); });
    svg.addEventListener("mouseup", function (ev) {
      var to = timeOf(ev), from = dragFrom; dragFrom = null;
      if (from && Math.abs(to.px - from.px) > 4) {
        self.t0 = Math.min(from.t, to.t); self.t1 = Math.max(from.t, to.t); self.draw();
      } else { sel.setAttribute("visibility", "hidden"); }
    });
    svg.addEventListener("mouseleave", function () { cursor.setAttribute("visibility", "hidden"); dragFrom = null; sel.setAttribute("visibility", "hidden"); });
    svg.addEventListener("dblclick", function () { self.t0 = self.work.at; self.t1 = Math.max(self.t0 + 1, d.duration_ns); self.draw(); });
    this.svg = svg;
    this.plotBox = { left: L, width: pw, svgWidth: W };
  };
  var m = /hover=([0-9.]+)/.exec(location.search + location.hash);
  if (m) {
    var closed = document.querySelectorAll("details.timelines");
    for (var j = 0; j < closed.length; j++) closed[j].open = true;
  }
  var charts = [];
  var figs = document.querySelectorAll("figure[data-timeline]");
  for (var i = 0; i < figs.length; i++) charts.push(new Timeline(figs[i]));
  if (m) charts.forEach(function (c) {
    var svg = c.svg, r = svg.getBoundingClientRect(), b = c.plotBox;
    var px = (b.left + b.width * parseFloat(m[1])) * r.width / b.svgWidth;
    svg.dispatchEvent(new MouseEvent("mousemove", { clientX: r.left + px, clientY: r.top + r.height / 2, bubbles: true }));
  });
})();
