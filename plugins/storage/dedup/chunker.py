"""Content-defined chunking (FastCDC 2020) and chunk fingerprints for the dedup pool.

The boundaries are those of the FastCDC 2020 paper (Xia et al., "The Design of Fast
Content-Defined Chunking for Data Deduplication Based Storage Systems", IEEE TPDS 2020): gear
hash, normalized chunking with a strict mask before the average size and a loose one after,
the hash rolled two bytes per step, cut-point skipping up to the minimum size. Every detail
(gear table, masks, the two-byte step and where a cut falls inside it) follows the v2020 code
of fastcdc-rs, which the `pyfastcdc` package ports to Cython, so that `pyfastcdc` serves as the
accelerator: when it is importable it is used, otherwise the pure-Python reference below runs.
Both give identical boundaries; tests/dedup_vectors/ pins them, and stored chunks depend on it.

A boundary depends only on the bytes from the chunk start up to `max_size` further (or the end
of the stream), which is what lets the streaming chunker hold at most `max_size` bytes back.

Fingerprints are SHA-256 (hashlib, so any host computes them; OpenSSL uses the CPU's SHA
extensions where present).
"""

import hashlib
from collections import namedtuple

from app.errors import ValidationError

_UNSET = object()
_accel = _UNSET


def _accelerator():
    """pyfastcdc's FastCDC class, or None without it. Optional: a Cython port of the same
    algorithm, tens of times faster than the reference. Only the compiled module is accepted;
    the package's own pure-Python fallback is slower than ours and would warn at import."""
    global _accel
    if _accel is _UNSET:
        try:
            # on first use: a master that only checks chunk sizes does without it, and its
            # import was a twentieth of a command's start
            from pyfastcdc.cy import FastCDC
        except ImportError:  # the reference implementation is enough
            FastCDC = None
        _accel = FastCDC
    return _accel


def __getattr__(name):
    # ACCELERATOR: "pyfastcdc", or None when the reference implementation does the work
    if name == "ACCELERATOR":
        return "pyfastcdc" if _accelerator() is not None else None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


KiB = 1024
MiB = 1024 * KiB

# Bounds shared with the accelerator (it refuses anything outside them), so any valid
# parameter set can use either implementation.
MIN_SIZE_RANGE = (64, 1 * MiB)
AVG_SIZE_RANGE = (256, 4 * MiB)
MAX_SIZE_RANGE = (1 * KiB, 16 * MiB)
NORMALIZATION_RANGE = (0, 3)

# Defaults measured with bench/bench_chunker.py (256 MiB random data, 5% changed by 1..16 KiB
# inserts, deletes and overwrites in 16 regions; min = avg/4, max = 4*avg; share of the
# changed copy that had to be stored again, normalization 1 / 2):
#   avg 256 KiB  9.1% / 9.9%   838 chunks    avg 1 MiB  15.8% / 20.3%   204 chunks
#   avg 512 KiB 11.8% / 12.9%  419 chunks    avg 2 MiB  27.8% / 26.2%   107 chunks
# 512 KiB stays within 3 points of 256 KiB with half the chunks (index entries, lookups and
# container writes per TB: about 1.7 million); from 1 MiB on, every small change costs a
# chunk too large to ignore. Throughput is the same for all (SHA-256 dominates, ~700 MB/s
# chunk + fingerprint on one core). Level 1 stored less than 2 in 7 of 8 such rows.
# Changes scattered over the whole data set (one every ~160 KiB) defeat every size here
# (88% for 256 KiB, 97% for 512 KiB): no average of this order helps there.
DEFAULT_AVG_SIZE = 512 * KiB
DEFAULT_MIN_SIZE = DEFAULT_AVG_SIZE // 4
DEFAULT_MAX_SIZE = DEFAULT_AVG_SIZE * 4
DEFAULT_NORMALIZATION = 1

