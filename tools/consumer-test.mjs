// The consumer test: the packages as a user gets them. Packs every package (`pnpm -r pack`: each
// prepack builds, the platform packages' fill lib/ from the pinned wheels), lints the tarballs
// (publint --strict, attw), installs them with npm in a folder outside the workspace, and runs
// there, with no MLX_C_LIBRARY and no path of this repository in the environment:
//   the README's "Using it" blocks (ESM, CommonJS, strict TypeScript), gpt2-tiny against its
//   reference outputs through ['mlx'] from onnxruntime-node, -common and -web in both module
//   systems, imports that load nothing native, the fallback of ['mlx', 'cpu'] without MLX, the
//   CLI, and which library the loader picks (the CUDA package is installed too: on a machine
//   without the NVIDIA driver the loader must skip it for the CPU package); transformers.js
//   pipelines (feature-extraction, text-generation with a KV cache, text2text-generation and
//   automatic-speech-recognition on a T5 and a Whisper-shaped model that torch exports with the
//   bench Python) through mlx against onnxruntime-node's CPU provider; esbuild and webpack bundles run from folders of their own.
//   node tools/consumer-test.mjs [--keep]     (tools/dev test runs it; --keep leaves the folder)
// npm works from a cache in .cache/npm (offline where it holds everything). Results go to
// reports/consumer-test.json for tools/test-summary.mjs.
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const shared = join(root, '..', 'shared', 'models');
const keep = process.argv.includes('--keep');
const t0 = performance.now();
const work = realpathSync(mkdtempSync(join(tmpdir(), 'mlx-consumer-')));
const tarballs = join(work, 'tarballs');
const app = join(work, 'app');
const results = [];
const ortVersion = JSON.parse(readFileSync(join(root, 'packages/ort-ep/package.json'), 'utf8')).devDependencies['onnxruntime-node'];
const tsVersion = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).devDependencies.typescript;
const ts7Version = '7.0.2';
const esbuildVersion = '0.28.2';
const webpackVersion = '5.113.0';
const transformersVersion = '4.3.2';
const typesNode = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).devDependencies['@types/node'];

/** An environment with nothing that points at this repository or at a native library. */
function cleanEnv(extra = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(MLX_|LD_LIBRARY_PATH|LD_PRELOAD|NODE_PATH|NODE_OPTIONS|npm_)/.test(k)) continue;
    if (k === 'PATH') continue;
    env[k] = v;
  }
  env.PATH = (process.env.PATH ?? '')
    .split(':')
    .filter((p) => !p.startsWith(root))
    .join(':');
  env.ONNXRUNTIME_NODE_INSTALL = 'skip';
  return { ...env, ...extra };
}

function sh(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.status !== 0 || r.error) {
    const err = new Error(`${cmd} ${args.join(' ')} exited with ${r.status ?? r.error}\n${r.stdout ?? ''}\n${r.stderr ?? ''}`);
    err.stdout = r.stdout;
    err.stderr = r.stderr;
    err.status = r.status;
    throw err;
  }
  return r;
}

function shAsync(cmd, args, opts = {}) {
  return new Promise((resolve, reject) =>
    execFile(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts }, (e, stdout, stderr) =>
      e ? reject(new Error(`${cmd} ${args.join(' ')}: ${e.message}\n${stdout}${stderr}`)) : resolve(stdout),
    ),
  );
}

/** Runs a node script in the app folder; returns stdout, stderr and status. */
function node(args, extra = {}, expectStatus = 0) {
  const r = spawnSync(process.execPath, args, { cwd: app, encoding: 'utf8', env: cleanEnv(extra), timeout: 120_000 });
  if (r.status !== expectStatus)
    throw new Error(`node ${args.join(' ')}: status ${r.status} (wanted ${expectStatus})\n${r.stdout}\n${r.stderr}`);
  return r;
}

/** node() without blocking: resolves with stdout and stderr when it exits with status 0. */
function nodeAsync(args, extra = {}) {
  return new Promise((resolve, reject) =>
    execFile(
      process.execPath,
      args,
      { cwd: app, encoding: 'utf8', env: cleanEnv(extra), timeout: 120_000, maxBuffer: 16 << 20 },
      (e, stdout, stderr) =>
        e ? reject(new Error(`node ${args.join(' ')}: ${e.message}\n${stdout}\n${stderr}`)) : resolve({ stdout, stderr }),
    ),
  );
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

async function step(name, body) {
  const s = performance.now();
  try {
    const note = await body();
    const secs = ((performance.now() - s) / 1000).toFixed(1);
    results.push({ name, ok: true, secs });
    console.log(`ok   ${name} (${secs} s)${note ? `: ${note}` : ''}`);
  } catch (e) {
    results.push({ name, ok: false, error: String(e?.message ?? e) });
    console.log(`FAIL ${name}\n${String(e?.stack ?? e).replace(/^/gm, '     ')}`);
  }
}

/** The README's "Using it" code blocks, by the file name on their first line. */
function readmeBlocks() {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Using it'), readme.indexOf('\n## ', readme.indexOf('## Using it') + 5));
  const blocks = {};
  for (const m of section.matchAll(/```(?:js|ts)\n(\/\/ (index\.\w+)[^\n]*\n[\s\S]*?)```/g)) blocks[m[2]] = m[1];
  return blocks;
}

const published = JSON.parse(execFileSync(process.execPath, [join(root, 'tools/manifests.mjs'), '--list'], { encoding: 'utf8' })).filter(
  (p) => !p.endsWith('darwin-arm64'),
);
let packed = [];

await step('pnpm -r pack (prepack builds; platform packages from the pinned wheels)', () => {
  mkdirSync(tarballs, { recursive: true });
  const filters = published.flatMap((d) => ['--filter', `./${d}`]);
  sh('corepack', ['pnpm', '-r', ...filters, 'pack', '--pack-destination', tarballs], {
    cwd: root,
    env: { ...process.env, COREPACK_ENABLE_DOWNLOAD_PROMPT: '0' },
  });
  packed = readdirSync(tarballs).filter((f) => f.endsWith('.tgz'));
  assert(packed.length === published.length, `packed ${packed.length} tarballs for ${published.length} packages`);
  const mib = (f) => (readFileSync(join(tarballs, f)).length / 2 ** 20).toFixed(1);
  return packed.map((f) => `${f.replace(/-\d+\.\d+\.\d+.*\.tgz$/, '')} ${mib(f)} MiB`).join(', ');
});

// Linting and installing run side by side (the one is CPU-bound, the other mostly waits on files).
const linting = step('publint --strict and attw on every tarball', async () => {
  // The platform packages are linted without lib/ (the manifest and entry files are what the
  // linters check; unpacking 150 MiB of libraries in JavaScript is what would take the time).
  const lint = join(work, 'lint');
  mkdirSync(lint, { recursive: true });
  const targets = packed.map((f) => {
    if (!f.startsWith('mlx-sys-') || f.startsWith('mlx-sys-0')) return join(tarballs, f);
    const dir = join(lint, f.replace(/\.tgz$/, ''));
    mkdirSync(dir, { recursive: true });
    sh('tar', ['-xzf', join(tarballs, f), '-C', dir, '--exclude', 'package/lib']);
    sh('tar', ['-czf', join(lint, f), '-C', dir, 'package']);
    return join(lint, f);
  });
  const run = (cmd, args) => shAsync(cmd, args, { cwd: work });
  const jobs = targets.flatMap((t) => [
    () => run(join(root, 'node_modules/.bin/publint'), ['run', t, '--strict']),
    () => run(join(root, 'node_modules/.bin/attw'), [t, '--format', 'ascii', '--no-emoji', '--profile', 'node16']),
  ]);
  // Two at a time.
  const next = async () => {
    for (let j = jobs.shift(); j; j = jobs.shift()) await j();
  };
  await Promise.all([next(), next()]);
  // No `source` condition reaches users.
  for (const f of packed) {
    const manifest = execFileSync('tar', ['-xzOf', join(tarballs, f), 'package/package.json'], { encoding: 'utf8' });
    assert(!manifest.includes('"source"'), `${f}: the packed package.json has a source condition`);
  }
});

const installing = step(`npm install of the tarballs with onnxruntime-node and -web ${ortVersion}, typescript ${tsVersion}`, async () => {
  mkdirSync(app, { recursive: true });
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }, null, 2));
  await shAsync(
    'npm',
    [
      'install',
      '--ignore-scripts',
      '--no-audit',
      '--no-fund',
      '--prefer-offline',
      '--cache',
      join(root, '.cache', 'npm'),
      ...packed.map((f) => join(tarballs, f)),
      `onnxruntime-node@${ortVersion}`,
      `onnxruntime-web@${ortVersion}`,
      `typescript@${tsVersion}`,
      `@types/node@${typesNode}`,
      // The model mlx-ort demo runs.
      '@ricky0123/vad-web@0.0.31',
      // Today's TypeScript, beside the pinned one, for the declarations check.
      `ts7@npm:typescript@${ts7Version}`,
      // The bundlers of the bundle steps.
      `esbuild@${esbuildVersion}`,
      `webpack@${webpackVersion}`,
      // transformers.js: it pins onnxruntime-node (the version above) and sharp (prebuilt @img packages).
      `@huggingface/transformers@${transformersVersion}`,
    ],
    { cwd: app, env: cleanEnv() },
  );
  // Source maps and declaration maps point at sources that ship.
  for (const pkg of ['sys', 'core', 'kernels', 'ort-ep']) {
    const dist = join(app, 'node_modules', '@mlx', pkg, 'dist');
    for (const map of ['index.js.map', 'index.d.ts.map']) {
      const { sources } = JSON.parse(readFileSync(join(dist, map), 'utf8'));
      for (const src of sources)
        assert(existsSync(join(dist, src)), `@mlx/${pkg}/dist/${map} points at ${src}, which is not in the package`);
    }
  }
  cpSync(join(shared, 'gpt2-tiny', 'model.onnx'), join(app, 'model.onnx'));
  cpSync(join(shared, 'gpt2-tiny', 'test_data_set_0'), join(app, 'test_data_set_0'), { recursive: true });
  const commons = execFileSync('find', ['node_modules', '-path', '*/onnxruntime-common/package.json'], { cwd: app, encoding: 'utf8' })
    .trim()
    .split('\n')
    .map((p) => `${dirname(p)} ${JSON.parse(readFileSync(join(app, p), 'utf8')).version}`);
  return `onnxruntime-common copies: ${commons.join('; ')}`;
});
// transformers.js fixtures: tokenizers of the real kinds, built here (no hub), small enough for the
// models' 512-token vocabularies.
const tokenizerCorpus = `The quick brown fox jumps over the lazy dog. A small model runs on the machine in the node process.
Tokens are merged by frequency: the most common pair of symbols becomes one symbol, again and again,
until the vocabulary is full. Hello world! Models, tensors and sessions; 1234 numbers, 5678 more.
It's what we'll see: the text that a decoder writes, one token at a time, greedy and deterministic.`;

