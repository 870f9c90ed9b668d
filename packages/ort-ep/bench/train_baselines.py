"""The training benchmark's reference (bench/train.ts): one training step (forward, backward,
AdamW update) in torch eager on the CPU, for the Llama-shaped decoders of test/helpers/decoder.ts
(the same layer structure: RMSNorm, grouped-query attention with rotary, SwiGLU MLP, an untied
lm_head; random weights) and BERT-base (transformers' BertModel with export-models.py's config,
eval mode: no dropout, as the ONNX export). The loss is the one train.ts's mlx worker takes:
next-token cross-entropy on a fixed random batch (decoders), or the mean square of the last hidden
state plus that of the pooled output (BERT). Prints one JSON line: step times, peak RSS.

  python train_baselines.py --model decoder --config '{"layers":4,...}' --batch 4 --seq 128
  python train_baselines.py --model bert --batch 2 --seq 128 [--steps 3] [--warmup 1] [--threads 2]
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.nn.functional as F


def rss_mib(field):
    """VmRSS or VmHWM (the high-water mark) of this process, in MiB."""
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class RMSNorm(torch.nn.Module):
    """SimplifiedLayerNormalization (axis -1, epsilon 1e-6) with a learned scale."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    """Rotary embedding, halves not interleaved (GroupQueryAttention's do_rotary default)."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d, h = c['hidden'], c['hidden'] // c['heads']
        kv = c['kvHeads'] * h
        self.heads, self.kv_heads, self.head = c['heads'], c['kvHeads'], h
        self.ln1, self.ln2 = RMSNorm(d), RMSNorm(d)
        self.q = torch.nn.Linear(d, d, bias=False)
        self.k = torch.nn.Linear(d, kv, bias=False)
        self.v = torch.nn.Linear(d, kv, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.gate = torch.nn.Linear(d, c['ffn'], bias=False)
        self.up = torch.nn.Linear(d, c['ffn'], bias=False)
        self.down = torch.nn.Linear(c['ffn'], d, bias=False)

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        h = self.ln1(x)
        q = self.q(h).view(b, s, self.heads, self.head).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv_heads, self.head).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv_heads, self.head).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h2 = self.ln2(x)
        return x + self.down(F.silu(self.gate(h2)) * self.up(h2))


class Decoder(torch.nn.Module):
    def __init__(self, c, seq):
        super().__init__()
        d, h = c['hidden'], c['hidden'] // c['heads']
        self.embed = torch.nn.Embedding(c['vocab'], d)
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(c['layers']))
        self.ln_f = RMSNorm(d)
        self.lm_head = torch.nn.Linear(d, c['vocab'], bias=False)
        pos = torch.arange(seq, dtype=torch.float32)[:, None]
        inv = 10000 ** (-torch.arange(0, h, 2, dtype=torch.float32) / h)
        # Buffers, not parameters: the ONNX model's cos_cache and sin_cache are not trained either.
        self.register_buffer('cos', torch.cos(pos * inv))
        self.register_buffer('sin', torch.sin(pos * inv))

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return self.lm_head(self.ln_f(x))


def decoder(a, g):
    c = json.loads(a.config)
    m = Decoder(c, a.seq)
    ids = torch.randint(0, c['vocab'], (a.batch, a.seq), generator=g)
    labels = torch.randint(0, c['vocab'], (a.batch, a.seq), generator=g)

    def loss():
        logits = m(ids)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))

    return m, loss


def bert(a, g):
    from transformers import BertConfig, BertModel

    cfg = BertConfig()  # export-models.py's: bert-base-uncased shapes
    m = BertModel(cfg, add_pooling_layer=True).eval()  # eval: no dropout, as the ONNX export
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), generator=g)
    mask = torch.ones(a.batch, a.seq, dtype=torch.long)
    types = torch.zeros(a.batch, a.seq, dtype=torch.long)

    def loss():
        out = m(input_ids=ids, attention_mask=mask, token_type_ids=types)
        return out.last_hidden_state.pow(2).mean() + out.pooler_output.pow(2).mean()

    return m, loss


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--model', choices=['decoder', 'bert'], required=True)
    p.add_argument('--config', default='{}')
    p.add_argument('--batch', type=int, default=2)
    p.add_argument('--seq', type=int, default=128)
    p.add_argument('--steps', type=int, default=3)
    p.add_argument('--warmup', type=int, default=1)
    p.add_argument('--threads', type=int, default=int(os.environ.get('BENCH_THREADS', '2')))
    p.add_argument('--lr', type=float, default=1e-4)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    g = torch.Generator().manual_seed(2)
    t0 = time.perf_counter()
    m, loss_fn = (decoder if a.model == 'decoder' else bert)(a, g)
    params = [q for q in m.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.01)
    create_ms = (time.perf_counter() - t0) * 1000
    load_rss = rss_mib('VmRSS')
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step >= a.warmup:
            times.append((time.perf_counter() - t) * 1000)
    print(json.dumps({
        'engine': 'torch',
        'parameters': sum(q.numel() for q in params),
        'createMs': create_ms,
        'stepMs': times,
        'medianMs': statistics.median(times),
        'loadRssMiB': load_rss,
        'peakRssMiB': rss_mib('VmHWM'),
        'losses': losses,
        'threads': torch.get_num_threads(),
        'version': torch.__version__,
    }), flush=True)


if __name__ == '__main__':
    main()
