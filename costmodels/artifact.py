"""The model artifact: ``config.json`` + ``model.safetensors`` in a directory, or both in one tar archive.

``config.json`` holds the model kind, the net config, the featurizer (name, version and config, vocabulary
included), the platforms of the heads, the SHA-256 of the weights file (``weights_sha256``), the SHA-256 of
the config itself (``config_sha256``: of its canonical JSON without that field, so it covers the weights hash
too) and whatever metadata the writer adds (training data, evaluation figures, versions).
``model.safetensors`` holds every tensor of the model: a net's state dict, or a baseline's (the XGBoost
booster as the bytes of its JSON model, the SegmentSum MLP as its state dict). Reading parses JSON and
tensors only; nothing in an artifact is ever executed or unpickled, and an archive is read in memory, never
extracted.

Everything that can be wrong with an artifact is found here, before it scores anything and before anything
is allocated from what it says: a missing or incomplete artifact; a config or weights file that is not a
regular file (a FIFO, a device, a link to one) or larger than a model's can be (``CONFIG_MAX``,
``WEIGHTS_MAX``); an archive that is damaged or cut short, holds other entries larger than those, or more
than ``ARCHIVE_MAX_ENTRIES`` (entries may be named ``./config.json``, as ``tar -C DIR -cf m.tar .`` writes);
a config that is not JSON, of a newer format, edited (``config_sha256`` differs) or whose net does not fit
the weights (checked from the safetensors header, on a net built on the ``meta`` device, before the weights'
data is read); weights that are damaged, changed (``weights_sha256`` differs) or hold non-finite values.

A config that records no ``weights_sha256`` or ``config_sha256`` (or an empty one) cannot be checked and is
refused. Models made by hand, or written by a costlab from before ``config_sha256``, load with
``trust_unhashed=True`` (``read_artifact``, ``read_config``, ``predictors.load``) or with the environment
variable ``COSTLAB_TRUST_UNHASHED=1`` (every command); only missing hashes are trusted then, a recorded one is
still checked. ``COSTLAB_TRUST_UNHASHED=1 costlab export OLD -o NEW`` writes such a model with both hashes.
The hashes find damage and edits, they are not a signature: who can write both files can rewrite both.
"""

from __future__ import annotations

import copy
import hashlib
import json
import lzma
import math
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from costlab.common import jsontext
from costlab.common.errors import InputError, UsageError
from costlab.common.files import atomic_file, write_together
from costlab.costmodels import kinds
from costlab.costmodels.nets import build_net, check_featurizer_fits

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
FORMAT = "costlab-model"
FORMAT_VERSION = 1
ARCHIVE_SUFFIXES = (".tar", ".costlab")
HASHES = ("weights_sha256", "config_sha256")
TRUST_ENV = "COSTLAB_TRUST_UNHASHED"
CONFIG_MAX = 16 * 2 ** 20  # bytes of a config.json (a TLP vocabulary is a few kB)
WEIGHTS_MAX = 2 * 2 ** 30  # bytes of a model.safetensors
HEADER_MAX = 100 * 2 ** 20  # bytes of a safetensors header (the safetensors library's own limit)
ARCHIVE_MAX_ENTRIES = 64
# a safetensors dtype's bytes per element
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
                "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}


@dataclass
class Artifact:
    """A read artifact: where it came from, its config, and its tensors (on the CPU)."""

    path: Path
    config: dict
    tensors: dict

    @property
    def kind(self) -> str:
        return self.config["kind"]