function specialToken(id, content) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

/** A WordPiece tokenizer (BERT's normalizer, pre-tokenizer and [CLS] A [SEP] template) of at most `size` tokens. */
function wordPiece(size) {
  const specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];
  const vocab = [...specials];
  const chars = [...'abcdefghijklmnopqrstuvwxyz0123456789'];
  vocab.push(...chars, ...'.,!?;:\'"-()'.split(''), ...chars.map((c) => `##${c}`));
  for (const s of ['ing', 'ed', 'er', 'ly', 's', 'es', 'tion', 'est', 'en']) vocab.push(`##${s}`);
  const words = [...new Set(tokenizerCorpus.toLowerCase().match(/[a-z]+/g))].sort();
  for (const w of words) if (vocab.length < size && !vocab.includes(w)) vocab.push(w);
  const ids = Object.fromEntries(vocab.map((t, i) => [t, i]));
  const sp = (t) => ({ SpecialToken: { id: t, type_id: 0 } });
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: specials.map((t, i) => specialToken(i, t)),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [sp('[CLS]'), { Sequence: { id: 'A', type_id: 0 } }, sp('[SEP]')],
      pair: [
        sp('[CLS]'),
        { Sequence: { id: 'A', type_id: 0 } },
        sp('[SEP]'),
        { Sequence: { id: 'B', type_id: 1 } },
        { SpecialToken: { id: '[SEP]', type_id: 1 } },
      ],
      special_tokens: Object.fromEntries(['[CLS]', '[SEP]'].map((t) => [t, { id: t, ids: [ids[t]], tokens: [t] }])),
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab: ids },
  };
}

/** GPT-2's byte-to-character table. */
function byteChars() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++)
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  const table = new Array(256);
  bs.forEach((b, i) => (table[b] = String.fromCodePoint(cs[i])));
  return table;
}

/** A byte-level BPE of `size` tokens (256 bytes, merges learnt from the corpus, <|endoftext|> last). */
function byteLevelBpe(size) {
  const chars = byteChars();
  const pattern = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
  const counts = new Map();
  for (const w of tokenizerCorpus.match(pattern)) {
    const key = [...Buffer.from(w, 'utf8')].map((b) => chars[b]).join(' ');
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  let words = [...counts].map(([k, n]) => [k.split(' '), n]);
  const vocab = [...chars];
  const merges = [];
  while (vocab.length < size - 1) {
    const pairs = new Map();
    for (const [syms, n] of words)
      for (let i = 0; i + 1 < syms.length; i++) {
        const p = `${syms[i]} ${syms[i + 1]}`;
        pairs.set(p, (pairs.get(p) ?? 0) + n);
      }
    if (pairs.size === 0) break;
    // The most frequent pair; ties go to the first in code-unit order (deterministic).
    const [best] = [...pairs].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))[0];
    const [l, r] = best.split(' ');
    merges.push(best);
    vocab.push(l + r);
    words = words.map(([syms, n]) => {
      const out = [];
      for (let i = 0; i < syms.length; i++)
        if (i + 1 < syms.length && syms[i] === l && syms[i + 1] === r) out.push(l + syms[++i]);
        else out.push(syms[i]);
      return [out, n];
    });
  }
  const eos = vocab.length;
  vocab.push('<|endoftext|>');
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    eos,
    json: {
      version: '1.0',
      truncation: null,
      padding: null,
      added_tokens: [specialToken(eos, '<|endoftext|>')],
      normalizer: null,
      pre_tokenizer: byteLevel,
      post_processor: { ...byteLevel, trim_offsets: false },
      decoder: byteLevel,
      model: {
        type: 'BPE',
        dropout: null,
        unk_token: null,
        continuing_subword_prefix: '',
        end_of_word_suffix: '',
        fuse_unk: false,
        byte_fallback: false,
        vocab: Object.fromEntries(vocab.map((t, i) => [t, i])),
        merges,
      },
    },
  };
}

/**
 * A T5-style tokenizer of `size` tokens (<pad> 0, </s> 1, <unk> 2, the A </s> template) over a
 * WordPiece model of the corpus's words, the rest of the vocabulary <extra_id_N> as T5's.
 */
function t5WordPiece(size) {
  const specials = ['<pad>', '</s>', '<unk>'];
  const vocab = [...specials];
  const chars = [...'abcdefghijklmnopqrstuvwxyz0123456789'];
  vocab.push(...chars, ...'.,!?;:\'"-()'.split(''), ...chars.map((c) => `##${c}`));
  for (const w of [...new Set(tokenizerCorpus.toLowerCase().match(/[a-z]+/g))].sort())
    if (vocab.length < size && !vocab.includes(w)) vocab.push(w);
  for (let i = 0; vocab.length < size; i++) vocab.push(`<extra_id_${i}>`);
  const eos = { SpecialToken: { id: '</s>', type_id: 0 } };
  const a = { Sequence: { id: 'A', type_id: 0 } };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: specials.map((t, i) => specialToken(i, t)),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [a, eos],
      pair: [a, eos, { Sequence: { id: 'B', type_id: 0 } }, eos],
      special_tokens: { '</s>': { id: '</s>', ids: [1], tokens: ['</s>'] } },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: {
      type: 'WordPiece',
      unk_token: '<unk>',
      continuing_subword_prefix: '##',
      max_input_chars_per_word: 100,
      vocab: Object.fromEntries(vocab.map((t, i) => [t, i])),
    },
  };
}

/** Model folders as transformers.js loads them offline: config.json, tokenizer files, onnx/model.onnx. */
function writeTransformersModels(dir, bertModel, decoders) {
  const put = (name, files) => {
    mkdirSync(join(dir, name, 'onnx'), { recursive: true });
    for (const [f, v] of Object.entries(files))
      writeFileSync(join(dir, name, f), typeof v === 'string' || v instanceof Uint8Array ? v : JSON.stringify(v, null, 1));
  };
  put('bert-tiny', {
    'config.json': {
      model_type: 'bert',
      architectures: ['BertModel'],
      vocab_size: 512,
      hidden_size: 64,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      type_vocab_size: 2,
      max_position_embeddings: 512,
    },
    'tokenizer.json': wordPiece(512),
    'tokenizer_config.json': {
      tokenizer_class: 'BertTokenizer',
      do_lower_case: true,
      cls_token: '[CLS]',
      sep_token: '[SEP]',
      pad_token: '[PAD]',
      unk_token: '[UNK]',
      mask_token: '[MASK]',
      model_max_length: 512,
    },
    'onnx/model.onnx': bertModel,
  });
  for (const [name, { config: c, model }] of Object.entries(decoders)) {
    const bpe = byteLevelBpe(c.vocab);
    const config =
      c.kind === 'gpt2'
        ? {
            model_type: 'gpt2',
            architectures: ['GPT2LMHeadModel'],
            n_layer: c.layers,
            n_head: c.heads,
            n_embd: c.hidden,
            n_positions: c.maxPositions,
          }
        : {
            model_type: 'llama',
            architectures: ['LlamaForCausalLM'],
            num_hidden_layers: c.layers,
            num_attention_heads: c.heads,
            num_key_value_heads: c.kvHeads,
            hidden_size: c.hidden,
            head_dim: c.hidden / c.heads,
            intermediate_size: c.ffn,
            max_position_embeddings: c.maxPositions,
          };
    put(name, {
      'config.json': { ...config, vocab_size: c.vocab, bos_token_id: bpe.eos, eos_token_id: bpe.eos },
      'tokenizer.json': bpe.json,
      'tokenizer_config.json': {
        tokenizer_class: c.kind === 'gpt2' ? 'GPT2Tokenizer' : 'PreTrainedTokenizerFast',
        bos_token: '<|endoftext|>',
        eos_token: '<|endoftext|>',
        unk_token: '<|endoftext|>',
        pad_token: '<|endoftext|>',
        add_prefix_space: false,
        model_max_length: c.maxPositions,
      },
      'onnx/model.onnx': model,
    });
  }
}

