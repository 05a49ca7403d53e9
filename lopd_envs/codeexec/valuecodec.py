"""Plain Python values to JSON and back, exactly, for crossing the sandbox boundary.

Test inputs go in and a candidate's return values come out as JSON with tags for what JSON lacks (tuple,
set, frozenset, dict with any keys, complex, bytes, huge ints, and numpy arrays and scalars of plain dtypes,
rebuilt as numpy values so that ``==`` broadcasts as on the official side). Decoding builds only builtin values, never
calls code, so whatever the sandboxed program prints cannot execute anything in the scorer, and every
comparison happens in the scorer's process on trusted types: an object with a rigged ``__eq__`` cannot
come out. Values of any other type come out as :class:`Opaque` (equal to nothing).

This file is also sent verbatim into the sandbox, so both sides share one codec. It imports nothing at the
top but builtin modules: ``json`` (which pulls in ``re``) and ``collections`` are imported where they are
used, and a sandboxed run that does not use them does not pay for them (~8 ms of interpreter start).
"""

import _thread
import sys

_BIG = 1 << 62
# the standard library's dict subclasses that solutions commonly return (compared as dicts by ``==``)
_DICT_NAMES = ("Counter", "OrderedDict", "defaultdict")
MAX_DEPTH = 200


def _std_dict(t):
    """Whether ``t`` is exactly one of ``collections``' dict types (not a subclass). A value of them can only
    exist once ``collections`` is imported, so it is looked up, never imported here."""
    mod = sys.modules.get("collections")
    return mod is not None and any(t is getattr(mod, name, None) for name in _DICT_NAMES)


class Opaque:
    """A value the sandbox could not express as plain data (a custom object, a generator, a regex match).
    It is not ``None`` and equals nothing, which is how the scorers treat such results."""

    __slots__ = ("type_name",)

    def __init__(self, type_name):
        self.type_name = type_name

    def __eq__(self, other):
        return False

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"<opaque {self.type_name}>"


_FLAT = (str, float, bool, type(None))
_FLAT_TYPES = frozenset(_FLAT)
_NUMBER_TYPES = frozenset((int, float, bool))


def _flat(x):
    """Whether list ``x`` is its own encoding: scalars of exact JSON types only, ints within ``_BIG``.
    Checked with C-level passes (``map(type)``, ``min``/``max``): a Python loop over the elements was most
    of the sandbox's time on long outputs (HumanEval/130's lists of millions of numbers). A NaN first in
    the list makes ``min``/``max`` return it, which fails the range test, so the slow path decides."""
    types = set(map(type, x))
    if types <= _FLAT_TYPES:
        return True
    if int in types and types <= _NUMBER_TYPES:
        return min(x) > -_BIG and max(x) < _BIG
    return False


def encode(x, depth=0):
    """A JSON-able tree for ``x``; exact types only (subclasses become opaque)."""
    t = type(x)
    if t is list and _flat(x):
        return x  # fast path: a flat list of scalars is its own encoding
    if x is None or t is bool or t is str or t is float:
        return x
    if t is int:
        return x if -_BIG < x < _BIG else {"$": "int", "v": hex(x)}
    if depth > MAX_DEPTH:
        return {"$": "opaque", "v": "too deep"}
    d = depth + 1
    if t is list:
        return [encode(i, d) for i in x]
    if t is tuple:
        return {"$": "tuple", "v": [encode(i, d) for i in x]}
    if t is set or t is frozenset:
        return {"$": t.__name__, "v": [encode(i, d) for i in x]}
    if t is dict or _std_dict(t):
        tagged = {"$": "dict", "v": [[encode(k, d), encode(v, d)] for k, v in x.items()]}
        if t is not dict:
            tagged["c"] = t.__name__
        return tagged
    if t is complex:
        return {"$": "complex", "v": [x.real, x.imag]}
    if t is bytes or t is bytearray:
        return {"$": t.__name__, "v": x.hex()}
    if getattr(t, "__module__", None) == "numpy" and hasattr(x, "dtype") and hasattr(x, "tolist"):
        return _encode_numpy(x, d)
    return {"$": "opaque", "v": getattr(t, "__name__", "?")}


def _encode_numpy(x, depth):
    """A numpy array or scalar as its dtype string, shape and plain items (numpy is not imported here:
    a value can only be numpy when the program imported it, which LiveCodeBench's environment allows)."""
    try:
        dtype = x.dtype.str
        if type(x).__name__ == "ndarray":
            return {"$": "ndarray", "d": dtype, "s": [int(n) for n in x.shape], "v": encode(x.tolist(), depth)}
        return {"$": "npscalar", "d": dtype, "v": encode(x.item(), depth)}
    except Exception:  # noqa: BLE001 - a structured or odd dtype: not plain data
        return {"$": "opaque", "v": type(x).__name__}


def decode(x):
    """Inverse of :func:`encode` for a parsed JSON tree; builds builtin values only."""
    if isinstance(x, list):
        return [decode(i) for i in x]
    if not isinstance(x, dict):
        return x
    return _checked_build(x, decode)


def _same(x):
    return x


