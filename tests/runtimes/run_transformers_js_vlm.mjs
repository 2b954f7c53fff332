// Run image-text-to-text folders in transformers.js as its users call them (AutoProcessor and
// AutoModelForImageTextToText, then generate), and write what the processor gave and the tokens as JSON.
//
//   node run_transformers_js_vlm.mjs --modules .runtimes/transformers-js JOBS.json RESULTS.json
//
// JOBS.json is a list of {folder, dtype, images_first, cases: [{text, images: [PATH, ...], audio, max_new_tokens}]}
// (images_first: the model's processor takes (images, text), as LLaVA's does, not (text, images); audio, where given:
// a clip's samples, passed as processor(text, images, audio), as Gemma 4's processor takes it); RESULTS.json gets,
// per job, {cases: [{inputs, tokens}]} (the processor's outputs as {dims, data}, the generated sequences) or {error}.
import fs from 'node:fs';
import { command } from './transformers_js_command.mjs';

const { tjs, files: [jobsFile, resultsFile] } = await command();

const plain = (t) => ({ dims: t.dims, type: t.type, data: Array.from(t.data, Number) });

const jobs = JSON.parse(fs.readFileSync(jobsFile, 'utf8'));
const results = [];
for (const job of jobs) {
  try {
    const processor = await tjs.AutoProcessor.from_pretrained(job.folder, { local_files_only: true });
    const model = await tjs.AutoModelForImageTextToText.from_pretrained(job.folder, {
      dtype: job.dtype, local_files_only: true,
    });
    const cases = [];
    for (const c of job.cases) {
      const images = c.images.length ? await Promise.all(c.images.map((p) => tjs.RawImage.read(p))) : null;
      const audio = c.audio ? Float32Array.from(c.audio) : null;
      const inputs = job.images_first ? await processor(images, c.text)
        : audio ? await processor(c.text, images, audio) : await processor(c.text, images);
      const out = await model.generate({ ...inputs, max_new_tokens: c.max_new_tokens, do_sample: false });
      cases.push({
        inputs: Object.fromEntries(Object.entries(inputs).filter(([, v]) => v instanceof tjs.Tensor)
          .map(([k, v]) => [k, plain(v)])),
        tokens: out.tolist().map((row) => row.map(Number)),
      });
    }
    await model.dispose();
    results.push({ cases });
  } catch (error) {
    results.push({ error: String(error?.stack ?? error) });
  }
}
fs.writeFileSync(resultsFile, JSON.stringify(results));
