"""Torch autograd references for the weight gradients of the shared models.

For each model: the loss sum over the outputs k of <y_k, r_k> (r_k the project's seeded values,
test/helpers/ort.ts's seeded(n, 1000 + k)) on test_data_set_0's inputs, differentiated by torch's
autograd in float64 with respect to every float initializer. The graph is run by a small ONNX
interpreter written on torch ops (only what these models use), with the initializers as leaf
tensors: torch's VJPs are independent of MLX's and of the provider's ops, and the initializers the
exporter deduplicated (one bias tensor shared by several layers) get the sum of their uses'
gradients, as valueAndGrad gives. Each weight's gradient is stored small: its norm and its dot
products with 4 seeded directions (seeded(size, seed + j)).

    .mlx/bench-venv/bin/python packages/ort-ep/test/helpers/torch_grads.py [MODEL ...]

(the venv's python: bash tools/install-bench-python.sh --print-python). Writes
packages/ort-ep/test/fixtures/torch-grads/<model>.json, which test/api/grad-torch.test.ts reads.
"""

import json
import math
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, '..', 'fixtures', 'torch-grads')
# <repo>/../shared/models, as test/helpers/shared.ts finds it.
MODELS = os.path.join(HERE, '..', '..', '..', '..', '..', 'shared', 'models')
DIRECTIONS = 4


def seeded(n, seed=1):
    """test/helpers/ort.ts's seeded(): n values in [-1, 1) from a 32-bit LCG."""
    s = (seed & 0xFFFFFFFF) or 1
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = s / 2**31 - 1
    return out


def as_torch(a):
    t = torch.from_numpy(np.array(a))
    return t.double() if t.is_floating_point() else t


ONNX_TO_TORCH = {
    1: torch.float64,  # float32 runs in float64 here
    11: torch.float64,
    10: torch.float64,
    16: torch.float64,
    6: torch.int32,
    7: torch.int64,
    9: torch.bool,
    2: torch.uint8,
    3: torch.int8,
}


def ints(t):
    return [int(v) for v in t.reshape(-1).tolist()]


