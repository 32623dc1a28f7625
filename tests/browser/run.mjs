#!/usr/bin/env node
// Headless-Chromium checks of the `vramscope report` HTML page.
//
//   node tests/browser/run.mjs [--out DIR] [--bin PATH] [--fixtures DIR]
//                              [--only SUBSTRING] [--timeout SECONDS]
//
// For every real fixture (tests/fixtures/real/*.pickle.gz), a generated
// snapshot with an OOM and a snapshot whose strings carry HTML/script
// payloads, it writes the report, opens it through file:// in Chromium
// (system binary: $CHROMIUM or /usr/bin/chromium; nothing is downloaded),
// and checks: no network request, no console or page error, first paint,
// screenshot, Peak button, hover tooltip over the largest allocation at the
// peak, every tab, the OOM panel, search, and (payload snapshot) that no
// string from the snapshot is ever run or parsed as markup.
//
// Prints one line per check (`ok   ...` or `FAIL ...: why`), the screenshot
// paths, and last a line `N passed, N failed`; exits 1 if any check failed,
// 2 if the run could not start.
//
// The pages are checked one per core, at most four at a time (one browser,
// a context each; VRAMSCOPE_BROWSER_JOBS sets how many, 1 runs them one
// after another): a page's own work is one renderer's thread. On two cores
// the whole run took 147 s where one page at a time took 215 (three at a
// time: 138). Each page's lines are printed together when it is done.

import { chromium } from 'playwright-core';
import { AsyncLocalStorage } from 'node:async_hooks';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '..', '..');

// ---------- options ----------
function parseArgs(argv) {
  const o = {
    out: null,
    bin: path.join(repoRoot, 'target', 'release', 'vramscope'),
    fixtures: path.join(repoRoot, 'tests', 'fixtures', 'real'),
    only: null,
    timeout: 120,
    chromium: process.env.CHROMIUM || '/usr/bin/chromium',
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--out') o.out = path.resolve(val());
    else if (a === '--bin') o.bin = path.resolve(val());
    else if (a === '--fixtures') o.fixtures = path.resolve(val());
    else if (a === '--only') o.only = val();
    else if (a === '--timeout') o.timeout = Number(val());
    else if (a === '--chromium') o.chromium = val();
    else if (a === '-h' || a === '--help') usage(null);
    else usage(`unknown argument ${a}`);
  }
  return o;
}
function usage(err) {
  const text = 'usage: node tests/browser/run.mjs [--out DIR] [--bin PATH] [--fixtures DIR] ' +
    '[--only SUBSTRING] [--timeout SECONDS] [--chromium PATH]';
  if (err) { console.error(`run.mjs: ${err}\n${text}`); process.exit(2); }
  console.log(text); process.exit(0);
}

const opt = parseArgs(process.argv.slice(2));
const outDir = opt.out || fs.mkdtempSync(path.join(os.tmpdir(), 'vramscope-browser-'));
fs.mkdirSync(outDir, { recursive: true });

// ---------- results ----------
let passed = 0, failed = 0;
const failures = [];
// The lines of the page being checked, printed together when it is done
// (pages are checked side by side; their lines would interleave).
const pageLines = new AsyncLocalStorage();
function log(line) {
  const buf = pageLines.getStore();
  if (buf) buf.push(line); else console.log(line);
}
function ok(name, detail) {
  passed++;
  log(`ok   ${name}${detail ? ` (${detail})` : ''}`);
}
function fail(name, why) {
  failed++;
  const msg = String(why && why.message ? why.message : why).split('\n')[0];
  failures.push(`${name}: ${msg}`);
  log(`FAIL ${name}: ${msg}`);
}
// Runs one check; a thrown error or a returned string starting with "FAIL:" fails it.
async function check(name, fn) {
  try {
    const r = await fn();
    ok(name, typeof r === 'string' ? r : '');
    return true;
  } catch (e) {
    fail(name, e);
    return false;
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }

// Same formatting as the page's fmtBytes.
function fmtBytes(n) {
  const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  const neg = n < 0; n = Math.abs(n);
  if (n < 1024) return (neg ? '-' : '') + Math.round(n) + ' B';
  let u = 0;
  while (n >= 1024 && u < UNITS.length - 1) { n /= 1024; u++; }
  return (neg ? '-' : '') + n.toFixed(2) + ' ' + UNITS[u];
}

// ---------- vramscope ----------
// Its stdout; not a synchronous call, so that the other page's checks go
// on while it runs.
function vramscope(args, timeoutS = 600) {
  return new Promise((resolve, reject) => {
    execFile(opt.bin, args, { encoding: 'utf8', timeout: timeoutS * 1000, maxBuffer: 256 << 20 }, (e, stdout, stderr) => {
      if (!e) return resolve(stdout);
      if (typeof e.code === 'number') {
        const err = (stderr || '').trim().split('\n').slice(-3).join(' | ');
        return reject(new Error(`vramscope ${args[0]} exited ${e.code}: ${err}`));
      }
      reject(new Error(`vramscope ${args[0]}: ${e.killed ? `killed after ${timeoutS} s` : e.message}`));
    });
  });
}

// ---------- payload snapshot ----------
const XSS = {
  script1: '<script>alert(1)</script>',
  attr: '"><img src=x onerror=alert(1)>',
  close: '</script><script>alert(2)</script>',
  flag: '<img src=x onerror=window.__xss=1>',
  svg: '<svg onload=window.__xss=2>',
  meta: '<script>alert(1)</script><img src=x onerror=window.__xss=3>',
  cat: '<img src=x onerror=window.__xss=4>',
  conf: '"><img src=x onerror=window.__xss=5>',
  annot: '</script><img src=x onerror=window.__xss=6>',
  ctx: '<iframe src=javascript:window.__xss=7>',
};
// File name (and so the default page title) with markup in it.
const XSS_FILE = 'xss_<img src=x onerror=window.__xss=8>.json';

function xssSnapshot() {
  const MiB = 1 << 20, base = 0x7f0000000000;
  const big = [ // innermost first; the first is the user frame the page shows
    { filename: `/home/u/${XSS.script1}.py`, line: 11, name: XSS.script1 },
    { filename: `/home/u/${XSS.attr}.py`, line: 22, name: XSS.flag },
    { filename: `/home/u/${XSS.close}.py`, line: 33, name: XSS.close },
    { filename: '/usr/lib/python3/site-packages/torch/nn/<b>modules</b>.py', line: 44, name: XSS.svg },
  ];
  const small = [
    { filename: `/home/u/${XSS.flag}.py`, line: 5, name: XSS.attr },
    { filename: `/home/u/train.py`, line: 6, name: XSS.close },
  ];
  const t0 = 1_700_000_000_000_000;
  const ev = (k, o) => ({ stream: 0, time_us: t0 + 1000 * k, compile_context: XSS.ctx, ...o });
  return {
    segments: [{
      device: 0, address: base, total_size: 64 * MiB, allocated_size: 32 * MiB, active_size: 32 * MiB,
      requested_size: 32 * MiB, stream: 0, segment_type: 'large', segment_pool_id: [0, 0], is_expandable: false,
      frames: small,
      blocks: [
        { address: base, size: 4 * MiB, requested_size: 0, state: 'inactive' },
        { address: base + 4 * MiB, size: 32 * MiB, requested_size: 32 * MiB, state: 'active_allocated', frames: big },
        { address: base + 36 * MiB, size: 28 * MiB, requested_size: 0, state: 'inactive' },
      ],
    }],
    device_traces: [[
      ev(0, { action: 'segment_alloc', addr: base, size: 64 * MiB, frames: small }),
      ev(1, { action: 'alloc', addr: base, size: 4 * MiB, frames: small, user_metadata: XSS.meta, category: XSS.cat }),
      ev(2, { action: 'alloc', addr: base + 4 * MiB, size: 32 * MiB, frames: big, user_metadata: XSS.meta, category: 'activation' }),
      ev(3, { action: 'free_requested', addr: base, size: 4 * MiB, frames: small, user_metadata: XSS.meta }),
      ev(4, { action: 'free_completed', addr: base, size: 4 * MiB, frames: small }),
      ev(5, { action: 'alloc', addr: base, size: 2 * MiB, frames: small, user_metadata: XSS.attr, category: XSS.cat }),
      ev(6, { action: 'free_requested', addr: base, size: 2 * MiB, frames: small }),
      ev(7, { action: 'free_completed', addr: base, size: 2 * MiB, frames: small }),
      ev(8, { action: 'oom', addr: 0, size: 1 << 30, device_free: 123456, frames: big, user_metadata: XSS.meta }),
    ]],
    allocator_settings: { PYTORCH_CUDA_ALLOC_CONF: XSS.conf, [XSS.flag]: XSS.close, max_split_size: -1 },
    external_annotations: [
      { name: XSS.annot, stage: 'START', device: 0, time_us: t0 + 500 },
      { name: XSS.annot, stage: 'END', device: 0, time_us: t0 + 7500 },
    ],
  };
}

// ---------- browser ----------
const LAUNCH_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  '--disable-dev-shm-usage'];

