// Open pages in headless Chromium, driven by puppeteer-core, and write what each page leaves in
// window.onnxportResult (once window.onnxportDone is true) as JSON: the example page
// examples/transformers-js/index.html run with ?run=1 on an exported folder. With --webgpu, Chromium has a WebGPU
// adapter (SwiftShader's, on the CPU, where the machine has no GPU); a page opened with log=1 also gets the
// console's lines in its result (onnxruntime's session log).
//
//   node run_browser.mjs --modules .runtimes/transformers-js --chromium /usr/bin/chromium [--webgpu] URLS.json RESULTS.json
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const option = (name) => args.splice(args.indexOf(name), 2)[1];
const modules = path.resolve(option('--modules'));
const chromium = option('--chromium');
const webgpu = args.includes('--webgpu') && args.splice(args.indexOf('--webgpu'), 1).length > 0;
const [urlsFile, resultsFile] = args;
const require = createRequire(path.join(modules, 'package.json'));
const puppeteer = (await import(pathToFileURL(require.resolve('puppeteer-core')).href)).default;

const flags = webgpu ? ['--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader', '--enable-features=Vulkan']
  : ['--disable-gpu'];
const browser = await puppeteer.launch({
  executablePath: chromium, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage', ...flags],
});
const results = [];
try {
  for (const url of JSON.parse(fs.readFileSync(urlsFile, 'utf8'))) {
    const page = await browser.newPage();
    const logs = [];
    page.on('console', (message) => logs.push(message.text()));
    page.on('pageerror', (error) => logs.push(String(error)));
    try {
      await page.goto(url);
      await page.waitForFunction('window.onnxportDone === true', { timeout: 300000 });
      const result = { ...(await page.evaluate(() => window.onnxportResult)), userAgent: await browser.version() };
      if (new URL(url).searchParams.get('log') === '1') result.logs = logs;
      results.push(result);
    } catch (error) {
      results.push({ error: `${error}\n${logs.join('\n')}` });
    }
    await page.close();
  }
} finally {
  await browser.close();
}
fs.writeFileSync(resultsFile, JSON.stringify(results));