def config_digest(config: dict) -> str:
    """SHA-256 of a config's canonical JSON (sorted keys, no spaces), ``config_sha256`` left out."""
    body = {k: v for k, v in config.items() if k != "config_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    # a lone surrogate (JSON's "\udcff", no character) is hashed as its code unit's UTF-8 form; every other
    # text hashes as UTF-8, as before
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def seal_config(config: dict) -> dict:
    """``config`` as written (JSON values only) with its ``config_sha256``: for a writer that edits a model's
    config.json (its ``weights_sha256`` kept, so the weights must be the ones it names)."""
    config = json.loads(jsontext.dumps({k: v for k, v in config.items() if k != "config_sha256"}))
    config["config_sha256"] = config_digest(config)
    return config


def ship_config(config: dict) -> dict:
    """The config a shipped model carries (``scripts/train_*_model.sh``): the paths of the machine that trained it
    (its dataset, the training's best checkpoint) left out, sealed (``seal_config``)."""
    config = copy.deepcopy(config)
    config.pop("dataset", None)
    config.get("data", {}).pop("path", None)
    config.get("training", {}).pop("best_checkpoint", None)
    return seal_config(config)


def save_artifact(directory, tensors: dict, config: dict) -> Path:
    """Write ``tensors`` and ``config`` (kind, net, featurizer, platforms, metadata) as an artifact directory.

    The weights file is written first and its hash recorded in the config, then the config's own hash (any
    hashes ``config`` came with are replaced); each file goes through a temporary name and a rename, so a
    reader never sees half a file, and Ctrl-C or SIGTERM never lands between the two renames (``write_together``),
    so a model replaced is replaced whole."""
    from safetensors.torch import save

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(directory, "exists and is not a directory")
    blob = save({k: v.detach().cpu().contiguous() for k, v in tensors.items()})
    if len(blob) > WEIGHTS_MAX:
        raise UsageError(f"{directory}: the weights are {len(blob)} bytes, more than a model's {WEIGHTS_MAX} "
                         "(no costlab could load it)")
    config = {k: v for k, v in config.items() if k not in HASHES}
    config = seal_config(dict(config, format=FORMAT, format_version=FORMAT_VERSION,
                              weights_sha256=hashlib.sha256(blob).hexdigest()))
    text = jsontext.dumps(config, indent=2, sort_keys=True).encode()
    if len(text) > CONFIG_MAX:  # refused before anything is written: no costlab would read it back
        raise UsageError(f"{directory}: the config is {len(text)} bytes, more than a model's {CONFIG_MAX} "
                         "(no costlab could load it)")
    directory.mkdir(parents=True, exist_ok=True)
    # renamed weights first, then the config that names them, with no signal between the two renames
    write_together({directory / CONFIG: text, directory / WEIGHTS: blob})
    return directory


def replaceable(path) -> bool:
    """Whether ``path`` is something an export may replace (asked to with ``--force``): a model directory holding
    a model's two files and nothing else, its config costlab's (or too damaged to say), or a model archive of
    them. Anything else, another tool's model with a ``config.json`` say, is never replaced."""
    path = Path(path)
    if path.is_dir():
        # temporary files a killed write of the model's own two left (``.config.json.tmp-...``) are the model's
        names = {p.name for p in path.iterdir()
                 if not any(p.name.startswith(f".{n}.tmp-") for n in (CONFIG, WEIGHTS))}
        if not names or not names <= {CONFIG, WEIGHTS}:
            return not names
        if not all((path / n).is_file() for n in names):  # a FIFO or a device is never read (it could block)
            return False
        try:
            config = json.loads((path / CONFIG).read_bytes()) if CONFIG in names else None
        except (OSError, ValueError):  # a damaged config of a model directory: the export mends it
            return True
        return not isinstance(config, dict) or config.get("format") == FORMAT
    if not path.is_file():  # a FIFO or a device is never read (opening a FIFO waits for a writer)
        return False
    try:
        with tarfile.open(path) as tar:
            names = {_member_name(n) for n in tar.getnames()} - {""}  # ``tar -C DIR -cf m.tar .``: ./, ./config.json
    except (OSError, EOFError, tarfile.TarError, zlib.error, lzma.LZMAError):
        return False
    return bool(names) and names <= {CONFIG, WEIGHTS}


def _member_name(name: str) -> str:
    """An archive entry's name as the loader matches it: ``./`` prefixes removed (``.`` itself is ``""``)."""
    while name.startswith("./"):
        name = name[2:]
    return "" if name == "." else name


def pack_archive(directory, archive) -> Path:
    """One file holding an artifact directory's ``config.json`` and ``model.safetensors`` (an uncompressed tar:
    safetensors do not compress, and members are read in place)."""
    directory, archive = Path(directory), Path(archive)
    with atomic_file(archive) as fh, tarfile.open(fileobj=fh, mode="w") as tar:
        for name in (CONFIG, WEIGHTS):
            tar.add(directory / name, arcname=name)
    return archive


def is_artifact(path) -> bool:
    path = Path(path)
    if path.is_dir():
        return (path / CONFIG).exists()
    try:
        return path.is_file() and tarfile.is_tarfile(path)
    except (EOFError, zlib.error, lzma.LZMAError):  # a compressed stream cut short or damaged: reading it says so
        return True
    except OSError:
        return False


def trusting_unhashed(trust_unhashed: bool = False) -> bool:
    """Whether a model without recorded hashes may load: asked for, or ``COSTLAB_TRUST_UNHASHED=1``."""
    return bool(trust_unhashed) or os.environ.get(TRUST_ENV, "").strip().lower() in ("1", "true", "yes")


def read_config(path, trust_unhashed: bool = False) -> dict:
    """The checked config of an artifact (directory or archive), without reading its weights."""
    return _read(Path(path), weights=False, trust=trusting_unhashed(trust_unhashed)).config


def read_artifact(path, trust_unhashed: bool = False) -> Artifact:
    """Config and tensors of an artifact (directory or archive), every check done. ``trust_unhashed`` (or
    ``COSTLAB_TRUST_UNHASHED=1``) lets a model whose config records no hashes load (see the module's doc)."""
    return _read(Path(path), weights=True, trust=trusting_unhashed(trust_unhashed))


def _read(path: Path, weights: bool, trust: bool) -> Artifact:
    if not path.exists():
        raise InputError(path, "no such model (give a model directory or archive, or a shipped model's name)")
    if path.is_dir():
        files = {name: path / name for name in (CONFIG, WEIGHTS)}
        if not files[CONFIG].exists() and not files[CONFIG].is_symlink():
            what = "a training run without a model yet" if (path / "checkpoints").is_dir() else "not a costlab model"
            raise InputError(path, f"{what} (no {CONFIG})")
        with _open_regular(files[CONFIG], CONFIG_MAX) as (f, size):
            config = _parse_config(_read_exact(f, size, files[CONFIG], CONFIG), files[CONFIG], trust)
        if not weights:
            return Artifact(path, config, {})
        if not files[WEIGHTS].exists() and not files[WEIGHTS].is_symlink():
            raise InputError(path, f"incomplete model: {CONFIG} but no {WEIGHTS}")
        with _open_regular(files[WEIGHTS], WEIGHTS_MAX) as (f, size):
            blob = _read_weights(f, size, path, config)
    elif path.suffix == ".ckpt":
        raise InputError(path, "a training checkpoint, not a model: give its run directory (costlab export "
                               "RUN_DIR -o MODEL_DIR exports the run's best model)")
    else:
        config, blob = _read_archive(path, weights, trust)
        if not weights:
            return Artifact(path, config, {})
    return Artifact(path, config, _tensors(blob, config, path))


class _open_regular:
    """``with _open_regular(path, limit) as (f, size)``: a file opened for reading only if it is a regular file
    (the check is on the opened file, so a FIFO, a device or a link to one is never read; a FIFO's open does
    not wait for a writer) of at most ``limit`` bytes."""

    def __init__(self, path: Path, limit: int, what: str | None = None):
        self.path, self.limit, self.what, self.f = path, limit, what or path.name, None

    def __enter__(self):
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise InputError(self.path, f"cannot be read ({exc.strerror})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise InputError(self.path, f"not a regular file ({_file_kind(st.st_mode)}): a model is read from "
                                        "regular files only")
        if st.st_size > self.limit:
            os.close(fd)
            raise InputError(self.path, f"{st.st_size} bytes, more than a {self.what} can be "
                                        f"({_size(self.limit)})")
        os.set_blocking(fd, True)
        self.f = os.fdopen(fd, "rb")
        return self.f, st.st_size

    def __exit__(self, *exc):
        self.f.close()
        return False


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a plain file"


def _size(n: int) -> str:
    return f"at most {n // 2 ** 30} GiB" if n >= 2 ** 30 else f"at most {n // 2 ** 20} MiB"


def _read_exact(f, size: int, where, what: str) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise InputError(where, f"{what} is cut short: {len(data)} of its {size} bytes could be read")
    return data


# how the compressed files tarfile opens begin: gzip, bzip2, xz
COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")


def _read_archive(path: Path, weights: bool, trust: bool) -> tuple[dict, bytes]:
    with _open_regular(path, WEIGHTS_MAX + CONFIG_MAX + 2 ** 20, "model archive") as (raw, _):
        try:
            tar = tarfile.open(fileobj=raw, mode="r:*")
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError):
            raw.seek(0)
            if raw.read(6).startswith(COMPRESSED_MAGIC):  # a compressed file that does not decompress to a tar
                raise InputError(path, "model archive is damaged or cut short (its compressed data does not read as a "
                                       "tar to its end)") from None
            raise InputError(path, "not a costlab model (neither a model directory nor a model archive)") from None
        try:
            with tar:
                members = _archive_members(tar, path)
                if CONFIG not in members:
                    raise InputError(path, f"incomplete model archive: no {CONFIG}")
                m = members[CONFIG]
                config = _parse_config(_read_exact(tar.extractfile(m), m.size, path, CONFIG), f"{path}:{CONFIG}",
                                       trust)
                if not weights:
                    return config, b""
                if WEIGHTS not in members:
                    raise InputError(path, f"incomplete model archive: {CONFIG} but no {WEIGHTS}")
                m = members[WEIGHTS]
                return config, _read_weights(tar.extractfile(m), m.size, path, config)
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise InputError(path, f"model archive is damaged or cut short ({reason})") from None


