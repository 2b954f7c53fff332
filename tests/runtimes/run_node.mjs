// Run exported case directories in onnxruntime-node or onnxruntime-web (its wasm backend, under Node) and print
// one JSON line per input set, as tests/runtimes/run_ort.py does for the Python wheels (the same case.json,
// the same result fields; see that file for the format).
//
//   node run_node.mjs --modules .runtimes/node-1.22 --backend node|web CASE_DIR [CASE_DIR ...]
//
// --modules is the folder whose node_modules holds the pinned packages (setup.sh installs them). Sessions use
// the runtime's default options, as users create them; web runs single-threaded wasm (no worker threads).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const option = (name) => {
  const i = args.indexOf(name);
  if (i < 0) throw new Error(`missing ${name}`);
  return args.splice(i, 2)[1];
};
const modules = path.resolve(option('--modules'));
const backend = option('--backend');
const pkg = backend === 'web' ? 'onnxruntime-web' : 'onnxruntime-node';
const require = createRequire(path.join(modules, 'package.json'));
const ortModule = await import(pathToFileURL(require.resolve(pkg)).href);
const ort = ortModule.default ?? ortModule;
const version = JSON.parse(fs.readFileSync(path.join(modules, 'node_modules', pkg, 'package.json'))).version;
if (backend === 'web') ort.env.wasm.numThreads = 1;
const runtime = `${pkg} ${version}`;

// Float16 arrives and leaves as its bits (Uint16Array): Node 20 has no Float16Array.
const ARRAYS = { float32: Float32Array, float64: Float64Array, float16: Uint16Array, int64: BigInt64Array,
  int32: Int32Array, bool: Uint8Array, uint8: Uint8Array, int8: Int8Array };

function readTensor(dir, spec) {
  const bytes = fs.readFileSync(path.join(dir, spec.file));
  const Array_ = ARRAYS[spec.dtype];
  // Copy into a fresh, aligned buffer (Buffer slices may start at any offset); the host is little-endian.
  const data = new Array_(new Uint8Array(bytes).buffer, 0, bytes.length / Array_.BYTES_PER_ELEMENT);
  return new ort.Tensor(spec.dtype, data, spec.shape);
}

function halfToFloat(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >> 10) & 0x1f;
  const frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

function numbers(tensor) {
  const data = tensor.data;
  if (tensor.type === 'float16' && data instanceof Uint16Array) return Array.from(data, halfToFloat);
  return Array.from(data, Number);
}

function compare(got, want, atol, rtol) {
  const same = got.dims.length === want.dims.length && got.dims.every((d, i) => d === want.dims[i]);
  if (!same) return { max_abs_err: null, nan: null, ok: false, error: `shape [${got.dims}] != [${want.dims}]` };
  const g = numbers(got);
  const w = numbers(want);
  let nan = 0;
  let maxErr = 0;
  let ok = true;
  for (let i = 0; i < w.length; i++) {
    if (Number.isNaN(g[i])) nan++; // fails anywhere, compared or not: see run_ort.py
    if (Number.isNaN(w[i])) continue; // not compared
    const err = Math.abs(g[i] - w[i]);
    if (!Number.isNaN(err) && err > maxErr) maxErr = err;
    if (!(err <= atol + rtol * Math.abs(w[i]))) ok = false;
  }
  return { max_abs_err: maxErr, nan, ok: ok && nan === 0 };
}

// The error's start and end: onnxruntime puts its message after a long C++ signature.
function short(error, head = 100, tail = 300) {
  const text = String(error?.message ?? error).split(/\s+/).join(' ').trim();
  return text.length <= head + tail ? text : `${text.slice(0, head)} ... ${text.slice(-tail)}`;
}

async function load(dir) {
  const file = path.join(dir, 'model.onnx');
  if (backend !== 'web') return ort.InferenceSession.create(file);
  // The wasm backend has no file system: the model and its external data are handed over as bytes.
  const options = {};
  const data = `${file}.data`;
  if (fs.existsSync(data)) options.externalData = [{ path: 'model.onnx.data', data: new Uint8Array(fs.readFileSync(data)) }];
  return ort.InferenceSession.create(new Uint8Array(fs.readFileSync(file)), options);
}

async function runCase(dir) {
  const caseSpec = JSON.parse(fs.readFileSync(path.join(dir, 'case.json')));
  const base = { runtime, case: path.basename(path.resolve(dir)) };
  let session;
  try {
    session = await load(dir);
  } catch (e) {
    return caseSpec.sets.map((s) => ({ ...base, set: s.name, loaded: false, load_error: short(e), ran: false,
      run_error: null, outputs: {}, ok: false }));
  }
  const results = [];
  for (const s of caseSpec.sets) {
    const result = { ...base, set: s.name, loaded: true, load_error: null, ran: false, run_error: null, outputs: {},
      ok: false };
    const feed = Object.fromEntries(s.inputs.map((t) => [t.name, readTensor(dir, t)]));
    let got;
    try {
      got = await session.run(feed, s.outputs.map((t) => t.name));
    } catch (e) {
      result.run_error = short(e);
      results.push(result);
      continue;
    }
    result.ran = true;
    for (const spec of s.outputs) {
      result.outputs[spec.name] = compare(got[spec.name], readTensor(dir, spec), spec.atol, spec.rtol);
    }
    result.ok = Object.values(result.outputs).every((o) => o.ok);
    results.push(result);
  }
  await session.release?.();
  return results;
}

for (const dir of args) {
  for (const result of await runCase(dir)) process.stdout.write(`${JSON.stringify(result)}\n`);
}
