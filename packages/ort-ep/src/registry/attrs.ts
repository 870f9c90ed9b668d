// Typed access to a node's attributes, with the spec's defaults given at the call site.
import type { AttrValue, GraphIR, HostTensor, NodeIR, SparseTensorIR } from '../onnx/index.js';

type Kind = AttrValue['type'];

export class Attrs {
  private readonly map: Map<string, AttrValue>;
  constructor(private readonly node: NodeIR) {
    this.map = node.attributes;
  }

  has(name: string): boolean {
    return this.map.has(name);
  }

  /** The node's op type and name, for messages: `Conv node 'conv1'`. */
  get where(): string {
    return `${this.node.opType} node '${this.node.name}'`;
  }

  private get(name: string, kinds: Kind[]): AttrValue | undefined {
    const a = this.map.get(name);
    if (a && !kinds.includes(a.type)) {
      throw new TypeError(
        `attribute '${name}' of ${this.node.opType} node '${this.node.name}' is a ${a.type}, expected ${kinds.join(' or ')}`,
      );
    }
    return a;
  }

  private need<T>(name: string, def: T | undefined): T {
    if (def === undefined) throw new TypeError(`${this.node.opType} node '${this.node.name}' needs attribute '${name}'`);
    return def;
  }

  int(name: string, def?: number): number {
    const a = this.get(name, ['int']);
    return a ? (a.value as number) : this.need(name, def);
  }
  /**
   * An int flag that onnxruntime's kernel accepts only as 0 or 1 (it refuses any other value):
   * true for 1, a RangeError naming the node for anything but 0 and 1.
   */
  zeroOrOne(name: string, def: 0 | 1): boolean {
    const v = this.int(name, def);
    if (v !== 0 && v !== 1)
      throw new RangeError(`attribute '${name}' of ${this.node.opType} node '${this.node.name}' is ${v}, expected 0 or 1`);
    return v === 1;
  }
  float(name: string, def?: number): number {
    const a = this.get(name, ['float', 'int']);
    return a ? (a.value as number) : this.need(name, def);
  }
  string(name: string, def?: string): string {
    const a = this.get(name, ['string']);
    return a ? (a.value as string) : this.need(name, def);
  }
  ints(name: string, def?: number[]): number[] {
    const a = this.get(name, ['ints']);
    return a ? [...(a.value as number[])] : this.need(name, def);
  }
  floats(name: string, def?: number[]): number[] {
    const a = this.get(name, ['floats']);
    return a ? [...(a.value as number[])] : this.need(name, def);
  }
  strings(name: string, def?: string[]): string[] {
    const a = this.get(name, ['strings']);
    return a ? [...(a.value as string[])] : this.need(name, def);
  }
  tensor(name: string): HostTensor | undefined {
    return this.get(name, ['tensor'])?.value as HostTensor | undefined;
  }
  sparseTensor(name: string): SparseTensorIR | undefined {
    return this.get(name, ['sparse_tensor'])?.value as SparseTensorIR | undefined;
  }
  /** An int list the node may leave out (undefined then, whatever its default). */
  intsIfGiven(name: string): number[] | undefined {
    return this.has(name) ? this.ints(name) : undefined;
  }
  graph(name: string): GraphIR {
    const g = this.get(name, ['graph'])?.value as GraphIR | undefined;
    return this.need(name, g);
  }
  /** Every graph attribute (subgraphs of If/Loop/Scan), in attribute order. */
  graphs(): GraphIR[] {
    const out: GraphIR[] = [];
    for (const a of this.map.values()) {
      if (a.type === 'graph') out.push(a.value as GraphIR);
      else if (a.type === 'graphs') out.push(...(a.value as GraphIR[]));
    }
    return out;
  }
  /** The attribute names present, for checks that reject unknown or unsupported ones. */
  names(): string[] {
    return [...this.map.keys()];
  }
}
