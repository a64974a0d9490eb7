"""Hugging Face ``transformers`` models built from a config with random weights (nothing downloaded), for
task extraction: ``bert``, ``gpt2``, ``vit``, ``resnet``, ``mobilenet_v2`` as small fixed configs, and any
other model type ``transformers.AutoConfig.for_model`` knows (``llama``, ``t5``, ``distilbert``,
``convnext``, ``swin``, ...) with size overrides.

A spec is ``TYPE`` or ``TYPE:KEY=VALUE,...``. Keys are the config's own attribute names
(``num_hidden_layers=4``) or the short names ``layers``, ``hidden``, ``heads``, ``intermediate``,
``image``, ``vocab``, which are mapped onto whatever the model type calls them (``n_layer``, ``d_model``,
``depths``, ...). Unless overridden, sizes are small (2 layers, hidden 64) so that extraction takes
seconds; the kinds of tasks are those of the full models, their shapes follow the sizes.
"""

from __future__ import annotations

# the five architectures with a fixed small config (their tasks stay the same from release to release)
FIXED = ("bert", "gpt2", "vit", "resnet", "mobilenet_v2")

# short size names -> the config attributes that mean it, in the order they are tried
SIZE_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers",
               "decoder_layers", "depths"),
    "hidden": ("hidden_size", "n_embd", "d_model", "dim", "embed_dim", "hidden_sizes"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads", "decoder_attention_heads",
              "num_key_value_heads"),
    "intermediate": ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "hidden_dim", "encoder_ffn_dim",
                     "decoder_ffn_dim"),
    "image": ("image_size",),
    "vocab": ("vocab_size",),
}

# the small default a model type gets for every size key it has (unless the spec overrides it)
SMALL = dict(layers=2, hidden=64, heads=2, intermediate=128, image=64, vocab=1000)

# model types known not to go through torch.export + Relax's importer yet, and why (checked with
# `costlab dataset extract --hf TYPE` on transformers 5.23 / TVM 0.27; docs/datasets.md lists what works)
UNSUPPORTED: dict[str, str] = {
    "vit_mae": "its random masking calls torch.rand, which Relax's importer has no operator for",
    "whisper": "it is fed audio features (input_features), not input_ids or pixel_values",
}


def parse_spec(spec: str) -> tuple[str, dict]:
    """``"llama:layers=4,hidden=256"`` -> ``("llama", {"layers": 4, "hidden": 256})``."""
    name, _, rest = spec.partition(":")
    name = name.strip().lower().replace("-", "_")
    if not name:
        raise ValueError(f"--hf wants TYPE or TYPE:KEY=VALUE,..., got {spec!r}")
    overrides = {}
    for item in (x.strip() for x in rest.split(",") if x.strip()):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--hf {spec!r}: {item!r} is not KEY=VALUE")
        overrides[key.strip()] = _value(value.strip())
    return name, overrides


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def network_name(spec: str, batch: int, seq_len: int, is_text: bool) -> str:
    """The network's name in the dataset: ``bert-b1-s32``, ``llama-hidden256-layers4-b1-s64`` (sizes in key order),
    ``vit-b1``."""
    name, overrides = parse_spec(spec)
    parts = [name] + [f"{k}{v}" for k, v in sorted(overrides.items())]
    return "-".join(parts) + f"-b{batch}" + (f"-s{seq_len}" if is_text else "")


def build(spec: str, batch: int, seq_len: int):
    """``(model, example_inputs, is_text)`` for a spec; raises ``ValueError`` naming what is wrong."""
    import torch

    torch.manual_seed(0)
    name, overrides = parse_spec(spec)
    if name in UNSUPPORTED:
        raise ValueError(f"model type {name!r} cannot be extracted yet: {UNSUPPORTED[name]}")
    if name in FIXED and not overrides:
        return _fixed(name, batch, seq_len)
    return _generic(name, overrides, batch, seq_len)


def _fixed(arch: str, batch: int, seq_len: int):
    import torch
    import transformers as tf

    text = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
    ids = lambda vocab: torch.randint(0, vocab, (batch, seq_len))  # noqa: E731
    if arch == "bert":
        cfg = tf.BertConfig(vocab_size=1000, max_position_embeddings=max(64, seq_len), **text)
        return tf.BertModel(cfg, add_pooling_layer=False), (ids(1000),), True
    if arch == "gpt2":
        cfg = tf.GPT2Config(vocab_size=1000, n_positions=max(64, seq_len), n_embd=64, n_layer=2, n_head=2,
                            n_inner=128, use_cache=False)
        return tf.GPT2Model(cfg), (ids(1000),), True
    if arch == "vit":
        cfg = tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, **text)
        return tf.ViTModel(cfg, add_pooling_layer=False), (torch.randn(batch, 3, 32, 32),), False
    if arch == "resnet":
        cfg = tf.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                              layer_type="basic")
        return tf.ResNetModel(cfg), (torch.randn(batch, 3, 64, 64),), False
    cfg = tf.MobileNetV2Config(num_channels=3, image_size=64, depth_multiplier=0.35)
    return tf.MobileNetV2Model(cfg), (torch.randn(batch, 3, 64, 64),), False


def is_model_type(name: str) -> bool:
    """Whether ``name`` is a model type a network spec names (``bert``, ``llama``, ...): one of ``FIXED``, or one
    ``transformers`` knows."""
    name = name.strip().lower().replace("-", "_")
    if name in FIXED:
        return True
    import transformers as tf  # lazy: transformers takes seconds to import; only a spec that is no module needs it

    return name in tf.CONFIG_MAPPING


