// Make speech with transformers.js from exported SpeechT5 folders, as its users do, and write what it made.
//
//   node run_transformers_js_speech.mjs --modules .runtimes/transformers-js JOB.json RESULTS.json
//
// JOB.json: {model, vocoder (the two folders), speaker (a list of floats), text, runs: [{threshold, minlenratio,
// maxlenratio}]}. Each run tokenizes text with the model folder's tokenizer, loads SpeechT5ForTextToSpeech and
// SpeechT5HifiGan (fp32) and calls generate_speech(input_ids, speaker_embeddings, {vocoder, ...run}); then the
// text-to-audio pipeline (its class, given the folder's model, tokenizer and processor and the local vocoder) speaks the
// text with its defaults.
// RESULTS.json: {input_ids, runs: [{spectrogram, waveform}], pipeline: {audio, sampling_rate}} (each tensor as
// {dims, data}), or {error}.
import fs from 'node:fs';
import { command } from './transformers_js_command.mjs';

const { tjs, files: [jobFile, resultsFile] } = await command();

const plain = (t) => ({ dims: t.dims, data: Array.from(t.data, Number) });

async function run(job) {
  const options = { dtype: 'fp32', local_files_only: true };
  const tokenizer = await tjs.AutoTokenizer.from_pretrained(job.model, { local_files_only: true });
  const model = await tjs.SpeechT5ForTextToSpeech.from_pretrained(job.model, options);
  const vocoder = await tjs.SpeechT5HifiGan.from_pretrained(job.vocoder, options);
  const { input_ids } = tokenizer(job.text);
  const speaker = new tjs.Tensor('float32', Float32Array.from(job.speaker), [1, job.speaker.length]);
  const runs = [];
  for (const settings of job.runs) {
    const { spectrogram, waveform } = await model.generate_speech(input_ids, speaker, { ...settings, vocoder });
    runs.push({ spectrogram: plain(spectrogram), waveform: plain(waveform) });
  }
  // pipeline('text-to-audio', folder) loads no processor for a text task (4.3), and without one runs SpeechT5 as a
  // text-to-waveform model: the pipeline is built as pipeline() would with it, and the local vocoder
  const processor = await tjs.AutoProcessor.from_pretrained(job.model, { local_files_only: true });
  const synthesizer = new tjs.TextToAudioPipeline({ task: 'text-to-audio', model, tokenizer, processor, vocoder });
  const spoken = await synthesizer(job.text, { speaker_embeddings: speaker });
  return {
    input_ids: plain(input_ids), runs,
    pipeline: { audio: Array.from(spoken.audio, Number), sampling_rate: spoken.sampling_rate },
  };
}

let result;
try {
  result = await run(JSON.parse(fs.readFileSync(jobFile, 'utf8')));
} catch (error) {
  result = { error: String(error?.stack ?? error).slice(0, 3000) };
}
fs.writeFileSync(resultsFile, JSON.stringify(result));
