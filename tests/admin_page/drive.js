// Drives the admin page in Debian's Chromium for tests/admin_page.rs: loads it with and
// without the token, reads the rendered DOM, presses buttons, takes screenshots. Prints one
// JSON object with what it saw. Arguments: ADMIN_URL TOKEN OUT_DIR [PLAN_HTML].
const { chromium } = require("playwright-core");

const [admin, token, out, planHtml] = process.argv.slice(2);

function rows(page) {
  return page.$$eval("tr.proc", trs => trs.map(tr => ({
    pool: tr.dataset.pool, index: +tr.dataset.index, pid: tr.dataset.pid, node: tr.dataset.node,
    text: tr.textContent,
  })));
}

async function waitFor(what, check, ms) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await new Promise(r => setTimeout(r, 100));
  }
}

(async () => {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
  const seen = {};
  try {
    // With the token (from the address, as a user would bookmark it).
    const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    const page = await ctx.newPage();
    page.on("dialog", d => d.accept());
    await page.goto(`${admin}/#token=${token}`);
    await waitFor("every process drawn with its pid", async () => {
      const r = await rows(page);
      return r.length >= 3 && r.every(x => x.pid) ? r : null;
    }, 15000);
    // Two polls, so rates are drawn.
    await page.waitForTimeout(2500);
    seen.rows = await rows(page);
    seen.chips = await page.$$eval(".worker", els => els.map(e => ({ pool: e.dataset.pool, pid: e.dataset.pid, node: e.dataset.node })));
    seen.cpus = await page.$$eval(".cpu", els => els.length);
    seen.nodes = await page.$$eval(".node", els => els.length);
    seen.summary = await page.textContent("#summary");
    seen.history_lines = await page.$$eval("#history polyline", els => els.length);
    seen.shop_latency = await waitFor("the shop pool's latency", async () => {
      const t = await page.textContent('td.latency[data-pool="shop"]');
      return t && t.startsWith("p50") ? t : null;
    }, 20000);
    seen.shop_limits = await page.textContent('.limits[data-pool="shop"]');
    // The upstream group's server that refuses, shown down by its check.
    seen.upstreams = await waitFor("the upstream server drawn down", async () => {
      const u = await page.$$eval("tr.upstream-server", trs => trs.map(tr => ({ state: tr.dataset.state, text: tr.textContent })));
      return u.some(x => x.state === "down") ? u : null;
    }, 20000);
    await page.screenshot({ path: `${out}/live.png`, timeout: 60000 });
    const before = seen.rows.find(r => r.pool === "blog").pid;
    await page.click('button[data-action="recycle"][data-pool="blog"]');
    seen.recycle_message = await waitFor("the recycle's answer", async () => {
      const m = await page.textContent("#message");
      return m && m.length ? m : null;
    }, 10000);
    seen.blog_pid_after = await waitFor("blog's new pid", async () => {
      const r = (await rows(page)).find(r => r.pool === "blog");
      return r && r.pid && r.pid !== before ? r.pid : null;
    }, 20000);
    seen.blog_pid_before = before;
    // The filter: a name narrows the table (the machine map keeps every process), a state
    // that nothing is in empties it, and the page line counts every pool.
    await page.fill("#f-pool", "sho");
    seen.filtered_pools = await waitFor("the table filtered", async () => {
      const pools = [...new Set((await rows(page)).map(r => r.pool))];
      return pools.length === 1 ? pools : null;
    }, 10000);
    seen.filtered_chips = await page.$$eval(".worker", els => els.length);
    seen.pageinfo = await page.textContent("#pageinfo");
    await page.selectOption("#f-state", "idle");
    seen.idle_rows = await waitFor("no idle pool", async () => {
      const info = await page.textContent("#pageinfo");
      return info.startsWith("0–0 of 0") ? (await rows(page)).length + 1 : null;
    }, 10000) - 1;
    await ctx.close();

    // Without the token: the action is refused, nothing changes.
    const ro = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    const p2 = await ro.newPage();
    p2.on("dialog", d => d.accept());
    await p2.goto(`${admin}/`);
    await waitFor("the page", async () => (await rows(p2)).length >= 3, 15000);
    const shopBefore = (await rows(p2)).filter(r => r.pool === "shop").map(r => r.pid).join(",");
    await p2.click('button[data-action="recycle"][data-pool="shop"]');
    seen.refused_message = await waitFor("the refusal", async () => {
      const m = await p2.textContent("#message");
      return m && m.length ? m : null;
    }, 10000);
    await p2.waitForTimeout(1500);
    seen.shop_pids_unchanged = (await rows(p2)).filter(r => r.pool === "shop").map(r => r.pid).join(",") === shopBefore;
    await ro.close();

    if (planHtml) {
      const pc = await browser.newContext({ viewport: { width: 1600, height: 1000 } });
      const pp = await pc.newPage();
      await pp.goto("file://" + planHtml);
      await waitFor("the plan drawn", async () => (await pp.$$(".cpu")).length > 0, 10000);
      seen.plan = {
        nodes: await pp.$$eval(".node", els => els.length),
        cpus: await pp.$$eval(".cpu", els => els.length),
        chips: await pp.$$eval(".worker", els => els.map(e => e.dataset.node)),
        fits: await pp.evaluate(() => document.getElementById("machine").getBoundingClientRect().bottom <= window.innerHeight),
      };
      await pp.screenshot({ path: `${out}/plan.png`, timeout: 60000 });
      await pc.close();
    }
  } catch (e) {
    seen.error = String(e);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(seen));
})();