def _archive_members(tar: tarfile.TarFile, path: Path) -> dict:
    """The archive's config and weights entries (``./`` names too), every entry's header checked before any
    data is read: only regular files, none larger than a model's file can be, at most a few entries."""
    limits = {CONFIG: CONFIG_MAX, WEIGHTS: WEIGHTS_MAX}
    found, total = {}, 0
    for i, m in enumerate(tar):  # each entry is checked before the next header is sought past its data
        if i >= ARCHIVE_MAX_ENTRIES:
            raise InputError(path, f"more than {ARCHIVE_MAX_ENTRIES} entries: not a model archive")
        name = _member_name(m.name)
        total += max(m.size, 0)
        if name in limits:
            if not m.isreg():
                raise InputError(path, f"entry {m.name!r} is not a regular file: a model is read from regular "
                                       "files only")
            if name in found:
                raise InputError(path, f"two {name} entries ({found[name].name!r} and {m.name!r})")
            if m.size > limits[name]:
                raise InputError(path, f"entry {m.name!r} is {m.size} bytes, more than a model's {name} can be "
                                       f"({_size(limits[name])})")
            found[name] = m
        elif total > WEIGHTS_MAX + CONFIG_MAX:
            raise InputError(path, f"entry {m.name!r} makes the archive hold more than a model can "
                                   f"({_size(WEIGHTS_MAX)} of weights): not a model archive")
    return found