// The transformers.js models, written while the others run: bert-tiny (a real export) and two
// decoders with a KV cache from the project's builder (test/helpers/decoder.ts): GPT-2-shaped
// (plain ops, position_ids) and Llama-shaped (com.microsoft GroupQueryAttention, grouped KV heads).
// Their symbolic dimensions get the names exports use: transformers.js sizes the empty first past
// from the input metadata, `batch_size` as the batch and any other name as 0.
const tjsModels = join(work, 'tjs-models');
const decoderConfigs = {
  'gpt2-kv': { kind: 'gpt2', layers: 2, hidden: 64, heads: 4, ffn: 256, vocab: 512, maxPositions: 128, seed: 11 },
  'llama-kv': { kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 512, maxPositions: 128, seed: 5 },
};
const fixtures = shAsync(
  process.execPath,
  [
    '--import',
    'tsx',
    '--input-type=module',
    '-e',
    `import { buildDecoder } from './test/helpers/decoder.ts';
     import { fromBinary, toBinary } from '@bufbuild/protobuf';
     import { ModelProtoSchema } from 'onnx-buf';
     import { writeFileSync } from 'node:fs';
     const names = { batch: 'batch_size', sequence: 'sequence_length', total: 'total_sequence_length', past: 'past_sequence_length', present: 'total_sequence_length' };
     for (const [name, config] of Object.entries(${JSON.stringify(decoderConfigs)})) {
       const m = fromBinary(ModelProtoSchema, buildDecoder(config));
       for (const vi of [...m.graph.input, ...m.graph.output])
         for (const d of vi.type.value.value.shape.dim)
           if (d.value.case === 'dimParam' && names[d.value.value]) d.value.value = names[d.value.value];
       writeFileSync(process.argv[1] + '/' + name + '.onnx', toBinary(ModelProtoSchema, m));
     }`,
    work,
  ],
  { cwd: join(root, 'packages', 'ort-ep') },
).then(
  () => {
    const decoders = Object.fromEntries(
      Object.entries(decoderConfigs).map(([name, config]) => [name, { config, model: readFileSync(join(work, `${name}.onnx`)) }]),
    );
    writeTransformersModels(tjsModels, readFileSync(join(shared, 'bert-tiny', 'model.onnx')), decoders);
    return null;
  },
  (e) => e,
);
// The encoder-decoders, in optimum's layout (onnx/encoder_model.onnx, onnx/decoder_model_merged.onnx
// with use_cache_branch, config.json, generation_config.json), exported by torch + transformers
// through packages/ort-ep/test/helpers/seq2seq.ts (the bench Python, cached under .cache/): a tiny
// T5 for text2text-generation with the tokenizer above, and a Whisper-shaped model for
// automatic-speech-recognition (preprocessor_config.json: transformers.js's own log-mel features)
// with a byte-level BPE whose special tokens are English-only Whisper's, at the ids its
// generation_config.json names (<|endoftext|> 379, <|startoftranscript|> 380, <|notimestamps|> 383).
const seq2seqFixtures = shAsync(
  process.execPath,
  [
    '--import',
    'tsx',
    '--input-type=module',
    '-e',
    `import { t5Folder, whisperFolder } from './test/helpers/seq2seq.ts'; console.log('T5 ' + t5Folder() + '\\nWHISPER ' + whisperFolder());`,
  ],
  { cwd: join(root, 'packages', 'ort-ep') },
).then(
  (stdout) => {
    const folder = (tag) => {
      const line = stdout.split('\n').find((l) => l.startsWith(`${tag} `));
      assert(line, `seq2seq.ts printed no ${tag} folder: ${stdout}`);
      return line.slice(tag.length + 1);
    };
    const put = (name, from, files, tokenizer, tokenizerConfig) => {
      const to = join(tjsModels, name);
      mkdirSync(to, { recursive: true });
      for (const f of [...files, 'onnx']) cpSync(join(from, f), join(to, f), { recursive: true });
      writeFileSync(join(to, 'tokenizer.json'), JSON.stringify(tokenizer));
      writeFileSync(join(to, 'tokenizer_config.json'), JSON.stringify(tokenizerConfig));
    };
    put('t5-tiny', folder('T5'), ['config.json', 'generation_config.json'], t5WordPiece(256), {
      tokenizer_class: 'T5Tokenizer',
      eos_token: '</s>',
      pad_token: '<pad>',
      unk_token: '<unk>',
      model_max_length: 512,
    });
    const bpe = byteLevelBpe(380);
    assert(bpe.eos === 379, `the Whisper tokenizer's <|endoftext|> is ${bpe.eos}, not 379`);
    ['<|startoftranscript|>', '<|transcribe|>', '<|translate|>', '<|notimestamps|>'].forEach((t, i) => {
      bpe.json.added_tokens.push(specialToken(380 + i, t));
      bpe.json.model.vocab[t] = 380 + i;
    });
    put('whisper-tiny', folder('WHISPER'), ['config.json', 'generation_config.json', 'preprocessor_config.json'], bpe.json, {
      tokenizer_class: 'WhisperTokenizer',
      bos_token: '<|endoftext|>',
      eos_token: '<|endoftext|>',
      unk_token: '<|endoftext|>',
      pad_token: '<|endoftext|>',
      model_max_length: 64,
    });
    return null;
  },
  (e) => e,
);
await Promise.all([linting, installing, fixtures, seq2seqFixtures]);

// Prints the library that loaded and any mapped library from the repository (there must be none).
/**
 * Source of `async function gpt2Check(ort, readTestCase, dir)`, put into each app this test writes:
 * gpt2-tiny (model.onnx and test_data_set_0 in `dir`) through ['mlx'] of that onnxruntime module,
 * against its reference outputs: { handler, n (the lengths agree), worst } (worst <= 0: every
 * element within 1e-4 + 1e-3 * |reference|).
 */
const gpt2Check = `async function gpt2Check(ort, readTestCase, dir) {
  const data = readTestCase(dir).datasets[0];
  const s = await ort.InferenceSession.create(dir + '/model.onnx', { executionProviders: ['mlx'] });
  const feeds = {};
  data.inputs.forEach((t, i) => (feeds[s.inputNames[i]] = new ort.Tensor('int64', t.data, t.dims)));
  const got = (await s.run(feeds)).logits.data;
  const want = data.outputs[0].data;
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) - (1e-4 + 1e-3 * Math.abs(want[i])));
  const handler = s.handler.constructor.name;
  await s.release();
  return { handler, n: got.length === want.length, worst };
}
`;

const nativeProbe = `
process.on('exit', () => {
  const maps = require('node:fs').readFileSync('/proc/self/maps', 'utf8');
  const libs = [...new Set(maps.split('\\n').map((l) => l.split(/\\s+/)[5]).filter((p) => p && p.includes('.so')))];
  console.log('PROBE ' + JSON.stringify({ mlxc: libs.filter((p) => /libmlxc/.test(p)), repo: libs.filter((p) => p.startsWith(${JSON.stringify(root)})) }));
});`;
const probeOf = (stdout) =>
  JSON.parse(
    stdout
      .split('\n')
      .find((l) => l.startsWith('PROBE '))
      .slice(6),
  );
const expectGnu = (probe) => {
  assert(probe.repo.length === 0, `libraries of the repository were loaded: ${probe.repo.join(', ')}`);
  assert(probe.mlxc.length === 1 && probe.mlxc[0].includes('node_modules/@mlx/sys-linux-x64-gnu/lib/'), `libmlxc from ${probe.mlxc}`);
};

await step(
  'the README\'s "Using it" blocks: ESM, CommonJS, strict TypeScript; mlx({...}) typed with onnxruntime-node, -common, -web and in .cts, a wrong option refused',
  async () => {
    const blocks = readmeBlocks();
    for (const f of ['index.mjs', 'index.cjs', 'index.ts']) assert(blocks[f], `README has no ${f} block under "Using it"`);
    writeFileSync(
      join(app, 'index.mjs'),
      blocks['index.mjs'] + `import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);${nativeProbe}`,
    );
    writeFileSync(join(app, 'index.cjs'), blocks['index.cjs'] + nativeProbe);
    mkdirSync(join(app, 'ts'), { recursive: true });
    writeFileSync(join(app, 'ts', 'index.ts'), blocks['index.ts']);
    writeTypeChecks();
    // One strict tsc run (skipLibCheck off: the packages' declarations are checked too) over the
    // README's block and the type checks of the next step; the block's output then runs.
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          outDir: 'out',
          skipLibCheck: false,
          types: ['node'],
        },
        include: ['ts', 'types'],
      }),
    );
    const dims = /\[\s*1,\s*4,\s*512\s*\]/;
    const check = (f, stdout, stderr) => {
      assert(dims.test(stdout), `${f} printed ${stdout}`);
      assert(!/removing requested execution provider/.test(stderr), `${f}: onnxruntime fell back: ${stderr}`);
    };
    // The JavaScript blocks run while tsc checks; then the compiled TypeScript block runs.
    const runs = ['index.mjs', 'index.cjs'].map((f) =>
      nodeAsync([f]).then(({ stdout, stderr }) => {
        check(f, stdout, stderr);
        expectGnu(probeOf(stdout));
      }),
    );
    await Promise.all([shAsync(process.execPath, [join(app, 'node_modules/typescript/bin/tsc'), '-p', '.'], { cwd: app }), ...runs]);
    const ts = node(['out/ts/index.js']);
    check('out/ts/index.js', ts.stdout, ts.stderr);
  },
);

