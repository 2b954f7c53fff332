// Run by bench/transformers_js.py: node transformers_js_runner.mjs MODULES JOBS.json RESULTS.json. Each job loads
// two folders (onnxport's and optimum's, in the job's order) with transformers.js's pipeline (onnxruntime-node, CPU), makes one
// warm-up call of each, then times `calls` calls of one input on each, alternating between the two (with a
// streamer for the generators), and `batch_calls` calls of a batch likewise.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const [modules, jobsFile, resultsFile] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(modules), 'package.json'));
const tjs = await import(pathToFileURL(require.resolve('@huggingface/transformers')).href);
tjs.env.allowRemoteModels = false;

async function value(spec, base) {
  if (spec.text !== undefined) return spec.text;
  if (spec.texts !== undefined) return spec.texts;
  if (spec.images !== undefined) {
    const images = await Promise.all(spec.images.map((p) => tjs.RawImage.read(path.join(base, p))));
    return images.length === 1 ? images[0] : images;
  }
  const bytes = fs.readFileSync(path.join(base, spec.f32));
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
}

function summary(output) {
  return JSON.stringify(output, (k, v) => (typeof v === 'number' ? Number(v.toPrecision(4)) : v)).slice(0, 300);
}

async function timed(pipe, input, job, result) {
  const times = [];
  const streamer = job.generating ? { put() { times.push(performance.now()); }, end() {} } : null;
  const called = performance.now();
  const output = await pipe(input, { ...job.options, ...(streamer ? { streamer } : {}) });
  result.run_ms.push(performance.now() - called);
  const tokens = times.slice(1);  // the prompt's ids come first
  if (tokens.length) {
    result.first_token_ms.push(tokens[0] - called);
    result.tokens = tokens.length;
    if (tokens.length > 1) result.per_token_ms.push((tokens.at(-1) - tokens[0]) / (tokens.length - 1));
  }
  result.output = summary(output);
}

const jobs = JSON.parse(fs.readFileSync(jobsFile, 'utf8'));
const results = [];
for (const job of jobs) {
  const pipes = [];
  const found = job.folders.map(() => ({ run_ms: [], first_token_ms: [], per_token_ms: [], batch_ms: [], tokens: null }));
  try {
    for (const [i, folder] of job.folders.entries()) {
      const start = performance.now();
      pipes.push(await tjs.pipeline(job.task, folder, { dtype: job.dtype, device: 'cpu', local_files_only: true }));
      found[i].load_ms = performance.now() - start;
    }
    const one = await value(job.single, job.base);
    for (const pipe of pipes) await pipe(one, { ...job.options });
    for (let call = 0; call < job.calls; call++) {
      const order = call % 2 ? [...pipes.keys()].reverse() : [...pipes.keys()];
      for (const i of order) await timed(pipes[i], one, job, found[i]);
    }
    if (job.batch) {
      const many = await value(job.batch, job.base);
      for (const pipe of pipes) await pipe(many, { ...job.options });
      for (let call = 0; call < job.batch_calls; call++) {
        const order = call % 2 ? [...pipes.keys()].reverse() : [...pipes.keys()];
        for (const i of order) {
          const called = performance.now();
          await pipes[i](many, { ...job.options });
          found[i].batch_ms.push(performance.now() - called);
        }
      }
    }
    results.push(found);
  } catch (error) {
    results.push(job.folders.map(() => ({ error: String(error?.stack ?? error).slice(0, 2000) })));
  }
  for (const pipe of pipes) await pipe.dispose();
  fs.writeFileSync(resultsFile, JSON.stringify(results));
}
