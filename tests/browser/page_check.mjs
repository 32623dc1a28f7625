// Open a self-contained HTML page in headless Chromium with the network off
// and report, as one JSON line: requests attempted, console/page errors, how
// many elements match a selector and the first one's fill colour.
//   node page_check.mjs PAGE.html 'svg .tensor'
import { chromium } from 'playwright-core';
import path from 'node:path';

const [page_, selector] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox'],
});
try {
  const ctx = await browser.newContext({ offline: true });
  const page = await ctx.newPage();
  const errors = [];
  let requests = 0;
  const url = 'file://' + path.resolve(page_);
  await page.route('**/*', (r) => {
    if (r.request().url() === url) return r.continue();
    requests++;
    return r.abort();
  });
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForTimeout(300);
  const r = await page.evaluate((sel) => {
    const all = document.querySelectorAll(sel);
    const first = all[0];
    const shape = first ? (first.matches('rect,circle,ellipse,path,polygon') ? first : first.querySelector('rect,circle,ellipse,path,polygon')) : null;
    return { found: all.length, fill: shape ? getComputedStyle(shape).fill : null };
  }, selector);
  console.log(JSON.stringify({ requests, errors, ...r }));
} finally {
  await browser.close();
}