/** Type checks: mlx({...}) in the session options of each onnxruntime package, and CommonJS types. */
function writeTypeChecks() {
  mkdirSync(join(app, 'types'), { recursive: true });
  const body = (m) => `import * as ort from '${m}';
import { mlx, type MlxExecutionProviderOption } from '@mlx/ort-ep';
const options: ort.InferenceSession.SessionOptions = { executionProviders: [mlx({ device: 'gpu', precision: 'tf32', maxSignatures: 4 }), 'cpu'] };
const one: MlxExecutionProviderOption = mlx();
// A wrong option is a type error (else tsc fails on the unused directive).
// @ts-expect-error device is 'cpu' | 'gpu'
const bad = mlx({ device: 'gpuu' });
export const all = [options, one, bad];
`;
  writeFileSync(join(app, 'types', 'node.ts'), body('onnxruntime-node'));
  writeFileSync(join(app, 'types', 'common.ts'), body('onnxruntime-common'));
  writeFileSync(join(app, 'types', 'web.ts'), body('onnxruntime-web'));
  writeFileSync(
    join(app, 'types', 'cjs.cts'),
    `import ort = require('onnxruntime-node');
import ep = require('@mlx/ort-ep');
import core = require('@mlx/core');
import kernels = require('@mlx/kernels');
import sys = require('@mlx/sys');
export const o: ort.InferenceSession.SessionOptions = { executionProviders: [ep.mlx({ device: 'cpu' })] };
export const f: [typeof core.array, typeof kernels, typeof sys.loadMlxC] = [core.array, kernels, sys.loadMlxC];
`,
  );
}

await step("gpt2-tiny against its reference outputs through ['mlx']: onnxruntime-node, -common, -web; ESM and CommonJS", async () => {
  const program = (esm) => `
    ${esm ? "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);" : ''}
    const main = async () => {
      const mods = ${esm ? "{ node: await import('onnxruntime-node'), common: await import('onnxruntime-common'), web: await import('onnxruntime-web') }" : "{ node: require('onnxruntime-node'), common: require('onnxruntime-common'), web: require('onnxruntime-web') }"};
      const ep = ${esm ? "await import('@mlx/ort-ep')" : "require('@mlx/ort-ep')"};
      const internal = ${esm ? "await import('@mlx/ort-ep/internal')" : "require('@mlx/ort-ep/internal')"};
      const out = {};
      for (const [label, ort] of Object.entries(mods)) out[label] = await gpt2Check(ort, internal.readTestCase, '.');
      out.registrations = ep.mlxRegistrations().map((r) => r.version + ' ' + r.format + ' ' + r.path.replace(process.cwd(), '.'));
      console.log('RESULT ' + JSON.stringify(out));
    };
    main().catch((e) => { console.error(e); process.exit(1); });
    ${gpt2Check}
    ${nativeProbe}`;
  const notes = [];
  const files = ['gpt2.mjs', 'gpt2.cjs'];
  files.forEach((f, i) => writeFileSync(join(app, f), program(i === 0)));
  const outs = await Promise.all(files.map((f) => nodeAsync([f])));
  for (const esm of [true, false]) {
    const file = esm ? 'gpt2.mjs' : 'gpt2.cjs';
    const r = outs[esm ? 0 : 1];
    const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
    assert(line, `${file}: ${r.stdout}${r.stderr}`);
    const out = JSON.parse(line.slice(7));
    for (const label of ['node', 'common', 'web']) {
      assert(out[label].handler === 'MlxSessionHandler', `${file} ${label}: handler ${out[label].handler}`);
      assert(out[label].n && out[label].worst <= 0, `${file} ${label}: outside rtol 1e-3 / atol 1e-4 (by ${out[label].worst})`);
    }
    expectGnu(probeOf(r.stdout));
    if (!esm) notes.push(`${out.registrations.length} registrations (${out.registrations.join('; ')})`);
  }
  return notes.join('');
});

// pnpm 12 and yarn 4 beside npm: each installs the tarballs in a folder of its own and runs
// gpt2-tiny through ['mlx']. pnpm refuses dependencies' install scripts unless told: koffi (the FFI
// @mlx/sys loads the library with) has one but ships its binaries built, so `allowBuilds` turns it
// off (the README's install line for pnpm); onnxruntime-node's downloads nothing here (skip).
const otherManagers = [
  {
    name: 'pnpm',
    version: JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
      .packageManager.replace(/^pnpm@/, '')
      .replace(/\+.*$/, ''),
    // The packages' dependencies on each other resolve to the tarballs too (overrides).
    files: (deps) => ({
      'pnpm-workspace.yaml': `allowBuilds:\n  koffi: false\n  onnxruntime-node: false\n  protobufjs: false\noverrides:\n${Object.entries(
        deps,
      )
        .filter(([n]) => n.startsWith('@mlx/'))
        .map(([n, v]) => `  '${n}': '${v}'\n`)
        .join('')}`,
    }),
    manifest: {},
    // No lockfile here: under CI=true pnpm would default to --frozen-lockfile.
    install: (v) => ['corepack', [`pnpm@${v}`, 'install', '--no-frozen-lockfile']],
    env: {},
  },
  {
    name: 'yarn',
    version: '4.18.1',
    files: () => ({ '.yarnrc.yml': 'nodeLinker: node-modules\n', 'yarn.lock': '' }),
    manifest: { resolutions: true },
    install: (v) => ['corepack', [`yarn@${v}`, 'install']],
    // Under CI=true yarn refuses to write a lockfile (immutable installs); this folder starts with none.
    env: { YARN_ENABLE_IMMUTABLE_INSTALLS: 'false' },
  },
];
await step(
  `pnpm ${otherManagers[0].version} and yarn ${otherManagers[1].version} installs of the tarballs run gpt2-tiny through ['mlx']`,
  async () => {
    const notes = [];
    await Promise.all(
      otherManagers.map(async (m) => {
        const dir = join(work, m.name);
        mkdirSync(dir, { recursive: true });
        const deps = Object.fromEntries(
          packed.map((f) => [
            JSON.parse(execFileSync('tar', ['-xOzf', join(tarballs, f), 'package/package.json'], { encoding: 'utf8' })).name,
            `file:${join(tarballs, f)}`,
          ]),
        );
        deps['onnxruntime-node'] = ortVersion;
        const mlxDeps = Object.fromEntries(Object.entries(deps).filter(([n]) => n.startsWith('@mlx/')));
        // yarn resolves every optional dependency, other platforms' too, for its lockfile: the macOS
        // package (not built on Linux; published beside the others) stands in as its manifest alone.
        if (m.manifest.resolutions) {
          const stub = join(dir, 'darwin-stub');
          mkdirSync(stub, { recursive: true });
          const {
            scripts: _s,
            files: _f,
            ...pkg
          } = JSON.parse(readFileSync(join(root, 'packages/sys/npm/darwin-arm64/package.json'), 'utf8'));
          writeFileSync(join(stub, 'package.json'), JSON.stringify(pkg, null, 2));
          const tgz = execFileSync('npm', ['pack', '--silent', '--pack-destination', dir], { cwd: stub, encoding: 'utf8', env: cleanEnv() })
            .trim()
            .split('\n')
            .at(-1);
          mlxDeps[pkg.name] = `file:${join(dir, tgz)}`;
        }
        const manifest = { name: `consumer-${m.name}`, private: true, type: 'module', dependencies: deps };
        if (m.manifest.resolutions) manifest.resolutions = mlxDeps;
        writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest, null, 2));
        for (const [f, text] of Object.entries(m.files(deps))) writeFileSync(join(dir, f), text);
        const [cmd, args] = m.install(m.version);
        // corepack fetches yarn from the npm registry (its own host may be unreachable).
        const env = cleanEnv({
          COREPACK_ENABLE_DOWNLOAD_PROMPT: '0',
          COREPACK_NPM_REGISTRY: 'https://registry.npmjs.org',
          COREPACK_ENABLE_STRICT: '0',
          ...m.env,
        });
        await shAsync(cmd, args, { cwd: dir, env });
        cpSync(join(app, 'model.onnx'), join(dir, 'model.onnx'));
        cpSync(join(app, 'test_data_set_0'), join(dir, 'test_data_set_0'), { recursive: true });
        writeFileSync(
          join(dir, 'run.mjs'),
          `import * as ort from 'onnxruntime-node';
import '@mlx/ort-ep';
import { readTestCase } from '@mlx/ort-ep/internal';
${gpt2Check}
console.log('RESULT ' + JSON.stringify(await gpt2Check(ort, readTestCase, '.')));
`,
        );
        const r = spawnSync(process.execPath, ['run.mjs'], { cwd: dir, encoding: 'utf8', env: cleanEnv(), timeout: 120_000 });
        const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
        assert(line, `${m.name}: ${r.stdout}${r.stderr}`);
        const out = JSON.parse(line.slice(7));
        assert(out.handler === 'MlxSessionHandler' && out.worst <= 0, `${m.name}: ${line}`);
        notes.push(`${m.name} ${m.version}`);
      }),
    );
    return notes.join(', ');
  },
);