// Run in the page for one tab: every table cell of its panel, checked for
// overlap with the next cell of its row, text spilling out, and words broken
// across lines (a cell whose text runs over more lines than it has words).
const TABLE_CHECK = (tab) => {
  const panel = document.getElementById('panel-' + tab);
  const problems = [];
  let cells = 0;
  const lines = (node) => {
    const range = document.createRange(); range.selectNodeContents(node);
    const tops = new Set([...range.getClientRects()].filter((q) => q.width > 0).map((q) => Math.round(q.top)));
    return tops.size;
  };
  for (const tr of panel ? panel.querySelectorAll('table tr') : []) {
    const row = [...tr.children].filter((c) => c.getBoundingClientRect().width > 0);
    row.forEach((c, i) => {
      cells++;
      const r = c.getBoundingClientRect(), text = c.textContent.trim();
      const where = `${tab}: "${text.slice(0, 40)}"`;
      const next = row[i + 1];
      if (next && r.right > next.getBoundingClientRect().left + 0.5) problems.push(`${where} overlaps the next cell`);
      if (c.scrollWidth > c.clientWidth + 1) problems.push(`${where} spills out of its cell (${c.scrollWidth} > ${c.clientWidth} px)`);
      if (!c.classList.contains('wrap') && text && !c.querySelector('div, ul, ol, details')) {
        const words = text.split(/\s+/).length;
        const n = lines(c);
        if (n > words) problems.push(`${where} is broken over ${n} lines (${words} word(s))`);
      }
    });
  }
  return { cells, problems };
};

async function openReport(browser, htmlPath) {
  const context = await browser.newContext({ viewport: { width: 1600, height: 1000 }, deviceScaleFactor: 1 });
  const page = await context.newPage();
  const url = pathToFileURL(htmlPath).href;
  const st = { url, requests: [], blocked: [], console: [], pageErrors: [], dialogs: [] };
  await page.route('**/*', (route) => {
    const u = route.request().url();
    if (/^(file|data|blob):/.test(u)) return route.continue();
    st.blocked.push(u);
    return route.abort('blockedbyclient');
  });
  page.on('request', (r) => { if (r.url() !== url) st.requests.push(r.url()); });
  page.on('console', (m) => { if (m.type() === 'error') st.console.push(m.text()); });
  page.on('pageerror', (e) => st.pageErrors.push(String(e && e.message ? e.message : e)));
  page.on('dialog', (d) => { st.dialogs.push(`${d.type()}: ${d.message()}`); d.dismiss().catch(() => {}); });
  return { context, page, st };
}

