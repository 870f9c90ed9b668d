// External tensor data (data_location = EXTERNAL): bytes in a file beside the model, or given
// by the caller (onnxruntime-common's `externalData` option) when the model comes from bytes.
// Locations are confined to the model's folder: absolute paths, `..` that climbs out of it and
// symbolic links that lead out of it are refused, since a model file is untrusted input.
import { closeSync, constants, fstatSync, openSync, readSync, realpathSync } from 'node:fs';
import { join, sep } from 'node:path';
import { OnnxLoadError, messageOf } from '../errors.js';
import type { ExternalDataSpec } from './ir.js';

/** A location as path segments inside the model's folder, or a sentence saying why it is refused. */
export function confineLocation(location: string): string[] | string {
  if (location === '') return 'the location is empty';
  if (/^([\\/]|[a-zA-Z]:|[a-zA-Z][a-zA-Z0-9+.-]*:\/\/)/.test(location))
    return "it is an absolute path; locations must be relative to the model's folder";
  if (location.includes('\0')) return 'it contains a NUL character';
  const out: string[] = [];
  for (const seg of location.split(/[\\/]/)) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') {
      if (!out.length) return "it leads out of the model's folder (..)";
      out.pop();
    } else out.push(seg);
  }
  return out.length ? out : "it names the model's folder itself, not a file";
}

function parseCount(v: string | undefined, key: string, where: string): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\s*\d+\s*$/.test(v) || !Number.isSafeInteger(Number(v)))
    throw new OnnxLoadError(`${where}: external data ${key} '${v}' is not a non-negative integer`);
  return Number(v);
}

/**
 * Makes the zero-filled buffer a file's bytes are read into. The session passes one whose pages
 * are populated up front (@mlx/core's populatedBytes): reading hundreds of megabytes into fresh
 * memory otherwise faults each page in on its own.
 */
export type HostBytes = (nbytes: number) => Uint8Array;
const plainBytes: HostBytes = (n) => new Uint8Array(n);

interface OpenFile {
  fd: number;
  size: number;
}

/** Reads external data ranges for one decodeModel call; close() releases the files it opened. */
export class ExternalDataSource {
  private readonly files = new Map<string, OpenFile>();
  private readonly given = new Map<string, ExternalDataSpec>();

  /** `hostBytes` allocates the buffers ranges are read into (by default plain Uint8Arrays). */
  constructor(
    private readonly modelDir?: string,
    externalData: readonly (ExternalDataSpec | string)[] = [],
    private readonly hostBytes: HostBytes = plainBytes,
  ) {
    for (const entry of externalData) {
      // onnxruntime-common also takes a bare path: the file of that name, read from that path.
      const spec = typeof entry === 'string' ? { path: entry, data: entry } : entry;
      const segs = confineLocation(spec.path);
      this.given.set(typeof segs === 'string' ? spec.path : segs.join('/'), spec);
    }
  }

  /** The bytes a tensor's external_data entries point at; `where` names the tensor in messages. */
  read(where: string, entries: readonly { key: string; value: string }[]): Uint8Array {
    const kv = new Map(entries.map((e) => [e.key, e.value]));
    const location = kv.get('location');
    if (location === undefined) throw new OnnxLoadError(`${where}: data_location is EXTERNAL but external_data has no 'location'`);
    const segs = confineLocation(location);
    if (typeof segs === 'string') throw new OnnxLoadError(`${where}: external data location '${location}' is refused: ${segs}`);
    const offset = parseCount(kv.get('offset'), 'offset', where) ?? 0;
    const length = parseCount(kv.get('length'), 'length', where);
    const spec = this.given.get(segs.join('/'));
    if (spec) return this.fromSpec(spec, offset, length, where, location);
    if (this.modelDir === undefined) {
      const names = [...this.given.keys()];
      throw new OnnxLoadError(
        `${where}: external data file '${location}' was not given; the model was loaded from bytes, so there is no folder to read it from ` +
          `(pass { path: '${location}', data } in externalData${names.length ? `; given: ${names.map((n) => `'${n}'`).join(', ')}` : ''})`,
      );
    }
    const file = this.openInModelDir(segs, where, location);
    return this.range(file, offset, length, where, location);
  }

