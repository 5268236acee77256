// cumemtrace HTML report: draws the model that `cumemtrace html` aggregated in C++ and embedded
// as JSON (#cumemtrace-data). Plain DOM + SVG, no libraries, nothing fetched. The data is already
// downsampled, so drawing costs O(points) whatever the trace length.
(function () {
  'use strict';
  const SVG = 'http://www.w3.org/2000/svg';
  const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1',
    '#ff9da7', '#9c755f', '#17becf', '#bcbd22', '#7f3c8d'];
  const OTHER = '#bab0ac';
  // Categories (snapshot.h) and the automatic phases: one colour each, the same on every page.
  const CATEGORY = {
    parameter: ['#4e79a7', 'parameter'], gradient: ['#f28e2b', 'gradient'],
    optimizer_state: ['#59a14f', 'optimizer state'], activation: ['#e15759', 'activation'],
    temporary: ['#edc948', 'temporary'], input: ['#76b7b2', 'input'], autograd: ['#b07aa1', 'autograd'],
    unknown: ['#9c755f', 'unknown'], library: ['#8c8c8c', 'other libraries'],
    cache: ['#d9d4cf', "cached, free in PyTorch's cache"],
  };
  const PHASE = { forward: '#2b8cbe', backward: '#e6550d', optimizer: '#31a354' };
  const data = JSON.parse(document.getElementById('cumemtrace-data').textContent);
  const app = document.getElementById('app');
  const charts = [];
  let query = '';

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }
  function sv(tag, attrs, parent) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
    if (parent) parent.append(e);
    return e;
  }
  // The C++ side's format_bytes (snapshot/size_format.h), the one size rule: binary units, three
  // significant digits, the unit chosen on the rounded value.
  function fmtBytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
    if (n < 1024) return n + ' B';
    let i = 0;
    let v = n;
    while (v >= 1023.5 && i < units.length - 1) { v /= 1024; i++; }
    const d = v >= 99.95 ? 0 : v >= 9.995 ? 1 : 2;
    // A tie rounds to even, as C's printf and Python do on the exact value (1.125 -> "1.12");
    // toFixed alone would round it up.
    const s = v * 10 ** d;
    const r = s - Math.floor(s) === 0.5 ? 2 * Math.round(s / 2) : Math.round(s);
    return (r / 10 ** d).toFixed(d) + ' ' + units[i];
  }
  // Time since the origin `report` uses (the traced program's start), in the unit the latest
  // moment calls for, with the decimals the chart's span needs to tell its ticks apart.
  function fmtX(dev, x) {
    if (!dev.time_axis) return 'event ' + x;
    const us = x - dev.origin;
    const last = Math.max(dev.x1 - dev.origin, 0);
    const span = dev.x1 - dev.x0;
    const digits = (unit) => Math.min(6, Math.max(0, Math.ceil(Math.log10(unit * 100 / Math.max(span, 1)))));
    if (last >= 1e6) return '+' + (us / 1e6).toFixed(digits(1e6)) + ' s';
    if (last >= 1e3) return '+' + (us / 1e3).toFixed(digits(1e3)) + ' ms';
    return '+' + Math.round(us) + ' \u00b5s';
  }
  // What a live table's count is made of, in the engine's words (report_model.h).
  function countText(t) {
    return t.count_text || plural(t.count, 'allocation');
  }

  function plural(n, word) {
    return n.toLocaleString('en') + ' ' + word + (n === 1 ? '' : 's');
  }
  function color(dev, i) {
    if (dev.by_category) return (CATEGORY[dev.series[i]] || [OTHER])[0];
    if (dev.series[i] === 'other' && i === dev.series.length - 1) return OTHER;
    return PALETTE[i % PALETTE.length];
  }
  // A series' name as shown: a category's words, else the site label.
  function seriesName(dev, i) {
    return dev.by_category && CATEGORY[dev.series[i]] ? CATEGORY[dev.series[i]][1] : dev.series[i];
  }
  function hue(name) {
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return 'hsl(' + (h % 360) + ',60%,55%)';
  }
  function frameText(f) {
    return f[0] + ' ' + f[1] + (f[2] > 0 ? ':' + f[2] : '');
  }
  function stackText(id) {
    const frames = data.stacks[id] || [];
    return frames.map(frameText).join('\n').toLowerCase();
  }

  // ---------- header ----------
  // The words for the moment the file was written, as report says them (report.cpp end_moment):
  // only a snapshot written when the program ended is "at exit".
  function endMoment() {
    return data.tool && data.tool.reason !== 'exit' ? 'at this snapshot' : 'at exit';
  }

  function header() {
    const t = data.tool;
    app.append(el('h1', { text: 'cumemtrace: ' + data.source }));
    if (t) {
      const argv = (t.argv || []).join(' ');
      app.append(el('div', { class: 'sub', text: (argv || t.exe) + '  (pid ' + t.pid + (t.hostname ? ' on ' + t.hostname : '') + ')' }));
      let ended = t.ended.how;
      if (t.ended.how === 'exit') ended += ' ' + t.ended.code;
      if (t.ended.how === 'signal') ended += ' ' + t.ended.signal;
      app.append(el('div', { class: 'sub', text: 'ended: ' + ended + '; written on: ' + t.reason + '; ' + plural(t.events_total, 'event') + ' recorded' }));
      if (t.events_dropped > 0) app.append(el('div', { class: 'warn', text: t.events_dropped + ' events were dropped: totals may be off.' }));
      if (t.ring_error) app.append(el('div', { class: 'warn', text: 'Incomplete: ' + t.ring_error + '; events after it are missing.' }));
      if (t.time_resolution_ns > 0) app.append(el('div', { class: 'sub', text: 'times read at the kernel tick (--clock coarse): every ' + Number((t.time_resolution_ns / 1e6).toPrecision(6)) + ' ms' }));
      if (t.anomalies > 0) app.append(el('div', { class: 'warn', text: t.anomalies + ' anomalies (frees of unknown pointers, double frees...): see `cumemtrace` text reports.' }));
    } else {
      app.append(el('div', { class: 'sub', text: 'PyTorch memory snapshot' }));
    }
    const cards = el('div', { class: 'cards' });
    for (const d of data.devices) {
      cards.append(el('div', { class: 'card' }, el('span', { text: 'cuda:' + d.device + ' peak' }), el('b', { text: fmtBytes(d.peak.bytes) }), el('span', { text: 'at ' + fmtX(d, d.peak.x) })));
      cards.append(el('div', { class: 'card' }, el('span', { text: 'cuda:' + d.device + ' live ' + endMoment() }), el('b', { text: fmtBytes(d.at_exit.bytes) }), el('span', { text: countText(d.at_exit) })));
      // With PyTorch's blocks the timeline's units are segments (PyTorch's and other libraries'
      // memory): the card says so and names the tensors too, the histogram's count.
      const segments = d.tensors_apart;
      cards.append(el('div', { class: 'card' }, el('span', { text: 'cuda:' + d.device + (segments ? ' driver allocations' : ' allocations') }), el('b', { text: d.allocations.toLocaleString('en') }), el('span', { text: plural(d.frees, 'free') + ', ' + (segments ? plural(d.requests, 'tensor allocation') + ', ' : '') + d.entries.toLocaleString('en') + (d.entries === 1 ? ' trace entry' : ' trace entries') })));
      if (d.ooms.length) cards.append(el('div', { class: 'card' }, el('span', { text: 'cuda:' + d.device }), el('b', { class: 'warn', text: d.oom_count.toLocaleString('en') + ' OOM' }), el('span', { text: 'first asked ' + fmtBytes(d.ooms[0][1]) })));
    }
    app.append(cards);
    const input = el('input', { type: 'search', id: 'search', placeholder: 'Search function or file (e.g. forward, model.py)', oninput: (e) => setQuery(e.target.value) });
    app.append(el('div', { class: 'toolbar' }, input, el('span', { class: 'hint', id: 'search-status', text: 'Drag across a chart to zoom; double-click to reset.' })));
  }

  // ---------- chart ----------
  function makeChart(dev, parent) {
    const wrap = el('div', { class: 'chart-wrap' });
    const svg = sv('svg', { class: 'chart', 'data-device': dev.device });
    const tip = el('div', { class: 'tip' });
    wrap.append(svg, tip);
    const controls = el('div', { class: 'controls' });
    const range = el('span');
    const reset = el('button', { text: 'Reset zoom', onclick: () => { chart.view = null; draw(); } });
    controls.append(reset, range);
    const legend = el('div', { class: 'legend' });
    dev.series.forEach((name, i) => {
      const item = el('span', { title: seriesName(dev, i), 'data-series': i }, el('i', { style: 'background:' + color(dev, i) }), seriesName(dev, i));
      item.addEventListener('mouseenter', () => highlightSeries(i));
      item.addEventListener('mouseleave', () => highlightSeries(-1));
      legend.append(item);
    });
    parent.append(legend);
    // The automatic phases' legend: the strip above the plot and the step boundaries.
    if (dev.phases.length || dev.steps.length) {
      const pl = el('div', { class: 'legend phases', 'data-device': dev.device });
      for (const name of ['forward', 'backward', 'optimizer'])
        if (dev.phases.some((p) => p[2] === name)) pl.append(el('span', { 'data-phase': name }, el('i', { style: 'background:' + PHASE[name] }), name));
      if (dev.steps.length) pl.append(el('span', { 'data-phase': 'step' }, el('i', { class: 'step' }), 'step boundary (' + plural(dev.step_count, 'step') + ')'));
      parent.append(pl);
    }
    parent.append(wrap, controls);
    const chart = { dev, svg, tip, legend, view: null, draw: null, layout: null, hover: -1 };
    const P = dev.points;
    const n = P.x.length;

    function highlightSeries(i) {
      chart.hover = i;
      applySeriesDim(chart);
    }

    function draw() {
      const x0 = chart.view ? chart.view[0] : dev.x0;
      const x1 = chart.view ? chart.view[1] : Math.max(dev.x1, dev.x0 + 1);
      range.textContent = chart.view ? 'showing ' + fmtX(dev, x0) + ' to ' + fmtX(dev, x1) : 'whole run';
      range.className = chart.view ? 'zoomed' : '';
      while (svg.firstChild) svg.firstChild.remove();
      const W = Math.max(svg.clientWidth || 900, 300);
      const H = svg.clientHeight || 340;
      // Room above the plot for the phase strip when the run has automatic phases.
      const strip = dev.phases.length ? 14 : 0;
      const m = { l: 74, r: 16, t: 22 + strip, b: 26 };
      const pw = W - m.l - m.r;
      const ph = H - m.t - m.b;
      // Points in view: the last one before x0 (its state holds into the view) to the end of view.
      let lo = 0;
      while (lo + 1 < n && P.x[lo + 1] <= x0) lo++;
      let hi = lo;
      while (hi + 1 < n && P.x[hi + 1] <= x1) hi++;
      let ymax = 1;
      for (let i = lo; i <= hi; i++) ymax = Math.max(ymax, P.total[i], P.reserved[i], P.driver ? P.driver[i] : 0, P.allocated ? P.allocated[i] : 0);
      ymax *= 1.08;
      const X = (x) => m.l + (Math.min(Math.max(x, x0), x1) - x0) / (x1 - x0) * pw;
      const Y = (y) => m.t + ph - y / ymax * ph;
      chart.layout = { x0, x1, m, pw, ph, X, Y, lo, hi };
      svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);

      const grid = sv('g', { class: 'grid' }, svg);
      const axis = sv('g', { class: 'axis' }, svg);
      for (let k = 0; k <= 4; k++) {
        const y = ymax / 1.08 * k / 4;
        sv('line', { x1: m.l, x2: m.l + pw, y1: Y(y), y2: Y(y) }, grid);
        sv('text', { x: m.l - 6, y: Y(y) + 4, 'text-anchor': 'end', text: fmtBytes(Math.round(y)) }, axis);
      }
      for (let k = 0; k <= 5; k++) {
        const x = x0 + (x1 - x0) * k / 5;
        sv('text', { x: X(x), y: H - 8, 'text-anchor': k === 0 ? 'start' : k === 5 ? 'end' : 'middle', text: fmtX(dev, Math.round(x)) }, axis);
      }
      // Marks behind everything.
      const marks = sv('g', { class: 'marks' }, svg);
      for (const b of dev.bands) {
        if (b[1] < x0 || b[0] > x1) continue;
        const r = sv('rect', { class: 'band', x: X(b[0]), y: m.t, width: Math.max(1, X(b[1]) - X(b[0])), height: ph, fill: hue(b[2]) }, marks);
        sv('title', { text: b[2] + ' (' + fmtX(dev, b[0]) + ' to ' + fmtX(dev, b[1]) + ')' }, r);
      }
      for (const mk of dev.marks) {
        if (mk[0] < x0 || mk[0] > x1) continue;
        const l = sv('line', { class: 'mark', x1: X(mk[0]), x2: X(mk[0]), y1: m.t, y2: m.t + ph }, marks);
        sv('title', { text: mk[1] }, l);
      }
      // The automatic phases: a strip above the plot, a faint tint through it; step boundaries.
      const phases = sv('g', { class: 'phases' }, svg);
      for (const p of dev.phases) {
        if (p[1] < x0 || p[0] > x1) continue;
        const w = Math.max(1, X(p[1]) - X(p[0]));
        const r = sv('rect', { class: 'phase', 'data-phase': p[2], x: X(p[0]), y: m.t - strip, width: w, height: strip - 4, fill: PHASE[p[2]] }, phases);
        sv('title', { text: p[2] + ' (' + fmtX(dev, p[0]) + ' to ' + fmtX(dev, p[1]) + ')' }, r);
        sv('rect', { class: 'phase-tint', x: X(p[0]), y: m.t, width: w, height: ph, fill: PHASE[p[2]] }, marks);
      }
      for (const st of dev.steps) {
        if (st[0] < x0 || st[0] > x1) continue;
        const l = sv('line', { class: 'step', x1: X(st[0]), x2: X(st[0]), y1: m.t - strip, y2: m.t + ph }, phases);
        sv('title', { text: 'end of step ' + st[1] }, l);
      }
      // Stacked step areas: each point's state holds until the next one. Points are first folded
      // into 2-pixel columns: a column shows its highest state across its width (a spike shorter
      // than a pixel stays visible) and then its last state, which holds until the next column.
      const COL = 2;
      const cols = [];
      {
        let col = -1, best = -1, last = -1;
        const flush = () => {
          if (best < 0) return;
          cols.push([Math.max(m.l, col), best]);
          if (last !== best && (P.total[last] !== P.total[best] || P.reserved[last] !== P.reserved[best])) cols.push([col + COL, last]);
        };
        for (let i = lo; i <= hi; i++) {
          const c = Math.floor(X(P.x[i]) / COL) * COL;
          if (c !== col) { flush(); col = c; best = i; }
          else if (P.total[i] > P.total[best]) best = i;
          last = i;
        }
        flush();
      }
      const xs = cols.map((c) => c[0]);
      xs.push(X(x1));
      const series = sv('g', { class: 'series-group' }, svg);
      const base = new Float64Array(cols.length);
      for (let s = 0; s < dev.series.length; s++) {
        const col = P.v[s];
        let top = '';
        const bottom = [];
        for (let k = 0; k < cols.length; k++) {
          const yb = Y(base[k]);
          base[k] += col[cols[k][1]];
          const yt = Y(base[k]);
          top += (k === 0 ? 'M' : 'L') + xs[k].toFixed(1) + ',' + yt.toFixed(1) + 'H' + xs[k + 1].toFixed(1);
          bottom.push('L' + xs[k + 1].toFixed(1) + ',' + yb.toFixed(1) + 'H' + xs[k].toFixed(1));
        }
        const p = sv('path', { class: 'series', d: top + bottom.reverse().join('') + 'Z', fill: color(dev, s), 'data-series': s }, series);
        sv('title', { text: seriesName(dev, s) }, p);
      }
      // The layers as lines: PyTorch reserved (dashed), PyTorch allocated under it, the
      // driver-visible total over everything.
      const line = (values, cls, title) => {
        let d = '';
        for (let k = 0; k < cols.length; k++) {
          d += (k === 0 ? 'M' : 'L') + xs[k].toFixed(1) + ',' + Y(values[cols[k][1]]).toFixed(1) + 'H' + xs[k + 1].toFixed(1);
        }
        const r = sv('path', { class: cls, d }, svg);
        sv('title', { text: title }, r);
      };
      if (dev.peak.reserved > 0) line(P.reserved, 'reserved', dev.pool_layer ? 'pool reserved (driver samples, cache included)' : 'PyTorch reserved (segments, cache included)');
      if (P.allocated) line(P.allocated, 'allocated', dev.pool_layer ? 'pool allocated (cudaMallocAsync)' : 'PyTorch allocated (tensors)');
      if (P.driver) line(P.driver, 'driver', 'driver-visible (NVML)');
      for (const o of dev.ooms) {
        if (o[0] < x0 || o[0] > x1) continue;
        sv('line', { class: 'oom', x1: X(o[0]), x2: X(o[0]), y1: m.t, y2: m.t + ph }, svg);
        const nearEnd = X(o[0]) > m.l + pw - 40;
        // Labelled at the bottom: the peak's label sits at the top, often at the same moment.
        const t = sv('text', { class: 'oom', x: X(o[0]) + (nearEnd ? -3 : 3), y: m.t + ph - 4, 'text-anchor': nearEnd ? 'end' : 'start', text: 'OOM' }, svg);
        sv('title', { text: 'OOM: asked ' + fmtBytes(o[1]) + ', device had ' + fmtBytes(o[2]) + ' free' }, t);
      }
      if (dev.peak.x >= x0 && dev.peak.x <= x1) {
        const px = X(dev.peak.x);
        const py = Y(dev.peak.bytes);
        // A spike can be narrower than its column; the line keeps the peak findable.
        sv('line', { class: 'peak', x1: px, x2: px, y1: Y(0), y2: py }, svg);
        sv('circle', { class: 'peak', cx: px, cy: py, r: 4.5 }, svg);
        const label = 'peak ' + fmtBytes(dev.peak.bytes);
        sv('text', { class: 'peak', x: px > m.l + pw - 120 ? px - 8 : px + 8, y: Math.max(py - 6, m.t + 10), 'text-anchor': px > m.l + pw - 120 ? 'end' : 'start', text: label }, svg);
      }
      chart.cursor = sv('line', { class: 'cursor', y1: m.t, y2: m.t + ph, x1: -10, x2: -10 }, svg);
      chart.brush = sv('rect', { class: 'brush', y: m.t, height: ph, x: 0, width: 0, visibility: 'hidden' }, svg);
      applySeriesDim(chart);
    }
    chart.draw = draw;

    // Zoom by brushing: drag across the plot; double-click resets.
    let dragFrom = null;
    const toX = (ev) => {
      const L = chart.layout;
      const r = svg.getBoundingClientRect();
      const px = (ev.clientX - r.left) * (svg.viewBox.baseVal.width / r.width);
      return { px, x: L.x0 + (Math.min(Math.max(px, L.m.l), L.m.l + L.pw) - L.m.l) / L.pw * (L.x1 - L.x0) };
    };
    svg.addEventListener('mousedown', (ev) => { dragFrom = toX(ev); ev.preventDefault(); });
    window.addEventListener('mouseup', (ev) => {
      if (!dragFrom) return;
      const to = toX(ev);
      const a = Math.min(dragFrom.x, to.x);
      const b = Math.max(dragFrom.x, to.x);
      const wide = Math.abs(to.px - dragFrom.px) > 4;
      dragFrom = null;
      chart.brush.setAttribute('visibility', 'hidden');
      if (wide && b > a) { chart.view = [a, b]; draw(); }
    });
    svg.addEventListener('dblclick', () => { chart.view = null; draw(); });
    svg.addEventListener('mousemove', (ev) => {
      const L = chart.layout;
      const at = toX(ev);
      if (dragFrom) {
        chart.brush.setAttribute('visibility', 'visible');
        chart.brush.setAttribute('x', Math.min(dragFrom.px, at.px));
        chart.brush.setAttribute('width', Math.abs(at.px - dragFrom.px));
      }
      // The state at x is the last point at or before it.
      let a = 0, b = n - 1;
      while (a < b) { const mid = (a + b + 1) >> 1; if (P.x[mid] <= at.x) a = mid; else b = mid - 1; }
      chart.cursor.setAttribute('x1', L.X(at.x));
      chart.cursor.setAttribute('x2', L.X(at.x));
      tip.replaceChildren(el('div', { text: fmtX(dev, Math.round(at.x)) + ': ' + fmtBytes(P.total[a]) + ' live' + (P.allocated ? ', ' + fmtBytes(P.allocated[a]) + ' allocated' : '') + (P.reserved[a] ? ', ' + fmtBytes(P.reserved[a]) + ' reserved' : '') + (P.driver && P.driver[a] ? ', ' + fmtBytes(P.driver[a]) + ' driver-visible' : '') }));
      const rows = dev.series.map((s, i) => [i, P.v[i][a]]).filter((r) => r[1] > 0).sort((p, q) => q[1] - p[1]).slice(0, 8);
      for (const [i, v] of rows) tip.append(el('div', {}, el('span', { style: 'color:' + color(dev, i), text: '\u25A0 ' }), fmtBytes(v) + '  ' + seriesName(dev, i)));
      const r = svg.getBoundingClientRect();
      const left = ev.clientX - r.left;
      tip.style.display = 'block';
      tip.style.top = (ev.clientY - r.top + 14) + 'px';
      tip.style.left = (left > r.width / 2 ? left - tip.offsetWidth - 12 : left + 12) + 'px';
    });
    svg.addEventListener('mouseleave', () => { tip.style.display = 'none'; chart.cursor.setAttribute('x1', -10); chart.cursor.setAttribute('x2', -10); });
    charts.push(chart);
    return chart;
  }

  // ---------- live tables ----------
  function liveTable(dev, t, title, what) {
    const box = el('div');
    // PyTorch's cache is no allocation's: said apart, its row below the sites' (shares are of both).
    const cached = t.cached_free != null ? t.cached_free : 0;
    box.append(el('h3', { text: title + ': ' + fmtBytes(t.bytes) + ' in ' + countText(t) + (t.cached_free != null ? ', and ' + fmtBytes(cached) + ' ' + CATEGORY.cache[1] : '') }));
    if (!t.groups.length) { box.append(el('div', { class: 'empty', text: 'nothing live' })); return box; }
    const table = el('table', { class: 'live', 'data-table': what, 'data-device': dev.device });
    table.append(el('thead', {}, el('tr', {}, el('th', { text: 'allocation site' }), el('th', { text: 'bytes' }), el('th', { text: 'share' }), el('th', { text: 'count' }))));
    const body = el('tbody');
    for (const g of t.groups) {
      const share = t.bytes + cached ? g.bytes / (t.bytes + cached) : 0;
      const row = el('tr', { class: 'group', 'data-site': g.site },
        el('td', { class: 'site', text: g.site }),
        el('td', { class: 'num', text: fmtBytes(g.bytes) }),
        el('td', { class: 'num' }, el('span', { class: 'bar', style: 'width:' + Math.round(share * 60) + 'px' }), (share * 100).toFixed(1) + '%'),
        el('td', { class: 'num', text: g.count.toLocaleString('en') }));
      const cell = el('td', { colspan: 4 });
      for (const [id, bytes, count] of g.stacks) {
        const frames = data.stacks[id] || [];
        const ol = el('ol');
        for (const f of frames) ol.append(el('li', { 'data-text': frameText(f).toLowerCase() }, f[0] + ' ', el('span', { class: 'file', text: f[1] + (f[2] > 0 ? ':' + f[2] : '') })));
        if (!frames.length) ol.append(el('li', { text: '(no stack recorded)' }));
        cell.append(el('div', { class: 'stack' }, el('b', { text: fmtBytes(bytes) + ' in ' + plural(count, 'allocation') }), ol));
      }
      const more = el('tr', { class: 'stacks', hidden: '' }, cell);
      row.dataset.search = (g.site + '\n' + g.stacks.map((s) => stackText(s[0])).join('\n')).toLowerCase();
      row.addEventListener('click', () => { more.hidden = !more.hidden; row.classList.toggle('open', !more.hidden); });
      body.append(row, more);
    }
    if (t.cached_free != null) {
      const share = t.bytes + cached ? cached / (t.bytes + cached) : 0;
      body.append(el('tr', { class: 'cache' }, el('td', { class: 'site', text: CATEGORY.cache[1] }), el('td', { class: 'num', text: fmtBytes(cached) }), el('td', { class: 'num' }, el('span', { class: 'bar', style: 'width:' + Math.round(share * 60) + 'px' }), (share * 100).toFixed(1) + '%'), el('td')));
    }
    if (t.rest_groups > 0) body.append(el('tr', {}, el('td', { class: 'empty', text: t.rest_groups + ' more sites' }), el('td', { class: 'num', text: fmtBytes(t.rest_bytes) }), el('td'), el('td')));
    table.append(body);
    box.append(table);
    return box;
  }

  // ---------- size histogram ----------
  function histogram(dev, parent) {
    if (!dev.sizes.length) return;
    // The count of what the bars count (requests: PyTorch's tensors where its blocks are in the
    // file), not the timeline's allocations (its segments, then), which the card shows.
    const requests = dev.requests;
    parent.append(el('h3', { text: 'Allocation sizes (' + plural(requests, 'requested allocation') + ')' }));
    const svg = sv('svg', { class: 'hist' });
    parent.append(svg);
    const lo = dev.sizes[0][0];
    const hi = dev.sizes[dev.sizes.length - 1][0];
    const byLog = new Map(dev.sizes.map((b) => [b[0], b]));
    const W = Math.max(svg.clientWidth || 900, 300);
    const H = svg.clientHeight || 190;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    const m = { l: 60, r: 10, t: 10, b: 36 };
    const nb = hi - lo + 1;
    const bw = (W - m.l - m.r) / nb;
    let cmax = 1;
    for (const b of dev.sizes) cmax = Math.max(cmax, b[1]);
    const ticks = [...new Set([0, Math.round(cmax / 2), cmax])];
    for (const c of ticks) {
      sv('text', { x: m.l - 6, y: H - m.b - (H - m.t - m.b) * c / cmax + 4, 'text-anchor': 'end', text: c.toLocaleString('en') }, svg);
    }
    for (let lg = lo; lg <= hi; lg++) {
      const b = byLog.get(lg) || [lg, 0, 0];
      const h = (H - m.t - m.b) * b[1] / cmax;
      const x = m.l + (lg - lo) * bw;
      const r = sv('rect', { x: x + 1, y: H - m.b - h, width: Math.max(1, bw - 2), height: h }, svg);
      sv('title', { text: fmtBytes(2 ** lg) + ' to ' + fmtBytes(2 ** (lg + 1)) + ': ' + b[1].toLocaleString('en') + ' allocations, ' + fmtBytes(b[2]) }, r);
      if (nb <= 24 || (lg - lo) % 2 === 0) sv('text', { x: x + bw / 2, y: H - m.b + 14, 'text-anchor': 'middle', text: fmtBytes(2 ** lg) }, svg);
    }
    sv('text', { x: m.l, y: H - 4, text: 'count per power-of-two size bucket' }, svg);
  }

  // ---------- search ----------
  function applySeriesDim(chart) {
    const dev = chart.dev;
    const paths = chart.svg.querySelectorAll('path.series');
    const items = chart.legend.querySelectorAll('span[data-series]');
    const match = dev.series.map((name, i) => {
      if (chart.hover >= 0) return i === chart.hover;
      if (!query) return true;
      return seriesMatches(dev, name);
    });
    paths.forEach((p) => p.classList.toggle('dim', !match[+p.dataset.series]));
    items.forEach((s) => s.classList.toggle('dim', !match[+s.dataset.series]));
  }
  function seriesMatches(dev, name) {
    if (name.toLowerCase().includes(query)) return true;
    // A series also matches when one of its stacks (listed in the tables) does.
    for (const t of [dev.at_peak, dev.at_exit])
      for (const g of t.groups)
        if (g.site === name && g.stacks.some((s) => stackText(s[0]).includes(query))) return true;
    return false;
  }
  function setQuery(q) {
    query = q.trim().toLowerCase();
    let shown = 0;
    let total = 0;
    document.querySelectorAll('table.live tr.group').forEach((row) => {
      const hit = !query || row.dataset.search.includes(query);
      total++;
      if (hit) shown++;
      row.hidden = !hit;
      row.classList.toggle('hit', !!query && hit && row.dataset.site.toLowerCase().includes(query));
      const more = row.nextElementSibling;
      if (!hit) more.hidden = true;
      else if (query && row.classList.contains('open')) more.hidden = false;
      more.querySelectorAll('li[data-text]').forEach((li) => li.classList.toggle('hit', !!query && li.dataset.text.includes(query)));
    });
    for (const c of charts) applySeriesDim(c);
    document.getElementById('search-status').textContent = query ? shown + ' of ' + total + ' table rows match "' + query + '"' : 'Drag across a chart to zoom; double-click to reset.';
  }

  // ---------- OOM card ----------
  // Each OOM's verdict as `report` prints it first (analysis/oom_verdict.h): the verdict line and
  // facts as the engine wrote them, who holds the memory, the advice, the failing request.
  function oomCards() {
    data.ooms.forEach((o, k) => {
      const card = el('section', { class: 'oom-card', id: 'oom-' + (k + 1), 'data-verdict': o.verdict });
      card.append(el('h2', { text: 'OOM ' + (k + 1) + ' on cuda:' + o.device + ': ' + o.verdict }));
      card.append(el('div', { class: 'verdict', text: o.line }));
      card.append(el('ul', { class: 'facts' }, ...o.facts.map((f) => el('li', { text: f }))));
      if (o.held_by_site.length) {
        const when = o.held_at ? ' (step ' + o.held_at.step + ', ' + o.held_at.phase + ')' : '';
        if (o.held_by_category) {
          const cats = Object.entries(o.held_by_category).sort((a, b) => b[1] - a[1]);
          card.append(el('div', { class: 'held-cat', text: 'held by category' + when + ': ' + cats.map(([c, b]) => c.replace(/_/g, ' ') + ' ' + fmtBytes(b)).join(', ') }));
        }
        const tb = el('tbody');
        for (const h of o.held_by_site) tb.append(el('tr', {}, el('td', { class: 'num', text: fmtBytes(h.bytes) }), el('td', { text: h.site }), el('td', { text: o.held_by_category ? h.category.replace(/_/g, ' ') : '' })));
        card.append(el('div', { class: 'sub', text: 'held by line' + (o.held_by_category ? '' : when) + ':' }));
        card.append(el('table', { class: 'held' }, tb));
      }
      if (o.advice.length) card.append(el('ul', { class: 'advice' }, ...o.advice.map((a) => el('li', { text: a }))));
      const frames = data.stacks[o.stack] || [];
      const ol = el('ol', { class: 'request' });
      for (const f of frames) ol.append(el('li', {}, f[0] + ' ', el('span', { class: 'file', text: f[1] + (f[2] > 0 ? ':' + f[2] : '') })));
      card.append(el('div', { class: 'sub', text: 'the failing request: ' + o.site }), ol);
      app.append(card);
    });
  }

  // ---------- memory layers ----------
  // The engine's breakdown at exit, at the peak and at each OOM, in the words `report` uses.
  function layers(dev, parent) {
    const rows = [];
    let oom = 0;
    const order = dev.layers.filter((b) => b.moment === 'exit').concat(dev.layers.filter((b) => b.moment !== 'exit'));
    for (const b of order) {
      if (b.moment === 'oom') oom++;
      if (!b.pytorch_text && !b.driver_text) continue;
      const when = b.moment === 'exit' ? endMoment() : b.moment === 'peak' ? 'at ' + b.peak_name : 'at OOM ' + oom + ' (' + fmtBytes(b.requested) + ' requested)';
      for (const t of [b.pytorch_text, b.driver_text]) if (t) rows.push(el('li', { class: 'layer', 'data-moment': b.moment, text: when + ': ' + t }));
    }
    if (!rows.length) return;
    parent.append(el('h3', { text: 'Memory layers' }));
    parent.append(el('ul', { class: 'layers', 'data-device': dev.device }, ...rows));
  }

  // ---------- page ----------
  header();
  oomCards();
  if (!data.devices.length) app.append(el('div', { class: 'empty', text: 'This snapshot has no device activity.' }));
  for (const dev of data.devices) {
    const sec = el('section', { id: 'device-' + dev.device });
    app.append(sec);
    sec.append(el('h2', { text: 'cuda:' + dev.device + ': memory over time' }));
    const note = [];
    if (dev.bands.length || dev.marks.length) note.push('shaded bands and dotted lines are marks (hover for names)');
    if (dev.bands_dropped) note.push(dev.bands_dropped + ' marks not drawn (too many to show)');
    if (dev.peak.reserved > 0) note.push(dev.pool_layer ? 'dashed line: pool reserved (driver samples)' : 'dashed line: PyTorch reserved (segments)');
    if (dev.points.allocated) note.push(dev.pool_layer ? 'solid line: pool allocated' : 'solid line: PyTorch allocated');
    if (dev.points.driver) note.push('dotted line: driver-visible (NVML)');
    if (dev.phases.length) note.push('the strip above the chart: automatic phases' + (dev.phases.length < dev.phase_count ? ' (one per time bucket: ' + plural(dev.phase_count, 'phase') + ' in all)' : '') + '; dark lines: step boundaries');
    note.push(dev.by_category ? 'stacked by category (PyTorch\'s tensors by what they are for, other libraries, PyTorch\'s cache)' : 'stacked by the ' + plural(dev.series.length, 'allocation site') + ' with the most byte-time');
    sec.append(el('div', { class: 'sub', text: note.join('; ') + '.' }));
    makeChart(dev, sec);
    layers(dev, sec);
    const tables = el('div', { class: 'tables' });
    tables.append(liveTable(dev, dev.at_peak, 'Live at peak (' + fmtX(dev, dev.peak.x) + ')', 'peak'), liveTable(dev, dev.at_exit, 'Live ' + endMoment(), 'exit'));
    sec.append(tables);
    histogram(dev, sec);
  }
  for (const c of charts) c.draw();
  // Links can open the report searched and zoomed: #search=TEXT&zoom=FROM,TO (fractions of the run).
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.get('zoom')) {
    const [a, b] = params.get('zoom').split(',').map(Number);
    if (a >= 0 && b > a && b <= 1) {
      for (const c of charts) {
        const span = Math.max(c.dev.x1 - c.dev.x0, 1);
        c.view = [c.dev.x0 + a * span, c.dev.x0 + b * span];
        c.draw();
      }
    }
  }
  if (params.get('search')) {
    document.getElementById('search').value = params.get('search');
    setQuery(params.get('search'));
  }
  let resizeTimer = 0;
  window.addEventListener('resize', () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(() => charts.forEach((c) => c.draw()), 150); });
  // Time from navigation start to a drawn page: what a user waits for. Tests read it back.
  const ms = Math.round(performance.now());
  document.body.dataset.renderMs = ms;
  app.append(el('div', { class: 'footer', id: 'render-time', text: 'Written by cumemtrace. Rendered in ' + ms + ' ms, offline.' }));
})();