// An application bundled with esbuild, ESM and CommonJS, the native packages kept external (koffi's
// binary, onnxruntime-node's, the platform package holding libmlxc): a bare import registers the
// backend (sideEffects), and the CommonJS bundle, where import.meta is empty, finds the packages.
await step(`esbuild ${esbuildVersion} bundles (ESM and CommonJS) of an app, native packages external, run gpt2-tiny`, () => {
  const body = (
    esm,
  ) => `${esm ? "import * as ort from 'onnxruntime-node';\nimport '@mlx/ort-ep';\nimport { readTestCase } from '@mlx/ort-ep/internal';" : "const ort = require('onnxruntime-node');\nrequire('@mlx/ort-ep');\nconst { readTestCase } = require('@mlx/ort-ep/internal');"}
${gpt2Check}
gpt2Check(ort, readTestCase, '.').then((r) => console.log('RESULT ' + JSON.stringify(r)));
`;
  const sizes = [];
  for (const esm of [true, false]) {
    const src = join(app, esm ? 'bundle-src.mjs' : 'bundle-src.cjs');
    const out = join(app, 'bundled', esm ? 'app.mjs' : 'app.cjs');
    writeFileSync(src, body(esm));
    const esbuild = join(app, 'node_modules/esbuild/bin/esbuild');
    const args = [src, '--bundle', '--platform=node', `--format=${esm ? 'esm' : 'cjs'}`, `--outfile=${out}`, '--log-level=error'];
    for (const ext of ['onnxruntime-node', 'koffi', '@mlx/sys-*']) args.push(`--external:${ext}`);
    execFileSync(process.execPath, [esbuild, ...args], { cwd: app, env: cleanEnv() });
    // It runs in a folder of its own whose node_modules holds the external packages alone.
    const run = join(work, esm ? 'bundle-esm' : 'bundle-cjs');
    mkdirSync(join(run, 'node_modules', '@mlx'), { recursive: true });
    for (const ext of ['onnxruntime-node', 'koffi', '@mlx/sys-linux-x64-gnu'])
      symlinkSync(join(app, 'node_modules', ext), join(run, 'node_modules', ext));
    cpSync(out, join(run, esm ? 'app.mjs' : 'app.cjs'));
    cpSync(join(app, 'model.onnx'), join(run, 'model.onnx'));
    cpSync(join(app, 'test_data_set_0'), join(run, 'test_data_set_0'), { recursive: true });
    const r = spawnSync(process.execPath, [esm ? 'app.mjs' : 'app.cjs'], { cwd: run, encoding: 'utf8', env: cleanEnv(), timeout: 120_000 });
    const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
    assert(line, `${out}: ${r.stdout}${r.stderr}`);
    const res = JSON.parse(line.slice(7));
    assert(res.handler === 'MlxSessionHandler' && res.worst <= 0, `${out}: ${line}`);
    sizes.push(`${esm ? 'ESM' : 'CJS'} ${(statSync(out).size / 2 ** 20).toFixed(1)} MiB`);
  }
  return sizes.join(', ');
});

// transformers.js as a user runs it: pipelines from local model folders (no hub), the session
// options passed through to onnxruntime-node, once through mlx and once through onnxruntime-node's
// CPU provider in the same process. Every session's handler is checked: a fallback to CPU fails.
await step(
  `transformers.js ${transformersVersion}: feature-extraction (bert-tiny, WordPiece) and greedy text-generation (GPT-2 and Llama/GQA decoders with KV cache, byte-level BPE) through mlx equal onnxruntime-node's CPU`,
  async () => {
    const failed = await fixtures;
    if (failed) throw failed;
    writeFileSync(
      join(app, 'tjs.mjs'),
      `import { env, pipeline } from '@huggingface/transformers';
import { mlx } from '@mlx/ort-ep';
env.allowRemoteModels = false;
env.localModelPath = process.argv[2];
const decoders = JSON.parse(process.argv[3]);
const texts = ['The quick brown fox jumps over the lazy dog.', 'Hello world!'];
const prompts = ['Hello', 'The quick brown fox'];
const out = {};
// 'mlx-device': the README's recipe, mlx({ presentsOnDevice: true }): the KV cache stays on the
// device as 'gpu-buffer' tensors (bert-tiny has no presents: the option must fit it too).
const provider = { mlx: () => mlx(), 'mlx-device': () => mlx({ presentsOnDevice: true }), cpu: () => 'cpu' };
for (const ep of ['mlx', 'mlx-device', 'cpu']) {
  // mlx({...}) for the one, the plain name for the others: both reach onnxruntime-node as written.
  const fe = await pipeline('feature-extraction', 'bert-tiny', { dtype: 'fp32', session_options: { executionProviders: [provider[ep]()] } });
  const raw = await fe(texts);
  const pooled = await fe(texts, { pooling: 'mean', normalize: true });
  // The tokenizers round-trip (a real WordPiece and byte-level BPE, not a table of [UNK]s).
  const decoded = { 'bert-tiny': fe.tokenizer.decode(fe.tokenizer(texts[0]).input_ids, { skip_special_tokens: true }) };
  out[ep] = { handlers: [fe.model.sessions.model.handler.constructor.name], dims: raw.dims, raw: Array.from(raw.data), pooled: Array.from(pooled.data), gen: {}, decoded };
  await fe.dispose();
  for (const name of decoders) {
    const gen = await pipeline('text-generation', name, {
      dtype: 'fp32',
      session_options: { executionProviders: [ep === 'mlx-device' ? provider[ep]() : ep] },
    });
    const text = (await gen('The quick brown', { max_new_tokens: 12, do_sample: false }))[0].generated_text;
    const one = gen.tokenizer('The quick brown');
    const ids = (await gen.model.generate({ ...one, max_new_tokens: 12, do_sample: false })).tolist()[0].map(Number);
    // A batch, left-padded: padding in attention_mask (and position_ids), past and present.
    gen.tokenizer.padding_side = 'left';
    const batch = gen.tokenizer(prompts, { padding: true });
    const batchIds = (await gen.model.generate({ ...batch, max_new_tokens: 8, do_sample: false })).tolist().map((r) => r.map(Number));
    const batchTexts = (await gen(prompts, { max_new_tokens: 8, do_sample: false })).map((r) => r[0].generated_text);
    const dict = await gen.model.generate({ ...one, max_new_tokens: 2, do_sample: false, return_dict_in_generate: true });
    const pastLocations = [...new Set(Object.values(dict.past_key_values).map((t) => t.location))];
    await dict.past_key_values.dispose();
    decoded[name] = gen.tokenizer.decode(gen.tokenizer(texts[0]).input_ids, { skip_special_tokens: true });
    const session = gen.model.sessions.model;
    out[ep].handlers.push(session.handler.constructor.name);
    out[ep].gen[name] = {
      inputs: session.inputNames,
      text,
      ids,
      prompt: one.input_ids.dims[1],
      padded: batch.attention_mask.tolist().flat().filter((m) => Number(m) === 0).length,
      batchIds,
      batchTexts,
      pastLocations,
    };
    await gen.dispose();
  }
}
console.log('RESULT ' + JSON.stringify(out));
`,
    );
    const names = Object.keys(decoderConfigs);
    const { stdout, stderr } = await nodeAsync(['tjs.mjs', tjsModels, JSON.stringify(names)]);
    const line = stdout.split('\n').find((l) => l.startsWith('RESULT '));
    assert(line, `tjs.mjs: ${stdout}${stderr}`);
    assert(!/removing requested execution provider/.test(stderr), `onnxruntime fell back: ${stderr}`);
    const { mlx: m, 'mlx-device': d, cpu: c } = JSON.parse(line.slice(7));
    for (const x of [m, d])
      assert(x.handlers.length === 3 && x.handlers.every((h) => h === 'MlxSessionHandler'), `mlx sessions' handlers: ${x.handlers}`);
    assert(
      c.handlers.every((h) => h !== 'MlxSessionHandler'),
      `cpu sessions' handlers: ${c.handlers}`,
    );
    const worst = (a, b) => (a.length === b.length ? a.reduce((w, x, i) => Math.max(w, Math.abs(x - b[i])), 0) : Infinity);
    const rawWorst = worst(m.raw, c.raw);
    const pooledWorst = worst(m.pooled, c.pooled);
    assert(JSON.stringify(m.dims) === JSON.stringify(c.dims) && m.dims[0] === 2, `feature-extraction dims ${m.dims} vs ${c.dims}`);
    assert(rawWorst <= 1e-4 && pooledWorst <= 1e-4, `embeddings differ by ${rawWorst} (raw), ${pooledWorst} (mean, normalized)`);
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    const text = 'The quick brown fox jumps over the lazy dog.';
    assert(
      same(m.decoded, { 'bert-tiny': text.toLowerCase(), ...Object.fromEntries(names.map((n) => [n, text])) }),
      `tokenizers do not round-trip: ${JSON.stringify(m.decoded)}`,
    );
    for (const name of names) {
      const [g, r] = [m.gen[name], c.gen[name]];
      assert(g.inputs.includes('past_key_values.0.key'), `${name} inputs ${g.inputs}`);
      assert(g.ids.length > g.prompt, `${name}: nothing generated: ${g.ids}`);
      assert(same(g.ids, r.ids), `${name} token ids: mlx ${g.ids}, cpu ${r.ids}`);
      assert(g.text === r.text, `${name} text: mlx ${JSON.stringify(g.text)}, cpu ${JSON.stringify(r.text)}`);
      assert(g.padded > 0, `${name}: the batch was not padded`);
      assert(same(g.batchIds, r.batchIds), `${name} batch ids: mlx ${g.batchIds}, cpu ${r.batchIds}`);
      assert(same(g.batchTexts, r.batchTexts), `${name} batch texts: mlx ${g.batchTexts}, cpu ${r.batchTexts}`);
      // The recipe's cache on the device: the same tokens, the pasts 'gpu-buffer' tensors.
      const k = d.gen[name];
      assert(
        same(g.pastLocations, ['cpu']) && same(k.pastLocations, ['gpu-buffer']),
        `${name} past locations: ${g.pastLocations}, ${k.pastLocations}`,
      );
      for (const f of ['ids', 'text', 'batchIds', 'batchTexts'])
        assert(same(k[f], r[f]), `${name} ${f} with presentsOnDevice: mlx ${JSON.stringify(k[f])}, cpu ${JSON.stringify(r[f])}`);
    }
    const g = m.gen[names[0]];
    return `embeddings ${m.dims.join('x')} within ${rawWorst.toExponential(1)}; ${names.join(', ')}: ${g.ids.length - g.prompt} tokens greedy and a left-padded batch of ${g.batchIds.length}, equal (and with the cache on the device)`;
  },
);