  private fromSpec(spec: ExternalDataSpec, offset: number, length: number | undefined, where: string, location: string): Uint8Array {
    const d = spec.data;
    if (typeof d === 'string') return this.range(this.open(d, where, location), offset, length, where, location);
    if (typeof Blob !== 'undefined' && d instanceof Blob) {
      throw new OnnxLoadError(
        `${where}: external data '${location}' is a Blob; read it first (materializeExternalData) since models are decoded synchronously`,
      );
    }
    const bytes =
      d instanceof Uint8Array
        ? d
        : ArrayBuffer.isView(d)
          ? new Uint8Array((d as ArrayBufferView).buffer, (d as ArrayBufferView).byteOffset, (d as ArrayBufferView).byteLength)
          : new Uint8Array(d as ArrayBufferLike);
    const end = length === undefined ? bytes.length : offset + length;
    if (offset > bytes.length || end > bytes.length) {
      throw new OnnxLoadError(`${where}: external data range [${offset}, ${end}) lies outside '${location}' (${bytes.length} bytes given)`);
    }
    return bytes.subarray(offset, end);
  }

  private openInModelDir(segs: string[], where: string, location: string): OpenFile {
    const dir = this.modelDir!;
    const full = join(dir, ...segs);
    let real: string;
    let realDir: string;
    try {
      realDir = realpathSync(dir);
      real = realpathSync(full);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      throw new OnnxLoadError(
        `${where}: external data file '${location}' ${code === 'ENOENT' ? 'not found' : `cannot be read (${messageOf(e)})`} (looked for ${full})`,
        { cause: e },
      );
    }
    if (!real.startsWith(realDir.endsWith(sep) ? realDir : realDir + sep)) {
      throw new OnnxLoadError(
        `${where}: external data location '${location}' is refused: it resolves (through a symbolic link) to ${real}, outside the model's folder`,
      );
    }
    return this.open(real, where, location);
  }

  private open(path: string, where: string, location: string): OpenFile {
    let f = this.files.get(path);
    if (f) return f;
    let fd: number | undefined;
    try {
      fd = openRegularFile(path);
      f = { fd, size: fstatSync(fd).size };
    } catch (e) {
      if (fd !== undefined) closeSync(fd);
      const code = (e as NodeJS.ErrnoException).code;
      throw new OnnxLoadError(
        `${where}: external data file '${location}' ${code === 'ENOENT' ? 'not found' : `cannot be read (${messageOf(e)})`} (${path})`,
        { cause: e },
      );
    }
    this.files.set(path, f);
    return f;
  }

  private range(f: OpenFile, offset: number, length: number | undefined, where: string, location: string): Uint8Array {
    const end = length === undefined ? f.size : offset + length;
    if (offset > f.size || end > f.size) {
      throw new OnnxLoadError(
        `${where}: external data range [${offset}, ${end}) lies outside '${location}' (${f.size} bytes): truncated external data file?`,
      );
    }
    const out = this.hostBytes(end - offset);
    let done = 0;
    while (done < out.length) {
      const n = readSync(f.fd, out, done, out.length - done, offset + done);
      if (n === 0) throw new OnnxLoadError(`${where}: external data file '${location}' ended early`);
      done += n;
    }
    return out;
  }

  close(): void {
    for (const f of this.files.values()) closeSync(f.fd);
    this.files.clear();
  }
}

/**
 * Opens a file for reading only if it is a regular file. The open does not block (O_NONBLOCK), so
 * a FIFO or a device cannot stall the caller; the type is checked on the opened descriptor, so it
 * cannot change between the check and the read.
 */
