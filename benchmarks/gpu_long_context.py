"""Time and peak memory of the probe suite on long sequences against a bare SDPA forward and run_with_cache.

Models are random-weight Llama-architecture models built from configs (no download): the
SmolLM2-135M shape (30 layers, 9 heads, 3 KV heads, d_model 576) and a Llama-3.2-1B shape
(16 layers, 32 heads, 8 KV heads, d_model 2048). Each measurement runs in a fresh Python process
(this script re-invoked with ``--child``), so peaks never mix. Routes, on the same random tokens:

- ``bare``: the Hugging Face model body (``LlamaModel``, no LM head) with its default SDPA
  attention, sharing the bridge's weights, under ``torch.inference_mode``;
- ``bridge``: the TransformerBridge's own forward (eager attention, logits included), the forward
  pass mechprobe runs on;
- ``eager``: the bridge's forward up to the last layer's ``hook_pattern`` with nothing kept
  (``probes.capture`` of that one hook): the floor of the suite, the model's own eager attention;
- ``suite``: ``probes.run_probes`` with HeadScoreProbe, GeneralizedInductionProbe(3) and
  TopicAttentionProbe (10 random topic labels) on the TransformerBridge (eager attention);
- ``blocks``: the same suite with ``max_pattern_bytes=0``: attention computed and probed a block of
  query rows at a time (``probes.core.attention_rows``; the default budget switches to it above 1 GiB of
  pattern per layer);
- ``cache``: ``bridge.run_with_cache`` keeping every layer's ``hook_pattern``.

Time is the median of ``--repeats`` runs after one warm-up. Peak memory is what the route adds on
top of the loaded model: ``torch.cuda.max_memory_allocated`` on a GPU, on the CPU the process's peak
RSS (``VmHWM``, reset through ``/proc/self/clear_refs`` after ``malloc_trim``) above its RSS before.
``--layers`` re-runs the SmolLM2 shape with fewer layers at one length: the suite's peak must stay flat as layers
are added (one layer's patterns at a time).

    .venv/bin/python benchmarks/gpu_long_context.py                       # CPU: SmolLM2 shape, 512/2048 tokens
    python benchmarks/gpu_long_context.py --device cuda --dtype bfloat16 \\
        --shapes smollm2 llama1b --lengths 512 2048 4096 8192 32768       # one 80 GB GPU
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from analyses.cli_checks import ScriptParser, count_arg, device_arg, number_arg, script_main, threads_arg
from analyses.output_paths import check_output_file, write_output_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHAPES = {
    "smollm2": {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                "num_key_value_heads": 3, "vocab_size": 49152, "rope_theta": 100000.0},
    "llama1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
                "num_key_value_heads": 8, "vocab_size": 128256, "rope_theta": 500000.0},
}
ROUTES = ("bare", "bridge", "eager", "suite", "blocks", "cache")


def _status_mib(field: str) -> float:
    """``VmRSS`` / ``VmHWM`` (peak RSS) of this process from /proc, in MiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_cpu_peak() -> float:
    """Return freed heap to the OS, reset the peak-RSS mark (Linux >= 4.0) and return the current RSS."""
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
        clear.write("5")
    return _status_mib("VmRSS")


