// The admin console in a real headless browser (issue #24): Debian's chromium driven by
// playwright-core. tests/service/admin_ui_test.cc starts sluiced (tests/support) and
// runs this with its ports; every wait is on an event, bounded.
//
//   node console_test.mjs ADMIN_PORT HTTP_PORT TOKEN_FILE [SCREENSHOT.png]
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const [adminPort, httpPort, tokenFile, screenshot] = process.argv.slice(2);
const token = readFileSync(tokenFile, "utf8").split("\n").find((l) => l && !l.startsWith("#")).trim();
const admin = `http://127.0.0.1:${adminPort}`;
const api = `http://127.0.0.1:${httpPort}`;
const bound = 15000;  // ms: the page polls every second
const failures = [];
const check = (cond, what) => { if (!cond) failures.push(what); console.log((cond ? "ok   " : "FAIL ") + what); };
const status = async (query) => (await fetch(`${api}/v1/check?${query}`)).status;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const consoleErrors = [];
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  const external = [];
  page.on("request", (r) => { if (!r.url().startsWith(admin) && !r.url().startsWith("data:")) external.push(r.url()); });

  await page.goto(`${admin}/ui`);
  await page.fill("#token", token);
  await page.click("#connect");
  await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("live"), null, { timeout: bound });
  check(true, "page loads and goes live with the token");

  // A burst against the per_user rule (3 per hour): 3 allowed, 9 denied.
  let denied = 0;
  for (let i = 0; i < 12; ++i) denied += (await status("domain=web&key=user&value=burst-user")) === 429;
  check(denied === 9, `burst: 9 of 12 denied (got ${denied})`);
  await page.waitForFunction(() => {
    const r = document.querySelector('#rules tr[data-rule="user"]');
    return r && Number(r.dataset.denied) >= 9;
  }, null, { timeout: bound });
  check(true, "the rules table shows the rule's denials");
  const topRow = page.locator('#top tr[data-key="user=burst-user"]');
  await topRow.waitFor({ timeout: bound });
  check((await topRow.locator("td").nth(2).textContent()) === "9", "the top keys show burst-user with 9 denials");
  const denialCell = await page.locator('#rules tr[data-rule="user"] td').nth(3).textContent();
  check(denialCell.endsWith("%"), `the rule's denial rate is shown (${denialCell})`);
  const storeText = await page.locator("#store").textContent();
  check(storeText.includes("reachable") && storeText.includes("mean latency"), "store health is shown");

  // Explain: two descriptors, per_key replaces per_path.
  await page.fill("#explain-domain", "web");
  await page.fill("#explain-entries", "api_key=k1; path=/x");
  await page.click("#explain-go");
  const replaced = page.locator('#explain-out tr[data-replaced="true"]');
  await replaced.waitFor({ timeout: bound });
  const replacedText = await replaced.textContent();
  check(replacedText.includes("per_path") && replacedText.includes("replaced by per_key"), `explain shows the replaced rule (${replacedText})`);
  check((await page.locator("#explain-out").textContent()).includes("would be OK (nothing charged)"), "explain says nothing was charged");

  // A caller's bytes are text, never markup: a key that is HTML shows as written.
  let unexpectedDialog = false;
  const onDialog = (d) => { unexpectedDialog = true; d.dismiss(); };
  page.on("dialog", onDialog);
  const html = '<img src=x onerror="alert(1)">';
  for (let i = 0; i < 4; ++i) await status("domain=web&key=user&value=" + encodeURIComponent(html));
  const htmlRow = page.locator("#top tr", { hasText: "onerror" });
  await htmlRow.waitFor({ timeout: bound });
  check((await htmlRow.locator("td").nth(1).textContent()) === "user=" + html, "an HTML key is shown as text");
  check((await page.locator("#top img").count()) === 0 && !unexpectedDialog, "an HTML key is not rendered or run");
  page.off("dialog", onDialog);

  // Reset asks first: dismissed, nothing happens; accepted, the key is full again.
  let asked = "";
  page.once("dialog", (d) => { asked = d.message(); d.dismiss(); });
  await topRow.locator("button").click();
  await page.waitForFunction(() => document.getElementById("reset-out").textContent === "reset cancelled", null, { timeout: bound });
  check(asked.includes("burst-user"), `reset asks for confirmation (${asked})`);
  check((await status("domain=web&key=user&value=burst-user")) === 429, "a dismissed reset changes nothing");
  page.once("dialog", (d) => d.accept());
  await topRow.locator("button").click();
  await page.waitForFunction(() => document.getElementById("reset-out").textContent.startsWith("reset sluiced:"), null, { timeout: bound });
  check((await status("domain=web&key=user&value=burst-user")) === 200, "an accepted reset gives the key its limit back");

  if (screenshot) {
    // The screenshot shows a live state: another burst after the reset.
    for (let i = 0; i < 6; ++i) await status("domain=web&key=user&value=mallory");
    await page.waitForFunction(() => document.querySelector('#top tr[data-key="user=mallory"]'), null, { timeout: bound });
    await page.screenshot({ path: screenshot, fullPage: true });
  }
  check(consoleErrors.length === 0, `no console error (${consoleErrors.join(" | ")})`);
  check(external.length === 0, `nothing fetched from elsewhere (${external.join(" ")})`);
} catch (e) {
  failures.push(String(e));
  console.log("FAIL " + e);
} finally {
  await browser.close();
}
console.log(failures.length ? `${failures.length} failure(s)` : "all passed");
process.exit(failures.length ? 1 : 0);
