// The command line of the transformers.js runners here (tests/runtimes/run_transformers_js*.mjs and the census's
// bench/transformers_js_census.mjs): `--modules FOLDER IN.json OUT.json`, FOLDER the npm folder `make runtimes`
// installs transformers.js in. command() imports transformers.js from it, remote models off (a run reads local
// folders alone), and gives it with the two files' paths.
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

export async function command(argv = process.argv.slice(2)) {
  const args = [...argv];
  const at = args.indexOf('--modules');
  const modules = path.resolve(args.splice(at, 2)[1]);
  const require = createRequire(path.join(modules, 'package.json'));
  const tjs = await import(pathToFileURL(require.resolve('@huggingface/transformers')).href);
  tjs.env.allowRemoteModels = false;
  return { tjs, files: args };
}
