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
    const al = model.alloc, bm = model.blkMax, ba = model.blkArg;
    for (let c = 0; c < W; c++) {
      const a = first[c], b = first[c + 1];
      if (b <= a) { rep[c] = a - 1; continue; }
      let best = a, bv = al[a + 1];
      // Events up to the first whole block, the whole blocks by their
      // maxima, then the events after the last (the first maximum wins, as
      // an event-by-event scan would pick it).
      const b0 = Math.ceil(a / BLK), b1 = Math.floor(b / BLK);
      if (b1 > b0) {
        for (let e = a + 1; e < b0 * BLK; e++) if (al[e + 1] > bv) { bv = al[e + 1]; best = e; }
        for (let k = b0; k < b1; k++) if (bm[k] > bv) { bv = bm[k]; best = ba[k]; }
        for (let e = b1 * BLK; e < b; e++) if (al[e + 1] > bv) { bv = al[e + 1]; best = e; }
      } else {
        for (let e = a + 1; e < b; e++) if (al[e + 1] > bv) { bv = al[e + 1]; best = e; }
      }
      rep[c] = best;
    }
    return rep;
  }

  // The events after `from` up to and including `to`, as what changes the
  // state at `to`: `born(a)` for each allocation born there and alive at
  // `to`, `freed(f)` for each freed there that was born before (callers
  // ignore the frees of allocations they never saw born). Whole blocks are
  // crossed by their long-lived lists ([`lodIndex`]).
  function walkStep(m, from, to, born, freed) {
    const t1 = m.t1;
    let e = from + 1;
    while (e <= to) {
      if (e % LBLK === 0 && e + LBLK - 1 <= to) {
        const k = e / LBLK;
        for (let i = m.lbOff[k], n = m.lbOff[k + 1]; i < n; i++) { const a = m.lbIdx[i]; if (t1[a] > to) born(a); }
        for (let i = m.ldOff[k], n = m.ldOff[k + 1]; i < n; i++) freed(m.ldIdx[i]);
        e += LBLK;
      } else {
        const a = m.evAlloc[e];
        if (a >= 0 && t1[a] > to) born(a);
        const f = m.evFree[e];
        if (f >= 0) freed(f);
        e++;
      }
    }
  }
  function render() {
    viewNote();
    const t0 = performance.now();
    const ar = area(), W = ar.w, Hh = ar.h;
    if (W <= 0 || Hh <= 0) return;
    if (!image || image.width !== W || image.height !== Hh) image = ctx.createImageData(W, Hh);
    const px = new Uint32Array(image.data.buffer); px.fill(BG);
    const m = model, nA = m.nA;
    const rep = columns(W); colRep = rep;
    const bpr = (view.y1 - view.y0) / Hh; // bytes per row
    const y1 = view.y1;
    // The stack is drawn in allocation order over the allocations alive
    // at the first column's event (slots 0..L-1) and those born in view
    // (slot L + their index less the first born in view's: allocations
    // are numbered in the order they were made). A Fenwick tree over the
    // slots gives every band's offset.
    const startE = rep.length ? rep[0] : -1, endE = rep.length ? rep[rep.length - 1] : -1;
    const first = aliveAt(m, startE), L = first.length;
    let base = nA;
    for (let e = startE + 1; e <= endE; e++) if (m.evAlloc[e] >= 0) { base = m.evAlloc[e]; break; }
    let last = base - 1;
    for (let e = endE; e > startE; e--) if (m.evAlloc[e] >= 0) { last = m.evAlloc[e]; break; }
    const gen = ++m.gen, slotOf = m.slotOf, slotGen = m.slotGen;
    for (let i = 0; i < L; i++) { slotOf[first[i]] = i; slotGen[first[i]] = gen; }
    const nSlots = L + Math.max(0, last - base + 1);
    const fen = new Fenwick(nSlots), live = new Float64Array(nSlots);
    // (Only the first L slots start non-zero: L additions, not a build
    // over every slot.)
    for (let i = 0; i < L; i++) { live[i] = m.size[first[i]]; fen.add(i, live[i]); }
    const slotA = (k) => (k < L ? first[k] : base + k - L);
    metrics.slots = nSlots;
    // Colours of the allocations drawn, cleared after the render (an
    // array over every allocation, not made anew at each render).
    if (!m.colorBuf) m.colorBuf = new Uint32Array(nA);
    const colors = m.colorBuf, colored = [];
    const colorOf = (a) => { let c = colors[a]; if (c === 0) { c = allocColor(a); colors[a] = c; colored.push(a); } return c; };
    // The lowest slot a column's events changed: the rows below its
    // offset show what the column before showed.
    let lowest = Infinity;
    const born = (a) => { const k = L + a - base; fen.add(k, m.size[a]); live[k] = m.size[a]; if (k < lowest) lowest = k; };
    const freed = (f) => {
      const k = f >= base ? L + f - base : slotGen[f] === gen ? slotOf[f] : -1;
      if (k >= 0 && live[k] > 0) { fen.add(k, -live[k]); live[k] = 0; if (k < lowest) lowest = k; }
    };
    let cursor = startE;
    for (let c = 0; c < W; c++) {
      const target = rep[c];
      lowest = Infinity;
      if (target > cursor) { walkStep(m, cursor, target, born, freed); cursor = target; }
      const total = Math.min(m.alloc[target + 1], y1);
      // Sample the stack at each row's centre: the allocation found there
      // fills all the rows it covers, then the search jumps past it. A
      // row's band depends only on the offsets below its centre: rows
      // whose centre lies below the lowest changed slot are the previous
      // column's (most columns change only the top of the stack).
      let r = Hh - 1;
      if (c > 0) {
        const lim = lowest === Infinity ? Infinity : fen.prefix(lowest);
        while (r >= 0) {
          const v = y1 - (r + 0.5) * bpr;
          if (v >= lim || v >= total) break;
          px[r * W + c] = px[r * W + c - 1];
          r--;
        }
      }
      while (r >= 0) {
        const v = y1 - (r + 0.5) * bpr;
        if (v >= total) break;
        const k = fen.find(v);
        if (k >= nSlots) break;
        const top = fen.prefix(k), end = top + live[k];
        const rTop = Math.max(0, Math.ceil((y1 - end) / bpr - 0.5));
        const col = colorOf(slotA(k));
        for (let q = r; q >= rTop; q--) px[q * W + c] = col;
        r = Math.min(r - 1, rTop - 1);
      }
    }
    for (const a of colored) colors[a] = 0;
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
        for (const k of aliveAt(m, e)) { if (k >= a) break; off += m.size[k]; }
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
    for (const a of aliveAt(m, e)) { s += m.size[a]; if (s > bytes) return a; }
    return -1;
  }

