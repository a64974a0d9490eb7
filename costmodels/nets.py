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
    from costlab.datasets.checks import check_fields

    if ALIASES.get(kind, kind) not in KINDS:
        raise ValueError(f"unknown model kind {kind!r} (known: {', '.join(sorted(KINDS) + sorted(ALIASES))})")
    _, net_cls, cfg_cls = KINDS[ALIASES.get(kind, kind)]
    return net_cls(cfg_cls(**check_fields(cfg_cls, dict(net_config), "net")))


def net_inputs(kind: str, batch: dict) -> tuple:
    kind = ALIASES.get(kind, kind)
    if kind == "tlp":
        return batch["kind"].long(), batch["numeric"].float(), batch["mask"].bool()
    program = batch["program"].float() if "program" in batch else None
    return batch["stmt"].float(), batch["stmt_mask"], batch["pattern"].float(), batch["pattern_mask"], program