class Interpreter:
    def __init__(self, graph, values):
        self.graph = graph
        self.v = dict(values)

    def run(self):
        for n in self.graph.node:
            ins = [self.v[i] if i else None for i in n.input]
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            outs = getattr(self, 'op_' + n.op_type)(ins, attrs)
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            for name, o in zip(n.output, outs):
                if name:
                    self.v[name] = o
        return [self.v[o.name] for o in self.graph.output]

    # Values and shapes
    def op_Constant(self, x, a):
        if 'value' in a:
            return as_torch(numpy_helper.to_array(a['value']))
        if 'value_float' in a:
            return torch.tensor(a['value_float'], dtype=torch.float64)
        if 'value_int' in a:
            return torch.tensor(a['value_int'], dtype=torch.int64)
        if 'value_ints' in a:
            return torch.tensor(list(a['value_ints']), dtype=torch.int64)
        if 'value_floats' in a:
            return torch.tensor(list(a['value_floats']), dtype=torch.float64)
        raise NotImplementedError(f'Constant {list(a)}')

    def op_Identity(self, x, a):
        return x[0]

    def op_Shape(self, x, a):
        s = list(x[0].shape)
        return torch.tensor(s[a.get('start', 0) : a.get('end', len(s))], dtype=torch.int64)

    def op_ConstantOfShape(self, x, a):
        v = as_torch(numpy_helper.to_array(a['value'])) if 'value' in a else torch.zeros(1, dtype=torch.float64)
        return torch.full(ints(x[0]), v.reshape(-1)[0].item(), dtype=v.dtype)

    def op_Cast(self, x, a):
        return x[0].to(ONNX_TO_TORCH[a['to']])

    def op_Range(self, x, a):
        return torch.arange(x[0].item(), x[1].item(), x[2].item(), dtype=x[0].dtype)

    def op_Reshape(self, x, a):
        shape = ints(x[1])
        shape = [x[0].shape[i] if d == 0 and not a.get('allowzero', 0) else d for i, d in enumerate(shape)]
        return x[0].reshape(shape)

    def op_Flatten(self, x, a):
        ax = a.get('axis', 1)
        ax = ax + x[0].ndim if ax < 0 else ax
        return x[0].reshape(math.prod(x[0].shape[:ax]), -1)

    def op_Unsqueeze(self, x, a):
        axes = ints(x[1]) if len(x) > 1 and x[1] is not None else list(a['axes'])
        rank = x[0].ndim + len(axes)
        y = x[0]
        for ax in sorted(d + rank if d < 0 else d for d in axes):
            y = y.unsqueeze(ax)
        return y

    def op_Squeeze(self, x, a):
        axes = ints(x[1]) if len(x) > 1 and x[1] is not None else list(a.get('axes', []))
        if not axes:
            return x[0].squeeze()
        y = x[0]
        for ax in sorted((d + y.ndim if d < 0 else d for d in axes), reverse=True):
            y = y.squeeze(ax)
        return y

    def op_Concat(self, x, a):
        return torch.cat([t for t in x if t is not None], dim=a['axis'])

    def op_Slice(self, x, a):
        data = x[0]
        starts, ends = ints(x[1]), ints(x[2])
        axes = ints(x[3]) if len(x) > 3 and x[3] is not None else list(range(len(starts)))
        steps = ints(x[4]) if len(x) > 4 and x[4] is not None else [1] * len(starts)
        index = [slice(None)] * data.ndim
        for s, e, ax, st in zip(starts, ends, axes, steps):
            if st <= 0:
                raise NotImplementedError('Slice with a negative step')
            index[ax] = slice(s, e, st)
        return data[tuple(index)]

    def op_Split(self, x, a):
        ax = a.get('axis', 0)
        if len(x) > 1 and x[1] is not None:
            return list(torch.split(x[0], ints(x[1]), dim=ax))
        if 'split' in a:
            return list(torch.split(x[0], list(a['split']), dim=ax))
        n = a['num_outputs']
        return list(torch.chunk(x[0], n, dim=ax))

    def op_Transpose(self, x, a):
        perm = list(a.get('perm', reversed(range(x[0].ndim))))
        return x[0].permute(perm)

    def op_Expand(self, x, a):
        shape = torch.broadcast_shapes(tuple(x[0].shape), tuple(ints(x[1])))
        return x[0].expand(shape)

    def op_Gather(self, x, a):
        ax = a.get('axis', 0)
        ax = ax + x[0].ndim if ax < 0 else ax
        idx = x[1].long()
        idx = torch.where(idx < 0, idx + x[0].shape[ax], idx)
        return x[0][(slice(None),) * ax + (idx,)]

    def op_Where(self, x, a):
        return torch.where(x[0], x[1], x[2])

    # Arithmetic
    def op_Add(self, x, a):
        return x[0] + x[1]

    def op_Sub(self, x, a):
        return x[0] - x[1]

    def op_Mul(self, x, a):
        return x[0] * x[1]

    def op_Div(self, x, a):
        if not x[0].is_floating_point():
            return torch.div(x[0], x[1], rounding_mode='trunc')
        return x[0] / x[1]

    def op_Pow(self, x, a):
        return torch.pow(x[0], x[1])

    def op_Neg(self, x, a):
        return -x[0]

    def op_Sqrt(self, x, a):
        return torch.sqrt(x[0])

    def op_Reciprocal(self, x, a):
        return 1 / x[0]

    def op_Exp(self, x, a):
        return torch.exp(x[0])

    def op_Erf(self, x, a):
        return torch.erf(x[0])

    def op_Tanh(self, x, a):
        return torch.tanh(x[0])

    def op_Sigmoid(self, x, a):
        return torch.sigmoid(x[0])

    def op_Cos(self, x, a):
        return torch.cos(x[0])

    def op_Sin(self, x, a):
        return torch.sin(x[0])

    def op_Relu(self, x, a):
        return torch.relu(x[0])

    def op_HardSigmoid(self, x, a):
        return torch.clamp(a.get('alpha', 0.2) * x[0] + a.get('beta', 0.5), 0, 1)

    def op_HardSwish(self, x, a):
        return x[0] * torch.clamp(x[0] / 6 + 0.5, 0, 1)

    def op_Equal(self, x, a):
        return x[0] == x[1]

    def op_GreaterOrEqual(self, x, a):
        return x[0] >= x[1]

    def op_LessOrEqual(self, x, a):
        return x[0] <= x[1]

    def op_Less(self, x, a):
        return x[0] < x[1]

    def op_Greater(self, x, a):
        return x[0] > x[1]

    def op_And(self, x, a):
        return x[0] & x[1]

    def op_Not(self, x, a):
        return ~x[0]

    # Linear algebra, normalization, reductions
    def op_MatMul(self, x, a):
        return torch.matmul(x[0], x[1])

    def op_Gemm(self, x, a):
        A = x[0].t() if a.get('transA', 0) else x[0]
        B = x[1].t() if a.get('transB', 0) else x[1]
        y = a.get('alpha', 1.0) * (A @ B)
        if len(x) > 2 and x[2] is not None:
            y = y + a.get('beta', 1.0) * x[2]
        return y

    def op_Softmax(self, x, a):
        return torch.softmax(x[0], dim=a.get('axis', -1))

    def op_LayerNormalization(self, x, a):
        ax = a.get('axis', -1)
        ax = ax + x[0].ndim if ax < 0 else ax
        dims = tuple(range(ax, x[0].ndim))
        mean = x[0].mean(dim=dims, keepdim=True)
        var = ((x[0] - mean) ** 2).mean(dim=dims, keepdim=True)
        y = (x[0] - mean) / torch.sqrt(var + a.get('epsilon', 1e-5)) * x[1]
        return y + x[2] if len(x) > 2 and x[2] is not None else y

    def op_ReduceMean(self, x, a):
        axes = ints(x[1]) if len(x) > 1 and x[1] is not None else list(a.get('axes', range(x[0].ndim)))
        return x[0].mean(dim=tuple(axes), keepdim=bool(a.get('keepdims', 1)))

    def op_GlobalAveragePool(self, x, a):
        return x[0].mean(dim=tuple(range(2, x[0].ndim)), keepdim=True)

    def op_Conv(self, x, a):
        k = x[1].ndim - 2
        pads = list(a.get('pads', [0] * 2 * k))
        if pads[:k] != pads[k:]:
            raise NotImplementedError('asymmetric Conv pads')
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[k]
        return conv(x[0], x[1], x[2] if len(x) > 2 else None, stride=list(a.get('strides', [1] * k)),
                    padding=pads[:k], dilation=list(a.get('dilations', [1] * k)), groups=a.get('group', 1))

    def op_MaxPool(self, x, a):
        k = len(a['kernel_shape'])
        pads = list(a.get('pads', [0] * 2 * k))
        return F.max_pool2d(x[0], list(a['kernel_shape']), list(a.get('strides', [1] * k)), pads[:k],
                            list(a.get('dilations', [1] * k)), bool(a.get('ceil_mode', 0)))

    def op_AveragePool(self, x, a):
        k = len(a['kernel_shape'])
        pads = list(a.get('pads', [0] * 2 * k))
        return F.avg_pool2d(x[0], list(a['kernel_shape']), list(a.get('strides', [1] * k)), pads[:k],
                            bool(a.get('ceil_mode', 0)), bool(a.get('count_include_pad', 0)))

    # com.microsoft (bert-tiny-ort-fused)
    def op_BiasGelu(self, x, a):
        y = x[0] + x[1]
        return 0.5 * y * (1 + torch.erf(y / math.sqrt(2)))

    def op_SkipLayerNormalization(self, x, a):
        s = x[0] + x[1]
        if len(x) > 4 and x[4] is not None:
            s = s + x[4]
        y = self.op_LayerNormalization([s, x[2], x[3] if len(x) > 3 else None], {'epsilon': a.get('epsilon', 1e-12)})
        return [y, None, None, s]

    def op_MatMulNBits(self, x, a):
        """A @ dequantized(B)^T: 4-bit blocks along K (low nibble first), per-block scales and zero points."""
        if a.get('bits', 4) != 4 or (len(x) > 4 and x[4] is not None):
            raise NotImplementedError('MatMulNBits other than 4 bits, or with g_idx')
        K, N, bs = a['K'], a['N'], a['block_size']
        packed = x[1].reshape(N, -1).long()
        q = torch.stack([packed & 15, packed >> 4], dim=-1).reshape(N, -1)[:, :K]
        blocks = (K + bs - 1) // bs
        scales = x[2].reshape(N, blocks)
        if len(x) > 3 and x[3] is not None:
            zp = x[3].reshape(N, -1).long()
            zp = torch.stack([zp & 15, zp >> 4], dim=-1).reshape(N, -1)[:, :blocks]
        else:
            zp = torch.full((N, blocks), 8, dtype=torch.long)
        block_of = torch.arange(K) // bs
        w = (q - zp[:, block_of]).double() * scales[:, block_of]
        y = torch.matmul(x[0], w.t())
        return y + x[5] if len(x) > 5 and x[5] is not None else y

    # Quantization (small-cnn-qdq: per-tensor scales). Rounding has a zero derivative, in torch
    # as in MLX: a scale read by QuantizeLinear gets its gradient through DequantizeLinear only.
    def _per_axis(self, p, x, a):
        if p.ndim == 0 or p.numel() == 1:
            return p.reshape(())
        shape = [1] * x.ndim
        ax = a.get('axis', 1)
        shape[ax + x.ndim if ax < 0 else ax] = -1
        return p.reshape(shape)

    def op_QuantizeLinear(self, x, a):
        zp = x[2] if len(x) > 2 and x[2] is not None else torch.zeros((), dtype=torch.uint8)
        lo, hi = (0, 255) if zp.dtype == torch.uint8 else (-128, 127)
        q = torch.round(x[0] / self._per_axis(x[1], x[0], a)) + self._per_axis(zp, x[0], a).double()
        return torch.clamp(q, lo, hi).to(zp.dtype)

    def op_DequantizeLinear(self, x, a):
        zp = x[2] if len(x) > 2 and x[2] is not None else torch.zeros((), dtype=x[0].dtype)
        return (x[0].double() - self._per_axis(zp, x[0], a).double()) * self._per_axis(x[1], x[0], a)

    def op_LSTM(self, x, a):
        """ONNX's LSTM (gates i, o, f, c; default activations; no peepholes, clip or sequence_lens)."""
        X, W, R = x[0], x[1], x[2]
        opt = lambda i: x[i] if len(x) > i and x[i] is not None else None  # noqa: E731
        if opt(4) is not None or opt(7) is not None or 'clip' in a or a.get('input_forget', 0) or 'activations' in a:
            raise NotImplementedError('LSTM with sequence_lens, peepholes, clip, input_forget or activations')
        if a.get('layout', 0):
            raise NotImplementedError('LSTM layout 1')
        H = a['hidden_size']
        dirs, seq, batch = W.shape[0], X.shape[0], X.shape[1]
        direction = a.get('direction', b'forward')
        direction = direction.decode() if isinstance(direction, bytes) else direction
        B = opt(3)
        h0 = opt(5) if opt(5) is not None else torch.zeros(dirs, batch, H, dtype=X.dtype)
        c0 = opt(6) if opt(6) is not None else torch.zeros(dirs, batch, H, dtype=X.dtype)
        ys, hs, cs = [], [], []
        for d in range(dirs):
            h, c = h0[d], c0[d]
            b = B[d][: 4 * H] + B[d][4 * H :] if B is not None else 0
            backward = d == 1 or direction == 'reverse'
            out = [None] * seq
            for t in reversed(range(seq)) if backward else range(seq):
                gi, go, gf, gc = torch.split(X[t] @ W[d].t() + h @ R[d].t() + b, H, dim=-1)
                c = torch.sigmoid(gf) * c + torch.sigmoid(gi) * torch.tanh(gc)
                h = torch.sigmoid(go) * torch.tanh(c)
                out[t] = h
            ys.append(torch.stack(out))
            hs.append(h)
            cs.append(c)
        return [torch.stack(ys, dim=1), torch.stack(hs), torch.stack(cs)]