export function openRegularFile(path: string): number {
  const fd = openSync(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    const kind = st.isFIFO()
      ? 'a FIFO'
      : st.isDirectory()
        ? 'a directory'
        : st.isCharacterDevice() || st.isBlockDevice()
          ? 'a device'
          : st.isSocket()
            ? 'a socket'
            : 'not a regular file';
    throw Object.assign(new Error(`it is ${kind}, not a regular file`), { code: 'ENOTREGULAR' });
  }
  return fd;
}

/**
 * The most bytes a model file may hold: protobuf's limit on one message (2 GiB). Larger weights go
 * in external data files, which are read piecewise and are not bound by it.
 */
export const MODEL_FILE_LIMIT = 2 ** 31;
/** The most bytes a test data file (input_<i>.pb, output_<i>.pb: one TensorProto) may hold. */
export const TENSOR_FILE_LIMIT = 2 ** 30;

/**
 * The whole content of a regular file (a model file), read with bounded reads. A file over
 * `maxBytes` is refused before anything is read (code ETOOLARGE).
 */
export function readRegularFile(path: string, maxBytes = Number.POSITIVE_INFINITY, hostBytes: HostBytes = plainBytes): Uint8Array {
  const fd = openRegularFile(path);
  try {
    const size = fstatSync(fd).size;
    if (size > maxBytes)
      throw Object.assign(new Error(`it holds ${size} bytes, over the limit of ${maxBytes} bytes (${limitText(maxBytes)})`), {
        code: 'ETOOLARGE',
      });
    const out = hostBytes(size);
    let done = 0;
    while (done < size) {
      const n = readSync(fd, out, done, Math.min(size - done, 1 << 30), done);
      if (n === 0) break;
      done += n;
    }
    return done === size ? out : out.subarray(0, done);
  } finally {
    closeSync(fd);
  }
}

/**
 * A model file's bytes: a path that is missing, not a regular file (a FIFO, a device, a folder) or
 * over protobuf's 2 GiB is an OnnxLoadError naming it, and nothing waits on a FIFO or reads a device.
 */
export function readModelFile(path: string, hostBytes: HostBytes = plainBytes): Uint8Array {
  try {
    return readRegularFile(path, MODEL_FILE_LIMIT, hostBytes);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === 'ETOOLARGE' ? `${messageOf(e)}; larger weights go in external data files` : fileErrorText(e);
    throw new OnnxLoadError(`cannot read the model file: ${why}`, { model: path, cause: e });
  }
}

/** A test data file's bytes (one TensorProto, input_<i>.pb), with readModelFile's checks and TENSOR_FILE_LIMIT. */
export function readTensorFile(path: string): Uint8Array {
  try {
    return readRegularFile(path, TENSOR_FILE_LIMIT);
  } catch (e) {
    throw new OnnxLoadError(`${path}: cannot read the tensor file: ${fileErrorText(e)}`, { cause: e });
  }
}

function limitText(n: number): string {
  return n >= 2 ** 30 ? `${n / 2 ** 30} GiB` : `${n / 2 ** 20} MiB`;
}

/** Why a file could not be opened or read, as a phrase (not node's raw ENOENT, EISDIR... text). */
export function fileErrorText(e: unknown): string {
  switch ((e as NodeJS.ErrnoException).code) {
    case 'ENOENT':
      return 'no such file';
    case 'EISDIR':
      return 'it is a directory, not a regular file';
    case 'ENOTDIR':
      return 'a component of the path is not a directory';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'ELOOP':
      return 'too many levels of symbolic links';
    case 'ENAMETOOLONG':
      return 'the path is too long';
    default:
      return messageOf(e);
  }
}

/** Reads Blob entries of externalData into bytes, so that decodeModel (synchronous) can use them. */
export async function materializeExternalData(specs: readonly ExternalDataSpec[]): Promise<ExternalDataSpec[]> {
  return Promise.all(
    specs.map(async (s) =>
      typeof Blob !== 'undefined' && s.data instanceof Blob ? { path: s.path, data: new Uint8Array(await s.data.arrayBuffer()) } : s,
    ),
  );
}
