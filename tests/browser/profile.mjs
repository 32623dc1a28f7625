#!/usr/bin/env node
// Where a report page spends its time while zooming and panning: the CPU
// profile (CDP Profiler) of N zoomBy(0.8) and panBy(0.1) calls, printed as
// the functions with the most self time.
//
//   node tests/browser/profile.mjs --html REPORT.html [--iterations 10]
import { chromium } from 'playwright-core';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const html = path.resolve(args[args.indexOf('--html') + 1]);
const n = args.includes('--iterations') ? Number(args[args.indexOf('--iterations') + 1]) : 10;
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1600, height: 900 } });
await page.goto(pathToFileURL(html).href);
await page.waitForFunction(() => window.vramscope && window.vramscope.ready, null, { timeout: 600000 });
const cdp = await page.context().newCDPSession(page);
await cdp.send('Profiler.enable');
await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
await cdp.send('Profiler.start');
const t = await page.evaluate((n) => {
  const z = [], p = [];
  for (let i = 0; i < n; i++) z.push(window.vramscope.zoomBy(0.8));
  for (let i = 0; i < n; i++) p.push(window.vramscope.panBy(0.1));
  return { z, p };
}, n);
const { profile } = await cdp.send('Profiler.stop');
const self = new Map();
const byId = new Map(profile.nodes.map((x) => [x.id, x]));
const dt = profile.timeDeltas;
const counts = new Map();
profile.samples.forEach((id, i) => counts.set(id, (counts.get(id) || 0) + (dt[i] || 0)));
for (const [id, us] of counts) {
  const f = byId.get(id).callFrame;
  const k = `${f.functionName || '(anon)'}:${f.lineNumber + 1}`;
  self.set(k, (self.get(k) || 0) + us);
}
const total = [...self.values()].reduce((a, b) => a + b, 0);
console.log('zoom ms', t.z.map((x) => x.toFixed(0)).join(' '));
console.log('pan ms', t.p.map((x) => x.toFixed(0)).join(' '));
for (const [k, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 15)) console.log(`${(us / 1000).toFixed(1).padStart(8)} ms ${(100 * us / total).toFixed(1).padStart(5)}%  ${k}`);
await browser.close();
