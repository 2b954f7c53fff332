// Load exported folders with a model class of transformers.js, as its users call one, and write what it returns.
//
//   node run_transformers_js_classes.mjs --modules .runtimes/transformers-js JOBS.json RESULTS.json
//
// JOBS.json is a list of {folder, class, dtype, inputs: {name: {type, dims, data}}}: the class (T5Model, WhisperModel,
// ...) is loaded with from_pretrained(folder, {dtype, local_files_only: true}) and called once on the inputs (or its
// method `method` is: an auto-encoder's encode or decode).
// RESULTS.json gets, per job, {outputs: {name: {dims, data}}} (the tensors it returned) or {error}.
import fs from 'node:fs';
import { command } from './transformers_js_command.mjs';

const { tjs, files: [jobsFile, resultsFile] } = await command();

const ARRAYS = { int64: (d) => BigInt64Array.from(d.map(BigInt)), float32: (d) => Float32Array.from(d) };

async function run(job) {
  const cls = tjs[job.class];
  if (cls === undefined) throw new Error(`transformers.js exports no class ${job.class}`);
  const model = await cls.from_pretrained(job.folder, { dtype: job.dtype, local_files_only: true });
  const inputs = Object.fromEntries(Object.entries(job.inputs).map(
    ([name, t]) => [name, new tjs.Tensor(t.type, ARRAYS[t.type](t.data), t.dims)]));
  const out = job.method ? await model[job.method](inputs) : await model(inputs);
  await model.dispose();
  return {
    outputs: Object.fromEntries(Object.entries(out).filter(([, v]) => v instanceof tjs.Tensor)
      .map(([k, v]) => [k, { dims: v.dims, data: Array.from(v.data, Number) }])),
  };
}

const results = [];
for (const job of JSON.parse(fs.readFileSync(jobsFile, 'utf8'))) {
  try {
    results.push(await run(job));
  } catch (error) {
    results.push({ error: String(error?.stack ?? error).slice(0, 2000) });
  }
}
fs.writeFileSync(resultsFile, JSON.stringify(results));