# How much of a file chunk_file() reads at once: large enough that the per-call overhead of
# the accelerator vanishes, small next to the memory a backup stream already holds.
READ_SIZE = 4 * MiB

FINGERPRINT_NAME = "sha256"
FINGERPRINT_SIZE = 32

Chunk = namedtuple("Chunk", "offset length")
DataChunk = namedtuple("DataChunk", "offset length data")
FingerprintedChunk = namedtuple("FingerprintedChunk", "offset length fingerprint")


class ChunkerParameterError(ValidationError, ValueError):
    """Chunk sizes that FastCDC (or the accelerator) cannot use. A ValueError too, so that
    callers outside the master's error handling can catch it the ordinary way."""


# Gear table of the FastCDC reference code (destor, fascdc_chunking.c), as carried by
# fastcdc-rs and pyfastcdc (MIT). Changing one value changes every boundary.
GEAR = (
    0x3B5D3C7D207E37DC, 0x784D68BA91123086, 0xCD52880F882E7298, 0xEACF8E4E19FDCCA7,
    0xC31F385DFBD1632B, 0x1D5F27001E25ABE6, 0x83130BDE3C9AD991, 0xC4B225676E9B7649,
    0xAA329B29E08EB499, 0xB67FCBD21E577D58, 0x0027BAAADA2ACF6B, 0xE3EF2D5AC73C2226,
    0x0890F24D6ED312B7, 0xA809E036851D7C7E, 0xF0A6FE5E0013D81B, 0x1D026304452CEC14,
    0x03864632648E248F, 0xCDAACF3DCD92B9B4, 0xF5E012E63C187856, 0x8862F9D3821C00B6,
    0xA82F7338750F6F8A, 0x1E583DC6C1CB0B6F, 0x7A3145B69743A7F1, 0xABB20FEE404807EB,
    0xB14B3CFE07B83A5D, 0xB9DC27898ADB9A0F, 0x3703F5E91BAA62BE, 0xCF0BB866815F7D98,
    0x3D9867C41EA9DCD3, 0x1BE1FA65442BF22C, 0x14300DA4C55631D9, 0xE698E9CBC6545C99,
    0x4763107EC64E92A5, 0xC65821FC65696A24, 0x76196C064822F0B7, 0x485BE841F3525E01,
    0xF652BC9C85974FF5, 0xCAD8352FACE9E3E9, 0x2A6ED1DCEB35E98E, 0xC6F483BADC11680F,
    0x3CFD8C17E9CF12F1, 0x89B83C5E2EA56471, 0xAE665CFD24E392A9, 0xEC33C4E504CB8915,
    0x3FB9B15FC9FE7451, 0xD7FD1FD1945F2195, 0x31ADE0853443EFD8, 0x255EFC9863E1E2D2,
    0x10EAB6008D5642CF, 0x46F04863257AC804, 0xA52DC42A789A27D3, 0xDAAADF9CE77AF565,
    0x6B479CD53D87FEBB, 0x6309E2D3F93DB72F, 0xC5738FFBAA1FF9D6, 0x6BD57F3F25AF7968,
    0x67605486D90D0A4A, 0xE14D0B9663BFBDAE, 0xB7BBD8D816EB0414, 0xDEF8A4F16B35A116,
    0xE7932D85AAAFFED6, 0x08161CBAE90CFD48, 0x855507BEB294F08B, 0x91234EA6FFD399B2,
    0xAD70CF4B2435F302, 0xD289A97565BC2D27, 0x8E558437FFCA99DE, 0x96D2704B7115C040,
    0x0889BBCDFC660E41, 0x5E0D4E67DC92128D, 0x72A9F8917063ED97, 0x438B69D409E016E3,
    0xDF4FED8A5D8A4397, 0x00F41DCF41D403F7, 0x4814EB038E52603F, 0x9DAFBACC58E2D651,
    0xFE2F458E4BE170AF, 0x4457EC414DF6A940, 0x06E62F1451123314, 0xBD1014D173BA92CC,
    0xDEF318E25ED57760, 0x9FEA0DE9DFCA8525, 0x459DE1E76C20624B, 0xAEEC189617E2D666,
    0x126A2C06AB5A83CB, 0xB1321532360F6132, 0x65421503DBB40123, 0x2D67C287EA089AB3,
    0x6C93BFF5A56BD6B6, 0x4FFB2036CAB6D98D, 0xCE7B785B1BE7AD4F, 0xEDB42EF6189FD163,
    0xDC905288703988F6, 0x365F9C1D2C691884, 0xC640583680D99BFE, 0x3CD4624C07593EC6,
    0x7F1EA8D85D7C5805, 0x014842D480B57149, 0x0B649BCB5A828688, 0xBCD5708ED79B18F0,
    0xE987C862FBD2F2F0, 0x982731671F0CD82C, 0xBAF13E8B16D8C063, 0x8EA3109CBD951BBA,
    0xD141045BFB385CAD, 0x2ACBC1A0AF1F7D30, 0xE6444D89DF03BFDF, 0xA18CC771B8188FF9,
    0x9834429DB01C39BB, 0x214ADD07FE086A1F, 0x8F07C19B1F6B3FF9, 0x56A297B1BF4FFE55,
    0x94D558E493C54FC7, 0x40BFC24C764552CB, 0x931A706F8A8520CB, 0x32229D322935BD52,
    0x2560D0F5DC4FEFAF, 0x9DBCC48355969BB6, 0x0FD81C3985C0B56A, 0xE03817E1560F2BDA,
    0xC1BB4F81D892B2D5, 0xB0C4864F4E28D2D7, 0x3ECC49F9D9D6C263, 0x51307E99B52BA65E,
    0x8AF2B688DA84A752, 0xF5D72523B91B20B6, 0x6D95FF1FF4634806, 0x562F21555458339A,
    0xC0CE47F889336346, 0x487823E5089B40D8, 0xE4727C7EBC6D9592, 0x5A8F7277E94970BA,
    0xFCA2F406B1C8BB50, 0x5B1F8A95F1791070, 0xD304AF9FC9028605, 0x5440AB7FC930E748,
    0x312D25FBCA2AB5A1, 0x10F4A4B234A4D575, 0x90301D55047E7473, 0x3B6372886C61591E,
    0x293402B77C444E06, 0x451F34A4D3E97DD7, 0x3158D814D81BC57B, 0x034942425B9BDA69,
    0xE2032FF9E532D9BB, 0x62AE066B8B2179E5, 0x9545E10C2F8D71D8, 0x7FF7483EB2D23FC0,
    0x00945FCEBDC98D86, 0x8764BBBE99B26CA2, 0x1B1EC62284C0BFC3, 0x58E0FCC4F0AA362B,
    0x5F4ABEFA878D458D, 0xFD74AC2F9607C519, 0xA4E3FB37DF8CBFA9, 0xBF697E43CAC574E5,
    0x86F14A3F68F4CD53, 0x24A23D076F1CE522, 0xE725CD8048868CC8, 0xBF3C729EB2464362,
    0xD8F6CD57B3CC1ED8, 0x6329E52425541577, 0x62AA688AD5AE1AC0, 0x0A242566269BF845,
    0x168B1A4753ACA74B, 0xF789AFEFFF2E7E3C, 0x6C3362093B6FCCDB, 0x4CE8F50BD28C09B2,
    0x006A2DB95AE8AA93, 0x975B0D623C3D1A8C, 0x18605D3935338C5B, 0x5BB6F6136CAD3C71,
    0x0F53A20701F8D8A6, 0xAB8C5AD2E7E93C67, 0x40B5AC5127ACAA29, 0x8C7BF63C2075895F,
    0x78BD9F7E014A805C, 0xB2C9E9F4F9C8C032, 0xEFD6049827EB91F3, 0x2BE459F482C16FBD,
    0xD92CE0C5745AAA8C, 0x0AAA8FB298D965B9, 0x2B37F92C6C803B15, 0x8C54A5E94E0F0E78,
    0x95F9B6E90C0A3032, 0xE7939FAA436C7874, 0xD16BFE8F6A8A40C9, 0x44982B86263FD2FA,
    0xE285FB39F984E583, 0x779A8DF72D7619D3, 0xF2D79A8DE8D5DD1E, 0xD1037354D66684E2,
    0x004C82A4E668A8E5, 0x31D40A7668B044E6, 0xD70578538BD02C11, 0xDB45431078C5F482,
    0x977121BB7F6A51AD, 0x73D5CCBD34EFF8DD, 0xE437A07D356E17CD, 0x47B2782043C95627,
    0x9FB251413E41D49A, 0xCCD70B60652513D3, 0x1C95B31E8A1B49B2, 0xCAE73DFD1BCB4C1B,
    0x34D98331B1F5B70F, 0x784E39F22338D92F, 0x18613D4A064DF420, 0xF1D8DAE25F0BCEBE,
    0x33F77C15AE855EFC, 0x3C88B3B912EB109C, 0x956A2EC96BAFEEA5, 0x1AA005B5E0AD0E87,
    0x5500D70527C4BB8E, 0xE36C57196421CC44, 0x13C4D286CC36EE39, 0x5654A23D818B2A81,
    0x77B1DC13D161ABDC, 0x734F44DE5F8D5EB5, 0x60717E174A6C89A2, 0xD47D9649266A211E,
    0x5B13A4322BB69E90, 0xF7669609F8B5FC3C, 0x21E6AC55BEDCDAC9, 0x9B56B62B61166DEA,
    0xF48F66B939797E9C, 0x35F332F9C0E6AE9A, 0xCC733F6A9A878DB0, 0x3DA161E41CC108C2,
    0xB7D74AE535914D51, 0x4D493B0B11D36469, 0xCE264D1DFBA9741A, 0xA9D1F2DC7436DC06,
    0x70738016604C2A27, 0x231D36E96E93F3D5, 0x7666881197838D19, 0x4A2A83090AAAD40C,
    0xF1E761591668B35D, 0x7363236497F730A7, 0x301080E37379DD4D, 0x502DEA2971827042,
    0xC2C5EB858F32625F, 0x786AFB9EDFAFBDFF, 0xDAEE0D868490B2A4, 0x617366B3268609F6,
    0xAE0E35A0FE46173E, 0xD1A07DE93E824F11, 0x079B8B115EA4CCA8, 0x93A99274558FAEBB,
    0xFB1E6E22E08A03B3, 0xEA635FDBA3698DD0, 0xCF53659328503A5C, 0xCDE3B31E6FD5D780,
    0x8E3E4221D3614413, 0xEF14D0D86BF1A22C, 0xE1D830D3F16C5DDB, 0xAABD2B2A451504E1,
)

