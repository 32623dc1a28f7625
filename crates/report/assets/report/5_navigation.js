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
    const t = performance.now();
    model = deviceModel(H.devices[i], A, S);
    metrics.modelMs = performance.now() - t;
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
    // The plot as drawn against the stack recomputed from every
    // allocation's life (no level of detail): for every `every`-th column,
    // the allocations alive at its event in order, and the colour each
    // row's centre must have.
    stackCheck(every = 7) {
      const m = model, ar = area(), W = ar.w, Hh = ar.h, px = new Uint32Array(image.data.buffer);
      const bpr = (view.y1 - view.y0) / Hh;
      let columns = 0, rows = 0, aliveMismatch = 0, pixelMismatch = 0;
      for (let c = 0; c < colRep.length; c += every) {
        const e = colRep[c], alive = [];
        for (let a = 0; a < m.nA; a++) if (m.t0[a] <= e && m.t1[a] > e) alive.push(a);
        const lod = aliveAt(m, e);
        if (lod.length !== alive.length || lod.some((a, i) => a !== alive[i])) aliveMismatch++;
        columns++;
        const total = Math.min(m.alloc[e + 1], view.y1);
        let k = 0, below = 0;
        for (let r = Hh - 1; r >= 0; r--) {
          const v = view.y1 - (r + 0.5) * bpr;
          if (v >= total) break;
          while (k < alive.length && below + m.size[alive[k]] <= v) below += m.size[alive[k++]];
          if (k >= alive.length) break;
          rows++;
          if (px[r * W + c] !== (allocColor(alive[k]) >>> 0)) pixelMismatch++;
        }
      }
      return { columns, rows, aliveMismatch, pixelMismatch };
    },
    // The largest allocation alive at the peak and the first user frame of its stack.
    biggestAtPeak() {
      const e = model.peakEvent === null ? -1 : model.peakEvent;
      let best = -1; for (const a of aliveAt(model, e)) if (best < 0 || model.size[a] > model.size[best]) best = a;
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
      frames = arrays.frames; stackOff = arrays.stack_off; stackFrames = arrays.stack_frames; stackSite = arrays.stack_site; stackPart = arrays.stack_part;
      metrics.loadMs = performance.now() - T0;
      computeColors();
      $('title').textContent = H.title;
      const sel = $('device');
      H.devices.forEach((d, i) => { const o = el('option', null, d.name || 'device ' + d.device); o.value = String(i); sel.appendChild(o); });
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
