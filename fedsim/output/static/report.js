
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("fedsim-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var W = 940, L = 80, R = 12, PW = W - L - R, ROW = 14, EXACT_MAX = D.exact_max;
  var full = [0, Math.max(D.t_end, 1e-9)], view = [full[0], full[1]];
  // the zoom's floor: a millionth of the run (tick labels still differ there)
  var FLOOR = Math.min(full[1] - full[0], Math.max((full[1] - full[0]) * 1e-6, 1e-9));
  var B = D.bars, n = B[0].length, A = D.agg, T = D.tiles;
  var WH = D.whats || [], PC = D.purpose_colours || {};
  function whatOf(j) { return B[9] && B[9][j] !== null && B[9][j] >= 0 ? WH[B[9][j]] : null; }
  // what a transfer carries: split learning's activations (up) and gradients (down), else a model
  function purpose(j) {
    var k = D.kinds[B[1][j]], w = whatOf(j);
    if (k !== "download" && k !== "upload") return null;
    if (w === null) return "model";
    var low = w.toLowerCase();
    if (low.indexOf("activ") >= 0 || low.indexOf("smash") >= 0 || low.indexOf("feature") >= 0) return "activations";
    if (low.indexOf("grad") >= 0) return "gradients";
    return w;
  }
  function barColour(j) { var p = purpose(j); return (p && PC[p]) || D.colours[B[1][j]]; }
  // the rows shown, top to bottom, as indices of the page's rows (0: the server); the per-client panel's
  // picker changes them (window.fedsimTimeline.setRows)
  var disp = [0], rowPos = {}, dataRow = {}, rowsDirty = true;
  for (var r0 = 1; r0 < D.rows.length && r0 <= (D.shown || 40); r0++) disp.push(r0);
  (D.clients || []).forEach(function (c, i) { dataRow[c] = i + 1; });
  function indexRows() { rowPos = {}; disp.forEach(function (d, i) { rowPos[d] = i; }); }
  indexRows();
  function rowOf(c) { var d = dataRow[c]; return d === undefined || rowPos[d] === undefined ? -1 : rowPos[d]; }
  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function sx(t) { return L + (t - view[0]) / (view[1] - view[0]) * PW; }
  //@format
  function ticks(a, b) {
    var span = b - a, step = Math.pow(10, Math.floor(Math.log10(span / 8)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= 8) { step *= m; return true; } return false; });
    var out = [], k0 = Math.ceil(a / step - 1e-9),
        dec = Math.max(0, Math.min(15, -Math.floor(Math.log10(step) + 1e-9)));  // the step's decimals
    for (var k = k0; k * step <= b + step * 1e-9; k++) out.push({t: k * step, label: String(+(k * step).toFixed(dec))});
    return out;
  }
  // the three charts: timeline (rows), queue, accuracy; one x axis (view) for all
  var tl = document.getElementById("fs-timeline"), qs = document.getElementById("fs-queue"),
      cs = document.getElementById("fs-curve"), tip = document.getElementById("fs-tip");
  var TH = disp.length * ROW + 34, CH = 120;
  [[tl, TH], [qs, CH], [cs, CH]].forEach(function (p) {
    p[0].setAttribute("width", W); p[0].setAttribute("height", p[1]);
    p[0].setAttribute("viewBox", "0 0 " + W + " " + p[1]);
    var clip = el("clipPath", {id: p[0].id + "-clip"}, el("defs", {}, p[0]));
    el("rect", {x: L, y: 0, width: PW, height: p[1]}, clip);
  });
  var rowsG = el("g", {id: "fs-rows"}, tl);
  function drawRows() {
    clear(rowsG);
    TH = disp.length * ROW + 34;
    tl.setAttribute("height", TH); tl.setAttribute("viewBox", "0 0 " + W + " " + TH);
    tl.querySelector("clipPath rect").setAttribute("height", TH);
    cursors[0].setAttribute("y2", TH);
    disp.forEach(function (d, i) {
      el("text", {x: L - 6, y: 4 + i * ROW + ROW / 2 + 3, "text-anchor": "end", "font-size": 10}, rowsG).textContent = D.rows[d];
      if (i % 2 === 0) el("rect", {x: L, y: 4 + i * ROW, width: PW, height: ROW, fill: "#f7f7f7"}, rowsG);
    });
    rowsDirty = false;
  }
  var legend = document.getElementById("fs-legend");
  function swatch(colour, label, mark) {
    var s = document.createElement("span"), sw = document.createElement("i");
    if (mark) { sw.textContent = mark; sw.style.color = colour; sw.style.fontStyle = "normal"; sw.style.width = "auto"; }
    else sw.style.background = colour;
    s.appendChild(sw); s.appendChild(document.createTextNode(label)); legend.appendChild(s);
  }
  D.kinds.forEach(function (k, i) { swatch(D.colours[i], k === "wait" ? "queue wait" : k); });
  var carried = {};
  for (var jj = 0; jj < n; jj++) { var pj = purpose(jj); if (pj && PC[pj]) carried[pj] = true; }
  ((A && A.payloads) || []).forEach(function (p) { carried[p] = true; });  // (also where no single bar is held)
  Object.keys(carried).sort().forEach(function (p) { swatch(PC[p], p + (p === "gradients" ? " (download)" : " (upload)")); });
  var RD = D.rounds || [], DR = D.drops || [];
  if (RD.length) { swatch("#556", "round start", "┆"); swatch("#c9a100", "round's straggler finishes", "▼"); }
  if (DR.length) swatch("#d62728", "dropped", "×");
  var barsG = el("g", {"clip-path": "url(#fs-timeline-clip)", id: "fs-bars"}, tl);
  var marksG = el("g", {"clip-path": "url(#fs-timeline-clip)", id: "fs-marks"}, tl);
  function clear(g) { while (g.firstChild) g.removeChild(g.firstChild); }
  // Where the page holds every bar (a tile kept whole) and the view has few enough of them, the bars are
  // drawn exactly, at their true width; everywhere else each pixel column shows the phase that fills most
  // of it (the aggregated levels, the PNG's rule): never a widened bar, never a silent gap.
  function tileExact(t) {
    if (!T || !(T.width > 0)) return false;
    var i = Math.floor(t / T.width);
    return i >= 0 && i < T.exact.length && T.exact.charAt(i) === "1";
  }
  function level(px) {
    var best = A.levels[0];
    A.levels.forEach(function (lv) { if (A.bin * lv.f <= px) best = lv; });
    return best;
  }
  // the server's busy share of each pixel column (the time-weighted mean of its bins' shares)
  var SD = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  function shareColumns(lv, px) {
    var s = lv.share || "", bw = A.bin * lv.f, out = new Array(PW);
    for (var x = 0; x < PW; x++) {
      var ta = view[0] + x * px - A.t0, tb = ta + px, ia = Math.max(0, Math.floor(ta / bw)),
          ib = Math.min(s.length - 1, Math.floor(tb / bw)), sum = 0;
      for (var k = ia; k <= ib; k++) {
        var o = Math.min(tb, (k + 1) * bw) - Math.max(ta, k * bw);
        if (o > 0) sum += o * SD.indexOf(s.charAt(k)) / (SD.length - 1);
      }
      out[x] = sum / px;
    }
    return out;
  }
  function aggColumns(row, lv, px) {
    var s = lv.rows[row], bw = A.bin * lv.f, out = new Array(PW);
    for (var x = 0; x < PW; x++) {
      var ta = view[0] + x * px - A.t0, tb = ta + px, ia = Math.max(0, Math.floor(ta / bw)),
          ib = Math.min(s.length - 1, Math.floor(tb / bw)), w = {}, best = ".", bestW = 0;
      for (var k = ia; k <= ib; k++) {
        var c = s.charAt(k), o = Math.min(tb, (k + 1) * bw) - Math.max(ta, k * bw);
        if (o <= 0) continue;
        w[c] = (w[c] || 0) + o;
        if (w[c] > bestW) { bestW = w[c]; best = c; }
      }
      out[x] = best;
    }
    return out;
  }
  var shownBars = 0, shownAgg = 0;
  function drawBars() {
    clear(barsG);
    var px = (view[1] - view[0]) / PW, inView = [], j, x;
    for (j = 0; j < n; j++) if (B[3][j] >= view[0] && B[2][j] <= view[1] && rowPos[B[0][j]] !== undefined) inView.push(j);
    var few = inView.length <= EXACT_MAX, exactCol = new Array(PW), anyExact = false;
    for (x = 0; x < PW; x++) {
      exactCol[x] = few && tileExact(view[0] + (x + 0.5) * px);
      anyExact = anyExact || exactCol[x];
    }
    shownAgg = 0;
    if (A) {
      var lv = level(px);
      // the server's row: a bar per pixel column as tall as its busy share (whole pixels, each column's
      // rounding carried to the next, so the drawn area is the utilisation); a client's: its dominant phase
      var sh = shareColumns(lv, px), H = ROW - 3, carry = 0, y0 = 4 + 1.5;
      for (x = 0; x < PW;) {
        var hx = exactCol[x] ? 0 : Math.floor(sh[x] * H + carry + 0.5);
        carry = exactCol[x] ? 0 : carry + sh[x] * H - hx;
        var x2 = x + 1, tot = sh[x];
        while (x2 < PW && !exactCol[x2] && !exactCol[x]) {
          var h2 = Math.floor(sh[x2] * H + carry + 0.5);
          if (h2 !== hx) break;
          carry += sh[x2] * H - h2; tot += sh[x2]; x2++;
        }
        if (hx > 0)
          el("rect", {"class": "fs-agg fs-share", x: L + x, y: y0 + H - hx, width: x2 - x, height: hx,
                      fill: D.colours[D.kinds.indexOf("server")], "data-r": 0, "data-share": (tot / (x2 - x)).toFixed(4),
                      "data-a": view[0] + x * px, "data-b": view[0] + x2 * px, "shape-rendering": "crispEdges"}, barsG);
        if (hx > 0) shownAgg++;
        x = x2;
      }
      for (var ri = 1; ri < disp.length; ri++) {
        var r = disp[ri], cols = aggColumns(r, lv, px);
        for (x = 0; x < PW;) {
          var c = exactCol[x] ? "." : cols[x], x1 = x + 1;
          while (x1 < PW && (exactCol[x1] ? "." : cols[x1]) === c) x1++;
          if (c !== ".") {
            el("rect", {"class": "fs-agg", x: L + x, y: 4 + ri * ROW + 1.5, width: x1 - x, height: ROW - 3,
                        fill: A.colours[+c], "data-r": r, "data-c": c, "data-a": view[0] + x * px,
                        "data-b": view[0] + x1 * px}, barsG);
            shownAgg++;
          }
          x = x1;
        }
      }
    }
    shownBars = 0;
    if (!anyExact && A) return;
    inView.forEach(function (j) {
      var x0 = sx(B[2][j]), x1 = sx(B[3][j]);
      var mid = Math.floor(((Math.max(x0, L) + Math.min(x1, L + PW)) / 2) - L);
      if (A && !exactCol[Math.max(0, Math.min(PW - 1, mid))] && !tileExact(B[2][j])) return;
      el("rect", {"class": "fs-bar", x: x0.toFixed(2), width: Math.max(0, x1 - x0).toFixed(2),
                  y: 4 + rowPos[B[0][j]] * ROW + 1.5, height: ROW - 3, fill: barColour(j), "data-i": j}, barsG);
      shownBars++;
    });
  }
  var tAxis = el("g", {}, tl), qAxis = el("g", {}, qs), cAxis = el("g", {}, cs);
  var qPath = el("path", {fill: "none", stroke: D.colours[4], "stroke-width": 1.2, "clip-path": "url(#fs-queue-clip)"}, qs);
  var cPath = el("path", {fill: "none", stroke: "#1f77b4", "stroke-width": 1.5, "clip-path": "url(#fs-curve-clip)"}, cs);
  var cDots = el("g", {"clip-path": "url(#fs-curve-clip)"}, cs);
  var cursors = [tl, qs, cs].map(function (svg) {
    return el("line", {y1: 0, y2: svg.getAttribute("height"), stroke: "#888", "stroke-dasharray": "3,3",
                       visibility: "hidden", "pointer-events": "none"}, svg);
  });
  var qMax = Math.max.apply(null, [1].concat(D.queue.q.filter(function (v) { return v !== null; })));
  var cy = D.curve.y.filter(function (v) { return v !== null; });
  var cMin = D.curve.measure === "accuracy" ? 0 : Math.min.apply(null, cy.concat([0])),
      cMax = D.curve.measure === "accuracy" ? 1 : Math.max.apply(null, cy.concat([1e-12]));
  function yq(v) { return CH - 22 - v / qMax * (CH - 34); }
  function yc(v) { return CH - 22 - (v - cMin) / (cMax - cMin) * (CH - 34); }
  function axis(g, h, label, yTicks, yOf, fmtY) {
    while (g.firstChild) g.removeChild(g.firstChild);
    el("line", {x1: L, x2: L + PW, y1: h - 22, y2: h - 22, stroke: "#333"}, g);
    ticks(view[0], view[1]).forEach(function (tk) {
      var x = sx(tk.t);
      el("line", {x1: x, x2: x, y1: h - 22, y2: h - 18, stroke: "#333"}, g);
      el("text", {x: x, y: h - 7, "text-anchor": "middle", "font-size": 10, "class": "fs-tick"}, g)
        .textContent = tk.label;
    });
    el("text", {x: L + PW, y: h - 24, "text-anchor": "end", "font-size": 10, fill: "#555"}, g).textContent = label;
    (yTicks || []).forEach(function (v) {
      el("text", {x: L - 6, y: yOf(v) + 3, "text-anchor": "end", "font-size": 10}, g).textContent = fmtY(v);
      el("line", {x1: L, x2: L + PW, y1: yOf(v), y2: yOf(v), stroke: "#eee"}, g);
    });
  }
  function stepPath(ts, vs, yOf, step) {
    var d = "", started = false, lo = view[0], hi = view[1];
    for (var i = 0; i < ts.length; i++) {
      if (ts[i] === null || vs[i] === null) continue;
      var next = i + 1 < ts.length ? ts[i + 1] : full[1];
      if (next < lo || ts[i] > hi) { if (ts[i] > hi) break; continue; }
      var x = Math.max(L - 2, Math.min(L + PW + 2, sx(ts[i]))), y = yOf(vs[i]);
      if (!started) { d += "M" + x.toFixed(1) + "," + y.toFixed(1); started = true; }
      else if (step) d += "V" + y.toFixed(1);
      else d += "L" + x.toFixed(1) + "," + y.toFixed(1);
      if (step) d += "H" + Math.max(L - 2, Math.min(L + PW + 2, sx(Math.min(next, full[1])))).toFixed(1);
    }
    return d;
  }
  // round structure: a dashed line where each round starts, the straggler's finish (▼ on its row, or the
  // server's when its row is not shown), drops (× where they happen)
  var shownMarks = 0;
  function roundTip(r) {
    return "round " + r.round + ": " + fmtS(r.start) + " → " + fmtS(r.end) + " (" + fmtS(r.end - r.start) + ")" +
      (r.straggler !== null ? "\nstraggler: client " + r.straggler + ", finished at " + fmtS(r.done) : "") +
      (r.dropped.length ? "\ndropped at the deadline: clients " + r.dropped.join(", ") : "");
  }
  function drawMarks() {
    clear(marksG);
    shownMarks = 0;
    var rs = RD.filter(function (r) { return r.start !== null && r.end !== null && r.end >= view[0] && r.start <= view[1]; });
    var lines = rs.length <= 400;  // (more: the rounds panel below shows them as bands)
    rs.forEach(function (r) {
      var tip = roundTip(r);
      if (lines && r.start >= view[0]) {
        var x = sx(r.start);
        el("line", {x1: x, x2: x, y1: 2, y2: TH - 22, stroke: "#556", "stroke-dasharray": "2,3", "pointer-events": "none"}, marksG);
        el("rect", {"class": "fs-round", x: x - 3, y: 0, width: 6, height: 4 + ROW, fill: "transparent", "data-tip": tip}, marksG);
        shownMarks++;
      }
      if (r.straggler !== null && r.done !== null && r.done >= view[0] && r.done <= view[1]) {
        var pos = Math.max(rowOf(r.straggler), 0), xs = sx(r.done), y = 4 + pos * ROW;
        el("path", {"class": "fs-straggler", d: "M" + (xs - 4) + "," + (y + 1) + "L" + (xs + 4) + "," + (y + 1) + "L" + xs +
                    "," + (y + ROW - 2) + "Z", fill: "#c9a100", stroke: "#5a4800", "stroke-width": 0.6, "data-tip": tip}, marksG);
        shownMarks++;
      }
    });
    DR.forEach(function (d) {
      if (d.t < view[0] || d.t > view[1]) return;
      var pos = d.client === null ? 0 : Math.max(rowOf(d.client), 0), x = sx(d.t), y = 4 + pos * ROW + ROW / 2;
      el("path", {d: "M" + (x - 4) + "," + (y - 4) + "L" + (x + 4) + "," + (y + 4) + "M" + (x + 4) + "," + (y - 4) + "L" +
                  (x - 4) + "," + (y + 4), stroke: "#d62728", "stroke-width": 2, "pointer-events": "none"}, marksG);
      el("rect", {"class": "fs-drop", x: x - 5, y: y - 5, width: 10, height: 10, fill: "transparent",
                  "data-tip": "client " + d.client + " dropped at " + fmtS(d.t) + (d.reason ? " (" + d.reason + ")" : "")}, marksG);
      shownMarks++;
    });
  }
  var pending = false;
  function render() {
    pending = false;
    if (rowsDirty) drawRows();
    drawBars();
    drawMarks();
    axis(tAxis, TH, "virtual time (s)");
    axis(qAxis, CH, "server queue, requests waiting" + (D.queue.note ? " (" + D.queue.note + ")" : ""),
         [0, qMax], yq, function (v) { return +v.toPrecision(3); });
    axis(cAxis, CH, "test " + D.curve.measure, [cMin, cMax], yc, function (v) { return +v.toPrecision(3); });
    qPath.setAttribute("d", stepPath(D.queue.t, D.queue.q, yq, true));
    cPath.setAttribute("d", stepPath(D.curve.t, D.curve.y, yc, false));
    while (cDots.firstChild) cDots.removeChild(cDots.firstChild);
    D.curve.t.forEach(function (t, i) {
      if (t === null || D.curve.y[i] === null || t < view[0] || t > view[1]) return;
      el("circle", {cx: sx(t), cy: yc(D.curve.y[i]), r: 2, fill: "#1f77b4"}, cDots);
    });
    document.getElementById("fs-range").textContent =
      "showing " + fmtS(view[0]) + " – " + fmtS(view[1]) + " of " + fmtS(full[1]);
    window.fedsimView = {start: view[0], end: view[1], bars: shownBars, aggregated: shownAgg, floor: FLOOR,
                         marks: shownMarks, rows: disp.slice(1).map(function (d) { return D.clients[d - 1]; })};
  }
  function schedule() { if (!pending) { pending = true; window.requestAnimationFrame(render); } }
  function setView(a, b) {
    var span = Math.max(b - a, FLOOR);
    span = Math.min(span, full[1] - full[0]);
    a = Math.max(full[0], Math.min(a, full[1] - span));
    view = [a, a + span];
    schedule();
  }
  function zoom(factor, centreT) {
    var c = centreT === undefined ? (view[0] + view[1]) / 2 : centreT;
    setView(c - (c - view[0]) * factor, c + (view[1] - c) * factor);
  }
  function tAt(svg, ev) {
    var box = svg.getBoundingClientRect();
    return view[0] + ((ev.clientX - box.left) * W / box.width - L) / PW * (view[1] - view[0]);
  }
  var drag = null;
  [tl, qs, cs].forEach(function (svg) {
    svg.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      zoom(Math.exp(ev.deltaY * 0.002), tAt(svg, ev));
    }, {passive: false});
    svg.addEventListener("mousedown", function (ev) {
      drag = {x: ev.clientX, view: view.slice(), w: svg.getBoundingClientRect().width};
      svg.classList.add("drag");
    });
    svg.addEventListener("dblclick", function () { setView(full[0], full[1]); });
    svg.addEventListener("mousemove", function (ev) {
      var box = svg.getBoundingClientRect(), x = (ev.clientX - box.left) * W / box.width;
      cursors.forEach(function (c) {
        c.setAttribute("x1", x); c.setAttribute("x2", x);
        c.setAttribute("visibility", x >= L && x <= L + PW ? "visible" : "hidden");
      });
    });
    svg.addEventListener("mouseleave", function () {
      cursors.forEach(function (c) { c.setAttribute("visibility", "hidden"); });
    });
  });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) return;
    var dt = -(ev.clientX - drag.x) * W / drag.w / PW * (drag.view[1] - drag.view[0]);
    setView(drag.view[0] + dt, drag.view[1] + dt);
  });
  window.addEventListener("mouseup", function () {
    drag = null;
    [tl, qs, cs].forEach(function (svg) { svg.classList.remove("drag"); });
  });
  var wrap = document.getElementById("fs-wrap");
  function placeTip(ev) {  // beside the pointer, flipped to stay inside the window
    var box = wrap.getBoundingClientRect(), vw = document.documentElement.clientWidth || window.innerWidth,
        vh = window.innerHeight, w = tip.offsetWidth, h = tip.offsetHeight;
    var x = ev.clientX + 12, y = ev.clientY + 12;
    if (x + w > vw - 4) x = ev.clientX - 12 - w;
    if (y + h > vh - 4) y = ev.clientY - 12 - h;
    tip.style.left = (Math.max(4, x) - box.left) + "px";
    tip.style.top = (Math.max(4, y) - box.top) + "px";
  }
  function kindName(k) { return k === "wait" ? "queue wait at the server" : k; }
  barsG.addEventListener("mouseover", function (ev) {
    var t = ev.target, i = t.getAttribute && t.getAttribute("data-i");
    if (t.getAttribute && t.getAttribute("data-share") !== null) {
      tip.textContent = "server: busy " + (100 * +t.getAttribute("data-share")).toFixed(1) + "% of " +
        fmtS(+t.getAttribute("data-a")) + " → " + fmtS(+t.getAttribute("data-b")) +
        "\nthe server's bar is as tall as the share of each pixel column's time its workers were busy\n" +
        "(its mean over the run is the utilisation); zoom in to see single requests";
      tip.style.display = "block";
      placeTip(ev);
      return;
    }
    if (t.getAttribute && t.getAttribute("data-c") !== null) {
      tip.textContent = D.rows[+t.getAttribute("data-r")] + ": mostly " + kindName(A.kinds[+t.getAttribute("data-c")]) +
        "\n" + fmtS(+t.getAttribute("data-a")) + " → " + fmtS(+t.getAttribute("data-b")) +
        "\neach pixel column shows the phase that fills most of it;\nzoom in to see single intervals";
      tip.style.display = "block";
      placeTip(ev);
      return;
    }
    if (i === null || i === undefined) return;
    i = +i;
    var kind = D.kinds[B[1][i]], lines = [];
    lines.push((B[0][i] === 0 ? (B[4][i] === null ? "server, a request of no single client (e.g. an aggregation)"
                                 : "server, request of client " + B[4][i]) : "client " + B[4][i]) + ": " +
               (kind === "wait" ? "queue wait at the server" : kind));
    lines.push(fmtS(B[2][i]) + " → " + fmtS(B[3][i]) + "  (" + fmtS(B[3][i] - B[2][i]) + ")");
    if (kind === "download" || kind === "upload") {
      lines.push("bytes " + fmtB(B[5][i]) + ", link rate " + fmtRate(B[6][i]));
      // the bar's length: the link's latency, any wait for a shared medium, and the airtime (bits / rate)
      var dur = B[3][i] - B[2][i], air = B[6][i] > 0 && B[5][i] !== null ? B[5][i] * 8 / B[6][i] : null,
          qw = B[7][i] || 0;
      if (air !== null)
        lines.push("link latency " + fmtS(Math.max(dur - qw - air, 0)) + " + " + (qw > 0 ? "wait " + fmtS(qw) + " + " : "") +
                   "airtime " + fmtS(air) + " = " + fmtS(dur));
      else if (dur <= 0) lines.push("0 s: an ideal link (no latency, no airtime)");
    }
    var w = whatOf(i), p = purpose(i);
    if (p !== null) lines.push("carries " + p + (w !== null && w !== p ? " (the trace's what: " + w + ")" : ""));
    else if (kind === "server" || kind === "wait") lines.push("request: " + (w === null ? "not named in the trace" : w));
    else if (w !== null) lines.push("what: " + w);
    if (kind === "server" && B[7][i] !== null) lines.push("waited " + fmtS(B[7][i]) + " in the queue");
    if (kind !== "offline" && kind !== "server" && kind !== "wait")
      lines.push("staleness of the update " + (B[8][i] === null ? "– (not applied)" : B[8][i] + " versions"));
    tip.textContent = lines.join("\n");
    tip.style.display = "block";
    placeTip(ev);
  });
  barsG.addEventListener("mousemove", placeTip);
  barsG.addEventListener("mouseout", function () { tip.style.display = "none"; });
  marksG.addEventListener("mouseover", function (ev) {
    var text = ev.target.getAttribute && ev.target.getAttribute("data-tip");
    if (!text) return;
    tip.textContent = text;
    tip.style.display = "block";
    placeTip(ev);
  });
  marksG.addEventListener("mousemove", placeTip);
  marksG.addEventListener("mouseout", function () { tip.style.display = "none"; });
  window.fedsimTimeline = {
    // show these clients' rows (those the page holds), in this order, under the server's
    setRows: function (ids) {
      var next = [0];
      ids.forEach(function (c) { var d = dataRow[c]; if (d !== undefined && next.indexOf(d) < 0) next.push(d); });
      disp = next; indexRows(); rowsDirty = true; schedule();
      return disp.slice(1).map(function (d) { return D.clients[d - 1]; });
    }
  };
  document.getElementById("fs-in").addEventListener("click", function () { zoom(0.5); });
  document.getElementById("fs-out").addEventListener("click", function () { zoom(2); });
  document.getElementById("fs-reset").addEventListener("click", function () { setView(full[0], full[1]); });
  render();
})();