async function waitReady(page, timeoutS) {
  await page.waitForFunction(() => window.vramscope && (window.vramscope.ready || window.vramscope.error),
    null, { timeout: timeoutS * 1000, polling: 50 });
  const s = await page.evaluate(() => ({
    ready: window.vramscope.ready, error: window.vramscope.error || null,
    loading: document.getElementById('loading') ? document.getElementById('loading').textContent : null,
    metrics: window.vramscope.metrics,
  }));
  if (!s.ready) throw new Error(`page error: ${s.error}${s.loading ? ` / #loading: ${s.loading}` : ''}`);
  return s;
}

const viewOf = (page) => page.evaluate(() => window.vramscope.view());
const textOf = (page, sel) => page.evaluate((s) => { const e = document.querySelector(s); return e ? e.textContent : null; }, sel);
const short = (s, n = 160) => (s.length > n ? s.slice(0, n) + '…' : s);

// Hover the middle of allocation `alloc`'s band; returns the tooltip's state.
// A band only a pixel or two high cannot be hit reliably (mouse events carry
// whole-pixel coordinates), so first zoom the memory axis around it with
// shift+wheel, as a user would.
const nextFrame = (page) => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
async function hoverAlloc(page, alloc) {
  const locate = () => page.evaluate((a) => window.vramscope.locate(a), alloc);
  let p = await locate();
  if (!p) throw new Error(`vramscope.locate(${alloc}) returned null after Peak: the allocation is not in view`);
  const firstHeight = p.heightPx;
  for (let i = 0; i < 12 && p && p.heightPx < 8; i++) {
    await page.mouse.move(p.x, p.y);
    await page.keyboard.down('Shift');
    await page.mouse.wheel(0, -600);
    await page.keyboard.up('Shift');
    await nextFrame(page);
    p = await locate();
  }
  if (!p) throw new Error(`vramscope.locate(${alloc}) returned null after zooming the memory axis`);
  p.zoomedFrom = p.heightPx !== firstHeight ? firstHeight : null;
  await page.mouse.move(p.x - 30, p.y);
  await page.mouse.move(p.x, p.y);
  const tip = await page.evaluate(() => {
    const t = document.getElementById('tooltip');
    const r = t.getBoundingClientRect(), cs = getComputedStyle(t);
    return { hidden: t.hidden, visible: !t.hidden && cs.display !== 'none' && cs.visibility !== 'hidden' && r.width > 0 && r.height > 0,
      text: t.textContent, userFrames: [...t.querySelectorAll('.u')].map((x) => x.textContent) };
  });
  return { p, tip };
}

const CAT_LABELS = { parameter: 'parameters', gradient: 'gradients', optimizer_state: 'optimizer state', activation: 'activations',
  input: 'inputs', temporary: 'temporaries', autograd_detail: 'autograd detail', workspace: 'workspaces', ema: 'EMA weights', unknown: 'unknown' };

// Categories with bytes at the peak or the end of device 0.
function summaryCategories(summary) {
  const d = summary && summary.devices && summary.devices[0];
  if (!d) return [];
  return [...new Set([...d.peak.by_category, ...(d.end_by_category || [])].filter((c) => c.bytes > 0).map((c) => c.category))];
}

// ---------- one report ----------
async function testReport(browser, snap) {
  const { name, file } = snap;
  const html = path.join(outDir, `${name}.html`);
  const T = (what) => `${name}: ${what}`;

  let summary = null;
  const generated = await check(T('vramscope report writes the page'), async () => {
    const t = Date.now();
    await vramscope(['report', file, '-o', html, '--quiet', ...(snap.baseline ? ['--baseline', snap.baseline] : [])]);
    const size = fs.statSync(html).size;
    summary = JSON.parse(await vramscope(['summary', file, '--json']));
    return `${(size / 1e6).toFixed(2)} MB in ${Date.now() - t} ms`;
  });
  if (!generated) return;

  if (snap.xss) {
    await check(T('payloads are not markup in the HTML file'), () => {
      const text = fs.readFileSync(html, 'utf8');
      const scripts = (text.match(/<script\b/gi) || []).length;
      assert(scripts === 2, `expected the page's 2 <script> elements, found ${scripts}`);
      for (const tag of ['<img', '<svg', '<iframe']) assert(!text.toLowerCase().includes(tag), `raw ${tag} in the HTML file`);
      return 'two <script> elements, no raw <img>/<svg>/<iframe>';
    });
  }

  const { context, page, st } = await openReport(browser, html);
  try {
    let loaded = false;
    await check(T('opens and paints (vramscope.ready)'), async () => {
      const t = Date.now();
      await page.goto(st.url, { waitUntil: 'load', timeout: opt.timeout * 1000 });
      const s = await waitReady(page, opt.timeout);
      loaded = true;
      const gone = await page.evaluate(() => !document.getElementById('loading'));
      assert(gone, '#loading is still in the DOM after the first paint');
      return `ready after ${Date.now() - t} ms, firstPaintMs ${s.metrics.firstPaintMs.toFixed(0)}`;
    });
    if (!loaded) {
      const shot = path.join(outDir, `${name}.png`);
      await page.screenshot({ path: shot }).catch(() => {});
      log(`     screenshot: ${shot}`);
      await check(T('no console or page errors'), () => {
        const errs = [...st.pageErrors.map((e) => `pageerror: ${e}`), ...st.console.map((e) => `console: ${e}`)];
        assert(!errs.length, `${errs.length}: ${short(errs.join(' | '), 400)}`);
      });
      return;
    }

    const shot = path.join(outDir, `${name}.png`);
    await page.screenshot({ path: shot });
    log(`     screenshot: ${shot}`);

    const oomsInSummary = summary && summary.devices && summary.devices[0] ? summary.devices[0].ooms : [];

    // What a damaged file lost and contradicting figures are above the
    // plot, exactly when the summary has them; CPU recordings show no
    // allocator figures.
    await check(T('banner: what the file lost, exactly when it lost something'), async () => {
      const b = await page.evaluate(() => {
        const e = document.getElementById('banner');
        return { hidden: e.hidden, text: e.textContent, facts: document.getElementById('facts').textContent };
      });
      const d0 = summary.devices[0] || { inconsistencies: [] };
      const notes = (summary.source.damage ? [summary.source.damage] : []).concat(d0.inconsistencies || [])
        .concat(summary.source.children ? [summary.source.children] : []);
      if (snap.expectCut) assert(summary.source.damage && summary.source.damage.includes('cut short'), `no damage in the summary: ${summary.source.damage}`);
      if (!notes.length) {
        assert(b.hidden, `banner shown for a whole file: ${short(b.text, 200)}`);
      } else {
        assert(!b.hidden, `${notes.length} note(s) but the banner is hidden`);
        for (const n of notes) assert(b.text.includes(n), `banner lacks: ${short(n, 120)}`);
      }
      if (d0.caching_allocator === false) assert(!b.facts.includes('cached free'), `CPU recording shows allocator figures: ${b.facts}`);
      return notes.length ? `${notes.length} note(s): ${short(notes[0], 80)}` : 'none, hidden';
    });

    // The device selector: shown only with two devices or more, each
    // named as PyTorch names it (a CPU recording's is not "cuda:0").
    await check(T('device selector: shown for two devices or more, each by its name'), async () => {
      const d = await page.evaluate(() => {
        const c = document.getElementById('device-ctl');
        return { shown: c.getBoundingClientRect().width > 0, names: [...document.querySelectorAll('#device option')].map((o) => o.textContent) };
      });
      const want = summary.devices.map((x) => x.name);
      assert(d.shown === (want.length > 1), `selector ${d.shown ? 'shown' : 'hidden'} for ${want.length} device(s)`);
      assert(JSON.stringify(d.names) === JSON.stringify(want), `options ${JSON.stringify(d.names)}, summary ${JSON.stringify(want)}`);
      return `${want.join(', ')}: ${d.shown ? 'shown' : 'hidden'}`;
    });

    // A peak in an evaluation pass says so in the facts strip, with the
    // rest of the run's peak, exactly when the summary has it.
    await check(T('facts: a peak in an evaluation pass says so, exactly when the summary does'), async () => {
      const facts = await textOf(page, '#facts');
      const p = (summary.devices[0] || {}).peak || {};
      const says = facts.includes('in an evaluation pass') && facts.includes('outside evaluation');
      assert(says === Boolean(p.in_evaluation), `in_evaluation ${p.in_evaluation}, #facts: "${short(facts, 300)}"`);
      return p.in_evaluation ? 'in an evaluation pass' : 'not in one';
    });

    // Peak button.
    let before = null;
    await check(T('first view frames the work: the peak, every OOM and iteration mark inside'), async () => {
      before = await viewOf(page);
      const f = await page.evaluate(() => window.vramscope.framing());
      const inside = (x) => x === null || (x >= before.x0 && x <= before.x1);
      // An idle stretch left out (said in the note) may hold the marks and
      // the peak of the setup before it; the OOMs are always shown.
      const idle = /idle left out/.test(f.note);
      if (!idle) assert(inside(f.peak), `peak at ${f.peak} outside [${before.x0}, ${before.x1}]`);
      for (const x of [...f.ooms, ...(idle ? [] : [...f.marks, ...(f.iterations || [])])]) assert(inside(x), `${x} outside [${before.x0}, ${before.x1}]`);
      const whole = before.x0 <= f.full[0] && before.x1 >= f.full[1];
      // Without iterations only an idle stretch is left out, and said.
      if (!f.iterations && !/idle left out/.test(f.note)) assert(whole, `no iterations but the view [${before.x0}, ${before.x1}] is not the whole trace ${f.full}`);
      if (snap.expectFramed) {
        assert(!whole && f.activity, `the idle head is shown: view [${before.x0}, ${before.x1}], trace ${f.full}`);
        assert((before.x1 - before.x0) < 0.5 * (f.full[1] - f.full[0]), `the work takes only ${((before.x1 - before.x0) / (f.full[1] - f.full[0]) * 100).toFixed(0)}% of the trace in the first view`);
        assert(/Reset zoom/.test(f.note), `no note says what is left out: "${f.note}"`);
      }
      return whole ? `whole trace, ${before.events} events` : `${((before.x1 - before.x0) / (f.full[1] - f.full[0]) * 100).toFixed(0)}% of the trace: ${f.note}`;
    });
    // Where the allocator model applies, an OOM file opens on what to do
    // about it; otherwise on its OOM panel.
    const oomTab = await page.evaluate(() => { const a = window.vramscope.advise(); return a && !a.skipped ? 'advise' : 'oom'; });
    if (oomsInSummary.length) {
      await check(T('an OOM file opens on What to do (or its OOM panel), the verdict in the strip'), async () => {
        const r = await page.evaluate(() => ({ tab: document.querySelector('.tabs button.active').dataset.tab, verdict: (document.getElementById('verdict') || {}).textContent || '' }));
        assert(r.tab === oomTab, `opens on "${r.tab}", expected "${oomTab}"`);
        const cause = oomsInSummary[0] && oomsInSummary[0].cause;
        assert(cause && r.verdict.includes(cause), `verdict "${short(r.verdict, 120)}" lacks the cause "${short(cause || '', 120)}"`);
        return short(r.verdict, 80);
      });
    }
    await check(T('the legend names what is drawn, with its bytes at the peak'), async () => {
      const d = summary.devices[0];
      const r = await page.evaluate(() => ({ color: document.getElementById('color-by').value,
        items: [...document.querySelectorAll('#legend > span')].map((x) => x.textContent) }));
      const known = (d.peak.by_category || []).filter((c) => c.category !== 'unknown').reduce((t, c) => t + c.bytes, 0);
      const want = known > 0 && known * 2 >= d.peak.allocated_bytes ? 'category' : 'site';
      assert(r.color === want, `coloured by ${r.color}, expected by ${want} (labelled ${known} of ${d.peak.allocated_bytes} bytes at the peak)`);
      await page.selectOption('#color-by', 'site');
      const sites = await page.evaluate(() => ({ hash: location.hash,
        items: [...document.querySelectorAll('#legend .site-item, #legend > span')].map((x) => x.textContent) }));
      assert(/color=site/.test(sites.hash), `the choice is not in the URL: "${sites.hash}"`);
      // Opened again from that URL: still by site, and an OOM file still on its OOM.
      await page.reload();
      await waitReady(page, opt.timeout);
      const again = await page.evaluate(() => ({ color: document.getElementById('color-by').value,
        tab: document.querySelector('.tabs button.active').dataset.tab }));
      assert(again.color === 'site', `reopened coloured by ${again.color}`);
      if (oomsInSummary.length) assert(again.tab === oomTab, `reopened on "${again.tab}", not on "${oomTab}"`);
      const named = sites.items.filter((t) => /[0-9.]+ (B|KiB|MiB|GiB)$/.test(t));
      if (d.peak.allocated_bytes > 0) assert(named.length > 0, `no site with its bytes in the legend: ${sites.items.join(' | ')}`);
      await page.selectOption('#color-by', r.color);
      return `${r.color}; by site: ${short(named.slice(0, 3).join(' | '), 120)}`;
    });
    const biggest = await page.evaluate(() => window.vramscope.biggestAtPeak()).catch((e) => ({ error: String(e) }));
    await page.click('#btn-peak');
    await check(T('Peak button zooms to the peak'), async () => {
      const v = await viewOf(page);
      const [a, b] = v.eventRange;
      if (before && before.events >= 100) {
        assert(v.x1 - v.x0 < before.x1 - before.x0, `view not narrower: [${v.x0}, ${v.x1}] vs [${before.x0}, ${before.x1}]`);
        assert(b - a < before.events, `eventRange [${a}, ${b}] still covers all ${before.events} events`);
      }
      if (v.peakEvent !== null && v.peakEvent !== undefined) {
        assert(v.peakEvent >= a && v.peakEvent < Math.max(b, a + 1), `peakEvent ${v.peakEvent} outside eventRange [${a}, ${b}]`);
      }
      return `peakEvent ${v.peakEvent}, eventRange [${a}, ${b}]` + (before && before.events < 100 ? ', trace too short to require a narrower view' : '');
    });

    // Hover the largest allocation alive at the peak.
    await check(T('tooltip over the largest allocation at the peak shows its stack'), async () => {
      assert(biggest && !biggest.error, `biggestAtPeak() failed: ${biggest && biggest.error}`);
      const { p, tip } = await hoverAlloc(page, biggest.alloc);
      assert(tip.visible, `#tooltip not visible at (${p.x.toFixed(1)}, ${p.y.toFixed(1)}), band ${p.heightPx.toFixed(1)} px high`);
      const want = biggest.frame === null ? 'no stack recorded' : biggest.frame;
      assert(tip.text.includes(want), `tooltip lacks "${short(want, 120)}"; it shows "${short(tip.text, 200)}"`);
      assert(tip.text.includes(fmtBytes(biggest.bytes)), `tooltip lacks the size ${fmtBytes(biggest.bytes)}: "${short(tip.text, 120)}"`);
      const kind = biggest.frame === null ? 'no stack' : tip.userFrames.includes(biggest.frame) ? 'user frame' : 'not a user frame';
      const zoom = p.zoomedFrom !== null ? `, band ${p.zoomedFrom.toFixed(1)} px → ${p.heightPx.toFixed(1)} px by shift+wheel` : '';
      return `alloc ${biggest.alloc}, ${fmtBytes(biggest.bytes)}${zoom}, ${kind}: ${biggest.frame === null ? '-' : short(biggest.frame, 90)}`;
    });
    const hoverShot = path.join(outDir, `${name}-hover.png`);
    await page.screenshot({ path: hoverShot });
    log(`     screenshot: ${hoverShot}`);
    if (!snap.xss) {
      await check(T('tooltip hides when the pointer leaves the plot'), async () => {
        await page.mouse.move(3, 3);
        assert(!(await page.isVisible('#tooltip')), '#tooltip still visible with the pointer outside the plot');
      });
    }

    if (snap.xss) {
      await check(T('tooltip and detail panel show payloads as literal text'), async () => {
        const tip = await textOf(page, '#tooltip');
        assert(tip.includes(XSS.script1), `#tooltip textContent lacks ${XSS.script1}: "${short(tip)}"`);
        assert(tip.includes(XSS.close), `#tooltip textContent lacks ${XSS.close}`);
        const det = await textOf(page, '#panel-detail');
        assert(det.includes(XSS.script1), `#panel-detail lacks ${XSS.script1}`);
        assert(det.includes(XSS.meta), `#panel-detail lacks the user_metadata ${XSS.meta}`);
        return 'frame names, file names and user_metadata as text';
      });
    }

    // Tabs.
    const tabs = await page.$$eval('.tabs button[data-tab]', (bs) => bs.map((b) => ({ tab: b.dataset.tab, hidden: b.hidden })));
    for (const { tab, hidden } of tabs) {
      if (hidden) continue;
      await check(T(`tab "${tab}" shows its panel`), async () => {
        const errs0 = st.pageErrors.length + st.console.length;
        await page.click(`.tabs button[data-tab="${tab}"]`);
        const s = await page.evaluate((t) => {
          const p = document.getElementById('panel-' + t);
          if (!p) return null;
          const r = p.getBoundingClientRect();
          return { active: p.classList.contains('active'), shown: getComputedStyle(p).display !== 'none' && r.height > 0,
            others: [...document.querySelectorAll('.panel')].filter((q) => q !== p && getComputedStyle(q).display !== 'none').map((q) => q.id),
            text: p.textContent.trim() };
        }, tab);
        assert(s, `no #panel-${tab}`);
        assert(s.active && s.shown, `#panel-${tab} not shown (active=${s.active})`);
        assert(!s.others.length, `other panels also shown: ${s.others.join(', ')}`);
        assert(s.text.length > 0, `#panel-${tab} is empty`);
        const errs = st.pageErrors.length + st.console.length - errs0;
        assert(errs === 0, `errors after the click: ${short([...st.pageErrors, ...st.console].slice(-errs).join(' | '), 300)}`);
        if (snap.xss && (tab === 'about' || tab === 'oom' || tab === 'alive')) {
          assert(s.text.includes(XSS.script1), `#panel-${tab} lacks the literal ${XSS.script1}`);
        }
        return `${s.text.length} characters`;
      });
    }

    // Tables at three window widths, in every tab: no cell overlaps the
    // next one of its row, no text spills out of its cell, and no word is
    // broken across lines except in cells marked .wrap (paths, stacks).
    for (const width of [1280, 1500, 1920]) {
      await check(T(`tables at ${width} px: no overlapping cells, no broken words`), async () => {
        await page.setViewportSize({ width, height: 950 });
        let cells = 0;
        const problems = [];
        for (const { tab, hidden } of tabs) {
          if (hidden) continue;
          await page.click(`.tabs button[data-tab="${tab}"]`);
          const r = await page.evaluate(TABLE_CHECK, tab);
          cells += r.cells;
          problems.push(...r.problems);
        }
        await page.setViewportSize({ width: 1600, height: 1000 });
        assert(!problems.length, `${problems.length} problem(s): ${short(problems.slice(0, 3).join(' | '), 400)}`);
        return `${cells} cells`;
      });
    }

    // Categories: colour by category, a legend of the categories present
    // only, the stacked areas with exact bytes on hover, and a click that
    // makes one category's allocations stand out.
    await check(T('colour by category: the legend lists the categories present, nothing else'), async () => {
      await page.selectOption('#color-by', 'category');
      const r = await page.evaluate(() => {
        const D = window.vramscope; const legend = [...document.querySelectorAll('#legend .cat-item')].map((x) => x.dataset.cat);
        return { legend, present: D.presentCategories() };
      });
      const want = summaryCategories(summary);
      assert(r.legend.length > 0, 'no category in the legend');
      assert(JSON.stringify([...r.legend].sort()) === JSON.stringify([...r.present].sort()), `legend ${r.legend} vs allocations ${r.present}`);
      for (const c of want) assert(r.legend.includes(c), `${c} is alive at the peak or the end but not in the legend ${r.legend}`);
      return r.legend.join(', ');
    });
    await check(T('Categories view: stacked areas, exact bytes per category at the peak, click highlights'), async () => {
      await page.click('.tabs button[data-tab="categories"]');
      const d = summary.devices[0];
      const r = await page.evaluate((peak) => {
        const D = window.vramscope, cv = document.getElementById('cat-plot');
        const c = cv.getContext('2d'), img = c.getImageData(0, 0, cv.width, cv.height).data;
        let painted = 0; for (let i = 3; i < img.length; i += 4) if (img[i]) painted++;
        const at = D.categoryBytesAt(peak === null ? -1 : peak);
        return { painted, w: cv.width, h: cv.height, at, rows: [...document.querySelectorAll('#cat-table .cat-row')].map((x) => x.dataset.cat) };
      }, d.peak.event_index);
      assert(r.painted > r.w * r.h * 0.05, `only ${r.painted} of ${r.w * r.h} pixels painted`);
      const byCat = Object.fromEntries(d.peak.by_category.map((c) => [c.category, c.bytes]));
      for (const [c, b] of Object.entries(r.at)) {
        assert(byCat[c] === b, `${c} at the peak: page ${b}, summary ${byCat[c]}`);
      }
      const sum = Object.values(r.at).reduce((a, b) => a + b, 0);
      assert(sum === d.peak.allocated_bytes, `categories at the peak sum to ${sum}, peak is ${d.peak.allocated_bytes}`);
      // Hover: the readout names the categories with their bytes.
      const box = await page.locator('#cat-plot').boundingBox();
      await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.9);
      const readout = await textOf(page, '#cat-readout');
      assert(/[0-9.]+ (B|KiB|MiB|GiB)/.test(readout) && r.rows.some((c) => readout.includes(CAT_LABELS[c])), `readout: "${short(readout, 200)}"`);
      // Click a category: its allocations keep their colour, the others fade.
      const big = d.peak.by_category[0].category;
      const h = await page.evaluate((c) => window.vramscope.highlightCheck(c), big);
      assert(h.highlighted >= 0 && h.same > 0 && (h.faded > 0 || r.rows.length === 1), `highlight ${big}: ${JSON.stringify(h)}`);
      await page.evaluate((c) => window.vramscope.highlight(c), big); // back off
      return `${r.rows.join(', ')}; at the peak ${Object.entries(r.at).map(([c, b]) => c + ' ' + fmtBytes(b)).join(', ')}`;
    });
    const catShot = path.join(outDir, `${name}-categories.png`);
    await page.screenshot({ path: catShot });
    log(`     screenshot: ${catShot}`);

    // OOMs.
    if (snap.expectOom || oomsInSummary.length) {
      await check(T('OOM button and panel'), async () => {
        assert(oomsInSummary.length > 0, 'vramscope summary --json reports no OOM');
        const visible = await page.isVisible('#btn-oom');
        assert(visible, '#btn-oom is hidden although the snapshot has an OOM');
        await page.click('#btn-oom');
        const text = await textOf(page, '#panel-oom');
        const shown = await page.isVisible('#panel-oom');
        assert(shown, '#panel-oom not shown after clicking #btn-oom');
        const req = oomsInSummary[0].requested_bytes;
        const forms = [fmtBytes(req), req.toLocaleString('en-US'), String(req)];
        assert(forms.some((f) => text.includes(f)), `#panel-oom does not mention the requested size (${forms.join(' / ')}): "${short(text, 200)}"`);
        const v = await viewOf(page);
        const e = oomsInSummary[0].event_index;
        if (e !== null && e !== undefined && v.events >= 100) {
          assert(e >= v.eventRange[0] && e <= v.eventRange[1], `OOM event ${e} not in view ${JSON.stringify(v.eventRange)}`);
        }
        if (snap.replayDisproves) {
          // The H200 ran out of memory under expandable segments too: the
          // panel must not advise it, and must say why.
          assert(!text.includes('usually avoids it') && !text.includes('expandable_segments:True usually'), `#panel-oom advises what the replay disproves: "${short(text, 300)}"`);
          assert(text.includes('fragmentation: 762.00 MiB allocated'), `#panel-oom: "${short(text, 300)}"`);
          // What must go, found by replay: 25 of the 6 MiB blocks.
          assert(text.includes('150.00 MiB of the biggest holders') && text.includes('(25 blocks)'), `#panel-oom: "${short(text, 600)}"`);
          const facts = await textOf(page, '#facts');
          assert(facts.includes('out of memory') && facts.includes('fragmentation'), `#facts: "${short(facts, 300)}"`);
        }
        if (snap.expectOutside) {
          // The recorder stored the device's total: the first view and
          // the panel name the memory held outside PyTorch.
          const facts = await textOf(page, '#facts');
          assert(facts.includes(snap.expectOutside + ' held outside PyTorch'), `#facts: "${short(facts, 300)}"`);
          assert(text.includes('Also memory outside this allocator: ' + snap.expectOutside), `#panel-oom: "${short(text, 600)}"`);
        }
        return `requested ${fmtBytes(req)}`;
      });
    } else {
      await check(T('no OOM: OOM button hidden'), async () => {
        assert(!(await page.isVisible('#btn-oom')), '#btn-oom visible without OOMs');
      });
    }

    // Simulate: the allocator model's sweep, computed when the report was
    // written, says what `vramscope simulate --sweep` says; each run draws
    // its reserved curve over the recorded one.
    // (The generated OOM snapshot is a CUDA allocator trace: it must have one.)
    const simulateShown = await page.isVisible('#tab-simulate');
    if (simulateShown || snap.expectOom) {
      await check(T('Simulate tab: the sweep answers as `vramscope simulate --sweep` does, one curve per setting'), async () => {
        assert(simulateShown, '#tab-simulate hidden although the snapshot is a CUDA allocator trace');
        const want = JSON.parse(await vramscope(['simulate', file, '--json', '--sweep', '-q']));
        await page.click('.tabs button[data-tab="simulate"]');
        const r = await page.evaluate(() => window.vramscope.simulate());
        assert(r.answer === want.answer, `page "${short(r.answer, 120)}" vs cli "${short(want.answer, 120)}"`);
        assert(r.rows === want.runs.length && r.runs === want.runs.length, `${r.rows} rows, cli ${want.runs.length} runs`);
        assert(r.points > 1 && r.painted > 200, `${r.points} points, ${r.painted} pixels painted`);
        const wshot = path.join(outDir, `${name}-simulate.png`);
        await page.screenshot({ path: wshot });
        log(`     screenshot: ${wshot}`);
        const last = want.runs.length - 1;
        const r2 = await page.evaluate((i) => window.vramscope.simulate(i), last);
        assert(r2.selected === String(last) && r2.label === want.runs[last].label, `selected ${r2.selected} ${r2.label}`);
        if (oomsInSummary.length) {
          await page.click('.tabs button[data-tab="oom"]');
          const text = await textOf(page, '#panel-oom');
          assert(text.includes(want.answer), 'the OOM panel does not state the simulation answer');
        }
        return short(want.answer, 100);
      });
    }

    // What to do: the CLI's advice, row for row, each with its verdict and
    // how it was predicted; on the H200's fragmentation OOM the first row
    // frees the line whose kept tensors pin the segments. A CPU recording
    // (no caching allocator) has the panel without the Simulate tab.
    const adviseShown = await page.isVisible('#tab-advise');
    if (simulateShown || adviseShown) {
      await check(T('What to do: the ranked changes of `vramscope advise`, each with its method and code'), async () => {
        const want = JSON.parse(await vramscope(['advise', file, '--json', '-q']));
        await page.click('.tabs button[data-tab="advise"]');
        const r = await page.evaluate(() => window.vramscope.advise());
        assert(r && r.visible && r.openTab === 'advise', `panel not shown: ${JSON.stringify(r && r.openTab)}`);
        assert(r.answer === want.answer, `page "${short(r.answer || '', 120)}" vs cli "${short(want.answer, 120)}"`);
        assert(r.rows.length === want.advice.length, `${r.rows.length} rows, cli ${want.advice.length}`);
        const verdict = (x) => (want.capacity === null ? '' : x.fits === true ? 'fits' : x.fits === false ? 'does not fit' : 'cannot tell');
        r.rows.forEach((row, i) => {
          const w = want.advice[i];
          assert(row.change === w.change && row.method === w.method && row.verdict === verdict(w), `row ${i + 1}: ${JSON.stringify(row)} vs ${JSON.stringify(w)}`);
          assert(row.how.includes(w.how) && row.code === w.code, `row ${i + 1} how/code differ`);
          // A bound is the least the peak can be: said on the page.
          const bound = w.method === 'bound';
          assert(row.peak.includes('at least') === bound && row.saving.startsWith('at most') === bound,
            `row ${i + 1} (${w.method}): "${row.peak}", "${row.saving}"`);
        });
        if (snap.expectBound) {
          const b = r.rows.findIndex((x) => x.cls === snap.expectBound);
          assert(b >= 0 && r.rows.slice(b).every((x) => x.method === 'bound'), `no ${snap.expectBound} bound row last: ${JSON.stringify(r.rows.map((x) => x.cls))}`);
        }
        assert(r.noGain.length === (want.no_gain || []).length && r.noGain.every((t, i) => t.startsWith(want.no_gain[i].change)),
          `tried-without-gain rows ${JSON.stringify(r.noGain)} vs cli ${JSON.stringify((want.no_gain || []).map((x) => x.change))}`);
        if (want.caching_allocator === false) {
          const text = await textOf(page, '#panel-advise');
          assert(text.includes('counted without a caching allocator') && !text.includes('peak reserved'), 'a CPU recording\'s advice speaks of reserved memory');
        }
        if (snap.replayDisproves) {
          assert(r.rows.length && r.rows[0].cls === 'free_holders' && r.rows[0].change.includes('oom_run.py:34'), `first row: ${JSON.stringify(r.rows[0])}`);
          assert(!r.rows.some((x) => x.verdict === 'fits'), 'a row says it fits where the GPU ran out');
        }
        const ashot = path.join(outDir, `${name}-advise.png`);
        await page.screenshot({ path: ashot });
        log(`     screenshot: ${ashot}`);
        return short(want.answer, 100);
      });
    }

    // Leaks: the finding is shown, and clicking its site highlights its
    // allocations on the timeline.
    if (snap.expectHeld) {
      await check(T('Leaks tab names what holds the leak and the line that stores into it'), async () => {
        await page.click('.tabs button[data-tab="leaks"]');
        const text = await textOf(page, '#panel-leaks');
        assert(text.includes(snap.expectHeld), `#panel-leaks lacks "${snap.expectHeld}": "${short(text, 400)}"`);
        assert(text.includes('errors.append(err)'), 'the storing line is not shown');
        return snap.expectHeld;
      });
    }
    if (snap.expectLedger) {
      await check(T('the device ledger: outside PyTorch in the facts strip, every part in the File tab, as summary --json has it'), async () => {
        const want = JSON.parse(await vramscope(['summary', file, '--json', '-q'])).devices[0].ledger;
        assert(want && want.adds_up, 'summary --json has no ledger that adds up');
        const facts = await textOf(page, '#facts');
        assert(facts.includes('outside PyTorch' + '136.80 GiB of the device\'s 139.80 GiB'), `#facts: "${short(facts, 400)}"`);
        await page.click('.tabs button[data-tab="about"]');
        const about = await textOf(page, '#panel-about');
        assert(about.includes('Device memory at the dump: ' + fmtBytes(want.total_bytes)), `#panel-about: "${short(about, 400)}"`);
        for (const p of want.parts) {
          assert(about.includes(p.label + fmtBytes(p.bytes)), `#panel-about lacks "${p.label}" ${fmtBytes(p.bytes)}: "${short(about, 600)}"`);
        }
        assert(want.notes.every((n) => about.includes(n)), 'a note of the ledger is missing');
        return `${want.parts.length} parts`;
      });
    }
    if (snap.expectPart) {
      await check(T("the peak's sites and the leak name the module beneath the user's line"), async () => {
        await page.click('.tabs button[data-tab="about"]');
        const about = await textOf(page, '#panel-about');
        assert(about.includes('\u2514 ' + snap.expectPart), `#panel-about lacks "${snap.expectPart}": "${short(about, 400)}"`);
        await page.click('.tabs button[data-tab="leaks"]');
        const leaks = await textOf(page, '#panel-leaks');
        assert(leaks.includes('made by') && leaks.includes(snap.expectPart), `#panel-leaks lacks the part: "${short(leaks, 400)}"`);
        // Alive at the peak, grouped in the page from each stack's part.
        await page.click('.tabs button[data-tab="alive"]');
        const alive = await textOf(page, '#panel-alive');
        assert(alive.includes('\u2514 ' + snap.expectPart), `#panel-alive lacks the part: "${short(alive, 400)}"`);
        return snap.expectPart;
      });
    }
    if (snap.expectBackwardPart) {
      await check(T("the peak's backward memory is named by the block that made it"), async () => {
        await page.click('.tabs button[data-tab="about"]');
        const about = await textOf(page, '#panel-about');
        assert(about.includes('\u2514 ' + snap.expectBackwardPart), `#panel-about lacks "${snap.expectBackwardPart}": "${short(about, 400)}"`);
        // Alive at the peak, grouped in the page from each allocation's block.
        await page.click('.tabs button[data-tab="alive"]');
        const alive = await textOf(page, '#panel-alive');
        assert(alive.includes('\u2514 ' + snap.expectBackwardPart), `#panel-alive lacks the part: "${short(alive, 400)}"`);
        return snap.expectBackwardPart;
      });
    }
    if (snap.expectLeak) {
      await check(T('Leaks tab shows the planted leak; its site highlights the allocations'), async () => {
        await page.click('.tabs button[data-tab="leaks"]');
        const text = await textOf(page, '#panel-leaks');
        assert(text.includes('LEAK') && text.includes(snap.expectLeak), `#panel-leaks: "${short(text, 300)}"`);
        const label = await textOf(page, '#tab-leaks');
        assert(label.includes('(!)'), `tab label "${label}" does not flag the leak`);
        await page.click('#panel-leaks .finding.leak .site');
        await page.waitForFunction(() => /matching/.test(document.getElementById('search-info').textContent), null, { timeout: 10000 });
        const info = await textOf(page, '#search-info');
        const n = Number(info.replace(/[^0-9]/g, ''));
        assert(n > 0, `clicking the site → "${info}"`);
        await page.fill('#search', '');
        await page.waitForFunction(() => document.getElementById('search-info').textContent === '', null, { timeout: 10000 });
        return info;
      });
    }

    // Diff against a baseline (report --baseline).
    if (snap.baseline) {
      await check(T('Diff tab names the site that grew against the baseline first'), async () => {
        assert(await page.isVisible('#tab-diff'), '#tab-diff hidden although --baseline was given');
        await page.click('.tabs button[data-tab="diff"]');
        const first = await page.evaluate(() => {
          const s = document.querySelector('#panel-diff details .site');
          return s ? s.textContent : null;
        });
        assert(first && first.includes(snap.expectLeak), `first grown site: ${first}`);
        await page.click('#panel-diff details .site');
        await page.waitForFunction(() => /matching/.test(document.getElementById('search-info').textContent), null, { timeout: 10000 });
        const info = await textOf(page, '#search-info');
        await page.fill('#search', '');
        await page.waitForFunction(() => document.getElementById('search-info').textContent === '', null, { timeout: 10000 });
        return `${first} → ${info}`;
      });
    } else {
      await check(T('no baseline: Diff tab hidden'), async () => {
        assert(!(await page.isVisible('#tab-diff')), '#tab-diff visible without --baseline');
      });
    }

    // Search.
    if (biggest && !biggest.error && biggest.frame) {
      await check(T('search highlights matching allocations'), async () => {
        const q = snap.xss ? XSS.script1 : biggest.frame.split(' in ').pop();
        await page.fill('#search', q);
        await page.waitForFunction(() => /matching/.test(document.getElementById('search-info').textContent), null, { timeout: 10000 });
        const info = await textOf(page, '#search-info');
        const n = Number(info.replace(/[^0-9]/g, ''));
        assert(n > 0, `"${q}" → "${info}"`);
        await page.fill('#search', '');
        return `"${short(q, 60)}" → ${info}`;
      });
    }

    if (snap.xss) {
      await page.selectOption('#color-by', 'category').catch(() => {});
      await page.click('#btn-reset');
      await page.mouse.move(5, 5);
    }

    // Reset.
    await check(T('Reset zoom restores the whole trace'), async () => {
      await page.click('#btn-reset');
      const v = await viewOf(page);
      assert(v.eventRange[0] <= 0 && v.eventRange[1] >= v.events, `eventRange ${JSON.stringify(v.eventRange)} for ${v.events} events`);
      const ms = await page.evaluate(() => [window.vramscope.zoomBy(0.8), window.vramscope.panBy(0.1)]);
      assert(ms.every((x) => typeof x === 'number' && x >= 0), `zoomBy/panBy returned ${JSON.stringify(ms)}`);
      await page.evaluate(() => window.vramscope.reset());
      return `zoomBy ${ms[0].toFixed(1)} ms, panBy ${ms[1].toFixed(1)} ms`;
    });

    // The level of detail draws what the whole stack would: every column's
    // alive allocations and each row's colour, against a scan of every
    // allocation's life, at the whole trace, zoomed in and panned.
    await check(T('the plot draws the stack of every column'), async () => {
      const r = await page.evaluate(() => {
        const v = window.vramscope, out = [];
        v.reset(); out.push(v.stackCheck(3));
        v.zoomBy(0.37); out.push(v.stackCheck(3));
        v.panBy(0.61); v.zoomBy(0.05); out.push(v.stackCheck(1));
        v.panBy(-0.9); out.push(v.stackCheck(1));
        v.reset();
        return out;
      });
      for (const x of r) assert(x.aliveMismatch === 0 && x.pixelMismatch === 0, `mismatches ${JSON.stringify(r)}`);
      assert(r[0].columns > 0, `no column checked: ${JSON.stringify(r)}`);
      return r.map((x) => `${x.columns} columns, ${x.rows} rows`).join('; ');
    });

    if (snap.xss) {
      await check(T('no payload runs'), async () => {
        await page.waitForTimeout(200);
        const s = await page.evaluate(() => ({
          imgs: document.querySelectorAll('img').length,
          svgs: document.querySelectorAll('svg').length,
          iframes: document.querySelectorAll('iframe').length,
          scripts: document.querySelectorAll('script').length,
          xss: typeof window.__xss === 'undefined' ? null : String(window.__xss),
          title: document.title,
          shownTitle: document.getElementById('title').textContent,
          legend: document.getElementById('legend').textContent,
        }));
        assert(!st.dialogs.length, `dialog(s) opened: ${st.dialogs.join(' | ')}`);
        assert(s.imgs === 0, `${s.imgs} <img> element(s) in the DOM`);
        assert(s.svgs === 0 && s.iframes === 0, `${s.svgs} <svg>, ${s.iframes} <iframe> in the DOM`);
        assert(s.xss === null, `window.__xss = ${s.xss}`);
        assert(s.scripts === 2, `${s.scripts} <script> elements (expected 2)`);
        assert(s.title.includes('<img src=x onerror=window.__xss=8>'), `document.title "${s.title}" lacks the file name's literal markup`);
        assert(s.shownTitle.includes('<img src=x onerror=window.__xss=8>'), `#title "${s.shownTitle}" lacks the literal markup`);
        return 'no dialog, no <img>, window.__xss undefined, title literal';
      });
    }

    await check(T('no network requests'), () => {
      const all = [...new Set([...st.requests, ...st.blocked])];
      assert(!all.length, `${all.length} request(s): ${short(all.join(' '), 300)}`);
      return 'only the page itself';
    });
    await check(T('no console or page errors'), () => {
      const errs = [...st.pageErrors.map((e) => `pageerror: ${e}`), ...st.console.map((e) => `console: ${e}`)];
      assert(!errs.length, `${errs.length}: ${short(errs.join(' | '), 400)}`);
    });
  } finally {
    await context.close().catch(() => {});
  }
}

