#!/usr/bin/env python3
"""A bit layout of 8 NVFP4 (e2m1) codes in a 32-bit word that decodes into the 4 bf16 pairs the
tensor-core kernels feed the MMA in 11 integer instructions instead of ~16 (docs/PERFORMANCE.md,
"The ring kernel measured, weights as the MMA's A operand"): three funnel-shift rotations of the
word, then per pair one byte permute (PRMT) and one mask (LOP3). A design for a load-time repack of
the experts' codes, checked here by emulation; not used by the kernels yet.

The kernels decode a code into a bf16 half with the code's bits under the bf16 exponent: sign at bit
15, e1 e0 m at bits 8, 7, 6 (the value times 2^-126; the bias is folded into the group scale). In
bytes: the half's low byte needs (m, e0) at its bits 6, 7 ("low role"), its high byte (e1, sign) at
bits 0, 7 ("high role"). A PRMT picks 4 bytes out of two registers; with R0 = q, R1 = q rotated
right by 1, R2 by 4 and R3 by 5, every byte of R0 and R2 can serve a low role and every byte of R1
and R3 a high role with each bit of q used exactly once (the search below finds the rotations).

  python3 scripts/dev/nvfp4_prmt_layout.py     prints the layout and checks it on random words
"""
import itertools
import random

ROTATIONS = (0, 1, 4, 5)  # R0..R3: q rotated right by these
# Pair i (codes 2i, 2i + 1) is PRMT(Ra, Rb) of the registers below and bytes (lo.low, lo.high,
# hi.low, hi.high) = (Ra byte j, Rb byte j, Ra byte j + 1, Rb byte j + 1).
PAIRS = ((0, 1, 0), (0, 1, 2), (2, 3, 0), (2, 3, 2))  # (a register, b register, first byte j)
MASK = 0x81C081C0  # sign, e1, e0, m of both halves


def rotr(x, s):
    return ((x >> s) | (x << (32 - s))) & 0xFFFFFFFF if s else x


def prmt(a, b, sel):
    src = a | (b << 32)
    return sum(((src >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))


def layout():
    """Where each code's bits (m, e0, e1, sign) lie in the packed word."""
    where = {}
    for i, (ra, rb, j) in enumerate(PAIRS):
        for h in range(2):  # lo, hi half: codes 2i, 2i + 1
            code = 2 * i + h
            low = 8 * (j + h)  # the low-role byte of Ra, the high-role byte of Rb
            m = (low + 6 + ROTATIONS[ra]) % 32
            e0 = (low + 7 + ROTATIONS[ra]) % 32
            e1 = (low + 0 + ROTATIONS[rb]) % 32
            sign = (low + 7 + ROTATIONS[rb]) % 32
            where[code] = (m, e0, e1, sign)
    used = sorted(b for bits in where.values() for b in bits)
    assert used == list(range(32)), f"the layout must use every bit once: {used}"
    return where


def pack(codes, where):
    """codes: 8 e2m1 nibbles (bit 3 sign, bits 2-1 exponent, bit 0 mantissa) -> the packed word."""
    q = 0
    for c, nib in enumerate(codes):
        m, e0, e1, sign = where[c]
        q |= (nib & 1) << m | ((nib >> 1) & 1) << e0 | ((nib >> 2) & 1) << e1 | ((nib >> 3) & 1) << sign
    return q


def decode(q):
    """The kernel's sequence: 3 rotations, then PRMT + LOP3 a pair."""
    regs = [rotr(q, s) for s in ROTATIONS]
    out = []
    for ra, rb, j in PAIRS:
        sel = j | (4 + j) << 4 | (j + 1) << 8 | (4 + j + 1) << 12
        out.append(prmt(regs[ra], regs[rb], sel) & MASK)
    return out


def reference(nib):
    """The bf16 bits of the code's value times 2^-126."""
    return (nib >> 3) << 15 | (nib & 7) << 6


def search():
    """Every set of 3 rotations (with R0 = q) whose bytes split into roles using each bit once."""
    found = []
    for rot in itertools.combinations(range(1, 32), 3):
        s = (0,) + rot
        for roles in itertools.product("LH", repeat=4):  # one role for all of a register's bytes
            bits = []
            for k in range(4):
                for j in range(4):
                    base = 8 * j + s[k]
                    bits += [(base + 6) % 32, (base + 7) % 32] if roles[k] == "L" else [base % 32, (base + 7) % 32]
            if sorted(bits) == list(range(32)) and roles.count("L") == 2:
                found.append((s, "".join(roles)))
    return found


def main():
    where = layout()
    for c in range(8):
        print(f"code {c}: m bit {where[c][0]:2}, e0 {where[c][1]:2}, e1 {where[c][2]:2}, sign {where[c][3]:2}")
    rng = random.Random(1)
    for _ in range(100000):
        codes = [rng.randrange(16) for _ in range(8)]
        got = decode(pack(codes, where))
        for i in range(4):
            want = reference(codes[2 * i]) | reference(codes[2 * i + 1]) << 16
            assert got[i] == want, (codes, i, hex(got[i]), hex(want))
    print("decode(pack(codes)) == the reference bf16 halves on 100000 random words")
    print("rotation sets that work (R0 = q):", search()[:6])


if __name__ == "__main__":
    main()
