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
    program: ['#ff9da7', "program's own"], parameter_unsharded: ['#a0cbe8', 'parameter (unsharded)'],
    cublas_workspace: ['#86bcb6', 'cuBLAS workspace'], communication: ['#d4a6c8', 'communication buffer'],
    kv_cache: ['#fabfd2', 'KV cache'],
    unknown: ['#9c755f', 'unknown'], library: ['#8c8c8c', 'other libraries'],
    cache: ['#d9d4cf', "cached, free in PyTorch's cache"],
  };
  const PHASE = { forward: '#2b8cbe', loss: '#9e9ac8', backward: '#e6550d', optimizer: '#31a354', zero_grad: '#969696' };
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
  // A signed change, as format_signed_bytes writes it.
  function fmtDelta(n) {
    return (n < 0 ? '-' : '+') + fmtBytes(Math.abs(n));
  }
  // A length of time, for people: "5.92 s", "310 ms", "45 µs".
  function fmtSpan(us) {
    if (us >= 1e6) return (us / 1e6).toPrecision(3) + ' s';
    if (us >= 1e3) return (us / 1e3).toPrecision(3) + ' ms';
    return Math.round(us) + ' \u00b5s';
  }
  // What a live table's count is made of, in the engine's words (report_model.h).
  function countText(t) {
    return t.count_text || plural(t.count, 'allocation');
  }

  function plural(n, word) {
    return n.toLocaleString('en') + ' ' + word + (n === 1 ? '' : 's');
  }
  // PyTorch's cache: its own band, by category or by site (report_model.h cache_series).
  function isCache(dev, i) {
    return !!dev.cache_series && dev.series[i] === 'cache' && (dev.by_category || i === dev.series.length - 1);
  }
  function color(dev, i) {
    if (isCache(dev, i)) return CATEGORY.cache[0];
    if (dev.by_category) return (CATEGORY[dev.series[i]] || [OTHER])[0];
    if (dev.series[i] === 'other' && i === dev.series.length - 1) return OTHER;
    return PALETTE[i % PALETTE.length];
  }
  // A series' name as shown: a category's words, else the site label.
  function seriesName(dev, i) {
    if (isCache(dev, i)) return CATEGORY.cache[1];
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

  // ---------- x axis ----------
  // The chart's x axis maps each moment x (µs, or the entry ordinal without a clock) to a position
  // u through knots (piecewise linear, both sides non-decreasing), so every layer (areas, marks,
  // phases, peak, OOMs) is placed by one rule:
  //  - 'step': each automatic step the same width (what precedes the first step and follows the
  //    last one a step's width each): the steps are in view whatever the start-up took;
  //  - 'compressed': time, each stretch without a point longer than 1% of the run shrunk to 1%
  //    (drawn hatched, its length in its title);
  //  - 'time': time as it passed;
  //  - 'event': the trace entry ordinal, memory_viz's axis (points carry it: report_model.h).
  const AXES = { step: 'steps', compressed: 'time, idle compressed', time: 'time', event: 'events' };
  function axisModes(dev) {
    const modes = [];
    if (dev.steps.length) modes.push('step');
    if (dev.time_axis) modes.push('compressed', 'time');
    modes.push('event');
    return modes;
  }
  function interp(ka, kb, v) {
    // kb at v along ka: the last knot at or before v, linear to the next.
    let a = 0, b = ka.length - 1;
    if (v <= ka[0]) return kb[0];
    if (v >= ka[b]) return kb[b];
    while (a < b) { const mid = (a + b + 1) >> 1; if (ka[mid] <= v) a = mid; else b = mid - 1; }
    if (a + 1 >= ka.length || ka[a + 1] === ka[a]) return kb[a];
    return kb[a] + (kb[a + 1] - kb[a]) * (v - ka[a]) / (ka[a + 1] - ka[a]);
  }
  function makeAxis(dev, mode) {
    const P = dev.points;
    const n = P.x.length;
    const x0 = dev.x0;
    const x1 = Math.max(dev.x1, dev.x0 + 1);
    let kx = [x0, x1], ku = [0, x1 - x0];
    const gaps = [];
    let pre = 0;
    let lastStep = 0;
    if (mode === 'compressed') {
      const T = (x1 - x0) / 100;
      kx = [x0]; ku = [0];
      let removed = 0;
      for (let i = 0; i + 1 < n; i++) {
        const g = P.x[i + 1] - P.x[i];
        if (g <= T) continue;
        const ua = P.x[i] - x0 - removed;
        kx.push(P.x[i], P.x[i + 1]); ku.push(ua, ua + T);
        gaps.push([ua, ua + T, g]);
        removed += g - T;
      }
      kx.push(x1); ku.push(x1 - x0 - removed);
    } else if (mode === 'step') {
      const first = dev.phases.length ? dev.phases[0][0] : x0;
      pre = first > x0 && first < dev.steps[0][0] ? 1 : 0;
      kx = [x0]; ku = [0];
      if (pre) { kx.push(first); ku.push(1); }
      for (const [x, k] of dev.steps) { kx.push(x); ku.push(pre + k); lastStep = k; }
      const tail = x1 > kx[kx.length - 1] ? 1 : 0;
      kx.push(x1); ku.push(pre + lastStep + tail);
    } else if (mode === 'event') {
      kx = []; ku = [];
      for (let i = 0; i < n; i++) {
        if (kx.length && P.x[i] === kx[kx.length - 1]) continue;  // the first entry at a moment
        kx.push(P.x[i]); ku.push(P.entry[i]);
      }
      if (!kx.length || kx[kx.length - 1] < x1) { kx.push(x1); ku.push(dev.entries); }
    }
    const U = new Float64Array(n);
    for (let i = 0; i < n; i++) U[i] = mode === 'event' ? P.entry[i] : interp(kx, ku, P.x[i]);
    const ax = {
      mode, U, gaps, pre, lastStep,
      u0: ku[0], u1: Math.max(ku[ku.length - 1], ku[0] + 1e-9),
      warp: (x) => interp(kx, ku, x),
      unwarp: (u) => interp(ku, kx, u),
    };
    // What a position reads as: a moment (time modes), an entry, or a step.
    ax.stepAt = (u) => {
      if (u < pre) return 'before step 1';
      const k = Math.floor(u - pre) + 1;
      return k > lastStep ? 'after step ' + lastStep : 'step ' + k;
    };
    ax.label = (u) => mode === 'event' ? 'event ' + Math.round(u).toLocaleString('en') : mode === 'step' ? ax.stepAt(u) : fmtX(dev, Math.round(ax.unwarp(u)));
    ax.ticks = (a, b) => {
      const out = [];
      if (mode === 'step') {
        // Step labels at their middles, at most about ten.
        const first = Math.max(1, Math.floor(a - pre) + 1), last = Math.min(lastStep, Math.ceil(b - pre));
        const stride = Math.max(1, Math.ceil((last - first + 1) / 10));
        if (pre && a < pre) out.push([pre / 2, 'start']);
        for (let k = first; k <= last; k += stride) out.push([pre + k - 0.5, 'step ' + k]);
        if (ax.u1 > pre + lastStep && b > pre + lastStep) out.push([pre + lastStep + 0.5, 'end']);
        return out.filter((t) => t[0] >= a && t[0] <= b);
      }
      for (let k = 0; k <= 5; k++) {
        const u = a + (b - a) * k / 5;
        out.push([u, ax.label(u)]);
      }
      return out;
    };
    return ax;
  }

  function stackHeight(dev) {
    const P = dev.points;
    if (!dev.cache_series) return (i) => P.total[i];
    const k = dev.series.length - 1;
    return (i) => { let h = 0; for (let s = 0; s < k; s++) h += P.v[s][i]; return h; };
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
    const modes = axisModes(dev);
    const axisPick = el('span', { class: 'axis-pick', 'data-device': dev.device }, 'x axis: ');
    for (const mode of modes) {
      axisPick.append(el('button', { 'data-axis': mode, text: AXES[mode], onclick: () => setAxis(mode) }));
    }
    controls.append(axisPick, reset, range);
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
      for (const name of ['forward', 'loss', 'backward', 'optimizer', 'zero_grad'])
        if (dev.phases.some((p) => p[2] === name)) pl.append(el('span', { 'data-phase': name }, el('i', { style: 'background:' + PHASE[name] }), name));
      if (dev.steps.length) pl.append(el('span', { 'data-phase': 'step' }, el('i', { class: 'step' }), 'step boundary (' + plural(dev.step_count, 'step') + ')'));
      parent.append(pl);
    }
    parent.append(wrap, controls);
    const chart = { dev, svg, tip, legend, view: null, draw: null, layout: null, hover: -1, focus: null, axis: null };
    const P = dev.points;
    const n = P.x.length;

    function highlightSeries(i) {
      chart.hover = i;
      applySeriesDim(chart);
    }
    function setAxis(mode) {
      chart.axis = makeAxis(dev, mode);
      chart.view = null;
      svg.dataset.axis = mode;
      axisPick.querySelectorAll('button').forEach((b) => b.classList.toggle('on', b.dataset.axis === mode));
      if (chart.layout) draw();
    }
    chart.setAxis = setAxis;
    setAxis(modes[0]);

    function draw() {
      const A = chart.axis;
      const U = A.U;
      const u0 = chart.view ? chart.view[0] : A.u0;
      const u1 = chart.view ? chart.view[1] : A.u1;
      range.textContent = chart.view ? 'showing ' + A.label(u0) + ' to ' + A.label(u1) : 'whole run';
      range.className = chart.view ? 'zoomed' : '';
      while (svg.firstChild) svg.firstChild.remove();
      const W = Math.max(svg.clientWidth || 900, 300);
      const H = svg.clientHeight || 340;
      // Room above the plot for the phase strip when the run has automatic phases.
      const strip = dev.phases.length ? 14 : 0;
      const m = { l: 74, r: 16, t: 22 + strip, b: 26 };
      const pw = W - m.l - m.r;
      const ph = H - m.t - m.b;
      // Points in view: the last one before u0 (its state holds into the view) to the end of view.
      let lo = 0;
      while (lo + 1 < n && U[lo + 1] <= u0) lo++;
      let hi = lo;
      while (hi + 1 < n && U[hi + 1] <= u1) hi++;
      let ymax = 1;
      for (let i = lo; i <= hi; i++) ymax = Math.max(ymax, P.total[i], P.reserved[i], P.driver ? P.driver[i] : 0, P.allocated ? P.allocated[i] : 0);
      ymax *= 1.08;
      const XU = (u) => m.l + (Math.min(Math.max(u, u0), u1) - u0) / (u1 - u0) * pw;
      const X = (x) => XU(A.warp(x));
      const inView = (xa, xb) => A.warp(xb) >= u0 && A.warp(xa) <= u1;
      const Y = (y) => m.t + ph - y / ymax * ph;
      chart.layout = { u0, u1, m, pw, ph, X, XU, Y, lo, hi, ymax };
      svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);

      const grid = sv('g', { class: 'grid' }, svg);
      const axis = sv('g', { class: 'axis' }, svg);
      for (let k = 0; k <= 4; k++) {
        const y = ymax / 1.08 * k / 4;
        sv('line', { x1: m.l, x2: m.l + pw, y1: Y(y), y2: Y(y) }, grid);
        sv('text', { x: m.l - 6, y: Y(y) + 4, 'text-anchor': 'end', text: fmtBytes(Math.round(y)) }, axis);
      }
      const ticks = A.ticks(u0, u1);
      ticks.forEach(([u, text], k) => {
        const anchor = A.mode === 'step' ? 'middle' : k === 0 ? 'start' : k === ticks.length - 1 ? 'end' : 'middle';
        sv('text', { class: 'tick', x: XU(u), y: H - 8, 'text-anchor': anchor, text }, axis);
      });
      // Marks behind everything.
      const marks = sv('g', { class: 'marks' }, svg);
      for (const g of A.gaps) {
        if (g[1] < u0 || g[0] > u1) continue;
        const r = sv('rect', { class: 'idle', x: XU(g[0]), y: m.t, width: Math.max(2, XU(g[1]) - XU(g[0])), height: ph }, marks);
        sv('title', { text: 'no allocation for ' + fmtSpan(g[2]) + ' (compressed)' }, r);
      }
      for (const b of dev.bands) {
        if (!inView(b[0], b[1])) continue;
        const r = sv('rect', { class: 'band', x: X(b[0]), y: m.t, width: Math.max(1, X(b[1]) - X(b[0])), height: ph, fill: hue(b[2]) }, marks);
        sv('title', { text: b[2] + ' (' + fmtX(dev, b[0]) + ' to ' + fmtX(dev, b[1]) + ')' }, r);
      }
      for (const mk of dev.marks) {
        if (!inView(mk[0], mk[0])) continue;
        const l = sv('line', { class: 'mark', x1: X(mk[0]), x2: X(mk[0]), y1: m.t, y2: m.t + ph }, marks);
        sv('title', { text: mk[1] }, l);
      }
      // The automatic phases: a strip above the plot, a faint tint through it; step boundaries.
      const phases = sv('g', { class: 'phases' }, svg);
      for (const p of dev.phases) {
        if (!inView(p[0], p[1])) continue;
        const w = Math.max(1, X(p[1]) - X(p[0]));
        const r = sv('rect', { class: 'phase', 'data-phase': p[2], x: X(p[0]), y: m.t - strip, width: w, height: strip - 4, fill: PHASE[p[2]] }, phases);
        sv('title', { text: p[2] + ' (' + fmtX(dev, p[0]) + ' to ' + fmtX(dev, p[1]) + ')' }, r);
        sv('rect', { class: 'phase-tint', x: X(p[0]), y: m.t, width: w, height: ph, fill: PHASE[p[2]] }, marks);
      }
      for (const st of dev.steps) {
        if (!inView(st[0], st[0])) continue;
        const l = sv('line', { class: 'step', x1: X(st[0]), x2: X(st[0]), y1: m.t - strip, y2: m.t + ph }, phases);
        sv('title', { text: 'end of step ' + st[1] }, l);
      }
      // What a ledger row asked to see (its moment or span), over the marks.
      if (chart.focus && chart.focus.x0 != null && inView(chart.focus.x0, chart.focus.x1)) {
        const f = chart.focus;
        sv('rect', { class: 'focus', x: X(f.x0), y: m.t - strip, width: Math.max(2, X(f.x1) - X(f.x0)), height: ph + strip }, marks);
      }
      // Stacked step areas: each point's state holds until the next one. Points are first folded
      // into 2-pixel columns: a column shows its highest state across its width (a spike shorter
      // than a pixel stays visible) and then its last state, which holds until the next column.
      const COL = 2;
      const cols = [];
      // A column's highest state: by what is stacked under PyTorch's cache where the cache is a
      // band (report_model.h), else by the live bytes.
      const height = stackHeight(dev);
      {
        let col = -1, best = -1, last = -1;
        const flush = () => {
          if (best < 0) return;
          cols.push([Math.max(m.l, col), best]);
          if (last !== best && (P.total[last] !== P.total[best] || P.reserved[last] !== P.reserved[best] || height(last) !== height(best))) cols.push([col + COL, last]);
        };
        for (let i = lo; i <= hi; i++) {
          const c = Math.floor(XU(U[i]) / COL) * COL;
          if (c !== col) { flush(); col = c; best = i; }
          else if (height(i) > height(best)) best = i;
          last = i;
        }
        flush();
      }
      const xs = cols.map((c) => c[0]);
      xs.push(XU(u1));
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
        if (!inView(o[0], o[0])) continue;
        sv('line', { class: 'oom', x1: X(o[0]), x2: X(o[0]), y1: m.t, y2: m.t + ph }, svg);
        const nearEnd = X(o[0]) > m.l + pw - 40;
        // Labelled at the bottom: the peak's label sits at the top, often at the same moment.
        const t = sv('text', { class: 'oom', x: X(o[0]) + (nearEnd ? -3 : 3), y: m.t + ph - 4, 'text-anchor': nearEnd ? 'end' : 'start', text: 'OOM' }, svg);
        sv('title', { text: 'OOM: asked ' + fmtBytes(o[1]) + ', device had ' + fmtBytes(o[2]) + ' free' }, t);
      }
      if (inView(dev.peak.x, dev.peak.x)) {
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
    const toU = (ev) => {
      const L = chart.layout;
      const r = svg.getBoundingClientRect();
      const px = (ev.clientX - r.left) * (svg.viewBox.baseVal.width / r.width);
      return { px, u: L.u0 + (Math.min(Math.max(px, L.m.l), L.m.l + L.pw) - L.m.l) / L.pw * (L.u1 - L.u0) };
    };
    svg.addEventListener('mousedown', (ev) => { dragFrom = toU(ev); ev.preventDefault(); });
    window.addEventListener('mouseup', (ev) => {
      if (!dragFrom) return;
      const to = toU(ev);
      const a = Math.min(dragFrom.u, to.u);
      const b = Math.max(dragFrom.u, to.u);
      const wide = Math.abs(to.px - dragFrom.px) > 4;
      dragFrom = null;
      chart.brush.setAttribute('visibility', 'hidden');
      if (wide && b > a) { chart.view = [a, b]; draw(); }
    });
    svg.addEventListener('dblclick', () => { chart.view = null; draw(); });
    svg.addEventListener('mousemove', (ev) => {
      const L = chart.layout;
      const A = chart.axis;
      const at = toU(ev);
      if (dragFrom) {
        chart.brush.setAttribute('visibility', 'visible');
        chart.brush.setAttribute('x', Math.min(dragFrom.px, at.px));
        chart.brush.setAttribute('width', Math.abs(at.px - dragFrom.px));
      }
      // The state at u is the last point at or before it.
      let a = 0, b = n - 1;
      while (a < b) { const mid = (a + b + 1) >> 1; if (A.U[mid] <= at.u) a = mid; else b = mid - 1; }
      chart.cursor.setAttribute('x1', L.XU(at.u));
      chart.cursor.setAttribute('x2', L.XU(at.u));
      const when = dev.time_axis ? fmtX(dev, Math.round(A.unwarp(at.u))) : 'event ' + Math.round(A.unwarp(at.u));
      const where = A.mode === 'step' ? ' (' + A.stepAt(at.u) + ')' : A.mode === 'event' && dev.time_axis ? ' (event ' + P.entry[a].toLocaleString('en') + ')' : '';
      tip.replaceChildren(el('div', { text: when + where + ': ' + fmtBytes(P.total[a]) + ' live' + (P.allocated ? ', ' + fmtBytes(P.allocated[a]) + ' allocated' : '') + (P.reserved[a] ? ', ' + fmtBytes(P.reserved[a]) + ' reserved' : '') + (P.driver && P.driver[a] ? ', ' + fmtBytes(P.driver[a]) + ' driver-visible' : '') }));
      // The band under the pointer: its bytes then, what it is, and where it is a line, that
      // line's largest stack (from the live tables).
      const r0 = svg.getBoundingClientRect();
      const py = (ev.clientY - r0.top) * (svg.viewBox.baseVal.height / r0.height);
      const value = (L.m.t + L.ph - py) / L.ph * L.ymax;
      let under = -1;
      for (let s = 0, base = 0; s < dev.series.length; s++) {
        const v = P.v[s][a];
        if (v > 0 && value >= base && value < base + v) under = s;
        base += v;
      }
      const rows = dev.series.map((s, i) => [i, P.v[i][a]]).filter((r) => r[1] > 0 || r[0] === under).sort((p, q) => q[1] - p[1]).slice(0, 8);
      if (under >= 0 && !rows.some((r) => r[0] === under)) rows.push([under, P.v[under][a]]);
      for (const [i, v] of rows) tip.append(el('div', { class: i === under ? 'under' : '' }, el('span', { style: 'color:' + color(dev, i), text: '\u25A0 ' }), fmtBytes(v) + '  ' + seriesName(dev, i)));
      if (under >= 0 && !dev.by_category && !isCache(dev, under)) {
        const g = [dev.at_peak, dev.at_exit].map((t) => t.groups.find((x) => x.site === dev.series[under])).find((x) => x);
        const frames = g && g.stacks.length ? data.stacks[g.stacks[0][0]] || [] : [];
        for (const f of frames.slice(0, 6)) tip.append(el('div', { class: 'frame', text: '  ' + frameText(f) }));
      }
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
      if (chart.focus && chart.focus.series != null) return i === chart.focus.series;
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
  // Each OOM's verdict as `report` prints it first (pytorch/oom_verdict.h): the verdict line and
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
      // The what-if table (`whatif`'s): would another configuration of the allocator have run?
      if (data.whatif) card.append(el('div', { class: 'sub', text: "what if: PyTorch's allocator replayed up to this OOM under other configurations:" }), whatifTable(data.whatif, o.device));
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

  // ---------- the PyTorch ledger ----------
  // `report`'s ledger (ledger.h) as `report --format json` wrote it (data.ledger): per phase of the
  // first and the steady step what it added by category and by line, the peaks by category with
  // PyTorch's cache, other libraries and the CUDA context, growth per step with its lines. Every
  // number carries its place in that document (data-ledger, a JSON path) and its bytes
  // (data-bytes): the browser test holds them to report's. Clicking a row shows its bytes in the
  // chart: its span or moment, its category's band alone.
  function num(bytes, path, signed) {
    return el('td', { class: 'num', 'data-bytes': bytes, 'data-ledger': JSON.stringify(path), text: signed ? fmtDelta(bytes) : fmtBytes(bytes) });
  }
  function catName(c) {
    return (CATEGORY[c] || [null, c.replace(/_/g, ' ')])[1];
  }
  function ledgerSection(dev, chart, parent, k) {
    const d = data.ledger.devices[k];
    const L = data.ledger;
    const unit = L.training ? 'step' : 'iteration';
    const box = el('div', { class: 'ledger', 'data-device': dev.device });
    box.append(el('h3', { text: 'PyTorch ledger (' + plural(L.steps, unit) + ', ' + L.complete_steps + ' complete): click a row to see its bytes in the chart' }));
    // A category counts blocks; where its tensors' own bytes differ they are named beside it
    // (ledger.h categories_text: the text report's "(tensors ...)").
    const tensorsNote = (t, b, f) => (t && t !== b ? ' (tensors ' + f(t) + ')' : '');
    const seriesOf = (cat) => (dev.by_category && dev.series.indexOf(cat) >= 0 ? dev.series.indexOf(cat) : null);
    let focused = null;
    const focus = (row, f) => {
      if (focused) focused.classList.remove('focused');
      if (focused === row) { focused = null; chart.focus = null; }
      else { focused = row; row.classList.add('focused'); chart.focus = f; }
      chart.draw();
    };
    const clickable = (row, f) => { row.classList.add('pick'); row.addEventListener('click', (ev) => { ev.stopPropagation(); focus(row, f); }); return row; };
    const base = ['devices', k];
    // Per phase: allocated before and after, its own peak, what it added by category; its lines
    // in the rows under it.
    const phaseTable = (step, key, title) => {
      box.append(el('h4', { text: title }));
      const t = el('table', { class: 'ledger-phases', 'data-step': key });
      t.append(el('thead', {}, el('tr', {}, ...['phase', 'allocated before', 'after', 'added', 'peak in phase', 'reserved after', 'added by category'].map((h) => el('th', { text: h })))));
      const tb = el('tbody');
      step.phases.forEach((p, i) => {
        const path = base.concat([key, 'phases', i]);
        const span = { x0: p.begin_us == null ? dev.x0 : p.begin_us, x1: p.end_us == null ? dev.x1 : p.end_us, series: null };
        const cats = el('td', { class: 'cats' });
        for (const [c, b] of Object.entries(p.added_by_category)) {
          const s = el('span', { class: 'cat pick', 'data-category': c, 'data-bytes': b, 'data-ledger': JSON.stringify(path.concat(['added_by_category', c])) }, el('i', { style: 'background:' + (CATEGORY[c] || [OTHER])[0] }), catName(c) + ' ' + fmtDelta(b) + tensorsNote((p.added_tensor_bytes_by_category || {})[c], b, fmtDelta));
          s.addEventListener('click', (ev) => { ev.stopPropagation(); focus(s, Object.assign({}, span, { series: seriesOf(c) })); });
          cats.append(s, ' ');
        }
        if (!Object.keys(p.added_by_category).length) cats.append('nothing');
        // "forward 2" only where the step has several forwards (ledger.h phase_label).
        const name = p.phase + (p.micro_step != null && step.phases.filter((q) => q.phase === p.phase).length > 1 ? ' ' + p.micro_step : '');
        tb.append(clickable(el('tr', { class: 'phase-row', 'data-phase': p.phase },
          el('td', {}, el('i', { class: 'swatch', style: 'background:' + (PHASE[p.phase] || OTHER) }), name),
          num(p.allocated_before_bytes, path.concat(['allocated_before_bytes'])),
          num(p.allocated_after_bytes, path.concat(['allocated_after_bytes'])),
          el('td', { class: 'num delta', text: fmtDelta(p.allocated_after_bytes - p.allocated_before_bytes) }),
          num(p.allocated_peak_bytes, path.concat(['allocated_peak_bytes'])),
          num(p.reserved_after_bytes, path.concat(['reserved_after_bytes'])),
          cats), span));
        // By module (ledger.h), where the run names modules: one row, the largest first.
        if (p.added_by_module && p.added_by_module.length) {
          const mods = el('td', { class: 'modules', colspan: 7 }, 'by module: ');
          p.added_by_module.forEach((m, j) => {
            mods.append(el('span', { class: 'module', 'data-bytes': m.bytes, 'data-ledger': JSON.stringify(path.concat(['added_by_module', j, 'bytes'])), text: m.module + ' ' + fmtDelta(m.bytes) }), j + 1 < p.added_by_module.length ? ', ' : '');
          });
          tb.append(el('tr', { class: 'module-row' }, mods));
        }
        p.added_by_site.forEach((s, j) => {
          tb.append(clickable(el('tr', { class: 'line-row' },
            el('td', { class: 'site', colspan: 3, text: s.site }),
            num(s.bytes, path.concat(['added_by_site', j, 'bytes']), true),
            el('td', { colspan: 2, text: catName(s.category) }),
            el('td', { class: 'count', text: s.count ? plural(s.count, 'tensor') + ' allocated' : '' })), Object.assign({}, span, { series: seriesOf(s.category) })));
        });
      });
      t.append(tb);
      box.append(t);
    };
    phaseTable(d.first_step, 'first_step', unit + ' ' + d.first_step.step + ', the first');
    if (d.steady_step) phaseTable(d.steady_step, 'steady_step', unit + ' ' + d.steady_step.step + ', the steady state (the last complete one)');
    // Gradients held outside PyTorch's blocks (a CUDA graph pool's replay outputs), apart from the
    // lists that add up to memory_allocated(): the ledger's held_outside_blocks.
    const held = d.held_outside_blocks;
    if (held) {
      const hp = base.concat(['held_outside_blocks']);
      for (const [key, why] of [['gradient_bytes', held.why], ['outside_segments_bytes', held.outside_segments_why]]) {
        if (!held[key]) continue;
        box.append(el('div', { class: 'held', 'data-held': key },
          'held outside PyTorch\'s allocated blocks at the end of ' + unit + ' ' + held.step + ': gradient ',
          el('b', { 'data-bytes': held[key], 'data-ledger': JSON.stringify(hp.concat([key])), text: fmtBytes(held[key]) }),
          ', ' + why));
      }
    }
    // The peaks: what PyTorch's tensors were, by category and line; its cache, other libraries,
    // the CUDA context.
    box.append(el('h4', { text: 'At the peaks' }));
    const pt = el('table', { class: 'ledger-peaks' });
    pt.append(el('thead', {}, el('tr', {}, ...['moment', 'when', 'allocated', 'reserved', 'PyTorch tensors by category', 'cached free', 'other libraries', 'CUDA context'].map((h) => el('th', { text: h })))));
    const ptb = el('tbody');
    for (const key of ['allocated_peak', 'reserved_peak']) {
      const p = d[key];
      const path = base.concat([key]);
      const at = { x0: p.time_us, x1: p.time_us, series: null };
      const cats = el('td', { class: 'cats' });
      for (const [c, b] of Object.entries(p.by_category)) {
        const s = el('span', { class: 'cat pick', 'data-category': c, 'data-bytes': b, 'data-ledger': JSON.stringify(path.concat(['by_category', c])) }, el('i', { style: 'background:' + (CATEGORY[c] || [OTHER])[0] }), catName(c) + ' ' + fmtBytes(b) + tensorsNote((p.tensor_bytes_by_category || {})[c], b, fmtBytes));
        s.addEventListener('click', (ev) => { ev.stopPropagation(); focus(s, Object.assign({}, at, { series: seriesOf(c) })); });
        cats.append(s, ' ');
      }
      const libs = el('td');
      for (const [lib, b] of Object.entries(p.other_libraries)) libs.append(el('span', { class: 'lib', 'data-bytes': b, 'data-ledger': JSON.stringify(path.concat(['other_libraries', lib])), text: lib + ' ' + fmtBytes(b) }), ' ');
      if (!Object.keys(p.other_libraries).length) libs.append('none');
      ptb.append(clickable(el('tr', { class: 'peak-row', 'data-moment': key },
        el('td', { text: key.replace('_', ' ') }),
        el('td', { text: fmtX(dev, p.time_us) + ', ' + unit + ' ' + p.step + ', ' + p.phase }),
        num(p.allocated_bytes, path.concat(['allocated_bytes'])),
        num(p.reserved_bytes, path.concat(['reserved_bytes'])),
        cats,
        num(p.cached_free_bytes, path.concat(['cached_free_bytes'])),
        libs,
        p.context_bytes == null ? el('td', { class: 'num', text: 'not measured' }) : num(p.context_bytes, path.concat(['context_bytes']))), at));
      p.by_site.forEach((s, j) => {
        ptb.append(clickable(el('tr', { class: 'line-row' },
          el('td', { class: 'site', colspan: 2, text: s.site }),
          num(s.bytes, path.concat(['by_site', j, 'bytes'])),
          el('td', { text: catName(s.category) }),
          el('td', { colspan: 4, class: 'count', text: plural(s.count, 'tensor') })), Object.assign({}, at, { series: seriesOf(s.category) })));
      });
    }
    pt.append(ptb);
    box.append(pt);
    // Growth per step: what later steps left behind, by line.
    const g = d.growth;
    const gp = base.concat(['growth']);
    box.append(el('h4', { text: 'Growth per ' + unit }));
    if (!g.judged) {
      box.append(el('div', { class: 'growth', 'data-judged': 'false', text: 'not judged: ' + g.why }));
    } else {
      const end = (k) => { const s = dev.steps.find((st) => st[1] === k); return s ? s[0] : null; };
      const span = { x0: end(g.first_counted_step - 1) || dev.x0, x1: end(g.end_step) || dev.x1, series: null };
      const counted = g.first_counted_step === g.last_counted_step ? unit + ' ' + g.first_counted_step : unit + 's ' + g.first_counted_step + ' to ' + g.last_counted_step;
      const head = el('div', { class: 'growth', 'data-judged': 'true' }, el('b', { 'data-bytes': g.bytes_per_step, 'data-ledger': JSON.stringify(gp.concat(['bytes_per_step'])), text: (g.bytes_per_step ? 'grows ' : 'does not grow: ') + fmtBytes(g.bytes_per_step) + ' a ' + unit }),
        ' (tensors of ' + counted + ' still live at the end of ' + unit + ' ' + g.end_step + ', after a warm-up of ' + plural(g.warmup_steps, unit) + ': ', el('span', { 'data-bytes': g.live_bytes, 'data-ledger': JSON.stringify(gp.concat(['live_bytes'])), text: fmtBytes(g.live_bytes) }), ')');
      box.append(head);
      if (g.by_site.length) {
        const gt = el('table', { class: 'ledger-growth' });
        const gtb = el('tbody');
        g.by_site.forEach((s, j) => {
          gtb.append(clickable(el('tr', { class: 'line-row' }, el('td', { text: 'grows' }), num(s.bytes, gp.concat(['by_site', j, 'bytes'])), el('td', { text: 'a ' + unit + ' at' }), el('td', { class: 'site', text: s.site }), el('td', { text: catName(s.category) })), Object.assign({}, span, { series: seriesOf(s.category) })));
        });
        gt.append(gtb);
        box.append(gt);
      }
    }
    parent.append(box);
  }

  // ---------- what-if ----------
  // `whatif --format json`'s rows (whatif.h): the recorded configuration first, then the others.
  function whatifTable(w, device) {
    const box = el('div', { class: 'whatif' });
    if (w.why) { box.append(el('div', { class: 'sub', text: 'what-if: no prediction (' + w.why + ')' })); return box; }
    const rows = w.rows.filter((r) => device == null || r.device === device);
    const t = el('table', { class: 'whatif', 'data-device': device == null ? '' : device });
    t.append(el('thead', {}, el('tr', {}, ...['configuration', 'reserved peak', 'allocated peak', 'fragmentation', 'outcome'].map((h) => el('th', { text: h })))));
    const tb = el('tbody');
    for (const r of rows) {
      const f = r.first_failing_request;
      const outcome = !r.oom ? 'fits' + (r.budget_bytes != null ? ' in ' + fmtBytes(r.budget_bytes) : '') : 'out of memory asking ' + fmtBytes(f.requested_bytes) + ' at ' + f.site + (f.recorded_oom ? ' (as recorded)' : '');
      tb.append(el('tr', { class: 'whatif-row' + (r.oom ? ' bad' : ' good'), 'data-conf': r.alloc_conf, 'data-device': r.device },
        el('td', { text: (r.alloc_conf || 'defaults') + (r.recorded ? ' (recorded)' : '') }),
        el('td', { class: 'num', 'data-bytes': r.reserved_peak_bytes, text: fmtBytes(r.reserved_peak_bytes) }),
        el('td', { class: 'num', 'data-bytes': r.allocated_peak_bytes, text: fmtBytes(r.allocated_peak_bytes) }),
        el('td', { class: 'num', 'data-bytes': r.fragmentation_bytes, text: fmtBytes(r.fragmentation_bytes) + ' (' + (r.fragmentation_share * 100).toFixed(1) + '%)' }),
        el('td', { class: 'outcome', text: outcome })));
    }
    t.append(tb);
    box.append(t);
    return box;
  }
  function whatifPage() {
    const w = data.whatif;
    app.append(el('h1', { text: 'cumemtrace whatif: ' + data.source }));
    app.append(el('div', { class: 'sub', text: "PyTorch's caching allocator replayed from the recorded requests under the recorded configuration and others (the same table as `cumemtrace whatif`)." }));
    for (const d of w.devices) {
      app.append(el('h2', { text: 'cuda:' + d.device }));
      app.append(el('div', { class: 'sub', text: plural(d.requests, 'request') + ' replayed; ' + plural(d.recorded_segment_events, 'segment event') + ' reproduced exactly under the recorded configuration' + (d.empty_cache_calls ? '; ' + plural(d.empty_cache_calls, 'empty_cache() call') : '') + '; budget: ' + d.budget_source + (d.torch_version ? '; torch ' + d.torch_version : '') }));
      app.append(whatifTable(w, d.device));
    }
  }

  // ---------- diff ----------
  // `diff --format json`'s document (diff.h): per device, PyTorch's peaks, phases and categories,
  // then the lines whose bytes changed.
  function diffCells(base, now, change, signed) {
    // What a phase added is signed (it may free more than it makes), as diff prints it.
    const f = (v) => (signed || v < 0 ? fmtDelta(v) : fmtBytes(v));
    return [el('td', { class: 'num', 'data-bytes': base, text: f(base) }),
      el('td', { class: 'num', 'data-bytes': now, text: f(now) }),
      el('td', { class: 'num ' + (change > 0 ? 'up' : change < 0 ? 'down' : ''), 'data-bytes': change, text: fmtDelta(change) })];
  }
  function diffPage() {
    const D = data.diff;
    app.append(el('h1', { text: 'cumemtrace diff: ' + data.source }));
    app.append(el('div', { class: 'sub', text: 'base: ' + D.base }));
    app.append(el('div', { class: 'sub', text: 'new: ' + D.new }));
    const label = (device) => { const d = D.devices.find((x) => x.device === device); return d && d.label ? d.label : 'device ' + device; };
    const cards = el('div', { class: 'cards' });
    for (const d of D.devices) cards.append(el('div', { class: 'card' }, el('span', { text: (d.label || 'device ' + d.device) + ' peak' }), el('b', { class: d.peak_change_bytes > 0 ? 'up' : '', text: fmtDelta(d.peak_change_bytes) }), el('span', { text: fmtBytes(d.base_peak_bytes) + ' \u2192 ' + fmtBytes(d.new_peak_bytes) })));
    app.append(cards);
    const table = (cls, heads, rows) => {
      const t = el('table', { class: 'diff ' + cls });
      t.append(el('thead', {}, el('tr', {}, ...heads.map((h) => el('th', { text: h })))));
      const tb = el('tbody');
      rows.forEach((r) => tb.append(r));
      t.append(tb);
      return t;
    };
    app.append(el('h2', { text: 'Per device' }));
    app.append(table('devices', ['device', 'base peak', 'new peak', 'change', 'base live at exit', 'new live at exit', 'change'],
      D.devices.map((d) => el('tr', { class: 'diff-row', 'data-kind': 'device', 'data-name': d.label || 'device ' + d.device }, el('td', { text: d.label || 'device ' + d.device }), ...diffCells(d.base_peak_bytes, d.new_peak_bytes, d.peak_change_bytes), ...diffCells(d.base_live_bytes, d.new_live_bytes, d.live_change_bytes)))));
    if (D.pytorch) {
      for (const [kind, title] of [['peaks', "PyTorch's peaks"], ['phases', 'What each phase added (the steady step)'], ['categories', 'By category at the peaks']]) {
        app.append(el('h2', { text: title }));
        app.append(table(kind, ['device', 'what', 'base', 'new', 'change'],
          D.pytorch[kind].map((v) => el('tr', { class: 'diff-row', 'data-kind': kind, 'data-name': v.name, 'data-device': v.device }, el('td', { text: label(v.device) }), el('td', { text: v.name.replace(/_/g, ' ') }), ...diffCells(v.base_bytes, v.new_bytes, v.change_bytes, kind === 'phases')))));
      }
    } else if (D.pytorch_note) {
      app.append(el('div', { class: 'sub', text: 'PyTorch ledgers: ' + D.pytorch_note }));
    }
    app.append(el('h2', { text: 'Lines whose bytes changed (' + D.sites.length + ')' }));
    if (!D.sites.length) app.append(el('div', { class: 'empty', text: 'no line changed' }));
    else app.append(table('sites', ['line', 'device', 'base at peak', 'new at peak', 'change', 'base at exit', 'new at exit', 'change'],
      D.sites.map((s) => el('tr', { class: 'diff-row', 'data-kind': 'site', 'data-name': s.site, 'data-device': s.device }, el('td', { class: 'site', text: s.site }), el('td', { text: label(s.device) }), ...diffCells(s.base_peak_bytes, s.new_peak_bytes, s.peak_change_bytes), ...diffCells(s.base_live_bytes, s.new_live_bytes, s.live_change_bytes)))));
  }

  // ---------- job ----------
  // `report DIR --format json`'s rank table (rank_table.h): a row per process and device, the
  // flagged values, where each flagged rank diverges from the median and the lines that make the
  // difference; then each process's chart, on one scale so their heights compare.
  function jobPage() {
    const R = data.ranks;
    app.append(el('h1', { text: 'cumemtrace job: ' + data.source }));
    const procs = new Set(R.rows.map((r) => r.process));
    app.append(el('div', { class: 'sub', text: procs.size + (procs.size === 1 ? ' process' : ' processes') + '; a value is flagged when it is more than ' + Math.round(R.thresholds.share * 100) + '% and ' + fmtBytes(R.thresholds.bytes) + ' off its slot\'s median' + (data.skipped_snapshots ? '; ' + plural(data.skipped_snapshots, 'snapshot') + ' written while a process ran left out' : '') }));
    for (const u of data.unreadable) app.append(el('div', { class: 'warn', text: 'unreadable: ' + u.error }));
    const flaggedRows = R.rows.filter((r) => r.flagged.length);
    app.append(el('div', { class: flaggedRows.length ? 'verdict warn' : 'verdict', text: flaggedRows.length ? plural(flaggedRows.length, 'rank') + ' off the median: ' + flaggedRows.map((r) => r.process + ' (' + r.flagged.join(', ') + ')').join('; ') : 'No rank is off the median.' }));
    // The job's first OOM (job_oom.h), as `report DIR` says it: who, when, why, the request's
    // line and what every other process held at that moment.
    const F = R.first_oom;
    if (F) {
      const sec = el('section', { class: 'first-oom' });
      sec.append(el('h2', { text: 'First OOM of the job' + (F.ooms > 1 ? ' (the first of ' + plural(F.ooms, 'OOM') + ' in ' + plural(F.processes_with_oom, 'process') + ')' : '') }));
      sec.append(el('div', { class: 'verdict warn', text: F.process + ' (pid ' + F.pid + ') on cuda:' + F.device + ' at +' + (F.since_start_us / 1e6).toFixed(6) + ' s since the job\'s start: ' + F.line }));
      sec.append(el('div', { class: 'sub', text: 'the request: ' + fmtBytes(F.requested_bytes) + ' at ' + F.site }));
      if (F.others.length) {
        const ot = el('table', { class: 'oom-others' });
        ot.append(el('thead', {}, el('tr', {}, ...['the other processes then', 'device', 'held', 'PyTorch allocated', 'PyTorch reserved'].map((h) => el('th', { text: h })))));
        const otb = el('tbody');
        for (const o of F.others) otb.append(el('tr', { class: 'oom-other', 'data-process': o.process }, el('td', { text: o.process }), el('td', { text: 'cuda:' + o.device }),
          el('td', { class: 'num', 'data-bytes': o.started ? o.bytes : '', text: o.started ? fmtBytes(o.bytes) : 'not started yet' }),
          el('td', { class: 'num', text: o.allocated_bytes == null ? '\u2013' : fmtBytes(o.allocated_bytes) }),
          el('td', { class: 'num', text: o.reserved_bytes == null ? '\u2013' : fmtBytes(o.reserved_bytes) })));
        ot.append(otb);
        sec.append(ot);
      }
      app.append(sec);
    }
    app.append(el('h2', { text: 'Ranks side by side' }));
    // Besides the compared columns, without a median: the OOMs on each device (when the job had
    // any) and what its final snapshot held at the end (rank_table.h).
    const anyOom = R.rows.some((r) => r.ooms > 0);
    const t = el('table', { class: 'ranks' });
    t.append(el('thead', {}, el('tr', {}, el('th', { text: 'process' }), el('th', { text: 'device' }), ...R.columns.map((c) => el('th', { text: c })), ...(anyOom ? [el('th', { text: 'OOMs' })] : []), el('th', { text: 'live at exit' }))));
    const tb = el('tbody');
    for (const r of R.rows) {
      tb.append(el('tr', { class: 'rank-row' + (r.flagged.length ? ' flagged' : ''), 'data-process': r.process, 'data-device': r.device },
        el('td', { text: r.process }), el('td', { text: 'cuda:' + r.device + (r.slot ? ' (slot ' + r.slot + ')' : '') }),
        ...R.columns.map((c) => el('td', { class: 'num' + (r.flagged.includes(c) ? ' flag' : ''), 'data-column': c, 'data-bytes': r.values[c] == null ? '' : r.values[c], text: r.values[c] == null ? '\u2013' : fmtBytes(r.values[c]) })),
        ...(anyOom ? [el('td', { class: 'num' + (r.ooms ? ' flag' : ''), 'data-column': 'OOMs', text: String(r.ooms) })] : []),
        el('td', { class: 'num', 'data-column': 'live at exit', 'data-bytes': r.live_at_exit_bytes, text: fmtBytes(r.live_at_exit_bytes) })));
    }
    R.medians.forEach((m, slot) => {
      tb.append(el('tr', { class: 'median-row' }, el('td', { text: 'median' }), el('td', { text: 'slot ' + slot }), ...R.columns.map((c) => el('td', { class: 'num', text: m[c] == null ? '\u2013' : fmtBytes(m[c]) })), ...(anyOom ? [el('td')] : []), el('td')));
    });
    t.append(tb);
    app.append(t);
    for (const r of flaggedRows) {
      const sec = el('section', { class: 'flagged-rank', 'data-process': r.process });
      sec.append(el('h3', { text: r.process + ' cuda:' + r.device + ': ' + r.flagged.map((c) => c + ' ' + fmtBytes(r.values[c]) + ' vs median ' + fmtBytes(R.medians[r.slot][c])).join(', ') }));
      const dv = r.divergence;
      if (dv) sec.append(el('div', { class: 'divergence', text: 'diverges from ' + r.median_process + (dv.step != null ? ' at the end of step ' + dv.step : ' at +' + (dv.since_start_us / 1e6).toFixed(3) + ' s since its start') + ': ' + dv.measure + ' ' + fmtBytes(dv.bytes) + ' vs ' + fmtBytes(dv.median_bytes) }));
      else if (r.median_process) sec.append(el('div', { class: 'divergence', text: 'no moment found where it parts from ' + r.median_process }));
      if (r.lines.length) {
        const lt = el('table', { class: 'rank-lines' });
        lt.append(el('thead', {}, el('tr', {}, ...['line', 'this rank at its peak', 'median rank', 'change'].map((h) => el('th', { text: h })))));
        const ltb = el('tbody');
        for (const l of r.lines) ltb.append(el('tr', { class: 'line-row' }, el('td', { class: 'site', text: l.site }), el('td', { class: 'num', text: fmtBytes(l.bytes) }), el('td', { class: 'num', text: fmtBytes(l.median_bytes) }), el('td', { class: 'num', 'data-bytes': l.change_bytes, text: fmtDelta(l.change_bytes) })));
        lt.append(ltb);
        sec.append(lt);
      }
      app.append(sec);
    }
    // A large job charts only the processes it shows in detail (html_report.h kJobChartsAll).
    app.append(el('h2', { text: data.charts.length < procs.size ? 'The processes shown in detail, on one scale (' + data.charts.length + ' of ' + procs.size + '; a job of at most ' + data.charts_all_up_to + ' charts each)' : 'Each process, on one scale' }));
    let ymax = 1;
    for (const c of data.charts) for (const d of c.devices) for (let i = 0; i < d.points.total.length; i++) ymax = Math.max(ymax, d.points.total[i], d.points.reserved[i]);
    const grid = el('div', { class: 'multiples' });
    for (const c of data.charts) for (const d of c.devices) grid.append(miniChart(c.process, d, ymax * 1.08));
    app.append(grid);
  }
  // One process's memory, small: the stacked series on its default axis, the peak marked.
  function miniChart(name, dev, ymax) {
    const box = el('div', { class: 'mini', 'data-process': name, 'data-device': dev.device });
    box.append(el('div', { class: 'mini-title', text: name + ' cuda:' + dev.device + ': peak ' + fmtBytes(dev.peak.bytes) }));
    const svg = sv('svg', { class: 'mini-chart' });
    box.append(svg);
    const W = 420, H = 150, m = { l: 54, r: 6, t: 6, b: 18 };
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    const A = makeAxis(dev, axisModes(dev)[0]);
    const P = dev.points;
    const n = P.x.length;
    const XU = (u) => m.l + (u - A.u0) / (A.u1 - A.u0) * (W - m.l - m.r);
    const Y = (y) => H - m.b - y / ymax * (H - m.t - m.b);
    for (const k of [0, 0.5, 1]) sv('text', { class: 'tick', x: m.l - 4, y: Y(ymax / 1.08 * k) + 4, 'text-anchor': 'end', text: fmtBytes(Math.round(ymax / 1.08 * k)) }, svg);
    const ticks = A.ticks(A.u0, A.u1);
    const step = Math.max(1, Math.ceil(ticks.length / 4));
    ticks.forEach(([u, text], k) => { if (k % step === 0) sv('text', { class: 'tick', x: XU(u), y: H - 4, 'text-anchor': 'middle', text }, svg); });
    const base = new Float64Array(n);
    for (let s = 0; s < dev.series.length; s++) {
      let top = '', bottom = [];
      for (let i = 0; i < n; i++) {
        const xa = XU(A.U[i]).toFixed(1), xb = XU(i + 1 < n ? A.U[i + 1] : A.u1).toFixed(1);
        const yb = Y(base[i]);
        base[i] += P.v[s][i];
        top += (i ? 'L' : 'M') + xa + ',' + Y(base[i]).toFixed(1) + 'H' + xb;
        bottom.push('L' + xb + ',' + yb.toFixed(1) + 'H' + xa);
      }
      const p = sv('path', { class: 'series', d: top + bottom.reverse().join('') + 'Z', fill: color(dev, s) }, svg);
      sv('title', { text: seriesName(dev, s) }, p);
    }
    const px = XU(A.warp(dev.peak.x));
    sv('line', { class: 'peak', x1: px, x2: px, y1: Y(0), y2: Y(dev.peak.bytes) }, svg);
    return box;
  }

  // ---------- page ----------
  function reportPage() {
    header();
    oomCards();
    if (!data.devices.length) app.append(el('div', { class: 'empty', text: 'This snapshot has no device activity.' }));
    data.devices.forEach((dev) => {
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
      note.push(dev.by_category ? 'stacked by category (PyTorch\'s tensors by what they are for, other libraries, PyTorch\'s cache)' : 'stacked by the ' + plural(dev.series.length - (dev.cache_series ? 1 : 0), 'allocation site') + ' with the most byte-time' + (dev.cache_series ? ' (PyTorch\'s tensors by their lines, its cache a band of its own)' : ''));
      sec.append(el('div', { class: 'sub', text: note.join('; ') + '.' }));
      const chart = makeChart(dev, sec);
      const k = data.ledger ? data.ledger.devices.findIndex((d) => d.device === dev.device) : -1;
      if (k >= 0) ledgerSection(dev, chart, sec, k);
      layers(dev, sec);
      const tables = el('div', { class: 'tables' });
      tables.append(liveTable(dev, dev.at_peak, 'Live at peak (' + fmtX(dev, dev.peak.x) + ')', 'peak'), liveTable(dev, dev.at_exit, 'Live ' + endMoment(), 'exit'));
      sec.append(tables);
      histogram(dev, sec);
    });
  }
  if (data.page === 'job') jobPage();
  else if (data.page === 'diff') diffPage();
  else if (data.page === 'whatif') whatifPage();
  else reportPage();
  for (const c of charts) c.draw();
  // Links can open the report searched and zoomed: #search=TEXT&zoom=FROM,TO (fractions of the
  // chart's axis) and on another axis: #axis=time|compressed|step|event.
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.get('axis')) for (const c of charts) if (axisModes(c.dev).includes(params.get('axis'))) c.setAxis(params.get('axis'));
  if (params.get('zoom')) {
    const [a, b] = params.get('zoom').split(',').map(Number);
    if (a >= 0 && b > a && b <= 1) {
      for (const c of charts) {
        const span = c.axis.u1 - c.axis.u0;
        c.view = [c.axis.u0 + a * span, c.axis.u0 + b * span];
        c.draw();
      }
    }
  }
  if (params.get('search') && document.getElementById('search')) {
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