// text2text-generation: transformers.js's encoder-decoder loop (the encoder once, the merged
// decoder's use_cache_branch, the cross-attention cache kept from the first step) on both providers.
await step(
  `transformers.js ${transformersVersion}: text2text-generation (a torch-exported T5: encoder_model, decoder_model_merged) through mlx equals onnxruntime-node's CPU`,
  async () => {
    const failed = await seq2seqFixtures;
    if (failed) throw failed;
    writeFileSync(
      join(app, 'tjs-t5.mjs'),
      `import { env, pipeline } from '@huggingface/transformers';
import { mlx } from '@mlx/ort-ep';
env.allowRemoteModels = false;
env.localModelPath = process.argv[2];
const texts = ['translate English to German: The quick brown fox.', 'summarize: a small model runs on the machine in the node process'];
const out = {};
for (const ep of ['mlx', 'cpu']) {
  const t2t = await pipeline('text2text-generation', 't5-tiny', { dtype: 'fp32', session_options: { executionProviders: [ep === 'mlx' ? mlx() : 'cpu'] } });
  const results = await t2t(texts, { max_new_tokens: 12, do_sample: false });
  const one = t2t.tokenizer(texts[0]);
  const ids = (await t2t.model.generate({ ...one, max_new_tokens: 12, do_sample: false })).tolist()[0].map(Number);
  const sessions = t2t.model.sessions;
  out[ep] = {
    handlers: Object.values(sessions).map((s) => s.handler.constructor.name),
    inputs: sessions.decoder_model_merged.inputNames,
    texts: results.map((r) => r.generated_text),
    ids,
    source: one.input_ids.dims[1],
  };
  await t2t.dispose();
}
console.log('RESULT ' + JSON.stringify(out));
`,
    );
    const { stdout, stderr } = await nodeAsync(['tjs-t5.mjs', tjsModels]);
    const line = stdout.split('\n').find((l) => l.startsWith('RESULT '));
    assert(line, `tjs-t5.mjs: ${stdout}${stderr}`);
    assert(!/removing requested execution provider/.test(stderr), `onnxruntime fell back: ${stderr}`);
    const { mlx: m, cpu: c } = JSON.parse(line.slice(7));
    assert(m.handlers.length === 2 && m.handlers.every((h) => h === 'MlxSessionHandler'), `mlx sessions' handlers: ${m.handlers}`);
    assert(
      c.handlers.every((h) => h !== 'MlxSessionHandler'),
      `cpu sessions' handlers: ${c.handlers}`,
    );
    assert(m.inputs.includes('use_cache_branch') && m.inputs.includes('past_key_values.0.encoder.key'), `decoder inputs ${m.inputs}`);
    // The decoder start token (0), then 12 tokens: the model's random weights never choose </s>.
    assert(m.ids.length === 13 && m.ids[0] === 0, `t5-tiny ids ${m.ids}`);
    assert(JSON.stringify(m.ids) === JSON.stringify(c.ids), `t5-tiny token ids: mlx ${m.ids}, cpu ${c.ids}`);
    assert(m.texts.length === 2 && m.texts.every((t) => t.length > 0), `t5-tiny texts ${JSON.stringify(m.texts)}`);
    assert(
      JSON.stringify(m.texts) === JSON.stringify(c.texts),
      `t5-tiny texts: mlx ${JSON.stringify(m.texts)}, cpu ${JSON.stringify(c.texts)}`,
    );
    return `t5-tiny: ${m.ids.length - 1} tokens greedy from a ${m.source}-token source and a batch of 2 texts, equal`;
  },
);

// automatic-speech-recognition: transformers.js's Whisper path (its log-mel features, the forced
// <|startoftranscript|> <|notimestamps|> prompt, the merged decoder) on both providers, over a
// sentence synthesized by eSpeak NG (packages/ort-ep/test/fixtures/speech, 16 kHz PCM).
await step(
  `transformers.js ${transformersVersion}: automatic-speech-recognition (a torch-exported Whisper-shaped model) through mlx equals onnxruntime-node's CPU`,
  async () => {
    const failed = await seq2seqFixtures;
    if (failed) throw failed;
    writeFileSync(
      join(app, 'tjs-asr.mjs'),
      `import { readFileSync } from 'node:fs';
import { env, pipeline } from '@huggingface/transformers';
import { mlx } from '@mlx/ort-ep';
env.allowRemoteModels = false;
env.localModelPath = process.argv[2];
// A mono 16-bit PCM WAV at 16 kHz: its data chunk as floats in [-1, 1).
const wav = readFileSync(process.argv[3]);
let at = 12;
while (wav.toString('ascii', at, at + 4) !== 'data') at += 8 + wav.readUInt32LE(at + 4);
const pcm = new Int16Array(wav.buffer.slice(wav.byteOffset + at + 8, wav.byteOffset + at + 8 + wav.readUInt32LE(at + 4)));
const audio = Float32Array.from(pcm, (v) => v / 32768);
const out = {};
for (const ep of ['mlx', 'cpu']) {
  const asr = await pipeline('automatic-speech-recognition', 'whisper-tiny', { dtype: 'fp32', session_options: { executionProviders: [ep === 'mlx' ? mlx() : 'cpu'] } });
  const { text } = await asr(audio, { max_new_tokens: 12 });
  const features = (await asr.processor(audio)).input_features;
  const ids = (await asr.model.generate({ inputs: features, max_new_tokens: 12 })).tolist()[0].map(Number);
  out[ep] = { handlers: Object.values(asr.model.sessions).map((s) => s.handler.constructor.name), text, ids, dims: features.dims };
  await asr.dispose();
}
console.log('RESULT ' + JSON.stringify(out));
`,
    );
    const { stdout, stderr } = await nodeAsync([
      'tjs-asr.mjs',
      tjsModels,
      join(root, 'packages', 'ort-ep', 'test', 'fixtures', 'speech', 'fox.wav'),
    ]);
    const line = stdout.split('\n').find((l) => l.startsWith('RESULT '));
    assert(line, `tjs-asr.mjs: ${stdout}${stderr}`);
    assert(!/removing requested execution provider/.test(stderr), `onnxruntime fell back: ${stderr}`);
    const { mlx: m, cpu: c } = JSON.parse(line.slice(7));
    assert(m.handlers.length === 2 && m.handlers.every((h) => h === 'MlxSessionHandler'), `mlx sessions' handlers: ${m.handlers}`);
    assert(
      c.handlers.every((h) => h !== 'MlxSessionHandler'),
      `cpu sessions' handlers: ${c.handlers}`,
    );
    assert(JSON.stringify(m.dims) === '[1,80,3000]', `whisper-tiny input_features dims ${m.dims}`);
    // The forced prompt, then 12 tokens (the random weights never choose <|endoftext|>).
    assert(m.ids.length === 14 && m.ids[0] === 380 && m.ids[1] === 383, `whisper-tiny ids ${m.ids}`);
    assert(JSON.stringify(m.ids) === JSON.stringify(c.ids), `whisper-tiny token ids: mlx ${m.ids}, cpu ${c.ids}`);
    assert(m.text.length > 0 && m.text === c.text, `whisper-tiny text: mlx ${JSON.stringify(m.text)}, cpu ${JSON.stringify(c.text)}`);
    return `whisper-tiny on eSpeak NG's sentence: ${m.ids.length - 2} tokens after the forced prompt, the pipeline's text equal`;
  },
);