_MASK64 = (1 << 64) - 1
GEAR_LS = tuple((g << 1) & _MASK64 for g in GEAR)

# MASKS[b] is the cut mask for an average of 2**b bytes: b one-bits spread over the upper
# 48 bits. Normalized chunking at level n uses MASKS[b + n] before the average size (harder to
# cut) and MASKS[b - n] after it (easier), which narrows the chunk size distribution.
MASKS = (
    0, 0, 0, 0, 0,
    0x0000000001804110, 0x0000000001803110, 0x0000000018035100, 0x0000001800035300,
    0x0000019000353000, 0x0000590003530000, 0x0000D90003530000, 0x0000D90103530000,
    0x0000D90303530000, 0x0000D90313530000, 0x0000D90F03530000, 0x0000D90303537000,
    0x0000D90703537000, 0x0000D90707537000, 0x0000D91707537000, 0x0000D91747537000,
    0x0000D91767537000, 0x0000D93767537000, 0x0000D93777537000, 0x0000D93777577000,
    0x0000DB3777577000,
)


def _hint_sizes():
    return (f"Use min {MIN_SIZE_RANGE[0]}..{MIN_SIZE_RANGE[1]} (even), avg a power of two "
            f"{AVG_SIZE_RANGE[0]}..{AVG_SIZE_RANGE[1]}, max {MAX_SIZE_RANGE[0]}.."
            f"{MAX_SIZE_RANGE[1]}, with min < avg < max; e.g. min {DEFAULT_MIN_SIZE} avg "
            f"{DEFAULT_AVG_SIZE} max {DEFAULT_MAX_SIZE}.")