// ---------- the ranks report ----------
// Four ranks in Megatron's naming, rank 2 with a leak and an OOM: the page
// lists it first, draws every strip, and opens its full report in a frame
// whose viewer starts without errors; nothing is fetched.
async function testRanks(browser) {
  const dir = path.join(outDir, 'ranks_job');
  const html = path.join(outDir, 'ranks.html');
  const made = await check('ranks: rank files and the ranks report written', async () => {
    fs.mkdirSync(dir, { recursive: true });
    for (let r = 0; r < 4; r++) {
      const f = path.join(dir, r === 2 ? `mem_oom_rank_${r}.pickle` : `mem_${r}.pickle`);
      await vramscope(['synth', '-o', f, '--entries', '15000', '--seed', '4', '--iterations', '6', ...(r === 2 ? ['--leak', '256MiB', '--oom'] : [])]);
    }
    await vramscope(['ranks', dir, '-q', '--html', html]);
    return `${(fs.statSync(html).size / 1e6).toFixed(2)} MB`;
  });
  if (!made) return;
  const { context, page, st } = await openReport(browser, html);
  try {
    await page.goto(st.url);
    await check('ranks: the rank that ran out of memory first, every strip drawn', async () => {
      await page.waitForFunction(() => window.vramscopeRanks && window.vramscopeRanks.ready, null, { timeout: 30000 });
      const order = await page.evaluate(() => window.vramscopeRanks.order());
      assert(order[0] === 2, `order ${order}`);
      const strips = await page.evaluate(() => window.vramscopeRanks.strips());
      assert(strips.length === 4 && strips.every((x) => x.painted > 100), JSON.stringify(strips));
      return `order ${order.join(', ')}`;
    });
    await check('ranks: a click opens the rank\'s own report in the page', async () => {
      await page.click('tr.rank[data-rank="2"]');
      await page.waitForFunction(() => window.vramscopeRanks.opened && window.vramscopeRanks.opened.rank === 2, null, { timeout: 30000 });
      const frame = page.frames().find((f) => f !== page.mainFrame());
      assert(frame, 'no frame');
      await frame.waitForFunction(() => window.vramscope && (window.vramscope.ready || window.vramscope.error), null, { timeout: 60000 });
      const r = await frame.evaluate(() => ({ ready: window.vramscope.ready, title: document.title, events: window.vramscope.view().events }));
      assert(r.ready && /rank 2/.test(r.title) && r.events > 0, JSON.stringify(r));
      return `${r.title}, ${r.events} events`;
    });
    const shot = path.join(outDir, 'ranks.png');
    await page.screenshot({ path: shot, fullPage: false });
    log(`     screenshot: ${shot}`);
    await check('ranks: no network, no console or page errors', () => {
      assert(!st.blocked.length, `blocked: ${st.blocked.join(', ')}`);
      const errs = [...st.pageErrors, ...st.console];
      assert(!errs.length, short(errs.join(' | '), 400));
    });
  } finally {
    await context.close().catch(() => {});
  }
}

