// Reads the admin page's certificates table in Debian's Chromium for tests/admin_page.rs:
// waits until a row with the state STATE is drawn, then prints one JSON object with the
// rows (name, state, the cells' text) and whether the table's title shows, and writes a
// screenshot. Arguments: ADMIN_URL STATE SCREENSHOT.
const { chromium } = require("playwright-core");

const [admin, state, shot] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
  const seen = {};
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    await page.goto(admin);
    const end = Date.now() + 30000;
    for (;;) {
      seen.rows = await page.$$eval("tr.certificate", trs => trs.map(tr => ({
        state: tr.dataset.state, cells: [...tr.cells].map(td => td.textContent),
      })));
      if (seen.rows.some(r => r.state === state)) break;
      if (Date.now() > end) throw new Error("no certificate row in the state " + state);
      await new Promise(r => setTimeout(r, 100));
    }
    seen.title_shown = await page.$eval("#certificates-title", h => !h.hidden);
    await page.screenshot({ path: shot, fullPage: true });
  } catch (e) {
    seen.error = String(e);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(seen));
})();
