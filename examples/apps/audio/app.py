"""The web-gardening seed's service in pure Python: per request, synthesize audio and encode
it (IMA ADPCM), CPU-bound as a real transcoder. The same algorithm as espalier's built-in
`cpu` handler, so the two answer the same checksum for the same `?ms=N`.

One process is one CPU (the GIL): a web garden (`processes = N`) is how it scales.
"""
from urllib.parse import parse_qs

SAMPLE_RATE = 44100
STEP_TABLE = [
    7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 23, 25, 28, 31, 34, 37, 41, 45, 50, 55, 60, 66,
    73, 80, 88, 97, 107, 118, 130, 143, 157, 173, 190, 209, 230, 253, 279, 307, 337, 371, 408, 449,
    494, 544, 598, 658, 724, 796, 876, 963, 1060, 1166, 1282, 1411, 1552, 1707, 1878, 2066, 2272,
    2499, 2749, 3024, 3327, 3660, 4026, 4428, 4871, 5358, 5894, 6484, 7132, 7845, 8630, 9493,
    10442, 11487, 12635, 13899, 15289, 16818, 18500, 20350, 22385, 24623, 27086, 29794, 32767,
]
INDEX_TABLE = [-1, -1, -1, -1, 2, 4, 6, 8]
M32 = (1 << 32) - 1


def tdiv(a, b):
    """Integer division truncating toward zero, as Rust's."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def sine(phase):
    negative = phase >= 1 << 31
    x = (phase & 0x7FFFFFFF) >> 16
    half = 1 << 15
    p = x * (half - x)
    y = 16 * p * 32767 // (5 * half * half - 4 * p)
    return -y if negative else y


def synthesize(samples):
    step = lambda hz: (hz << 32) // SAMPLE_RATE
    s1, s2, s3 = step(440), step(660), step(1320)
    p1 = p2 = p3 = 0
    out = []
    for i in range(samples):
        pos = i % 4410
        env = pos if pos < 2205 else 4410 - pos
        mix = tdiv(sine(p1), 2) + tdiv(sine(p2), 3) + tdiv(sine(p3), 6)
        out.append(max(-32768, min(32767, tdiv(mix * env, 2205))))
        p1 = (p1 + s1) & M32
        p2 = (p2 + s2) & M32
        p3 = (p3 + s3) & M32
    return out


def adpcm_encode(pcm):
    predictor, index = 0, 0
    out = bytearray()
    pending = None
    for s in pcm:
        step = STEP_TABLE[index]
        diff = s - predictor
        code = 0
        if diff < 0:
            code, diff = 8, -diff
        threshold = step
        for bit in (4, 2, 1):
            if diff >= threshold:
                code |= bit
                diff -= threshold
            threshold >>= 1
        d = step >> 3
        if code & 4:
            d += step
        if code & 2:
            d += step >> 1
        if code & 1:
            d += step >> 2
        predictor = max(-32768, min(32767, predictor - d if code & 8 else predictor + d))
        index = max(0, min(88, index + INDEX_TABLE[code & 7]))
        if pending is None:
            pending = code
        else:
            out.append(pending | (code << 4))
            pending = None
    if pending is not None:
        out.append(pending)
    return bytes(out)


def fnv1a(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/healthz":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok\n"]
    query = parse_qs(environ.get("QUERY_STRING", ""))
    try:
        ms = int(query.get("ms", ["100"])[0])
        if not 0 <= ms <= 10000:
            raise ValueError
    except ValueError:
        start_response("400 Bad Request", [("Content-Type", "text/plain")])
        return [b"ms must be a whole number from 0 to 10000\n"]
    samples = SAMPLE_RATE * ms // 1000
    encoded = adpcm_encode(synthesize(samples))
    body = ('{"ms":%d,"samples":%d,"encoded_bytes":%d,"checksum":"%016x"}\n' % (
        ms, samples, len(encoded), fnv1a(encoded))).encode()
    start_response("200 OK", [
        ("Content-Type", "application/json"),
        ("Cache-Control", "no-store"),
        ("Content-Length", str(len(body))),
    ])
    return [body]