def reference(name):
    d = os.path.join(MODELS, name)
    m = onnx.load(os.path.join(d, 'model.onnx'))
    g = m.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    leaves = {}
    values = {}
    for k, arr in inits.items():
        t = as_torch(arr)
        if t.is_floating_point():
            t.requires_grad_(True)
            leaves[k] = t
        values[k] = t
    feeds = [i.name for i in g.input if i.name not in inits]
    for i, n in enumerate(feeds):
        t = onnx.TensorProto()
        with open(os.path.join(d, 'test_data_set_0', f'input_{i}.pb'), 'rb') as f:
            t.ParseFromString(f.read())
        values[n] = as_torch(numpy_helper.to_array(t))
    outs = Interpreter(g, values).run()
    # The run reproduces the expected outputs (onnxruntime's, in float32) within the model's tolerance.
    with open(os.path.join(d, 'meta.json')) as f:
        meta = json.load(f)
    rtol, atol = meta.get('rtol', 1e-3), meta.get('atol', 1e-4)
    for k, y in enumerate(outs):
        t = onnx.TensorProto()
        with open(os.path.join(d, 'test_data_set_0', f'output_{k}.pb'), 'rb') as f:
            t.ParseFromString(f.read())
        want = numpy_helper.to_array(t).astype(np.float64)
        err = np.max(np.abs(y.detach().numpy() - want) - rtol * np.abs(want))
        assert err <= atol, f'{name}: output {k} differs by {err} beyond rtol {rtol}'
    loss = sum((y * torch.from_numpy(seeded(y.numel(), 1000 + k)).reshape(y.shape)).sum() for k, y in enumerate(outs))
    names = sorted(leaves)
    grads = torch.autograd.grad(loss, [leaves[n] for n in names], allow_unused=True)
    weights = []
    for idx, (n, gr) in enumerate(zip(names, grads)):
        gr = torch.zeros_like(leaves[n]) if gr is None else gr
        flat = gr.detach().reshape(-1).numpy()
        seed = 7000 + 16 * idx
        dots = [float(np.dot(flat, seeded(flat.size, seed + j))) for j in range(DIRECTIONS)]
        weights.append({'name': n, 'shape': list(gr.shape), 'seed': seed, 'norm': float(np.linalg.norm(flat)), 'dots': dots})
    return {
        'model': name,
        'inputs': 'test_data_set_0',
        'outputs': [o.name for o in g.output],
        'loss': float(loss.detach()),
        'torch': torch.__version__,
        'weights': weights,
    }


def main():
    names = sys.argv[1:] or ['bert-tiny', 'gpt2-tiny', 'llama-tiny', 'small-cnn', 'mobilenet-v3-ish', 'lstm-tagger', 'bert-tiny-ort-fused', 'gpt2-tiny-int4', 'small-cnn-qdq']
    os.makedirs(OUT, exist_ok=True)
    torch.set_grad_enabled(True)
    for name in names:
        r = reference(name)
        with open(os.path.join(OUT, f'{name}.json'), 'w') as f:
            json.dump(r, f, indent=1)
            f.write('\n')
        print(f'{name}: loss {r["loss"]:.6f}, {len(r["weights"])} weights')


if __name__ == '__main__':
    main()