// webpack, ESM and CommonJS, the native packages external. webpack writes a module's import.meta.url
// as its source's URL at build time: the bundles are built in a folder that is deleted before they
// run, from a working folder that holds nothing, so only the packages beside each bundle are found.
await step(
  `webpack ${webpackVersion} bundles (ESM and CommonJS) of an app, built elsewhere, native packages external, run gpt2-tiny`,
  () => {
    const build = join(work, 'webpack-build');
    mkdirSync(build, { recursive: true });
    // Reached through a link that goes with the folder (resolve.symlinks off keeps the link's path).
    symlinkSync(join(app, 'node_modules'), join(build, 'node_modules'));
    const body = (esm) => `${
      esm
        ? "import * as ort from 'onnxruntime-node';\nimport '@mlx/ort-ep';\nimport { readTestCase } from '@mlx/ort-ep/internal';\nimport { dirname } from 'node:path';"
        : "const ort = require('onnxruntime-node');\nrequire('@mlx/ort-ep');\nconst { readTestCase } = require('@mlx/ort-ep/internal');\nconst { dirname } = require('node:path');"
    }
${gpt2Check}
gpt2Check(ort, readTestCase, dirname(process.argv[1])).then((r) => console.log('RESULT ' + JSON.stringify(r)));
`;
    writeFileSync(join(build, 'src.mjs'), body(true));
    writeFileSync(join(build, 'src.cjs'), body(false));
    writeFileSync(
      join(build, 'build.cjs'),
      `const webpack = require('webpack');
const config = (esm) => ({
  mode: 'production',
  target: 'node20',
  context: __dirname,
  entry: esm ? './src.mjs' : './src.cjs',
  resolve: { symlinks: false },
  output: { path: __dirname + '/out', filename: esm ? 'app.mjs' : 'app.cjs', ...(esm ? { module: true, chunkFormat: 'module', library: { type: 'module' } } : {}) },
  experiments: { outputModule: esm },
  externals: [({ request }, callback) => (/^(onnxruntime-node|koffi|@mlx\\/sys-.*)$/.test(request) ? callback(null, (esm ? 'module ' : 'commonjs ') + request) : callback())],
  optimization: { minimize: false },
  devtool: false,
});
webpack([config(true), config(false)], (err, stats) => {
  if (err || stats.hasErrors() || stats.hasWarnings()) {
    console.error(err ?? stats.toString('errors-warnings'));
    process.exit(1);
  }
});
`,
    );
    execFileSync(process.execPath, ['build.cjs'], { cwd: build, env: cleanEnv(), stdio: 'pipe' });
    const runs = [];
    for (const esm of [true, false]) {
      const file = esm ? 'app.mjs' : 'app.cjs';
      const run = join(work, esm ? 'webpack-esm' : 'webpack-cjs');
      mkdirSync(join(run, 'node_modules', '@mlx'), { recursive: true });
      for (const ext of ['onnxruntime-node', 'koffi', '@mlx/sys-linux-x64-gnu'])
        symlinkSync(join(app, 'node_modules', ext), join(run, 'node_modules', ext));
      cpSync(join(build, 'out', file), join(run, file));
      cpSync(join(app, 'model.onnx'), join(run, 'model.onnx'));
      cpSync(join(app, 'test_data_set_0'), join(run, 'test_data_set_0'), { recursive: true });
      runs.push([run, file]);
    }
    rmSync(build, { recursive: true, force: true });
    const sizes = [];
    for (const [run, file] of runs) {
      const r = spawnSync(process.execPath, [join(run, file)], { cwd: work, encoding: 'utf8', env: cleanEnv(), timeout: 120_000 });
      const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
      assert(line, `${file}: ${r.stdout}${r.stderr}`);
      const res = JSON.parse(line.slice(7));
      assert(res.handler === 'MlxSessionHandler' && res.worst <= 0, `${file}: ${line}`);
      sizes.push(`${file.endsWith('mjs') ? 'ESM' : 'CJS'} ${(statSync(join(run, file)).size / 2 ** 20).toFixed(1)} MiB`);
    }
    return sizes.join(', ');
  },
);

await step(`TypeScript ${ts7Version} with the settings its tsc --init writes (types [], esnext), skipLibCheck off`, () => {
  const dir = join(app, 'ts7');
  mkdirSync(dir, { recursive: true });
  const tsc = join(app, 'node_modules/ts7/bin/tsc');
  execFileSync(process.execPath, [tsc, '--init'], { cwd: dir, env: cleanEnv() });
  const config = readFileSync(join(dir, 'tsconfig.json'), 'utf8');
  assert(/"skipLibCheck": true/.test(config) && /"types": \[\]/.test(config), `tsc --init wrote ${config}`);
  writeFileSync(join(dir, 'tsconfig.json'), config.replace('"skipLibCheck": true', '"skipLibCheck": false'));
  writeFileSync(
    join(dir, 'index.ts'),
    `import * as ort from 'onnxruntime-node';
import { mlx, MlxSession, OrtMlxError } from '@mlx/ort-ep';
import * as internal from '@mlx/ort-ep/internal';
import * as mx from '@mlx/core';
import * as kernels from '@mlx/kernels';
import * as sys from '@mlx/sys';
export const options: ort.InferenceSession.SessionOptions = { executionProviders: [mlx({ device: 'cpu' }), 'cpu'] };
export const used = [MlxSession, OrtMlxError, internal, mx.array, kernels, sys.loadMlxC];
`,
  );
  const r = spawnSync(process.execPath, [tsc, '-p', '.', '--noEmit'], { cwd: dir, encoding: 'utf8', env: cleanEnv() });
  assert(r.status === 0, `tsc ${ts7Version}: ${r.stdout}${r.stderr}`);
  return execFileSync(process.execPath, [tsc, '--version'], { cwd: dir, encoding: 'utf8' }).trim();
});

await step('importing or requiring the four packages loads nothing native; --help and --version neither', () => {
  writeFileSync(
    join(app, 'imports.mjs'),
    `await import('@mlx/sys'); await import('@mlx/core'); await import('@mlx/kernels'); const ep = await import('@mlx/ort-ep');
     const sys = await import('@mlx/sys');
     const maps = (await import('node:fs')).readFileSync('/proc/self/maps', 'utf8');
     console.log(JSON.stringify({ loaded: sys.isMlxCLoaded(), native: /koffi|libmlx/.test(maps), exports: typeof ep.mlx }));`,
  );
  const r = node(['imports.mjs']);
  assert(r.stdout.trim() === JSON.stringify({ loaded: false, native: false, exports: 'function' }), r.stdout);
  // require() of each package (CommonJS gets the ES module itself: one instance for both).
  writeFileSync(
    join(app, 'imports.cjs'),
    `const sys = require('@mlx/sys'), core = require('@mlx/core'), kernels = require('@mlx/kernels'), ep = require('@mlx/ort-ep');
     const maps = require('node:fs').readFileSync('/proc/self/maps', 'utf8');
     const before = { loaded: sys.isMlxCLoaded(), native: /koffi|libmlx/.test(maps) };
     const same = import('@mlx/core').then((m) => m.array === core.array);
     same.then((same) => console.log(JSON.stringify({ before, same, types: [typeof sys.loadMlxC, typeof core.array, typeof kernels.scaledDotProductAttention, typeof ep.mlx], sum: core.sum(core.array([1, 2, 3])).item() })));`,
  );
  const c = node(['imports.cjs']);
  assert(
    c.stdout.trim() ===
      JSON.stringify({
        before: { loaded: false, native: false },
        same: true,
        types: ['function', 'function', 'function', 'function'],
        sum: 6,
      }),
    `require(): ${c.stdout}${c.stderr}`,
  );
  // The CLI's --help and --version with a library that cannot load: they never try.
  const bin = join(app, 'node_modules/.bin/mlx-ort');
  const env = { MLX_C_LIBRARY: '/nonexistent/libmlxc.so' };
  assert(/^usage:\n {2}mlx-ort run/.test(node([bin, '--help'], env).stdout), 'mlx-ort --help');
  const version = JSON.parse(readFileSync(join(app, 'node_modules/@mlx/ort-ep/package.json'), 'utf8')).version;
  assert(node([bin, '--version'], env).stdout.trim() === version, 'mlx-ort --version');
  assert(/^ {2}mlx-ort run/.test(node([bin, 'run', '--help'], env).stdout), 'mlx-ort run --help');
});

await step("['mlx', 'cpu'] without MLX falls back with onnxruntime's warning; ['mlx'] fails naming the fix", () => {
  writeFileSync(
    join(app, 'fallback.mjs'),
    `import * as ort from 'onnxruntime-node'; import { mlx } from '@mlx/ort-ep';
     const eps = JSON.parse(process.argv[2]).map((e) => (e === 'mlx()' ? mlx() : e));
     try {
       const s = await ort.InferenceSession.create('model.onnx', { executionProviders: eps });
       console.log('HANDLER ' + s.handler.constructor.name);
     } catch (e) { console.log('ERROR ' + e.message); }`,
  );
  // MLX_C_LIBRARY is authoritative: a missing file means no MLX.
  const env = { MLX_C_LIBRARY: '/nonexistent/libmlxc.so' };
  const fb = node(['fallback.mjs', '["mlx()","cpu"]'], env);
  assert(/HANDLER (?!MlxSessionHandler)/.test(fb.stdout), `fallback: ${fb.stdout}`);
  assert(/removing requested execution provider "mlx" .*could not load the MLX C library/.test(fb.stderr), `warning: ${fb.stderr}`);
  const only = node(['fallback.mjs', '["mlx"]'], env);
  assert(/ERROR .*\[mlx\] MlxLibraryNotFoundError: could not load the MLX C library/.test(only.stdout), only.stdout);
  assert(/npm install @mlx\/sys-linux-x64-gnu/.test(only.stdout) && /MLX_C_LIBRARY/.test(only.stdout), `advice: ${only.stdout}`);
  const hint = node(['fallback.mjs', '["MLX"]']);
  assert(/'MLX' is not an execution provider name: write 'mlx'/.test(hint.stdout), hint.stdout);
});

