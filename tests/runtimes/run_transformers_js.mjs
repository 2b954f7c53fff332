// Run transformers.js pipelines on exported folders, as its users call them, and write what they return as JSON.
//
//   node run_transformers_js.mjs --modules .runtimes/transformers-js JOBS.json RESULTS.json
//
// JOBS.json is a list of {folder, task, dtype, inputs, options}: each input is a string, a {question, context}
// pair, {image: PATH} (read with transformers.js's RawImage), {image: PATH, question} for document question
// answering, {audio: [samples]} (a Float32Array), or {image: PATH, labels: [...]} for zero-shot image classification. RESULTS.json gets, per job, {outputs} (one
// per input) or {error}. Tensors become {dims, data}; images {width, height, channels, data}.
import fs from 'node:fs';
import { command } from './transformers_js_command.mjs';

const { tjs, files: [jobsFile, resultsFile] } = await command();

function plain(value) {
  if (value instanceof tjs.Tensor) return { dims: value.dims, data: Array.from(value.data, Number) };
  if (value instanceof tjs.RawImage) {
    return { width: value.width, height: value.height, channels: value.channels, data: Array.from(value.data) };
  }
  if (ArrayBuffer.isView(value)) return Array.from(value, Number);
  if (Array.isArray(value)) return value.map(plain);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]));
  }
  return typeof value === 'bigint' ? Number(value) : value;
}

async function call(pipe, task, input, options) {
  if (typeof input === 'string') return pipe(input, options);
  if (input.question !== undefined && input.image !== undefined) {
    return pipe(await tjs.RawImage.read(input.image), input.question, options);
  }
  if (input.question !== undefined) return pipe(input.question, input.context, options);
  if (input.audio !== undefined) return pipe(Float32Array.from(input.audio), options);
  const image = await tjs.RawImage.read(input.image);
  if (input.labels !== undefined) return pipe(image, input.labels, options);
  return pipe(image, options);
}

// mask-generation has no pipeline in transformers.js: its SamModel and processor, as its users call them. Each input is
// {image: PATH, points: [[[[x, y], ...]]], labels?}; the output, the model's scores and masks (SAM 2's object scores
// too) and the processor's masks at the image's size.
async function masks(job) {
  const options = { dtype: job.dtype, local_files_only: true };
  const model = await tjs.AutoModelForMaskGeneration.from_pretrained(job.folder, options);
  const processor = await tjs.AutoProcessor.from_pretrained(job.folder, options);
  const outputs = [];
  for (const input of job.inputs) {
    const inputs = await processor(await tjs.RawImage.read(input.image),
      { input_points: input.points, input_labels: input.labels ?? null });
    const { iou_scores, pred_masks, object_score_logits } = await model(inputs);
    const sized = await processor.post_process_masks(pred_masks, inputs.original_sizes, inputs.reshaped_input_sizes);
    const scored = object_score_logits ? { object_score_logits } : {}; // SAM 2's
    outputs.push(plain({ iou_scores, pred_masks, masks: sized[0], ...scored }));
  }
  await model.dispose();
  return { outputs };
}

const jobs = JSON.parse(fs.readFileSync(jobsFile, 'utf8'));
const results = [];
for (const job of jobs) {
  try {
    if (job.task === 'mask-generation') {
      results.push(await masks(job));
      continue;
    }
    const pipe = await tjs.pipeline(job.task, job.folder, { dtype: job.dtype, local_files_only: true });
    const outputs = [];
    for (const input of job.inputs) outputs.push(plain(await call(pipe, job.task, input, job.options ?? {})));
    await pipe.dispose();
    results.push({ outputs });
  } catch (error) {
    results.push({ error: String(error?.stack ?? error) });
  }
}
fs.writeFileSync(resultsFile, JSON.stringify(results));
