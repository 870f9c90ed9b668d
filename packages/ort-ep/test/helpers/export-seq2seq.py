"""Exports a tiny T5 (random weights, fixed seed) in the layout optimum and transformers.js use:

  OUT/onnx/encoder_model.onnx          input_ids, attention_mask -> last_hidden_state
  OUT/onnx/decoder_model_merged.onnx   encoder_attention_mask, input_ids, encoder_hidden_states,
                                       past_key_values.{i}.decoder/encoder.key/value, use_cache_branch
                                       -> logits, present.{i}.decoder/encoder.key/value
  OUT/config.json, OUT/generation_config.json
  OUT/reference.json                   transformers' own greedy model.generate for a few inputs
                                       (and one with a decoder prompt)

The merged decoder is two torch.onnx exports (without and with a past) joined under an If on
use_cache_branch, as optimum merges them: the branch with a past computes no cross-attention keys
and values, and its present.{i}.encoder.* outputs are empty constants (a caller keeps the first
step's). Needs the project's bench Python (tools/install-bench-python.sh): torch, transformers, onnx.

  python export-seq2seq.py OUT
"""
import json
import os
import shutil
import sys

import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
import numpy as np

CONFIG = dict(
    vocab_size=256,
    d_model=64,
    d_kv=16,
    d_ff=128,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=32,
    dropout_rate=0.0,
    feed_forward_proj='relu',
    tie_word_embeddings=False,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
    is_encoder_decoder=True,
)
PROMPTS = [[5, 17, 42, 99, 7, 1], [200, 3, 64, 64, 12, 150, 88, 31, 1], [9, 1]]
MAX_NEW = 12
OPSET = 17


def main(out):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(7)
    cfg = T5Config(**CONFIG)
    cfg._attn_implementation = 'eager'
    model = T5ForConditionalGeneration(cfg).eval()
    L, H, D = cfg.num_decoder_layers, cfg.num_heads, cfg.d_kv
    os.makedirs(os.path.join(out, 'onnx'), exist_ok=True)
    tmp = os.path.join(out, 'parts')
    os.makedirs(tmp, exist_ok=True)

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model  # its parameters become the graph's initializers

    class Encoder(Wrapper):
        def forward(self, input_ids, attention_mask):
            return model.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state

    def head(hidden):
        if cfg.tie_word_embeddings:
            hidden = hidden * (cfg.d_model**-0.5)
        return model.lm_head(hidden)

    class Decoder(Wrapper):
        """No past: the cross-attention keys and values are computed here and returned."""

        def forward(self, encoder_attention_mask, input_ids, encoder_hidden_states):
            o = model.decoder(
                input_ids=input_ids,
                encoder_hidden_states=encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                past_key_values=(),
                use_cache=True,
                return_dict=True,
            )
            flat = [t for layer in o.past_key_values for t in layer]
            return (head(o.last_hidden_state), *flat)

    class DecoderWithPast(Wrapper):
        def forward(self, encoder_attention_mask, input_ids, encoder_hidden_states, *past):
            legacy = tuple(tuple(past[4 * i : 4 * i + 4]) for i in range(L))
            o = model.decoder(
                input_ids=input_ids,
                encoder_hidden_states=encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                past_key_values=legacy,
                use_cache=True,
                return_dict=True,
            )
            flat = [t for layer in o.past_key_values for t in layer[:2]]
            return (head(o.last_hidden_state), *flat)

    def kv(i):
        return [f'{i}.decoder.key', f'{i}.decoder.value', f'{i}.encoder.key', f'{i}.encoder.value']

    past_names = [f'past_key_values.{n}' for i in range(L) for n in kv(i)]
    present_all = [f'present.{n}' for i in range(L) for n in kv(i)]
    present_self = [f'present.{n}' for i in range(L) for n in kv(i)[:2]]

    ids = torch.tensor([PROMPTS[1]])
    mask = torch.ones_like(ids)
    dec = torch.tensor([[0, 5, 9]])
    with torch.no_grad():
        enc_out = Encoder()(ids, mask)
        first = Decoder()(mask, dec, enc_out)
    enc_path = os.path.join(out, 'onnx', 'encoder_model.onnx')
    torch.onnx.export(
        Encoder(),
        (ids, mask),
        enc_path,
        input_names=['input_ids', 'attention_mask'],
        output_names=['last_hidden_state'],
        dynamic_axes={
            'input_ids': {0: 'batch_size', 1: 'encoder_sequence_length'},
            'attention_mask': {0: 'batch_size', 1: 'encoder_sequence_length'},
            'last_hidden_state': {0: 'batch_size', 1: 'encoder_sequence_length'},
        },
        opset_version=OPSET,
        dynamo=False,
    )
    common_axes = {
        'encoder_attention_mask': {0: 'batch_size', 1: 'encoder_sequence_length'},
        'input_ids': {0: 'batch_size', 1: 'decoder_sequence_length'},
        'encoder_hidden_states': {0: 'batch_size', 1: 'encoder_sequence_length'},
        'logits': {0: 'batch_size', 1: 'decoder_sequence_length'},
    }
    self_axes = {0: 'batch_size', 2: 'decoder_sequence_length_out'}
    cross_axes = {0: 'batch_size', 2: 'encoder_sequence_length_out'}
    no_past_path = os.path.join(tmp, 'decoder_model.onnx')
    torch.onnx.export(
        Decoder(),
        (mask, dec, enc_out),
        no_past_path,
        input_names=['encoder_attention_mask', 'input_ids', 'encoder_hidden_states'],
        output_names=['logits', *present_all],
        dynamic_axes={**common_axes, **{n: self_axes if '.decoder.' in n else cross_axes for n in present_all}},
        opset_version=OPSET,
        dynamo=False,
    )
    past = list(first[1:])
    with_past_path = os.path.join(tmp, 'decoder_with_past_model.onnx')
    torch.onnx.export(
        DecoderWithPast(),
        (mask, dec[:, -1:], enc_out, *past),
        with_past_path,
        input_names=['encoder_attention_mask', 'input_ids', 'encoder_hidden_states', *past_names],
        output_names=['logits', *present_self],
        dynamic_axes={
            **common_axes,
            **{n: {0: 'batch_size', 2: 'past_decoder_sequence_length'} if '.decoder.' in n else cross_axes for n in past_names},
            **{n: self_axes for n in present_self},
        },
        opset_version=OPSET,
        dynamo=False,
    )
    merged = merge(onnx.load(no_past_path), onnx.load(with_past_path), past_names, present_all, H, D)
    onnx.checker.check_model(merged)
    onnx.save(merged, os.path.join(out, 'onnx', 'decoder_model_merged.onnx'))
    shutil.rmtree(tmp)

    reference = []
    with torch.no_grad():
        for p in PROMPTS:
            t = torch.tensor([p])
            g = model.generate(
                input_ids=t, attention_mask=torch.ones_like(t), max_new_tokens=MAX_NEW, do_sample=False, num_beams=1
            )
            reference.append({'inputIds': p, 'tokens': g[0].tolist()})
        # A decoder prompt (the start token and forced tokens), continued greedily.
        t = torch.tensor([PROMPTS[0]])
        prompt = [0, 17, 42]
        g = model.generate(
            input_ids=t,
            attention_mask=torch.ones_like(t),
            decoder_input_ids=torch.tensor([prompt]),
            max_new_tokens=MAX_NEW,
            do_sample=False,
            num_beams=1,
        )
        prompted = {'inputIds': PROMPTS[0], 'decoderInputIds': prompt, 'tokens': g[0].tolist()}
    config = cfg.to_diff_dict()
    config['architectures'] = ['T5ForConditionalGeneration']
    config.pop('transformers_version', None)
    write(out, 'config.json', config)
    write(
        out,
        'generation_config.json',
        {'decoder_start_token_id': 0, 'eos_token_id': 1, 'pad_token_id': 0, 'max_new_tokens': MAX_NEW},
    )
    write(out, 'reference.json', {'maxNewTokens': MAX_NEW, 'decoderStartTokenId': 0, 'eosTokenId': 1, 'cases': reference, 'prompted': prompted})