def _build(x, child):
    """The value of one tagged object; ``child`` decodes its parts (identity when they already are values)."""
    tag, v = x.get("$"), x.get("v")
    if tag == "int":
        return int(v, 16)
    if tag == "tuple":
        return tuple(child(i) for i in v)
    if tag == "set":
        return {child(i) for i in v}
    if tag == "frozenset":
        return frozenset(child(i) for i in v)
    if tag == "dict":
        items = [(child(k), child(val)) for k, val in v]
        kind = x.get("c")
        if kind in _DICT_NAMES:
            import collections
        if kind == "Counter":
            return collections.Counter(dict(items))
        if kind == "OrderedDict":
            return collections.OrderedDict(items)
        if kind == "defaultdict":
            return collections.defaultdict(None, items)
        return dict(items)
    if tag == "complex":
        return complex(v[0], v[1])
    if tag == "bytes":
        return bytes.fromhex(v)
    if tag == "bytearray":
        return bytearray.fromhex(v)
    if tag in ("ndarray", "npscalar"):
        return _build_numpy(tag, x.get("d"), x.get("s"), child(v))
    return Opaque(str(v))


NUMPY_KINDS = "biufcUS"  # bool, integers, floats, complex, str, bytes: plain data (never object dtypes)
NUMPY_MAX_BYTES = 256 << 20


def _build_numpy(tag, dtype, shape, items):
    """The numpy value the sandbox reported, rebuilt from its dtype string and items, so that the scorer's
    ``==`` behaves as on the official side (broadcasting, element-wise arrays). Only plain dtypes and a
    bounded size are accepted; anything else (or no numpy here) is opaque."""
    try:
        import numpy as np

        dt = np.dtype(str(dtype))
        if dt.kind not in NUMPY_KINDS or dt.hasobject or dt.fields is not None or dt.shape != ():
            return Opaque(f"numpy {dtype}")
        if tag == "npscalar":
            return np.array(items, dtype=dt)[()] if dt.itemsize <= NUMPY_MAX_BYTES else Opaque("numpy")
        dims = [int(n) for n in shape]
        count = 1
        for n in dims:
            count *= n
        if len(dims) > 64 or min(dims, default=0) < 0 or count * dt.itemsize > NUMPY_MAX_BYTES:
            return Opaque("numpy ndarray")
        arr = np.array(items, dtype=dt)
        if arr.size != count:
            return Opaque("numpy ndarray")
        return arr.reshape(dims)
    except Exception:  # noqa: BLE001 - a malformed record: not a value
        return Opaque(f"numpy {dtype}")


def _hook(d):
    """``json.loads`` object hook: tagged objects become values as the C parser builds the tree (children
    first), so decoding costs no Python recursion. Untagged objects (a request's own fields) stay dicts."""
    return _checked_build(d, _same) if "$" in d else d


def _checked_build(x, child):
    """:func:`_build`, where a malformed tagged object (``{"$": "complex", "v": []}``, a ``dict`` whose items
    are not pairs ...) is a ``ValueError`` like any other text that is not an encoded value: whoever decodes
    text the sandbox wrote handles one error type, never an ``IndexError`` from deep inside."""
    try:
        return _build(x, child)
    except (ValueError, RecursionError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - the text is malformed, whatever the builder tripped on
        raise ValueError(f"malformed encoded {str(x.get('$'))[:20]!r} value ({type(exc).__name__}: {exc})"[:300]) \
            from None


def dumps(x):
    import json

    return json.dumps(encode(x), separators=(",", ":"))


#: What :func:`digest` hashes, named in the expected outputs' index so that a change is never mistaken for a match
DIGEST_SCHEME = "marshal2-blake2b256"
#: A result whose marshal is smaller than this goes back as its value (see the harness): a digest's round
#: trip costs more than encoding and comparing a small value
DIGEST_MIN_BYTES = 16 << 10


def digest(value, min_bytes=0):
    """A result's fingerprint, for big outputs (HumanEval/130's lists of a million numbers took most of a
    run to encode as JSON, ~2 s, against ~0.3 s for this): BLAKE2b-256 of ``marshal.dumps(value, 2)``, or
    None when the value cannot be marshalled (a custom object, too deep) or its marshal is under
    ``min_bytes``. Version 2 writes neither back-references nor interning, so the bytes depend on the value
    alone: ints, floats (their bits), strings, and the exact containers (not subclasses) each with its own
    type code. Equal bytes are then an equal value, except NaN (equal bits, unequal value) and buffer
    objects (any of them marshals as ``bytes``): the scorer keeps digests only of expected outputs without
    either (see ``groundtruth.py``), and a candidate cannot give a digest without computing the value."""
    import marshal

    try:
        data = marshal.dumps(value, 2)
    except Exception:  # noqa: BLE001 - unmarshallable: the value goes back encoded, as any other
        return None
    if len(data) < min_bytes:
        return None
    try:
        from _blake2 import blake2b  # built into the interpreter: no hashlib (it imports OpenSSL's module)
    except ImportError:
        try:
            from hashlib import blake2b
        except ImportError:  # no BLAKE2 here: no digest, the value goes back as it is
            return None
    return blake2b(data, digest_size=32).hexdigest()


_decoders = _thread._local()


def loads(text):
    """Parse JSON text holding encoded values (anywhere in it) straight into values. The same as
    ``json.loads(text, object_hook=_hook)``, with one decoder per thread kept: ``json.loads`` builds a
    new ``JSONDecoder`` on every call with a hook, which was a fifth of the scorer's time per record."""
    import json

    decoder = getattr(_decoders, "decoder", None)
    if decoder is None:
        decoder = _decoders.decoder = json.JSONDecoder(object_hook=_hook)
    if isinstance(text, (bytes, bytearray)):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    elif not isinstance(text, str):
        raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(text).__name__}")
    return decoder.decode(text)
