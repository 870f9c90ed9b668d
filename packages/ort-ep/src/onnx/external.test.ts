// External data: files beside the model (ranges, subfolders), data handed over by the caller,
// and the refusals that keep a model file from reading outside its folder.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { encodeRaw, externalFields, modelBytes, tensor, valueInfo } from '../../test/helpers/proto.js';
import { OnnxLoadError } from '../errors.js';
import { confineLocation, materializeExternalData } from './external.js';
import { OnnxDataType as T } from './ir.js';
import { decodeModel } from './model.js';

const root = mkdtempSync(join(tmpdir(), 'onnx-external-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function externalTensor(name: string, dims: number[], entries: Record<string, string>, dtype = T.FLOAT) {
  return tensor(name, dtype, dims, externalFields(entries));
}
const modelWith = (...initializers: ReturnType<typeof externalTensor>[]) =>
  modelBytes({
    initializers,
    inputs: initializers.map((t) => valueInfo(t.name, t.dataType, t.dims.map(Number))),
    outputs: [valueInfo(initializers[0].name)],
  });

/** A folder holding model.onnx and the given files. */
function folder(name: string, bytes: Uint8Array, files: Record<string, Uint8Array> = {}): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'model.onnx'), bytes);
  for (const [f, b] of Object.entries(files)) {
    mkdirSync(join(dir, f, '..'), { recursive: true });
    writeFileSync(join(dir, f), b);
  }
  return join(dir, 'model.onnx');
}

// 4096 bytes of padding, then six floats 0..5, then two int64s.
const blob = new Uint8Array(4096 + 24 + 16);
blob.set(encodeRaw(T.FLOAT, [0, 1, 2, 3, 4, 5]), 4096);
blob.set(encodeRaw(T.INT64, [7n, -9n]), 4096 + 24);

describe('external data beside the model', () => {
  it('reads ranges (offset, length, or to the end of the file) and subfolders', () => {
    const bytes = modelWith(
      externalTensor('w', [2, 3], { location: 'weights.bin', offset: '4096', length: '24' }),
      externalTensor('k', [2], { location: 'sub/../weights.bin', offset: String(4096 + 24) }, T.INT64),
      externalTensor('d', [1], { location: './data/one.bin' }),
    );
    const path = folder('ok', bytes, { 'weights.bin': blob, 'data/one.bin': encodeRaw(T.FLOAT, [42]) });
    const g = decodeModel(bytes, { modelPath: path }).graph;
    expect(g.initializers.get('w')).toEqual({ dtype: T.FLOAT, dims: [2, 3], data: Float32Array.of(0, 1, 2, 3, 4, 5), name: 'w' });
    expect(g.initializers.get('k')!.data).toEqual(BigInt64Array.of(7n, -9n));
    expect(g.initializers.get('d')!.data).toEqual(Float32Array.of(42));
    expect(g.inputsWithDefaults).toEqual(new Set(['w', 'k', 'd']));
  });

  it('closes the files it opened', () => {
    if (!existsSync('/proc/self/fd')) return;
    const bytes = modelWith(externalTensor('w', [6], { location: 'weights.bin', offset: '4096', length: '24' }));
    const path = folder('fds', bytes, { 'weights.bin': blob });
    const before = readdirSync('/proc/self/fd').length;
    for (let i = 0; i < 20; i++) decodeModel(bytes, { modelPath: path });
    expect(() =>
      decodeModel(modelWith(externalTensor('w', [7], { location: 'weights.bin', offset: '4096', length: '100' })), { modelPath: path }),
    ).toThrow();
    expect(readdirSync('/proc/self/fd').length).toBe(before);
  });

  it('names the tensor and the location when the file is missing', () => {
    const bytes = modelWith(externalTensor('big.weight', [6], { location: 'missing.bin' }));
    const path = folder('missing', bytes);
    expect(() => decodeModel(bytes, { modelPath: path })).toThrow(OnnxLoadError);
    expect(() => decodeModel(bytes, { modelPath: path })).toThrow(
      /^model\.onnx: initializer 'big\.weight': external data file 'missing\.bin' not found/,
    );
  });

  it('refuses ranges outside the file and lengths that do not fit the dims', () => {
    const path = folder('ranges', new Uint8Array(), { 'weights.bin': blob });
    const short = modelWith(externalTensor('w', [6], { location: 'weights.bin', offset: String(blob.length - 8), length: '24' }));
    expect(() => decodeModel(short, { modelPath: path })).toThrow(
      `initializer 'w': external data range [${blob.length - 8}, ${blob.length + 16}) lies outside 'weights.bin' (${blob.length} bytes): truncated external data file?`,
    );
    const wrong = modelWith(externalTensor('w', [2, 2], { location: 'weights.bin', offset: '4096', length: '24' }));
    expect(() => decodeModel(wrong, { modelPath: path })).toThrow(
      "initializer 'w': external data (weights.bin) has 24 bytes, but float32 [2, 2] needs 16",
    );
    const bad = modelWith(externalTensor('w', [1], { location: 'weights.bin', offset: '-4' }));
    expect(() => decodeModel(bad, { modelPath: path })).toThrow("external data offset '-4' is not a non-negative integer");
    const noLoc = modelWith(externalTensor('w', [1], { offset: '0' }));
    expect(() => decodeModel(noLoc, { modelPath: path })).toThrow(
      "initializer 'w': data_location is EXTERNAL but external_data has no 'location'",
    );
  });
});

