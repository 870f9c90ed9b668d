"""Exports the benchmark's large models with torch.onnx (random weights, fixed seeds), in the
layout of ../shared/models: <out>/<name>/model.onnx and test_data_set_0/input_<i>.pb (+ torch's
outputs as output_<i>.pb, float32 eager on the CPU). Needs python3 with torch, transformers and onnx.

  python export-models.py OUT [--only bert-base,gpt2-small,resnet50] [--device cpu|cuda]
"""
import argparse
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper


class Named(torch.nn.Module):
    """Calls a transformers model with keyword arguments and returns its tensors in order."""

    def __init__(self, model, names, outputs):
        super().__init__()
        self.model, self.names, self.outputs = model, names, outputs

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)))
        return tuple(getattr(out, o) for o in self.outputs)


def bert(batch=1, seq=128):
    from transformers import BertConfig, BertModel

    cfg = BertConfig()  # bert-base-uncased shapes: 12 layers, hidden 768, 12 heads, vocab 30522
    m = BertModel(cfg, add_pooling_layer=True).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    types = torch.zeros(batch, seq, dtype=torch.long)
    names = ['input_ids', 'attention_mask', 'token_type_ids']
    return Named(m, names, ['last_hidden_state', 'pooler_output']), (ids, mask, types), names, ['last_hidden_state', 'pooler_output'], {n: {0: 'batch', 1: 'seq'} for n in names}


def gpt2(batch=1, seq=256):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(use_cache=False)  # gpt2 small: 12 layers, hidden 768, 12 heads, vocab 50257
    m = GPT2LMHeadModel(cfg).eval()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    names = ['input_ids', 'attention_mask']
    return Named(m, names, ['logits']), (ids, mask), names, ['logits'], {n: {0: 'batch', 1: 'seq'} for n in names}


def resnet50(batch=1):
    from torchvision.models import resnet50 as rn

    m = rn(weights=None).eval()
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    return m, (x,), ['image'], ['logits'], {'image': {0: 'batch'}}


def bert_b8():
    return bert(batch=8, seq=128)


class MatMul(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n, n, generator=torch.Generator().manual_seed(4)) / n**0.5)

    def forward(self, x):
        return x @ self.w


def matmul4096(n=4096):
    x = torch.randn(n, n, generator=torch.Generator().manual_seed(5))
    return MatMul(n).eval(), (x,), ['x'], ['y'], {}


MODELS = {'bert-base': bert, 'bert-base-b8': bert_b8, 'gpt2-small': gpt2, 'resnet50': resnet50, 'matmul4096': matmul4096}
SEEDS = {'bert-base': 11, 'bert-base-b8': 11, 'gpt2-small': 12, 'resnet50': 13, 'matmul4096': 14}


def export(name, out, device):
    torch.manual_seed(SEEDS[name])
    model, inputs, in_names, out_names, axes = MODELS[name]()
    folder = os.path.join(out, name)
    data = os.path.join(folder, 'test_data_set_0')
    os.makedirs(data, exist_ok=True)
    path = os.path.join(folder, 'model.onnx')
    with torch.no_grad():
        torch.onnx.export(model, inputs, path, input_names=in_names, output_names=out_names, dynamic_axes=axes, opset_version=17, dynamo=False, do_constant_folding=True)
        ref = model.to(device)(*[t.to(device) for t in inputs])
    ref = ref if isinstance(ref, tuple) else (ref,)
    for i, t in enumerate(inputs):
        with open(os.path.join(data, f'input_{i}.pb'), 'wb') as f:
            f.write(numpy_helper.from_array(t.numpy(), in_names[i]).SerializeToString())
    for i, t in enumerate(ref):
        with open(os.path.join(data, f'output_{i}.pb'), 'wb') as f:
            f.write(numpy_helper.from_array(t.float().cpu().numpy(), out_names[i]).SerializeToString())
    onnx.checker.check_model(path)
    print(f'{name}: {os.path.getsize(path) / 2**20:.0f} MiB -> {folder}', flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('out')
    p.add_argument('--only', default='bert-base,gpt2-small,resnet50')
    p.add_argument('--device', default='cpu')
    a = p.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for name in a.only.split(','):
        if os.path.exists(os.path.join(a.out, name, 'model.onnx')):
            print(f'{name}: already exported', flush=True)
            continue
        export(name, a.out, a.device)


if __name__ == '__main__':
    sys.exit(main())
