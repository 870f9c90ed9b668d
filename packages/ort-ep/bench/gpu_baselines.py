"""The GPU benchmark's references, on the machine itself: exports the large models with its torch
(random weights, fixed seeds; export-models.py), then times torch CUDA eager (float32, TF32 off,
inputs already on the GPU, so no transfers) and onnxruntime's CPU provider (all cores) on the same
inputs. Writes a JSON file that gpu-report.ts merges with the mlx figures of gpu.ts.

  python3 gpu_baselines.py OUT_DIR RESULT.json [--runs 20] [--only a,b]
"""
import argparse
import importlib.util
import json
import os
import statistics
import time

import numpy as np
import onnx
import torch
from onnx import numpy_helper

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location('export_models', os.path.join(here, 'export-models.py'))
export_models = importlib.util.module_from_spec(spec)
spec.loader.exec_module(export_models)

ALL = 'bert-base,bert-base-b8,gpt2-small,resnet50,matmul4096'


def inputs_of(folder):
    data = os.path.join(folder, 'test_data_set_0')
    out = []
    i = 0
    while os.path.exists(os.path.join(data, f'input_{i}.pb')):
        t = onnx.TensorProto()
        with open(os.path.join(data, f'input_{i}.pb'), 'rb') as f:
            t.ParseFromString(f.read())
        out.append(numpy_helper.to_array(t))
        i += 1
    return out


def time_torch(name, runs):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(export_models.SEEDS[name])
    model, inputs, *_ = export_models.MODELS[name]()
    model = model.cuda().eval()
    xs = [t.cuda() for t in inputs]
    with torch.no_grad():
        t0 = time.perf_counter()
        model(*xs)
        torch.cuda.synchronize()
        first = (time.perf_counter() - t0) * 1000
        for _ in range(5):
            model(*xs)
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            model(*xs)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1000)
    return {'firstMs': first, 'medianMs': statistics.median(times), 'minMs': min(times)}


def time_ort(folder, runs):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = os.cpu_count() or 1
    t0 = time.perf_counter()
    s = ort.InferenceSession(os.path.join(folder, 'model.onnx'), so, providers=['CPUExecutionProvider'])
    create = (time.perf_counter() - t0) * 1000
    feeds = {i.name: x for i, x in zip(s.get_inputs(), inputs_of(folder))}
    t0 = time.perf_counter()
    outs = s.run(None, feeds)
    first = (time.perf_counter() - t0) * 1000
    # onnxruntime CPU's outputs become the data set's reference outputs (as for ../shared/models):
    # torch's eager outputs differ from what its exporter wrote for some transformers models.
    for i, (o, meta) in enumerate(zip(outs, s.get_outputs())):
        with open(os.path.join(folder, 'test_data_set_0', f'output_{i}.pb'), 'wb') as f:
            f.write(numpy_helper.from_array(o, meta.name).SerializeToString())
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, feeds)
        times.append((time.perf_counter() - t) * 1000)
    return {'createMs': create, 'firstMs': first, 'medianMs': statistics.median(times), 'threads': so.intra_op_num_threads}


def main():
    p = argparse.ArgumentParser()
    p.add_argument('out')
    p.add_argument('result')
    p.add_argument('--runs', type=int, default=20)
    p.add_argument('--only', default=ALL)
    a = p.parse_args()
    names = a.only.split(',')
    for n in names:
        if not os.path.exists(os.path.join(a.out, n, 'model.onnx')):
            export_models.export(n, a.out, 'cpu')
    res = {'torch': torch.__version__, 'gpu': torch.cuda.get_device_name(0), 'models': {}}
    for n in names:
        folder = os.path.join(a.out, n)
        r = {'ortCpu': time_ort(folder, max(3, a.runs // 4)), 'torchCuda': time_torch(n, a.runs)}
        res['models'][n] = r
        print(f"{n:14} torch cuda {r['torchCuda']['medianMs']:.2f} ms   onnxruntime cpu ({r['ortCpu']['threads']} threads) {r['ortCpu']['medianMs']:.1f} ms", flush=True)
    with open(a.result, 'w') as f:
        json.dump(res, f, indent=2)


if __name__ == '__main__':
    main()
