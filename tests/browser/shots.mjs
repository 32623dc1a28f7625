#!/usr/bin/env node
// Screenshots of report pages as a newcomer first sees them, for reviews:
//
//   node tests/browser/shots.mjs OUT_DIR PAGE.html [PAGE.html ...] [--width 1500] [--height 950]
//
// Each page opens through file:// with the network off; OUT_DIR/NAME.png is
// the first view, OUT_DIR/NAME.json what the header strip, the open tab and
// the legend say, and the x range of the first view.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';

const args = process.argv.slice(2);
let width = 1500, height = 950;
const pages = [];
let out = null;
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--width') width = Number(args[++i]);
  else if (args[i] === '--height') height = Number(args[++i]);
  else if (out === null) out = args[i];
  else pages.push(args[i]);
}
if (!out || !pages.length) {
  console.error('usage: node tests/browser/shots.mjs OUT_DIR PAGE.html [...] [--width W] [--height H]');
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox'],
});
try {
  for (const p of pages) {
    const ctx = await browser.newContext({ offline: true, viewport: { width, height } });
    const page = await ctx.newPage();
    const url = 'file://' + path.resolve(p);
    await page.route('**/*', (r) => (r.request().url() === url ? r.continue() : r.abort()));
    await page.goto(url);
    await page.waitForTimeout(800);
    const name = path.basename(p).replace(/\.html$/, '');
    await page.screenshot({ path: path.join(out, `${name}.png`) });
    const seen = await page.evaluate(() => {
      const text = (sel) => [...document.querySelectorAll(sel)].map((e) => e.textContent.trim()).filter(Boolean);
      return {
        title: document.title,
        tab: text('.tabs button.active'),
        strip: text('#facts > span, #verdict').slice(0, 12),
        note: text('#view-note'),
        legend: text('#legend > span').slice(0, 20),
        url: location.hash,
      };
    });
    fs.writeFileSync(path.join(out, `${name}.json`), JSON.stringify(seen, null, 1));
    console.log(`${name}: ${path.join(out, `${name}.png`)}`);
    await ctx.close();
  }
} finally {
  await browser.close();
}