def validate_sizes(min_size, avg_size, max_size, normalization=DEFAULT_NORMALIZATION):
    """Checks one parameter set; raises ChunkerParameterError naming the first problem."""
    def bad(message):
        raise ChunkerParameterError(message, hint=_hint_sizes())

    for name, value in (("min_size", min_size), ("avg_size", avg_size),
                        ("max_size", max_size), ("normalization", normalization)):
        if isinstance(value, bool) or not isinstance(value, int):
            bad(f"chunk {name} must be an integer, not {value!r}")
    for name, value, (low, high) in (("min_size", min_size, MIN_SIZE_RANGE),
                                     ("avg_size", avg_size, AVG_SIZE_RANGE),
                                     ("max_size", max_size, MAX_SIZE_RANGE)):
        if not low <= value <= high:
            bad(f"chunk {name} {value} is outside {low}..{high} bytes")
    if avg_size & (avg_size - 1):
        bad(f"chunk avg_size {avg_size} is not a power of two (the cut masks have one bit "
            f"per doubling)")
    if min_size % 2:
        # The hash advances two bytes per step from min_size rounded down to even, so an odd
        # minimum would let a chunk one byte shorter than it through.
        bad(f"chunk min_size {min_size} is odd; the hash steps two bytes at a time")
    if not min_size < avg_size < max_size:
        bad(f"chunk sizes must satisfy min < avg < max, got min {min_size}, avg {avg_size}, "
            f"max {max_size}")
    low, high = NORMALIZATION_RANGE
    if not low <= normalization <= high:
        bad(f"normalization level {normalization} is outside {low}..{high}")


