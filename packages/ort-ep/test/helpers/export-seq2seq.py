"""Exports tiny encoder-decoders (random weights, fixed seeds) in the layout optimum and
transformers.js use:

  OUT/onnx/encoder_model.onnx          input_ids, attention_mask (T5) or input_features (Whisper)
                                       -> last_hidden_state
  OUT/onnx/decoder_model_merged.onnx   encoder_attention_mask (T5), input_ids, encoder_hidden_states,
                                       past_key_values.{i}.decoder/encoder.key/value, use_cache_branch
                                       -> logits, present.{i}.decoder/encoder.key/value
  OUT/reference.json                   transformers' own greedy generate: T5 for a few inputs (and one
                                       with a decoder prompt), Whisper for input_features.bin from a
                                       forced decoder prompt
  OUT/config.json, OUT/generation_config.json (and Whisper's preprocessor_config.json)

whisper-ts is the Whisper-shaped model with timestamp tokens after <|notimestamps|>, 0.02 s apart as
Whisper's (384 <|0.00|> ... 684 <|6.00|>: the first 301 of Whisper's 1501, to keep the file small); its reference is transformers' greedy generate from the
English-only timestamp prompt (<|startoftranscript|>) with WhisperTimeStampLogitsProcessor,
SuppressTokensLogitsProcessor and SuppressTokensAtBeginLogitsProcessor, as Whisper's generate adds them.

The merged decoder is two torch.onnx exports (without and with a past) joined under an If on
use_cache_branch, as optimum merges them: the branch with a past computes no cross-attention keys
and values, and its present.{i}.encoder.* outputs are empty constants (a caller keeps the first
step's). Needs the project's bench Python (tools/install-bench-python.sh): torch, transformers, onnx.

  python export-seq2seq.py t5|whisper|whisper-ts OUT
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


class Wrapper(torch.nn.Module):
    def __init__(self, model, fn):
        super().__init__()
        self.model, self.fn = model, fn  # the model's parameters become the graph's initializers

    def forward(self, *args):
        return self.fn(*args)


def kv_names(layers):
    kv = lambda i: [f'{i}.decoder.key', f'{i}.decoder.value', f'{i}.encoder.key', f'{i}.encoder.value']
    return (
        [f'past_key_values.{n}' for i in range(layers) for n in kv(i)],
        [f'present.{n}' for i in range(layers) for n in kv(i)],
        [f'present.{n}' for i in range(layers) for n in kv(i)[:2]],
    )


def export_models(out, model, encoder, encoder_inputs, encoder_names, decoder, layers, heads, head_size, masked):
    """encoder_model.onnx and decoder_model_merged.onnx. decoder(mask, ids, hidden, past) returns
    the hidden states and the legacy cache; `masked`: the decoder takes encoder_attention_mask."""
    os.makedirs(os.path.join(out, 'onnx'), exist_ok=True)
    tmp = os.path.join(out, 'parts')
    os.makedirs(tmp, exist_ok=True)
    past_names, present_all, present_self = kv_names(layers)
    seq_axes = {0: 'batch_size', 1: 'encoder_sequence_length'}
    torch.onnx.export(
        Wrapper(model, encoder),
        encoder_inputs,
        os.path.join(out, 'onnx', 'encoder_model.onnx'),
        input_names=encoder_names,
        output_names=['last_hidden_state'],
        dynamic_axes={**{n: seq_axes if n != 'input_features' else {0: 'batch_size'} for n in encoder_names}, 'last_hidden_state': seq_axes},
        opset_version=OPSET,
        dynamo=False,
    )

    def no_past(*args):
        mask, ids, hidden = args if masked else (None, *args)
        logits, cache = decoder(mask, ids, hidden, ())
        return (logits, *[t for layer in cache for t in layer])

    def with_past(*args):
        mask, ids, hidden, *past = args if masked else (None, *args)
        legacy = tuple(tuple(past[4 * i : 4 * i + 4]) for i in range(layers))
        logits, cache = decoder(mask, ids, hidden, legacy)
        return (logits, *[t for layer in cache for t in layer[:2]])

    with torch.no_grad():
        hidden = Wrapper(model, encoder)(*encoder_inputs)
    mask = torch.ones(hidden.shape[:2], dtype=torch.long)
    ids = torch.tensor([[0, 5, 9]])
    head = (mask,) if masked else ()
    names = ['encoder_attention_mask'] if masked else []
    names += ['input_ids', 'encoder_hidden_states']
    axes = {
        'encoder_attention_mask': {0: 'batch_size', 1: 'encoder_sequence_length'},
        'input_ids': {0: 'batch_size', 1: 'decoder_sequence_length'},
        'encoder_hidden_states': {0: 'batch_size', 1: 'encoder_sequence_length'},
        'logits': {0: 'batch_size', 1: 'decoder_sequence_length'},
    }
    axes = {k: v for k, v in axes.items() if k in names or k == 'logits'}
    self_axes = {0: 'batch_size', 2: 'decoder_sequence_length_out'}
    cross_axes = {0: 'batch_size', 2: 'encoder_sequence_length_out'}
    with torch.no_grad():
        first = Wrapper(model, no_past)(*head, ids, hidden)
    no_past_path = os.path.join(tmp, 'decoder_model.onnx')
    torch.onnx.export(
        Wrapper(model, no_past),
        (*head, ids, hidden),
        no_past_path,
        input_names=names,
        output_names=['logits', *present_all],
        dynamic_axes={**axes, **{n: self_axes if '.decoder.' in n else cross_axes for n in present_all}},
        opset_version=OPSET,
        dynamo=False,
    )
    with_past_path = os.path.join(tmp, 'decoder_with_past_model.onnx')
    torch.onnx.export(
        Wrapper(model, with_past),
        (*head, ids[:, -1:], hidden, *first[1:]),
        with_past_path,
        input_names=[*names, *past_names],
        output_names=['logits', *present_self],
        dynamic_axes={
            **axes,
            **{n: {0: 'batch_size', 2: 'past_decoder_sequence_length'} if '.decoder.' in n else cross_axes for n in past_names},
            **{n: self_axes for n in present_self},
        },
        opset_version=OPSET,
        dynamo=False,
    )
    merged = merge(onnx.load(no_past_path), onnx.load(with_past_path), past_names, present_all, heads, head_size)
    onnx.checker.check_model(merged)
    onnx.save(merged, os.path.join(out, 'onnx', 'decoder_model_merged.onnx'))
    shutil.rmtree(tmp)


def t5(out):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(7)
    cfg = T5Config(**CONFIG)
    cfg._attn_implementation = 'eager'
    model = T5ForConditionalGeneration(cfg).eval()

    def encoder(input_ids, attention_mask):
        return model.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state

    def decoder(mask, ids, hidden, past):
        o = model.decoder(
            input_ids=ids,
            encoder_hidden_states=hidden,
            encoder_attention_mask=mask,
            past_key_values=past,
            use_cache=True,
            return_dict=True,
        )
        h = o.last_hidden_state * (cfg.d_model**-0.5) if cfg.tie_word_embeddings else o.last_hidden_state
        return model.lm_head(h), o.past_key_values

    ids = torch.tensor([PROMPTS[1]])
    export_models(
        out,
        model,
        encoder,
        (ids, torch.ones_like(ids)),
        ['input_ids', 'attention_mask'],
        decoder,
        cfg.num_decoder_layers,
        cfg.num_heads,
        cfg.d_kv,
        masked=True,
    )
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


WHISPER = dict(
    vocab_size=384,
    num_mel_bins=80,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    d_model=64,
    encoder_ffn_dim=128,
    decoder_ffn_dim=128,
    max_source_positions=1500,
    max_target_positions=64,
    decoder_start_token_id=380,
    eos_token_id=379,
    pad_token_id=379,
    bos_token_id=379,
    suppress_tokens=None,
    begin_suppress_tokens=None,
    init_std=0.3,  # weights large enough that greedy decoding does not repeat one token
)


def whisper(out):
    """A Whisper-shaped model: input_features [1, 80, 3000] in, a decoder without an encoder mask.
    The reference is transformers' plain greedy generate (not Whisper's own, whose logits
    processors want a real tokenizer's special tokens) from a forced decoder prompt."""
    from transformers import GenerationMixin, WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(11)
    cfg = WhisperConfig(**WHISPER)
    cfg._attn_implementation = 'eager'
    model = WhisperForConditionalGeneration(cfg).eval()

    def encoder(input_features):
        return model.model.encoder(input_features=input_features, return_dict=True).last_hidden_state

    def decoder(mask, ids, hidden, past):
        o = model.model.decoder(input_ids=ids, encoder_hidden_states=hidden, past_key_values=past, use_cache=True, return_dict=True)
        return model.proj_out(o.last_hidden_state), o.past_key_values

    g = torch.Generator().manual_seed(3)
    features = torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=g)
    export_models(
        out,
        model,
        encoder,
        (features,),
        ['input_features'],
        decoder,
        cfg.decoder_layers,
        cfg.decoder_attention_heads,
        cfg.d_model // cfg.decoder_attention_heads,
        masked=False,
    )
    prompt = [380, 300, 301, 302]  # start, "language", "task", "no timestamps"
    with torch.no_grad():
        out_ids = GenerationMixin.generate(
            model, input_features=features, decoder_input_ids=torch.tensor([prompt]), max_new_tokens=MAX_NEW, do_sample=False, num_beams=1
        )
    features.numpy().astype('<f4').tofile(os.path.join(out, 'input_features.bin'))
    # As transformers.js loads an English-only Whisper: its prompt is <|startoftranscript|> (380),
    # <|notimestamps|> (383); 379 is <|endoftext|>, 381 and 382 <|transcribe|> and <|translate|>.
    config = cfg.to_diff_dict()
    config['architectures'] = ['WhisperForConditionalGeneration']
    config.pop('transformers_version', None)
    write(out, 'config.json', config)
    write(
        out,
        'generation_config.json',
        {
            'decoder_start_token_id': 380,
            'eos_token_id': 379,
            'pad_token_id': 379,
            'bos_token_id': 379,
            'no_timestamps_token_id': 383,
            'is_multilingual': False,
            'max_length': cfg.max_target_positions,
        },
    )
    write(
        out,
        'preprocessor_config.json',
        {
            'feature_extractor_type': 'WhisperFeatureExtractor',
            'processor_class': 'WhisperProcessor',
            'feature_size': cfg.num_mel_bins,
            'sampling_rate': 16000,
            'hop_length': 160,
            'chunk_length': 30,
            'n_fft': 400,
            'n_samples': 480000,
            'nb_max_frames': 3000,
            'padding_side': 'right',
            'padding_value': 0.0,
            'return_attention_mask': False,
        },
    )
    write(
        out,
        'reference.json',
        {
            'maxNewTokens': MAX_NEW,
            'eosTokenId': 379,
            'featureDims': list(features.shape),
            'decoderInputIds': prompt,
            'tokens': out_ids[0].tolist(),
        },
    )


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


