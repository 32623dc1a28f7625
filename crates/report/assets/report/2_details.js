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
  function showAlive(e) {
    selectedEvent = e;
    const p = $('panel-alive'); p.textContent = '';
    const m = model, live = aliveAt(model, e);
    const total = m.alloc[e + 1];
    p.appendChild(el('h3', null, 'Alive ' + (e < 0 ? 'at the start' : 'after ' + eventTime(e)) + ': ' + fmtBytes(total) + ' in ' + fmtCount(live.length) + ' blocks'));
    const bySite = new Map();
    for (const a of live) {
      const s = m.stack[a], f = s === 0xffffffff ? -1 : siteFrameOfStack[s];
      const g = bySite.get(f) || { bytes: 0, n: 0, parts: new Map() }; g.bytes += m.size[a]; g.n++; bySite.set(f, g);
      // What beneath the site made it: the model's module and line.
      // (the stack's own, else the block whose backward made it).
      let pt = s === 0xffffffff || !stackPart ? 0xffffffff : stackPart[s];
      if (pt === 0xffffffff && m.part) pt = m.part[a];
      if (pt !== 0xffffffff) { const q = g.parts.get(pt) || { bytes: 0, n: 0 }; q.bytes += m.size[a]; q.n++; g.parts.set(pt, q); }
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
      for (const [pt, q] of [...g.parts.entries()].sort((x, y) => y[1].bytes - x[1].bytes).slice(0, 3)) {
        const sub = el('tr', 'part');
        sub.appendChild(el('td', 'n', fmtBytes(q.bytes)));
        sub.appendChild(el('td', 'n', (total > 0 ? (q.bytes / total * 100).toFixed(1) : '0') + '%'));
        sub.appendChild(el('td', 'n', fmtCount(q.n)));
        sub.appendChild(el('td', 'wrap', '\u2514 ' + S[pt]));
        tb.appendChild(sub);
      }
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
    const live = aliveAt(model, e).sort((x, y) => m.addr[x] - m.addr[y]);
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