// Worker threads from the tarballs, in the three patterns that broke before: the main thread
// first and then a worker, workers one after another, workers at once (and the main thread again);
// each runs gpt2-tiny through ['mlx'] against its reference outputs. And a device that cannot be
// made here (device 'gpu' on MLX's CPU build): an OrtMlxError at create() naming the package.
await step("worker threads (main then worker, one after another, at once) and device 'gpu' without a GPU build", () => {
  writeFileSync(
    join(app, 'workers.mjs'),
    `import { Worker, isMainThread, parentPort } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import { mlx } from '@mlx/ort-ep';
import { readTestCase } from '@mlx/ort-ep/internal';
${gpt2Check}
const once = () => gpt2Check(ort, readTestCase, '.');
const inWorker = () =>
  new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url));
    w.once('message', resolve);
    w.once('error', reject);
    w.once('exit', (code) => code && reject(new Error('worker exit ' + code)));
  });
if (!isMainThread) parentPort.postMessage(await once());
else if (process.argv[2] === 'gpu') {
  try {
    await ort.InferenceSession.create('model.onnx', { executionProviders: [mlx({ device: 'gpu' })] });
    console.log('CREATED');
  } catch (e) {
    console.log('ERROR ' + e.constructor.name + ': ' + e.message);
  }
} else {
  const results = [await once(), await inWorker(), await inWorker(), await inWorker()];
  results.push(...(await Promise.all([inWorker(), inWorker()])), await once());
  console.log('RESULT ' + JSON.stringify(results));
}
`,
  );
  const r = node(['workers.mjs']);
  const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
  assert(line, `workers: ${r.stdout}${r.stderr}`);
  const results = JSON.parse(line.slice(7));
  assert(results.length === 7, `workers: ${line}`);
  for (const x of results) assert(x.handler === 'MlxSessionHandler' && x.worst <= 0, `workers: ${line}`);
  const gpu = node(['workers.mjs', 'gpu']);
  assert(
    /^ERROR OrtMlxError: device 'gpu' was asked for, .*install @mlx\/sys-linux-x64-cuda13/m.test(gpu.stdout),
    `device 'gpu': ${gpu.stdout}${gpu.stderr}`,
  );
  return '7 runs in 6 threads; ' + gpu.stdout.trim().slice(6, 60) + '...';
});

await step('mlx-ort: check, run --inputs --compare, bad options, --compare without onnxruntime-node, bench, demo', () => {
  const bin = join(app, 'node_modules/.bin/mlx-ort');
  const check = node([bin, 'check', 'model.onnx']);
  assert(/^model\.onnx: \d+ nodes, \d+ claimed by the MLX provider, 0 not/.test(check.stdout), check.stdout);
  const run = node([bin, 'run', 'model.onnx', '--runs', '1', '--inputs', 'test_data_set_0', '--compare']);
  for (const which of ['expected', 'onnxruntime-node']) {
    const m = new RegExp(`logits: largest \\|mlx - ${which}\\| = (\\S+)`).exec(run.stdout);
    assert(m && Number(m[1]) < 1e-3, `run vs ${which}: ${run.stdout}`);
  }
  const bad = node([bin, 'run', 'model.onnx', '--device', 'gpuu'], {}, 2);
  assert(/--device must be cpu or gpu, got 'gpuu'/.test(bad.stderr), bad.stderr);
  node([bin, 'run', 'model.onnx', '--runs', 'abc'], {}, 2);
  // onnxruntime-node made unresolvable for this process only.
  writeFileSync(
    join(app, 'no-ort-node.cjs'),
    `const M = require('node:module'); const orig = M._resolveFilename;
     M._resolveFilename = function (req, ...a) { if (req === 'onnxruntime-node') { const e = new Error("Cannot find module 'onnxruntime-node'"); e.code = 'MODULE_NOT_FOUND'; throw e; } return orig.call(this, req, ...a); };`,
  );
  const missing = node(['--require', './no-ort-node.cjs', bin, 'run', 'model.onnx', '--compare'], {}, 1);
  assert(/--compare runs onnxruntime-node, which is not installed: `npm install onnxruntime-node`/.test(missing.stderr), missing.stderr);
  // mlx-ort bench from the tarballs: its worker processes run the installed dist.
  const bench = node([bin, 'bench', 'model.onnx', '--runs', '3', '--rounds', '1']);
  assert(/^\| mlx \(cpu\) \|( [\d.]+ \|){5}$/m.test(bench.stdout), `bench: ${bench.stdout}`);
  assert(/^\| onnxruntime-node \(cpu\) \|( [\d.]+ \|){4} 1\.00 \|$/m.test(bench.stdout), `bench: ${bench.stdout}`);
  // mlx-ort demo without the model package says what to install.
  writeFileSync(
    join(app, 'no-vad.cjs'),
    `const M = require('node:module'); const orig = M._resolveFilename;
     M._resolveFilename = function (req, ...a) { if (req.startsWith('@ricky0123/vad-web')) { const e = new Error("Cannot find module '" + req + "'"); e.code = 'MODULE_NOT_FOUND'; throw e; } return orig.call(this, req, ...a); };`,
  );
  const demo = node([bin, 'demo']);
  assert(/largest difference in speech probability: \S+ over \d+ frames/.test(demo.stdout), `demo: ${demo.stdout}`);
  const noVad = node(['--require', './no-vad.cjs', bin, 'demo'], {}, 1);
  assert(/which is not installed here: `npm install onnxruntime-node @ricky0123\/vad-web@0\.0\.31`/.test(noVad.stderr), noVad.stderr);
});

await step('the loader: CUDA package skipped without a driver, MLX_BACKEND=cuda authoritative, version check', () => {
  const cuda = join(app, 'node_modules/@mlx/sys-linux-x64-cuda13');
  const files = readdirSync(join(cuda, 'lib')).sort();
  for (const f of ['libmlx.so', 'libmlxc.so']) assert(files.includes(f), `CUDA package lib/: ${files}`);
  // MLX's run-time kernel compiler reads CCCL's headers from ../include/cccl beside lib/.
  assert(existsSync(join(cuda, 'include/cccl/cuda/std/tuple')), 'CUDA package without include/cccl (NVRTC fails on the first kernel)');
  assert(existsSync(join(cuda, 'licenses/CCCL-LICENSE')), 'CUDA package without the CCCL licence');
  writeFileSync(
    join(app, 'which.mjs'),
    `import * as sys from '@mlx/sys';
     try { console.log('PATH ' + sys.loadMlxC().path); } catch (e) { console.log('ERROR ' + e.message.replace(/\\n/g, ' | ')); }`,
  );
  const auto = node(['which.mjs']);
  let driver = false;
  try {
    driver = execFileSync('ldconfig', ['-p'], { encoding: 'utf8' }).includes('libcuda.so.1');
  } catch {}
  if (!driver) {
    assert(/PATH .*node_modules\/@mlx\/sys-linux-x64-gnu\/lib\/libmlxc\.so/.test(auto.stdout), `auto: ${auto.stdout}`);
    const forced = node(['which.mjs'], { MLX_BACKEND: 'cuda' });
    const cudaFailure =
      /ERROR could not load the MLX C library\..*sys-linux-x64-cuda13\/lib\/libmlxc\.so \(platform package @mlx\/sys-linux-x64-cuda13\): .*lib\w+\.so\.\d+: cannot open shared object file/;
    assert(cudaFailure.test(forced.stdout), `cuda: ${forced.stdout}`);
    assert(!/sys-linux-x64-gnu/.test(forced.stdout.split('Fix:')[0]), `MLX_BACKEND=cuda tried the CPU package: ${forced.stdout}`);
  }
  const cpu = node(['which.mjs'], { MLX_BACKEND: 'cpu' });
  assert(/PATH .*sys-linux-x64-gnu\/lib\/libmlxc\.so/.test(cpu.stdout), `cpu: ${cpu.stdout}`);
  // A platform package of another version is refused.
  const pj = join(app, 'node_modules/@mlx/sys-linux-x64-gnu/package.json');
  const original = readFileSync(pj, 'utf8');
  try {
    writeFileSync(pj, original.replace(/"version": "[^"]+"/, '"version": "0.0.0-other"'));
    const old = node(['which.mjs'], { MLX_BACKEND: 'cpu' });
    assert(/ERROR .*@mlx\/sys-linux-x64-gnu\): version 0\.0\.0-other, but @mlx\/sys is/.test(old.stdout), `version: ${old.stdout}`);
  } finally {
    writeFileSync(pj, original);
  }
  return driver ? 'a CUDA driver is present: the CUDA package may load' : `CUDA package lib/: ${files.join(' ')}`;
});

const secs = ((performance.now() - t0) / 1000).toFixed(1);
const failed = results.filter((r) => !r.ok).length;
console.log(`consumer test: ${results.length - failed} passed, ${failed} failed (${secs} s)${keep ? `; folder ${work}` : ''}`);
mkdirSync(join(root, 'reports'), { recursive: true });
writeFileSync(
  join(root, 'reports', 'consumer-test.json'),
  JSON.stringify({ passed: results.length - failed, failed, secs: Number(secs), results }, null, 2),
);
if (!keep) rmSync(work, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
