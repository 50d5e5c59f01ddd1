// rezolus-ue view: draws a page's charts from /api/page/NAME with uPlot.
// window.rezolusView holds what is drawn (the tests read it through DevTools).
"use strict";

const PAGE = document.body.dataset.page;
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const BAND_FILL = ["rgba(31,119,180,0.35)", "rgba(31,119,180,0.22)", "rgba(31,119,180,0.12)"];
const state = { meta: null, plots: [], last: {}, live: null };
window.rezolusView = { ready: false, charts: [], errors: [], loads: 0 };

const $ = (id) => document.getElementById(id);

function si(v, unit) {
  if (v == null) return "-";
  const a = Math.abs(v);
  const steps = unit.startsWith("bytes")
    ? [[2 ** 40, "Ti"], [2 ** 30, "Gi"], [2 ** 20, "Mi"], [2 ** 10, "Ki"]]
    : [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [s, p] of steps) if (a >= s) return (v / s).toFixed(2) + p;
  return a >= 100 || a === 0 ? v.toFixed(0) : v.toPrecision(3);
}

// "90", "90s", "5m", "1h", "-5m": seconds, negative from the end; "" is open.
function parseOffset(text) {
  const t = text.trim();
  if (!t) return "";
  const m = /^(-?)(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(t);
  if (!m) throw new Error(`not a time offset: ${t} (use 90s, 5m, -5m...)`);
  const scale = { ms: 0.001, s: 1, m: 60, h: 3600 }[m[3] || "s"];
  return String((m[1] ? -1 : 1) * parseFloat(m[2]) * scale);
}

function query() {
  const q = new URLSearchParams(location.search);
  return { start: q.get("start") || "", end: q.get("end") || "",
           bstart: q.get("bstart") || "", bend: q.get("bend") || "",
           compare: q.get("compare") };
}

async function getJSON(url) {
  const r = await fetch(url);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function nav(meta) {
  const q = location.search;
  $("nav").innerHTML = meta.pages.map((p) => {
    const cls = [p.name === PAGE ? "here" : "", p.present ? "" : "absent"].join(" ");
    return `<a class="${cls}" href="/page/${p.name}${q}">${p.title}</a>`;
  }).join("");
}

function comparing(meta) {
  const q = query();
  if (q.compare !== null) return q.compare === "1" && meta.datasets.length > 0;
  return meta.datasets.length > 1 || meta.compare_range !== null;
}

function rangeInputs(meta) {
  const q = query();
  const fmt = (v) => (v === null || v === undefined ? "" : String(v));
  $("start").value = q.start || fmt(meta.range[0]);
  $("end").value = q.end || fmt(meta.range[1]);
  const cr = meta.compare_range || [null, null];
  $("bstart").value = q.bstart || fmt(cr[0]);
  $("bend").value = q.bend || fmt(cr[1]);
  $("compare").checked = comparing(meta);
  $("brange").hidden = !$("compare").checked;
  $("compare").disabled = !!meta.live;
}

function url(ds, start, end, since) {
  const p = new URLSearchParams({ ds });
  if (since !== undefined) p.set("since", since);
  else { if (start) p.set("start", start); if (end) p.set("end", end); }
  return `/api/page/${PAGE}?${p}`;
}

function opts(chart, width, yRange) {
  const series = [{}];
  chart.series.forEach((name, i) => {
    const s = { label: name, stroke: chart.bands ? "#1f77b4" : COLORS[i % COLORS.length],
                width: chart.bands && name !== "p50" ? 0.5 : 1.5,
                value: (u, v) => si(v, chart.unit), spanGaps: false };
    series.push(s);
  });
  const o = {
    width, height: 220, series,
    axes: [{}, { size: 70, values: (u, vs) => vs.map((v) => si(v, chart.unit)) }],
    scales: { x: { time: true } },
    legend: { live: true },
  };
  if (yRange) o.scales.y = { range: () => yRange };
  if (chart.bands) {  // from the lowest percentile up: p50..p90, p90..p99, p99..max
    o.bands = chart.series.slice(1).map((_n, i) => ({ series: [i + 2, i + 1],
                                                      fill: BAND_FILL[i] || BAND_FILL[2] }));
  }
  return o;
}

function extent(charts) {
  let lo = Infinity, hi = -Infinity;
  for (const c of charts) if (c) for (const s of c.data) for (const v of s) {
    if (v == null) continue;
    lo = Math.min(lo, v); hi = Math.max(hi, v);
  }
  if (lo === Infinity) return null;
  return [Math.min(0, lo), hi > lo ? hi * 1.05 : hi + 1];
}

function draw(sets) {
  for (const p of state.plots) p.u.destroy();
  state.plots = [];
  const main = $("charts");
  main.innerHTML = "";
  main.classList.toggle("compare", sets.length > 1);
  const ids = [];
  for (const s of sets) for (const c of s.data.charts) if (!ids.includes(c.id)) ids.push(c.id);
  if (!ids.length) {
    main.innerHTML = `<p class="empty">No data for this page${state.meta.live
      ? " yet: waiting for the agent's next publish" : " in this range"}.</p>`;
  }
  const width = Math.max(320, Math.floor((main.clientWidth - 24) / sets.length) - 12);
  for (const id of ids) {
    const row = document.createElement("section");
    row.className = "row";
    const found = sets.map((s) => s.data.charts.find((c) => c.id === id));
    const first = found.find((c) => c);
    row.innerHTML = `<h3>${first.title} <small>${first.unit}</small></h3>`;
    const cells = document.createElement("div");
    cells.className = "cells";
    row.appendChild(cells);
    main.appendChild(row);
    const yRange = sets.length > 1 ? extent(found) : null;
    sets.forEach((s, k) => {
      const cell = document.createElement("div");
      cell.className = "cell";
      cells.appendChild(cell);
      const c = found[k];
      if (!c) { cell.innerHTML = `<p class="empty">not in ${s.data.dataset}</p>`; return; }
      const u = new uPlot(opts(c, width, yRange), [s.data.x, ...c.data], cell);
      state.plots.push({ u, id, ds: s.ds, chart: c });
    });
  }
  publish();
}

function publish() {
  window.rezolusView.charts = state.plots.map((p) => ({
    id: p.id, ds: p.ds, series: p.chart.series, x: p.u.data[0],
    data: p.u.data.slice(1), t_ns: state.last[p.ds] ? state.last[p.ds].t_ns : [],
  }));
}

async function load() {
  const status = $("status");
  try {
    const meta = state.meta;
    const start = parseOffset($("start").value), end = parseOffset($("end").value);
    const sets = [{ ds: "a", data: await getJSON(url("a", start, end)) }];
    if ($("compare").checked) {
      const bs = parseOffset($("bstart").value), be = parseOffset($("bend").value);
      const dsb = meta.datasets.length > 1 ? "b" : "a";
      const data = await getJSON(url(dsb, bs, be));
      sets.push({ ds: "b", data });
    }
    state.last = Object.fromEntries(sets.map((s) => [s.ds, s.data]));
    draw(sets);
    const n = sets[0].data.x.length;
    status.textContent = `${sets.map((s) => s.data.dataset).join(" vs ")}: ${n} intervals`
      + (meta.live && meta.state ? ` (${meta.state})` : "");
    window.rezolusView.loads += 1;
    window.rezolusView.ready = true;
  } catch (e) {
    status.textContent = String(e.message || e);
    window.rezolusView.errors.push(String(e.message || e));
  }
}

async function follow() {
  const last = state.last.a;
  const since = last && last.t_ns.length ? last.t_ns[last.t_ns.length - 1] : undefined;
  const fresh = await getJSON(since === undefined ? url("a", parseOffset($("start").value),
    parseOffset($("end").value)) : url("a", "", "", since));
  if (since === undefined) { state.last.a = fresh; draw([{ ds: "a", data: fresh }]); return; }
  if (!fresh.x.length) return;
  const same = fresh.charts.length === last.charts.length && fresh.charts.every((c, i) =>
    c.id === last.charts[i].id && c.series.join("\n") === last.charts[i].series.join("\n"));
  if (!same) { await load(); return; }
  last.x.push(...fresh.x);
  last.t_ns.push(...fresh.t_ns);
  fresh.charts.forEach((c, i) => c.data.forEach((s, k) => last.charts[i].data[k].push(...s)));
  for (const p of state.plots) {
    const c = last.charts.find((cc) => cc.id === p.id);
    p.u.setData([last.x, ...c.data]);
  }
  $("status").textContent = `live: ${last.x.length} intervals`;
  publish();
}

async function main() {
  try {
    state.meta = await getJSON("/api/meta");
  } catch (e) {
    window.rezolusView.errors.push(String(e));
    return;
  }
  nav(state.meta);
  rangeInputs(state.meta);
  $("compare").addEventListener("change", () => { $("brange").hidden = !$("compare").checked; });
  $("range").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const k of ["start", "end", "bstart", "bend"]) if ($(k).value) p.set(k, $(k).value);
    p.set("compare", $("compare").checked ? "1" : "0");
    history.replaceState(null, "", `?${p}`);
    nav(state.meta);
    load();
  });
  await load();
  if (state.meta.live) {
    const es = new EventSource("/api/events");
    let busy = false;
    es.onmessage = async (ev) => {
      const msg = JSON.parse(ev.data);
      state.meta.state = msg.state;
      if (busy) return;
      busy = true;
      try { await follow(); } catch (e) { window.rezolusView.errors.push(String(e)); }
      busy = false;
    };
    state.live = es;
  }
}

main();
