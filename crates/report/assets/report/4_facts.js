  // ---------- facts, file panel, legend ----------
  function showFacts() {
    const f = $('facts'); f.textContent = '';
    const s = model.summary, add = (k, v, cls) => { const sp = el('span'); sp.appendChild(el('span', 'k', k)); sp.appendChild(el('span', 'v' + (cls ? ' ' + cls : ''), v)); f.appendChild(sp); };
    if (s.name && !/^device /.test(s.name)) add('device', s.name);
    add('peak allocated', fmtBytes(s.peak.allocated_bytes) + (s.peak.in_evaluation ? ' in an evaluation pass' + (s.peak.evaluation_with_grad ? ' run with autograd on' : '') : ''));
    // A peak in a validation or test loop: the training steps' own peak
    // beside it (a smaller micro-batch does not lower the first).
    if (s.peak.outside_evaluation) add('outside evaluation', fmtBytes(s.peak.outside_evaluation.allocated_bytes));
    // Without a caching allocator (CPU recordings) reserved is allocated
    // and nothing is cached: those figures would only repeat or mislead.
    if (s.caching_allocator) add('peak reserved', fmtBytes(s.peak_reserved_bytes));
    add('at the end', fmtBytes(s.end.allocated_bytes) + ' allocated' + (s.caching_allocator ? ' / ' + fmtBytes(s.end.reserved_bytes) + ' reserved' : ''));
    add('events', fmtCount(s.events.total) + (s.events.span_us !== null ? ' over ' + fmtDur(s.events.span_us) : ''));
    if (s.caching_allocator) add('cached free', fmtBytes(s.end.fragmentation.cached_free_bytes) + ' (largest ' + fmtBytes(s.end.fragmentation.largest_free_block) + ')');
    if (s.ledger) {
      // Why nvidia-smi shows more than PyTorch: the device ledger's outside part (File tab: every part).
      add('outside PyTorch', fmtBytes(s.ledger.outside_pytorch_bytes) + ' of the device\'s ' + fmtBytes(s.ledger.total_bytes));
    }
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
    // Children that trained unrecorded: this page is not the whole program.
    if (H.source.children) b.appendChild(el('p', null, 'note: ' + H.source.children));
    b.hidden = !notes.length && !H.source.children;
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
    const L = model.summary.ledger;
    if (L) {
      // Every byte of the device at the dump, each figure with its source.
      const src = { measured: 'measured', reported_by_pytorch: 'PyTorch', inferred: 'inferred' };
      p.appendChild(el('h3', null, 'Device memory at the dump: ' + fmtBytes(L.total_bytes)));
      p.appendChild(kvTable(L.parts.map((x) => [x.label, fmtBytes(x.bytes) + ' (' + (100 * x.bytes / Math.max(1, L.total_bytes)).toFixed(1) + '%) · ' + src[x.source] + ': ' + x.how])));
      if (L.host_pinned_bytes) p.appendChild(el('p', 'muted', 'and ' + fmtBytes(L.host_pinned_bytes) + ' of pinned host memory in PyTorch\'s host allocator (host RAM)'));
      for (const n of L.notes) p.appendChild(el('p', 'muted', n));
    }
    p.appendChild(el('h3', null, 'Peak: alive by allocation site'));
    p.appendChild(sitesTable('', model.summary.peak.top_sites, model.summary.peak.allocated_bytes));
  }
  // Sites alive at the peak, largest first: [frame (-1: no stack), bytes].
  function peakSites() {
    const by = new Map();
    for (const a of aliveAt(model, model.peakEvent === null ? -1 : model.peakEvent)) {
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
    for (const a of aliveAt(model, e)) { const k = m.cat[a]; if (k !== 0xffff) out[k] += m.size[a]; }
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

