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
        // Beneath the user's line: the model's modules and lines that made it.
        for (const w of s.within || []) rows.push(['made by', fmtBytes(w.bytes) + '  ' + w.label]);
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
    p.appendChild(el('h3', null, 'Against ' + D.a.file + ' (device ' + D.a.device + ')'));
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
    if (w.sweep_note) { const n = el('p', 'muted', w.sweep_note); n.id = 'simulate-sweep-note'; p.appendChild(n); }
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
      p.appendChild(el('h4', null, 'Tried, lowers the peak by 0.1% or less here'));
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
    const live = aliveAt(model, e).sort((x, y) => m.addr[x] - m.addr[y]); let li = 0;
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
      // Beneath the user's line: the model's modules and lines that made it.
      for (const w of s.within || []) {
        const sub = el('tr', 'part');
        sub.appendChild(el('td', 'n', fmtBytes(w.bytes)));
        sub.appendChild(el('td', 'n', (total > 0 ? (w.bytes / total * 100).toFixed(1) : '0') + '%'));
        sub.appendChild(el('td', 'n', fmtCount(w.count)));
        const wd = el('td', 'wrap', '\u2514 ' + w.label); wd.title = w.line || w.label; sub.appendChild(wd);
        tb.appendChild(sub);
      }
    }
    d.appendChild(tb); return d;
  }

