// One row of bench/transformers_js_census.py: a folder export-hf wrote for transformers.js, loaded by the class
// transformers.js's registry names for the row's type and task, and run on the census's inputs.
//
//   node transformers_js_census.mjs --modules .runtimes/transformers-js JOB.json RESULT.json
//
// JOB.json: {folder, class, inputs: {name: {type, dims, data}}, new_tokens, settings}. With new_tokens, the class's
// generate runs greedily from the inputs (with the generation settings given) and RESULT.json gets {tokens} (the
// first sequence's; a generate that gives audio: {outputs: {audio_values}}); without, the class is called on the inputs and RESULT.json gets {outputs: {name: {dims,
// data}}}. An error gives {error}.
import fs from 'node:fs';
import { command } from '../tests/runtimes/transformers_js_command.mjs';

const { tjs, files: [jobFile, resultFile] } = await command();

const ARRAYS = { int64: (d) => BigInt64Array.from(d.map(BigInt)), float32: (d) => Float32Array.from(d) };

function plain(tensor) {
  return { dims: tensor.dims, data: Array.from(tensor.data, Number) };
}

const job = JSON.parse(fs.readFileSync(jobFile, 'utf8'));
let result;
try {
  const cls = tjs[job.class];
  if (cls === undefined) throw new Error(`transformers.js exports no class ${job.class}`);
  const model = await cls.from_pretrained(job.folder, { dtype: 'fp32', local_files_only: true });
  const inputs = Object.fromEntries(Object.entries(job.inputs).map(
    ([name, t]) => [name, new tjs.Tensor(t.type, ARRAYS[t.type](t.data), t.dims)]));
  if (job.new_tokens) {
    const tokens = await model.generate({
      ...inputs, ...(job.settings ?? {}), max_new_tokens: job.new_tokens, do_sample: false, num_beams: 1 });
    result = tokens.type === 'float32'  // a generate that gives audio (MusicGen's waveform), not tokens
      ? { outputs: { audio_values: plain(tokens) } } : { tokens: Array.from(tokens.data, Number) };
  } else {
    const out = await model(inputs);
    result = { outputs: Object.fromEntries(Object.entries(out).filter(([, v]) => v instanceof tjs.Tensor)
      .map(([k, v]) => [k, plain(v)])) };
  }
  await model.dispose();
} catch (error) {
  result = { error: String(error?.stack ?? error).slice(0, 2000) };
}
fs.writeFileSync(resultFile, JSON.stringify(result));
