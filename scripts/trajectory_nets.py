"""Networks whose Relax tasks the trajectory corpus tunes beside TVM's te workloads: the layers of
``benchmarks/nets.py`` at sizes none of the benchmarks uses. Relax writes a dense layer as a matmul with a
2-D weight and a norm or softmax as its own fused functions; te_workload has neither form, so without these
the corpus (and the starter library built from it) would hold no program of the kernels networks spend
their time in. ``costlab tune --network trajectory_nets:FUNCTION`` takes them with this folder and
``benchmarks/`` on ``PYTHONPATH`` (``make_trajectories.py`` sets it).
"""

from __future__ import annotations

from nets import bert_layer, llama_layer


def llama_1024():
    return llama_layer(hidden=1024, heads=16, intermediate=2816, seq=64)


def llama_2048():
    return llama_layer(hidden=2048, heads=16, intermediate=5632, seq=32)


def llama_512():
    return llama_layer(hidden=512, heads=8, intermediate=1408, seq=256)


def bert_1024():
    return bert_layer(hidden=1024, heads=16, intermediate=4096, seq=64)


def bert_512():
    return bert_layer(hidden=512, heads=8, intermediate=2048, seq=256)