describe('locations confined to the model folder', () => {
  const outside = join(root, 'secret.bin');
  writeFileSync(outside, encodeRaw(T.FLOAT, [1, 2, 3, 4, 5, 6]));

  it.each([
    ['../secret.bin', "leads out of the model's folder"],
    ['data/../../secret.bin', "leads out of the model's folder"],
    [outside, 'is an absolute path'],
    ['/etc/passwd', 'is an absolute path'],
    ['C:\\weights.bin', 'is an absolute path'],
    ['\\\\server\\share\\w.bin', 'is an absolute path'],
    ['file:///etc/passwd', 'is an absolute path'],
    ['.', "names the model's folder itself"],
  ])('refuses %s', (location, why) => {
    const bytes = modelWith(externalTensor('w', [6], { location }));
    const path = folder('confined', bytes);
    expect(() => decodeModel(bytes, { modelPath: path })).toThrow(
      `initializer 'w': external data location '${location}' is refused: it ${why}`,
    );
    // The same holds for models from bytes: the location is checked before any lookup.
    expect(() => decodeModel(bytes, { externalData: [{ path: location, data: new Uint8Array(24) }] })).toThrow('is refused');
  });

  it('refuses a symbolic link that leads out of the folder', () => {
    const bytes = modelWith(externalTensor('w', [6], { location: 'link.bin' }));
    const path = folder('symlink', bytes);
    symlinkSync(outside, join(root, 'symlink', 'link.bin'));
    expect(() => decodeModel(bytes, { modelPath: path })).toThrow(
      /external data location 'link\.bin' is refused: it resolves \(through a symbolic link\) to .*secret\.bin, outside the model's folder/,
    );
  });

  it('confineLocation normalizes what it accepts', () => {
    expect(confineLocation('./a//b/./c.bin')).toEqual(['a', 'b', 'c.bin']);
    expect(confineLocation('a\\b.bin')).toEqual(['a', 'b.bin']);
    expect(confineLocation('a/../b.bin')).toEqual(['b.bin']);
    expect(typeof confineLocation('')).toBe('string');
  });
});

describe('external data given by the caller (models from bytes)', () => {
  const bytes = modelWith(
    externalTensor('w', [6], { location: 'weights.bin', offset: '4096', length: '24' }),
    externalTensor('k', [2], { location: 'k.bin' }, T.INT64),
  );
  const kBytes = encodeRaw(T.INT64, [7n, -9n]);

  it('takes Uint8Array, ArrayBuffer and file paths, matching normalized locations', () => {
    const file = join(root, 'given-weights.bin');
    writeFileSync(file, blob);
    for (const data of [blob, blob.slice().buffer, file]) {
      const g = decodeModel(bytes, {
        externalData: [
          { path: './weights.bin', data },
          { path: 'k.bin', data: kBytes },
        ],
      }).graph;
      expect(g.initializers.get('w')!.data).toEqual(Float32Array.of(0, 1, 2, 3, 4, 5));
      expect(g.initializers.get('k')!.data).toEqual(BigInt64Array.of(7n, -9n));
    }
  });

  it('says what is missing and how to give it', () => {
    expect(() => decodeModel(bytes, { externalData: [{ path: 'k.bin', data: kBytes }] })).toThrow(
      "initializer 'w': external data file 'weights.bin' was not given; the model was loaded from bytes, so there is no folder to read it from (pass { path: 'weights.bin', data } in externalData; given: 'k.bin')",
    );
  });

  it('refuses a Blob until it is read, and materializeExternalData reads it', async () => {
    const specs = [
      { path: 'weights.bin', data: new Blob([blob]) },
      { path: 'k.bin', data: kBytes },
    ];
    expect(() => decodeModel(bytes, { externalData: specs })).toThrow("external data 'weights.bin' is a Blob; read it first");
    const g = decodeModel(bytes, { externalData: await materializeExternalData(specs) }).graph;
    expect(g.initializers.get('w')!.data).toEqual(Float32Array.of(0, 1, 2, 3, 4, 5));
  });

  it('prefers the given data over the folder when both exist', () => {
    const path = folder('both', bytes, { 'weights.bin': new Uint8Array(blob.length), 'k.bin': kBytes });
    const g = decodeModel(bytes, { modelPath: path, externalData: [{ path: 'weights.bin', data: blob }] }).graph;
    expect(g.initializers.get('w')!.data).toEqual(Float32Array.of(0, 1, 2, 3, 4, 5));
    expect(g.initializers.get('k')!.data).toEqual(BigInt64Array.of(7n, -9n));
  });
});
