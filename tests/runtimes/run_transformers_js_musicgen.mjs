// Generate music with transformers.js's MusicgenForConditionalGeneration from exported folders, as its users do.
//
//   node run_transformers_js_musicgen.mjs --modules .runtimes/transformers-js JOBS.json RESULTS.json
//
// JOBS.json is a list of {folder, dtype, prompts, options}: the folder's tokenizer (AutoTokenizer) pads the prompts
// into one batch, and the model (from_pretrained(folder, {dtype, local_files_only: true})) runs
// generate({...inputs, ...options}). RESULTS.json gets, per job, {input_ids, attention_mask, audio_values: {dims,
// data}} or {error}.
import fs from 'node:fs';
import { command } from './transformers_js_command.mjs';

const { tjs, files: [jobsFile, resultsFile] } = await command();

const plain = (t) => ({ dims: t.dims, data: Array.from(t.data, Number) });

async function run(job) {
  const tokenizer = await tjs.AutoTokenizer.from_pretrained(job.folder, { local_files_only: true });
  const model = await tjs.MusicgenForConditionalGeneration.from_pretrained(
    job.folder, { dtype: job.dtype, local_files_only: true });
  const inputs = tokenizer(job.prompts, { padding: true });
  const audio = await model.generate({ ...inputs, ...job.options });
  await model.dispose();
  return { input_ids: plain(inputs.input_ids), attention_mask: plain(inputs.attention_mask), audio_values: plain(audio) };
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
