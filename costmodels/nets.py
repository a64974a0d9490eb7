"""Which net each model kind is, how its size follows from the featurizer, and which batch entries it eats."""

from __future__ import annotations

from costlab.costmodels.pacm_net import PaCMNet, PaCMNetConfig
from costlab.costmodels.tlp_net import TLPNet, TLPNetConfig

# model kind -> (featurizer it is fed by, net class, config class)
KINDS = {
    "tlp": ("tlp", TLPNet, TLPNetConfig),
    "pacm": ("pacm", PaCMNet, PaCMNetConfig),
}
# "mtl" is the TLP net with one head per platform
ALIASES = {"mtl": "tlp"}


def featurizer_for(kind: str) -> str:
    return KINDS[ALIASES.get(kind, kind)][0]


def net_config_for(kind: str, featurizer, heads: int, **overrides) -> dict:
    """The net config of a model kind, sized from a fitted featurizer."""
    kind = ALIASES.get(kind, kind)
    if kind == "tlp":
        cfg = featurizer.config
        base = dict(vocab_size=len(cfg["vocabulary"]), num_slots=int(cfg["num_slots"]),
                    max_len=int(cfg["seq_len"]))
    elif kind == "pacm":
        from costlab.featurizers.pacm import PATTERN_FEATURES, PROGRAM_FEATURES, STMT_FEATURES

        base = dict(stmt_features=STMT_FEATURES, pattern_features=PATTERN_FEATURES, program_features=PROGRAM_FEATURES)
    else:
        raise ValueError(f"unknown model kind {kind!r} (known: {', '.join(sorted(KINDS) + sorted(ALIASES))})")
    return {**base, "heads": heads, **overrides}


def build_net(kind: str, net_config: dict):
    """The net of ``kind`` built from ``net_config``; an unknown kind or option, or a value of the wrong type,
    is a ValueError naming it (checked against the config dataclass before torch sees it)."""
    from costlab.common.checks import check_fields

    if ALIASES.get(kind, kind) not in KINDS:
        raise ValueError(f"unknown model kind {kind!r} (known: {', '.join(sorted(KINDS) + sorted(ALIASES))})")
    _, net_cls, cfg_cls = KINDS[ALIASES.get(kind, kind)]
    return net_cls(cfg_cls(**check_fields(cfg_cls, dict(net_config), "net")))


def check_featurizer_fits(kind: str, net_config: dict, featurizer: dict) -> str | None:
    """What makes a stored featurizer (its ``to_json()``) unfit to feed a net of ``kind`` built from
    ``net_config`` (a TLP vocabulary of another size than the net's embedding, other numeric slots, longer
    sequences than its positions; PaCM feature counts other than the net's), or None when it fits. A featurizer
    this costlab does not know, or of another version, is left to the loader to refuse."""
    from costlab.featurizers import from_json

    try:
        feat = from_json(featurizer)
    except (ValueError, TypeError, AttributeError):
        return None
    kind = ALIASES.get(kind, kind)
    if feat.name != featurizer_for(kind):
        return f"a {kind} net is fed by the {featurizer_for(kind)} featurizer, not {feat.name}"
    cfg = feat.config
    try:
        if kind == "tlp":
            vocabulary = cfg.get("vocabulary")
            if not isinstance(vocabulary, list):
                return "the tlp featurizer has no vocabulary"
            if len(vocabulary) != int(net_config["vocab_size"]):
                return (f"its vocabulary has {len(vocabulary)} entries, the net's embedding "
                        f"{int(net_config['vocab_size'])}")
            if int(cfg["num_slots"]) != int(net_config["num_slots"]):
                return (f"it gives {int(cfg['num_slots'])} numeric slots per token, the net reads "
                        f"{net_config['num_slots']}")
            if int(cfg["seq_len"]) > int(net_config["max_len"]):
                return (f"its sequences are {int(cfg['seq_len'])} tokens long, the net has {net_config['max_len']} "
                        "positions")
        elif kind == "pacm":
            base = net_config_for("pacm", feat, 1)
            for key in ("stmt_features", "pattern_features"):
                if int(net_config[key]) != base[key]:
                    return f"it gives {base[key]} {key}, the net reads {net_config[key]}"
            if int(net_config.get("program_features", 0)) not in (0, base["program_features"]):
                return (f"it gives {base['program_features']} program_features, the net reads "
                        f"{net_config['program_features']}")
    except (KeyError, TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def net_inputs(kind: str, batch: dict) -> tuple:
    kind = ALIASES.get(kind, kind)
    if kind == "tlp":
        return batch["kind"].long(), batch["numeric"].float(), batch["mask"].bool()
    program = batch["program"].float() if "program" in batch else None
    return batch["stmt"].float(), batch["stmt_mask"], batch["pattern"].float(), batch["pattern_mask"], program
