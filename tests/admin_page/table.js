// Reads one table of the admin page in Debian's Chromium for the tests: waits until a row
// ROWS (a selector: `tr.certificate`, `tr.member`) whose data-state is STATE is drawn, then
// prints one JSON object with the rows (state, the cells' text) and whether the heading TITLE
// (a selector) shows, and writes a screenshot. Arguments: ADMIN_URL ROWS STATE TITLE
// SCREENSHOT.
const { chromium } = require("playwright-core");

const [admin, rows, state, title, shot] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
  const seen = {};
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    await page.goto(admin);
    const end = Date.now() + 30000;
    for (;;) {
      seen.rows = await page.$$eval(rows, trs => trs.map(tr => ({
        state: tr.dataset.state, cells: [...tr.cells].map(td => td.textContent),
      })));
      if (seen.rows.some(r => r.state === state)) break;
      if (Date.now() > end) throw new Error("no row " + rows + " in the state " + state);
      await new Promise(r => setTimeout(r, 100));
    }
    seen.title_shown = await page.$eval(title, h => !h.hidden);
    await page.screenshot({ path: shot, fullPage: true });
  } catch (e) {
    seen.error = String(e);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(seen));
})();
