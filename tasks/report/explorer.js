// The decision explorer of the HTML report (tasks/report/explorer.py wrote its data): each control snaps to the
// values of a grid of `tradeoff recommend` settings, every one decided by the command's own code when the report
// was written. Moving a control only looks its setting up; no rule of the decision is computed here. A setting can
// be linked: #ttft_ms=1000&percentile=90&gate=m1 (control keys and the values' keys), read on load.
(function () {
  const data = JSON.parse(document.getElementById("explorer-data").textContent);
  const root = document.getElementById("explorer");
  const S = data.strings;
  const SVG = "http://www.w3.org/2000/svg";
  const COLOURS = {
    recommended: "#2ca02c",
    passes: "#1f77b4",
    fails_gate: "#d62728",
    not_enough_evidence: "#ff7f0e",
    not_ranked: "#7f7f7f",
  };
  // a row of a point: variant, verdict, reason, requests the SLO claim needs, speed and its interval, quality and its
  const [VARIANT, VERDICT, REASON, NEEDED, X, XLO, XHI, Y, YLO, YHI] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => e.setAttribute(k, v));
    e.append(...kids);
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    Object.entries(attrs).forEach(([k, v]) => e.setAttribute(k, v));
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const num = (x) => (x === null ? "\u2014" : String(Number(x.toPrecision(3))));

  const selects = data.controls.map((c) => {
    const s = el("select", { id: "explorer-" + c.key, "aria-label": c.label });
    c.labels.forEach((label, i) => s.append(new Option(label, c.keys[i])));
    s.selectedIndex = c.default;
    return s;
  });
  const pick = el("p", { id: "explorer-pick" });
  const flags = el("code", { id: "explorer-flags" });
  const plot = el("div", { class: "fig" });
  const table = el("table", { id: "explorer-verdicts", class: "people" });
  root.append(
    el("div", { class: "explorer-controls" }, ...data.controls.map((c, k) => el("label", {}, c.label + " ", selects[k]))),
    pick,
    el("p", { class: "note" }, "the same as ", flags),
    el("div", { class: "explorer-body" }, plot, el("div", { class: "scroll" }, table)),
  );

  // the axes hold still while the settings move: each spans every setting's points of its kind
  const domains = {};
  data.points.forEach((p) => {
    const d = (domains[p.basis] = domains[p.basis] || { x: [0, 0], y: [p.target, p.target] });
    p.rows.forEach((r) => {
      if (r[X] === null || r[Y] === null) return;
      d.x[1] = Math.max(d.x[1], r[XHI] ?? r[X]);
      d.y[0] = Math.min(d.y[0], r[YLO] ?? r[Y]);
      d.y[1] = Math.max(d.y[1], r[YHI] ?? r[Y]);
    });
  });

  // about four round steps (1, 2 or 5 x 10^k) from lo to hi
  function ticks(lo, hi) {
    const rough = (hi - lo) / 4;
    const unit = 10 ** Math.floor(Math.log10(rough));
    const step = [1, 2, 5, 10].map((m) => m * unit).find((s) => s >= rough);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(Number(v.toPrecision(6)));
    return out;
  }

  function current() {
    return data.points[selects.reduce((i, s) => i * s.options.length + s.selectedIndex, 0)];
  }

  function frontierPlot(p) {
    const W = 560, H = 340, L = 56, R = 16, T = 14, B = 44;
    const d = domains[p.basis];
    const pad = (d.y[1] - d.y[0]) * 0.08 || 1;
    const [y0, y1] = [d.y[0] - pad, d.y[1] + pad];
    const x1 = d.x[1] * 1.08 || 1;
    const sx = (x) => L + (x / x1) * (W - L - R);
    const sy = (y) => T + ((y1 - y) / (y1 - y0)) * (H - T - B);
    const g = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "font-size": 11 });
    g.append(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#ccc" }));
    ticks(0, x1).forEach((v) => g.append(svg("text", { x: sx(v), y: H - B + 14, "text-anchor": "middle" }, num(v))));
    ticks(y0, y1).forEach((v) => g.append(svg("text", { x: L - 4, y: sy(v) + 4, "text-anchor": "end" }, num(v))));
    g.append(svg("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle" }, "output tokens/s at the sustainable load"));
    const yTitle = p.basis === "points" ? "change against the reference (points)" : "retention of the reference (%)";
    g.append(svg("text", { x: 12, y: (T + H - B) / 2, transform: `rotate(-90 12 ${(T + H - B) / 2})`, "text-anchor": "middle" }, yTitle));
    const target = p.basis === "points" ? `margin: ${num(p.target)} points` : `target ${num(p.target)} %`;
    g.append(svg("line", { x1: L, x2: W - R, y1: sy(p.target), y2: sy(p.target), stroke: "#d62728", "stroke-dasharray": "5 4" }));
    g.append(svg("text", { x: W - R - 4, y: sy(p.target) - 4, "text-anchor": "end", fill: "#d62728" }, target));
    const shown = p.rows.filter((r) => r[X] !== null && r[Y] !== null);
    // the frontier: no other point is at least as fast and as good, and better in one
    const front = shown
      .filter((r) => !shown.some((o) => o[X] >= r[X] && o[Y] >= r[Y] && (o[X] > r[X] || o[Y] > r[Y])))
      .sort((a, b) => a[X] - b[X]);
    g.append(svg("polyline", { points: front.map((r) => `${sx(r[X])},${sy(r[Y])}`).join(" "), fill: "none", stroke: "#1f77b4", "stroke-opacity": 0.5 }));
    shown.forEach((r) => {
      const colour = COLOURS[S[r[VERDICT]]] || "#7f7f7f";
      const [cx, cy] = [sx(r[X]), sy(r[Y])];
      if (r[XLO] !== null && r[XHI] !== null) g.append(svg("line", { x1: sx(r[XLO]), x2: sx(r[XHI]), y1: cy, y2: cy, stroke: colour }));
      if (r[YLO] !== null && r[YHI] !== null) g.append(svg("line", { x1: cx, x2: cx, y1: sy(r[YLO]), y2: sy(r[YHI]), stroke: colour }));
      const chosen = p.pick === r[VARIANT];
      g.append(svg("circle", { cx, cy, r: chosen ? 8 : 4.5, fill: colour, stroke: chosen ? "#000" : "none" }));
      const right = cx > W - R - 110; // a name near the right edge is written to the point's left
      const name = data.variants[r[VARIANT]] + (chosen ? " (ship this)" : "");
      g.append(svg("text", { x: right ? cx - 9 : cx + 9, y: cy - 8, "text-anchor": right ? "end" : "start" }, name));
    });
    const left = p.rows.filter((r) => !shown.includes(r)).map((r) => data.variants[r[VARIANT]]);
    plot.replaceChildren(
      el("h3", {}, "Sustainable tokens/s vs quality (the ringed point: ship this)"),
      g,
      el("p", { class: "note" }, left.length ? "not plotted (no sustainable load or no quality figure): " + left.join(", ") : ""),
    );
  }

  function verdictTable(p) {
    const quality = p.basis === "points" ? "change (points)" : "retention (%)";
    const head = ["variant", "verdict", "why", "requests the SLO claim needs", "speed (tok/s)", quality];
    table.replaceChildren(el("tr", {}, ...head.map((h, i) => el("th", { class: i < 3 ? "l" : "" }, h))));
    p.rows.forEach((r) => {
      const verdict = S[r[VERDICT]];
      const cls = verdict === "recommended" || verdict === "passes" ? "l good" : "l bad";
      table.append(
        el(
          "tr",
          { "data-variant": data.variants[r[VARIANT]] },
          el("td", { class: "l" }, data.variants[r[VARIANT]]),
          el("td", { class: cls + " verdict" }, verdict),
          el("td", { class: "l reason" }, r[REASON] === null ? "" : S[r[REASON]]),
          el("td", {}, r[NEEDED] === null ? "" : num(r[NEEDED])),
          el("td", {}, r[X] === null ? "\u2014" : num(r[X])),
          el("td", {}, r[Y] === null ? "\u2014" : num(r[Y])),
        ),
      );
    });
  }

  function render() {
    const p = current();
    pick.replaceChildren(el("b", {}, S[p.head]));
    pick.dataset.pick = p.pick === null ? "" : data.variants[p.pick];
    flags.textContent = "tradeoff recommend --run " + data.run + " " + p.flags;
    verdictTable(p);
    frontierPlot(p);
  }

  function fromFragment() {
    const asked = new URLSearchParams(location.hash.slice(1));
    data.controls.forEach((c, k) => {
      const i = c.keys.indexOf(asked.get(c.key));
      if (i >= 0) selects[k].selectedIndex = i;
    });
  }

  function toFragment() {
    const setting = data.controls.map((c, k) => `${c.key}=${encodeURIComponent(c.keys[selects[k].selectedIndex])}`);
    try {
      history.replaceState(null, "", "#" + setting.join("&"));
    } catch (e) {
      // a page opened where the history cannot be written keeps working; only the link does not follow
    }
  }

  selects.forEach((s) => s.addEventListener("change", () => (render(), toFragment())));
  fromFragment();
  render();
  if (location.hash.length > 1) root.scrollIntoView();
})();
