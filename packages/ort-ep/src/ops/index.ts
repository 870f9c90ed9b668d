// The default registry: every op family, one file each.
import { OpRegistry } from '../registry/registry.js';
import { activationOps } from './activation.js';
import { contribOps } from './com.microsoft/fused.js';
import { controlOps } from './control.js';
import { convOps } from './conv.js';
import { elementwiseOps } from './elementwise.js';
import { indexingOps } from './indexing.js';
import { matmulOps } from './matmul.js';
import { miscOps } from './bitcast.js';
import { normOps } from './norm.js';
import { poolOps } from './pool.js';
import { quantOps } from './quant.js';
import { reduceOps } from './reduce.js';
import { rnnOps } from './rnn.js';
import { sequenceOps } from './sequence.js';
import { shapeOps } from './shape.js';
import { lossOps } from './loss.js';
import { stringsOps } from './strings.js';
import { signalOps } from './signal.js';
import { geometryOps } from './geometry.js';
import { attentionOps } from './attention.js';

export const defaultRegistry = new OpRegistry().add(
  elementwiseOps, activationOps, shapeOps, indexingOps, reduceOps, matmulOps, convOps, poolOps, normOps,
  rnnOps, quantOps, controlOps, sequenceOps, contribOps, miscOps, lossOps, stringsOps, signalOps, geometryOps,
  attentionOps,
);
