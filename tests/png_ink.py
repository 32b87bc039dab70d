#!/usr/bin/env python3
"""Prints "WIDTH HEIGHT LEFT TOP RIGHT BOTTOM" for a PNG: its size and the
box around every pixel that is not the background (the top-left pixel's
colour), so a test can tell whether anything drawn reaches the canvas edge
(a clipped label does). Standard library only: 8-bit RGB/RGBA/grey, no
interlace (what gnuplot's pngcairo writes)."""
import struct
import sys
import zlib


def read_png(path):
    b = open(path, "rb").read()
    if b[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    i, idat = 8, b""
    while i < len(b):
        n, kind = struct.unpack(">I4s", b[i:i + 8])
        data = b[i + 8:i + 8 + n]
        i += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat += data
    if depth != 8 or interlace or ctype not in (0, 2, 4, 6):
        sys.exit(f"{path}: depth {depth}, colour type {ctype}, interlace {interlace} not read here")
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev, p = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[p], bytearray(raw[p + 1:p + 1 + stride])
        p += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            up, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + up) & 255
            elif f == 3:
                line[x] = (line[x] + ((a + up) >> 1)) & 255
            elif f == 4:
                pa, pb, pc = abs(up - c), abs(a - c), abs(a + up - 2 * c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else up if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


w, h, bpp, rows = read_png(sys.argv[1])
bg = rows[0][:bpp]
left, top, right, bottom = w, h, -1, -1
for y, row in enumerate(rows):
    xs = [x for x in range(w) if row[x * bpp:(x + 1) * bpp] != bg]
    if xs:
        left, right = min(left, xs[0]), max(right, xs[-1])
        top, bottom = min(top, y), max(bottom, y)
print(w, h, left, top, right, bottom)