def _parse_config(raw: bytes, where, trust: bool = False) -> dict:
    try:
        config = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        reason = "empty" if not raw.strip() else f"not valid JSON ({getattr(exc, 'msg', exc)})"
        raise InputError(where, f"model config is {reason}") from None
    if not isinstance(config, dict):
        raise InputError(where, f"model config must be a JSON object, not {type(config).__name__}")
    if config.get("format") != FORMAT:
        raise InputError(where, f"not a costlab model config (format {config.get('format')!r})")
    version = config.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(where, f"model format_version must be an integer, not {version!r}")
    if version > FORMAT_VERSION:
        raise InputError(where, f"written by a newer costlab (model format {version}; this costlab reads up to "
                                f"{FORMAT_VERSION}): upgrade costlab")
    _check_hashes(config, where, trust)
    for key, kind in (("kind", str), ("featurizer", dict), ("platforms", list), ("net", dict)):
        if not isinstance(config.get(key), kind):
            raise InputError(where, f"model config has no valid {key!r} (a JSON {kind.__name__} is required)")
    # what scoring and tuning read of the metadata: of its JSON type here, not an AttributeError there
    if not all(isinstance(p, str) and p for p in config["platforms"]):
        raise InputError(where, "model config's 'platforms' must be a list of platform names (strings)")
    for key, kind in (("targets", dict), ("hardware", dict), ("dialects", list)):
        if config.get(key) is not None and not isinstance(config[key], kind):
            raise InputError(where, f"model config's {key!r} must be a JSON {'object' if kind is dict else 'list'}, "
                                    f"not {type(config[key]).__name__}")
    if not all(isinstance(d, str) for d in config.get("dialects") or []):
        raise InputError(where, "model config's 'dialects' must be a list of strings (ms, ansor)")
    return config


