// vramlab replay page: the allocator's state at a chosen entry (memory_viz's segment
// map at a moment), written for this report (no library). figure[data-state-view]
// holds the replay's states as JSON (state_view.rs): per window of states a keyframe
// (every block: segment, offset, size, state) and, per next state, the blocks that
// changed (state -1: gone). The state after an entry is rebuilt from the window's
// keyframe, or from the state shown last when it lies before it in the same window,
// so stepping costs one entry's changes. The map draws one row per segment in
// address order, blocks to scale against the largest segment; hover or tap a block
// for its place. The step buttons, the entry box, the pins (peaks, OOMs) and a click
// on the timeline above choose the entry. `window.vramlabStateView.segments(state)`
// gives the segments at a state (the browser test compares them with the replay's).
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#cfd6dd", "#1f64b4", "#e6781e"], NAMES = ["free (cached)", "allocated", "freed, waiting on a stream"];
  function fmtBytes(b) {
    if (b < 1024) return b + " B";
    var u = ["KiB", "MiB", "GiB", "TiB"], v = b / 1024, i = 0;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return v.toFixed(2) + " " + u[i];
  }
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function hex(a) { return "0x" + a.toString(16); }
  var KEY = 4294967296;
  function StateView(fig) {
    var id = fig.getAttribute("data-state-view");
    this.fig = fig;
    this.d = JSON.parse(document.getElementById(id + "-data").textContent);
    this.map = document.getElementById(id + "-map");
    this.summary = document.getElementById(id + "-summary");
    this.readout = document.getElementById(id + "-readout");
    this.table = document.getElementById(id + "-table");
    this.input = document.getElementById(id + "-entry");
    this.cache = null;
    var d = this.d, self = this;
    // Each window's first offset into its change list, per state.
    d.windows.forEach(function (w) {
      w.at = new Array(w.n.length + 1);
      var o = 0;
      for (var i = 0; i < w.n.length; i++) { w.at[i] = o; o += w.n[i] * 4; }
      w.at[w.n.length] = o;
      w.end = w.start + w.n.length;
    });
    this.input.max = Math.max(0, d.entries - 1);
    var pins = document.getElementById(id + "-pins");
    d.pins.forEach(function (p) {
      var b = document.createElement("button");
      b.type = "button"; b.textContent = p.label; b.setAttribute("data-pin", p.state);
      b.addEventListener("click", function () { self.show(p.state, p.label); });
      pins.appendChild(b); pins.appendChild(document.createTextNode(" "));
    });
    var buttons = fig.querySelectorAll("button[data-step]");
    for (var i = 0; i < buttons.length; i++) buttons[i].addEventListener("click", function (ev) {
      self.show(self.state + parseInt(ev.currentTarget.getAttribute("data-step"), 10));
    });
    this.input.addEventListener("change", function () {
      var v = parseInt(self.input.value, 10);
      if (!isNaN(v)) self.show(v + 1);
    });
    window.addEventListener("resize", function () { if (self.state !== undefined) self.draw(); });
    var details = this.table.closest("details");
    if (details) details.addEventListener("toggle", function () { if (details.open && self.tableStale) { self.tableStale = false; self.drawTable(self.segs); } });
    var firstPin = d.pins.filter(function (p) { return p.state === d.first; })[0];
    this.show(d.first, firstPin ? firstPin.label : "");
  }
  // The window holding state `s`, or -1.
  StateView.prototype.windowOf = function (s) {
    var ws = this.d.windows;
    for (var i = 0; i < ws.length; i++) if (ws[i].start <= s && s <= ws[i].end) return i;
    return -1;
  };
  // The held state nearest to `s`.
  StateView.prototype.nearest = function (s) {
    var best = null;
    this.d.windows.forEach(function (w) {
      var c = Math.min(w.end, Math.max(w.start, s));
      if (best === null || Math.abs(c - s) < Math.abs(best - s)) best = c;
    });
    return best === null ? 0 : best;
  };
  // The blocks at held state `s`: a Map from segment * 2^32 + offset to [size, state] (units).
  StateView.prototype.blocks = function (s) {
    var wi = this.windowOf(s), w = this.d.windows[wi], c = this.cache, from, m;
    if (c && c.w === wi && c.s <= s) { m = c.m; from = c.s; }
    else {
      m = new Map(); from = w.start;
      for (var i = 0; i < w.key.length; i += 4) m.set(w.key[i] * KEY + w.key[i + 1], [w.key[i + 2], w.key[i + 3]]);
    }
    for (var k = w.at[from - w.start]; k < w.at[s - w.start]; k += 4) {
      var key = w.d[k] * KEY + w.d[k + 1];
      if (w.d[k + 3] < 0) m.delete(key); else m.set(key, [w.d[k + 2], w.d[k + 3]]);
    }
    this.cache = { w: wi, s: s, m: m };
    return m;
  };
  // The segments at held state `s`, by address: [address, total, stream, small, expandable, [[offset, size, state]]] in bytes.
  StateView.prototype.segments = function (s) {
    var d = this.d, u = d.unit, by = {};
    this.blocks(s).forEach(function (v, key) {
      var seg = Math.floor(key / KEY), off = key - seg * KEY;
      (by[seg] = by[seg] || []).push([off * u, v[0] * u, v[1]]);
    });
    return Object.keys(by).map(function (k) {
      var sg = d.segs[k], bl = by[k].sort(function (a, b) { return a[0] - b[0]; }), total = 0;
      bl.forEach(function (b) { total += b[1]; });
      return [sg[0], total, sg[1], sg[2] === 1, sg[3] === 1, bl];
    }).sort(function (a, b) { return a[0] - b[0]; });
  };
  // Shows the state after `s` entries (the nearest held one where the page does not hold it).
  StateView.prototype.show = function (s, why) {
    s = Math.max(0, Math.min(this.d.entries, Math.round(s)));
    var asked = s;
    if (this.windowOf(s) < 0) s = this.nearest(s);
    this.state = s;
    this.asked = asked;
    this.why = why || "";
    this.input.value = Math.max(0, s - 1);
    this.fig.setAttribute("data-state", s);
    this.draw();
  };
  StateView.prototype.draw = function () {
    var self = this, s = this.state, segs = this.segments(s);
    this.segs = segs;
    var reserved = 0, allocated = 0, pending = 0, largest = 0, nblocks = 0;
    segs.forEach(function (g) {
      reserved += g[1];
      g[5].forEach(function (b) {
        nblocks++;
        if (b[2] === 1) allocated += b[1]; else if (b[2] === 2) pending += b[1]; else if (b[1] > largest) largest = b[1];
      });
    });
    var where = s === 0 ? "Before the first entry" : "After entry " + (s - 1).toLocaleString("en") + " of the " + this.d.entries.toLocaleString("en") + " entries";
    var note = "", was = "entry " + Math.max(0, this.asked - 1).toLocaleString("en");
    if (this.asked > this.d.last && s === this.d.last) note = " (" + was + " was never reached: the replay stopped at an out-of-memory)";
    else if (this.asked !== s) note = " (" + was + " is not held in this page; the nearest held is shown)";
    this.summary.textContent = where + (this.why ? " (" + this.why + ")" : "") + note + ": " + segs.length + " segment" + (segs.length === 1 ? "" : "s") +
      ", " + nblocks + " blocks \u00b7 reserved " + fmtBytes(reserved) + " \u00b7 allocated " + fmtBytes(allocated) +
      (pending ? " \u00b7 waiting on a stream " + fmtBytes(pending) : "") + " \u00b7 free (cached) " + fmtBytes(reserved - allocated - pending) +
      " \u00b7 largest free block " + fmtBytes(largest);
    this.readout.textContent = "Hover or tap a block for its place, size and state.";
    var box = this.map, W = Math.max(200, box.clientWidth), narrow = W < 500, L = narrow ? 70 : 150, R = 6, rowH = 14;
    var H = Math.max(rowH, segs.length * rowH) + 4, pw = W - L - R, maxSeg = 1;
    segs.forEach(function (g) { if (g[1] > maxSeg) maxSeg = g[1]; });
    while (box.firstChild) box.removeChild(box.firstChild);
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img", "aria-label": "segments after the entry" }, box);
    if (!segs.length) {
      el("text", { x: 4, y: 12, "font-size": 11, fill: "#555" }, svg).textContent = "No segments.";
    }
    segs.forEach(function (g, i) {
      var y = 2 + i * rowH;
      var label = fmtBytes(g[1]) + (narrow ? "" : " \u00b7 " + (g[3] ? "small" : "large") + " \u00b7 s" + g[2]);
      el("text", { x: L - 4, y: y + rowH - 3, "text-anchor": "end", "font-size": narrow ? 10 : 11, fill: "#333", "class": "st-seg" }, svg).textContent = label;
      g[5].forEach(function (b) {
        var x0 = L + b[0] / maxSeg * pw, w = Math.max(1, b[1] / maxSeg * pw);
        el("rect", { x: x0.toFixed(2), y: y + 1, width: w.toFixed(2), height: rowH - 2, fill: COLORS[b[2]], stroke: w >= 3 ? "#fff" : "none", "stroke-width": 0.5, "class": "st-block" }, svg);
      });
    });
    this.svg = svg; this.geom = { L: L, pw: pw, W: W, H: H, rowH: rowH, maxSeg: maxSeg };
    var pick = function (ev) { self.pick(ev.clientX, ev.clientY); };
    svg.addEventListener("pointermove", pick);
    svg.addEventListener("pointerdown", pick);
    // The table only when it is open (built on opening otherwise): stepping stays quick.
    var details = this.table.closest("details");
    if (!details || details.open) this.drawTable(segs);
    else this.tableStale = true;
  };
  // The block under a point of the map, in words.
  StateView.prototype.pick = function (cx, cy) {
    var r = this.svg.getBoundingClientRect(), g = this.geom;
    var px = (cx - r.left) * g.W / Math.max(1, r.width), py = (cy - r.top) * g.H / Math.max(1, r.height);
    var seg = this.segs[Math.floor((py - 2) / g.rowH)];
    if (!seg) return;
    var at = (px - g.L) / g.pw * g.maxSeg, blk = null;
    seg[5].forEach(function (b) { if (b[0] <= at && at < b[0] + b[1]) blk = b; });
    var head = "segment " + hex(seg[0]) + " (" + fmtBytes(seg[1]) + ", " + (seg[3] ? "small" : "large") + " pool, stream " + seg[2] +
      (seg[4] ? ", expandable" : "") + ", " + seg[5].length + " blocks)";
    this.readout.textContent = blk ? "block at " + hex(seg[0] + blk[0]) + " (offset " + fmtBytes(blk[0]) + "): " + fmtBytes(blk[1]) + ", " +
      NAMES[blk[2]] + " \u00b7 " + head : head;
    this.fig.setAttribute("data-picked", blk ? seg[0] + blk[0] : "");
  };
  StateView.prototype.drawTable = function (segs) {
    var t = document.createElement("table");
    t.className = "segments";
    t.innerHTML = "<thead><tr><th>Address</th><th>Pool</th><th class=\"num\">Stream</th><th class=\"num\">Size</th><th class=\"num\">Allocated</th>" +
      "<th class=\"num\">Free</th><th class=\"num\">Blocks allocated</th><th class=\"num\">Blocks free</th><th class=\"num\">Largest free block</th></tr></thead>";
    var body = document.createElement("tbody");
    segs.forEach(function (g) {
      var alloc = 0, free = 0, na = 0, nf = 0, lf = 0;
      g[5].forEach(function (b) { if (b[2] === 0) { free += b[1]; nf++; if (b[1] > lf) lf = b[1]; } else { if (b[2] === 1) alloc += b[1]; na++; } });
      var cells = [hex(g[0]), g[3] ? "small" : "large", g[2], fmtBytes(g[1]), fmtBytes(alloc), fmtBytes(free), na, nf, fmtBytes(lf)];
      var tr = document.createElement("tr");
      cells.forEach(function (v, i) {
        var td = document.createElement("td");
        if (i === 0) { var c = document.createElement("code"); c.textContent = v; td.appendChild(c); } else td.textContent = v;
        if (i >= 2) td.className = "num";
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    t.appendChild(body);
    while (this.table.firstChild) this.table.removeChild(this.table.firstChild);
    this.table.appendChild(t);
  };
  var fig = document.querySelector("figure[data-state-view]");
  if (fig) window.vramlabStateView = new StateView(fig);
})();
