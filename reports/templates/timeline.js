// vramlab report: interactive memory timelines, written for this report (no library).
// Each figure[data-timeline] holds its data as JSON; the chart is an SVG drawn here.
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
  function Timeline(fig) {
    var id = fig.getAttribute("data-timeline");
    this.data = JSON.parse(document.getElementById(id + "-data").textContent);
    this.box = document.getElementById(id);
    this.readout = document.getElementById(id + "-readout");
    this.t0 = 0; this.t1 = Math.max(1, this.data.duration_ns);
    var self = this, holder = fig.closest("details");
    this.svg = null;
    if (!holder || holder.open) this.draw();
    if (holder) holder.addEventListener("toggle", function () { if (holder.open && !self.svg) self.draw(); });
    window.addEventListener("resize", function () { if (self.box.clientWidth > 0) self.draw(); });
  }
  Timeline.prototype.draw = function () {
    var d = this.data, box = this.box;
    var W = Math.max(200, box.clientWidth), H = Math.max(160, box.clientHeight);
    var L = 80, R = 10, T = 10, B = 28;
    var pw = W - L - R, ph = H - T - B;
    var maxB = 1;
    [d.allocated, d.reserved].forEach(function (s) { s.bytes.forEach(function (b) { if (b > maxB) maxB = b; }); });
    maxB *= 1.1;
    var t0 = this.t0, t1 = this.t1;
    var x = function (t) { return L + (t - t0) / (t1 - t0) * pw; };
    var y = function (b) { return T + ph - b / maxB * ph; };
    while (box.firstChild) box.removeChild(box.firstChild);
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img" }, box);
    var clipId = box.id + "-clip";
    var defs = el("defs", {}, svg);
    el("rect", { x: L, y: T, width: pw, height: ph }, el("clipPath", { id: clipId }, defs));
    var plot = el("g", { "clip-path": "url(#" + clipId + ")" }, svg);
    var colors = ["#deebf7", "#fdebd2", "#e5f5e0", "#efe5f5"], k = 0;
    d.phases.forEach(function (p) {
      if (p.depth !== 1) return;
      el("rect", { x: x(p.start_ns), y: T, width: Math.max(0.5, x(p.end_ns) - x(p.start_ns)), height: ph, fill: colors[k++ % colors.length] }, plot);
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
    for (var i = 0; i <= 4; i++) {
      var b = maxB * i / 4, ty = y(b);
      el("line", { x1: L, x2: L + pw, y1: ty, y2: ty, stroke: "#eee" }, svg);
      el("text", { x: L - 4, y: ty + 4, "text-anchor": "end", "font-size": 11, fill: "#555" }, svg).textContent = fmtBytes(Math.round(b));
      var tt = t0 + (t1 - t0) * i / 4;
      el("text", { x: x(tt), y: H - 8, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle", "font-size": 11, fill: "#555" }, svg).textContent = fmtNs(tt);
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
    svg.addEventListener("dblclick", function () { self.t0 = 0; self.t1 = Math.max(1, d.duration_ns); self.draw(); });
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