WHISPER_TS_MAX_NEW = 32


def whisper_ts(out):
    """A Whisper-shaped model with timestamp tokens, and transformers' timestamped greedy decoding."""
    from transformers import GenerationConfig, GenerationMixin, WhisperConfig, WhisperForConditionalGeneration
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        SuppressTokensAtBeginLogitsProcessor,
        SuppressTokensLogitsProcessor,
        WhisperTimeStampLogitsProcessor,
    )

    torch.manual_seed(13)
    cfg = WhisperConfig(**dict(WHISPER, vocab_size=384 + 301))
    cfg._attn_implementation = 'eager'
    model = WhisperForConditionalGeneration(cfg).eval()

    def encoder(input_features):
        return model.model.encoder(input_features=input_features, return_dict=True).last_hidden_state

    def decoder(mask, ids, hidden, past):
        o = model.model.decoder(input_ids=ids, encoder_hidden_states=hidden, past_key_values=past, use_cache=True, return_dict=True)
        return model.proj_out(o.last_hidden_state), o.past_key_values

    g = torch.Generator().manual_seed(5)
    features = torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=g)
    export_models(
        out,
        model,
        encoder,
        (features,),
        ['input_features'],
        decoder,
        cfg.decoder_layers,
        cfg.decoder_attention_heads,
        cfg.d_model // cfg.decoder_attention_heads,
        masked=False,
    )
    prompt = [380]  # English-only with timestamps: <|startoftranscript|> alone
    base = {
        'decoder_start_token_id': 380,
        'eos_token_id': 379,
        'pad_token_id': 379,
        'bos_token_id': 379,
        'no_timestamps_token_id': 383,
        'is_multilingual': False,
        'max_initial_timestamp_index': 50,
        'max_length': cfg.max_target_positions,
    }

    def generate(suppress, begin_suppress):
        gc = GenerationConfig(**base)
        processors = [SuppressTokensLogitsProcessor(suppress), SuppressTokensAtBeginLogitsProcessor(begin_suppress, len(prompt))]
        processors.append(WhisperTimeStampLogitsProcessor(gc, begin_index=len(prompt)))
        with torch.no_grad():
            ids = GenerationMixin.generate(
                model,
                input_features=features,
                decoder_input_ids=torch.tensor([prompt]),
                generation_config=GenerationConfig(**base, max_new_tokens=WHISPER_TS_MAX_NEW, do_sample=False, num_beams=1),
                logits_processor=LogitsProcessorList(processors),
            )
        return ids[0].tolist()

    # The suppressed tokens are ones the plain timestamped run chooses, so that each list changes the
    # output: its first text token (suppress_tokens) and its first timestamp (begin_suppress_tokens).
    plain = generate([], [])[len(prompt) :]
    suppress = [next(t for t in plain if t < 379)]
    begin_suppress = [plain[0]]
    tokens = generate(suppress, begin_suppress)
    features.numpy().astype('<f4').tofile(os.path.join(out, 'input_features.bin'))
    config = cfg.to_diff_dict()
    config['architectures'] = ['WhisperForConditionalGeneration']
    config.pop('transformers_version', None)
    write(out, 'config.json', config)
    write(out, 'generation_config.json', dict(base, suppress_tokens=suppress, begin_suppress_tokens=begin_suppress))
    write(
        out,
        'reference.json',
        {
            'maxNewTokens': WHISPER_TS_MAX_NEW,
            'eosTokenId': 379,
            'featureDims': list(features.shape),
            'decoderInputIds': prompt,
            'tokens': tokens,
            'plain': plain,
        },
    )


if __name__ == '__main__':
    {'t5': t5, 'whisper': whisper, 'whisper-ts': whisper_ts}[sys.argv[1]](sys.argv[2])
