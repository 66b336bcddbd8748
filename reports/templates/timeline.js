// vramlab report: interactive memory timelines, written for this report (no library).
// Each figure[data-timeline] (the bench report) or figure[data-stacked] (the replay
// page, below) holds its data as JSON; the chart is an SVG drawn here. The bench
// report's timelines have a legend (allocated, reserved, peak) and the device, y ticks
// on round byte steps (1, 2 or 5 of a binary unit: 0, 200 MiB, 400 MiB), x ticks on
// round time steps, and a left margin measured from the widest y label so no label is
// cut. The x axis starts on the work: where the case's setup before its first phase
// (or, without phases, before its first allocation) is over 5 % of the recording and
// holds no peak, the axis starts at the work and a note under the chart says what is
// hidden (a button shows it).
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
  // A round step (1, 2 or 5 times a power of ten) splitting `span` into at most `n` parts, in any unit.
  function roundStep(span, n) {
    var raw = span > 0 ? span / n : 1, p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
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

  // ----- The replay page's memory timeline: figure[data-stacked] -----
  // Live bytes stacked by call path (columns of the trace, each the state where
  // the total is highest within it), the replay's reserved and allocated lines,
  // the capacity and marks for the peaks and out-of-memory errors (each at the
  // entry that reached it; a failed request a bar from the reserved bytes up by
  // the request, across the capacity; marks of one kind within 3 px merged;
  // labels placed where they overlap no other label, else left to the mark's
  // title). Drawn per pixel column from the columns in view (the highest-total
  // column wins), so a 2M-entry trace draws ~1000 columns. Wheel, pinch or the
  // buttons zoom; drag (mouse or one finger) pans; double-click resets.
  // Hovering (or tapping) a band names its call path, its bytes there, the
  // block under the cursor (the band's largest live block at that column, with
  // its alloc and free entries and stack) and the stacks of its largest blocks; within 6 px of a mark the hover is at the
  // mark's own entry (the page pins a column there). `#zoom=A,B`
  // shows fraction A..B of the x axis (`#axis=order` first switches it to
  // allocation order); `#hover=F[,G]` hovers at fraction F of
  // the view's width (G of its height from the bottom; default inside the
  // lowest band).
  var BANDS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#8cd17d", "#d4a6c8", "#bab0ac"];
  function bandColor(k, n, other) { return other && k === n - 1 ? "#bab0ac" : BANDS[k % (BANDS.length - 1)]; }
  function lowerBound(a, v) { var lo = 0, hi = a.length; while (lo < hi) { var m = (lo + hi) >> 1; if (a[m] < v) lo = m + 1; else hi = m; } return lo; }
  function upperBound(a, v) { var lo = 0, hi = a.length; while (lo < hi) { var m = (lo + hi) >> 1; if (a[m] <= v) lo = m + 1; else hi = m; } return lo; }
  function Stacked(fig) {
    var id = fig.getAttribute("data-stacked");
    this.fig = fig;
    this.d = JSON.parse(document.getElementById(id + "-data").textContent);
    this.box = document.getElementById(id);
    this.readout = document.getElementById(id + "-readout");
    this.stack = document.getElementById(id + "-stack");
    var d = this.d, n = d.series.length, total = new Array(d.x.length);
    for (var c = 0; c < d.x.length; c++) { var t = 0; for (var k = 0; k < n; k++) t += d.series[k].v[c]; total[c] = t; }
    this.total = total;
    // Two x axes where the trace has times: time, and allocation order (entries
    // applied), where idle time takes no width; a button switches.
    this.axes = null;
    if (d.time && d.reserved.ops) {
      this.axes = {
        time: { cols: d.x, res: d.reserved.x, alc: d.allocated.x, marks: d.marks.map(function (m) { return m.x; }), unit: d.time, desc: d.x_desc },
        order: { cols: d.applied, res: d.reserved.ops, alc: d.allocated.ops, marks: d.marks.map(function (m) { return m.state; }), unit: null, desc: "entries applied (allocation order: idle time takes no width)" }
      };
    }
    this.fit();
    this.pointers = {};
    var self = this;
    this.draw();
    this.bind();
    var order = fig.querySelector("button[data-axis]");
    if (order && this.axes) order.addEventListener("click", function () {
      self.useAxis(self.axisName === "order" ? "time" : "order");
      order.textContent = self.axisName === "order" ? "x: time" : "x: allocation order";
    });
    else if (order) order.parentNode.removeChild(order);
    window.addEventListener("resize", function () { self.draw(); });
    var buttons = fig.querySelectorAll("button[data-zoom]");
    for (var b = 0; b < buttons.length; b++) buttons[b].addEventListener("click", function (ev) {
      var z = ev.currentTarget.getAttribute("data-zoom");
      if (z === "reset") self.setView(self.full[0], self.full[1]);
      else { var m = (self.view[0] + self.view[1]) / 2; self.zoomAt(m, z === "in" ? 0.5 : 2); }
    });
  }
  // The whole x range of the data, as the view.
  Stacked.prototype.fit = function () {
    var d = this.d, xs = d.x.concat(d.reserved.x, d.allocated.x), lo = Infinity, hi = -Infinity;
    (d.lines || []).forEach(function (ln) { xs = xs.concat(ln.x); });
    for (var i = 0; i < xs.length; i++) { if (xs[i] < lo) lo = xs[i]; if (xs[i] > hi) hi = xs[i]; }
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (hi <= lo) hi = lo + 1;
    this.full = [lo, hi]; this.view = [lo, hi];
    this.fig.setAttribute("data-view", lo + "," + hi);
  };
  // Switches the x axis: "time" or "order" (entries applied).
  Stacked.prototype.useAxis = function (name) {
    var a = this.axes && this.axes[name], d = this.d;
    if (!a) return;
    this.axisName = name;
    d.x = a.cols; d.reserved.x = a.res; d.allocated.x = a.alc; d.time = a.unit; d.x_desc = a.desc;
    d.marks.forEach(function (m, i) { m.x = a.marks[i]; });
    this.fig.setAttribute("data-axis", name);
    this.fit();
    this.draw();
  };
  Stacked.prototype.setView = function (a, b) {
    var f = this.full, span = f[1] - f[0], min = span / 1e6;
    if (b - a < min) { var m = (a + b) / 2; a = m - min / 2; b = m + min / 2; }
    if (b - a > span) { a = f[0]; b = f[1]; }
    if (a < f[0]) { b += f[0] - a; a = f[0]; }
    if (b > f[1]) { a -= b - f[1]; b = f[1]; }
    this.view = [Math.max(f[0], a), Math.min(f[1], b)];
    this.fig.setAttribute("data-view", this.view[0] + "," + this.view[1]);
    this.draw();
  };
  Stacked.prototype.zoomAt = function (x, factor) {
    var v = this.view;
    this.setView(x - (x - v[0]) * factor, x + (v[1] - x) * factor);
  };
  // The chart's columns in view, one per pixel: for each pixel the column with the highest total.
  Stacked.prototype.pick = function (xs, val, x0, x1, px, x) {
    var out = [], i = Math.max(0, upperBound(xs, x0) - 1), end = Math.min(xs.length, upperBound(xs, x1) + 1);
    var lastPx = null, best = -1;
    for (; i < end; i++) {
      var p = Math.round(x(xs[i]));
      if (p !== lastPx) { if (best >= 0) out.push(best); lastPx = p; best = i; }
      else if (val(i) > val(best)) best = i;
    }
    if (best >= 0) out.push(best);
    return out;
  };
  Stacked.prototype.draw = function () {
    var d = this.d, box = this.box, self = this;
    var W = Math.max(200, box.clientWidth), H = Math.max(160, box.clientHeight);
    var narrow = W < 500, L = narrow ? 68 : 78, R = 8, T = 12, B = 30, pw = W - L - R, ph = H - T - B;
    var v0 = this.view[0], v1 = this.view[1];
    var x = function (t) { return L + (t - v0) / (v1 - v0) * pw; };
    var cols = this.pick(d.x, function (i) { return self.total[i]; }, v0, v1, pw, x);
    var res = this.pick(d.reserved.x, function (i) { return d.reserved.v[i]; }, v0, v1, pw, x);
    var alc = this.pick(d.allocated.x, function (i) { return d.allocated.v[i]; }, v0, v1, pw, x);
    var maxB = 1;
    cols.forEach(function (c) { if (self.total[c] > maxB) maxB = self.total[c]; });
    res.forEach(function (i) { if (d.reserved.v[i] > maxB) maxB = d.reserved.v[i]; });
    alc.forEach(function (i) { if (d.allocated.v[i] > maxB) maxB = d.allocated.v[i]; });
    // The lines of the what-if and diff pages (d.lines: one per setting or side), each its points in view.
    var extra = (d.lines || []).map(function (ln) {
      var idx = self.pick(ln.x, function (i) { return ln.v[i]; }, v0, v1, pw, x);
      idx.forEach(function (i) { if (ln.v[i] > maxB) maxB = ln.v[i]; });
      return idx;
    });
    // A failed request's bar reaches at most a quarter above the capacity (it crosses the line either way).
    d.marks.forEach(function (m) {
      var reach = m.bytes + Math.min(m.request || 0, (d.capacity || m.bytes) * 1.25 - m.bytes);
      if (m.x >= v0 && m.x <= v1 && reach > maxB) maxB = reach;
    });
    if (d.capacity && d.capacity > maxB) maxB = d.capacity;
    maxB *= 1.12;
    var y = function (b) { return T + ph - b / maxB * ph; };
    while (box.firstChild) box.removeChild(box.firstChild);
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img", "aria-label": "memory over the trace" }, box);
    var clipId = box.id + "-clip";
    el("rect", { x: L, y: T, width: pw, height: ph }, el("clipPath", { id: clipId }, el("defs", {}, svg)));
    var plot = el("g", { "clip-path": "url(#" + clipId + ")" }, svg);
    var n = d.series.length, xEnd = x(v1) + 1;
    // Bands: each a step area between the cumulative sums below and with it; a
    // drilled band (this.drill) as its parts, each a step area of its own.
    var below = cols.map(function () { return 0; });
    function area(v, fill, attrs) {
      var top = [], bottom = [];
      for (var j = 0; j < cols.length; j++) {
        var c = cols[j], x0 = Math.max(L - 1, x(d.x[c])), x1 = j + 1 < cols.length ? x(d.x[cols[j + 1]]) : xEnd;
        var lo = below[j], hi = lo + v[c];
        below[j] = hi;
        top.push(x0.toFixed(1) + "," + y(hi).toFixed(1), x1.toFixed(1) + "," + y(hi).toFixed(1));
        bottom.push(x0.toFixed(1) + "," + y(lo).toFixed(1), x1.toFixed(1) + "," + y(lo).toFixed(1));
      }
      if (!top.length) return;
      attrs.points = top.concat(bottom.reverse()).join(" "); attrs.fill = fill;
      el("polygon", attrs, plot);
    }
    for (var k = 0; k < n; k++) {
      if (this.drill && this.drill.band === k) {
        this.layers().forEach(function (ly, i) { area(ly.v, ly.color, { "class": "band part", "data-band": k, "data-part": i }); });
      } else area(d.series[k].v, bandColor(k, n, d.other), { "class": "band", "data-band": k });
    }
    function line(series, idx, color, cls, w) {
      var pts = [], last = null;
      idx.forEach(function (i, j) {
        var px = Math.max(L - 1, x(series.x[i])).toFixed(1), py = y(series.v[i]).toFixed(1);
        if (last !== null) pts.push(px + "," + last);
        pts.push(px + "," + py); last = py;
        if (j === idx.length - 1) pts.push(xEnd.toFixed(1) + "," + py);
      });
      if (pts.length) el("polyline", { points: pts.join(" "), fill: "none", stroke: color, "stroke-width": w, "class": cls }, plot);
    }
    line(d.reserved, res, "#b35900", "line-reserved", 2);
    line(d.allocated, alc, "#1d232a", "line-allocated", 1.2);
    (d.lines || []).forEach(function (ln, i) {
      line(ln, extra[i], ln.color, "line-extra", ln.dashed ? 1.2 : 2);
      if (ln.dashed) plot.lastChild.setAttribute("stroke-dasharray", "5 3");
    });
    // Labels never overlap: each is placed at the first free spot among a few
    // beside its mark (boxes measured as drawn), else left out (its mark keeps
    // its title); the capacity label counts as placed.
    var placed = [];
    function textBox(t) { var b = t.getBBox(); return { l: b.x - 1, r: b.x + b.width + 1, t: b.y - 1, b: b.y + b.height + 1 }; }
    function free(b) {
      if (b.l < 0 || b.r > W || b.t < 0 || b.b > H - B + 2) return false;
      for (var i = 0; i < placed.length; i++) { var p = placed[i]; if (b.l < p.r && p.l < b.r && b.t < p.b && p.t < b.b) return false; }
      return true;
    }
    if (d.capacity) {
      var cy = y(d.capacity);
      el("line", { x1: L, x2: L + pw, y1: cy, y2: cy, stroke: "#5a5a5a", "stroke-width": 2, "stroke-dasharray": "8 5", "class": "capacity" }, svg);
      var capText = el("text", { x: L + 4, y: cy - 4, "font-size": 11, fill: "#5a5a5a", "class": "capacity-label label" }, svg);
      capText.textContent = d.capacity_label || "capacity " + fmtBytes(d.capacity);
      var cb = textBox(capText);
      // Kept off the plot's top edge: under the line where it sits near the top.
      if (cb.t < T) { capText.setAttribute("y", cy + 13); cb = textBox(capText); }
      placed.push(cb);
    }
    var markColor = { allocated: "#1f64b4", reserved: "#aa5000", oom: "#c81e1e" };
    // Marks within 3 px of one another, of one kind, are one mark ("3 OOMs").
    var shown = [];
    d.marks.forEach(function (m) {
      if (m.x < v0 || m.x > v1) return;
      var mx = x(m.x), last = shown.length ? shown[shown.length - 1] : null;
      if (last && last.kind === m.kind && Math.abs(last.px - mx) < 3) { last.all.push(m); if (m.bytes > last.bytes) last.bytes = m.bytes; return; }
      shown.push({ kind: m.kind, px: mx, bytes: m.bytes, all: [m] });
    });
    // Out-of-memory marks first, then the peaks: the failed requests are drawn
    // as bars from the reserved bytes at the error up by the request.
    shown.sort(function (a, b) { return (a.kind === "oom" ? 0 : 1) - (b.kind === "oom" ? 0 : 1); });
    this.shownMarks = [];
    shown.forEach(function (s) {
      var m = s.all[0], mx = s.px, my = y(s.bytes), g = el("g", { "class": "mark mark-" + s.kind, "data-state": m.state }, svg);
      if (s.kind === "oom") {
        el("line", { x1: mx, x2: mx, y1: T, y2: T + ph, stroke: markColor.oom, "stroke-dasharray": "3 3" }, g);
        var req = 0; s.all.forEach(function (o) { if (o.request > req) req = o.request; });
        if (req) {
          var top = Math.max(T, y(s.bytes + req));
          el("rect", { x: mx - 3, y: top, width: 6, height: Math.max(1, my - top), fill: "rgba(200,30,30,0.45)", stroke: markColor.oom, "class": "oom-request" }, g);
        }
      }
      el("circle", { cx: mx, cy: my, r: 4.5, fill: m.color || markColor[s.kind], stroke: "#fff" }, g);
      el("title", {}, g).textContent = s.all.map(function (o) { return o.label; }).join("\n");
      var text = s.all.length > 1 ? (s.kind === "oom" ? s.all.length + " OOMs" : m.short + " (" + s.all.length + ")") : m.short;
      var right = mx > L + pw * 0.6, label = el("text", { "text-anchor": right ? "end" : "start", "font-size": 11, fill: m.color || markColor[s.kind], "class": "label" }, g);
      label.textContent = text;
      var tries = s.kind === "oom" ? [T + 11, T + 24, T + 37, my - 8, my + 16] : s.kind === "allocated" ? [my + 15, my - 7, my + 28, my - 20, my + 41] : [my - 7, my + 15, my - 20, my + 28, my - 33];
      var ok = false;
      for (var i = 0; i < tries.length && !ok; i++) {
        [right ? -6 : 6, right ? 6 : -6].forEach(function (dx, side) {
          if (ok) return;
          label.setAttribute("x", mx + dx); label.setAttribute("y", tries[i]);
          label.setAttribute("text-anchor", (side === 0) === right ? "end" : "start");
          var b = textBox(label);
          if (free(b)) { placed.push(b); ok = true; }
        });
      }
      if (!ok) g.removeChild(label);
      self.shownMarks.push({ px: mx, py: my, mark: m, count: s.all.length });
    });
    // Round byte ticks (1, 2 or 5 of a binary unit), as on the bench report's timelines.
    var ystep = byteStep(maxB / 1.12, 4);
    for (var b = 0; b <= maxB; b += ystep[0]) {
      var ty = y(b);
      el("line", { x1: L, x2: L + pw, y1: ty, y2: ty, stroke: "#eee" }, svg);
      el("text", { x: L - 4, y: ty + 4, "text-anchor": "end", "font-size": narrow ? 10 : 11, fill: "#555", "class": "st-ytick" }, svg).textContent = fmtTick(b, ystep[1]);
    }
    // Round x ticks in the axis's own unit (time, or entries: whole ones), labels kept inside the canvas.
    var nt = narrow ? 3 : Math.max(2, Math.min(6, Math.floor(pw / 110)));
    var xstep = roundStep(v1 - v0, nt);
    if (!d.time) xstep = Math.max(1, Math.round(xstep));
    var digits = Math.max(0, -Math.floor(Math.log10(xstep) + 1e-9));
    for (var tt = Math.ceil(v0 / xstep) * xstep; tt <= v1 + 1e-9 * xstep; tt += xstep) {
      var lab = d.time ? tt.toFixed(digits) + " " + d.time : Math.round(tt).toLocaleString("en");
      var half = lab.length * 3.2, cx = Math.min(W - 2 - half, Math.max(2 + half, x(tt)));
      el("line", { x1: x(tt), x2: x(tt), y1: T + ph, y2: T + ph + 4, stroke: "#999" }, svg);
      el("text", { x: cx, y: H - 12, "text-anchor": "middle", "font-size": 11, fill: "#555", "class": "st-xtick" }, svg).textContent = lab;
    }
    el("text", { x: L + pw / 2, y: H - 1, "text-anchor": "middle", "font-size": 11, fill: "#555" }, svg).textContent =
      narrow ? (d.time ? "time since the first entry (" + d.time + ")" : "entries") : d.x_desc;
    el("rect", { x: L, y: T, width: pw, height: ph, fill: "none", stroke: "#999" }, svg);
    this.cursor = el("line", { x1: 0, x2: 0, y1: T, y2: T + ph, stroke: "#333", "stroke-dasharray": "3 3", visibility: "hidden" }, svg);
    this.svg = svg;
    this.geom = { L: L, pw: pw, T: T, ph: ph, W: W, H: H, maxB: maxB };
  };
  function fmtX(d, t) {
    if (!d.time) return Math.round(t).toLocaleString("en");
    return (Math.abs(t) >= 100 ? t.toFixed(0) : Math.abs(t) >= 1 ? t.toFixed(2) : t.toFixed(3)) + " " + d.time;
  }
  // Where a client point falls: x in axis units and bytes.
  Stacked.prototype.at = function (cx, cy) {
    var r = this.svg.getBoundingClientRect(), g = this.geom;
    var px = (cx - r.left) * g.W / Math.max(1, r.width), py = (cy - r.top) * g.H / Math.max(1, r.height);
    px = Math.min(g.L + g.pw, Math.max(g.L, px));
    return { px: px, py: py, x: this.view[0] + (px - g.L) / g.pw * (this.view[1] - this.view[0]), bytes: (g.T + g.ph - py) / g.ph * g.maxB };
  };
  // ----- A band split by its next frames (band_split.rs): the drill-down -----
  var PARTS = ["#2f4b7c", "#a05195", "#f95d6a", "#ffa600", "#665191", "#d45087", "#ff7c43"];
  // A part's live bytes per column, from its (column, bytes) changes; kept on the part.
  function partValues(p, n) {
    if (p.v) return p.v;
    var v = new Array(n), at = 0, now = 0;
    for (var c = 0; c < n; c++) {
      while (at < p.changes.length && p.changes[at][0] === c) { now = p.changes[at][1]; at++; }
      v[c] = now;
    }
    return (p.v = v);
  }
  // A frame's text without the install prefix (…/site-packages/).
  function shortFrame(f) { return f.replace(/^.*\/(site|dist)-packages\//, ""); }
  // The drilled band's split node (the parts shown) and the part it focuses on.
  Stacked.prototype.node = function () {
    var dr = this.drill, split = this.d.series[dr.band].split, focus = null;
    dr.path.forEach(function (i) { focus = split.parts[i]; split = focus.split; });
    return { split: split, focus: focus };
  };
  // The drilled band's layers, bottom up: the focused node's parts, then the rest of the band.
  Stacked.prototype.layers = function () {
    var d = this.d, n = d.x.length, s = d.series[this.drill.band], nd = this.node(), out = [];
    nd.split.parts.forEach(function (p, i) { out.push({ v: partValues(p, n), color: PARTS[i % PARTS.length], label: p.label, part: p }); });
    if (nd.focus) {
      var f = partValues(nd.focus, n), rest = s.v.map(function (b, c) { return b - f[c]; });
      out.push({ v: rest, color: bandColor(this.drill.band, d.series.length, d.other), label: "the rest of the band", part: null });
    }
    return out;
  };
  // Drills: into band k's split, into part i of the node shown, or back up (i = -1).
  Stacked.prototype.drillTo = function (k, i) {
    if (k === null) this.drill = null;
    else if (!this.drill || this.drill.band !== k) this.drill = { band: k, path: [] };
    else if (i < 0) { if (!this.drill.path.length) this.drill = null; else this.drill.path.pop(); }
    else this.drill.path.push(i);
    this.fig.setAttribute("data-drill", this.drill ? this.drill.band + ":" + this.drill.path.join(",") : "");
    this.draw();
    this.splitLegend();
    if (this.lastHover) this.hover(this.lastHover[0], this.lastHover[1]);
  };
  // The legend of a drilled band: where its blocks part, and each part (a click splits it further).
  Stacked.prototype.splitLegend = function () {
    var self = this, box = this.splitBox;
    if (!box) {
      box = this.splitBox = document.createElement("div");
      box.className = "tl-split";
      this.readout.parentNode.insertBefore(box, this.readout.nextSibling);
    }
    while (box.firstChild) box.removeChild(box.firstChild);
    if (!this.drill) return;
    var s = this.d.series[this.drill.band], nd = this.node(), head = document.createElement("p");
    var via = nd.split.common.map(shortFrame);
    head.textContent = "Band \u201c" + s.label + "\u201d split by its next frames" +
      (via.length ? ", inside " + via.join(" \u2192 ") + " (every block shown goes through it)" : "") + ":";
    box.appendChild(head);
    var ul = document.createElement("ul");
    ul.className = "legend";
    this.layers().forEach(function (ly, i) {
      var li = document.createElement("li"), sw = document.createElement("span"), code = document.createElement("code");
      sw.className = "swatch"; sw.style.background = ly.color;
      code.textContent = ly.part ? shortFrame(ly.label) : ly.label; code.title = ly.label;
      li.appendChild(sw); li.appendChild(code);
      li.appendChild(document.createTextNode(ly.part ? " (up to " + fmtBytes(ly.part.peak_bytes) + ")" : ""));
      if (ly.part && ly.part.split) {
        var b = document.createElement("button");
        b.type = "button"; b.textContent = "split further"; b.setAttribute("data-split-part", i);
        b.addEventListener("click", function () { self.drillTo(self.drill.band, i); });
        li.appendChild(document.createTextNode(" ")); li.appendChild(b);
      }
      ul.appendChild(li);
    });
    box.appendChild(ul);
    var up = document.createElement("button");
    up.type = "button"; up.textContent = this.drill.path.length ? "up one level" : "merge the band back"; up.setAttribute("data-split-up", "");
    up.addEventListener("click", function () { self.drillTo(self.drill.band, -1); });
    box.appendChild(up);
  };
  function stepAt(series, t) { var i = upperBound(series.x, t) - 1; return i < 0 ? 0 : series.v[i]; }
  Stacked.prototype.hover = function (cx, cy) {
    var d = this.d, h = this.at(cx, cy), self = this;
    this.lastHover = [cx, cy];
    // Within 6 px of a mark the hover is at the mark's entry: its own column (the page pins it);
    // of marks that close, the nearest to the pointer (its circle).
    var near = null, py = h.py, dist = function (s) { return Math.pow(s.px - h.px, 2) + Math.pow(s.py - py, 2); };
    (this.shownMarks || []).forEach(function (s) { if (Math.abs(s.px - h.px) <= 6 && (!near || dist(s) < dist(near))) near = s; });
    var c = upperBound(d.x, h.x) - 1;
    if (near) {
      h.px = near.px; h.x = near.mark.x;
      var at = lowerBound(d.applied, near.mark.state);
      c = at < d.applied.length && d.applied[at] === near.mark.state ? at : upperBound(d.x, h.x) - 1;
    }
    this.cursor.setAttribute("x1", h.px); this.cursor.setAttribute("x2", h.px); this.cursor.setAttribute("visibility", "visible");
    this.fig.setAttribute("data-hover-column", c);
    var parts = [];
    if (near) parts.push(near.count > 1 ? near.count + " marks here; the first: " + near.mark.label : near.mark.label);
    if (d.time) parts.push("t = " + fmtX(d, h.x));
    if (c >= 0) {
      var entry = d.applied[c] - 1;
      var exact = near || d.entries_per_column <= 1;
      parts.push(entry < 0 ? "before the first entry" : "entry " + entry.toLocaleString("en") + (exact ? "" : " (highest of its " + d.entries_per_column + " entries)"));
      if (d.series.length) parts.push("live " + fmtBytes(this.total[c]));
    }
    if (d.lines) {
      if (!d.time) parts.push("after " + Math.max(0, Math.round(h.x)).toLocaleString("en") + " entries");
      d.lines.forEach(function (ln) { parts.push(ln.name + " " + fmtBytes(stepAt(ln, h.x))); });
    } else parts.push("allocated " + fmtBytes(stepAt(d.allocated, h.x)), "reserved " + fmtBytes(stepAt(d.reserved, h.x)));
    this.readout.textContent = parts.join(" \u00b7 ");
    while (this.stack.firstChild) this.stack.removeChild(this.stack.firstChild);
    if (c < 0 || !d.series.length) return;
    var k = -1, sum = 0, best = 0;
    for (var j = 0; j < d.series.length; j++) {
      var v = d.series[j].v[c];
      if (k < 0 && v > 0 && h.bytes >= sum && h.bytes < sum + v) k = j;
      sum += v;
      if (v > d.series[best].v[c]) best = j;
    }
    var guessed = k < 0;
    if (guessed) k = best;
    var s = d.series[k];
    this.fig.setAttribute("data-hover-band", k);
    var p = document.createElement("p");
    p.innerHTML = "<span class=\"swatch\"></span><strong></strong> <span class=\"bytes\"></span>";
    p.firstChild.style.background = bandColor(k, d.series.length, d.other);
    p.childNodes[1].textContent = s.label;
    p.childNodes[3].textContent = fmtBytes(s.v[c]) + " live here" + (guessed ? " (the largest band here; point at a band to pick another)" : "") +
      (s.frames.length > 1 ? " \u00b7 called from " + s.frames.slice(1).join(" \u2190 ") : "");
    if (s.split && !(this.drill && this.drill.band === k)) {
      var sb = document.createElement("button");
      sb.type = "button"; sb.textContent = "split this band by its next frames"; sb.setAttribute("data-split-band", k);
      sb.addEventListener("click", function () { self.drillTo(k, 0); });
      p.appendChild(document.createTextNode(" ")); p.appendChild(sb);
    }
    this.stack.appendChild(p);
    this.fig.setAttribute("data-hover-part", "");
    if (this.drill && this.drill.band === k && !guessed) {
      // The part under the cursor: its frame and bytes here.
      var at = h.bytes, under = 0;
      for (var j0 = 0; j0 < k; j0++) under += d.series[j0].v[c];
      var lys = this.layers(), ly = null;
      for (var li = 0; li < lys.length; li++) { if (at >= under && at < under + lys[li].v[c]) { ly = lys[li]; break; } under += lys[li].v[c]; }
      if (ly) {
        var pp = document.createElement("p");
        pp.className = "part";
        pp.textContent = "Part: " + shortFrame(ly.label) + ", " + fmtBytes(ly.v[c]) + " live here";
        this.stack.appendChild(pp);
        this.fig.setAttribute("data-hover-part", ly.label);
      }
    }
    // Who holds the memory at this point: every band's live bytes and share, largest first.
    var rows = [];
    for (var r = 0; r < d.series.length; r++) if (d.series[r].v[c] > 0) rows.push(r);
    rows.sort(function (a, b) { return d.series[b].v[c] - d.series[a].v[c]; });
    if (rows.length) {
      var tbl = document.createElement("table"), cap = document.createElement("caption");
      tbl.className = "at-point";
      cap.textContent = "Live here, by call path (" + fmtBytes(this.total[c]) + ")";
      tbl.appendChild(cap);
      rows.forEach(function (r) {
        var tr = document.createElement("tr"), sw = document.createElement("td"), name = document.createElement("td");
        var bytes = document.createElement("td"), share = document.createElement("td");
        sw.innerHTML = "<span class=\"swatch\"></span>";
        sw.firstChild.style.background = bandColor(r, d.series.length, d.other);
        name.textContent = d.series[r].label;
        bytes.textContent = fmtBytes(d.series[r].v[c]);
        share.textContent = (100 * d.series[r].v[c] / Math.max(1, self.total[c])).toFixed(1) + " %";
        bytes.className = share.className = "num";
        if (r === k) tr.className = "hovered";
        [sw, name, bytes, share].forEach(function (td) { tr.appendChild(td); });
        tbl.appendChild(tr);
      });
      var wrap = document.createElement("div");
      wrap.className = "scroll";
      wrap.appendChild(tbl);
      this.stack.appendChild(wrap);
    }
    // Your frames in full; each run of folded frames (torch, packages, the
    // standard library, C++) as one line; every frame behind "all frames".
    function appendStack(frames, leftOut) {
      var ol = document.createElement("ol"), run = 0;
      ol.className = "stack";
      function item(list, text, cls) { var li = document.createElement("li"); li.textContent = text; if (cls) li.className = cls; list.appendChild(li); }
      function flush() { if (run) item(ol, "\u2026 " + run + " folded frame" + (run > 1 ? "s" : "") + " (torch, packages, standard library, C++)", "folded"); run = 0; }
      frames.forEach(function (f) { if (f[1]) run++; else { flush(); item(ol, f[0], "user"); } });
      run += leftOut; flush();
      var all = document.createElement("details"), sum = document.createElement("summary"), full = document.createElement("ol");
      sum.textContent = "all " + (frames.length + leftOut) + " frames";
      full.className = "stack";
      frames.forEach(function (f) { item(full, f[0], f[1] ? "folded" : "user"); });
      if (leftOut) item(full, "\u2026 " + leftOut + " more frames", "folded");
      all.appendChild(sum); all.appendChild(full);
      self.stack.appendChild(ol);
      self.stack.appendChild(all);
    }
    // The block under the cursor: the band's largest block live at this column's state.
    var lb = s.live && s.live[c] >= 0 ? d.live_blocks[s.live[c]] : null;
    if (s.live && s.live[c] === -2) {
      var q1 = document.createElement("p");
      q1.className = "hint";
      q1.textContent = "The block under the cursor is not in the page: it keeps the first " + d.live_blocks.length + " blocks that columns name.";
      self.stack.appendChild(q1);
    }
    this.fig.setAttribute("data-hover-state", d.applied[c]);
    this.fig.setAttribute("data-live-block", lb ? (lb[1] === null ? -1 : lb[1]) + "," + (lb[2] === null ? "" : lb[2]) : "");
    if (lb) {
      var st = d.stacks[lb[3]], q0 = document.createElement("p");
      q0.className = "live-block";
      q0.textContent = "Block under the cursor (this band's largest live here): " + fmtBytes(lb[0]) +
        (lb[1] === null ? ", live before the recording began" : ", allocated at entry " + lb[1].toLocaleString("en")) +
        (lb[2] === null ? ", still live at the end" : ", freed at entry " + lb[2].toLocaleString("en")) +
        (st[0].length ? "; its stack, innermost first:" : "; no stack recorded");
      self.stack.appendChild(q0);
      if (st[0].length) appendStack(st[0], st[1]);
    }
    s.blocks.forEach(function (b, i) {
      var q = document.createElement("p");
      q.className = "hint";
      q.textContent = (i === 0 ? "Largest block made on this call path (over the whole trace, live here or not): " : "Next largest: ") + fmtBytes(b.bytes) +
        (b.entry === null ? ", live before the recording began" : ", allocated at entry " + b.entry.toLocaleString("en")) +
        (b.frames.length ? "; its stack, innermost first:" : "; no stack recorded");
      self.stack.appendChild(q);
      if (b.frames.length) appendStack(b.frames, b.left_out);
    });
  };
  Stacked.prototype.bind = function () {
    var self = this, box = this.box, ptr = this.pointers, drag = null, pinch = null;
    box.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      self.zoomAt(self.at(ev.clientX, ev.clientY).x, ev.deltaY < 0 ? 0.8 : 1.25);
    }, { passive: false });
    box.addEventListener("pointerdown", function (ev) {
      // A tap (touch or pen: no hover before it) shows the readout where it lands.
      self.hover(ev.clientX, ev.clientY);
      ptr[ev.pointerId] = ev.clientX;
      try { box.setPointerCapture(ev.pointerId); } catch (e) { /* a pointer the browser does not track */ }
      var ids = Object.keys(ptr);
      if (ids.length === 1) drag = { cx: ev.clientX, view: self.view.slice() };
      if (ids.length === 2) {
        drag = null;
        var a = ptr[ids[0]], b = ptr[ids[1]];
        pinch = { d: Math.max(8, Math.abs(a - b)), mid: self.at((a + b) / 2, 0).x, view: self.view.slice() };
      }
    });
    box.addEventListener("pointermove", function (ev) {
      if (ev.pointerId in ptr) ptr[ev.pointerId] = ev.clientX;
      var ids = Object.keys(ptr), g = self.geom, r = self.svg.getBoundingClientRect();
      if (pinch && ids.length === 2) {
        var dist = Math.max(8, Math.abs(ptr[ids[0]] - ptr[ids[1]])), f = pinch.d / dist, v = pinch.view;
        self.setView(pinch.mid - (pinch.mid - v[0]) * f, pinch.mid + (v[1] - pinch.mid) * f);
      } else if (drag && Math.abs(ev.clientX - drag.cx) > 3) {
        var dx = (ev.clientX - drag.cx) * (drag.view[1] - drag.view[0]) / g.pw * g.W / Math.max(1, r.width);
        self.setView(drag.view[0] - dx, drag.view[1] - dx);
      }
      self.hover(ev.clientX, ev.clientY);
    });
    function up(ev) {
      // A click or tap that did not pan or pinch shows the allocator's state at its column (state.js).
      var still = drag && Math.abs(ev.clientX - drag.cx) <= 3 && !pinch, c = parseInt(self.fig.getAttribute("data-hover-column"), 10);
      if (still && window.vramlabStateView && c >= 0) window.vramlabStateView.show(self.d.applied[c], "clicked on the timeline");
      delete ptr[ev.pointerId]; if (Object.keys(ptr).length < 2) pinch = null; if (!Object.keys(ptr).length) drag = null;
    }
    box.addEventListener("pointerup", up);
    box.addEventListener("pointercancel", up);
    box.addEventListener("pointerleave", function () { if (self.cursor) self.cursor.setAttribute("visibility", "hidden"); });
    box.addEventListener("dblclick", function () { self.setView(self.full[0], self.full[1]); });
  };
  var stackedFigs = document.querySelectorAll("figure[data-stacked]");
  var zq = /zoom=([0-9.]+),([0-9.]+)/.exec(location.search + location.hash);
  var hq = /hover=([0-9.]+)(?:,([0-9.]+))?/.exec(location.search + location.hash);
  for (var si = 0; si < stackedFigs.length; si++) {
    var st = new Stacked(stackedFigs[si]);
    // For the browser test and the console: the page's timelines.
    (window.vramlabTimelines = window.vramlabTimelines || []).push(st);
    if (/axis=order/.test(location.search + location.hash)) st.useAxis("order");
    if (zq) { var f = st.full, sp = f[1] - f[0]; st.setView(f[0] + sp * parseFloat(zq[1]), f[0] + sp * parseFloat(zq[2])); }
    if (hq) {
      var r = st.svg.getBoundingClientRect(), g = st.geom;
      var hx = (g.L + g.pw * parseFloat(hq[1])) * r.width / g.W;
      var hy = (g.T + g.ph * (1 - (hq[2] ? parseFloat(hq[2]) : 0.01))) * r.height / g.H;
      st.hover(r.left + hx, r.top + hy);
    }
  }
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