class Params:
    """A validated parameter set with its masks; immutable and shared between chunkers."""

    __slots__ = ("min_size", "avg_size", "max_size", "normalization",
                 "mask_s", "mask_l", "mask_s_ls", "mask_l_ls")

    def __init__(self, min_size=DEFAULT_MIN_SIZE, avg_size=DEFAULT_AVG_SIZE,
                 max_size=DEFAULT_MAX_SIZE, normalization=DEFAULT_NORMALIZATION):
        validate_sizes(min_size, avg_size, max_size, normalization)
        self.min_size = min_size
        self.avg_size = avg_size
        self.max_size = max_size
        self.normalization = normalization
        bits = avg_size.bit_length() - 1
        self.mask_s = MASKS[bits + normalization]
        self.mask_l = MASKS[bits - normalization]
        self.mask_s_ls = (self.mask_s << 1) & _MASK64
        self.mask_l_ls = (self.mask_l << 1) & _MASK64

    def __repr__(self):
        return (f"Params(min_size={self.min_size}, avg_size={self.avg_size}, "
                f"max_size={self.max_size}, normalization={self.normalization})")

    def as_dict(self):
        return {"min_size": self.min_size, "avg_size": self.avg_size,
                "max_size": self.max_size, "normalization": self.normalization}


def _params(min_size, avg_size, max_size, normalization):
    if isinstance(min_size, Params):
        return min_size
    return Params(min_size, avg_size, max_size, normalization)


# ---------------------------------------------------------------------------------------------
# cut-point search