def _smollm2_tokenizer():
    """The packaged SmolLM2 tokenizer (from the mechprobe cache once converted, else from its GGUF file)."""
    from transformers import AutoTokenizer

    from probes.core.loading import PACKAGED_MODELS, _package_dir, cache_dir

    entry = PACKAGED_MODELS["smollm2-135m"]
    converted = cache_dir() / "models" / entry.short_name
    if (converted / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(converted)
    return AutoTokenizer.from_pretrained(_package_dir(entry), gguf_file=entry.gguf_file)


def _build(shape: str, n_layers: int | None, n_ctx: int, device: str, dtype_name: str):
    """(bridge, bare LlamaModel sharing its weights) for a random-weight model of ``shape``."""
    import torch
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import LlamaConfig, LlamaModel
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    dtype = getattr(torch, dtype_name)
    settings = dict(SHAPES[shape])
    if n_layers is not None:
        settings["num_hidden_layers"] = n_layers
    config = LlamaConfig(**settings, max_position_embeddings=max(n_ctx, 2048), tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=2)
    tokenizer = _smollm2_tokenizer()
    folder = tempfile.mkdtemp(prefix=f"mechprobe-{shape}-")
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    with torch.device(device):
        hf = LlamaForCausalLM._from_config(config, dtype=dtype)
    sdpa_config = LlamaConfig(**settings, max_position_embeddings=max(n_ctx, 2048), attn_implementation="sdpa")
    with torch.device("meta"):
        bare = LlamaModel(sdpa_config)
    bare.load_state_dict(hf.model.state_dict(), assign=True)  # the same tensors, no copy
    bare.rotary_emb = hf.model.rotary_emb
    bare.eval()
    bridge = TransformerBridge.boot_transformers(folder, hf_model=hf, tokenizer=tokenizer, device=device, dtype=dtype)
    bridge.eval()
    return bridge, bare


def child(spec: dict) -> dict:
    import torch

    import probes

    torch.set_num_threads(spec["threads"]) if spec["threads"] else None
    device, n_pos = spec["device"], spec["length"]
    bridge, bare = _build(spec["shape"], spec["layers"], n_pos, device, spec["dtype"])
    info = probes.ModelInfo.of(bridge)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, min(info.d_vocab, 49152), (spec["batch"], n_pos), generator=generator).to(device)
    labels = torch.randint(0, 10, (info.d_vocab,), generator=generator)
    labels[:3] = -1

    def run() -> None:
        if spec["route"] == "bare":
            with torch.inference_mode():
                bare(input_ids=tokens)
        elif spec["route"] == "bridge":
            with torch.inference_mode():
                bridge(tokens)
        elif spec["route"] == "eager":
            with torch.inference_mode():
                last_pattern = probes.core.pattern_hook(info.n_layers - 1)
                probes.capture(bridge, probes.as_token_batch(tokens, info), [last_pattern])
        elif spec["route"] in ("suite", "blocks"):
            suite = [probes.HeadScoreProbe(), probes.GeneralizedInductionProbe(3), probes.TopicAttentionProbe(labels)]
            budget = 0 if spec["route"] == "blocks" else probes.core.runner.MAX_PATTERN_BYTES
            probes.run_probes(bridge, suite, [tokens], progress=False, max_pattern_bytes=budget)
        else:
            with torch.inference_mode():
                bridge.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_pattern"))

    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _reset_cpu_peak()
    times = []
    try:
        for _ in range(spec["repeats"] + 1):
            start = time.perf_counter()
            run()
            sync()
            times.append(time.perf_counter() - start)
    except Exception as error:  # out of memory is a result here, not a crash
        if not probes.core.out_of_memory.is_out_of_memory(error) and "out of memory" not in str(error).lower():
            raise
        return {**spec, "seconds": None, "peak_mib": None, "error": "out of memory"}
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else _status_mib("VmHWM") - base
    return {**spec, "seconds": statistics.median(times[1:]), "peak_mib": peak, "error": None,
            "attention_kernels_per_layer": _attention_kernels(run, info.n_layers)}


