# Converts an F5 crash image's pins files (version 1) to version 2 for an A/B of recovery on one
# image: each pinned segment's largest item revision, read from the flash file (docs/FORMATS.md).
# Usage: python3 scripts/flash-pins-v2.py IMG OUT  (OUT gets the v2 pins; copy the rest of IMG).
import struct, sys, glob, os
img, out = sys.argv[1], sys.argv[2]
T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
fl = open(os.path.join(img, "cairn.flash"), "rb")
seg_bytes = struct.unpack_from("<Q", fl.read(4096), 16)[0]
bps = seg_bytes // 4096
cache = {}
def max_rev(seg, seq):
    if seg in cache: return cache[seg]
    fl.seek((1 + seg * bps) * 4096); b = fl.read(seg_bytes)
    magic, ver, segno, hseq, items, used = struct.unpack_from("<8sIIQII", b, 0)
    assert magic == b"CAIRNFSG" and segno == seg and hseq == seq, (seg, seq, segno, hseq)
    m = 0; block = 1
    while block < min(used, bps):
        start = block * 4096; at = 0; nxt = block + 1
        while at + 34 <= 4096:
            ln = struct.unpack_from("<I", b, start + at + 4)[0]
            if ln == 0: break
            m = max(m, struct.unpack_from("<Q", b, start + at + 26)[0])
            if ln > 4096:
                nxt = block + (ln + 4095) // 4096; break
            at += ln
        block = nxt
    cache[seg] = m
    return m
for p in sorted(glob.glob(os.path.join(img, "*.pins"))):
    d = open(p, "rb").read()
    assert d[:8] == b"CAIRNFPN" and struct.unpack_from("<I", d, 8)[0] == 1
    n = struct.unpack_from("<I", d, 12)[0]
    o = bytearray(b"CAIRNFPN" + struct.pack("<II", 2, n))
    past = 0
    lsn = int(os.path.basename(p).split("-")[1].split(".")[0])
    for i in range(n):
        seg, seq = struct.unpack_from("<IQ", d, 16 + 12 * i)
        r = max_rev(seg, seq)
        past += r > lsn
        o += struct.pack("<IQQ", seg, seq, r)
    o += struct.pack("<I", crc32c(bytes(o)))
    open(os.path.join(out, os.path.basename(p)), "wb").write(o)
    print(p, n, "segments;", past, "with items past", lsn)