def _config(name: str, overrides: dict, small: bool = True):
    """The model type's default config with the small sizes (unless ``small`` is False) and the spec's
    overrides applied."""
    import transformers as tf

    try:
        cfg = tf.AutoConfig.for_model(name)
    except ValueError:
        known = sorted(tf.CONFIG_MAPPING.keys())
        close = [k for k in known if k.startswith(name[:3])][:8]
        raise ValueError(f"unknown model type {name!r} for transformers {tf.__version__}"
                         + (f" (did you mean {', '.join(close)}?)" if close else "")) from None
    given = {k: v for k, v in overrides.items()}
    for short, default in SMALL.items():
        value = given.pop(short, None)
        if value is None and not small:
            continue
        attrs = [attr for attr in SIZE_KEYS[short] if hasattr(cfg, attr)]
        if value is not None and not attrs:
            if short == "image":  # a vision model sized by its input alone (ResNet): the image it is fed
                cfg.image_size = value
                continue
            # said, not dropped: the network would be named after a size it does not have
            raise _Unsupported(f"{name}: {short}= sets none of {type(cfg).__name__}'s sizes (it has none of "
                               f"{', '.join(SIZE_KEYS[short])})")
        for attr in attrs:
            _set_size(cfg, attr, default if value is None else value)
    for key, value in given.items():
        if not hasattr(cfg, key):
            raise ValueError(f"{name}: the config has no attribute {key!r} (short names: "
                             f"{', '.join(SIZE_KEYS)}; or any attribute of {type(cfg).__name__})")
        setattr(cfg, key, value)
    _consistent(cfg)
    cfg.use_cache = False
    return cfg


def _set_size(cfg, attr: str, value) -> None:
    old = getattr(cfg, attr)
    if isinstance(old, (list, tuple)):  # per-stage sizes (ConvNeXt, Swin, ResNet): scaled as a whole
        if attr == "depths":
            setattr(cfg, attr, [max(1, min(int(value), int(d))) for d in old])
        else:  # hidden sizes per stage: keep the ratios, start at the given size
            base = old[0] or 1
            setattr(cfg, attr, [max(1, int(value * d / base)) for d in old])
    elif old is None or isinstance(old, (int, float)):
        try:
            setattr(cfg, attr, value)
        except AttributeError:  # a derived, read-only size (Falcon's head_dim)
            pass


def _consistent(cfg) -> None:
    """Sizes that must divide each other after the overrides: head dims, key/value heads, Swin's embed dim."""
    heads = getattr(cfg, "num_attention_heads", None)
    if isinstance(heads, int) and heads > 0:
        if getattr(cfg, "num_key_value_heads", None):
            cfg.num_key_value_heads = max(1, min(cfg.num_key_value_heads, heads))
            while heads % cfg.num_key_value_heads:
                cfg.num_key_value_heads -= 1
        if hasattr(cfg, "head_dim") and isinstance(getattr(cfg, "hidden_size", None), int):
            try:
                cfg.head_dim = cfg.hidden_size // heads
            except AttributeError:  # derived from the other sizes (Falcon)
                pass
    if isinstance(getattr(cfg, "num_heads", None), (list, tuple)) and isinstance(getattr(cfg, "embed_dim", None), int):
        cfg.num_heads = [max(1, min(h, cfg.embed_dim // 16)) for h in cfg.num_heads]
    if hasattr(cfg, "max_position_embeddings") and isinstance(cfg.max_position_embeddings, int):
        cfg.max_position_embeddings = max(cfg.max_position_embeddings, 64)


def _generic(name: str, overrides: dict, batch: int, seq_len: int):
    """The model at small sizes; where the small sizes do not fit together for this model type (vision
    models whose stages, windows or heads depend on each other), at its default sizes with the spec's
    overrides only."""
    first = None
    for small in (True, False):
        try:
            model, inputs, is_text = _generic_at(name, _config(name, overrides, small), batch, seq_len)
            import torch

            with torch.no_grad():
                model.eval()(*inputs)  # the sizes fit together: a forward pass runs
            return model, inputs, is_text
        except _Unsupported:
            raise
        except Exception as exc:  # noqa: BLE001  sizes that do not fit: try the next, report the first
            first = first or exc
    raise ValueError(f"{name}: transformers cannot build or run a model from this config "
                     f"({type(first).__name__}: {str(first).strip().splitlines()[0][:200]})")


class _Unsupported(ValueError):
    pass


def _generic_at(name: str, cfg, batch: int, seq_len: int):
    import torch
    import transformers as tf

    model = tf.AutoModel.from_config(cfg)
    main = getattr(model, "main_input_name", "input_ids")
    if main == "pixel_values":
        size = getattr(cfg, "image_size", 64)
        size = size[0] if isinstance(size, (list, tuple)) else size
        channels = getattr(cfg, "num_channels", 3)
        return model, (torch.randn(batch, channels, size, size),), False
    if main != "input_ids":
        raise _Unsupported(f"{name}: models fed by {main!r} (audio, multi-modal) are not supported; text models "
                           "take input_ids, vision models pixel_values")
    vocab = int(getattr(cfg, "vocab_size", 1000) or 1000)
    ids = torch.randint(0, min(vocab, 1000), (batch, seq_len))
    if getattr(cfg, "is_encoder_decoder", False):
        return _EncoderDecoder(model), (ids, ids.clone()), True
    return model, (ids,), True


class _EncoderDecoder:
    """An encoder-decoder model (T5, BART) called with positional (input_ids, decoder_input_ids)."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, decoder_input_ids):
                return self.inner(input_ids=input_ids, decoder_input_ids=decoder_input_ids)

        return Wrapped(model)
