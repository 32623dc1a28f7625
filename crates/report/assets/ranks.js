// vramscope ranks report: the ranks of one job side by side, one strip of
// memory over time per rank on a shared scale, and each rank's full report
// opened in the page on a click. Self-contained; strings from the files are
// only written with textContent.
(function () {
  'use strict';
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; };
  const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  function fmtBytes(n) { let i = 0; while (n >= 1024 && i < UNITS.length - 1) { n /= 1024; i++; } return (i ? n.toFixed(2) : String(n)) + ' ' + UNITS[i]; }
  const R = JSON.parse($('ranks-data').textContent);
  const api = { ready: false, opened: null };
  window.vramscopeRanks = api;

  const facts = $('facts');
  for (const [k, v] of [['files', String(R.files)], ['ranks', String(R.ranks.length)], ['median peak', fmtBytes(R.median_peak)],
    ['max peak', fmtBytes(R.max_peak)], ['imbalance', R.imbalance.toFixed(2) + 'x'], ['outlier ranks', R.outliers.length ? R.outliers.join(', ') : 'none']]) {
    const s = el('span'); s.appendChild(document.createTextNode(k + ' ')); s.appendChild(el('b', null, v)); facts.appendChild(s);
  }

  // One scale for every strip: the highest point of any rank.
  let top = 1; for (const r of R.ranks) for (const v of r.strip) if (v > top) top = v;
  // Strips are aligned on iterations when every rank has them: event e of
  // iteration k sits at k + its fraction of that iteration, on a scale of
  // the most iterations any rank ran; otherwise each strip spans its trace.
  const aligned = R.ranks.length > 0 && R.ranks.every((r) => r.iteration_starts.length >= 2);
  const maxIter = aligned ? Math.max(...R.ranks.map((r) => r.iteration_starts.length)) : 1;
  function position(r, e) {
    if (!aligned) return e / Math.max(1, r.events);
    const s = r.iteration_starts; let k = 0;
    while (k + 1 < s.length && s[k + 1] <= e) k++;
    if (e < s[0]) return 0;
    const end = k + 1 < s.length ? s[k + 1] : r.events;
    return (k + Math.min(1, (e - s[k]) / Math.max(1, end - s[k]))) / maxIter;
  }
  const t = $('ranks');
  const head = el('tr');
  for (const h of ['rank', 'allocated over time (shared scale' + (aligned ? ', aligned on iterations)' : ')'), 'peak allocated', 'peak reserved', 'step', '÷ median', 'OOM', 'top site at the peak']) head.appendChild(el('th', null, h));
  t.appendChild(head);
  const strips = [];
  R.ranks.forEach((r, i) => {
    const tr = el('tr', 'rank' + (r.outlier ? ' outlier' : '')); tr.dataset.rank = String(r.rank);
    tr.appendChild(el('td', 'n', String(r.rank)));
    const td = el('td'); const cv = el('canvas', 'strip'); td.appendChild(cv); tr.appendChild(td); strips.push([cv, r]);
    tr.appendChild(el('td', 'n', fmtBytes(r.peak_allocated)));
    tr.appendChild(el('td', 'n', fmtBytes(r.peak_reserved)));
    tr.appendChild(el('td', 'n', r.step === null ? '-' : String(r.step)));
    tr.appendChild(el('td', 'n ratio', r.vs_median.toFixed(2) + 'x'));
    tr.appendChild(el('td', 'oom', r.oom ? 'asked ' + fmtBytes(r.oom.requested) + ' at event ' + r.oom.event : ''));
    tr.appendChild(el('td', null, r.top_site ? r.top_site.site + ' (' + fmtBytes(r.top_site.bytes) + ')' : '-'));
    tr.addEventListener('click', () => open(i));
    t.appendChild(tr);
  });
  function drawStrips() {
    const dpr = window.devicePixelRatio || 1;
    for (const [cv, r] of strips) {
      cv.width = Math.round(260 * dpr); cv.height = Math.round(28 * dpr);
      const c = cv.getContext('2d'), n = r.strip.length;
      c.fillStyle = r.oom ? '#fca5a5' : r.outlier ? '#fdba74' : '#93c5fd';
      for (let k = 0; k < n; k++) {
        const x0 = position(r, k * r.strip_stride) * cv.width, x1 = position(r, (k + 1) * r.strip_stride) * cv.width;
        const h = r.strip[k] / top * cv.height;
        c.fillRect(x0, cv.height - h, Math.max(1, x1 - x0), h);
      }
      if (aligned) {
        c.fillStyle = 'rgba(17,24,39,.25)';
        for (let k = 1; k < maxIter; k++) c.fillRect(Math.round(k / maxIter * cv.width), 0, 1, cv.height);
      }
    }
  }
  drawStrips();

  if (R.worst) {
    const w = $('worst');
    w.appendChild(el('h3', null, 'Rank ' + R.worst.rank + ' against the median rank ' + R.worst.median_rank + ', at their peaks'));
    const ul = el('ul');
    for (const s of R.worst.sites) ul.appendChild(el('li', null, '+' + fmtBytes(s.extra_bytes) + '  ' + s.site + ' (' + fmtBytes(s.worst_bytes) + ' vs ' + fmtBytes(s.median_bytes) + ')'));
    if (!R.worst.sites.length) ul.appendChild(el('li', 'muted', 'no site holds more (the difference is spread thin)'));
    w.appendChild(ul);
  }
  const drifting = R.drift.filter((d) => d.drifting);
  if (drifting.length) {
    const d = $('drift'); d.appendChild(el('h3', null, 'Memory that grows from one dump to the next'));
    const ul = el('ul');
    for (const x of drifting) ul.appendChild(el('li', null, 'rank ' + x.rank + ': ' + x.peaks.map(([s, b]) => 'step ' + s + ' ' + fmtBytes(b)).join(' → ')));
    d.appendChild(ul);
  }

  // A rank's report: its page, deflated and base64-encoded in the file,
  // inflated on demand and shown in a sandboxed frame.
  async function open(i) {
    const r = R.ranks[i];
    document.querySelectorAll('tr.rank').forEach((x) => x.classList.toggle('sel', x.dataset.rank === String(r.rank)));
    const src = $('page-' + r.rank);
    const v = $('view'); v.textContent = '';
    if (!src) { v.appendChild(el('p', 'muted', 'No report embedded for rank ' + r.rank + '.')); return; }
    v.appendChild(el('h3', null, 'Rank ' + r.rank + ': ' + r.path));
    const bin = Uint8Array.from(atob(src.textContent.trim()), (c) => c.charCodeAt(0));
    const stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream('deflate'));
    const html = await new Response(stream).text();
    const f = el('iframe'); f.setAttribute('sandbox', 'allow-scripts'); f.srcdoc = html;
    v.appendChild(f);
    api.opened = { rank: r.rank, bytes: html.length };
  }
  api.open = (rank) => { const i = R.ranks.findIndex((r) => r.rank === rank); if (i >= 0) return open(i).then(() => api.opened); return Promise.resolve(null); };
  api.strips = () => strips.map(([cv, r]) => {
    const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data; let p = 0;
    for (let k = 3; k < d.length; k += 4) if (d[k]) p++;
    return { rank: r.rank, painted: p };
  });
  api.order = () => R.ranks.map((r) => r.rank);
  api.ready = true;
})();
