#!/usr/bin/env node
// Browser-side figures for one `vramscope report` page, in headless Chromium
// (system binary: $CHROMIUM or /usr/bin/chromium):
//
//   node tests/browser/perf.mjs --html REPORT.html [--iterations 10] [--timeout SECONDS]
//                               [--screenshot FILE]
//
// Prints one JSON object on stdout:
//   readyWallMs     node's clock from page.goto to vramscope.ready seen
//   readyPageMs     page clock (ms since navigation start) when vramscope.ready
//                   became true, sampled every 5 ms
//   paintedPageMs   page clock at the first animation frame after that (the
//                   first complete paint is on screen)
//   metrics         window.vramscope.metrics (loadMs, firstPaintMs, ...)
//   zoomMs, panMs   render times of N x vramscope.zoomBy(0.8) / panBy(0.1),
//                   with median and max
//   memory          JS heap (CDP Performance.getMetrics), and the sum of RSS
//                   and PSS of every Chromium process (children of this node
//                   process, from /proc), after load and peak while loading
//   usable          Peak button, hover tooltip over the largest allocation at
//                   the peak, tabs: what worked (and why not)
//   memoryBaseline  the same /proc figures with only about:blank open
//   errors          console and page errors, network requests (should be none)

import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

function parseArgs(argv) {
  const o = { html: null, iterations: 10, timeout: 600, screenshot: null, chromium: process.env.CHROMIUM || '/usr/bin/chromium' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = () => argv[++i];
    if (a === '--html') o.html = path.resolve(v());
    else if (a === '--iterations') o.iterations = Number(v());
    else if (a === '--timeout') o.timeout = Number(v());
    else if (a === '--screenshot') o.screenshot = path.resolve(v());
    else if (a === '--chromium') o.chromium = v();
    else { console.error(`perf.mjs: unknown argument ${a}`); process.exit(2); }
  }
  if (!o.html) { console.error('usage: node tests/browser/perf.mjs --html REPORT.html [--iterations N] [--timeout S] [--screenshot FILE]'); process.exit(2); }
  return o;
}
const opt = parseArgs(process.argv.slice(2));