def _attention_kernels(run, n_layers: int) -> dict[str, float]:
    """The attention kernels one more (untimed) pass calls, per layer: which route each layer's attention took."""
    import collections

    from torch.utils._python_dispatch import TorchDispatchMode

    class Kernels(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: collections.Counter[str] = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if "attention" in name or name in ("bmm", "baddbmm", "softmax", "_softmax"):
                self.calls[name] += 1
            return func(*args, **(kwargs or {}))

    counter = Kernels()
    with counter:
        run()
    return {name: count / n_layers for name, count in sorted(counter.calls.items())}


MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week; subprocess's wait overflows from about 24.8 days (2**31 ms) on


def _measure(spec: dict, timeout: float | None) -> dict:
    try:
        done = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**spec, "seconds": None, "peak_mib": None, "error": f"over {timeout:g} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {**spec, "seconds": None, "peak_mib": None, "error": tail[:120]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _save(path: str | None, rows: list[dict]) -> None:
    """Write the measurements so far to ``path`` (when given): a run stopped part way keeps what it measured."""
    if path:
        write_output_file(path, json.dumps(rows, indent=1))


def _skipped(route: str) -> dict:
    return {"route": route, "seconds": None, "peak_mib": None, "error": "-"}


def _cell(row: dict, key: str, fmt: str) -> str:
    return (row["error"] or "-") if row[key] is None else format(row[key], fmt)


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}x"


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", type=device_arg, default="cpu")
    parser.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"),
                        help="default: bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--shapes", nargs="+", default=["smollm2"], choices=sorted(SHAPES))
    parser.add_argument("--lengths", type=count_arg(1), nargs="+", default=[512, 2048])
    parser.add_argument("--batch", type=count_arg(1), default=1)
    parser.add_argument("--n-layers", type=count_arg(1), default=None,
                        help="layers of every shape in the main table (default: the shape's own count)")
    parser.add_argument("--repeats", type=count_arg(1), default=3)
    parser.add_argument("--layers", type=count_arg(1), nargs="*", default=[4, 8, 16, 30],
                        help="layer counts of the SmolLM2 shape for the flat-in-layers check (empty: skip)")
    parser.add_argument("--layers-length", type=count_arg(1), default=2048)
    parser.add_argument("--routes", nargs="+", default=list(ROUTES), choices=ROUTES,
                        help="routes to run (default all; cache runs out of memory first at long lengths)")
    parser.add_argument("--threads", type=threads_arg(0), default=0, help="torch threads in each child (0 = default)")
    parser.add_argument("--timeout", type=number_arg(positive=True, maximum=MAX_TIMEOUT_S), default=None,
                        help="seconds each measurement's process may take (default: no limit)")
    parser.add_argument("--json", help="also write every measurement to this file (rewritten after each one)")
    parser.add_argument("--skip", nargs="*", default=[], metavar="SHAPE:TOKENS:ROUTE",
                        help="measurements not to run (gpu_check passes those the cost ledger says will not fit)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.json is not None:
        check_output_file("--json", args.json)
    for item in args.skip:
        fields = item.split(":")
        if len(fields) != 3 or fields[0] not in SHAPES or not fields[1].isdigit() or fields[2] not in ROUTES:
            parser.error(f"--skip {item!r}: expected SHAPE:TOKENS:ROUTE with SHAPE one of {sorted(SHAPES)} and ROUTE "
                         f"one of {list(ROUTES)}, e.g. llama1b:32768:bridge")
        if item not in {f"{shape}:{length}:{route}" for shape in args.shapes for length in args.lengths
                        for route in ROUTES}:  # it would skip nothing, silently
            parser.error(f"--skip {item!r} names no measurement of this run (--shapes {' '.join(args.shapes)}, "
                         f"--lengths {' '.join(map(str, args.lengths))}); give a shape and a length of those")
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    common = {"device": args.device, "dtype": dtype, "batch": args.batch, "repeats": args.repeats,
              "threads": args.threads}
    rows = []
    print(f"device {args.device}, {dtype}, batch {args.batch}; peak = memory added on top of the loaded model")
    print(f"{'shape':>8} {'tokens':>7} | " + " ".join(f"{r + ' s':>9}" for r in ROUTES)
          + f" {'suite/bare':>10} {'suite/bridge':>12} | " + " ".join(f"{r + ' MiB':>11}" for r in ROUTES)
          + f" {'suite/bare':>10}")
    for shape in args.shapes:
        for length in args.lengths:
            spec = {**common, "shape": shape, "layers": args.n_layers, "length": length}
            got = {}
            for route in ROUTES:
                if f"{shape}:{length}:{route}" in args.skip:
                    got[route] = {**spec, "route": route, "seconds": None, "peak_mib": None,
                                  "error": "skipped: does not fit (ledger)"}
                else:
                    got[route] = _measure({**spec, "route": route}, args.timeout) if route in args.routes \
                        else _skipped(route)
                _save(args.json, [*rows, *got.values()])
            rows.extend(got.values())
            times = " ".join(f"{_cell(got[r], 'seconds', '.3f'):>9}" for r in ROUTES)
            peaks = " ".join(f"{_cell(got[r], 'peak_mib', '.0f'):>11}" for r in ROUTES)
            print(f"{shape:>8} {length:>7} | {times} {_ratio(got['suite']['seconds'], got['bare']['seconds']):>10} "
                  f"{_ratio(got['suite']['seconds'], got['bridge']['seconds']):>12} | {peaks} "
                  f"{_ratio(got['suite']['peak_mib'], got['bare']['peak_mib']):>10} "
                  f"{_ratio(got['suite']['peak_mib'], got['eager']['peak_mib']):>11} "
                  f"{_ratio(got['blocks']['peak_mib'], got['bare']['peak_mib']):>11}")
    if args.layers:
        print(f"\nSmolLM2 shape at {args.layers_length} tokens, layers probed vs peak MiB added")
        print(f"{'layers':>7} " + " ".join(f"{r + ' MiB':>11}" for r in ROUTES))
        for n_layers in args.layers:
            got = {route: _measure({**common, "repeats": 1, "shape": "smollm2", "layers": n_layers,
                                    "length": args.layers_length, "route": route}, args.timeout)
                   if route in args.routes else _skipped(route) for route in ROUTES}
            rows.extend(got.values())
            _save(args.json, rows)
            print(f"{n_layers:>7} " + " ".join(f"{_cell(got[r], 'peak_mib', '.0f'):>11}" for r in ROUTES))


if __name__ == "__main__":
    main()