def reference_cut(params, buf, start, end):
    """Length of the chunk starting at buf[start], looking at most at buf[start:end].

    `end - start` must be at least max_size unless `end` is the end of the stream. Per-byte
    Python: the portable definition of the boundaries, not the fast path."""
    remaining = end - start
    if remaining <= params.min_size:
        return remaining
    center = params.avg_size
    if remaining > params.max_size:
        remaining = params.max_size
    elif remaining < center:
        center = remaining
    gear = GEAR
    gear_ls = GEAR_LS
    mask_s = params.mask_s
    mask_l = params.mask_l
    mask_s_ls = params.mask_s_ls
    mask_l_ls = params.mask_l_ls
    keep = _MASK64
    h = 0
    mid = start + (center // 2) * 2
    pos = start + (params.min_size // 2) * 2
    while pos < mid:
        h = ((h << 2) + gear_ls[buf[pos]]) & keep
        if not h & mask_s_ls:
            return pos - start
        h = (h + gear[buf[pos + 1]]) & keep
        if not h & mask_s:
            return pos + 1 - start
        pos += 2
    stop = start + (remaining // 2) * 2
    while pos < stop:
        h = ((h << 2) + gear_ls[buf[pos]]) & keep
        if not h & mask_l_ls:
            return pos - start
        h = (h + gear[buf[pos + 1]]) & keep
        if not h & mask_l:
            return pos + 1 - start
        pos += 2
    return remaining


class _Reference:
    name = "reference"

    def __init__(self, params):
        self.params = params

    def cuts(self, view, final):
        """Chunk lengths from the start of `view`, as long as each is certain: all of them
        when `view` ends the stream, otherwise those starting at least max_size before its
        end. Returns (lengths, bytes consumed)."""
        p = self.params
        n = len(view)
        need = 0 if final else p.max_size
        lengths = []
        pos = 0
        while pos < n and n - pos >= need:
            length = reference_cut(p, view, pos, n)
            lengths.append(length)
            pos += length
        return lengths, pos


class _Accelerated:
    name = "pyfastcdc"

    def __init__(self, params):
        self.params = params
        self._cdc = _accelerator()(params.avg_size, min_size=params.min_size,
                                   max_size=params.max_size,
                                   normalized_chunking=params.normalization)

    def cuts(self, view, final):
        n = len(view)
        lengths = []
        pos = 0
        if final:
            for c in self._cdc.cut_buf(view):
                lengths.append(c.length)
            return lengths, n
        last_start = n - self.params.max_size
        if last_start < 0:
            return lengths, 0
        # A chunk starting later than last_start was cut with less than max_size bytes in
        # sight and may move when more data arrives; it is cut again with the next buffer.
        for c in self._cdc.cut_buf(view):
            if c.offset > last_start:
                break
            lengths.append(c.length)
            pos += c.length
        return lengths, pos


def _implementation(params, implementation):
    if implementation is None:
        implementation = "pyfastcdc" if _accelerator() is not None else "reference"
    if implementation == "reference":
        return _Reference(params)
    if implementation == "pyfastcdc":
        if _accelerator() is None:
            raise ChunkerParameterError(
                "the pyfastcdc chunking accelerator is not installed",
                hint="Install it with 'pip install pyfastcdc', or use the reference "
                     "implementation.")
        return _Accelerated(params)
    raise ChunkerParameterError(f"unknown chunker implementation {implementation!r}",
                                hint="Use 'reference', 'pyfastcdc' or None for the fastest "
                                     "one present.")


# ---------------------------------------------------------------------------------------------
# public API


class Chunker:
    """Streaming chunker: feed buffers of any size, get the chunks that are complete.

    Boundaries are identical to chunking the whole stream at once. Between calls it holds
    back less than max_size bytes (the start of a chunk whose end is not certain yet), and
    during a call that plus the buffer being fed. With data=True the results also carry each
    chunk's bytes (a copy, so the caller may reuse its buffer).
    """

    def __init__(self, min_size=DEFAULT_MIN_SIZE, avg_size=DEFAULT_AVG_SIZE,
                 max_size=DEFAULT_MAX_SIZE, normalization=DEFAULT_NORMALIZATION, *,
                 implementation=None, data=False):
        self.params = _params(min_size, avg_size, max_size, normalization)
        self._impl = _implementation(self.params, implementation)
        self.implementation = self._impl.name
        self._data = data
        self._pending = bytearray()
        self._offset = 0  # stream offset of the first pending byte
        self._finished = False

    @property
    def offset(self):
        """Stream offset up to which chunks have been returned."""
        return self._offset

    @property
    def held(self):
        """Bytes fed but not yet returned in a chunk."""
        return len(self._pending)

    def feed(self, buffer):
        """Adds the next bytes of the stream; returns the chunks now complete, in order, as
        Chunk(offset, length) or with data=True DataChunk(offset, length, data)."""
        if self._finished:
            raise RuntimeError("Chunker.feed() after finish()")
        if not buffer:
            return []
        if self._pending:
            self._pending += buffer
            return self._cut(memoryview(self._pending), False)
        # Nothing held back: cut straight from the caller's buffer, keep only the tail.
        view = memoryview(buffer).cast("B")
        return self._cut(view, False, borrowed=True)

    def finish(self):
        """Ends the stream; returns its last chunks: none when everything was returned
        already, otherwise the held-back bytes cut as the end of the stream (one chunk or
        more, since they may still hold content boundaries)."""
        if self._finished:
            return []
        self._finished = True
        if not self._pending:
            return []
        return self._cut(memoryview(self._pending), True)

    def _cut(self, view, final, borrowed=False):
        lengths, consumed = self._impl.cuts(view, final)
        out = []
        offset = self._offset
        pos = 0
        if self._data:
            for length in lengths:
                out.append(DataChunk(offset, length, bytes(view[pos:pos + length])))
                offset += length
                pos += length
        else:
            for length in lengths:
                out.append(Chunk(offset, length))
                offset += length
        self._offset = offset
        if borrowed:
            self._pending = bytearray(view[consumed:])
        else:
            view.release()
            del self._pending[:consumed]
        return out


def chunks(data, min_size=DEFAULT_MIN_SIZE, avg_size=DEFAULT_AVG_SIZE,
           max_size=DEFAULT_MAX_SIZE, normalization=DEFAULT_NORMALIZATION, *,
           implementation=None):
    """All chunks of an in-memory byte string, as a list of Chunk(offset, length)."""
    params = _params(min_size, avg_size, max_size, normalization)
    impl = _implementation(params, implementation)
    view = memoryview(data).cast("B")
    lengths, _ = impl.cuts(view, True)
    out = []
    offset = 0
    for length in lengths:
        out.append(Chunk(offset, length))
        offset += length
    return out


def fingerprint(data):
    """The fingerprint a chunk is stored under: its SHA-256 digest (32 bytes)."""
    return hashlib.sha256(data).digest()


def chunk_file(path, min_size=DEFAULT_MIN_SIZE, avg_size=DEFAULT_AVG_SIZE,
               max_size=DEFAULT_MAX_SIZE, normalization=DEFAULT_NORMALIZATION, *,
               implementation=None, read_size=READ_SIZE):
    """Yields FingerprintedChunk(offset, length, fingerprint) for a file, reading it in
    read_size pieces (memory: max_size + read_size)."""
    chunker = Chunker(min_size, avg_size, max_size, normalization,
                      implementation=implementation, data=True)
    sha256 = hashlib.sha256
    with open(path, "rb", buffering=0) as f:
        while True:
            piece = f.read(read_size)
            if not piece:
                break
            for c in chunker.feed(piece):
                yield FingerprintedChunk(c.offset, c.length, sha256(c.data).digest())
    for c in chunker.finish():
        yield FingerprintedChunk(c.offset, c.length, sha256(c.data).digest())