// A trace long enough that a column of the whole view spans several of
// the level of detail's blocks (256 events): the stack drawn from the
// blocks' lists must be the stack of every allocation's life.
async function testLevelOfDetail(browser) {
  const file = path.join(outDir, 'synth_lod_400000.pickle');
  const html = path.join(outDir, 'synth_lod_400000.html');
  const made = await check('level of detail: a 400,000-entry report written', async () => {
    await vramscope(['synth', '-o', file, '--entries', '400000', '--seed', '3', '--iterations', '4']);
    await vramscope(['report', file, '-o', html]);
    return `${(fs.statSync(html).size / 1e6).toFixed(2)} MB`;
  });
  if (!made) return;
  const { context, page, st } = await openReport(browser, html);
  try {
    await page.goto(st.url);
    await page.waitForFunction(() => window.vramscope && (window.vramscope.ready || window.vramscope.error), null, { timeout: 60000 });
    await check('level of detail: every column drawn as the whole stack, across blocks', async () => {
      const r = await page.evaluate(() => {
        const v = window.vramscope, out = [];
        v.reset(); out.push({ ...v.stackCheck(11), span: v.view().eventRange });
        v.zoomBy(0.6); v.panBy(0.3); out.push({ ...v.stackCheck(11), span: v.view().eventRange });
        v.zoomBy(0.02); out.push({ ...v.stackCheck(1), span: v.view().eventRange });
        v.reset();
        return out;
      });
      for (const x of r) assert(x.aliveMismatch === 0 && x.pixelMismatch === 0 && x.rows > 0, JSON.stringify(r));
      // The whole view's columns each span more than one block.
      const perColumn = (r[0].span[1] - r[0].span[0]) / 1500;
      assert(perColumn > 256, `${perColumn} events per column`);
      return r.map((x) => `${x.columns} columns, ${x.rows} rows`).join('; ');
    });
  } finally {
    await context.close().catch(() => {});
  }
}