def _check_hashes(config: dict, where, trust: bool) -> None:
    """Both recorded hashes well formed, the config's own matching it; a missing or empty one refused unless
    trusted. An edit is named as such before a hash it removed is missed."""
    missing = [key for key in HASHES if config.get(key) in (None, "")]
    for key in HASHES:
        value = config.get(key)
        if key not in missing and (not isinstance(value, str) or len(value) != 64
                                   or any(c not in "0123456789abcdef" for c in value)):
            raise InputError(where, f"{key} is not a SHA-256 hex digest ({str(value)[:70]!r})")
    if "config_sha256" not in missing and config_digest(config) != config["config_sha256"]:
        raise InputError(where, f"does not match the config_sha256 it records: {CONFIG} was edited or damaged after "
                                "the model was written")
    if missing and not trust:
        raise InputError(where, f"records no {missing[0]}: the model cannot be checked (made by hand or by an older "
                                f"costlab, or the hash was removed); if you trust it, set {TRUST_ENV}=1 (and "
                                "costlab export it to record both hashes)")


def _read_weights(f, size: int, where, config: dict) -> bytes:
    """The whole weights file, read only after its safetensors header was found sound and fitting the config's
    net: a header that is not one, or a net config that does not fit, is refused without reading the data."""
    if size < 8:
        raise InputError(where, f"{WEIGHTS} is damaged (only {size} bytes: not a safetensors file)")
    n = int.from_bytes(_read_exact(f, 8, where, WEIGHTS), "little")
    if n > min(HEADER_MAX, size - 8):
        raise InputError(where, f"{WEIGHTS} is damaged (its header says {n} bytes, the file has {size - 8} after "
                                "the length)")
    shapes = _header_shapes(_read_exact(f, n, where, WEIGHTS), size - 8 - n, where)
    check_net_fits(config, shapes, where)
    f.seek(0)
    return _read_exact(f, size, where, WEIGHTS)


