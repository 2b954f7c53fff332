// Run audio-text-to-text folders in transformers.js as its users call them (AutoProcessor and
// AutoModelForAudioTextToText, then generate), and write what the processor gave, the first step's logits and the
// tokens as JSON.
//
//   node run_transformers_js_audio_text.mjs --modules .runtimes/transformers-js JOBS.json RESULTS.json
//
// JOBS.json is a list of {folder, dtype, cases: [{text, audio, max_new_tokens}]} (audio: a clip's samples at 16 kHz,
// passed as processor(text, audio)); RESULTS.json gets, per job, {cases: [{inputs, logits, tokens}]} (the processor's
// outputs as {dims, type, data}, the last prompt position's logits of the model's forward on them, the generated
// sequences) or {error}.
import fs from 'node:fs';
import { command } from './transformers_js_command.mjs';

const { tjs, files: [jobsFile, resultsFile] } = await command();

const plain = (t) => ({ dims: t.dims, type: t.type, data: Array.from(t.data, Number) });

const jobs = JSON.parse(fs.readFileSync(jobsFile, 'utf8'));
const results = [];
for (const job of jobs) {
  try {
    const processor = await tjs.AutoProcessor.from_pretrained(job.folder, { local_files_only: true });
    const model = await tjs.AutoModelForAudioTextToText.from_pretrained(job.folder, {
      dtype: job.dtype, local_files_only: true,
    });
    const cases = [];
    for (const c of job.cases) {
      const inputs = await processor(c.text, Float32Array.from(c.audio));
      const { logits } = await model(inputs);
      const [, length, vocab] = logits.dims;
      const last = Array.from(logits.data.slice((length - 1) * vocab, length * vocab), Number);
      const out = await model.generate({ ...inputs, max_new_tokens: c.max_new_tokens, do_sample: false });
      cases.push({
        inputs: Object.fromEntries(Object.entries(inputs).filter(([, v]) => v instanceof tjs.Tensor)
          .map(([k, v]) => [k, plain(v)])),
        logits: last,
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