def write(out, name, value):
    with open(os.path.join(out, name), 'w') as f:
        json.dump(value, f, indent=1)


def merge(no_past, with_past, past_names, present_all, heads, head_size):
    """One graph: If(use_cache_branch) then the with-past graph, else the one without."""
    outer = set(past_names) | {'encoder_attention_mask', 'input_ids', 'encoder_hidden_states', 'use_cache_branch'}
    inits = []

    def branch(model, prefix, name):
        g = model.graph
        rename = lambda n: n if n == '' or n in outer else f'{prefix}/{n}'
        for t in g.initializer:
            t.name = rename(t.name)
            inits.append(t)
        nodes = []
        for n in g.node:
            n.input[:] = [rename(x) for x in n.input]
            n.output[:] = [rename(x) for x in n.output]
            n.name = rename(n.name or n.output[0])
            nodes.append(n)
        outputs = []
        for o in g.output:
            o = onnx.ValueInfoProto.FromString(o.SerializeToString())
            o.name = rename(o.name)
            outputs.append(o)
        # The with-past graph computes no cross-attention presents: empty constants stand in.
        have = {o.name for o in g.output}
        for n in present_all:
            if n not in have:
                empty = f'{prefix}/{n}'
                value = numpy_helper.from_array(np.zeros((1, heads, 0, head_size), np.float32), empty + '/value')
                nodes.append(helper.make_node('Constant', [], [empty], name=empty, value=value))
                outputs.append(helper.make_tensor_value_info(empty, TensorProto.FLOAT, [1, heads, 0, head_size]))
        order = ['logits', *present_all]
        outputs.sort(key=lambda o: order.index(o.name.split('/', 1)[1]))
        for o in outputs:  # shapes differ between the branches: leave them to the outer graph
            o.type.tensor_type.ClearField('shape')
        return helper.make_graph(nodes, name, [], outputs)

    then_graph = branch(with_past, 'with_past', 'decoder_with_past')
    else_graph = branch(no_past, 'no_past', 'decoder_no_past')
    inputs = [i for i in no_past.graph.input]
    inputs += [i for i in with_past.graph.input if i.name in past_names]
    inputs.append(helper.make_tensor_value_info('use_cache_branch', TensorProto.BOOL, [1]))
    outputs = [o for o in no_past.graph.output]
    node = helper.make_node(
        'If', ['use_cache_branch'], ['logits', *present_all], name='optimum::if', then_branch=then_graph, else_branch=else_graph
    )
    graph = helper.make_graph([node], 'merged_decoder', inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=no_past.opset_import, producer_name='export-seq2seq.py')
    m.ir_version = no_past.ir_version
    return m


if __name__ == '__main__':
    main(sys.argv[1])