def _header_shapes(raw: bytes, data_bytes: int, where) -> dict:
    """Each tensor's shape from a safetensors header, the header checked against the data it describes."""
    def bad(why):
        return InputError(where, f"{WEIGHTS} is damaged ({why})")

    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise bad("its header is not JSON") from None
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    shapes, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise bad(f"tensor {name!r} has no description")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in _DTYPE_BYTES:
            raise bad(f"tensor {name!r} has an unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise bad(f"tensor {name!r} has no valid shape")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data_bytes):
            raise bad(f"tensor {name!r} lies outside the file")
        if offsets[1] - offsets[0] != math.prod(shape) * _DTYPE_BYTES[dtype]:
            raise bad(f"tensor {name!r}: its shape {tuple(shape)} and its bytes disagree")
        shapes[name] = tuple(shape)
        spans.append(tuple(offsets))
    end = 0
    for a, b in sorted(spans):
        if a != end:
            raise bad("its tensors overlap or leave gaps")
        end = b
    if end != data_bytes:
        raise bad(f"its tensors hold {end} bytes, the file {data_bytes}")
    return shapes


def check_net_fits(config: dict, shapes: dict, where) -> None:
    """A learned net's config against the weights' shapes, before any real net is built from it: each number
    of the net config no larger than the weights could hold, the net built on the ``meta`` device (nothing
    allocated) with exactly the weights' tensors and shapes, and the featurizer feeding the sizes it has."""
    kind = config.get("kind")
    if kind not in kinds.learned():
        return  # a baseline (its sizes are not read from the config) or an unknown kind, refused by the loader
    net = config["net"]
    bound = max([len(shapes)] + [d for s in shapes.values() for d in s])
    for key, value in net.items():
        if isinstance(value, int) and not isinstance(value, bool) and value > bound:
            raise InputError(where, f"the net config does not fit the weights ({key}={value}, while no tensor of "
                                    f"the weights has a dimension above {bound})")
    try:
        with torch.device("meta"):
            meta = build_net(kind, net)
    except (TypeError, ValueError, RuntimeError, AssertionError) as exc:  # torch asserts on some sizes
        raise InputError(where, f"net config is not valid for a {kind} net ({str(exc).strip()[:200]})") from None
    compare_shapes({k: tuple(v.shape) for k, v in meta.state_dict().items()}, shapes, where)
    problem = check_featurizer_fits(kind, net, config.get("featurizer"))
    if problem:
        raise InputError(where, f"the featurizer does not fit the net ({problem})")


def compare_shapes(expected: dict, got: dict, where) -> None:
    """Tensor names and shapes a net config makes (``expected``) against those of the weights (``got``)."""
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    if missing or unexpected:
        raise InputError(where, f"the net config does not fit the weights (missing {_few(missing)}, unexpected "
                                f"{_few(unexpected)})")
    for name, shape in expected.items():
        if tuple(shape) != tuple(got[name]):
            raise InputError(where, f"the net config does not fit the weights ({name}: the config makes "
                                    f"{tuple(shape)}, the weights are {tuple(got[name])})")


def _tensors(blob: bytes, config: dict, where: Path) -> dict:
    from safetensors import SafetensorError
    from safetensors.torch import load

    recorded = config.get("weights_sha256")
    if recorded and hashlib.sha256(blob).hexdigest() != recorded:
        raise InputError(where, f"{WEIGHTS} does not match the hash recorded in {CONFIG}: the weights were changed "
                                "or damaged after the model was written")
    try:
        tensors = load(blob)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise InputError(where, f"{WEIGHTS} is damaged ({str(exc).strip().splitlines()[0][:160]})") from None
    return check_finite(tensors, where, WEIGHTS)


def check_finite(tensors: dict, path, what: str) -> dict:
    """``tensors`` if every floating-point value is finite; a NaN or inf (a diverged training run) is an
    InputError naming the file and the tensor, since such a model would score every program NaN."""
    for name, t in tensors.items():
        if t.dtype.is_floating_point and not bool(torch.isfinite(t).all()):
            raise InputError(path, f"{what}: tensor {name!r} holds non-finite values (NaN or inf): the training "
                                   "run diverged")
    return tensors


def load_state(net: torch.nn.Module, tensors: dict, path) -> torch.nn.Module:
    """``net`` with the artifact's weights; a net config that does not fit the weights is a clear error."""
    expected = net.state_dict()
    compare_shapes({k: tuple(t.shape) for k, t in expected.items()},
                   {k: tuple(t.shape) for k, t in tensors.items()}, path)
    for name, t in expected.items():  # load_state_dict casts silently: integer weights would score as garbage
        if t.dtype.is_floating_point != tensors[name].dtype.is_floating_point:
            raise InputError(path, f"the net config does not fit the weights ({name}: the net holds {t.dtype}, the "
                                   f"weights are {tensors[name].dtype})")
    net.load_state_dict(tensors)
    return net.eval()


def _few(names: list) -> str:
    return "none" if not names else ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def finite(x: float) -> float | None:
    """A metric for JSON: None instead of NaN or inf (bare ``NaN`` is not JSON)."""
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None
