  function fmtS(s) {
    if (s === null || s === undefined) return "–";
    var a = Math.abs(s);
    if (a === 0) return "0 s";
    if (a < 1e-3) return (s * 1e6).toPrecision(3) + " µs";
    if (a < 1) return (s * 1e3).toPrecision(3) + " ms";
    return s.toPrecision(4) + " s";
  }
  function fmtB(b) {
    if (b === null || b === undefined) return "–";
    var u = ["B", "kB", "MB", "GB", "TB"], i = 0;
    while (Math.abs(b) >= 1000 && i < u.length - 1) { b /= 1000; i++; }
    return i === 0 ? b.toFixed(0) + " B" : b.toFixed(2) + " " + u[i];
  }
  function fmtRate(r) { return r === null || r === undefined ? "–" : (r / 1e6).toPrecision(4) + " Mbit/s"; }