// ---------- process memory from /proc ----------
function children() {
  const kids = new Map();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(d));
    } catch { /* gone */ }
  }
  const out = [], todo = [process.pid];
  while (todo.length) for (const k of kids.get(todo.pop()) || []) { out.push(k); todo.push(k); }
  return out;
}
function kib(text, key) {
  const m = text.match(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm'));
  return m ? Number(m[1]) * 1024 : 0;
}
function browserMemory() {
  let rss = 0, pss = 0, n = 0;
  for (const pid of children()) {
    try {
      const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
      rss += kib(status, 'VmRSS');
      try { pss += kib(fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'), 'Pss'); } catch { /* older kernels */ }
      n++;
    } catch { /* gone */ }
  }
  return { rssBytes: rss, pssBytes: pss, processes: n };
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length ? (s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2) : null; };
const stats = (xs) => ({ runs: xs, median: median(xs), max: xs.length ? Math.max(...xs) : null });

async function main() {
  const browser = await chromium.launch({
    executablePath: opt.chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
  const out = { html: opt.html, htmlBytes: fs.statSync(opt.html).size, chromium: browser.version(), errors: { console: [], page: [], requests: [] } };
  try {
    const context = await browser.newContext({ viewport: { width: 1600, height: 1000 }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    const url = pathToFileURL(opt.html).href;
    await page.route('**/*', (r) => (/^(file|data|blob):/.test(r.request().url()) ? r.continue() : r.abort('blockedbyclient')));
    page.on('request', (r) => { if (r.url() !== url) out.errors.requests.push(r.url()); });
    page.on('console', (m) => { if (m.type() === 'error') out.errors.console.push(m.text()); });
    page.on('pageerror', (e) => out.errors.page.push(String(e && e.message ? e.message : e)));
    await page.addInitScript(() => {
      const iv = setInterval(() => {
        const v = window.vramscope;
        if (v && (v.ready || v.error)) {
          clearInterval(iv);
          window.__readyAt = performance.now();
          requestAnimationFrame(() => { window.__paintedAt = performance.now(); });
        }
      }, 5);
    });
    const cdp = await context.newCDPSession(page);
    await cdp.send('Performance.enable');

    // Browser with an empty page, for comparison.
    out.memoryBaseline = browserMemory();
    // Peak browser memory while the page loads.
    let peak = { rssBytes: 0, pssBytes: 0, processes: 0 };
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const m = browserMemory();
        if (m.rssBytes > peak.rssBytes) peak = m;
        await new Promise((r) => setTimeout(r, 100));
      }
    })();

    const t0 = performance.now();
    await page.goto(url, { waitUntil: 'commit', timeout: opt.timeout * 1000 });
    await page.waitForFunction(() => window.vramscope && (window.vramscope.ready || window.vramscope.error),
      null, { timeout: opt.timeout * 1000, polling: 20 });
    out.readyWallMs = performance.now() - t0;
    await page.waitForFunction(() => window.__paintedAt !== undefined, null, { timeout: 60000 });
    sampling = false; await sampler;
    const st = await page.evaluate(() => ({ ready: window.vramscope.ready, error: window.vramscope.error || null,
      metrics: window.vramscope.metrics, readyAt: window.__readyAt, paintedAt: window.__paintedAt, view: window.vramscope.view() }));
    out.ready = st.ready; out.error = st.error;
    out.readyPageMs = st.readyAt; out.paintedPageMs = st.paintedAt;
    out.metrics = st.metrics;
    out.events = st.view.events;
    if (!st.ready) throw new Error(`page failed: ${st.error}`);

    const pm = await cdp.send('Performance.getMetrics');
    const metric = (n) => (pm.metrics.find((x) => x.name === n) || {}).value;
    const afterLoad = browserMemory();
    out.memory = { jsHeapUsedBytes: metric('JSHeapUsedSize'), jsHeapTotalBytes: metric('JSHeapTotalSize'),
      afterLoad, peakWhileLoading: peak.rssBytes > afterLoad.rssBytes ? peak : afterLoad };
    if (opt.screenshot) await page.screenshot({ path: opt.screenshot });

    // Interaction: zoom into the middle, then pan.
    const zoom = [], pan = [];
    for (let i = 0; i < opt.iterations; i++) zoom.push(await page.evaluate(() => window.vramscope.zoomBy(0.8)));
    for (let i = 0; i < opt.iterations; i++) pan.push(await page.evaluate(() => window.vramscope.panBy(0.1)));
    out.zoomMs = stats(zoom); out.panMs = stats(pan);
    await page.evaluate(() => window.vramscope.reset());

    // Usable: Peak, hover, tabs.
    const usable = {};
    let t = performance.now();
    const big = await page.evaluate(() => window.vramscope.biggestAtPeak());
    usable.biggestAtPeakMs = performance.now() - t;
    t = performance.now();
    await page.click('#btn-peak');
    usable.peakClickMs = performance.now() - t;
    const v = await page.evaluate(() => window.vramscope.view());
    usable.peak = v.peakEvent === null || (v.peakEvent >= v.eventRange[0] && v.peakEvent <= v.eventRange[1]);
    if (big) {
      let p = await page.evaluate((a) => window.vramscope.locate(a), big.alloc);
      for (let i = 0; i < 12 && p && p.heightPx < 8; i++) {
        await page.mouse.move(p.x, p.y);
        await page.keyboard.down('Shift'); await page.mouse.wheel(0, -600); await page.keyboard.up('Shift');
        await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
        p = await page.evaluate((a) => window.vramscope.locate(a), big.alloc);
      }
      if (p) {
        t = performance.now();
        await page.mouse.move(p.x, p.y);
        const tip = await page.evaluate(() => { const e = document.getElementById('tooltip'); return { hidden: e.hidden, text: e.textContent }; });
        usable.hoverMs = performance.now() - t;
        usable.tooltip = !tip.hidden && (big.frame === null ? tip.text.includes('no stack recorded') : tip.text.includes(big.frame));
        if (!usable.tooltip) usable.tooltipText = tip.text.slice(0, 200);
      } else usable.tooltip = false;
    }
    usable.tabsMs = {};
    for (const tab of await page.$$eval('.tabs button[data-tab]', (bs) => bs.filter((b) => !b.hidden).map((b) => b.dataset.tab))) {
      t = performance.now();
      await page.click(`.tabs button[data-tab="${tab}"]`);
      usable.tabsMs[tab] = performance.now() - t;
    }
    out.usable = usable;
    out.memory.afterInteraction = browserMemory();
    await context.close();
  } finally {
    await browser.close().catch(() => {});
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(`perf.mjs: ${e && e.stack ? e.stack : e}`); process.exit(1); });
