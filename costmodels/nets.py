"""The learned model kinds (registered in ``kinds.py``): which net each is, how its size follows from the
featurizer, which batch entries it eats, and how a predictor is loaded from its artifact.

Importing it imports no torch: the kinds' registry (and with it the command line's ``--model`` choices) loads
this module, and a net's classes are imported by ``net_classes`` when one is built.
"""

from __future__ import annotations

from typing import ClassVar

from costlab.common.checks import check_fields
from costlab.common.errors import InputError
from costlab.costmodels import kinds
from costlab.costmodels.kinds import ModelKind, register
from costlab.featurizers import from_json
from costlab.featurizers.hardware_vector import check_version
from costlab.featurizers.pacm import PATTERN_FEATURES, PROGRAM_FEATURES, STMT_FEATURES


class NetKind(ModelKind):
    """A learned net: its class and config class, sized from a fitted featurizer."""

    #: the net it builds: its own name, or the kind whose net it shares ("mtl" is the TLP net)
    net: ClassVar[str]

    def net_classes(self) -> tuple[type, type]:
        """(net class, config class). Imported here, not at the top: they import torch, which listing the
        kinds (``costlab --help``) must not."""
        raise NotImplementedError

    def base_config(self, featurizer) -> dict:
        """The net config's sizes that follow from a fitted featurizer."""
        raise NotImplementedError

    def featurizer_fits(self, net_config: dict, feat) -> str | None:
        """What makes the featurizer ``feat`` (of this kind's featurizer) unfit for ``net_config``, or None."""
        return None

    def inputs(self, batch: dict) -> tuple:
        raise NotImplementedError

    def predictor(self, art=None, seed: int = 0, device: str | None = None):
        """The net of an artifact, with its weights, as a ``NetPredictor`` on ``device`` (None: the GPU when there
        is one): a net config that does not build, or a hardware input of another version than this costlab's, is
        an InputError naming the artifact."""
        from costlab.costmodels.artifact import load_state  # lazy: pulls torch; listing the kinds (the parser) must not
        from costlab.costmodels.predictors import NetPredictor  # lazy: pulls torch, as above

        config = art.config
        try:
            net = build_net(self.name, config["net"])
        except (TypeError, ValueError) as exc:
            raise InputError(art.path, f"net config is not valid for a {self.name} net ({exc})") from None
        if config["net"].get("hardware_dim"):
            problem = check_version(config.get("hardware"))
            if problem:
                raise InputError(art.path, f"its hardware input does not fit ({problem})")
        return NetPredictor(load_state(net, art.tensors, art.path), self.name, config["featurizer"],
                            config["platforms"], config, device=device)


@register
class TLPKind(NetKind):
    name = net = featurizer = "tlp"
    title = "TLP"

    def net_classes(self) -> tuple[type, type]:
        from costlab.costmodels.tlp_net import TLPNet, TLPNetConfig  # lazy: pulls torch; the parser lists the kinds

        return TLPNet, TLPNetConfig

    def base_config(self, featurizer) -> dict:
        cfg = featurizer.config
        return dict(vocab_size=len(cfg["vocabulary"]), num_slots=int(cfg["num_slots"]), max_len=int(cfg["seq_len"]))

    def featurizer_fits(self, net_config: dict, feat) -> str | None:
        cfg = feat.config
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
        return None

    def inputs(self, batch: dict) -> tuple:
        hardware = batch["hardware"].float() if "hardware" in batch else None
        return batch["kind"].long(), batch["numeric"].float(), batch["mask"].bool(), hardware


@register
class PaCMKind(NetKind):
    name = net = featurizer = "pacm"
    title = "PaCM"

    def net_classes(self) -> tuple[type, type]:
        from costlab.costmodels.pacm_net import PaCMNet, PaCMNetConfig  # lazy: pulls torch; the parser lists the kinds

        return PaCMNet, PaCMNetConfig

    def base_config(self, featurizer) -> dict:
        return dict(stmt_features=STMT_FEATURES, pattern_features=PATTERN_FEATURES, program_features=PROGRAM_FEATURES)

    def featurizer_fits(self, net_config: dict, feat) -> str | None:
        base = self.base_config(feat)
        for key in ("stmt_features", "pattern_features"):
            if int(net_config[key]) != base[key]:
                return f"it gives {base[key]} {key}, the net reads {net_config[key]}"
        if int(net_config.get("program_features", 0)) not in (0, base["program_features"]):
            return (f"it gives {base['program_features']} program_features, the net reads "
                    f"{net_config['program_features']}")
        return None

    def inputs(self, batch: dict) -> tuple:
        program = batch["program"].float() if "program" in batch else None
        hardware = batch["hardware"].float() if "hardware" in batch else None
        return (batch["stmt"].float(), batch["stmt_mask"], batch["pattern"].float(), batch["pattern_mask"], program,
                hardware)


@register
class MTLKind(TLPKind):
    """The TLP net with one head per platform (MTL-TLP)."""

    name = "mtl"
    title = "MTL"
    multi_head = True


def _net_kind(kind: str) -> NetKind:
    if kind not in kinds.learned():
        nets = [k for k in kinds.learned() if kinds.create(k).net == k]
        shared = [k for k in kinds.learned() if kinds.create(k).net != k]
        raise ValueError(f"unknown model kind {kind!r} (known: {', '.join(sorted(nets) + sorted(shared))})")
    return kinds.create(kind)


def featurizer_for(kind: str) -> str:
    return _net_kind(kind).featurizer


def net_config_for(kind: str, featurizer, heads: int, **overrides) -> dict:
    """The net config of a model kind, sized from a fitted featurizer."""
    return {**_net_kind(kind).base_config(featurizer), "heads": heads, **overrides}


def build_net(kind: str, net_config: dict):
    """The net of ``kind`` built from ``net_config``; an unknown kind or option, or a value of the wrong type,
    is a ValueError naming it (checked against the config dataclass before torch sees it)."""
    net_cls, cfg_cls = _net_kind(kind).net_classes()
    return net_cls(cfg_cls(**check_fields(cfg_cls, dict(net_config), "net")))


def check_featurizer_fits(kind: str, net_config: dict, featurizer: dict) -> str | None:
    """What makes a stored featurizer (its ``to_json()``) unfit to feed a net of ``kind`` built from
    ``net_config`` (a TLP vocabulary of another size than the net's embedding, other numeric slots, longer
    sequences than its positions; PaCM feature counts other than the net's), or None when it fits. A featurizer
    this costlab does not know, or of another version, is left to the loader to refuse."""
    try:
        feat = from_json(featurizer)
    except (ValueError, TypeError, AttributeError):
        return None
    k = _net_kind(kind)
    if feat.name != k.featurizer:
        return f"a {k.net} net is fed by the {k.featurizer} featurizer, not {feat.name}"
    try:
        return k.featurizer_fits(net_config, feat)
    except (KeyError, TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def net_inputs(kind: str, batch: dict) -> tuple:
    return _net_kind(kind).inputs(batch)
