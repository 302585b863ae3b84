
(function () {
  "use strict";
  var P = JSON.parse(document.getElementById("fedsim-panels").textContent);
  var NS = "http://www.w3.org/2000/svg", W = 940, L = 80, R = 12, PW = W - L - R;
  var full = [0, Math.max(P.t_end, 1e-9)], view = full.slice();
  var tip = document.getElementById("fp-tip"), wrap = document.getElementById("fp-wrap");
  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function clear(n) { while (n.firstChild) n.removeChild(n.firstChild); }
  //@format
  function pct(v) { return (100 * v).toFixed(1) + "%"; }
  function hover(node, text) { node.setAttribute("class", (node.getAttribute("class") || "") + " fp-hit");
                               node.fpTip = text; }
  wrap.addEventListener("mouseover", function (ev) {
    var t = ev.target && ev.target.fpTip;
    if (!t) return;
    tip.textContent = typeof t === "function" ? t(ev) : t;
    tip.style.display = "block";
  });
  wrap.addEventListener("mousemove", function (ev) {
    if (tip.style.display !== "block") return;
    var box = wrap.getBoundingClientRect(), x = ev.clientX - box.left + 12;
    x = Math.min(x, Math.max(0, box.width - tip.offsetWidth - 4));
    tip.style.left = x + "px";
    tip.style.top = (ev.clientY - box.top + 14) + "px";
  });
  wrap.addEventListener("mouseout", function (ev) { if (ev.target && ev.target.fpTip) tip.style.display = "none"; });
  function sx(t) { return L + (t - view[0]) / (view[1] - view[0]) * PW; }
  function ticks(a, b) {
    var span = b - a, step = Math.pow(10, Math.floor(Math.log10(span / 8)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= 8) { step *= m; return true; } return false; });
    var out = [], t = Math.ceil(a / step) * step;
    for (; t <= b + step * 1e-9; t += step) out.push(t);
    return out;
  }
  function frame(svg, h, label) {
    svg.setAttribute("width", W); svg.setAttribute("height", h); svg.setAttribute("viewBox", "0 0 " + W + " " + h);
    clear(svg);
    var clip = el("clipPath", {id: svg.id + "-clip"}, el("defs", {}, svg));
    el("rect", {x: L, y: 0, width: PW, height: h}, clip);
    el("line", {x1: L, x2: L + PW, y1: h - 22, y2: h - 22, stroke: "#333"}, svg);
    ticks(view[0], view[1]).forEach(function (t) {
      var x = sx(t);
      el("line", {x1: x, x2: x, y1: h - 22, y2: h - 18, stroke: "#333"}, svg);
      el("text", {x: x, y: h - 7, "text-anchor": "middle", "font-size": 10}, svg).textContent = +t.toPrecision(6);
    });
    el("text", {x: L + PW, y: 10, "text-anchor": "end", "font-size": 10, fill: "#555"}, svg).textContent = label;
    return el("g", {"clip-path": "url(#" + svg.id + "-clip)"}, svg);
  }
  function yAxis(svg, lo, hi, yOf, fmt) {
    [lo, hi].forEach(function (v) {
      el("text", {x: L - 6, y: yOf(v) + 3, "text-anchor": "end", "font-size": 10}, svg).textContent = fmt(v);
      el("line", {x1: L, x2: L + PW, y1: yOf(v), y2: yOf(v), stroke: "#eee"}, svg);
    });
  }
  // the rounds, for any view that marks their boundaries (the timeline)
  window.fedsimPanels = {drawn: {}, rounds: P.rounds};

  // ------------------------------------------------------------------ per-client breakdown
  var C = P.clients, nC = C.id.length, K = P.keys.length;
  var legend = document.getElementById("fp-legend");
  P.labels.forEach(function (lab, k) {
    var s = document.createElement("span"), sw = document.createElement("i");
    sw.style.background = P.colours[k]; s.appendChild(sw); s.appendChild(document.createTextNode(lab));
    legend.appendChild(s);
  });
  function parsePick(text) {
    var out = [];
    text.split(",").forEach(function (part) {
      var m = part.trim().match(/^(\d+)\s*(?:-\s*(\d+))?$/);
      if (!m) return;
      var a = +m[1], b = m[2] === undefined ? a : +m[2];
      for (var c = a; c <= b && out.length < 5000; c++) out.push(c);
    });
    return out;
  }
  function drawBreakdown() {
    var sel = document.getElementById("fp-sort").value, n = Math.max(1, +document.getElementById("fp-count").value || 40);
    var pick = parsePick(document.getElementById("fp-pick").value), pos = {};
    C.id.forEach(function (c, i) { pos[c] = i; });
    var idx;
    if (pick.length) idx = pick.filter(function (c) { return c in pos; }).map(function (c) { return pos[c]; });
    else {
      idx = C.id.map(function (_, i) { return i; });
      var key = {slowest: function (i) { return C.per_task[i] === null ? -1 : C.per_task[i]; },
                 stale: function (i) { return C.stale[i] === null ? -1 : C.stale[i]; },
                 drops: function (i) { return C.drops[i]; },
                 round_wait: function (i) { return C.parts[P.keys.indexOf("round_wait")][i]; },
                 idle: function (i) { return C.parts[P.keys.indexOf("idle")][i]; }}[sel];
      if (key) idx.sort(function (a, b) { return key(b) - key(a) || C.id[a] - C.id[b]; });
      idx = idx.slice(0, n);
    }
    var ROW = 14, h = idx.length * ROW + 30, svg = document.getElementById("fp-breakdown");
    svg.setAttribute("width", W); svg.setAttribute("height", h); svg.setAttribute("viewBox", "0 0 " + W + " " + h);
    clear(svg);
    var T = P.t_end, g = el("g", {id: "fp-segs"}, svg);
    idx.forEach(function (i, r) {
      var y = 4 + r * ROW, x = L, c = C.id[i];
      el("text", {x: L - 6, y: y + ROW / 2 + 3, "text-anchor": "end", "font-size": 10}, svg).textContent = "client " + c;
      for (var k = 0; k < K; k++) {
        var v = C.parts[k][i] || 0, w = v / T * PW;
        if (v <= 0) continue;
        var seg = el("rect", {"class": "fp-seg", x: x.toFixed(2), y: y + 1.5, width: Math.max(w, 0.5).toFixed(2),
                              height: ROW - 3, fill: P.colours[k], "data-client": c, "data-part": P.keys[k]}, g);
        if (P.keys[k] === "idle") seg.setAttribute("stroke", "#ccc");
        hover(seg, "client " + c + ": " + P.labels[k] + "\n" + fmtS(v) + " = " + pct(v / T) + " of the run (" +
              fmtS(T) + ")\n" + C.tasks[i] + " tasks" + (C.per_task[i] !== null ? ", " + fmtS(C.per_task[i]) +
              " per task (download + compute + upload)" : "") + "\n" + C.updates[i] + " updates applied" +
              (C.stale[i] !== null ? ", mean staleness " + C.stale[i] : "") + ", " + C.drops[i] + " dropped");
        x += w;
      }
    });
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
      var x = L + f * PW;
      el("line", {x1: x, x2: x, y1: h - 24, y2: h - 20, stroke: "#333"}, svg);
      el("text", {x: x, y: h - 8, "text-anchor": "middle", "font-size": 10}, svg).textContent = (100 * f) + "%";
    });
    el("text", {x: L + PW, y: h - 24, "text-anchor": "end", "font-size": 10, fill: "#555"}, svg).textContent =
      "share of the run's " + fmtS(T) + " of virtual time";
    document.getElementById("fp-shown").textContent = idx.length + " of " + nC + " clients";
    window.fedsimPanels.drawn.breakdown = idx.map(function (i) { return C.id[i]; });
    // the same clients, in the same order, are the interactive timeline's rows
    if (window.fedsimTimeline) window.fedsimPanels.drawn.timeline = window.fedsimTimeline.setRows(window.fedsimPanels.drawn.breakdown);
  }
  ["fp-sort", "fp-count", "fp-pick"].forEach(function (id) {
    document.getElementById(id).addEventListener("input", drawBreakdown);
    document.getElementById(id).addEventListener("change", drawBreakdown);
  });
  if (nC) drawBreakdown();

  // ------------------------------------------------------------------ server
  var S = P.server;
  function drawServer() {
    var svg = document.getElementById("fp-server");
    if (!S) { svg.style.display = "none"; return; }
    var H = 150, g = frame(svg, H, "server: utilisation (shaded, per bin) and requests waiting (line)");
    var qv = S.queue.q.concat(S.queue.peak || []).filter(function (v) { return v !== null; });
    var qMax = Math.max.apply(null, [1].concat(qv));
    function yu(v) { return H - 22 - v * (H - 34); }
    function yq(v) { return H - 22 - v / qMax * (H - 34); }
    yAxis(svg, 0, 1, yu, function (v) { return (100 * v) + "%"; });
    el("text", {x: L + PW - 2, y: yq(qMax) + 12, "text-anchor": "end", "font-size": 10, fill: "#b07aa1"},
       svg).textContent = "queue max " + +qMax.toPrecision(3);
    for (var i = 0; i < S.util.length; i++) {
      var a = S.bins[i], b = S.bins[i + 1];
      if (b < view[0] || a > view[1]) continue;
      var x0 = sx(a), x1 = sx(b), u = S.util[i] || 0;
      var r = el("rect", {x: x0.toFixed(2), y: yu(Math.min(u, 1)).toFixed(2), width: Math.max(x1 - x0, 0.5).toFixed(2),
                          height: (H - 22 - yu(Math.min(u, 1))).toFixed(2), fill: "#d9c3d4"}, g);
      hover(r, "server " + fmtS(a) + " – " + fmtS(b) + "\nutilisation " + pct(u));
    }
    var d = "", T = S.queue.t, Q = S.queue.q;
    for (i = 0; i < T.length; i++) {
      var next = i + 1 < T.length ? T[i + 1] : full[1];
      if (next < view[0]) continue;
      if (T[i] > view[1]) break;
      var x = Math.max(L - 2, sx(T[i])), y = yq(Q[i]);
      d += (d ? "V" : "M" + x.toFixed(1) + ",") + y.toFixed(1) + "H" + Math.min(L + PW + 2, sx(next)).toFixed(1);
    }
    el("path", {d: d, fill: "none", stroke: "#7b3f72", "stroke-width": 1.3, id: "fp-queue-line"}, g);
    var st = document.getElementById("fp-server-stats"), Rp = S.reported || {};
    var u = Rp.utilisation !== undefined ? Rp.utilisation : S.utilisation;
    var differs = Math.abs(u - S.utilisation) > 5e-4;
    st.textContent = "utilisation " + pct(u) + " (" + S.workers + " worker" + (S.workers > 1 ? "s" : "") +
      (differs ? "; " + pct(S.utilisation) + " counting only the requests finished by the end, as drawn" : "") +
      "), " + S.requests + " finished requests; queue wait mean " + fmtS(S.mean_wait) + ", peak " + fmtS(S.peak_wait) +
      "; queue length mean " + S.mean_queue.toPrecision(3) + ", peak " + S.peak_queue + "; requests by kind: " +
      Object.keys(S.what).map(function (k) { return k + " " + S.what[k]; }).join(", ");
    window.fedsimPanels.drawn.server = S.util.length;
  }

  // ------------------------------------------------------------------ rounds and drops
  var RD = P.rounds;
  function drawRounds() {
    var svg = document.getElementById("fp-rounds");
    var rs = RD.rounds, dr = RD.drops;
    if (!rs.length && !dr.length) {
      svg.style.display = "none";
      document.getElementById("fp-rounds-stats").textContent = "No synchronous rounds and no drops in this run.";
      return;
    }
    var H = 86, g = frame(svg, H, "rounds (bands, straggler's finish ▼) and drops (red ×)");
    rs.forEach(function (r, i) {
      if (r.end < view[0] || r.start > view[1]) return;
      var x0 = sx(r.start), x1 = sx(r.end);
      var band = el("rect", {x: x0.toFixed(2), y: 16, width: Math.max(x1 - x0, 1).toFixed(2), height: 30,
                             fill: i % 2 ? "#e8eef7" : "#cddaf0", stroke: "#fff", "class": "fp-round"}, g);
      hover(band, "round " + r.round + ": " + fmtS(r.start) + " → " + fmtS(r.end) + " (" + fmtS(r.end - r.start) +
            ")\n" + r.clients + " clients selected" + (r.straggler !== null ? "\nstraggler: client " + r.straggler +
            ", finished at " + fmtS(r.straggler_done) : "") + (r.dropped.length ? "\ndropped at the deadline: clients " +
            r.dropped.join(", ") : ""));
      if (r.straggler_done !== null && r.straggler !== null) {
        var xs = sx(r.straggler_done);
        var m = el("path", {d: "M" + (xs - 4) + ",8L" + (xs + 4) + ",8L" + xs + ",16Z", fill: "#c9a100",
                            "class": "fp-straggler"}, g);
        hover(m, "round " + r.round + " straggler: client " + r.straggler + " finished at " + fmtS(r.straggler_done));
      }
    });
    dr.forEach(function (d) {
      if (d.t < view[0] || d.t > view[1]) return;
      var x = sx(d.t), m = el("path", {d: "M" + (x - 4) + ",50L" + (x + 4) + ",58M" + (x + 4) + ",50L" + (x - 4) + ",58",
                                       stroke: "#d62728", "stroke-width": 2, "class": "fp-drop"}, g);
      var hit = el("rect", {x: x - 5, y: 48, width: 10, height: 12, fill: "transparent"}, g);
      hover(hit, "client " + d.client + " dropped at " + fmtS(d.t) + (d.reason ? " (" + d.reason + ")" : "") +
            (d.round !== null && d.round !== undefined ? ", round " + d.round : ""));
    });
    var nd = rs.reduce(function (a, r) { return a + r.dropped.length; }, 0);
    var counts = {};
    rs.forEach(function (r) { if (r.straggler !== null) counts[r.straggler] = (counts[r.straggler] || 0) + 1; });
    var most = Object.keys(counts).sort(function (a, b) { return counts[b] - counts[a]; }).slice(0, 3);
    document.getElementById("fp-rounds-stats").textContent = rs.length + " synchronous rounds, " + dr.length +
      " drops" + (nd ? " (" + nd + " at round deadlines)" : "") + (most.length ? "; most often the straggler: " +
      most.map(function (c) { return "client " + c + " (" + counts[c] + " rounds)"; }).join(", ") : "");
    window.fedsimPanels.drawn.rounds = rs.length + dr.length;
  }

  // ------------------------------------------------------------------ staleness
  var ST = P.staleness;
  function drawStaleHist() {
    var svg = document.getElementById("fp-stale-hist");
    if (!ST) {
      svg.style.display = "none"; document.getElementById("fp-stale-time").style.display = "none";
      document.getElementById("fp-stale-stats").insertAdjacentText("afterbegin", "No applied updates in this run.");
      return;
    }
    var H = 150, h = ST.hist, nB = h.n.length, top = Math.max.apply(null, [1].concat(h.n));
    svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    clear(svg);
    var lo = h.lo[0], hi = Math.max(h.hi[nB - 1], h.integer ? lo + 12 : h.hi[nB - 1]);
    function x(v) { return L + (v - lo) / Math.max(hi - lo, 1e-12) * PW; }
    function y(v) { return H - 22 - v / top * (H - 34); }
    yAxis(svg, 0, top, y, function (v) { return v; });
    for (var i = 0; i < nB; i++) {
      var r = el("rect", {x: x(h.lo[i]) + 1, y: y(h.n[i]), width: Math.max(1, x(h.hi[i]) - x(h.lo[i]) - 2),
                          height: H - 22 - y(h.n[i]), fill: "#4e79a7", "class": "fp-hbar"}, svg);
      hover(r, (h.integer ? "staleness " + h.lo[i] + " versions" : "staleness " + h.lo[i] + " – " + h.hi[i]) +
            "\n" + h.n[i] + " updates (" + pct(h.n[i] / ST.updates) + ")");
      if (h.integer && nB <= 30)
        el("text", {x: (x(h.lo[i]) + x(h.hi[i])) / 2, y: H - 8, "text-anchor": "middle", "font-size": 10}, svg).textContent = h.lo[i];
    }
    el("line", {x1: L, x2: L + PW, y1: H - 22, y2: H - 22, stroke: "#333"}, svg);
    el("text", {x: L + PW, y: 10, "text-anchor": "end", "font-size": 10, fill: "#555"}, svg).textContent =
      "staleness histogram (versions): " + ST.updates + " applied updates, mean " + ST.mean.toPrecision(3) +
      ", max " + ST.max;
    window.fedsimPanels.drawn.staleHist = nB;
  }
  function drawStaleTime() {
    if (!ST) return;
    var svg = document.getElementById("fp-stale-time"), H = 130, s = ST.series;
    var top = Math.max.apply(null, [1].concat((s.max || s.s).filter(function (v) { return v !== null; })));
    var g = frame(svg, H, "staleness of each applied update over virtual time" + (s.binned ? " (mean per bin, max light)" : ""));
    function y(v) { return H - 22 - v / top * (H - 34); }
    yAxis(svg, 0, top, y, function (v) { return +v.toPrecision(3); });
    var n = 0;
    for (var i = 0; i < s.t.length; i++) {
      if (s.t[i] < view[0] || s.t[i] > view[1]) continue;
      if (s.binned) el("line", {x1: sx(s.t[i]), x2: sx(s.t[i]), y1: y(0), y2: y(s.max[i]), stroke: "#c6d4e6"}, g);
      var dot = el("circle", {cx: sx(s.t[i]).toFixed(1), cy: y(s.s[i]).toFixed(1), r: 2.2, fill: "#4e79a7", "class": "fp-sdot"}, g);
      hover(dot, "update applied at " + fmtS(s.t[i]) + "\nstaleness " + s.s[i] + (s.binned ? " (bin mean), max " + s.max[i] : ""));
      n++;
    }
    window.fedsimPanels.drawn.staleTime = n;
  }

  // ------------------------------------------------------------------ traffic by purpose
  function drawTraffic() {
    var svg = document.getElementById("fp-traffic"), rows = P.traffic;
    if (!rows.length) { svg.style.display = "none"; return; }
    var ROW = 18, H = rows.length * ROW + 30, top = 0;
    rows.forEach(function (r) { top = Math.max(top, r.seconds); });
    svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    clear(svg);
    rows.forEach(function (r, i) {
      var y = 4 + i * ROW, w = top > 0 ? r.seconds / top * (PW - 220) : 0, col = r.colour || P.purpose_colours[r.purpose];
      el("text", {x: L + 50, y: y + ROW / 2 + 3, "text-anchor": "end", "font-size": 10}, svg).textContent = r.direction;
      var bar = el("rect", {x: L + 56, y: y + 2, width: Math.max(w, 1).toFixed(1), height: ROW - 4, fill: col,
                            "class": "fp-traffic-bar", "data-purpose": r.purpose}, svg);
      el("text", {x: L + 60 + w, y: y + ROW / 2 + 3, "font-size": 10}, svg).textContent =
        r.purpose + ": " + r.count + "×, " + fmtS(r.seconds) + (r.bytes > 0 ? ", " + fmtB(r.bytes) : "");
      hover(bar, r.direction + " — " + r.purpose + "\n" + r.count + " records, " + fmtS(r.seconds) + " in all" +
            (r.bytes > 0 ? "\n" + fmtB(r.bytes) + " moved" : ""));
    });
    el("text", {x: L + PW, y: H - 6, "text-anchor": "end", "font-size": 10, fill: "#555"}, svg).textContent =
      "bar length: summed time (all clients)";
    window.fedsimPanels.drawn.traffic = rows.length;
  }

  function drawTime() { drawServer(); drawRounds(); drawStaleTime(); window.fedsimPanels.view = view.slice(); }
  drawStaleHist(); drawTraffic(); drawTime();
  // follow the interactive timeline's view (it publishes window.fedsimView on every render)
  var held = window.fedsimView, pending = false;
  function follow(v) {
    if (v && isFinite(v.start) && isFinite(v.end) && v.end > v.start) {
      view = [v.start, v.end];
      if (!pending) { pending = true; requestAnimationFrame(function () { pending = false; drawTime(); }); }
    }
  }
  try {
    Object.defineProperty(window, "fedsimView", {configurable: true, get: function () { return held; },
                                                  set: function (v) { held = v; follow(v); }});
  } catch (e) { /* another script owns it: the panels keep the whole run */ }
  follow(held);
})();
