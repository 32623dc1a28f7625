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
    // The browser's own decoder where it has one (a 40 MB page decodes in
    // a tenth of the time of a loop over atob's string).
    let bytes;
    if (typeof Uint8Array.fromBase64 === 'function') bytes = Uint8Array.fromBase64(b64);
    else {
      const bin = atob(b64);
      bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    }
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

  const BLK = 64; // events per block of the column maxima
  function deviceModel(D, A, S) {
    const p = (n) => A['d' + D.device + '.' + n];
    const m = {
      info: D, nE: D.events, nA: D.allocs,
      t0: p('a_t0'), treq: p('a_treq'), t1: p('a_t1'), size: p('a_size'), addr: p('a_addr'),
      stack: p('a_stack'), part: p('a_part') || null, stream: p('a_stream'), cat: p('a_cat') || null, meta: p('a_meta') || null,
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
    // The largest level of each block of BLK events (and the event after
    // which it is reached): a column spanning thousands of events reads
    // their blocks, not every event.
    const nB = Math.ceil(nE / BLK);
    m.blkMax = new Float64Array(nB); m.blkArg = new Int32Array(nB);
    for (let b = 0; b < nB; b++) {
      const lo = b * BLK, hi = Math.min(nE, lo + BLK);
      let best = lo, bv = m.alloc[lo + 1];
      for (let e = lo + 1; e < hi; e++) if (m.alloc[e + 1] > bv) { bv = m.alloc[e + 1]; best = e; }
      m.blkMax[b] = bv; m.blkArg[b] = best;
    }
    m.peakEvent = D.summary.peak.event_index; // null = start
    lodIndex(m);
    return m;
  }

  // ---------- level of detail ----------
  // A column of the plot shows the state after one event; between two
  // columns only what outlives the step matters. Per block of LBLK events:
  // the allocations born in it that outlive it (`lb`) and those freed in
  // it that were born before it (`ld`), each list in allocation order. A
  // stretch of whole blocks is crossed by these lists, so the cost of a
  // view is what lives long in it, not its events; the thousands of
  // temporaries a zoomed-out column spans are never visited. Checkpoints
  // (the allocations alive at every `ckEvery`-th block's start) give the
  // state at any event from the nearest one before it.
  const LBLK = 256;
  function lodIndex(m) {
    const nE = m.nE, nA = m.nA, t0 = m.t0, t1 = m.t1;
    const nL = Math.ceil(nE / LBLK);
    const lbOff = new Uint32Array(nL + 1), ldOff = new Uint32Array(nL + 1);
    for (let a = 0; a < nA; a++) {
      if (t0[a] >= 0) { const k = (t0[a] / LBLK) | 0; if (t1[a] >= (k + 1) * LBLK) lbOff[k + 1]++; }
      if (t1[a] < nE) { const k = (t1[a] / LBLK) | 0; if (t0[a] < k * LBLK) ldOff[k + 1]++; }
    }
    for (let k = 0; k < nL; k++) { lbOff[k + 1] += lbOff[k]; ldOff[k + 1] += ldOff[k]; }
    const lbIdx = new Int32Array(lbOff[nL]), ldIdx = new Int32Array(ldOff[nL]);
    const lbAt = lbOff.slice(0, nL), ldAt = ldOff.slice(0, nL);
    for (let a = 0; a < nA; a++) {
      if (t0[a] >= 0) { const k = (t0[a] / LBLK) | 0; if (t1[a] >= (k + 1) * LBLK) lbIdx[lbAt[k]++] = a; }
      if (t1[a] < nE) { const k = (t1[a] / LBLK) | 0; if (t0[a] < k * LBLK) ldIdx[ldAt[k]++] = a; }
    }
    Object.assign(m, { nL, lbOff, lbIdx, ldOff, ldIdx });
    // About 64 checkpoints whatever the length, at least 16 blocks apart.
    const every = Math.max(16, Math.ceil(nL / 64));
    const cps = [];
    let cur = [];
    for (let a = 0; a < nA; a++) if (t0[a] < 0 && t1[a] >= 0) cur.push(a);
    for (let k = 0; ; k += every) {
      cps.push(Int32Array.from(cur));
      if (k + every > nL) break;
      // Alive at the start of block k + every: those alive at block k's
      // start still alive, then those born in between that outlive it
      // (born later, so the list stays in allocation order).
      const B = (k + every) * LBLK;
      const next = [];
      for (const a of cur) if (t1[a] >= B) next.push(a);
      for (let i = lbOff[k]; i < lbOff[k + every]; i++) { const a = lbIdx[i]; if (t1[a] >= B) next.push(a); }
      cur = next;
    }
    m.ckEvery = every; m.checkpoints = cps;
    // Slot of each allocation in the current view (valid where slotGen
    // holds the view's generation).
    m.slotOf = new Int32Array(nA); m.slotGen = new Uint32Array(nA); m.gen = 0;
  }

  // The allocations alive after event E (-1: at the start), in allocation
  // order: the nearest checkpoint, the blocks after it, then the events.
  function aliveAt(m, E) {
    const t1 = m.t1, B = E + 1, b = Math.floor(B / LBLK);
    const ci = Math.min(Math.floor(b / m.ckEvery), m.checkpoints.length - 1);
    const out = [];
    for (const a of m.checkpoints[ci]) if (t1[a] > E) out.push(a);
    for (let k = ci * m.ckEvery; k < b; k++) {
      for (let i = m.lbOff[k]; i < m.lbOff[k + 1]; i++) { const a = m.lbIdx[i]; if (t1[a] > E) out.push(a); }
    }
    for (let e = b * LBLK; e <= E; e++) { const a = m.evAlloc[e]; if (a >= 0 && t1[a] > E) out.push(a); }
    return out;
  }

  // ---------- global state ----------
  let H, A, S, model;             // header, arrays, string table, device model
  let frames;                      // Uint32Array, 4 per frame: file, line, name, kind
  let stackOff, stackFrames, stackSite, stackPart;
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
    workspace: hsl(180, 40, 45), ema: hsl(235, 55, 62), unknown: hsl(220, 12, 66) };
  const CAT_LABELS = { parameter: 'parameters', gradient: 'gradients', optimizer_state: 'optimizer state', activation: 'activations',
    input: 'inputs', temporary: 'temporaries', autograd_detail: 'autograd detail', workspace: 'workspaces', ema: 'EMA weights', unknown: 'unknown' };
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
    if (m.nE < 2) return full;
    const its = (m.info.leaks && m.info.leaks.iterations) || [];
    let lo = its.length ? its[0].start : 0, hi = its.length ? Math.min(m.nE - 1, Math.max(its[0].start, its[its.length - 1].end - 1)) : m.nE - 1;
    const take = (e) => { if (e !== null && e !== undefined && e >= 0 && e < m.nE) { lo = Math.min(lo, e); hi = Math.max(hi, e); } };
    take(m.peakEvent);
    for (const o of m.info.ooms) take(o.event);
    markEvents().forEach(take);
    // On the time axis of a file that ran out of memory, an idle stretch of
    // more than half the span (setup, compilation, a data loader's start)
    // would squeeze the activity into one edge: the view starts or ends at
    // it, on the side of the last OOM, which the page is about.
    activityIdle = 0;
    if (m.time && m.info.ooms.length) {
      const focus = m.info.ooms[m.info.ooms.length - 1].event;
      if (hi > lo && focus !== null && focus !== undefined) {
        let gap = 0, at = -1;
        for (let e = lo; e < hi; e++) { const g = m.time[e + 1] - m.time[e]; if (g > gap) { gap = g; at = e; } }
        if (gap > 0.5 * (m.time[hi] - m.time[lo])) {
          if (focus > at) lo = at + 1; else hi = at;
          activityIdle = gap;
        }
      }
    }
    const p0 = posOfEvent(lo), p1 = posOfEvent(hi), pad = Math.max((p1 - p0) * 0.03, 1);
    const x0 = Math.max(full[0], p0 - pad), x1 = Math.min(full[1], p1 + pad);
    return x1 - x0 > 0.8 * (full[1] - full[0]) ? full : [x0, x1];
  }
  let activityIdle = 0; // idle time the first view leaves out (µs)
  // What the first view leaves out, for the note beside the buttons.
  let activity = null; // the first view's x range when it leaves something out
  function viewNote() {
    const n = $('view-note'); if (!n) return;
    let text = '';
    if (activity && view.x0 === activity[0] && view.x1 === activity[1]) {
      const full = fullX(), head = eventAt(view.x0), tail = model.nE - eventAt(view.x1);
      text = (activityIdle > 0 ? 'showing the activity (' + fmtDur(activityIdle) + ' idle left out); ' : 'showing the iterations; ') + (hasTime()
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

