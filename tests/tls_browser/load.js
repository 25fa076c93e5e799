// Loads a page over HTTPS in Debian's Chromium for tests/tls.rs: the host name resolved to
// 127.0.0.1 by the browser itself (so SNI carries it), the test's self-signed certificate
// accepted. Prints one JSON object: the protocol the navigation used, the status, the text.
// Arguments: URL HOST
const { chromium } = require("playwright-core");

const [url, host] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", `--host-resolver-rules=MAP ${host} 127.0.0.1`, "--ignore-certificate-errors"],
  });
  try {
    const page = await browser.newPage();
    const response = await page.goto(url);
    const protocol = await page.evaluate(() => performance.getEntriesByType("navigation")[0].nextHopProtocol);
    const text = await page.evaluate(() => document.body.innerText);
    console.log(JSON.stringify({ protocol, status: response.status(), text }));
  } finally {
    await browser.close();
  }
})().catch(e => { console.error(String(e)); process.exit(1); });
