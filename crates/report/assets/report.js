// vramscope report viewer. Self-contained: no network, no libraries.
// Strings from the snapshot are only ever written with textContent or
// drawn on canvas, never parsed as markup.
(function () {
  'use strict';

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const metrics = { loadMs: 0, firstPaintMs: 0, lastRenderMs: 0, renders: 0 };
  const T0 = performance.now();

  // ---------- formatting ----------
  const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  function fmtBytes(n) {
    if (!isFinite(n)) return '?';
    const neg = n < 0; n = Math.abs(n);
    if (n < 1024) return (neg ? '-' : '') + Math.round(n) + ' B';
    let u = 0;
    while (n >= 1024 && u < UNITS.length - 1) { n /= 1024; u++; }
    return (neg ? '-' : '') + n.toFixed(2) + ' ' + UNITS[u];
  }
  function fmtCount(n) { return Math.round(n).toLocaleString('en-US'); }
  function fmtDur(us) {
    const a = Math.abs(us);
    if (a < 1000) return us.toFixed(0) + ' µs';
    if (a < 1e6) return (us / 1e3).toFixed(2) + ' ms';
    if (a < 120e6) return (us / 1e6).toFixed(3) + ' s';
    return (us / 60e6).toFixed(1) + ' min';
  }
  function fmtAddr(a) { return '0x' + Math.round(a).toString(16); }

  // ---------- data ----------
  async function loadData() {
    const b64 = $('vramscope-data').textContent.trim();
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
    const buf = await new Response(stream).arrayBuffer();
    const dv = new DataView(buf);
    const hlen = dv.getUint32(0, true);
    const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, hlen)));
    const start = Math.ceil((4 + hlen) / 8) * 8;
    const ctor = { u8: Uint8Array, u16: Uint16Array, u32: Uint32Array, i32: Int32Array, f64: Float64Array };
    const arrays = {};
    for (const a of header.arrays) arrays[a.name] = new ctor[a.type](buf, start + a.offset, a.len);
    return { header, arrays };
  }

  // Fenwick tree over allocation order: prefix sums of live sizes.
  class Fenwick {
    constructor(n) { this.n = n; this.t = new Float64Array(n + 1); }
    build(vals) { // vals: Float64Array(n), O(n)
      const t = this.t; t.fill(0);
      for (let i = 1; i <= this.n; i++) {
        t[i] += vals[i - 1];
        const j = i + (i & -i);
        if (j <= this.n) t[j] += t[i];
      }
    }
    add(i, v) { for (let k = i + 1; k <= this.n; k += k & -k) this.t[k] += v; }
    prefix(i) { let s = 0; for (let k = i; k > 0; k -= k & -k) s += this.t[k]; return s; } // sum of [0, i)
    // Largest i with prefix(i) <= v (i in [0, n]).
    find(v) {
      let pos = 0, rem = v, step = 1;
      while (step * 2 <= this.n) step *= 2;
      for (; step > 0; step >>= 1) {
        const nx = pos + step;
        if (nx <= this.n && this.t[nx] <= rem) { pos = nx; rem -= this.t[nx]; }
      }
      return pos;
    }
  }

  function deviceModel(D, A, S) {
    const p = (n) => A['d' + D.device + '.' + n];
    const m = {
      info: D, nE: D.events, nA: D.allocs,
      t0: p('a_t0'), treq: p('a_treq'), t1: p('a_t1'), size: p('a_size'), addr: p('a_addr'),
      stack: p('a_stack'), stream: p('a_stream'), cat: p('a_cat') || null, meta: p('a_meta') || null,
      s_t0: p('s_t0'), s_t1: p('s_t1'), s_addr: p('s_addr'), s_size: p('s_size'), s_kind: p('s_kind'),
      summary: D.summary,
      csEvent: p('cs_event'), csBytes: p('cs_bytes'),
    };
    const nE = m.nE, nA = m.nA;
    // Event times (µs from the first event), or null.
    if (D.has_time && p('ev_dt')) {
      const dt = p('ev_dt'); const t = new Float64Array(nE); let acc = 0;
      for (let i = 0; i < nE; i++) { acc += dt[i]; t[i] = acc; }
      m.time = t;
    } else m.time = null;
    // Which allocation each event allocates or frees.
    m.evAlloc = new Int32Array(nE).fill(-1);
    m.evFree = new Int32Array(nE).fill(-1);
    let initial = 0;
    for (let a = 0; a < nA; a++) {
      if (m.t0[a] >= 0) m.evAlloc[m.t0[a]] = a; else initial += m.size[a];
      if (m.t1[a] < nE) m.evFree[m.t1[a]] = a;
    }
    // Allocated and reserved after each event (index e+1; 0 = start).
    m.alloc = new Float64Array(nE + 1); m.alloc[0] = initial;
    let cur = initial;
    for (let e = 0; e < nE; e++) {
      const a = m.evAlloc[e], f = m.evFree[e];
      if (a >= 0) cur += m.size[a];
      if (f >= 0) cur -= m.size[f];
      m.alloc[e + 1] = cur;
    }
    const nS = m.s_t0.length;
    const rdelta = new Float64Array(nE + 1);
    let r0 = 0;
    for (let s = 0; s < nS; s++) {
      if (m.s_t0[s] < 0) r0 += m.s_size[s]; else rdelta[m.s_t0[s] + 1] += m.s_size[s];
      if (m.s_t1[s] < nE) rdelta[m.s_t1[s] + 1] -= m.s_size[s];
    }
    m.reserved = new Float64Array(nE + 1); m.reserved[0] = r0;
    for (let e = 1; e <= nE; e++) m.reserved[e] = m.reserved[e - 1] + rdelta[e];
    let mx = 0, mr = 0;
    for (let e = 0; e <= nE; e++) { if (m.alloc[e] > mx) mx = m.alloc[e]; if (m.reserved[e] > mr) mr = m.reserved[e]; }
    m.maxAlloc = mx; m.maxReserved = mr;
    m.peakEvent = D.summary.peak.event_index; // null = start
    m.fen = new Fenwick(nA);
    m.liveBuf = new Float64Array(nA);
    return m;
  }

  // ---------- global state ----------
  let H, A, S, model;             // header, arrays, string table, device model
  let frames;                      // Uint32Array, 4 per frame: file, line, name, kind
  let stackOff, stackFrames, stackSite;
  const view = { x0: 0, x1: 1, y0: 0, y1: 1, axis: 'time' };
  let colorBy = 'site', showReserved = true;
  let highlightCat = -1;           // category index whose allocations stand out, or -1
  let pinned = -1, hovered = -1, selectedEvent = null;
  let searchStacks = null, searchAllocs = null, searchText = '';
  let stackColor = null, siteFrameOfStack = null;

  // ---------- frames and stacks ----------
  const KIND = ['user', 'lib', 'native', 'noise'];
  // C++ frames read as their qualified name without arguments (as in the summary).
  function nativeName(n) {
    const masked = n.split('(anonymous namespace)').join('\u0001');
    const cut = masked.indexOf('(');
    return (cut < 0 ? masked : masked.slice(0, cut)).split('\u0001').join('(anonymous namespace)');
  }
  function frameText(f) {
    const file = S[frames[4 * f]], line = frames[4 * f + 1], name = S[frames[4 * f + 2]], kind = frames[4 * f + 3];
    const label = kind === 2 ? nativeName(name) + ' (C++)' : file + ':' + line + ' in ' + name;
    return { file, line, name, kind, label };
  }
  function stackOf(s) { return s === 0xffffffff ? [] : Array.from(stackFrames.subarray(stackOff[s], stackOff[s + 1])); }
  // The frame a user recognises (first user frame, ...), as the summary
  // picks it; computed when the report was written.
  function siteFrame(s) { const f = stackSite[s]; return f === 0xffffffff ? -1 : f; }
  // `/home/me/project/pkg/model.py:42 in forward` → `pkg/model.py:42 in forward`.
  function shortLabel(f) {
    const t = frameText(f);
    if (t.kind === 2) return t.label;
    const parts = t.file.split(/[\\/]/);
    const file = parts.length > 2 ? '…/' + parts.slice(-2).join('/') : t.file;
    return file + ':' + t.line + ' in ' + t.name;
  }
  function siteCell(f, fallback) {
    const td = el('td', 'wrap', f < 0 ? fallback : shortLabel(f));
    if (f >= 0) td.title = frameText(f).label;
    return td;
  }
  function hashColor(k) {
    let h = (k * 2654435761) >>> 0;
    const hue = h % 360, sat = 55 + (h >>> 9) % 25, lig = 52 + (h >>> 17) % 14;
    return hsl(hue, sat, lig);
  }
  function hsl(h, s, l) {
    s /= 100; l /= 100;
    const k = (n) => (n + h / 30) % 12, a = s * Math.min(l, 1 - l);
    const f = (n) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
    return (255 << 24) | (Math.round(f(4) * 255) << 16) | (Math.round(f(8) * 255) << 8) | Math.round(f(0) * 255);
  }
  const CAT_COLORS = { parameter: hsl(210, 70, 55), optimizer_state: hsl(30, 85, 55), input: hsl(280, 45, 60),
    temporary: hsl(0, 0, 70), activation: hsl(140, 55, 48), gradient: hsl(350, 70, 58), autograd_detail: hsl(50, 80, 55),
    workspace: hsl(180, 40, 45), unknown: hsl(220, 12, 66) };
  const CAT_LABELS = { parameter: 'parameters', gradient: 'gradients', optimizer_state: 'optimizer state', activation: 'activations',
    input: 'inputs', temporary: 'temporaries', autograd_detail: 'autograd detail', workspace: 'workspaces', unknown: 'unknown' };
  function catColor(k) { const name = model.info.categories[k]; return CAT_COLORS[name] || hashColor(k + 7); }
  const SMALL = hsl(220, 10, 80), GRAY = hsl(220, 12, 66), BG = (255 << 24) | 0xffffff;
  function rgba(c) { return 'rgb(' + (c & 255) + ',' + ((c >> 8) & 255) + ',' + ((c >> 16) & 255) + ')'; }

  function computeColors() {
    const nS = stackOff.length - 1;
    siteFrameOfStack = new Int32Array(nS);
    stackColor = new Uint32Array(nS);
    for (let s = 0; s < nS; s++) { const f = siteFrame(s); siteFrameOfStack[s] = f; stackColor[s] = f < 0 ? GRAY : hashColor(f + 1); }
  }
  function allocColor(a) {
    let c;
    if (colorBy === 'category' && model.cat) {
      const k = model.cat[a];
      c = k === 0xffff ? GRAY : catColor(k);
    } else if (colorBy === 'stream') c = hashColor(model.stream[a] + 3);
    else { const s = model.stack[a]; c = s === 0xffffffff ? GRAY : stackColor[s]; }
    if (searchAllocs && !searchAllocs[a]) c = dim(c);
    if (highlightCat >= 0 && model.cat && model.cat[a] !== highlightCat) c = dim(dim(c));
    return c;
  }
  function dim(c) { // blend toward white
    const r = c & 255, g = (c >> 8) & 255, b = (c >> 16) & 255;
    return (255 << 24) | ((b + 2 * 255) / 3 << 16) | ((g + 2 * 255) / 3 << 8) | ((r + 2 * 255) / 3);
  }

  // ---------- axes ----------
  function hasTime() { return !!model.time && view.axis === 'time'; }
  function posOfEvent(e) { return hasTime() ? model.time[Math.max(0, Math.min(model.nE - 1, e))] : e; }
  function fullX() {
    if (model.nE === 0) return [0, 1];
    if (hasTime()) { const t = model.time; const span = Math.max(1, t[model.nE - 1] - t[0]); return [t[0] - span * 0.01, t[model.nE - 1] + span * 0.01]; }
    return [-0.5, model.nE - 0.5 + Math.max(1, model.nE * 0.01)];
  }
  // First event whose position is >= x.
  function eventAt(x) {
    if (!hasTime()) return Math.max(0, Math.min(model.nE, Math.ceil(x)));
    const t = model.time; let lo = 0, hi = model.nE;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (t[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function resetView() {
    [view.x0, view.x1] = fullX();
    view.y0 = 0; view.y1 = Math.max(model.maxAlloc, showReserved ? model.maxReserved : 0, 1) * 1.05;
  }
  // The events the iteration marks (annotation starts) fall on.
  function markEvents() {
    const m = model, out = [];
    if (!m.time || m.info.t_first_us === null) return out;
    for (const a of m.info.annotations) if (a.stage === 'Start') out.push(Math.min(m.nE - 1, eventAtTime(a.time_us - m.info.t_first_us)));
    return out;
  }
  // The first event at or after time t (µs from the first event).
  function eventAtTime(t) {
    const tm = model.time; let lo = 0, hi = model.nE;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (tm[mid] < t) lo = mid + 1; else hi = mid; }
    return lo;
  }
  // The first view: the recorded work. A file with iterations opens on them
  // (with the peak, every OOM and every iteration mark inside), its idle head
  // and tail (model setup, seconds of loading) one click away (Reset zoom);
  // without iterations, or where they are most of the trace, the whole trace.
  function activityX() {
    const full = fullX(), m = model;
    const its = (m.info.leaks && m.info.leaks.iterations) || [];
    if (!its.length || m.nE < 2) return full;
    let lo = its[0].start, hi = Math.min(m.nE - 1, Math.max(its[0].start, its[its.length - 1].end - 1));
    const take = (e) => { if (e !== null && e !== undefined && e >= 0 && e < m.nE) { lo = Math.min(lo, e); hi = Math.max(hi, e); } };
    take(m.peakEvent);
    for (const o of m.info.ooms) take(o.event);
    markEvents().forEach(take);
    const p0 = posOfEvent(lo), p1 = posOfEvent(hi), pad = Math.max((p1 - p0) * 0.03, 1);
    const x0 = Math.max(full[0], p0 - pad), x1 = Math.min(full[1], p1 + pad);
    return x1 - x0 > 0.8 * (full[1] - full[0]) ? full : [x0, x1];
  }
  // What the first view leaves out, for the note beside the buttons.
  let activity = null; // the first view's x range when it leaves something out
  function viewNote() {
    const n = $('view-note'); if (!n) return;
    let text = '';
    if (activity && view.x0 === activity[0] && view.x1 === activity[1]) {
      const full = fullX(), head = eventAt(view.x0), tail = model.nE - eventAt(view.x1);
      text = 'showing the iterations; ' + (hasTime()
        ? fmtDur(view.x0 - full[0]) + ' before' + (tail > 0 ? ', ' + fmtDur(full[1] - view.x1) + ' after' : '')
        : fmtCount(head) + ' events before' + (tail > 0 ? ', ' + fmtCount(tail) + ' after' : '')) + ' (Reset zoom: the whole trace)';
    }
    if (n.textContent !== text) n.textContent = text;
  }
  function firstView() {
    resetView();
    [view.x0, view.x1] = activityX();
    const full = fullX();
    activity = view.x0 !== full[0] || view.x1 !== full[1] ? [view.x0, view.x1] : null;
  }

  // ---------- rendering ----------
  const plot = $('plot'), ctx = plot.getContext('2d');
  const PAD_L = 78, PAD_B = 22, PAD_T = 14;
  let colRep = null; // event (state after it) shown in each column; -1 = start
  let image = null;

  function resize() {
    const dpr = window.devicePixelRatio || 1, r = plot.getBoundingClientRect();
    plot.width = Math.max(200, Math.round(r.width * dpr)); plot.height = Math.max(150, Math.round(r.height * dpr));
    const mm = $('minimap'), mr = mm.getBoundingClientRect();
    mm.width = Math.max(200, Math.round(mr.width * dpr)); mm.height = Math.max(30, Math.round(mr.height * dpr));
  }
  function area() {
    const dpr = window.devicePixelRatio || 1;
    const l = Math.round(PAD_L * dpr), b = Math.round(PAD_B * dpr), t = Math.round(PAD_T * dpr);
    return { l, t, w: plot.width - l - Math.round(6 * dpr), h: plot.height - t - b, dpr };
  }

  // Events of each pixel column and the one to show: within a column the
  // event after which most memory was allocated, so no spike is hidden.
  function columns(W) {
    const rep = new Int32Array(W), first = new Int32Array(W + 1);
    const dx = (view.x1 - view.x0) / W;
    for (let c = 0; c <= W; c++) first[c] = eventAt(view.x0 + c * dx);
    const al = model.alloc;
    for (let c = 0; c < W; c++) {
      const a = first[c], b = first[c + 1];
      if (b <= a) { rep[c] = a - 1; continue; }
      let best = a, bv = al[a + 1];
      for (let e = a + 1; e < b; e++) if (al[e + 1] > bv) { bv = al[e + 1]; best = e; }
      rep[c] = best;
    }
    return rep;
  }

  function render() {
    viewNote();
    const t0 = performance.now();
    const ar = area(), W = ar.w, Hh = ar.h;
    if (W <= 0 || Hh <= 0) return;
    if (!image || image.width !== W || image.height !== Hh) image = ctx.createImageData(W, Hh);
    const px = new Uint32Array(image.data.buffer); px.fill(BG);
    const m = model, nA = m.nA, fen = m.fen;
    const rep = columns(W); colRep = rep;
    const bpr = (view.y1 - view.y0) / Hh; // bytes per row
    const y0 = view.y0, y1 = view.y1;
    // Live state after the first column's event.
    const startE = rep.length ? rep[0] : -1;
    const live = m.liveBuf;
    for (let a = 0; a < nA; a++) live[a] = (m.t0[a] <= startE && m.t1[a] > startE) ? m.size[a] : 0;
    fen.build(live);
    let cursor = startE;
    const colors = new Uint32Array(nA);
    const colorOf = (a) => { let c = colors[a]; if (c === 0) { c = allocColor(a); colors[a] = c; } return c; };
    for (let c = 0; c < W; c++) {
      const target = rep[c];
      while (cursor < target) {
        cursor++;
        const a = m.evAlloc[cursor], f = m.evFree[cursor];
        if (a >= 0) { fen.add(a, m.size[a]); live[a] = m.size[a]; }
        if (f >= 0 && live[f] > 0) { fen.add(f, -live[f]); live[f] = 0; }
      }
      const total = Math.min(m.alloc[target + 1], y1);
      // Sample the stack at each row's centre: the allocation found there
      // fills all the rows it covers, then the search jumps past it.
      let r = Hh - 1;
      while (r >= 0) {
        const v = y1 - (r + 0.5) * bpr;
        if (v >= total) break;
        const a = fen.find(v);
        if (a >= nA) break;
        const top = fen.prefix(a), end = top + live[a];
        const rTop = Math.max(0, Math.ceil((y1 - end) / bpr - 0.5));
        const col = colorOf(a);
        for (let k = r; k >= rTop; k--) px[k * W + c] = col;
        r = Math.min(r - 1, rTop - 1);
      }
    }
    edgeCache.clear();
    present();
    metrics.lastRenderMs = performance.now() - t0; metrics.renders++;
    drawMinimap();
    if ($('panel-categories').classList.contains('active')) drawCategories();
  }

  // Redraw the cached raster and the overlay (hover changes need no raster).
  function present() {
    if (!image || !colRep) return;
    const ar = area();
    ctx.clearRect(0, 0, plot.width, plot.height);
    ctx.putImageData(image, ar.l, ar.t);
    drawOverlay(ar, colRep);
  }

  function yPix(ar, bytes) { return ar.t + ar.h - (bytes - view.y0) / (view.y1 - view.y0) * ar.h; }
  function xPixOfPos(ar, x) { return ar.l + (x - view.x0) / (view.x1 - view.x0) * ar.w; }

  function drawOverlay(ar, rep) {
    const m = model, dpr = ar.dpr;
    ctx.save();
    ctx.beginPath(); ctx.rect(ar.l, ar.t, ar.w, ar.h); ctx.clip();
    if (showReserved) { // reserved memory as an outline
      ctx.strokeStyle = '#111827'; ctx.lineWidth = 1.2 * dpr; ctx.beginPath();
      for (let c = 0; c < rep.length; c++) {
        const y = yPix(ar, m.reserved[rep[c] + 1]);
        if (c === 0) ctx.moveTo(ar.l, y); else ctx.lineTo(ar.l + c, y);
        ctx.lineTo(ar.l + c + 1, y);
      }
      ctx.stroke();
    }
    // Iteration marks from annotations (ProfilerStep#N and user scopes).
    if (hasTime() && m.info.annotations.length && m.info.t_first_us !== null) {
      ctx.fillStyle = 'rgba(37,99,235,.5)';
      for (const a of m.info.annotations) {
        if (a.stage !== 'Start') continue;
        const x = xPixOfPos(ar, a.time_us - m.info.t_first_us);
        if (x >= ar.l && x <= ar.l + ar.w) ctx.fillRect(x, ar.t, Math.max(1, dpr), 6 * dpr);
      }
    }
    // OOMs in red, the peak and the selected time.
    const vline = (e, color, w) => {
      if (e === null || e === undefined) return;
      const x = xPixOfPos(ar, posOfEvent(e));
      if (x < ar.l - 2 || x > ar.l + ar.w + 2) return;
      ctx.fillStyle = color; ctx.fillRect(x - w * dpr / 2, ar.t, w * dpr, ar.h);
    };
    for (const o of m.info.ooms) vline(o.event, 'rgba(220,38,38,.85)', 2);
    vline(m.peakEvent, 'rgba(37,99,235,.8)', 1.5);
    if (selectedEvent !== null) vline(selectedEvent, 'rgba(17,24,39,.6)', 1);
    // Outline of the hovered / pinned allocation.
    for (const a of [pinned, hovered]) if (a >= 0) outlineAlloc(ar, rep, a, a === pinned ? '#111827' : '#f59e0b');
    ctx.restore();
    // Axes.
    ctx.fillStyle = '#374151'; ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
    ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
    const yt = byteTicks(view.y0, view.y1, 6);
    for (const v of yt) { const y = yPix(ar, v); if (y < ar.t || y > ar.t + ar.h) continue; ctx.fillText(fmtBytes(v), ar.l - 4 * dpr, y); ctx.fillRect(ar.l - 3 * dpr, y, 3 * dpr, 1); }
    ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    const xt = niceTicks(view.x0, view.x1, 8);
    for (const v of xt) {
      const x = xPixOfPos(ar, v); if (x < ar.l || x > ar.l + ar.w) continue;
      ctx.fillText(hasTime() ? fmtDur(v) : fmtCount(v), x, ar.t + ar.h + 4 * dpr); ctx.fillRect(x, ar.t + ar.h, 1, 3 * dpr);
    }
    ctx.strokeStyle = '#d1d5db'; ctx.lineWidth = 1; ctx.strokeRect(ar.l + .5, ar.t + .5, ar.w - 1, ar.h - 1);
  }

  // Byte ticks at multiples of a power of two, so binary-unit labels read
  // 512 MiB, 1 GiB, 1.5 GiB rather than 476.84 MiB.
  function byteTicks(a, b, n) {
    const span = b - a; if (!(span > 0)) return [];
    const step = Math.pow(2, Math.ceil(Math.log2(span / n)));
    const out = []; for (let v = Math.ceil(a / step) * step; v <= b; v += step) out.push(v);
    return out;
  }
  function niceTicks(a, b, n) {
    const span = b - a; if (!(span > 0)) return [];
    const raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((k) => k * mag).find((s) => span / s <= n) || raw;
    const out = []; for (let v = Math.ceil(a / step) * step; v <= b; v += step) out.push(v);
    return out;
  }

  // Lower edge (bytes) of allocation `a` in every column where it is
  // alive, NaN elsewhere. During its life only frees below it move it, so
  // one pass over the events in view suffices.
  const edgeCache = new Map();
  function bandEdges(a) {
    if (edgeCache.has(a)) return edgeCache.get(a);
    const m = model, out = new Float64Array(colRep.length).fill(NaN);
    let prevE = null, off = 0;
    for (let c = 0; c < colRep.length; c++) {
      const e = colRep[c];
      if (!(m.t0[a] <= e && m.t1[a] > e)) continue;
      if (prevE === null) {
        for (let k = 0; k < a; k++) if (m.t0[k] <= e && m.t1[k] > e) off += m.size[k];
      } else {
        for (let x = prevE + 1; x <= e; x++) {
          const f = m.evFree[x]; if (f >= 0 && f < a) off -= m.size[f];
          const g = m.evAlloc[x]; if (g >= 0 && g < a) off += m.size[g];
        }
      }
      prevE = e; out[c] = off;
    }
    if (edgeCache.size > 8) edgeCache.clear();
    edgeCache.set(a, out);
    return out;
  }
  function outlineAlloc(ar, rep, a, color) {
    const m = model; ctx.strokeStyle = color; ctx.lineWidth = 2 * ar.dpr;
    const edges = bandEdges(a), pts = [];
    for (let c = 0; c < rep.length; c++) if (!isNaN(edges[c])) pts.push([ar.l + c, yPix(ar, edges[c]), yPix(ar, edges[c] + m.size[a])]);
    if (!pts.length) return;
    ctx.beginPath();
    pts.forEach((p, i) => (i ? ctx.lineTo(p[0], p[1]) : ctx.moveTo(p[0], p[1])));
    for (let i = pts.length - 1; i >= 0; i--) ctx.lineTo(pts[i][0] + 1, pts[i][2]);
    ctx.closePath(); ctx.stroke();
  }

  // ---------- minimap ----------
  let miniCols = null;
  function drawMinimap() {
    const mm = $('minimap'), c = mm.getContext('2d'), W = mm.width, Hh = mm.height, m = model;
    const [fx0, fx1] = fullX();
    if (!miniCols || miniCols.w !== W || miniCols.axis !== view.axis) {
      const vals = new Float64Array(W), res = new Float64Array(W);
      for (let x = 0; x < W; x++) {
        const a = eventAt(fx0 + (x / W) * (fx1 - fx0)), b = Math.max(a + 1, eventAt(fx0 + ((x + 1) / W) * (fx1 - fx0)));
        let v = m.alloc[Math.min(a, m.nE)], r = m.reserved[Math.min(a, m.nE)];
        for (let e = a; e < b && e < m.nE; e++) { if (m.alloc[e + 1] > v) v = m.alloc[e + 1]; if (m.reserved[e + 1] > r) r = m.reserved[e + 1]; }
        vals[x] = v; res[x] = r;
      }
      miniCols = { w: W, axis: view.axis, vals, res };
    }
    const top = Math.max(m.maxAlloc, m.maxReserved, 1);
    c.clearRect(0, 0, W, Hh); c.fillStyle = '#93c5fd';
    for (let x = 0; x < W; x++) { const h = miniCols.vals[x] / top * (Hh - 2); c.fillRect(x, Hh - h, 1, h); }
    c.fillStyle = '#1f2937';
    for (let x = 0; x < W; x++) c.fillRect(x, Hh - miniCols.res[x] / top * (Hh - 2) - 1, 1, 1);
    const a = (view.x0 - fx0) / (fx1 - fx0) * W, b = (view.x1 - fx0) / (fx1 - fx0) * W;
    c.fillStyle = 'rgba(37,99,235,.15)'; c.fillRect(a, 0, Math.max(2, b - a), Hh);
    c.strokeStyle = '#2563eb'; c.strokeRect(a + .5, .5, Math.max(2, b - a) - 1, Hh - 1);
  }

  // ---------- hit testing ----------
  function eventAtPixel(cx) {
    const ar = area(), c = Math.floor(cx - ar.l);
    if (!colRep || c < 0 || c >= colRep.length) return null;
    return colRep[c];
  }
  // The allocation drawn at canvas pixel (cx, cy), whatever its size.
  function allocAtPixel(cx, cy) {
    const ar = area(); const e = eventAtPixel(cx); if (e === null) return -1;
    const bytes = view.y0 + (ar.t + ar.h - cy) / ar.h * (view.y1 - view.y0);
    if (bytes < 0 || bytes >= model.alloc[e + 1]) return -1;
    const m = model; let s = 0;
    for (let a = 0; a < m.nA; a++) {
      if (m.t0[a] <= e && m.t1[a] > e) { s += m.size[a]; if (s > bytes) return a; }
    }
    return -1;
  }

  // ---------- allocation details ----------
  function eventTime(e) { return e < 0 ? 'before the trace' : e >= model.nE ? 'not freed' : (model.time ? '+' + fmtDur(model.time[e]) + ' (event ' + fmtCount(e) + ')' : 'event ' + fmtCount(e)); }
  function allocFacts(a) {
    const m = model, size = m.size[a], rounded = Math.ceil(size / 512) * 512;
    const rows = [
      ['requested', fmtBytes(size) + ' (' + fmtCount(size) + ' B)'],
      ['rounded', fmtBytes(rounded) + (rounded > size ? ', ' + fmtBytes(rounded - size) + ' rounding' : '')],
      ['address', fmtAddr(m.addr[a])],
      ['allocated', eventTime(m.t0[a])],
      ['freed', m.t1[a] >= m.nE ? 'alive at the end' : eventTime(m.t1[a])],
    ];
    if (m.time && m.t0[a] >= 0 && m.t1[a] < m.nE) rows.push(['lifetime', fmtDur(m.time[m.t1[a]] - m.time[m.t0[a]])]);
    if (m.treq[a] < m.t1[a] && m.t1[a] < m.nE) rows.push(['free pending', 'requested at ' + eventTime(m.treq[a]) + ' (still used by a stream)']);
    rows.push(['stream', m.info.streams[m.stream[a]] || '?']);
    if (m.cat) {
      const k = m.cat[a], name = k === 0xffff ? 'unknown' : m.info.categories[k];
      const src = (m.info.category_sources || {})[name];
      rows.push(['category', name + (src === 'inferred' ? ' (inferred)' : src === 'profiler' ? ' (Memory Profiler)' : src === 'recorder' ? ' (recorder tag)' : '')]);
    }
    if (m.meta && m.meta[a] !== 0xffffffff) rows.push(['metadata', S[m.meta[a]]]);
    return rows;
  }
  function kvTable(rows) {
    const d = el('div', 'kv');
    for (const [k, v] of rows) { d.appendChild(el('div', 'k', k)); d.appendChild(el('div', 'v', v)); }
    return d;
  }
  // Stack with user frames highlighted and runs of library/native frames folded.
  function stackList(s) {
    const ul = el('ul', 'stack');
    const fr = stackOf(s).filter((f) => frames[4 * f + 3] !== 3);
    if (!fr.length) { ul.appendChild(el('li', 'lib', '(no stack recorded)')); return ul; }
    let run = [];
    const flush = () => {
      if (!run.length) return;
      if (run.length <= 2) run.forEach((li) => ul.appendChild(li));
      else { const li = el('li'); const d = el('details'); d.appendChild(el('summary', null, run.length + ' library / native frames')); run.forEach((x) => d.appendChild(x)); li.appendChild(d); ul.appendChild(li); }
      run = [];
    };
    for (const f of fr) {
      const t = frameText(f);
      const li = el('li', KIND[t.kind], t.label);
      if (searchText && t.label.toLowerCase().includes(searchText)) li.classList.add('hit');
      if (t.kind === 0) { flush(); ul.appendChild(li); } else run.push(li);
    }
    flush();
    return ul;
  }
  function showDetail(a) {
    const p = $('panel-detail'); p.textContent = '';
    if (a < 0) { p.appendChild(el('p', 'muted', 'Hover a band to see an allocation; click to pin it.')); return; }
    const s = model.stack[a];
    p.appendChild(el('h3', null, (s !== 0xffffffff && siteFrameOfStack[s] >= 0 ? frameText(siteFrameOfStack[s]).label : 'allocation #' + a)));
    p.appendChild(kvTable(allocFacts(a)));
    p.appendChild(el('h3', null, 'Stack (innermost first)'));
    p.appendChild(stackList(s));
  }
  function showTooltip(a, x, y) {
    const tip = $('tooltip');
    if (a < 0) { tip.hidden = true; return; }
    tip.textContent = '';
    const m = model, s = m.stack[a];
    tip.appendChild(el('div', null, fmtBytes(m.size[a]) + ' at ' + fmtAddr(m.addr[a])));
    const fr = stackOf(s).filter((f) => frames[4 * f + 3] !== 3);
    let shown = 0;
    for (const f of fr) {
      const t = frameText(f);
      if (t.kind !== 0 && shown > 0 && fr.length > 8) continue;
      tip.appendChild(el('div', 'f' + (t.kind === 0 ? ' u' : ''), t.label));
      if (++shown >= 8) break;
    }
    if (!fr.length) tip.appendChild(el('div', 'f', '(no stack recorded)'));
    const wrap = $('plot-wrap').getBoundingClientRect();
    tip.hidden = false;
    tip.style.left = Math.min(x + 14, wrap.width - 470) + 'px';
    tip.style.top = (y + 14) + 'px';
  }

  // A panel canvas may be drawn while its tab is hidden (width 0): use the
  // panel column's width then.
  function cssWidth(cv) {
    const w = cv.getBoundingClientRect().width;
    if (w > 0) return w;
    const col = document.querySelector('.panels');
    return Math.max(200, (col ? col.clientWidth : 440) - 26);
  }

  // ---------- alive at a time: table and icicle ----------
  function liveAt(e) {
    const m = model, out = [];
    for (let a = 0; a < m.nA; a++) if (m.t0[a] <= e && m.t1[a] > e) out.push(a);
    return out;
  }
  function showAlive(e) {
    selectedEvent = e;
    const p = $('panel-alive'); p.textContent = '';
    const m = model, live = liveAt(e);
    const total = m.alloc[e + 1];
    p.appendChild(el('h3', null, 'Alive ' + (e < 0 ? 'at the start' : 'after ' + eventTime(e)) + ': ' + fmtBytes(total) + ' in ' + fmtCount(live.length) + ' blocks'));
    const bySite = new Map();
    for (const a of live) {
      const s = m.stack[a], f = s === 0xffffffff ? -1 : siteFrameOfStack[s];
      const g = bySite.get(f) || { bytes: 0, n: 0 }; g.bytes += m.size[a]; g.n++; bySite.set(f, g);
    }
    const rows = [...bySite.entries()].sort((x, y) => y[1].bytes - x[1].bytes).slice(0, 40);
    const tb = el('table'); const hr = el('tr');
    ['bytes', 'share', 'blocks', 'site'].forEach((h, i) => hr.appendChild(el('th', i < 3 ? 'n' : null, h)));
    tb.appendChild(hr);
    for (const [f, g] of rows) {
      const tr = el('tr');
      tr.appendChild(el('td', 'n', fmtBytes(g.bytes)));
      tr.appendChild(el('td', 'n', (total > 0 ? (g.bytes / total * 100).toFixed(1) : '0') + '%'));
      tr.appendChild(el('td', 'n', fmtCount(g.n)));
      tr.appendChild(siteCell(f, '<no stack recorded>'));
      tb.appendChild(tr);
    }
    p.appendChild(tb);
    p.appendChild(el('h3', null, 'Flamegraph (outermost frame at the top)'));
    const cv = el('canvas'); cv.id = 'flame'; p.appendChild(cv);
    drawFlame(cv, live);
    render();
  }
  function flameTree(live) {
    const root = { name: 'all', bytes: 0, kids: new Map(), f: -1 };
    for (const a of live) {
      const sz = model.size[a]; root.bytes += sz;
      const fr = stackOf(model.stack[a]).filter((f) => frames[4 * f + 3] !== 3).reverse();
      let node = root;
      if (!fr.length) fr.push(-1);
      for (const f of fr) {
        let k = node.kids.get(f);
        if (!k) { k = { name: f < 0 ? '<no stack recorded>' : frameText(f).label, bytes: 0, kids: new Map(), f }; node.kids.set(f, k); }
        k.bytes += sz; node = k;
      }
    }
    return root;
  }
  function drawFlame(cv, live) {
    const dpr = window.devicePixelRatio || 1;
    const root = flameTree(live);
    let focus = root;
    const rects = [];
    const paint = () => {
      cv.width = Math.max(100, Math.round(cssWidth(cv) * dpr)); cv.height = Math.round(260 * dpr);
      const c = cv.getContext('2d'), rowH = 16 * dpr; rects.length = 0;
      c.clearRect(0, 0, cv.width, cv.height); c.font = (10.5 * dpr) + 'px system-ui, sans-serif'; c.textBaseline = 'middle';
      const walk = (n, x, w, depth) => {
        if (w < 0.5 || depth * rowH > cv.height) return;
        const y = depth * rowH;
        const kind = n.f >= 0 ? frames[4 * n.f + 3] : 1;
        c.fillStyle = n === root ? '#e5e7eb' : kind === 0 ? rgba(hashColor(n.f + 1)) : kind === 2 ? '#cbd5e1' : '#bfdbfe';
        c.fillRect(x, y, Math.max(1, w - 1), rowH - 1);
        rects.push([x, y, w, rowH, n]);
        if (w > 30 * dpr) { c.fillStyle = '#111827'; c.save(); c.beginPath(); c.rect(x, y, w - 2, rowH); c.clip(); c.fillText(n.name + ' (' + fmtBytes(n.bytes) + ')', x + 3 * dpr, y + rowH / 2); c.restore(); }
        let cx = x;
        const kids = [...n.kids.values()].sort((a, b) => b.bytes - a.bytes);
        for (const k of kids) { const kw = w * k.bytes / Math.max(1, n.bytes); walk(k, cx, kw, depth + 1); cx += kw; }
      };
      walk(focus, 0, cv.width, 0);
    };
    paint();
    const pick = (ev) => { const r = cv.getBoundingClientRect(), x = (ev.clientX - r.left) * dpr, y = (ev.clientY - r.top) * dpr; return rects.find(([rx, ry, rw, rh]) => x >= rx && x < rx + rw && y >= ry && y < ry + rh); };
    cv.addEventListener('mousemove', (ev) => { const h = pick(ev); cv.title = h ? h[4].name + ' — ' + fmtBytes(h[4].bytes) : ''; });
    cv.addEventListener('click', (ev) => { const h = pick(ev); focus = h && h[4] !== focus ? h[4] : root; paint(); });
  }

  // ---------- allocator view: segments and blocks at a time ----------
  function showSegments(e) {
    const p = $('panel-segments'); p.textContent = '';
    const m = model, segs = [];
    for (let s = 0; s < m.s_t0.length; s++) if (m.s_t0[s] <= e && m.s_t1[s] > e) segs.push(s);
    segs.sort((x, y) => m.s_addr[x] - m.s_addr[y]);
    const live = liveAt(e).sort((x, y) => m.addr[x] - m.addr[y]);
    // Blocks placed into segments by address; gaps are cached free memory.
    let li = 0, reserved = 0, allocated = 0, pending = 0, waste = 0, largestFree = 0, freeBytes = 0;
    const rows = [];
    for (const s of segs) {
      const lo = m.s_addr[s], hi = lo + m.s_size[s]; reserved += m.s_size[s];
      while (li < live.length && m.addr[live[li]] < lo) li++;
      const blocks = []; let cur = lo;
      let k = li;
      while (k < live.length && m.addr[live[k]] < hi) {
        const a = live[k], ad = m.addr[a], rs = Math.ceil(m.size[a] / 512) * 512;
        if (ad > cur) { const g = ad - cur; freeBytes += g; largestFree = Math.max(largestFree, g); blocks.push([cur, g, 0, -1]); }
        const isPending = m.treq[a] <= e;
        blocks.push([ad, rs, isPending ? 2 : 1, a]);
        if (isPending) pending += rs; else { allocated += m.size[a]; waste += rs - m.size[a]; }
        cur = Math.max(cur, ad + rs); k++;
      }
      if (cur < hi) { const g = hi - cur; freeBytes += g; largestFree = Math.max(largestFree, g); blocks.push([cur, g, 0, -1]); }
      rows.push([s, blocks]);
    }
    p.appendChild(el('h3', null, 'Segments ' + (e < 0 ? 'at the start' : 'after ' + eventTime(e))));
    p.appendChild(kvTable([
      ['reserved', fmtBytes(reserved) + ' in ' + fmtCount(segs.length) + ' segments'],
      ['allocated', fmtBytes(allocated)],
      ['pending free', fmtBytes(pending)],
      ['cached free', fmtBytes(freeBytes)],
      ['largest free block', fmtBytes(largestFree)],
      ['fragmentation', freeBytes > 0 ? ((1 - largestFree / freeBytes) * 100).toFixed(0) + '%' : '0%'],
      ['rounding waste', fmtBytes(waste)],
    ]));
    const legend = el('div', 'legend');
    for (const [name, col] of [['allocated', '#60a5fa'], ['pending free', '#f59e0b'], ['cached free', '#e5e7eb']]) {
      const sp = el('span'); const sw = el('span', 'sw'); sw.style.background = col; sp.appendChild(sw); sp.appendChild(document.createTextNode(name)); legend.appendChild(sp);
    }
    p.appendChild(legend);
    const cv = el('canvas'); cv.id = 'segmap'; p.appendChild(cv);
    // One full-width row per segment showing its own composition, its size
    // on the left (segments range from 2 MiB to many GiB: a common scale
    // would leave most of them invisible).
    const dpr = window.devicePixelRatio || 1, rowH = Math.round((rows.length > 400 ? 6 : 13) * dpr);
    cv.width = Math.max(100, Math.round(cssWidth(cv) * dpr)); cv.height = Math.max(20, rows.length * rowH);
    cv.style.height = (cv.height / dpr) + 'px';
    const c = cv.getContext('2d'), labelW = rowH >= 12 * dpr ? Math.round(64 * dpr) : 0, barW = cv.width - labelW - 2;
    c.font = (10 * dpr) + 'px system-ui, sans-serif'; c.textBaseline = 'middle'; c.textAlign = 'right';
    const geo = [];
    rows.forEach(([s, blocks], i) => {
      const y = i * rowH, scale = barW / m.s_size[s], lo = m.s_addr[s];
      if (labelW) { c.fillStyle = '#4b5563'; c.fillText(fmtBytes(m.s_size[s]), labelW - 4 * dpr, y + rowH / 2); }
      c.fillStyle = '#f3f4f6'; c.fillRect(labelW, y, barW, rowH - 1);
      for (const [ad, sz, st, a] of blocks) {
        c.fillStyle = st === 0 ? '#e5e7eb' : st === 2 ? '#f59e0b' : rgba(allocColor(a));
        const x = labelW + (ad - lo) * scale;
        c.fillRect(x, y, Math.max(1, sz * scale - (st ? 0.5 : 0)), rowH - 1);
        geo.push([x, y, sz * scale, rowH, s, ad, sz, st, a]);
      }
    });
    cv.addEventListener('mousemove', (ev) => {
      const rr = cv.getBoundingClientRect(), x = (ev.clientX - rr.left) * dpr, y = (ev.clientY - rr.top) * dpr;
      const g = geo.find(([gx, gy, gw, gh]) => x >= gx && x < gx + Math.max(gw, 1) && y >= gy && y < gy + gh);
      cv.title = g ? (['cached free', 'allocated', 'pending free'][g[7]] + ' ' + fmtBytes(g[6]) + ' at ' + fmtAddr(g[5]) + ' in segment ' + fmtAddr(m.s_addr[g[4]]) + ' (' + fmtBytes(m.s_size[g[4]]) + ')') : '';
    });
    cv.addEventListener('click', (ev) => {
      const rr = cv.getBoundingClientRect(), x = (ev.clientX - rr.left) * dpr, y = (ev.clientY - rr.top) * dpr;
      const g = geo.find(([gx, gy, gw, gh]) => x >= gx && x < gx + Math.max(gw, 1) && y >= gy && y < gy + gh);
      if (g && g[8] >= 0) { pinned = g[8]; showDetail(pinned); activateTab('detail'); render(); }
    });
    return { reserved, allocated, freeBytes, largestFree };
  }

  // ---------- Leaks panel ----------
  // Iterations and the findings of `vramscope leaks` (computed in Rust).
  // Clicking an iteration zooms to it; clicking a site searches for it, so
  // its allocations stand out on the timeline.
  function showLeaks() {
    const p = $('panel-leaks'); p.textContent = '';
    const L = model.info.leaks;
    if (!L) { p.appendChild(el('p', 'muted', 'No leak analysis in this report.')); return; }
    const its = L.iterations;
    const src = L.iteration_source.name !== undefined ? L.iteration_source.kind.replace(/_/g, ' ') + ' "' + L.iteration_source.name + '"' : L.iteration_source.kind.replace(/_/g, ' ');
    p.appendChild(el('h3', null, its.length ? its.length + ' iterations (from ' + src + ')' : 'No iterations found'));
    for (const n of L.notes) p.appendChild(el('p', 'muted', n));
    const leaks = L.findings.filter((f) => f.severity === 'leak').length;
    p.appendChild(el('p', null, leaks ? leaks + ' leak(s) found.' : (L.findings.length ? 'No leak found; ' + L.findings.length + ' other finding(s).' : 'No leak found.')));
    for (const f of L.findings) {
      const d = el('div', 'finding ' + f.severity);
      const h = el('div'); h.appendChild(el('span', 'sev', f.severity === 'leak' ? 'LEAK' : f.severity === 'warning' ? 'Warning' : 'OK'));
      h.appendChild(el('span', null, f.title)); d.appendChild(h);
      d.appendChild(el('div', null, f.explanation));
      d.appendChild(el('div', 'fix', f.fix));
      for (const s of f.sites) {
        const row = el('details');
        const sum = el('summary');
        const name = el('span', 'site', s.site);
        name.title = 'Highlight these allocations on the timeline';
        name.addEventListener('click', (ev) => {
          ev.preventDefault();
          const q = s.file ? s.file.split(/[\\/]/).pop() + ':' + s.line : s.site;
          $('search').value = q; applySearch(q);
        });
        sum.appendChild(name);
        sum.appendChild(el('span', 'muted', '  ' + (s.bytes_per_iteration > 0 ? '+' + fmtBytes(s.bytes_per_iteration) + ' per iteration' : fmtBytes(s.bytes))));
        row.appendChild(sum);
        const rows = [];
        if (s.code) rows.push(['line ' + s.line, s.code]);
        // What held the tensors, by name, as the recorder found it.
        if (s.held_by) rows.push(['held by', s.held_by.text]);
        if (s.kept_by && s.kept_by[0] !== s.line && !(s.held_by && s.held_by.stored_at)) rows.push(['kept by line ' + s.kept_by[0], s.kept_by[1]]);
        if (s.live_bytes.length > 1) rows.push(['alive at iteration ends', s.live_bytes.slice(-8).map(fmtBytes).join(', ')]);
        if (s.outliving_blocks) rows.push(['outlived the next iteration', fmtCount(s.outliving_blocks) + ' tensors, ' + fmtBytes(s.outliving_bytes)]);
        if (s.gc_freed_blocks) rows.push(['freed by the cycle collector', fmtCount(s.gc_freed_blocks) + ' tensors, ' + fmtBytes(s.gc_freed_bytes)]);
        if (rows.length) row.appendChild(kvTable(rows));
        const ul = el('ul', 'stack'); for (const line of s.stack) ul.appendChild(el('li', null, line));
        row.appendChild(ul); d.appendChild(row);
      }
      p.appendChild(d);
    }
    if (!its.length) return;
    const tb = el('table'); const hr = el('tr');
    ['iteration', 'start', 'peak', 'end', 'growth'].forEach((x, i) => hr.appendChild(el('th', i ? 'n' : null, x))); tb.appendChild(hr);
    for (const it of its) {
      const tr = el('tr');
      const a = el('td', 'site', String(it.number) + (it.complete ? '' : ' (cut short)'));
      a.addEventListener('click', () => { zoomTo(Math.round((it.start + it.end - 1) / 2), Math.max(1, Math.round((it.end - it.start) / 2))); render(); });
      tr.appendChild(a);
      [it.start_bytes, it.peak_bytes, it.end_bytes].forEach((b) => tr.appendChild(el('td', 'n', fmtBytes(b))));
      tr.appendChild(el('td', 'n', (it.growth > 0 ? '+' : '') + fmtBytes(it.growth)));
      tb.appendChild(tr);
    }
    p.appendChild(el('h3', null, 'Iterations'));
    p.appendChild(tb);
  }

  // ---------- Diff panel (report --baseline) ----------
  // What is alive in this snapshot and not in the baseline, matched by stack
  // and size; clicking a site searches for it on the timeline.
  function siteLink(text) {
    const a = el('span', 'site', text);
    a.title = 'Highlight these allocations on the timeline';
    a.addEventListener('click', (ev) => {
      ev.preventDefault();
      const m = /^(.*):(\d+) in /.exec(text);
      const q = m ? m[1].split(/[\\/]/).pop() + ':' + m[2] : text;
      $('search').value = q; applySearch(q);
    });
    return a;
  }
  function diffGroups(title, groups, sign) {
    const d = el('div'); d.appendChild(el('h3', null, title));
    if (!groups.length) { d.appendChild(el('p', 'muted', 'none')); return d; }
    for (const g of groups) {
      const row = el('details'); const sum = el('summary');
      sum.appendChild(el('span', 'n', sign + fmtBytes(g.bytes) + '  '));
      sum.appendChild(siteLink(g.site));
      sum.appendChild(el('span', 'muted', '  ' + fmtCount(g.count) + ' blocks: ' + g.sizes.map((x) => x.count + ' × ' + fmtBytes(x.size)).join(', ')));
      row.appendChild(sum);
      const ul = el('ul', 'stack'); for (const line of g.stack) ul.appendChild(el('li', null, line));
      row.appendChild(ul); d.appendChild(row);
    }
    return d;
  }
  function siteDeltaTable(title, rows) {
    const d = el('div'); d.appendChild(el('h3', null, title));
    const tb = el('table'); const hr = el('tr');
    ['baseline', 'this', 'change', 'site'].forEach((h, i) => hr.appendChild(el('th', i < 3 ? 'n' : null, h))); tb.appendChild(hr);
    for (const r of rows) {
      const tr = el('tr');
      tr.appendChild(el('td', 'n', fmtBytes(r.a_bytes))); tr.appendChild(el('td', 'n', fmtBytes(r.b_bytes)));
      tr.appendChild(el('td', 'n', (r.delta > 0 ? '+' : '') + fmtBytes(r.delta)));
      const td = el('td', 'wrap'); td.appendChild(siteLink(r.site)); tr.appendChild(td); tb.appendChild(tr);
    }
    d.appendChild(tb); return d;
  }
  function showDiff() {
    const p = $('panel-diff'); p.textContent = '';
    const D = model.info.diff; if (!D) return;
    const t = D.totals;
    p.appendChild(el('h3', null, 'Against ' + D.a.file + ' (cuda:' + D.a.device + ')'));
    p.appendChild(kvTable([
      ['at the end', fmtBytes(t.a_bytes) + ' → ' + fmtBytes(t.b_bytes) + ' (' + (t.delta > 0 ? '+' : '') + fmtBytes(t.delta) + ')'],
      ['matched', fmtBytes(t.matched_bytes) + ' in ' + fmtCount(t.matched_blocks) + ' blocks (same stack and size)'],
      ['only here', fmtBytes(t.grown_bytes)],
    ]));
    if (D.peak_to_peak) {
      const q = D.peak_to_peak.totals;
      p.appendChild(el('p', null, 'Peak: ' + fmtBytes(q.a_bytes) + ' → ' + fmtBytes(q.b_bytes) + ' (' + (q.delta > 0 ? '+' : '') + fmtBytes(q.delta) + ').'));
    }
    p.appendChild(diffGroups('Alive here and not in the baseline (at the end)', D.grown, '+'));
    p.appendChild(diffGroups('Alive in the baseline and not here', D.shrunk, '-'));
    if (D.peak_to_peak) p.appendChild(siteDeltaTable('Peak to peak, by site', D.peak_to_peak.by_site.slice(0, 25)));
    p.appendChild(siteDeltaTable('At the end, by site', D.by_site.slice(0, 25)));
  }

  // ---------- OOM panel ----------
  function showOoms() {
    const p = $('panel-oom'); p.textContent = '';
    const m = model, ooms = m.summary.ooms;
    ooms.forEach((o, i) => {
      const e = o.event_index;
      p.appendChild(el('h3', null, 'Out of memory #' + (i + 1) + ' at ' + eventTime(e)));
      const seg = showSegmentsQuiet(e - 1);
      // Why, as the analysis diagnosed it (the dominant cause first, with
      // its bytes); advice on settings comes only from the replay below,
      // so it never contradicts what the replay found.
      const ex = el('div', 'explain'); ex.classList.add('oom-cause');
      const why = o.cause;
      ex.textContent = why; p.appendChild(ex);
      p.appendChild(kvTable([
        ['requested', fmtBytes(o.requested_bytes)],
        ['free on device', o.device_free_bytes === null ? 'not recorded' : fmtBytes(o.device_free_bytes)],
        ['allocated', fmtBytes(o.allocated_bytes)], ['reserved', fmtBytes(o.reserved_bytes)],
        ['largest cached free block', fmtBytes(seg.largestFree)],
      ].concat(o.diagnosis.outside_bytes !== null ? [['held outside PyTorch', fmtBytes(o.diagnosis.outside_bytes) + ' of ' + fmtBytes(o.diagnosis.device_total_bytes)]] : [])));
      p.appendChild(sitesTable('Biggest holders', o.top_holders, o.allocated_bytes));
      const w = model.info.simulate;
      if (w && w.recorded_oom && w.recorded_oom.entry === e) {
        const a = el('div', 'explain'); a.className = 'explain simulate-oom';
        a.textContent = 'Allocator simulation (the trace replayed under the settings users turn to; see the Simulate tab): ' + w.answer;
        p.appendChild(a);
      }
    });
  }

  // ---------- Simulate panel ----------
  // The trace replayed through the allocator model under the recorded
  // settings and the sweep, computed in Rust when the report was written:
  // the answer, one row per setting (click one), and its reserved curve
  // drawn over the recorded one.
  let simRun = 0;
  function showSimulate() {
    const p = $('panel-simulate'); p.textContent = '';
    const w = model.info.simulate; if (!w) return;
    p.appendChild(el('h3', null, 'Allocator simulation'));
    const ans = el('div', 'explain'); ans.id = 'simulate-answer'; ans.textContent = w.answer; p.appendChild(ans);
    const ag = w.agreement;
    p.appendChild(el('p', 'muted', ag.recorded_segment_events > 0
      ? 'The model against this file, recorded settings: ' + fmtCount(ag.matched_segment_events) + ' of ' + fmtCount(ag.recorded_segment_events) +
        ' segment events reproduced in order, reserved within ' + (ag.max_reserved_error * 100).toFixed(2) + '% after every request.'
      : 'The trace records no segment events: it starts with ' + fmtBytes(ag.initial_reserved) + ' reserved, and every run starts from those segments, so a setting changes only what happens after.'));
    if (w.capacity !== null) p.appendChild(el('p', 'muted', 'Device memory for PyTorch: ' + fmtBytes(w.capacity) + ' (reserved plus free when the OOM happened, or as given).'));
    const legend = el('div', 'legend');
    for (const [name, col] of [['recorded reserved', '#9ca3af'], ['simulated: ' + w.runs[simRun].label.replace(/,/g, ', '), '#2563eb'], ['device memory', '#dc2626']]) {
      const sp = el('span'); const sw = el('span', 'sw'); sw.style.background = col; sp.appendChild(sw); sp.appendChild(document.createTextNode(name)); legend.appendChild(sp);
    }
    p.appendChild(legend);
    const cv = el('canvas'); cv.id = 'simulate-plot'; p.appendChild(cv);
    drawSimulate(cv);
    const tb = el('table', 'simulate-table'); tb.id = 'simulate-table';
    const hr = el('tr'); for (const h of ['settings', 'peak reserved', 'peak allocated', 'mallocs', 'frees', 'result']) hr.appendChild(el('th', null, h));
    tb.appendChild(hr);
    w.runs.forEach((r, i) => {
      const tr = el('tr', 'simulate-row' + (i === simRun ? ' sel' : '')); tr.dataset.run = String(i);
      const res = r.oom ? 'OOM at ' + fmtCount(r.oom[0]) : (w.capacity !== null ? 'fits' : 'no OOM');
      // One setting per line: the labels are PYTORCH_CUDA_ALLOC_CONF strings.
      const lab = el('td'); for (const part of r.label.split(',')) lab.appendChild(el('div', null, part));
      tr.appendChild(lab);
      for (const c of [fmtBytes(r.peak_reserved), fmtBytes(r.peak_allocated), fmtCount(r.mallocs), fmtCount(r.frees), res]) tr.appendChild(el('td', null, c));
      tr.addEventListener('click', () => { simRun = i; showSimulate(); });
      tb.appendChild(tr);
    });
    p.appendChild(tb);
  }
  // ---------- What to do panel ----------
  // The analysis's ranked changes (vramscope advise): each with its
  // predicted peak, verdict, how it was predicted and the code to write.
  function adviseVerdict(a) { return a.fits === true ? 'fits' : a.fits === false ? 'does not fit' : 'cannot tell'; }
  function showAdvise() {
    const p = $('panel-advise'); p.textContent = '';
    const a = model.info.advise; if (!a) return;
    p.appendChild(el('h3', null, 'What to do'));
    if (a.skipped) { p.appendChild(el('p', 'muted', a.skipped)); return; }
    const ans = el('div', 'explain'); ans.id = 'advise-answer'; ans.textContent = a.answer; p.appendChild(ans);
    const b = a.baseline, withCap = a.capacity !== null;
    p.appendChild(el('p', 'muted', (withCap ? 'Device memory for PyTorch: ' + fmtBytes(a.capacity) + '. ' : 'No device memory known: changes are ranked by peak only. ') +
      (a.caching_allocator === false
        ? 'As recorded, counted without a caching allocator: ' + fmtBytes(b.peak_reserved) + ' allocated at the peak'
        : 'As recorded, replayed from an empty cache: ' + fmtBytes(b.peak_reserved) + ' reserved at the peak') + (withCap ? ', ' + adviseVerdict(b) : '') + '.'));
    // One block a change (the panel is narrow): the change, its figures on
    // one line, how it was predicted, the code.
    const list = el('ol', 'advise-list'); list.id = 'advise-list';
    a.advice.forEach((x) => {
      const li = el('li', 'advise-row'); li.dataset.cls = x.class;
      li.appendChild(el('div', 'advise-change', x.change));
      const fig = el('div', 'advise-figures');
      // A bound is the least the peak can be, so the most it saves.
      const bound = x.method === 'bound';
      fig.appendChild(el('span', 'advise-peak', (x.fits === false ? (a.caching_allocator === false ? 'would allocate ' : 'would reserve ') : (a.caching_allocator === false ? 'peak allocated ' : 'peak reserved ')) + (bound ? 'at least ' : '') + fmtBytes(x.peak_reserved)));
      fig.appendChild(el('span', 'advise-saving', (bound ? 'at most ' : '') + (x.saving >= 0 ? '−' : '+') + fmtBytes(Math.abs(x.saving))));
      if (withCap) fig.appendChild(el('span', 'advise-verdict ' + (x.fits === true ? 'fits' : x.fits === false ? 'nofit' : 'unknown'), adviseVerdict(x)));
      fig.appendChild(el('span', 'advise-method', x.method));
      li.appendChild(fig);
      li.appendChild(el('div', 'advise-how', 'How: ' + x.how));
      if (x.code) li.appendChild(el('pre', 'advise-code', x.code));
      list.appendChild(li);
    });
    p.appendChild(list);
    if ((a.no_gain || []).length) {
      p.appendChild(el('h4', null, 'Tried, lowers no peak here'));
      const ul = el('ul', 'muted'); ul.id = 'advise-no-gain';
      for (const x of a.no_gain) {
        ul.appendChild(el('li', null, x.change + ': ' + (a.caching_allocator === false ? 'peak allocated ' : 'peak reserved ') + fmtBytes(x.peak_reserved) +
          ' (' + (x.saving >= 0 ? '−' : '+') + fmtBytes(Math.abs(x.saving)) + ', ' + x.method + ')'));
      }
      p.appendChild(ul);
    }
    if (a.not_offered.length) {
      p.appendChild(el('h4', null, 'Not offered'));
      const ul = el('ul', 'muted');
      for (const n of a.not_offered) ul.appendChild(el('li', null, n.change + ': ' + n.why));
      p.appendChild(ul);
    }
  }
  // The recorded reserved bytes over the same stretches as a run's curve
  // (each point is the largest value of the entries since the previous).
  function simulateSeries(run) {
    const m = model, pts = run.curve, rec = new Float64Array(pts.length);
    let from = 0;
    pts.forEach(([i], k) => {
      let mx = 0; for (let e = from; e <= i && e < m.nE; e++) if (m.reserved[e + 1] > mx) mx = m.reserved[e + 1];
      rec[k] = mx; from = i + 1;
    });
    return rec;
  }
  function drawSimulate(cv) {
    const w = model.info.simulate, run = w.runs[simRun], pts = run.curve;
    const dpr = window.devicePixelRatio || 1;
    cv.width = Math.max(100, Math.round(cssWidth(cv) * dpr)); cv.height = Math.round(180 * dpr); cv.style.height = '180px';
    const c = cv.getContext('2d'), rec = simulateSeries(run);
    // The device's memory is drawn when it is near the curves; a limit far
    // above them would flatten them.
    let top = 0; for (let k = 0; k < pts.length; k++) top = Math.max(top, pts[k][1], rec[k]);
    const capShown = w.capacity !== null && w.capacity <= top * 2;
    if (capShown) top = Math.max(top, w.capacity);
    top = top * 1.05 || 1;
    const L = 68 * dpr, W = cv.width - L - 4 * dpr, Hh = cv.height - 16 * dpr;
    const X = (i) => L + i / Math.max(1, model.nE - 1) * W, Y = (b) => 4 * dpr + Hh - b / top * Hh;
    c.font = (10 * dpr) + 'px system-ui, sans-serif'; c.fillStyle = '#4b5563'; c.textAlign = 'right'; c.textBaseline = 'middle';
    for (const b of byteTicks(0, top, 4)) { c.fillText(fmtBytes(b), L - 4 * dpr, Y(b)); c.fillStyle = '#f3f4f6'; c.fillRect(L, Y(b), W, 1); c.fillStyle = '#4b5563'; }
    const line = (ys, col, width) => {
      c.strokeStyle = col; c.lineWidth = width * dpr; c.beginPath();
      pts.forEach(([i], k) => { const x = X(i), y = Y(ys(k)); if (k) c.lineTo(x, y); else c.moveTo(x, y); });
      c.stroke();
    };
    line((k) => rec[k], '#9ca3af', 4); // wider: it shows where the two agree
    line((k) => pts[k][1], '#2563eb', 1.5);
    if (capShown) { c.strokeStyle = '#dc2626'; c.setLineDash([4 * dpr, 3 * dpr]); c.beginPath(); c.moveTo(L, Y(w.capacity)); c.lineTo(L + W, Y(w.capacity)); c.stroke(); c.setLineDash([]); }
    if (run.oom) { c.fillStyle = '#dc2626'; c.fillRect(X(run.oom[0]) - dpr, 4 * dpr, 2 * dpr, Hh); }
  }
  function showSegmentsQuiet(e) { // figures only, without touching the panel
    const m = model; let largestFree = 0;
    const segs = []; for (let s = 0; s < m.s_t0.length; s++) if (m.s_t0[s] <= e && m.s_t1[s] > e) segs.push(s);
    segs.sort((x, y) => m.s_addr[x] - m.s_addr[y]);
    const live = liveAt(e).sort((x, y) => m.addr[x] - m.addr[y]); let li = 0;
    for (const s of segs) {
      const lo = m.s_addr[s], hi = lo + m.s_size[s]; let cur = lo;
      while (li < live.length && m.addr[live[li]] < lo) li++;
      while (li < live.length && m.addr[live[li]] < hi) { const a = live[li]; if (m.addr[a] > cur) largestFree = Math.max(largestFree, m.addr[a] - cur); cur = Math.max(cur, m.addr[a] + Math.ceil(m.size[a] / 512) * 512); li++; }
      if (hi > cur) largestFree = Math.max(largestFree, hi - cur);
    }
    return { largestFree };
  }
  function sitesTable(title, sites, total) {
    const d = el('div'); d.appendChild(el('h3', null, title));
    const tb = el('table'); const hr = el('tr');
    ['bytes', 'share', 'blocks', 'site'].forEach((h, i) => hr.appendChild(el('th', i < 3 ? 'n' : null, h))); tb.appendChild(hr);
    for (const s of sites) {
      const tr = el('tr');
      tr.appendChild(el('td', 'n', fmtBytes(s.bytes)));
      tr.appendChild(el('td', 'n', (total > 0 ? (s.bytes / total * 100).toFixed(1) : '0') + '%'));
      tr.appendChild(el('td', 'n', fmtCount(s.count)));
      const parts = (s.file || '').split(/[\\/]/);
      const td = el('td', 'wrap', s.file && parts.length > 2 && !s.site.endsWith('(C++)') ? '…/' + parts.slice(-2).join('/') + ':' + s.line + ' in ' + s.function : s.site);
      td.title = s.site; tr.appendChild(td);
      tb.appendChild(tr);
    }
    d.appendChild(tb); return d;
  }

  // ---------- facts, file panel, legend ----------
  function showFacts() {
    const f = $('facts'); f.textContent = '';
    const s = model.summary, add = (k, v, cls) => { const sp = el('span'); sp.appendChild(el('span', 'k', k)); sp.appendChild(el('span', 'v' + (cls ? ' ' + cls : ''), v)); f.appendChild(sp); };
    if (s.name && !/^device /.test(s.name)) add('device', s.name);
    add('peak allocated', fmtBytes(s.peak.allocated_bytes));
    // Without a caching allocator (CPU recordings) reserved is allocated
    // and nothing is cached: those figures would only repeat or mislead.
    if (s.caching_allocator) add('peak reserved', fmtBytes(s.peak_reserved_bytes));
    add('at the end', fmtBytes(s.end.allocated_bytes) + ' allocated' + (s.caching_allocator ? ' / ' + fmtBytes(s.end.reserved_bytes) + ' reserved' : ''));
    add('events', fmtCount(s.events.total) + (s.events.span_us !== null ? ' over ' + fmtDur(s.events.span_us) : ''));
    if (s.caching_allocator) add('cached free', fmtBytes(s.end.fragmentation.cached_free_bytes) + ' (largest ' + fmtBytes(s.end.fragmentation.largest_free_block) + ')');
    if (s.ooms.length) {
      // The first view names why: the first OOM's dominant cause.
      const d = s.ooms[0].diagnosis, kind = (d.causes[0] || {}).kind;
      const names = { too_large: 'a request larger than the device', outside: 'memory held outside PyTorch', capacity: 'capacity', fragmentation: 'fragmentation' };
      let v = s.ooms.length + ' event(s)' + (kind ? ': ' + names[kind] : '');
      if (d.outside_bytes && kind !== 'outside') v += '; ' + fmtBytes(d.outside_bytes) + ' held outside PyTorch';
      add('out of memory', v, 'warn');
      // The verdict itself, in the strip every view shows.
      const verdict = el('div', 'verdict'); verdict.id = 'verdict';
      verdict.appendChild(el('span', 'k', 'why'));
      verdict.appendChild(el('span', null, s.ooms[0].cause));
      verdict.title = s.ooms[0].cause;
      f.appendChild(verdict);
    }
    // What a damaged file lost and figures that contradict each other:
    // above everything, never only in the File tab.
    const b = $('banner'); b.textContent = '';
    const notes = (H.source.damage ? [H.source.damage] : []).concat(s.inconsistencies || []);
    for (const n of notes) b.appendChild(el('p', null, 'warning: ' + n));
    b.hidden = !notes.length;
  }
  function showAbout() {
    const p = $('panel-about'); p.textContent = '';
    const src = H.source;
    p.appendChild(el('h3', null, 'Source'));
    p.appendChild(kvTable([
      ['size', fmtBytes(src.file_bytes)], ['encoding', src.encoding + (src.pickle_protocol !== null ? ' protocol ' + src.pickle_protocol : '')],
      ['compression', src.compression], ['layout', src.layout + (src.legacy_blocks ? ' (PyTorch 2.0 blocks)' : '')],
      ['report', 'vramscope ' + H.version],
    ]));
    for (const w of src.warnings) p.appendChild(el('p', 'muted', 'warning: ' + w));
    for (const w of src.skipped) p.appendChild(el('p', 'muted', 'skipped: ' + w));
    if (H.allocator_settings) {
      p.appendChild(el('h3', null, 'Allocator settings'));
      p.appendChild(kvTable(Object.entries(H.allocator_settings).map(([k, v]) => [k, typeof v === 'string' ? v : JSON.stringify(v)])));
    }
    p.appendChild(el('h3', null, 'Peak: alive by allocation site'));
    p.appendChild(sitesTable('', model.summary.peak.top_sites, model.summary.peak.allocated_bytes));
  }
  // Sites alive at the peak, largest first: [frame (-1: no stack), bytes].
  function peakSites() {
    const by = new Map();
    for (const a of liveAt(model.peakEvent === null ? -1 : model.peakEvent)) {
      const st = model.stack[a], f = st === 0xffffffff ? -1 : siteFrameOfStack[st];
      by.set(f, (by.get(f) || 0) + model.size[a]);
    }
    return [...by.entries()].sort((x, y) => y[1] - x[1]);
  }
  const LEGEND_SITES = 8;
  // The legend names what is drawn: each category (or the largest sites)
  // with its colour and its bytes at the peak, largest first, then the rest.
  function showLegend() {
    const lg = $('legend'); lg.textContent = '';
    const item = (col, text, bytes) => {
      const sp = el('span'); const sw = el('span', 'sw'); sw.style.background = col; sp.appendChild(sw);
      sp.appendChild(document.createTextNode(text));
      if (bytes !== undefined) sp.appendChild(el('span', 'lb', ' ' + fmtBytes(bytes)));
      lg.appendChild(sp); return sp;
    };
    const atPeak = (name) => { const x = (model.summary.peak.by_category || []).find((c) => c.category === name); return x ? x.bytes : 0; };
    if (colorBy === 'category' && model.cat) {
      const names = [...model.info.categories_present].sort((a, b) => atPeak(b) - atPeak(a));
      for (const name of names) {
        const k = model.info.categories.indexOf(name);
        const sp = item(rgba(catColor(k)), CAT_LABELS[name] || name, atPeak(name));
        sp.classList.add('cat-item'); sp.dataset.cat = name;
        if (highlightCat === k) sp.classList.add('on');
        sp.title = (CAT_LABELS[name] || name) + ' at the peak; click: make its allocations stand out';
        sp.addEventListener('click', () => toggleHighlight(k));
      }
    } else if (colorBy === 'stream') model.info.streams.forEach((s, k) => item(rgba(hashColor(k + 3)), 'stream ' + s));
    else {
      const sites = peakSites();
      for (const [f, bytes] of sites.slice(0, LEGEND_SITES)) {
        const sp = item(rgba(f < 0 ? GRAY : hashColor(f + 1)), f < 0 ? 'no stack recorded' : shortLabel(f), bytes);
        sp.classList.add('site-item');
        if (f >= 0) sp.title = frameText(f).label + ' (at the peak)';
      }
      const rest = sites.slice(LEGEND_SITES);
      if (rest.length) item('linear-gradient(90deg,#f59e0b,#10b981,#6366f1)', 'other (' + rest.length + ' sites)', rest.reduce((t, x) => t + x[1], 0));
      else if (!sites.length) item(rgba(GRAY), 'no stack recorded');
    }
    item('#111827', 'reserved (segments)');
    item('rgba(37,99,235,.8)', 'peak');
    if (model.info.ooms.length) item('rgba(220,38,38,.85)', 'out of memory');
  }

  // ---------- categories: what the memory is, over time ----------
  function toggleHighlight(k) {
    highlightCat = highlightCat === k ? -1 : k;
    if (highlightCat >= 0 && colorBy !== 'category') { colorBy = 'category'; $('color-by').value = 'category'; }
    showLegend(); render();
    if ($('panel-categories').classList.contains('active')) drawCategories();
  }
  // Bytes per category alive right after event e (exact: from the allocations).
  function categoryBytesAt(e) {
    const m = model, out = new Float64Array(m.info.categories.length);
    for (const a of liveAt(e)) { const k = m.cat[a]; if (k !== 0xffff) out[k] += m.size[a]; }
    return out;
  }
  function showCategories() {
    const p = $('panel-categories'); p.textContent = '';
    const m = model, present = m.info.categories_present;
    const sum = m.summary;
    p.appendChild(el('h3', null, 'What the memory is, over time'));
    const cv = el('canvas'); cv.id = 'cat-plot'; p.appendChild(cv);
    const readout = el('div', 'muted'); readout.id = 'cat-readout';
    readout.textContent = 'Hover the areas for the bytes of each category at that moment; click one to make its allocations stand out in the timeline.';
    p.appendChild(readout);
    const tb = el('table'); tb.id = 'cat-table'; const hr = el('tr');
    ['', 'category', 'peak', 'end', 'labels'].forEach((h, i) => hr.appendChild(el('th', i >= 2 && i < 4 ? 'n' : null, h)));
    tb.appendChild(hr);
    const find = (v, name) => { const x = (v || []).find((c) => c.category === name); return x ? x.bytes : 0; };
    for (const name of present) {
      const k = m.info.categories.indexOf(name), tr = el('tr'); tr.className = 'cat-row'; tr.dataset.cat = name;
      const sw = el('td'); const box = el('span', 'sw'); box.style.background = rgba(catColor(k)); sw.appendChild(box); tr.appendChild(sw);
      tr.appendChild(el('td', null, CAT_LABELS[name] || name));
      tr.appendChild(el('td', 'n', fmtBytes(find(sum.peak.by_category, name))));
      tr.appendChild(el('td', 'n', fmtBytes(find(sum.end_by_category, name))));
      tr.appendChild(el('td', 'muted', (m.info.category_sources || {})[name] || ''));
      tr.addEventListener('click', () => toggleHighlight(k));
      tb.appendChild(tr);
    }
    p.appendChild(tb);
    cv.addEventListener('mousemove', (ev) => {
      const r = cv.getBoundingClientRect(), f = (ev.clientX - r.left) / r.width;
      const e = eventAt(view.x0 + f * (view.x1 - view.x0));
      if (e < 0 || e >= m.nE) return;
      const v = categoryBytesAt(e);
      readout.textContent = eventTime(e) + ': ' + present.map((name) => (CAT_LABELS[name] || name) + ' ' + fmtBytes(v[m.info.categories.indexOf(name)])).join(' · ');
      cv.dataset.event = String(e);
    });
    cv.addEventListener('click', (ev) => {
      const r = cv.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
      const x = (ev.clientX - r.left) * dpr, y = (ev.clientY - r.top) * dpr;
      const k = categoryAtPixel(x, y);
      if (k >= 0) toggleHighlight(k);
    });
    drawCategories();
  }
  let catBands = null; // per drawn column: [x, cumulative tops per category]
  function categoryAtPixel(x, y) {
    if (!catBands) return -1;
    const col = catBands.cols.find((c) => Math.abs(c.x - x) <= catBands.step);
    if (!col) return -1;
    const v = catBands.h - y; // bytes-space height from the bottom, in pixels
    for (const [k, lo, hi] of col.spans) if (v >= lo && v < hi) return k;
    return -1;
  }
  // Stacked areas over the main view's time range, from the per-bucket
  // series (the event of highest total in each bucket, so no spike is lost).
  function drawCategories() {
    const cv = $('cat-plot'); if (!cv) return;
    const m = model, dpr = window.devicePixelRatio || 1;
    cv.width = Math.max(100, Math.round(cssWidth(cv) * dpr)); cv.height = Math.round(180 * dpr);
    const c = cv.getContext('2d'); c.clearRect(0, 0, cv.width, cv.height);
    const nB = m.csEvent ? m.csEvent.length : 0, nC = m.info.categories.length;
    if (!nB) { catBands = null; return; }
    const xs = [], idx = [];
    for (let b = 0; b < nB; b++) {
      const x = posOfEvent(m.csEvent[b]);
      if (x < view.x0 || x > view.x1) continue;
      xs.push((x - view.x0) / (view.x1 - view.x0) * cv.width); idx.push(b);
    }
    // Hold the first and last values out to the edges (a short trace, or a
    // view zoomed between two buckets, still shows its areas).
    if (!idx.length) {
      let b = 0; while (b + 1 < nB && posOfEvent(m.csEvent[b + 1]) <= view.x0) b++;
      idx.push(b); xs.push(0);
    }
    if (xs[0] > 0) { xs.unshift(0); idx.unshift(idx[0]); }
    if (xs[xs.length - 1] < cv.width) { xs.push(cv.width); idx.push(idx[idx.length - 1]); }
    let ymax = 1;
    for (const b of idx) { let t = 0; for (let k = 0; k < nC; k++) t += m.csBytes[k * nB + b]; if (t > ymax) ymax = t; }
    const H = cv.height, order = m.info.categories_present.map((n) => m.info.categories.indexOf(n));
    const cols = xs.map((x) => ({ x, spans: [] }));
    const base = new Float64Array(idx.length);
    for (const k of order) {
      c.beginPath();
      const top = idx.map((b, i) => base[i] + m.csBytes[k * nB + b]);
      for (let i = 0; i < idx.length; i++) { const y = H - top[i] / ymax * H; if (i) c.lineTo(xs[i], y); else c.moveTo(xs[i], y); }
      for (let i = idx.length - 1; i >= 0; i--) c.lineTo(xs[i], H - base[i] / ymax * H);
      c.closePath();
      c.fillStyle = rgba(highlightCat >= 0 && highlightCat !== k ? dim(dim(catColor(k))) : catColor(k));
      c.fill();
      for (let i = 0; i < idx.length; i++) { cols[i].spans.push([k, base[i] / ymax * H, top[i] / ymax * H]); base[i] = top[i]; }
    }
    c.fillStyle = '#6b7280'; c.font = (10 * dpr) + 'px system-ui, sans-serif'; c.fillText(fmtBytes(ymax), 4 * dpr, 12 * dpr);
    catBands = { cols, h: H, step: Math.max(2 * dpr, cv.width / Math.max(1, idx.length)) };
  }

  // ---------- search ----------
  function applySearch(q) {
    searchText = q.trim().toLowerCase();
    if (!searchText) { searchStacks = searchAllocs = null; $('search-info').textContent = ''; render(); return; }
    const nF = frames.length / 4, hitF = new Uint8Array(nF);
    for (let f = 0; f < nF; f++) if (frameText(f).label.toLowerCase().includes(searchText)) hitF[f] = 1;
    const nS = stackOff.length - 1; searchStacks = new Uint8Array(nS);
    for (let s = 0; s < nS; s++) for (let k = stackOff[s]; k < stackOff[s + 1]; k++) if (hitF[stackFrames[k]]) { searchStacks[s] = 1; break; }
    const m = model; searchAllocs = new Uint8Array(m.nA); let n = 0;
    const addrQ = searchText.startsWith('0x') ? parseInt(searchText, 16) : NaN;
    for (let a = 0; a < m.nA; a++) {
      const s = m.stack[a];
      const hit = (s !== 0xffffffff && searchStacks[s]) || (!isNaN(addrQ) && addrQ >= m.addr[a] && addrQ < m.addr[a] + Math.max(512, m.size[a]));
      if (hit) { searchAllocs[a] = 1; n++; }
    }
    $('search-info').textContent = fmtCount(n) + ' matching allocations';
    render();
  }

  // ---------- navigation ----------
  function zoomTo(e, halfWidthEvents) {
    const m = model; const lo = Math.max(0, e - halfWidthEvents), hi = Math.min(m.nE - 1, e + halfWidthEvents);
    if (hasTime()) { const t = m.time; const span = Math.max(1, t[hi] - t[lo]); view.x0 = t[lo] - span * 0.05; view.x1 = t[hi] + span * 0.05; }
    else { view.x0 = lo - 0.5; view.x1 = hi + 0.5; }
  }
  function goPeak() {
    const e = model.peakEvent === null ? 0 : model.peakEvent;
    zoomTo(e, Math.max(20, Math.round(model.nE / 20)));
    showAlive(model.peakEvent === null ? -1 : model.peakEvent);
    activateTab('alive');
  }
  let oomCursor = -1;
  function goOom() {
    const o = model.info.ooms; if (!o.length) return;
    oomCursor = (oomCursor + 1) % o.length;
    zoomTo(o[oomCursor].event, Math.max(20, Math.round(model.nE / 20)));
    activateTab('oom'); render();
  }
  function activateTab(name) {
    document.querySelectorAll('.tabs button').forEach((b) => b.classList.toggle('active', b.dataset.tab === name));
    document.querySelectorAll('.panel').forEach((p) => p.classList.toggle('active', p.id === 'panel-' + name));
  }

  function clientToCanvas(ev) {
    const r = plot.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
    return [(ev.clientX - r.left) * dpr, (ev.clientY - r.top) * dpr, ev.clientX - r.left, ev.clientY - r.top];
  }
  let raf = 0;
  function schedule() { if (!raf) raf = requestAnimationFrame(() => { raf = 0; render(); }); }

  function bindUi() {
    let drag = null;
    plot.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      const [cx, cy] = clientToCanvas(ev), ar = area(), k = Math.pow(1.0015, ev.deltaY);
      if (ev.shiftKey) {
        const b = view.y0 + (ar.t + ar.h - cy) / ar.h * (view.y1 - view.y0);
        view.y0 = Math.max(0, b - (b - view.y0) * k); view.y1 = b + (view.y1 - b) * k;
      } else {
        const x = view.x0 + (cx - ar.l) / ar.w * (view.x1 - view.x0);
        view.x0 = x - (x - view.x0) * k; view.x1 = x + (view.x1 - x) * k;
      }
      schedule();
    }, { passive: false });
    plot.addEventListener('mousedown', (ev) => { const [cx, cy] = clientToCanvas(ev); drag = { cx, cy, x0: view.x0, x1: view.x1, y0: view.y0, y1: view.y1, moved: false }; });
    window.addEventListener('mouseup', (ev) => {
      if (drag && !drag.moved && ev.target === plot) {
        const [cx, cy] = clientToCanvas(ev);
        const a = allocAtPixel(cx, cy); const e = eventAtPixel(cx);
        pinned = a; showDetail(a);
        if (e !== null) { showAlive(e); showSegments(e); }
        activateTab(a >= 0 ? 'detail' : 'alive');
      }
      drag = null;
    });
    plot.addEventListener('mousemove', (ev) => {
      const [cx, cy, lx, ly] = clientToCanvas(ev), ar = area();
      if (drag) {
        const dx = (cx - drag.cx) / ar.w * (drag.x1 - drag.x0), dy = (cy - drag.cy) / ar.h * (drag.y1 - drag.y0);
        if (Math.abs(cx - drag.cx) + Math.abs(cy - drag.cy) > 3) drag.moved = true;
        if (drag.moved) {
          view.x0 = drag.x0 - dx; view.x1 = drag.x1 - dx;
          if (drag.y0 > 0 || dy < 0) { view.y0 = Math.max(0, drag.y0 + dy); view.y1 = view.y0 + (drag.y1 - drag.y0); }
          schedule(); $('tooltip').hidden = true; return;
        }
      }
      const a = allocAtPixel(cx, cy);
      if (a !== hovered) { hovered = a; if (pinned < 0) showDetail(a); present(); }
      showTooltip(a, lx, ly);
    });
    plot.addEventListener('mouseleave', () => { hovered = -1; $('tooltip').hidden = true; present(); });
    plot.addEventListener('dblclick', () => { resetView(); schedule(); });
    const mm = $('minimap');
    const mmMove = (ev) => {
      const r = mm.getBoundingClientRect(), [fx0, fx1] = fullX(), w = view.x1 - view.x0;
      const x = fx0 + (ev.clientX - r.left) / r.width * (fx1 - fx0);
      view.x0 = x - w / 2; view.x1 = x + w / 2; schedule();
    };
    let mmDrag = false;
    mm.addEventListener('mousedown', (ev) => { mmDrag = true; mmMove(ev); });
    window.addEventListener('mousemove', (ev) => { if (mmDrag) mmMove(ev); });
    window.addEventListener('mouseup', () => { mmDrag = false; });
    $('btn-peak').addEventListener('click', goPeak);
    $('btn-oom').addEventListener('click', goOom);
    $('btn-reset').addEventListener('click', () => { resetView(); render(); });
    $('btn-xaxis').addEventListener('click', () => {
      if (!model.time) return;
      const e0 = eventAt(view.x0), e1 = eventAt(view.x1);
      view.axis = view.axis === 'time' ? 'event' : 'time';
      $('btn-xaxis').textContent = 'x: ' + (view.axis === 'time' ? 'time' : 'event index');
      zoomTo(Math.round((e0 + e1) / 2), Math.max(1, Math.round((e1 - e0) / 2)));
      miniCols = null; render();
    });
    $('color-by').addEventListener('change', (ev) => { colorBy = ev.target.value; rememberColor(); showLegend(); render(); });
    $('show-reserved').addEventListener('change', (ev) => { showReserved = ev.target.checked; render(); });
    let st = 0;
    $('search').addEventListener('input', (ev) => { clearTimeout(st); st = setTimeout(() => applySearch(ev.target.value), 150); });
    document.querySelectorAll('.tabs button').forEach((b) => b.addEventListener('click', () => {
      activateTab(b.dataset.tab);
      const e = selectedEvent !== null ? selectedEvent : (model.peakEvent === null ? -1 : model.peakEvent);
      if (b.dataset.tab === 'segments') showSegments(e);
      if (b.dataset.tab === 'alive' && !$('panel-alive').firstChild) showAlive(e);
      if (b.dataset.tab === 'categories') drawCategories();
    }));
    window.addEventListener('keydown', (ev) => {
      if (ev.target && ev.target.tagName === 'INPUT') return;
      if (ev.key === 'p' || ev.key === 'P') goPeak();
      else if (ev.key === 'o' || ev.key === 'O') goOom();
      else if (ev.key === 'r' || ev.key === 'R') { resetView(); render(); }
      else if (ev.key === 'x' || ev.key === 'X') $('btn-xaxis').click();
    });
    window.addEventListener('resize', () => { resize(); miniCols = null; render(); });
    $('device').addEventListener('change', (ev) => selectDevice(+ev.target.value));
  }

  function selectDevice(i) {
    model = deviceModel(H.devices[i], A, S);
    pinned = hovered = -1; selectedEvent = null; oomCursor = -1; miniCols = null; highlightCat = -1;
    view.axis = model.time ? 'time' : 'event';
    $('btn-xaxis').textContent = 'x: ' + (view.axis === 'time' ? 'time' : 'event index');
    $('btn-xaxis').disabled = !model.time;
    $('btn-oom').hidden = !model.info.ooms.length; $('tab-oom').hidden = !model.info.ooms.length;
    colorBy = wantedColor();
    $('color-by').value = colorBy;
    firstView(); showFacts(); showLegend(); showAbout(); showDetail(-1);
    $('panel-alive').textContent = ''; $('panel-segments').textContent = '';
    $('tab-simulate').hidden = !model.info.simulate; simRun = 0; showSimulate();
    $('tab-advise').hidden = !model.info.advise; showAdvise();
    if (model.info.ooms.length) showOoms();
    showLeaks(); showCategories();
    $('tab-diff').hidden = !model.info.diff; showDiff();
    $('tab-leaks').textContent = 'Leaks' + (model.info.leaks && model.info.leaks.leaks_found ? ' (!)' : '');
    if (searchText) applySearch(searchText); else render();
  }

  // Colour by category where the file's allocations have categories, by
  // site otherwise, unless the URL names one (`#color=site`; `#category`).
  function hashParts() { return location.hash.slice(1).split(',').filter(Boolean); }
  function wantedColor() {
    const h = hashParts(), named = h.find((x) => x.startsWith('color='));
    const want = named ? named.slice(6) : (h.includes('category') || h.includes('categories') ? 'category' : null);
    if (want === 'site' || want === 'stream') return want;
    if (want === 'category' && model.cat) return 'category';
    // By category where labels say what most of the peak is; a file whose
    // memory is mostly "unknown" reads better by site.
    const s = model.summary.peak, known = (s.by_category || []).filter((c) => c.category !== 'unknown').reduce((t, c) => t + c.bytes, 0);
    return model.cat && known * 2 >= s.allocated_bytes && known > 0 ? 'category' : 'site';
  }
  function rememberColor() {
    const h = hashParts().filter((x) => !x.startsWith('color=') && x !== 'category');
    h.push('color=' + colorBy);
    try { history.replaceState(null, '', '#' + h.join(',')); } catch (e) { /* file:// pages may refuse: nothing lost */ }
  }

  // `report.html#peak`, `#oom`, `#segments`, `#category` open a view directly
  // (links in notes, screenshots).
  function openFromHash() {
    const h = hashParts();
    if (h.includes('categories')) { activateTab('categories'); drawCategories(); }
    // An out-of-memory file opens on what to do about it where the
    // allocator model applies (the verdict is in the strip above), on its
    // OOM panel (why, and what held the memory) otherwise.
    if (!h.some((x) => !x.startsWith('color=')) && model.info.ooms.length) activateTab(model.info.advise && !model.info.advise.skipped ? 'advise' : 'oom');
    if (h.includes('advise') && model.info.advise) activateTab('advise');
    if (h.includes('peak')) goPeak();
    if (h.includes('leaks')) activateTab('leaks');
    if (h.includes('diff') && model.info.diff) activateTab('diff');
    if (h.includes('oom') && model.info.ooms.length) { goOom(); }
    if (h.includes('segments')) { showSegments(model.peakEvent === null ? -1 : model.peakEvent); activateTab('segments'); }
    render();
  }

  // ---------- test and automation hooks ----------
  const api = {
    ready: false, metrics,
    view: () => ({ ...view, events: model.nE, peakEvent: model.peakEvent, eventRange: [eventAt(view.x0), eventAt(view.x1)] }),
    // What the first view must hold, in x positions of the current axis:
    // the whole trace, the peak, each OOM, each iteration mark and the
    // iterations' first and last events.
    framing() {
      const m = model, marks = markEvents().map(posOfEvent);
      const its = (m.info.leaks && m.info.leaks.iterations) || [];
      return { full: fullX(), activity, peak: m.peakEvent === null ? null : posOfEvent(m.peakEvent), ooms: m.info.ooms.map((o) => posOfEvent(o.event)), marks,
        iterations: its.length ? [posOfEvent(its[0].start), posOfEvent(Math.min(m.nE - 1, its[its.length - 1].end - 1))] : null,
        color: colorBy, note: $('view-note').textContent };
    },
    // Client coordinates (relative to the viewport) of the middle of an
    // allocation's band in the current view, or null if not visible.
    locate(a) {
      const ar = area(), dpr = ar.dpr, r = plot.getBoundingClientRect();
      if (!colRep) return null;
      const edges = bandEdges(a);
      const cols = []; for (let c = 0; c < colRep.length; c++) if (!isNaN(edges[c])) cols.push(c);
      if (!cols.length) return null;
      // A whole-pixel point (mouse events carry integers) whose hit test
      // really finds `a`; thin bands may have none.
      const heightPx = model.size[a] / (view.y1 - view.y0) * ar.h / dpr;
      const order = [cols[Math.floor(cols.length / 2)], ...cols];
      for (const c of order.slice(0, 64)) {
        const x = Math.round((ar.l + c) / dpr);
        const mid = (yPix(ar, edges[c] + model.size[a] / 2)) / dpr;
        for (const y of [Math.round(mid), Math.floor(mid), Math.ceil(mid)]) {
          if (allocAtPixel(x * dpr, y * dpr) === a) return { x: r.left + x, y: r.top + y, heightPx, exact: true };
        }
      }
      const c = order[0];
      return { x: r.left + (ar.l + c) / dpr, y: r.top + yPix(ar, edges[c] + model.size[a] / 2) / dpr, heightPx, exact: false };
    },
    // The largest allocation alive at the peak and the first user frame of its stack.
    biggestAtPeak() {
      const e = model.peakEvent === null ? -1 : model.peakEvent;
      let best = -1; for (const a of liveAt(e)) if (best < 0 || model.size[a] > model.size[best]) best = a;
      if (best < 0) return null;
      const s = model.stack[best], f = s === 0xffffffff ? -1 : siteFrameOfStack[s];
      return { alloc: best, event: e, bytes: model.size[best], frame: f < 0 ? null : frameText(f).label };
    },
    presentCategories() {
      const seen = new Set(); for (let a = 0; a < model.nA; a++) seen.add(model.cat[a]);
      return model.info.categories.filter((_, k) => seen.has(k));
    },
    // Highlight `name`, then count allocations drawn in their own colour
    // (of that category) and faded (of the others).
    highlightCheck(name) {
      const k = model.info.categories.indexOf(name);
      if (highlightCat !== k) toggleHighlight(k);
      let same = 0, faded = 0;
      for (let a = 0; a < model.nA; a++) {
        const c = allocColor(a), own = catColor(model.cat[a]);
        if (model.cat[a] === k && c === own) same++;
        else if (model.cat[a] !== k && c !== own) faded++;
      }
      return { highlighted: highlightCat, same, faded };
    },
    categoryBytesAt(e) { const v = categoryBytesAt(e); const o = {}; model.info.categories.forEach((n, k) => { if (v[k]) o[n] = v[k]; }); return o; },
    highlight(name) { const k = model.info.categories.indexOf(name); if (k >= 0) toggleHighlight(k); return highlightCat; },
    allocColor(a) { return rgba(allocColor(a)); },
    zoomBy(k) { const c = (view.x0 + view.x1) / 2, w = (view.x1 - view.x0) * k / 2; view.x0 = c - w; view.x1 = c + w; render(); return metrics.lastRenderMs; },
    panBy(f) { const w = (view.x1 - view.x0) * f; view.x0 += w; view.x1 += w; render(); return metrics.lastRenderMs; },
    reset() { resetView(); render(); },
    // The Simulate panel: the run shown, its label, points, and pixels painted.
    simulate(i) {
      const w = model.info.simulate; if (!w) return null;
      if (i !== undefined) { simRun = i; showSimulate(); }
      const cv = $('simulate-plot'), img = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
      let painted = 0; for (let k = 3; k < img.length; k += 4) if (img[k]) painted++;
      return { run: simRun, label: w.runs[simRun].label, points: w.runs[simRun].curve.length, runs: w.runs.length, answer: w.answer, painted,
        rows: document.querySelectorAll('#simulate-table .simulate-row').length, selected: document.querySelector('#simulate-table .sel').dataset.run };
    },
    // The What to do panel as shown: the open tab, the answer, each row's
    // change, verdict and method as the page prints them.
    advise() {
      const a = model.info.advise; if (!a) return null;
      const open = document.querySelector('.tabs button.active');
      const rows = [...document.querySelectorAll('#advise-list .advise-row')].map((li) => ({
        cls: li.dataset.cls, change: li.querySelector('.advise-change').textContent,
        verdict: (li.querySelector('.advise-verdict') || {}).textContent || '', method: li.querySelector('.advise-method').textContent,
        how: li.querySelector('.advise-how').textContent, code: (li.querySelector('.advise-code') || {}).textContent || '',
        peak: li.querySelector('.advise-peak').textContent, saving: li.querySelector('.advise-saving').textContent,
      }));
      return { openTab: open ? open.dataset.tab : null, skipped: a.skipped || null, answer: (($('advise-answer') || {}).textContent) || null,
        data: a, rows, noGain: [...document.querySelectorAll('#advise-no-gain li')].map((li) => li.textContent),
        visible: $('panel-advise').classList.contains('active') };
    },
  };
  window.vramscope = api;

  // ---------- start ----------
  async function main() {
    try {
      const { header, arrays } = await loadData();
      H = header; A = arrays; S = header.strings;
      frames = arrays.frames; stackOff = arrays.stack_off; stackFrames = arrays.stack_frames; stackSite = arrays.stack_site;
      metrics.loadMs = performance.now() - T0;
      computeColors();
      $('title').textContent = H.title;
      const sel = $('device');
      H.devices.forEach((d, i) => { const o = el('option', null, 'cuda:' + d.device); o.value = String(i); sel.appendChild(o); });
      $('device-ctl').hidden = H.devices.length < 2;
      bindUi(); resize();
      if (!H.devices.length) throw new Error('This snapshot has no device with segments or events.');
      selectDevice(0);
      openFromHash();
      metrics.firstPaintMs = performance.now() - T0;
      $('loading').remove();
      api.ready = true;
      // One more render once the page is up warms the JIT, so the first
      // zoom is as quick as the later ones.
      setTimeout(() => { if (!raf) render(); }, 30);
    } catch (err) {
      const l = $('loading'); l.className = 'error'; l.textContent = 'Could not open this report: ' + (err && err.message ? err.message : String(err));
      api.error = String(err);
      throw err;
    }
  }
  main();
})();