// ---------- main ----------
async function main() {
  if (!fs.existsSync(opt.bin)) {
    console.error(`run.mjs: ${opt.bin} not found; build it with: cargo build --release -p vramscope`);
    process.exit(2);
  }
  if (!fs.existsSync(opt.chromium)) {
    console.error(`run.mjs: Chromium not found at ${opt.chromium}; install it (apt-get install chromium) or set CHROMIUM`);
    process.exit(2);
  }
  console.log(`browser tests: output in ${outDir}`);

  const snaps = [];
  // The real snapshots are in the repository: none found is a failure.
  const real = fs.existsSync(opt.fixtures)
    ? fs.readdirSync(opt.fixtures).sort().filter((f) => /\.pickle(\.gz)?$/.test(f)) : [];
  await check(`real snapshots found in ${opt.fixtures}`, () => {
    if (!real.length) throw new Error('none');
    return `${real.length}`;
  });
  for (const f of real) snaps.push({ name: f.replace(/\.pickle(\.gz)?$/, ''), file: path.join(opt.fixtures, f) });
  // The profiler's own files (Kineto traces, memory timelines) read as snapshots.
  for (const f of fs.existsSync(opt.fixtures) ? fs.readdirSync(opt.fixtures).sort() : []) {
    if (/\.(json|raw)\.gz$/.test(f)) snaps.push({ name: f.replace(/\.gz$/, ''), file: path.join(opt.fixtures, f) });
  }
  // CPU recordings whose categories come from the Memory Profiler.
  const recorded = path.join(repoRoot, 'tests', 'fixtures', 'recorded');
  for (const f of fs.readdirSync(recorded).sort().filter((f) => f.endsWith('.pickle.gz'))) {
    // The corpus recording keeps its exceptions in `errors`: the page names it.
    const held = f.startsWith('corpus_accelerate_traceback_kept') ? 'held by `errors` (list, local of accelerate' : undefined;
    // A Hugging Face Llama's kept logits: the memory beneath the user's line
    // is named by the model's module and line.
    const part = f.startsWith('llama_kept_logits') ? 'lm_head (Linear) at transformers/models/llama/modeling_llama.py:' : undefined;
    // Gradients made in backward, named by the block whose backward made them.
    // Before autograd reaches the first marked module (the head), the
    // loss's own backward: named for what came after the head's output.
    const backward = f.startsWith('backward_blocks') ? 'blocks[*] (Block) in backward'
      : f.startsWith('checkpointed_transformer') ? "after head's output (the loss), in backward" : undefined;
    snaps.push({ name: f.replace(/\.pickle\.gz$/, ''), file: path.join(recorded, f), expectHeld: held, expectPart: part, expectBackwardPart: backward });
  }
  const gen = path.join(outDir, 'synth_oom_20000.pickle');
  snaps.push({ name: 'synth_oom_20000', file: gen, expectOom: true, expectLeak: 'train.py:74 in accumulate_history',
    make: () => vramscope(['synth', '-o', gen, '--entries', '20000', '--oom', '--leak', '64MiB', '--seed', '7']) });
  const clean = path.join(outDir, 'synth_clean_20000.pickle');
  const leaky = path.join(outDir, 'synth_leak_20000.pickle');
  snaps.push({ name: 'synth_leak_vs_clean', file: leaky, baseline: clean, expectLeak: 'train.py:74 in accumulate_history',
    make: async () => {
      await vramscope(['synth', '-o', clean, '--entries', '20000', '--seed', '7']);
      await vramscope(['synth', '-o', leaky, '--entries', '20000', '--seed', '7', '--leak', '64MiB']);
    } });
  // Eight training steps after 4.3 s of setup (H200): the first view shows the steps.
  snaps.push({ name: 'gpu_settings_default', file: path.join(repoRoot, 'tests', 'fixtures', 'gpu', 'settings_default.pickle.gz'),
    expectFramed: true });
  // A GPT's training steps recorded by vramscope.record on an H200 (fp32
  // weights, no autocast): mixed precision is offered as a bound.
  snaps.push({ name: 'gpu_advise_baseline', file: path.join(repoRoot, 'tests', 'fixtures', 'gpu', 'advise_baseline.pickle.gz'),
    expectBound: 'mixed_precision' });
  // A GPT that ran out of memory on an H200 after 4.4 s of idle setup:
  // the first view opens on the activity around the OOM, not on the idle.
  snaps.push({ name: 'gpu_oom_gpt_idle_head', file: path.join(repoRoot, 'tests', 'fixtures', 'gpu', 'oom_gpt_default.pickle.gz'),
    expectOom: true, expectFramed: true });
  // A fragmentation OOM recorded on a real H200 (tests/fixtures/gpu).
  snaps.push({ name: 'gpu_oom_frag_default', file: path.join(repoRoot, 'tests', 'fixtures', 'gpu', 'oom_frag_default.pickle.gz'),
    expectOom: true, replayDisproves: true });
  // The same OOM recorded by vramscope.record, which stores the device's total memory.
  snaps.push({ name: 'gpu_facts_frag_default', file: path.join(repoRoot, 'tests', 'fixtures', 'gpu', 'facts_frag_default.pickle.gz'),
    expectOom: true, expectOutside: '136.80 GiB', expectLedger: true });
  // A file cut in the middle of its trace (a job killed while writing).
  const cut = path.join(outDir, 'synth_cut_20000.pickle');
  snaps.push({ name: 'synth_cut_20000', file: cut, expectCut: true,
    make: async () => {
      const whole = path.join(outDir, 'synth_whole_20000.pickle');
      await vramscope(['synth', '-o', whole, '--entries', '20000', '--seed', '11']);
      const bytes = fs.readFileSync(whole);
      fs.writeFileSync(cut, bytes.subarray(0, Math.floor(bytes.length / 2)));
    } });
  const xssFile = path.join(outDir, XSS_FILE);
  snaps.push({ name: 'xss_payloads', file: xssFile, expectOom: true, xss: true,
    make: () => fs.writeFileSync(xssFile, JSON.stringify(xssSnapshot())) });

  const chosen = snaps.filter((s) => !opt.only || s.name.includes(opt.only));
  // The longest first (the 400,000-entry page), so that no page is left
  // to run alone at the end.
  const tasks = [];
  if (!opt.only || 'level of detail'.includes(opt.only)) tasks.push(testLevelOfDetail);
  if (!opt.only || 'ranks'.includes(opt.only)) tasks.push(testRanks);
  for (const s of chosen) {
    tasks.push(async (browser) => {
      if (s.make) {
        const made = await check(`${s.name}: snapshot written`, async () => { await s.make(); return path.basename(s.file); });
        if (!made) return;
      }
      await testReport(browser, s);
    });
  }
  const jobs = Math.max(1, Math.floor(Number(process.env.VRAMSCOPE_BROWSER_JOBS)) || Math.min(4, os.cpus().length));
  const browser = await chromium.launch({ executablePath: opt.chromium, headless: true, args: LAUNCH_ARGS });
  console.log(`chromium ${browser.version()}, ${tasks.length} pages, ${jobs} at a time`);
  try {
    let next = 0;
    const worker = async () => {
      while (next < tasks.length) {
        const task = tasks[next++];
        const lines = [];
        try {
          await pageLines.run(lines, () => task(browser));
        } catch (e) {
          pageLines.run(lines, () => fail('a page\'s checks stopped', e));
        }
        for (const l of lines) console.log(l);
      }
    };
    await Promise.all(Array.from({ length: jobs }, worker));
  } finally {
    await browser.close().catch(() => {});
  }

  if (failures.length) {
    console.log('\nfailures:');
    for (const f of failures) console.log(`  ${f}`);
  }
  console.log(`\n${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(`run.mjs: ${e && e.stack ? e.stack : e}`);
  console.log(`\n${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
